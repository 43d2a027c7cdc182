#!/usr/bin/env python3
"""Time to first token of each turn of a growing conversation, prefix cache on vs off.

A conversation of --turns turns; each turn appends --growth new prompt tokens (token ids sent to
/v1/completions, so no tokenizer effects) to the whole history, and the answer's first token is
awaited (max_tokens 1: the request time is the TTFT plus the HTTP round trip). Three runs on
fresh servers:

  off      --no-prefix-cache: every turn prefills its whole prompt (the baseline)
  live     cache on, one session: the live state of the session is reused (plus its blocks)
  restore  cache on, another session's request between turns: each turn restores its blocks

Model: --model PATH (a folder with config.json, safetensors and a tokenizer, or a .gguf), or by
default a synthetic Gemma-3-shaped model made here (random weights; 6 layers, 5 sliding-window
(512) + 1 global, hidden 256, 4 query heads, 1 KV head of 64, MLP 1024, vocabulary 512, context
32768), which keeps the real model's balance of matmul and long-context attention at a size a
CPU prefills in minutes.

    .venv/bin/python bench/prefix_cache_bench.py [--model PATH] [--turns 10] [--growth 2000]
"""
import argparse
import json
import os
import random
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from server_util import Server, make_test_model  # noqa: E402


def synthetic_model(dest):
    """A random Gemma 3 text model (float32 safetensors) with the test tokenizer of the e2e tests."""
    import numpy as np
    from safetensors.numpy import save_file

    make_test_model("gemma3_text", dest, 512)
    D, H, KV, HD, F, L, V = 256, 4, 1, 64, 1024, 6, 512
    cfg = json.loads((ROOT / "tests" / "fixtures" / "gemma3_text" / "config.json").read_text())
    cfg.update({"hidden_size": D, "num_attention_heads": H, "num_key_value_heads": KV, "head_dim": HD,
                "intermediate_size": F, "num_hidden_layers": L, "vocab_size": V, "query_pre_attn_scalar": HD,
                "sliding_window": 512, "max_position_embeddings": 32768, "dtype": "float32",
                "layer_types": ["sliding_attention"] * 5 + ["full_attention"]})
    rng = np.random.default_rng(1)

    def w(*shape):
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    t = {"model.embed_tokens.weight": w(V, D), "model.norm.weight": np.zeros(D, np.float32)}
    for i in range(L):
        p = f"model.layers.{i}."
        for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                  "post_feedforward_layernorm"):
            t[p + n + ".weight"] = np.zeros(D, np.float32)
        t[p + "self_attn.q_proj.weight"] = w(H * HD, D)
        t[p + "self_attn.k_proj.weight"] = w(KV * HD, D)
        t[p + "self_attn.v_proj.weight"] = w(KV * HD, D)
        t[p + "self_attn.o_proj.weight"] = w(D, H * HD)
        t[p + "self_attn.q_norm.weight"] = np.zeros(HD, np.float32)
        t[p + "self_attn.k_norm.weight"] = np.zeros(HD, np.float32)
        t[p + "mlp.gate_proj.weight"] = w(F, D)
        t[p + "mlp.up_proj.weight"] = w(F, D)
        t[p + "mlp.down_proj.weight"] = w(D, F)
    save_file(t, str(Path(dest) / "model.safetensors"), metadata={"format": "pt"})
    (Path(dest) / "config.json").write_text(json.dumps(cfg, indent=1))
    return dest


def cpu_s(pid):
    """CPU seconds (user + system) the process has used: on shared cores a steadier measure of
    the work a turn took than the wall clock."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(model, mode, turns, growth, ctx, vocab, only=None):
    sock = tempfile.mktemp(prefix="sg-bench-", suffix=".sock")
    args = ["--model", f"m={model}", "--ctx", str(ctx), "--max-tokens-cap", "8"]
    if mode == "off":
        args.append("--no-prefix-cache")
    env = {"SARAGOSSA_LOG": "warn"}
    rng = random.Random(7)
    out = []
    with Server(*args, socket_path=sock, env=env) as s, s.client(timeout=3600) as c:
        history = []
        for t in range(turns):
            history = history + [rng.randrange(8, vocab) for _ in range(growth)]
            if only and t + 1 not in only:
                # the baseline's turns are independent (no reuse): measuring a few is enough
                history.append(rng.randrange(8, vocab))
                out.append(None)
                continue
            t0, c0 = time.perf_counter(), cpu_s(s.proc.pid)
            r = c.post("/v1/completions", json={"model": "m", "prompt": history, "max_tokens": 1, "temperature": 0},
                       headers={"x-saragossa-session": "bench"})
            dt, dc = time.perf_counter() - t0, cpu_s(s.proc.pid) - c0
            assert r.status_code == 200, r.text
            u = r.json()["usage"]
            reused = int(r.headers.get("x-saragossa-reused-prefix-tokens", "0"))
            out.append({"turn": t + 1, "prompt": u["prompt_tokens"], "reused": reused, "ttft_s": dt, "cpu_s": dc})
            print(f"  {mode:8s} turn {t + 1:2d}: prompt {u['prompt_tokens']:6d}, reused {reused:6d}, ttft {dt * 1e3:9.1f} ms,"
                  f" server cpu {dc:7.2f} s", flush=True)
            # the answer's token becomes part of the history, as in a chat
            history.append(rng.randrange(8, vocab))
            if mode == "restore":
                c.post("/v1/completions", json={"model": "m", "prompt": [5, 6, 7], "max_tokens": 1},
                       headers={"x-saragossa-session": "someone-else"})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model")
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--growth", type=int, default=2000)
    ap.add_argument("--modes", default="off,live,restore")
    ap.add_argument("--off-turns", help="measure only these turns of the baseline (e.g. 1,5,10): they do not depend "
                    "on each other, and a cold 20k prefill is slow")
    ap.add_argument("--json", help="write the measurements here")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="sg-pcbench-")
    try:
        model = a.model or synthetic_model(Path(tmp) / "synthetic-gemma3")
        vocab = 512 if not a.model else 256
        ctx = a.turns * (a.growth + 1) + 64
        res = {}
        for mode in a.modes.split(","):
            only = {int(x) for x in a.off_turns.split(",")} if mode == "off" and a.off_turns else None
            res[mode] = run(model, mode, a.turns, a.growth, ctx, vocab, only)
        print()
        for key, unit in (("ttft_s", "TTFT ms (wall)"), ("cpu_s", "server CPU ms")):
            print(f"{unit}: turn, prompt tokens, off, live (ratio to off), restore (ratio to off)")
            for i in range(a.turns):
                off = res.get("off", [None] * a.turns)[i]
                row = f"{i + 1:4d}  {off['prompt'] if off else 0:6d}  {off[key] * 1e3 if off else 0:8.0f}"
                for mode in ("live", "restore"):
                    if mode in res:
                        v = res[mode][i][key]
                        ratio = f"{v / off[key] * 100:5.1f}%" if off else "    -"
                        row += f"  {v * 1e3:8.0f} ({ratio})"
                print(row)
            print()
        if a.json:
            Path(a.json).write_text(json.dumps(res, indent=1))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
