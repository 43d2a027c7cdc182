#!/usr/bin/env python3
"""Speculative decoding on a real draft/target pair: decode tok/s without speculation, with the
n-gram drafter and with the draft model, for an edit workload (a file in the context that the
answer repeats with a change) and for free prose, greedy. Runs are interleaved (plain, ngram,
draft, plain, ...) so that a machine shared with other work slows every configuration alike, and
the report gives each configuration's median and its ratio to plain. With --llama-bin DIR it also
runs llama.cpp's llama-speculative-simple on the same pair and the same prompt text (--llama-configs:
draft, its draft model; ngram, its ngram-simple drafter without a draft model), and llama-bench's plain
decode of the target (plain). --backend picks saragossa's backend; --llama-ngl offloads llama.cpp's
layers to the GPU. Without --draft only the plain and n-gram configurations run.

Both engines get the same raw text (the Qwen2.5 ChatML turn written out), so no chat template
differs between them. The answers with and without speculation are checked to be identical.

usage: bench/spec_bench.py --target T.gguf [--draft D.gguf] [--reps 3] [--max-tokens 128]
                           [--threads 2] [--backend cpu|cuda|auto] [--llama-bin DIR]
                           [--llama-configs draft,ngram,plain] [--llama-ngl N] [--ngram-max 4,8]
"""
import argparse
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


def chatml(user):
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
            "<|im_start|>assistant\n")


EDIT_FILE = (ROOT / "bench" / "data" / "spec_edit.py").read_text()
WORKLOADS = {
    "edit": chatml("Here is a Python file:\n\n```python\n" + EDIT_FILE + "```\n\nRename the function "
                   "parse_config to load_config everywhere. Reply with the full updated file only."),
    "prose": chatml("Write a short story about a lighthouse keeper who finds a message in a bottle."),
}


def run_sg(bin_, args, prompt, extra, env):
    cmd = [bin_, "generate", "--model", args.target, "--prompt", "-", "--temperature", "0", "--max-tokens",
           str(args.max_tokens), "--threads", str(args.threads), "--ctx", "2048", "--json", "--backend", args.backend, *extra]
    p = subprocess.run(cmd, input=prompt, capture_output=True, text=True, errors="replace", env=env, timeout=3600)
    if p.returncode:
        sys.exit(f"saragossa failed: {p.stderr[-500:]}")
    o = json.loads(p.stdout)
    m = o["metrics"]
    return {"tps": m["decode_tokens_per_s"], "text": o["text"], "n": m["generated_tokens"],
            "acc": m.get("spec_acceptance"), "tpv": m.get("spec_tokens_per_verify")}


def run_llama(dir_, args, prompt, kind):
    if kind == "plain":  # llama-bench's decode of the target at the prompt's depth
        exe = pathlib.Path(dir_) / "llama-bench"
        cmd = [str(exe), "-m", args.target, "-p", "0", "-n", str(args.max_tokens), "-d", "512", "-t", str(args.threads),
               "-ngl", str(args.llama_ngl), "-r", "1", "-o", "json"]
        p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=3600)
        if p.returncode:
            print(f"llama-bench failed: {p.stderr[-800:]}", file=sys.stderr)
            return {"tps": 0.0, "acc": None, "text": ""}
        return {"tps": float(json.loads(p.stdout)[0]["avg_ts"]), "acc": None, "text": ""}
    exe = pathlib.Path(dir_) / "llama-speculative-simple"
    cmd = [str(exe), "-m", args.target, "-p", prompt, "-n", str(args.max_tokens), "-t", str(args.threads), "--temp", "0", "-c",
           "2048", "-ngl", str(args.llama_ngl)]
    if kind == "draft":
        cmd += ["-md", args.draft, "-td", str(args.threads), "-ngld", str(args.llama_ngl), "--spec-draft-n-max", "16",
                "--spec-draft-n-min", "1", "--spec-draft-p-min", "0.5", "--spec-type", "draft-simple"]
    else:
        cmd += ["--spec-type", "ngram-simple"]
    p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=3600)
    if p.returncode:
        print(f"llama-speculative-simple failed: {p.stderr[-800:]}", file=sys.stderr)
        return {"tps": 0.0, "acc": None, "text": ""}
    err = p.stderr
    m = re.search(r"decoded\s+(\d+)\s+tokens in\s+([\d.]+)\s+seconds, speed:\s+([\d.]+)\s+t/s", err)
    acc = re.search(r"accept\s*=\s*([\d.]+)%", err)
    return {"tps": float(m.group(3)) if m else 0.0, "acc": float(acc.group(1)) / 100 if acc else None, "text": p.stdout}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llama-bin")
    ap.add_argument("--llama-configs", default="draft")
    ap.add_argument("--llama-ngl", type=int, default=0)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--workloads", default="edit,prose")
    ap.add_argument("--configs", default="plain,ngram,draft")
    ap.add_argument("--ngram-max", default="", help="also the n-gram drafter with --draft-max N, for each N of a comma list")
    args = ap.parse_args()
    bin_ = os.environ.get("SARAGOSSA_BIN", str(ROOT / "build" / "saragossa"))
    env = dict(os.environ)
    configs = {"plain": [], "ngram": ["--spec", "ngram"], "draft": ["--draft-model", args.draft]}
    for n in [int(x) for x in args.ngram_max.split(",") if x]:  # the n-gram drafter at other draft lengths
        configs[f"ngram{n}"] = ["--spec", "ngram", "--draft-max", str(n)]
    configs = {c: configs[c] for c in args.configs.split(",") + [f"ngram{n}" for n in args.ngram_max.split(",") if n]
               if c and (c != "draft" or args.draft)}
    lconfigs = [c for c in args.llama_configs.split(",") if c and (c != "draft" or args.draft)] if args.llama_bin else []
    for wl in args.workloads.split(","):
        prompt = WORKLOADS[wl]
        res = {c: [] for c in configs}
        for c in lconfigs:
            res[f"llama.cpp {c}"] = []
        for r in range(args.reps):
            for c, extra in configs.items():
                res[c].append(run_sg(bin_, args, prompt, extra, env))
                print(f"{wl} rep {r} {c}: {res[c][-1]['tps']:.2f} tok/s", file=sys.stderr, flush=True)
            for c in lconfigs:
                res[f"llama.cpp {c}"].append(run_llama(args.llama_bin, args, prompt, c))
                print(f"{wl} rep {r} llama.cpp {c}: {res[f'llama.cpp {c}'][-1]['tps']:.2f} tok/s", file=sys.stderr, flush=True)
        ref = res["plain"][0]["text"]
        for c in configs:
            for x in res[c]:
                assert x["text"] == ref, f"{wl}/{c}: the answer differs from plain decoding"
        base = statistics.median(x["tps"] for x in res["plain"])
        print(f"\n{wl} ({res['plain'][0]['n']} tokens, {args.reps} interleaved runs, answers identical to plain: yes)")
        print("| configuration | decode tok/s (median) | runs | vs plain | acceptance | tokens / verify |")
        print("|---|---:|---|---:|---:|---:|")
        for c, xs in res.items():
            med = statistics.median(x["tps"] for x in xs)
            acc = xs[0].get("acc")
            tpv = xs[0].get("tpv")
            runs = ", ".join(f"{x['tps']:.2f}" for x in xs)
            print(f"| {c} | {med:.2f} | {runs} | {med / base:.2f}x | {'' if acc is None else f'{100 * acc:.0f}%'} | "
                  f"{'' if tpv is None else f'{tpv:.2f}'} |")


if __name__ == "__main__":
    main()
