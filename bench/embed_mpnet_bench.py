#!/usr/bin/env python3
"""Sentence embeddings, batch 1: saragossa `embed` vs sentence-transformers on PyTorch (CPU), side by side.

    PYTHON_WITH_TORCH bench/embed_mpnet_bench.py [MODEL_FOLDER] [--rounds N] [--threads T]

The texts are the short sentences of tests/fixtures/st_refs/all-mpnet-base-v2.json (55, many scripts).
sentence-transformers encodes them one at a time (batch_size=1, torch.set_num_threads(T)); saragossa embeds
them in one `embed` call (packed batches inside; one input at a time when bench/RESULTS.md's MPNet figures
were taken), and its per-sentence cost is the difference between that call and a one-sentence call (so the model load is excluded). Rounds alternate the two so both see the
same load. Wall and CPU time (getrusage of the child for ours, process_time for torch) are reported: on a
shared machine the CPU-time figures are the steadier comparison. Needs torch and sentence-transformers
(not part of the test environment).
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def ours(binary, model, texts, threads):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run([binary, "embed", "-m", model, "--threads", str(threads)] + texts, capture_output=True)
    wall = time.perf_counter() - t
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode:
        sys.exit(r.stderr.decode()[-500:])
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", nargs="?", default=str(Path.home() / ".cache" / "saragossa" / "models" / "all-mpnet-base-v2"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(args.threads)
    texts = json.loads((ROOT / "tests" / "fixtures" / "st_refs" / "all-mpnet-base-v2.json").read_text())["texts"][:55]
    binary = os.environ.get("SARAGOSSA_BIN") or str(ROOT / "build" / "saragossa")
    st = SentenceTransformer(args.model, device="cpu")
    st.encode(texts[:4], batch_size=1)
    res = {"st_wall": [], "st_cpu": [], "sg_wall": [], "sg_cpu": []}
    for _ in range(args.rounds):
        t, c = time.perf_counter(), time.process_time()
        for s in texts:
            st.encode([s], batch_size=1)
        res["st_wall"].append((time.perf_counter() - t) / len(texts))
        res["st_cpu"].append((time.process_time() - c) / len(texts))
        w1, c1 = ours(binary, args.model, texts[:1], args.threads)
        wn, cn = ours(binary, args.model, texts, args.threads)
        res["sg_wall"].append((wn - w1) / (len(texts) - 1))
        res["sg_cpu"].append((cn - c1) / (len(texts) - 1))
        print(f"round: torch {res['st_wall'][-1] * 1e3:.1f} ms wall / {res['st_cpu'][-1] * 1e3:.1f} ms cpu, "
              f"saragossa {res['sg_wall'][-1] * 1e3:.1f} ms wall / {res['sg_cpu'][-1] * 1e3:.1f} ms cpu per sentence; "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
    best = {k: min(v) for k, v in res.items()}
    print(f"best: sentence-transformers {1 / best['st_wall']:.2f} sentences/s wall ({best['st_cpu'] * 1e3:.1f} ms cpu each), "
          f"saragossa {1 / best['sg_wall']:.2f} sentences/s wall ({best['sg_cpu'] * 1e3:.1f} ms cpu each); "
          f"ratio {best['st_wall'] / best['sg_wall']:.2f}x wall, {best['st_cpu'] / best['sg_cpu']:.2f}x cpu; "
          f"torch {torch.__version__}, {args.threads} threads")


if __name__ == "__main__":
    main()
