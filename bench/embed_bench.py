#!/usr/bin/env python3
"""Sentences per second of text embedding, batch 1 (latency) and batch 64 (throughput), side by side:

  saragossa          libsaragossa's sg_embed_texts (through ctypes, in this process), CPU backend
  sentence-transformers  SentenceTransformer.encode on PyTorch CPU (batch_size 1 / 64)
  llama.cpp          llama-embedding on a GGUF of the same model (F32, mean pooling, normalised), one process
                     per sentence for batch 1 and one process of 64 sentences (one decode) for batch 64;
                     the time of its decode from its own log timestamps, so start-up, model load and
                     warm-up are not counted

Same model (all-MiniLM-L6-v2, F32 weights in all three), same sentences (SENTENCES below: 64 of 6 to 60
tokens), same thread count. The engines run in interleaved rounds (saragossa, torch, llama.cpp, then
again), because the machine is shared: the report gives each engine's best round and the ratios, in
sentences per second of wall time and per CPU-second of the engine's process (steadier when other work
competes for the cores; llama.cpp's CPU time includes its start and load, so its figure is a lower bound).

Run with a Python that has torch and sentence-transformers (the reference environment):

  PY=/path/to/python-with-torch
  $PY bench/embed_bench.py --model ~/.cache/saragossa/models/all-MiniLM-L6-v2 \
      [--gguf minilm-f32.gguf --llama-embedding path/to/llama-embedding] [--threads 2] [--rounds 3]

The GGUF: llama.cpp's convert_hf_to_gguf.py MODEL --outtype f32. Nothing here is committed but the script.
"""
import argparse
import ctypes
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WORDS = ("the a man woman child dog cat eats food runs quickly across green field under bright sun while "
         "rain falls over quiet city streets tonight and music plays softly in an old house near river bank "
         "people talk about science history art travel weather markets software engines models data").split()


def sentences(n=64):
    out, x = [], 12345
    for i in range(n):
        k = 4 + (i * 13) % 45  # 4..48 words
        words = []
        for _ in range(k):
            x = (x * 1103515245 + 12345) % (1 << 31)
            words.append(WORDS[(x >> 8) % len(WORDS)])
        out.append(" ".join(words).capitalize() + ".")
    return out


SENTENCES = sentences()


class SgEmbedParams(ctypes.Structure):
    _fields_ = [("backend", ctypes.c_char_p), ("n_threads", ctypes.c_int)]


def run_saragossa(model, threads, batch):
    lib = ctypes.CDLL(str(ROOT / "build" / "libsaragossa.so"))
    lib.sg_embed_load.argtypes = [ctypes.c_char_p, ctypes.POINTER(SgEmbedParams), ctypes.POINTER(ctypes.c_void_p)]
    lib.sg_embed_texts.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_void_p, ctypes.c_size_t,
                                   ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_float), ctypes.c_void_p]
    lib.sg_embed_dim.argtypes = [ctypes.c_void_p]
    lib.sg_last_error.restype = ctypes.c_char_p
    m = ctypes.c_void_p()
    p = SgEmbedParams(b"cpu", threads)
    if lib.sg_embed_load(str(model).encode(), ctypes.byref(p), ctypes.byref(m)):
        sys.exit("saragossa: " + lib.sg_last_error().decode())
    dim = lib.sg_embed_dim(m)
    texts = [s.encode() for s in SENTENCES]
    out = (ctypes.c_float * (dim * len(texts)))()

    def once():
        for i in range(0, len(texts), batch):
            part = texts[i:i + batch]
            arr = (ctypes.c_char_p * len(part))(*part)
            if lib.sg_embed_texts(m, arr, None, len(part), 0, 0, out, None):
                sys.exit("saragossa: " + lib.sg_last_error().decode())
    once()  # warm-up: page in the weights, the thread pool
    t0, c0 = time.perf_counter(), time.process_time()
    once()
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    lib.sg_embed_free(m)
    return len(texts) / dt, len(texts) / dc


def run_torch(model, threads, batch):
    import torch
    from sentence_transformers import SentenceTransformer
    torch.set_num_threads(threads)
    st = SentenceTransformer(str(model), device="cpu")
    st.encode(SENTENCES, batch_size=batch)  # warm-up
    t0, c0 = time.perf_counter(), time.process_time()
    with torch.inference_mode():
        st.encode(SENTENCES, batch_size=batch)
    return len(SENTENCES) / (time.perf_counter() - t0), len(SENTENCES) / (time.process_time() - c0)


# llama's log lines start with the time since start, "M.SS.mmm.uuu"; the decode of a batch runs between
# its "batch_decode: n_tokens" line and the next timestamped line (the perf summary, printed after the
# embeddings). Its llama_perf "prompt eval" figure counts only decoder runs, not an encoder's.
STAMP = re.compile(r"^(\d+)\.(\d+)\.(\d+)\.(\d+) ", re.M)


def stamp_s(m):
    return int(m.group(1)) * 60 + int(m.group(2)) + int(m.group(3)) / 1e3 + int(m.group(4)) / 1e6


def llama_eval_ms(binary, gguf, threads, texts):
    # its log is written by a thread of its own, which may lose the last lines at exit on a busy
    # machine: a run without its summary line is run again
    for _ in range(4):
        ms = llama_eval_once(binary, gguf, threads, texts)
        if ms is not None:
            return ms
    sys.exit("llama-embedding: no timing summary in four runs")


def llama_eval_once(binary, gguf, threads, texts):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(texts))
        path = f.name
    try:
        # a context (and batch) that holds every text at once: one decode
        ctx = "512" if len(texts) == 1 else "4096"
        r = subprocess.run([binary, "-m", gguf, "-f", path, "-t", str(threads), "-tb", str(threads), "--pooling", "mean",
                            "--embd-normalize", "2", "-c", ctx, "-b", ctx, "-ub", ctx, "--embd-output-format", "array",
                            "--perf", "-lv", "4"],
                           capture_output=True, text=True, timeout=600)
    finally:
        os.unlink(path)
    log = r.stderr + "\n" + r.stdout
    t0 = [stamp_s(m) for m in STAMP.finditer(log) if "batch_decode: n_tokens" in log[m.end():m.end() + 40]]
    t1 = [stamp_s(m) for m in STAMP.finditer(log) if "llama_perf_context_print" in log[m.end():m.end() + 40]]
    if r.returncode or len(t0) != 1:
        sys.exit(f"llama-embedding failed ({r.returncode}) or decoded in {len(t0)} batches: {log[:3000]}")
    if not t1:
        return None
    return 1000 * (min(t1) - t0[0])


def run_llama(binary, gguf, threads, batch):
    import resource
    llama_eval_ms(binary, gguf, threads, SENTENCES[:2])  # warm-up: the page cache
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    c0 = ru.ru_utime + ru.ru_stime
    if batch == 1:
        ms = sum(llama_eval_ms(binary, gguf, threads, [s]) for s in SENTENCES)
    else:
        ms = sum(llama_eval_ms(binary, gguf, threads, SENTENCES[i:i + batch]) for i in range(0, len(SENTENCES), batch))
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    # its CPU time includes each process's start and model load (a lower bound on its rate)
    return len(SENTENCES) / (ms / 1000), len(SENTENCES) / (ru.ru_utime + ru.ru_stime - c0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--gguf")
    ap.add_argument("--llama-embedding")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    engines = {"saragossa": lambda b: run_saragossa(a.model, a.threads, b),
               "sentence-transformers (torch CPU)": lambda b: run_torch(a.model, a.threads, b)}
    if a.gguf and a.llama_embedding:
        engines["llama.cpp (llama-embedding)"] = lambda b: run_llama(a.llama_embedding, a.gguf, a.threads, b)
    best, cpu = {}, {}
    print(f"load average {os.getloadavg()[0]:.1f}, {a.threads} threads", flush=True)
    for r in range(a.rounds):
        for batch in (1, 64):
            for name, fn in engines.items():
                v, c = fn(batch)
                best[(name, batch)] = max(best.get((name, batch), 0.0), v)
                cpu[(name, batch)] = max(cpu.get((name, batch), 0.0), c)
                print(f"round {r + 1} batch {batch:2d} {name}: {v:.1f} sentences/s, {c:.1f} per CPU-second", flush=True)
    names = list(engines)
    print(f"load average {os.getloadavg()[0]:.1f}")
    print("\n| engine | batch 1 (sentences/s) | batch 64 (sentences/s) | batch 1 (per CPU-s) | batch 64 (per CPU-s) |")
    print("|---|---|---|---|---|")
    for n in names:
        print(f"| {n} | {best[(n, 1)]:.1f} | {best[(n, 64)]:.1f} | {cpu[(n, 1)]:.1f} | {cpu[(n, 64)]:.1f} |")
    for n in names[1:]:
        print(f"saragossa / {n}: batch 1 {best[(names[0], 1)] / best[(n, 1)]:.2f}x, "
              f"batch 64 {best[(names[0], 64)] / best[(n, 64)]:.2f}x (wall); per CPU-second "
              f"{cpu[(names[0], 1)] / cpu[(n, 1)]:.2f}x, {cpu[(names[0], 64)] / cpu[(n, 64)]:.2f}x")


if __name__ == "__main__":
    main()
