#!/usr/bin/env bash
# saragossa against llama.cpp (CUDA build) on a GPU, on the SAME Q4_K_M GGUF file: random weights
# with the shapes of Qwen3-8B (dense, default) or Qwen3-30B-A3B (moe), written by
# tools/make_random_model.py --gguf and quantized by llama-quantize (its Q4_K_M mix, as for a real
# checkpoint). Run from the repository root:
#   bash bench/cuda_peer.sh [dense|moe] [all|prep|bench]
#     prep   write the random GGUF and quantize it (kept in WORK; an existing Q4_K_M is reused)
#     bench  both engines on WORK's Q4_K_M file, then the summary table
# env: LLAMA_BIN  folder with llama-bench and llama-quantize (and their libraries)
#      LLAMA_QUANTIZE llama-quantize from another build ($LLAMA_BIN/llama-quantize; a CPU build
#                 does: its libraries are looked up beside it)
#      SG_BIN     saragossa binary (build/saragossa)
#      VOCAB      a GGUF holding a Qwen vocabulary (tokenizer.ggml.* keys; a vocabulary-only file
#                 of a few MB will do); needed by prep only
#      WORK       scratch folder (/tmp/peer); PY python3 with numpy (python3); REPS (3)
#      LAYERS     layers of the model (36 dense, 48 moe; moe takes fewer when the disk cannot hold
#                 its Q8_0 and Q4_K_M files together)
#      PP ("2048 8192"), TG (128), DEPTHS ("0 1024 8192"): the tests, pp<P> from an empty context
#                 and tg<TG> after D tokens of context; SG_BACKEND (cuda)
#      RESULTS    folder that also receives the logs and the summary (none)
# Both engines keep all layers on the GPU and an f16 KV cache (llama-bench -ngl 99 -fa 1, its
# default batch 2048 / ubatch 512; saragossa --backend cuda with SARAGOSSA_KV_TYPE=f16, its default
# chunk of 256 prompt tokens). The dense F16 file is 16.4 GB (deleted once quantized); the MoE
# model is written as Q8_0 (32 GB at 48 layers; F16 would be 61 GB) and requantized to Q4_K_M.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-dense}
PHASE=${2:-all}
LLAMA_BIN=${LLAMA_BIN:?LLAMA_BIN: folder with llama-bench and llama-quantize}
SG_BIN=${SG_BIN:-build/saragossa}
LLAMA_QUANTIZE=${LLAMA_QUANTIZE:-$LLAMA_BIN/llama-quantize}
WORK=${WORK:-/tmp/peer}
PY=${PY:-python3}
REPS=${REPS:-3}
PP=${PP:-2048 8192}
TG=${TG:-128}
DEPTHS=${DEPTHS:-0 1024 8192}
SG_BACKEND=${SG_BACKEND:-cuda}
RESULTS=${RESULTS:-}
export LD_LIBRARY_PATH="$LLAMA_BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PYTHONUNBUFFERED=1
mkdir -p "$WORK"
T0=$SECONDS
ts() { echo "[$(date +%H:%M:%S) +$((SECONDS - T0))s] $*"; }
# what an interrupted prep left behind (the source files are rewritten anyway)
[ "$PHASE" = bench ] || rm -f "$WORK"/qwen3-*-random-*-f16.gguf "$WORK"/qwen3-*-random-*-q8_0.gguf "$WORK"/*.gguf.part

case "$MODEL" in
dense)
	ARCH=qwen3 LAYERS=${LAYERS:-36} WTYPE=f16
	NAME=qwen3-8b-random-${LAYERS}l
	# F16 (0.39 GB a layer) beside its Q4_K_M (0.13 GB a layer), 3.4 GB of embeddings: 22 GB at 36
	# layers; Q8_0 when that does not fit (llama-quantize requantizes it into the same mix)
	if [ ! -f "$WORK/$NAME-Q4_K_M.gguf" ] && [ "$PHASE" != bench ] &&
		[ "$(df -B1 --output=avail "$WORK" | tail -1)" -lt $((LAYERS * 600000000 + 4500000000)) ]; then
		WTYPE=q8_0
		ts "disk: $(df -h --output=avail "$WORK" | tail -1 | tr -d ' ') free in $WORK, too little for the F16 file: writing Q8_0"
	fi
	;;
moe)
	ARCH=qwen3moe LAYERS=${LAYERS:-48} WTYPE=q8_0
	if [ "$PHASE" = bench ] && [ ! -f "$WORK/qwen3-30b-a3b-random-${LAYERS}l-Q4_K_M.gguf" ]; then
		# the file prep wrote with fewer layers, if the disk made it do so
		for f in "$WORK"/qwen3-30b-a3b-random-*l-Q4_K_M.gguf; do
			[ ! -f "$f" ] || LAYERS=$(basename "$f" | sed 's/.*random-\([0-9]*\)l-.*/\1/')
		done
	fi
	if [ ! -f "$WORK/qwen3-30b-a3b-random-${LAYERS}l-Q4_K_M.gguf" ] && [ "$PHASE" != bench ]; then
		# Q8_0 (0.66 GB a layer) and Q4_K_M (~0.37 GB) coexist until the Q8_0 is deleted;
		# 1.3 GB for the embeddings of both, 2 GB to spare
		fit() { echo $((($(df -B1 --output=avail "$WORK" | tail -1) - 3300000000) / 1050000000)); }
		fit=$(fit)
		if [ "$fit" -lt "$LAYERS" ] && ls "$WORK"/qwen3-8b-random-*.gguf >/dev/null 2>&1; then
			ts "disk: deleting the dense model's files to make room"
			rm -f "$WORK"/qwen3-8b-random-*.gguf
			fit=$(fit)
		fi
		if [ "$fit" -lt "$LAYERS" ]; then
			ts "disk: $(df -h --output=avail "$WORK" | tail -1 | tr -d ' ') free in $WORK holds $fit MoE layers, not $LAYERS"
			echo "(a larger WORK folder gives all of them)"
			[ "$fit" -ge 1 ] || exit 1
			LAYERS=$fit
		fi
	fi
	NAME=qwen3-30b-a3b-random-${LAYERS}l
	;;
*) echo "usage: bench/cuda_peer.sh [dense|moe] [all|prep|bench]" >&2; exit 2 ;;
esac
SRC="$WORK/$NAME-$WTYPE.gguf"
Q4="$WORK/$NAME-Q4_K_M.gguf"
LOGS="$WORK/logs-$MODEL"
mkdir -p "$LOGS"
ts "model $MODEL: $ARCH, $LAYERS layers -> $Q4"
echo "host: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GB RAM, $(df -h --output=avail "$WORK" | tail -1 | tr -d ' ') free in $WORK"
if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader; fi

if [ "$PHASE" != bench ]; then
	if [ -f "$Q4" ]; then
		ts "reusing $Q4 ($(du -h "$Q4" | cut -f1)); delete it to write a new one"
	else
		VOCAB=${VOCAB:?VOCAB: a GGUF holding a Qwen vocabulary}
		ts "writing $SRC"
		"$PY" tools/make_random_model.py "$ARCH" --layers "$LAYERS" --gguf "$VOCAB" --gguf-type "$WTYPE" --out "$WORK"
		ts "quantizing to Q4_K_M with $(nproc) threads"
		req=()
		[ "$WTYPE" = f16 ] || req=(--allow-requantize)
		LD_LIBRARY_PATH="$(dirname "$LLAMA_QUANTIZE"):$LD_LIBRARY_PATH" \
			"$LLAMA_QUANTIZE" "${req[@]}" "$SRC" "$Q4.part" Q4_K_M "$(nproc)" >"$LOGS/quantize.log" 2>&1 ||
			{ tail -20 "$LOGS/quantize.log"; exit 1; }
		mv "$Q4.part" "$Q4"
		grep -E "model size|quant size|quantize time" "$LOGS/quantize.log" | sed 's/^llama_model_quantize_impl: //'
		rm -f "$SRC"
		ts "quantized: $(du -h "$Q4" | cut -f1); $SRC deleted"
	fi
fi

if [ "$PHASE" != prep ]; then
	[ -f "$Q4" ] || { echo "no $Q4: run the prep phase first" >&2; exit 1; }
	rm -f "$LOGS"/llama-*.csv "$LOGS"/sg-*.txt
	ts "llama-bench: pp ${PP// /,}"
	"$LLAMA_BIN/llama-bench" -m "$Q4" -ngl 99 -fa 1 -r "$REPS" -p "${PP// /,}" -n 0 -o csv \
		>"$LOGS/llama-pp.csv" 2>"$LOGS/llama-pp.err" || { tail -20 "$LOGS/llama-pp.err"; exit 1; }
	ts "llama-bench: tg$TG at depth ${DEPTHS// /,}"
	"$LLAMA_BIN/llama-bench" -m "$Q4" -ngl 99 -fa 1 -r "$REPS" -p 0 -n "$TG" -d "${DEPTHS// /,}" -o csv \
		>"$LOGS/llama-tg.csv" 2>"$LOGS/llama-tg.err" || { tail -20 "$LOGS/llama-tg.err"; exit 1; }
	grep -m2 -E "ggml_cuda_init|Device 0" "$LOGS/llama-pp.err" || true
	# the weights live on the GPU: the host-memory check (sized for CPU loads) is skipped
	export SARAGOSSA_KV_TYPE=f16 SARAGOSSA_MEM_LIMIT=-1
	# one load per pair (prompt test, decode depth): saragossa times its pp from an empty context
	# whatever -d says, and loads of the MoE model cost seconds each
	read -ra pps <<<"$PP"
	read -ra deps <<<"$DEPTHS"
	runs=()
	for ((i = 0; i < ${#pps[@]} || i < ${#deps[@]}; i++)); do
		if [ $i -lt ${#deps[@]} ]; then d="-n $TG -d ${deps[i]}"; else d="-n 0"; fi
		runs+=("-p ${pps[i]:-0} $d")
	done
	i=0
	for args in "${runs[@]}"; do
		i=$((i + 1))
		ts "saragossa bench $args"
		# shellcheck disable=SC2086
		"$SG_BIN" bench -m "$Q4" --backend "$SG_BACKEND" -r "$REPS" $args >"$LOGS/sg-$i.txt" 2>&1 ||
			{ tail -20 "$LOGS/sg-$i.txt"; exit 1; }
		grep -vE "^(test|repetitions)" "$LOGS/sg-$i.txt"
	done
	ts "summary"
	"$PY" - "$LOGS" "$MODEL" "$LAYERS" "$REPS" "$PP" "$TG" "$DEPTHS" <<'PY' | tee "$LOGS/summary.md"
import csv, glob, re, sys
logs, model, layers, reps, pp, tg, depths = sys.argv[1:]
ll = {}
for f in ("llama-pp.csv", "llama-tg.csv"):
    for r in csv.DictReader(open(f"{logs}/{f}")):
        p, n, d = int(r["n_prompt"]), int(r["n_gen"]), int(r.get("n_depth") or 0)
        name = f"pp{p}" if p else f"tg{n}"
        if d and not p:
            name += f"@d{d}"
        ll[name] = (float(r["avg_ts"]), float(r["stddev_ts"]))
sg, info = {}, ""
for f in sorted(glob.glob(f"{logs}/sg-*.txt")):
    for line in open(f):
        m = re.match(r"^((?:pp|tg)\d+(?:@d\d+)?)\s+([\d.]+)\s+\+-\s+([\d.]+)", line)
        if m:
            sg[m.group(1)] = (float(m.group(2)), float(m.group(3)))
        if line.startswith("device:") and not info:
            info = line.strip()
shape = {"dense": "Qwen3-8B", "moe": "Qwen3-30B-A3B"}[model]
print(f"\n{shape} shapes ({layers} layers), random weights, one Q4_K_M file; tok/s, mean +- sd of {reps} runs")
if info:
    print(info)
print("\n| test | llama.cpp | saragossa | saragossa / llama.cpp |")
print("|---|---:|---:|---:|")
tests = [f"pp{p}" for p in pp.split()] + [f"tg{tg}@d{d}" if int(d) else f"tg{tg}" for d in depths.split()]
for t in tests:
    a, b = ll.get(t), sg.get(t)
    fa = f"{a[0]:.1f} +- {a[1]:.1f}" if a else "-"
    fb = f"{b[0]:.1f} +- {b[1]:.1f}" if b else "-"
    print(f"| {t} | {fa} | {fb} | {f'{b[0] / a[0]:.2f}x' if a and b else '-'} |")
PY
fi
if [ -n "$RESULTS" ]; then
	mkdir -p "$RESULTS/$MODEL"
	cp "$LOGS"/* "$RESULTS/$MODEL/"
fi
ts "done"
