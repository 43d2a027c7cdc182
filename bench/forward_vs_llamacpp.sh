#!/usr/bin/env bash
# Side by side, same GGUF file, same thread count: `saragossa bench` against llama.cpp's
# llama-bench (pp512 / tg128 by default). Rounds alternate the engines so that load from
# other processes on the machine falls on all of them; every round's figures are printed, then
# the medians and their ratios as a markdown table.
#   bench/forward_vs_llamacpp.sh [ROUNDS]     env: THREADS (2), P (512), N (128; 0 = prefill only),
#                                             REPS (3), MODEL, BASELINE (another saragossa binary,
#                                             e.g. an older build, run in the same rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
THREADS=${THREADS:-2}
P=${P:-512}
N=${N:-128}
REPS=${REPS:-3}
BASELINE=${BASELINE:-}
MODEL=${MODEL:-$(.venv/bin/python tools/fetch_models.py gemma3-270m | awk '{print $NF}' | tail -1)}
LLAMA_BIN=$(bash bench/peer/build_llama_cpp.sh | tail -1)
[ -x build/saragossa ] || make -j2 >/dev/null
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
echo "model: $MODEL  threads: $THREADS  pp$P tg$N, $REPS repetitions per round, $ROUNDS rounds"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
sg_fig() { awk '/^(pp|tg)[0-9]/{printf "%s %s  ", $1, $2}' "$1"; }
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
python3 - "$OUT" "$ROUNDS" "$P" "$N" "${BASELINE:+1}" <<'PY'
import csv, os, statistics, sys
out, rounds, p, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
has_bl = len(sys.argv) > 5 and sys.argv[5] == "1"
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
    print("\n| test | saragossa tok/s (median) | baseline tok/s (median) | llama.cpp tok/s (median) | ratio vs llama.cpp | ratio vs baseline |")
    print("|---|---:|---:|---:|---:|---:|")
else:
    print("\n| test | saragossa tok/s (median) | llama.cpp tok/s (median) | ratio | weights GB/s (saragossa) |")
    print("|---|---:|---:|---:|---:|")
for t in (f"pp{p}", f"tg{n}"):
    if t in sg and t in lc:
        a, b = statistics.median(sg[t]), statistics.median(lc[t])
        if has_bl and t in bl:
            c = statistics.median(bl[t])
            print(f"| {t} | {a:.2f} | {c:.2f} | {b:.2f} | {a / b:.2f}x | {a / c:.2f}x |")
        else:
            gbs = f"{a * wbytes / 1e9:.2f}" if t.startswith("tg") and wbytes else "-"
            print(f"| {t} | {a:.2f} | {b:.2f} | {a / b:.2f}x | {gbs} |")
PY
