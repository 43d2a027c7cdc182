#!/usr/bin/env python3
"""Convert a tiktoken rank file (the Qwen tokenizer package ships these) into a Hugging Face
tokenizer.json + tokenizer_config.json that tokenizes identically.

    tools/tiktoken_to_hf.py RANKS.tiktoken OUT_DIR --flavor qwen|qwen3_5 [--verify CORPUS.json]

tiktoken's algorithm: split with the regex, take a piece whole when it is a token, else merge
byte pairs lowest rank first. In tokenizer.json terms: a Split (Isolated) + ByteLevel
pre-tokenizer, a byte-level BPE with ignore_merges (the "piece is a token" rule), and merges
recovered from the ranks: the merge that builds token T is the last step of running BPE on T's
bytes with only the ranks below T's. --verify encodes a JSON list of strings with both the
`tokenizers` package and tiktoken and fails on any difference.
"""
import argparse
import base64
import json
import sys
import unicodedata
from pathlib import Path

QWEN_PAT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
QWEN3_5_PAT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""

QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + [f"<|extra_{i}|>" for i in range(205)]
QWEN3_5_SPECIAL = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
    "<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>",
    "<tts_text_bos_single>", "<|audio_pad|>",
]
FLAVORS = {"qwen": (QWEN_PAT, QWEN_SPECIAL), "qwen3_5": (QWEN3_5_PAT, QWEN3_5_SPECIAL)}


def bytes_to_unicode():
    """GPT-2's byte alphabet: printable Latin-1 bytes stand for themselves, the rest map to
    U+0100 onwards in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def load_ranks(path):
    ranks = {}
    for line in Path(path).read_bytes().splitlines():
        if line:
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    return ranks


def last_merge(ranks, token, max_rank):
    """Runs rank-ordered BPE on token's bytes with ranks < max_rank; returns the parts."""
    parts = [bytes([b]) for b in token]
    while len(parts) > 1:
        best, best_rank = None, None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < max_rank and (best_rank is None or r < best_rank):
                best, best_rank = i, r
        if best is None:
            break
        parts[best:best + 2] = [parts[best] + parts[best + 1]]
    return parts


def convert(ranks, flavor):
    pat, specials = FLAVORS[flavor]
    b2u = bytes_to_unicode()
    spell = lambda b: "".join(b2u[x] for x in b)
    vocab = {spell(tok): rank for tok, rank in ranks.items()}
    merges = []
    for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(tok) < 2:
            continue
        parts = last_merge(ranks, tok, rank)
        if len(parts) == 2:
            merges.append([spell(parts[0]), spell(parts[1])])
    start = max(ranks.values()) + 1
    added = [{"id": start + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in enumerate(specials)]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pat}, "behavior": "Isolated", "invert": False},
            byte_level,
        ]},
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": vocab, "merges": merges},
    }
    config = {"add_bos_token": False, "add_prefix_space": False, "bos_token": None,
              "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "unk_token": None,
              "errors": "replace", "model_max_length": 131072, "tokenizer_class": "Qwen2Tokenizer",
              "clean_up_tokenization_spaces": False}
    return tokenizer, config


def verify(out_dir, ranks, flavor, corpus):
    import tiktoken
    from tokenizers import Tokenizer
    pat, specials = FLAVORS[flavor]
    start = max(ranks.values()) + 1
    enc = tiktoken.Encoding(f"check-{flavor}", pat_str=pat, mergeable_ranks=ranks,
                            special_tokens={s: start + i for i, s in enumerate(specials)})
    hf = Tokenizer.from_file(str(Path(out_dir) / "tokenizer.json"))
    bad = 0
    for text in corpus:
        want = enc.encode(unicodedata.normalize("NFC", text), allowed_special="all")
        got = hf.encode(text, add_special_tokens=False).ids
        if want != got:
            bad += 1
            if bad <= 5:
                print(f"tiktoken_to_hf: differs on {text!r}:\n  tiktoken   {want}\n  tokenizers {got}", file=sys.stderr)
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ranks")
    ap.add_argument("out_dir")
    ap.add_argument("--flavor", choices=sorted(FLAVORS), required=True)
    ap.add_argument("--verify", metavar="CORPUS.json")
    a = ap.parse_args()
    ranks = load_ranks(a.ranks)
    tokenizer, config = convert(ranks, a.flavor)
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "tokenizer.json.partial"
    tmp.write_text(json.dumps(tokenizer, ensure_ascii=False))
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
    tmp.rename(out / "tokenizer.json")
    if a.verify:
        corpus = json.loads(Path(a.verify).read_text())
        bad = verify(out, ranks, a.flavor, corpus)
        if bad:
            sys.exit(f"tiktoken_to_hf: {bad} of {len(corpus)} strings differ from tiktoken")
        print(f"tiktoken_to_hf: {len(corpus)} strings identical to tiktoken", file=sys.stderr)


if __name__ == "__main__":
    main()
