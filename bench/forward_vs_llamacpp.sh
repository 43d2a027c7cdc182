#!/usr/bin/env bash
# Side by side, same GGUF file, same thread count: `saragossa bench` against llama.cpp's
# llama-bench (pp512 / tg128 by default). Rounds alternate the engines so that load from
# other processes on the machine falls on all of them; every round's figures are printed, then
# the medians and their ratios as a markdown table, one per model. Before and after each model's
# rounds the streaming-read bandwidth of the machine is measured (bench/kernels/bench_matvec
# --read-bw, the best of both by wall time), and decode is also given as weight bytes read per
# second and as a share of that bandwidth.
#   bench/forward_vs_llamacpp.sh [ROUNDS] [GGUF...]   env: THREADS (2), P (512), N (128; 0 = prefill only),
#                                             REPS (3), MODEL (when no GGUF is named; default Gemma 3 270M),
#                                             BASELINE (another saragossa binary, e.g. an older build,
#                                             run in the same rounds)
# Example: P=128 N=64 bench/forward_vs_llamacpp.sh 5 qwen2.5-coder-1.5b-instruct-q4_k_m.gguf other.gguf
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
[ $# -gt 0 ] && shift
THREADS=${THREADS:-2}
P=${P:-512}
N=${N:-128}
REPS=${REPS:-3}
BASELINE=${BASELINE:-}
if [ $# -gt 0 ]; then MODELS=("$@"); else
  MODELS=("${MODEL:-$(.venv/bin/python tools/fetch_models.py gemma3-270m | awk '{print $NF}' | tail -1)}"); fi
LLAMA_BIN=$(bash bench/peer/build_llama_cpp.sh | tail -1)
[ -x build/saragossa ] || make -j2 >/dev/null
[ -x build/bench/bench_matvec ] || bash bench/run.sh --build-only
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
read_bw() { build/bench/bench_matvec --read-bw --threads "$THREADS" | awk '/^read_bw/{print $2}'; }
sg_fig() { awk '/^(pp|tg)[0-9]/{printf "%s %s  ", $1, $2}' "$1"; }
for MODEL in "${MODELS[@]}"; do
rm -f "$OUT"/*
echo
echo "model: $MODEL  threads: $THREADS  pp$P tg$N, $REPS repetitions per round, $ROUNDS rounds"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
BW0=$(read_bw)
for r in $(seq 1 "$ROUNDS"); do
  build/saragossa bench --model "$MODEL" -p "$P" -n "$N" -r "$REPS" --threads "$THREADS" > "$OUT/sg.$r"
  if [ -n "$BASELINE" ]; then
    "$BASELINE" bench --model "$MODEL" -p "$P" -n "$N" -r "$REPS" --threads "$THREADS" > "$OUT/bl.$r"
  fi
  "$LLAMA_BIN/llama-bench" -m "$MODEL" -p "$P" -n "$N" -r "$REPS" -t "$THREADS" -o csv 2>/dev/null > "$OUT/lc.$r"
  echo "round $r: saragossa $(sg_fig "$OUT/sg.$r")$([ -n "$BASELINE" ] && echo "| baseline $(sg_fig "$OUT/bl.$r")")| llama.cpp $(
    python3 -c 'import csv,sys
for row in csv.DictReader(open(sys.argv[1])):
    t = "pp%s" % row["n_prompt"] if int(row["n_prompt"]) else "tg%s" % row["n_gen"]
    print(t, round(float(row["avg_ts"]), 2), end="  ")' "$OUT/lc.$r")| load $(cut -d' ' -f1 /proc/loadavg)"
done
BW1=$(read_bw)
echo "streaming read: $BW0 GB/s before the rounds, $BW1 GB/s after (load $(cut -d' ' -f1-3 /proc/loadavg))"
python3 - "$OUT" "$ROUNDS" "$P" "$N" "$BW0" "$BW1" "${BASELINE:+1}" <<'PY'
import csv, os, statistics, sys
out, rounds, p, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
bw = max(float(sys.argv[5] or 0), float(sys.argv[6] or 0))
has_bl = len(sys.argv) > 7 and sys.argv[7] == "1"
def sg_read(prefix):
    res, wbytes = {}, None
    for r in range(1, rounds + 1):
        for line in open(f"{out}/{prefix}.{r}"):
            f = line.split()
            if f and f[0][:2] in ("pp", "tg") and f[0][2:].isdigit():
                res.setdefault(f[0], []).append(float(f[1]))
            if line.startswith("model:"):
                wbytes = float(line.split(",")[1].split()[0]) * 1048576
    return res, wbytes
sg, wbytes = sg_read("sg")
bl = sg_read("bl")[0] if has_bl else {}
lc = {}
for r in range(1, rounds + 1):
    for row in csv.DictReader(open(f"{out}/lc.{r}")):
        t = "pp%s" % row["n_prompt"] if int(row["n_prompt"]) else "tg%s" % row["n_gen"]
        lc.setdefault(t, []).append(float(row["avg_ts"]))
if has_bl:
    print("\n| test | saragossa tok/s (median) | baseline tok/s (median) | llama.cpp tok/s (median) | ratio vs llama.cpp | ratio vs baseline | weights GB/s (saragossa) | % of read bw |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
else:
    print("\n| test | saragossa tok/s (median) | llama.cpp tok/s (median) | ratio | weights GB/s (saragossa) | % of read bw |")
    print("|---|---:|---:|---:|---:|---:|")
for t in (f"pp{p}", f"tg{n}"):
    if t in sg and t in lc:
        a, b = statistics.median(sg[t]), statistics.median(lc[t])
        tg = t.startswith("tg") and wbytes
        gbs = f"{a * wbytes / 1e9:.2f}" if tg else "-"
        pct = f"{100 * a * wbytes / 1e9 / bw:.0f}%" if tg and bw > 0 else "-"
        if has_bl and t in bl:
            c = statistics.median(bl[t])
            print(f"| {t} | {a:.2f} | {c:.2f} | {b:.2f} | {a / b:.2f}x | {a / c:.2f}x | {gbs} | {pct} |")
        else:
            print(f"| {t} | {a:.2f} | {b:.2f} | {a / b:.2f}x | {gbs} | {pct} |")
PY
done
