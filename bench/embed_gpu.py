#!/usr/bin/env python3
"""Sentence embeddings on a GPU: saragossa (bench/embed_bench.c, CUDA backend) beside
sentence-transformers on CUDA, same model, same sentences, same machine, one run.

No real weights travel to the GPU machine: the models are random BertModel weights at real shapes
(all-MiniLM-L6-v2: 384 wide, 6 layers; bge-base / all-MiniLM's big sibling: 768 wide, 12 layers;
MPNetModel at all-mpnet-base-v2's shape, with its relative position bias),
saved as sentence-transformers folders (mean pooling, Normalize) with all-MiniLM-L6-v2's tokenizer
(BERT's uncased WordPiece vocabulary). Both engines embed the same 512 sentences of 6 to 60 words:
one sentence per call (batch 1, latency) and 64 per call (throughput), float32, best of 3 rounds
after a warm-up. The report gives sentences per second, the ratio, and the cosine between the two
engines' vectors of every sentence (the CUDA path's correctness on a real vocabulary).

    python bench/embed_gpu.py --bin build/bench/embed_bench --tokenizer DIR [--shapes minilm,base]
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

SHAPES = {"minilm": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536),
          "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
          # all-mpnet-base-v2's shape: MPNet's relative position bias in every layer's attention
          "mpnet": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)}
WORDS = ("the a man woman child dog cat eats food runs quickly across green field under bright sun while rain "
         "falls over quiet city streets tonight and music plays softly in an old house near river bank people "
         "talk about science history art travel weather markets software engines models data").split()


def sentences(n=512, seed=7):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 60))).capitalize() + "." for _ in range(n)]


def make_folder(dest, shape, tok_dir):
    import torch
    from transformers import BertConfig, BertModel, MPNetConfig, MPNetModel
    torch.manual_seed(0)
    if shape == "mpnet":
        cfg = MPNetConfig(vocab_size=30527, max_position_embeddings=514, hidden_act="gelu", layer_norm_eps=1e-5,
                          relative_attention_num_buckets=32, pad_token_id=1, **SHAPES[shape])
        model = MPNetModel(cfg, add_pooling_layer=False).eval()
    else:
        cfg = BertConfig(vocab_size=30522, max_position_embeddings=512, type_vocab_size=2, hidden_act="gelu",
                         layer_norm_eps=1e-12, **SHAPES[shape])
        model = BertModel(cfg, add_pooling_layer=False).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.05)
    model.save_pretrained(dest, safe_serialization=True)
    for f in Path(tok_dir).iterdir():
        if f.name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
            shutil.copy(f, Path(dest) / f.name)
    (Path(dest) / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]))
    (Path(dest) / "1_Pooling").mkdir(exist_ok=True)
    (Path(dest) / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": SHAPES[shape]["hidden_size"], "pooling_mode_mean_tokens": True}))
    (Path(dest) / "2_Normalize").mkdir(exist_ok=True)
    (Path(dest) / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 256, "do_lower_case": False}))


class PlainST:
    """sentence-transformers' encode (tokenize with padding and truncation to max_seq_length, the model,
    mean over the mask, L2 normalisation) in plain transformers, where the package is not installed."""

    def __init__(self, folder):
        import torch
        from transformers import AutoModel, AutoTokenizer
        self.tok = AutoTokenizer.from_pretrained(str(folder))
        self.model = AutoModel.from_pretrained(str(folder), dtype=torch.float32).cuda().eval()

    def encode(self, texts, batch_size=32, convert_to_numpy=True):
        import torch
        out = []
        with torch.inference_mode():
            for i in range(0, len(texts), batch_size):
                enc = self.tok(texts[i:i + batch_size], padding=True, truncation=True, max_length=256, return_tensors="pt",
                               return_token_type_ids=self.model.config.model_type == "bert")
                enc = {k: v.cuda() for k, v in enc.items()}
                h = self.model(**enc).last_hidden_state
                m = enc["attention_mask"].unsqueeze(-1).float()
                e = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1).clamp(min=1e-9), dim=1)
                out.append(e.cpu().numpy())
        return np.concatenate(out)


def torch_side(folder, texts, rounds):
    import torch
    try:
        from sentence_transformers import SentenceTransformer
        m = SentenceTransformer(str(folder), device="cuda")
    except ImportError:
        print("  (sentence-transformers is not installed here: its encode is done in plain transformers)")
        m = PlainST(folder)
    m.encode(texts[:64], batch_size=64)
    best1 = best64 = 1e30
    for _ in range(rounds):
        torch.cuda.synchronize()
        a = time.perf_counter()
        for t in texts:
            m.encode([t], batch_size=1, convert_to_numpy=True)
        torch.cuda.synchronize()
        b = time.perf_counter()
        v = m.encode(texts, batch_size=64, convert_to_numpy=True)
        torch.cuda.synchronize()
        c = time.perf_counter()
        best1, best64 = min(best1, b - a), min(best64, c - b)
    return len(texts) / best1, len(texts) / best64, v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--shapes", default="minilm,base,mpnet")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", help="folder for the models and sentences (kept; default: a new temporary one)")
    args = ap.parse_args()
    import torch
    texts = sentences()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="embed-gpu-"))
    work.mkdir(parents=True, exist_ok=True)
    (work / "s.txt").write_text("\n".join(texts) + "\n")
    print(f"device: {torch.cuda.get_device_name(0)}; {len(texts)} sentences of 6-60 words; float32; best of {args.rounds}")
    print("| shape | engine | batch 1 (sent/s) | batch 64 (sent/s) |")
    print("|---|---|---:|---:|")
    for shape in args.shapes.split(","):
        folder = work / shape
        make_folder(folder, shape, args.tokenizer)
        out = work / f"{shape}.f32"
        r = subprocess.run([args.bin, str(folder), str(work / "s.txt"), "cuda", "64", str(args.rounds), str(out)],
                           capture_output=True, text=True)
        if r.returncode:
            print(f"| {shape} | saragossa | failed: {r.stderr.strip()[:200]} | |")
            continue
        kv = dict(line.split() for line in r.stdout.split("\n") if line.strip())
        ours1, ours64 = float(kv["batch1_sent_per_s"]), float(kv["batch64_sent_per_s"])
        t1, t64, ref = torch_side(folder, texts, args.rounds)
        mine = np.fromfile(out, dtype=np.float32).reshape(len(texts), -1)
        cos = (mine * ref).sum(1) / np.linalg.norm(mine, axis=1) / np.linalg.norm(ref, axis=1)
        print(f"| {shape} | saragossa (CUDA) | {ours1:.1f} | {ours64:.1f} |")
        print(f"| {shape} | sentence-transformers (torch CUDA) | {t1:.1f} | {t64:.1f} |")
        print(f"| {shape} | ratio | {ours1 / t1:.2f}x | {ours64 / t64:.2f}x |")
        print(f"  {shape}: cosine to sentence-transformers min {cos.min():.7f}, mean {cos.mean():.7f}; load {kv['load_s']} s")


if __name__ == "__main__":
    main()
