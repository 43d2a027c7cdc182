#!/usr/bin/env python3
"""Build tests/fixtures/embeddinggemma: a tiny random EmbeddingGemma-shaped sentence-transformers folder.

Runs where torch, transformers (5.x), tokenizers and sentence-transformers are installed (a CPU install
is enough). No EmbeddingGemma weights are used: the folder has google/embeddinggemma-300m's layout at
small widths, with random weights rounded to bf16 (so the file holds them exactly):

    config.json, model.safetensors   Gemma3TextModel ("gemma3_text", use_bidirectional_attention true):
                                     3 layers (sliding, full, sliding), sliding_window 8 in the file, which
                                     transformers turns into 8 // 2 + 1 = 5: a sliding layer's token sees
                                     the keys less than 5 positions away on either side; full layers see
                                     every token. The test sentences are longer than that.
    tokenizer.json ...               a Gemma-format tokenizer trained here on a small corpus: SentencePiece
                                     BPE with byte fallback, " " -> "\u2581", <pad> 0, <eos> 1, <bos> 2,
                                     <unk> 3, <0x00>..<0xFF> 4..259, "<bos> text <eos>"; right padding
    modules.json, 1_Pooling          mean pooling
    2_Dense, 3_Dense                 64 -> 128 -> 64, no bias, identity activation
    4_Normalize
    config_sentence_transformers.json  EmbeddingGemma's prompt texts ("query", "document", ...)

and the reference, SentenceTransformer(folder).encode in float32 on the CPU:

    ref.safetensors  float32 [n_sentences][64]: "alone" (each sentence encoded by itself), "batch" (all
                     in one batch, right-padded), "prompted" (all with prompt_name "query"),
                     "prompted_exclude" (the same with include_prompt false in the Pooling config)
    ref.json         {"sentences", "ids" (each sentence's token ids), "prompt_name", "prompt_ids" (the
                     prompt and each sentence as one string), "sliding_window_effective", versions}

and the folder's entry in tests/fixtures/MANIFEST.json (sha256 of every file).

Usage: python tools/make_embeddinggemma_fixture.py
"""
import json
import shutil
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "embeddinggemma"

# EmbeddingGemma's prompts (its config_sentence_transformers.json)
PROMPTS = {
    "query": "task: search result | query: ",
    "document": "title: none | text: ",
    "BitextMining": "task: search result | query: ",
    "Clustering": "task: clustering | query: ",
    "Classification": "task: classification | query: ",
    "InstructionRetrieval": "task: code retrieval | query: ",
    "MultilabelClassification": "task: classification | query: ",
    "PairClassification": "task: sentence similarity | query: ",
    "Reranking": "task: search result | query: ",
    "Retrieval": "task: search result | query: ",
    "Retrieval-query": "task: search result | query: ",
    "Retrieval-document": "title: none | text: ",
    "STS": "task: sentence similarity | query: ",
    "Summarization": "task: summarization | query: ",
}
SENTENCES = [
    "Hi",
    "A man is eating food.",
    "The girl is carrying a baby.",
    "What is the capital of France? Paris is the capital city of France.",
    "The quick brown fox jumps over the lazy dog 3 times in 2.5 seconds.",
    "Neural ranking models score a query and a document together, token by token.",
    "Le chat dort sur le canap\u00e9 depuis ce matin.",
    "Der schnelle braune Fuchs springt \u00fcber den faulen Hund.",
    "\u732b\u304c\u597d\u304d\u3067\u3059\u3002",
    "task: search result | query: how do embeddings work? They map text to vectors so that similar "
    "sentences land close together, and a retriever ranks documents by cosine similarity.",
    "zzqx unknownword 42 \U0001f600",
]
CORPUS = [
    "task: search result | query: title: none | text: task: clustering | classification | sentence similarity",
    "A man is eating food. A man is eating a piece of bread. The girl is carrying a baby.",
    "What is the capital of France? Paris is the capital city of France. London is the capital of England.",
    "The quick brown fox jumps over the lazy dog. Neural ranking models score a query and a document.",
    "how do embeddings work? They map text to vectors so that similar sentences land close together.",
    "Le chat dort sur le canap\u00e9. Der schnelle braune Fuchs springt.",
]
HIDDEN, INTER, HEADS, KV_HEADS, HEAD_DIM = 64, 96, 4, 2, 16
DENSE = 128
WINDOW = 8  # in the file; transformers makes it 8 // 2 + 1 = 5 with bidirectional attention


def gemma_tokenizer(path):
    """A Gemma-format tokenizer.json: the byte tokens are ordinary vocabulary entries (byte fallback),
    the four special tokens come first, as in Gemma's vocabulary."""
    from tokenizers import Tokenizer, decoders, models, normalizers, processors, trainers, pre_tokenizers

    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    # training only: merges stay inside words (Gemma's never cross a space either)
    tok.pre_tokenizer = pre_tokenizers.Split("\u2581", "merged_with_next")
    trainer = trainers.BpeTrainer(vocab_size=420, special_tokens=specials + byte_tokens, show_progress=False,
                                  limit_alphabet=80)
    tok.train_from_iterator(CORPUS * 20, trainer)
    j = json.loads(tok.to_str())
    # the byte tokens are vocabulary, not added tokens; no pre-tokenizer (as Gemma's tokenizer.json)
    j["added_tokens"] = [a for a in j["added_tokens"] if a["content"] in specials]
    j["pre_tokenizer"] = None
    j["model"]["byte_fallback"] = True
    j["model"]["fuse_unk"] = True
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"}]}
    tok = Tokenizer.from_str(json.dumps(j))
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A <eos>", pair="<bos> $A <eos> $B <eos>",
                                                       special_tokens=[("<bos>", 2), ("<eos>", 1)])
    for i, s in enumerate(specials):
        assert tok.token_to_id(s) == i, s
    assert tok.token_to_id("<0x00>") == 4 and tok.token_to_id("<0xFF>") == 259
    from transformers import PreTrainedTokenizerFast
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                                   unk_token="<unk>", padding_side="right", model_max_length=128)
    fast.save_pretrained(path)
    return fast, tok.get_vocab_size()


def main():
    import torch
    import transformers
    import sentence_transformers
    from safetensors.torch import load_file, save_file
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules.dense import Dense
    from sentence_transformers.base.modules.normalize import Normalize
    from sentence_transformers.base.modules.transformer import Transformer
    from sentence_transformers.sentence_transformer.modules.pooling import Pooling
    from transformers import Gemma3TextConfig, Gemma3TextModel

    torch.manual_seed(1234)
    tmp = Path(tempfile.mkdtemp())
    hf = tmp / "hf"
    fast, vocab = gemma_tokenizer(hf)
    cfg = Gemma3TextConfig(
        vocab_size=vocab, hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=3,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, query_pre_attn_scalar=24,
        max_position_embeddings=128, sliding_window=WINDOW,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
        use_bidirectional_attention=True, hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6,
        pad_token_id=0, eos_token_id=1, bos_token_id=2, attn_implementation="eager")
    assert cfg.sliding_window == WINDOW // 2 + 1
    model = Gemma3TextModel(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            # random norms too (Gemma's are stored as w and applied as 1 + w), larger than init
            scale = 0.3 if "norm" in name else (0.5 if "embed" in name else 0.15)
            p.copy_((torch.randn_like(p) * scale).to(torch.bfloat16).to(torch.float32))
    model.config.architectures = ["Gemma3TextModel"]
    model.to(torch.bfloat16).save_pretrained(hf)
    model.to(torch.float32)

    tr = Transformer(str(hf), max_seq_length=128, model_kwargs={"attn_implementation": "eager",
                                                                 "dtype": torch.float32})
    pool = Pooling(HIDDEN, pooling_mode="mean")
    d1 = Dense(HIDDEN, DENSE, bias=False, activation_function=torch.nn.Identity())
    d2 = Dense(DENSE, HIDDEN, bias=False, activation_function=torch.nn.Identity())
    with torch.no_grad():
        for d in (d1, d2):
            w = d.linear.weight
            w.copy_((torch.randn_like(w) / w.shape[1] ** 0.5).to(torch.bfloat16).to(torch.float32))
    st = SentenceTransformer(modules=[tr, pool, d1, d2, Normalize()], prompts=PROMPTS, default_prompt_name=None,
                             similarity_fn_name="cosine", device="cpu")
    if OUT.exists():
        shutil.rmtree(OUT)
    st.save(str(OUT))
    # every weight as bf16 (their values are bf16 already: the files halve, nothing changes)
    for sub in ("", "2_Dense", "3_Dense"):
        f = OUT / sub / "model.safetensors"
        save_file({k: v.to(torch.bfloat16) for k, v in load_file(str(f)).items()}, str(f))
    for f in ("README.md",):
        (OUT / f).unlink(missing_ok=True)

    ref_model = SentenceTransformer(str(OUT), device="cpu", model_kwargs={"attn_implementation": "eager",
                                                                          "dtype": torch.float32})
    assert ref_model[0].auto_model.config.use_bidirectional_attention
    assert ref_model[0].auto_model.config.sliding_window == WINDOW // 2 + 1
    ids = [fast(s)["input_ids"] for s in SENTENCES]
    assert all(i[0] == 2 and i[-1] == 1 for i in ids)
    assert max(len(i) for i in ids) > 2 * cfg.sliding_window and min(len(i) for i in ids) <= 4
    alone = [ref_model.encode([s], batch_size=1, convert_to_numpy=True)[0].tolist() for s in SENTENCES]
    batch = ref_model.encode(SENTENCES, batch_size=len(SENTENCES), convert_to_numpy=True).tolist()
    import numpy as np
    diff = float(np.abs(np.array(alone) - np.array(batch)).max())
    assert diff < 1e-5, f"the reference itself differs alone and in a batch by {diff}"
    pname = "query"
    prompted = ref_model.encode(SENTENCES, prompt_name=pname, batch_size=len(SENTENCES), convert_to_numpy=True).tolist()
    prompt_ids = [fast(PROMPTS[pname] + s)["input_ids"] for s in SENTENCES]
    # the same with include_prompt false in the Pooling config: the prompt's tokens out of the mean
    excl = tmp / "exclude"
    shutil.copytree(OUT, excl)
    pc = json.loads((excl / "1_Pooling" / "config.json").read_text())
    (excl / "1_Pooling" / "config.json").write_text(json.dumps({**pc, "include_prompt": False}))
    ex_model = SentenceTransformer(str(excl), device="cpu", model_kwargs={"attn_implementation": "eager",
                                                                          "dtype": torch.float32})
    prompted_excl = ex_model.encode(SENTENCES, prompt_name=pname, batch_size=len(SENTENCES),
                                    convert_to_numpy=True).tolist()
    assert float(np.abs(np.array(prompted_excl) - np.array(prompted)).max()) > 1e-2
    # the window matters: the sliding layers' states move when it covers every token
    lm = Gemma3TextModel.from_pretrained(str(OUT), dtype=torch.float32, attn_implementation="eager").eval()
    x = torch.tensor([ids[-2]])
    with torch.no_grad():
        h = lm(input_ids=x).last_hidden_state
        lm.config.sliding_window = 1000
        h_wide = lm(input_ids=x).last_hidden_state
    assert float((h - h_wide).abs().max()) > 1e-2, "the sliding window changes nothing on the longest sentence"
    ref = {
        "sentences": SENTENCES, "ids": ids, "alone_vs_batch_max_abs": diff,
        "prompt_name": pname, "prompt_ids": prompt_ids, "sliding_window_effective": cfg.sliding_window,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "sentence_transformers": sentence_transformers.__version__},
    }
    (OUT / "ref.json").write_text(json.dumps(ref, indent=1) + "\n")
    save_file({k: torch.tensor(v, dtype=torch.float32) for k, v in
               (("alone", alone), ("batch", batch), ("prompted", prompted), ("prompted_exclude", prompted_excl))},
              str(OUT / "ref.safetensors"))
    for f in OUT.rglob("*"):
        if f.is_file():
            f.chmod(0o644)
    manifest = OUT.parent / "MANIFEST.json"
    if manifest.exists():
        import hashlib
        m = json.loads(manifest.read_text())
        m[OUT.name] = {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(OUT.iterdir()) if f.is_file()}
        manifest.write_text(json.dumps(m, indent=2, sort_keys=True) + "\n")
    shutil.rmtree(tmp)
    total = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file())
    print(f"{OUT}: {total} bytes; lengths {[len(i) for i in ids]}; alone vs batch {diff:.2e}")


if __name__ == "__main__":
    main()
