#!/usr/bin/env python3
"""Build tests/fixtures/cross_encoder: a tiny random BERT cross-encoder and its reference scores.

Runs where torch, transformers, tokenizers and sentence-transformers are installed (a CPU install is
enough). The model is BertForSequenceClassification with one label (ms-marco-MiniLM's head: pooler,
dropout, one linear), seeded random weights rounded to bf16 and stored as bf16 (exact), and a small
WordPiece tokenizer (BERT normaliser and pre-tokeniser, the pair template [CLS] $A [SEP] $B:1 [SEP]:1).
The reference is sentence-transformers' CrossEncoder.predict on the stored files, in float32:

    ref.safetensors  scores float32 [n], logits float32 [n] (as in ref.json, for the fixture checks)
    ref.json  {"query", "documents", "scores" (CrossEncoder.predict: sigmoid of the logit, its default
               for one label), "logits" (the raw logits), "input_ids" and "token_type_ids" of each pair
               as the tokenizer encodes it, versions}

and its entry in tests/fixtures/MANIFEST.json (sha256 of every file) when that file exists.

With --xlmr it builds tests/fixtures/cross_encoder_xlmr instead: XLMRobertaForSequenceClassification
(bge-reranker's architecture: RoBERTa positions from pad_token_id + 1, one token type, the two-layer
classification head classifier.dense + tanh + classifier.out_proj on <s>) with the same words in a
WordPiece vocabulary under XLM-R's special tokens and its pair template <s> $A </s> </s> $B </s>
(every token type 0).

Usage: python tools/make_rerank_fixture.py [--xlmr] [OUT_DIR]
"""
import json
import sys
from pathlib import Path

import torch
import transformers
import sentence_transformers
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

XLMR = "--xlmr" in sys.argv
ARGS = [a for a in sys.argv[1:] if a != "--xlmr"]
OUT = Path(ARGS[0]) if ARGS else (Path(__file__).resolve().parent.parent / "tests" / "fixtures" /
                                  ("cross_encoder_xlmr" if XLMR else "cross_encoder"))
WORDS = """the a of to and in is it for on with as was at by an be this that from or are
what how why when where who which paris france capital city river london england germany berlin
cat cats dog dogs animal animals pet pets sleep sleeps food eat eats water drink weather rain
sun sunny cold hot day night machine learning model models neural network data train search
engine query document rank ranking relevant answer question book books read library music
song play game football team win score""".split()
QUERY = "what is the capital of france"
DOCS = [
    "Paris is the capital city of France.",
    "London is the capital of England.",
    "Cats sleep most of the day.",
    "The river in Paris is the Seine.",
    "Neural ranking models score a query and a document together.",
    "",
    "Football team wins the game!",
    "zzqx unknownword",
]


def xlmr_tokenizer():
    """The fixture's words as a WordPiece vocabulary under XLM-R's special tokens and pair template."""
    from tokenizers import decoders
    from transformers import PreTrainedTokenizerFast
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    chars = list("abcdefghijklmnopqrstuvwxyz0123456789.,!?'-")
    vocab = list(dict.fromkeys(specials + chars + ["##" + c for c in "abcdefghijklmnopqrstuvwxyz"] + WORDS))
    ids = {t: i for i, t in enumerate(vocab)}
    tok = Tokenizer(models.WordPiece(ids, unk_token="<unk>", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", ids["<s>"]), ("</s>", ids["</s>"])])
    tok.decoder = decoders.WordPiece(prefix="##")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   sep_token="</s>", pad_token="<pad>", cls_token="<s>", mask_token="<mask>",
                                   model_max_length=64)
    return fast, vocab


def main():
    torch.manual_seed(40)
    if XLMR:
        return main_xlmr()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = list("abcdefghijklmnopqrstuvwxyz0123456789.,!?'-")
    vocab = specials + chars + ["##" + c for c in "abcdefghijklmnopqrstuvwxyz"] + WORDS
    vocab = list(dict.fromkeys(vocab))
    ids = {t: i for i, t in enumerate(vocab)}
    tok = Tokenizer(models.WordPiece(ids, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])])
    from tokenizers import decoders
    tok.decoder = decoders.WordPiece(prefix="##")
    OUT.mkdir(parents=True, exist_ok=True)
    fast = BertTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]",
                                   cls_token="[CLS]", mask_token="[MASK]", model_max_length=64)
    fast.save_pretrained(OUT)

    cfg = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=64, type_vocab_size=2, num_labels=1,
                     hidden_act="gelu", layer_norm_eps=1e-12)
    model = BertForSequenceClassification(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_((torch.randn_like(p) * 0.5).to(torch.bfloat16).to(torch.float32))
        # a wider head: scores spread over (0, 1) rather than all near one value
        model.classifier.weight.copy_((torch.randn_like(model.classifier.weight) * 0.35).to(torch.bfloat16).float())
        model.classifier.bias.fill_(0.125)
    # the reference runs in float32 on a float32 copy (same values); the fixture stores bf16
    import tempfile
    tmp = Path(tempfile.mkdtemp(prefix="ce-f32-"))
    model.save_pretrained(tmp, safe_serialization=True)
    fast.save_pretrained(tmp)
    model.to(torch.bfloat16).save_pretrained(OUT, safe_serialization=True)
    model.to(torch.float32)

    ce = sentence_transformers.CrossEncoder(str(tmp), device="cpu")
    pairs = [(QUERY, d) for d in DOCS]
    scores = ce.predict(pairs, convert_to_numpy=True)
    enc = fast([QUERY] * len(DOCS), DOCS, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits[:, 0]
    # as a batch of pairs, the way CrossEncoder encodes them (a lone call takes an empty second text
    # for no pair and leaves out the closing [SEP])
    per = [{k: v[0] for k, v in fast([QUERY], [d]).items()} for d in DOCS]
    ref = {
        "query": QUERY,
        "documents": DOCS,
        "scores": [float(s) for s in scores],
        "logits": [float(x) for x in logits],
        "input_ids": [p["input_ids"] for p in per],
        "token_type_ids": [p["token_type_ids"] for p in per],
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "sentence_transformers": sentence_transformers.__version__},
    }
    (OUT / "ref.json").write_text(json.dumps(ref, indent=1) + "\n")
    from safetensors.torch import save_file
    save_file({"scores": torch.tensor(ref["scores"], dtype=torch.float32), "logits": logits.to(torch.float32).contiguous()},
              str(OUT / "ref.safetensors"), metadata={"seed": "40", "query": QUERY})
    manifest = OUT.parent / "MANIFEST.json"
    if manifest.exists():
        import hashlib
        m = json.loads(manifest.read_text())
        m[OUT.name] = {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(OUT.iterdir()) if f.is_file()}
        manifest.write_text(json.dumps(m, indent=2, sort_keys=True) + "\n")
    print("wrote", OUT, "scores", ref["scores"])


def main_xlmr():
    from transformers import XLMRobertaConfig, XLMRobertaForSequenceClassification
    fast, vocab = xlmr_tokenizer()
    OUT.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(OUT)
    cfg = XLMRobertaConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=64, max_position_embeddings=66, type_vocab_size=1, num_labels=1,
                           pad_token_id=1, bos_token_id=0, eos_token_id=2, hidden_act="gelu", layer_norm_eps=1e-5)
    model = XLMRobertaForSequenceClassification(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_((torch.randn_like(p) * 0.5).to(torch.bfloat16).to(torch.float32))
        # the head scaled and centred on these pairs, so the scores spread over (0, 1)
        model.classifier.out_proj.bias.zero_()
        enc = fast([QUERY] * len(DOCS), DOCS, padding=True, return_tensors="pt")
        raw = model(**enc).logits[:, 0]
        scale = 1.5 / float(raw.std())
        model.classifier.out_proj.weight.mul_(scale)
        model.classifier.out_proj.weight.copy_(model.classifier.out_proj.weight.to(torch.bfloat16).float())
        model.classifier.out_proj.bias.fill_(round(-float(raw.mean()) * scale, 2))
        model.classifier.out_proj.bias.copy_(model.classifier.out_proj.bias.to(torch.bfloat16).float())
    import tempfile
    tmp = Path(tempfile.mkdtemp(prefix="ce-xlmr-f32-"))
    model.save_pretrained(tmp, safe_serialization=True)
    fast.save_pretrained(tmp)
    model.to(torch.bfloat16).save_pretrained(OUT, safe_serialization=True)
    model.to(torch.float32)
    ce = sentence_transformers.CrossEncoder(str(tmp), device="cpu")
    scores = ce.predict([(QUERY, d) for d in DOCS], convert_to_numpy=True)
    per = [{k: v[0] for k, v in fast([QUERY], [d]).items()} for d in DOCS]
    enc = fast([QUERY] * len(DOCS), DOCS, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits[:, 0]
    ref = {
        "query": QUERY, "documents": DOCS, "scores": [float(x) for x in scores], "logits": [float(x) for x in logits],
        "input_ids": [p["input_ids"] for p in per],
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "sentence_transformers": sentence_transformers.__version__},
    }
    (OUT / "ref.json").write_text(json.dumps(ref, indent=1) + "\n")
    from safetensors.torch import save_file
    save_file({"scores": torch.tensor(ref["scores"], dtype=torch.float32), "logits": logits.to(torch.float32).contiguous()},
              str(OUT / "ref.safetensors"), metadata={"seed": "40", "query": QUERY})
    manifest = OUT.parent / "MANIFEST.json"
    if manifest.exists():
        import hashlib
        m = json.loads(manifest.read_text())
        m[OUT.name] = {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(OUT.iterdir()) if f.is_file()}
        manifest.write_text(json.dumps(m, indent=2, sort_keys=True) + "\n")
    print("wrote", OUT, "scores", ref["scores"])


if __name__ == "__main__":
    main()
