#!/usr/bin/env python3
"""Encode throughput of saragossa's tokenizer against the Hugging Face `tokenizers` package,
both single-threaded, on the parity corpus (tests/e2e/data/tokenizer_corpus.py) repeated.

    .venv/bin/python bench/tokenizer_bench.py [--repeat 10] [--runs 3] [--only NAME...]

Ours: `saragossa tokenize --batch --time` (encode time only: loading and reading stdin are
excluded). Reference: Tokenizer.encode_batch with TOKENIZERS_PARALLELISM=false (one thread), and a
plain encode() loop; the faster of the two counts. Best of --runs for both. Prints MB/s and the
ratio ours/reference (> 1: we are faster).
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
sys.path.insert(0, str(ROOT / "tests" / "e2e" / "data"))
import test_tokenizer as T  # noqa: E402  (fetches and builds the real tokenizers)


def ours(folder, payload, runs):
    best = None
    for _ in range(runs):
        r = subprocess.run([T.BIN, "tokenize", "--model", str(folder), "--batch", "--no-special", "--time"],
                           input=payload, capture_output=True)
        if r.returncode:
            sys.exit(r.stderr.decode())
        secs = float(r.stderr.decode().split()[1])
        best = secs if best is None else min(best, secs)
    return best


def reference(folder, texts, runs):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    best = None
    for _ in range(runs):
        t0 = time.perf_counter()
        tok.encode_batch(texts, add_special_tokens=False)
        t1 = time.perf_counter()
        for s in texts:
            tok.encode(s, add_special_tokens=False)
        t2 = time.perf_counter()
        secs = min(t1 - t0, t2 - t1)
        best = secs if best is None else min(best, secs)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", nargs="*", help="these tokenizers of tests/e2e/test_tokenizer.py only")
    a = ap.parse_args()
    texts = T.CORPUS * a.repeat
    payload = json.dumps(texts).encode()
    mb = sum(len(s.encode()) for s in texts) / 1e6
    print(f"corpus: {len(texts)} strings, {mb:.2f} MB; single thread; best of {a.runs}")
    print(f"{'tokenizer':<10} {'saragossa MB/s':>15} {'tokenizers MB/s':>16} {'ratio':>7}")
    for name in sorted(T.TOKENIZERS):
        if a.only and name not in a.only:
            continue
        folder = T.TOKENIZERS[name]()
        o = ours(folder, payload, a.runs)
        r = reference(folder, texts, a.runs)
        print(f"{name:<10} {mb / o:>15.2f} {mb / r:>16.2f} {r / o:>6.2f}x")


if __name__ == "__main__":
    main()
