#!/usr/bin/env python3
"""Build the SentencePiece Unigram tokenizer fixtures (tokenizer.json files read by HF `tokenizers`).

    tools/make_unigram_fixtures.py [--out tests/fixtures]

Needs `sentencepiece` (the trainer) and `tokenizers`. Two tokenizers are trained with sentencepiece's own
trainer on the project's tokenizer corpus (tests/e2e/data/tokenizer_corpus.py) and written as the
tokenizer.json that transformers' converters write for such models:

    unigram/     XLM-RoBERTa's layout: sentencepiece's nmt_nfkc normalisation rule as a Precompiled charsmap
                 (the double-array trie blob sentencepiece embeds in its models), then Replace(" {2,}" -> " "),
                 Metaspace (prepend "always"), <s> <pad> </s> <unk> first and <mask> last as fairseq orders
                 them, TemplateProcessing "<s> $A </s>", 2000 pieces, characters below the coverage left
                 to <unk>.
    unigram_bf/  a Llama-like layout: byte fallback (<0x00>..<0xFF>), NFKC, Metaspace (prepend "first", no
                 split), "<s> $A", the ByteFallback/Fuse/Strip decoder, 2600 pieces.

The tests compare our ids and decodes with `tokenizers` on these files at test time (no stored ids).
"""
import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPACE = "\u2581"


def spm_train(text_file, prefix, **kw):
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(input=text_file, model_prefix=prefix, model_type="unigram", minloglevel=2,
                                   seed_sentencepiece_size=200000, num_threads=1, **kw)
    from sentencepiece import sentencepiece_model_pb2 as pb

    m = pb.ModelProto()
    m.ParseFromString(Path(prefix + ".model").read_bytes())
    return m


def added(tid, content):
    return {"id": tid, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}


def template(single, special):
    return {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": s, "type_id": 0}} if s != "$A" else {"Sequence": {"id": "A", "type_id": 0}}
                       for s in single],
            "pair": [{"SpecialToken": {"id": s, "type_id": 0}} if s != "$A" else {"Sequence": {"id": "A", "type_id": 0}}
                     for s in single],
            "special_tokens": {s: {"id": s, "ids": [i], "tokens": [s]} for s, i in special.items()}}


def xlmr_like(m):
    import base64

    vocab = [["<s>", 0.0], ["<pad>", 0.0], ["</s>", 0.0], ["<unk>", 0.0]]
    vocab += [[p.piece, p.score] for p in m.pieces[3:]]
    vocab += [["<mask>", 0.0]]
    charsmap = base64.b64encode(m.normalizer_spec.precompiled_charsmap).decode()
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(0, "<s>"), added(1, "<pad>"), added(2, "</s>"), added(3, "<unk>"),
                         added(len(vocab) - 1, "<mask>")],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Precompiled", "precompiled_charsmap": charsmap},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]},
        "pre_tokenizer": {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "always", "split": True},
        "post_processor": template(["<s>", "$A", "</s>"], {"<s>": 0, "</s>": 2}),
        "decoder": {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "always", "split": True},
        "model": {"type": "Unigram", "unk_id": 3, "vocab": vocab, "byte_fallback": False},
    }


def llama_like(m):
    vocab = [[p.piece, p.score] for p in m.pieces]
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")],
        "normalizer": {"type": "NFKC"},
        "pre_tokenizer": {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "first", "split": False},
        "post_processor": template(["<s>", "$A"], {"<s>": 1}),
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SPACE}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "Unigram", "unk_id": 0, "vocab": vocab, "byte_fallback": True},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "tests" / "fixtures"))
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "tests" / "e2e" / "data"))
    from tokenizer_corpus import corpus
    from tokenizers import Tokenizer

    texts = corpus()
    with tempfile.TemporaryDirectory() as tmp:
        train = os.path.join(tmp, "train.txt")
        Path(train).write_text("\n".join(t.replace("\n", " ").replace("\r", " ") for t in texts), encoding="utf-8")
        a = spm_train(train, os.path.join(tmp, "a"), vocab_size=2000, normalization_rule_name="nmt_nfkc",
                      character_coverage=0.98)
        b = spm_train(train, os.path.join(tmp, "b"), vocab_size=2600, normalization_rule_name="identity",
                      character_coverage=0.98, byte_fallback=True)
    for name, spec in (("unigram", xlmr_like(a)), ("unigram_bf", llama_like(b))):
        d = Path(args.out) / name
        d.mkdir(parents=True, exist_ok=True)
        text = json.dumps(spec, ensure_ascii=False, indent=None)
        Tokenizer.from_str(text)  # the reference must read it
        (d / "tokenizer.json").write_text(text + "\n", encoding="utf-8")
        print(f"{name}: {len(spec['model']['vocab'])} pieces, {len(text)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
