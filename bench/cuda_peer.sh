#!/usr/bin/env bash
# saragossa against llama.cpp (CUDA build) on a GPU, on the SAME Q4_K_M GGUF file: random weights
# with the shapes of Qwen3-8B (dense, default) or Qwen3-30B-A3B (moe), written by
# tools/make_random_model.py --gguf. Run from the repository root:
#   bash bench/cuda_peer.sh [dense|moe] [all|prep|bench]
#     prep   write the Q4_K_M file into WORK (an existing one is reused)
#     bench  both engines on it, then the summary table
# Two ways to the Q4_K_M file (QUANT):
#   llama   write F16 (dense: 16.4 GB) or Q8_0 (moe: 32 GB; its F16 would be 61 GB) and quantize it
#           with llama-quantize (all cores), then delete it; the default for dense
#   direct  write the Q4_K_M file itself: random 4- and 6-bit codes in llama-quantize's Q4_K_M mix
#           (Q6_K for output and for attn_v / ffn_down of the layers llama-quantize picks; the
#           types checked against llama-quantize --dry-run), the same bytes and kernels for a
#           speed run, 18.6 GB for moe in well under a minute; the default for moe, and for dense
#           when no llama-quantize is found
# env: LLAMA_BIN  folder with llama-bench (and llama-quantize) and their libraries
#      LLAMA_QUANTIZE llama-quantize from another build ($LLAMA_BIN/llama-quantize; a CPU build
#                 does: its libraries are looked up beside it)
#      SG_BIN     saragossa binary (build/saragossa)
#      VOCAB      a GGUF holding a Qwen vocabulary (tokenizer.ggml.* keys; a vocabulary-only file
#                 of a few MB will do); needed by prep only (llama.cpp's sources carry one:
#                 models/ggml-vocab-qwen2.gguf in the llama-cpp-python source package)
#      WORK       scratch folder (/tmp/peer); PY python3 with numpy (python3); REPS (3)
#      LAYERS     layers of the model (36 dense, 48 moe; QUANT=llama for moe takes fewer when the
#                 disk cannot hold its Q8_0 and Q4_K_M files together, and says so)
#      PP ("2048 8192"), TG (128), DEPTHS ("0 1024 8192"): the tests, pp<P> from an empty context
#                 and tg<TG> after D tokens of context; SG_BACKEND (cuda)
#      RESULTS    folder that also receives two files: <model>-summary.md and <model>-logs.txt
#                 (every log of the run, one after another) (none)
# Both engines keep all layers on the GPU and an f16 KV cache (llama-bench -ngl 99 -fa 1, its
# default batch 2048 / ubatch 512; saragossa --backend cuda with SARAGOSSA_KV_TYPE=f16, its default
# chunk of 256 prompt tokens).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-dense}
PHASE=${2:-all}
LLAMA_BIN=${LLAMA_BIN:?LLAMA_BIN: folder with llama-bench and llama-quantize}
LLAMA_QUANTIZE=${LLAMA_QUANTIZE:-$LLAMA_BIN/llama-quantize}
SG_BIN=${SG_BIN:-build/saragossa}
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
avail() { df -B1 --output=avail "$WORK" | tail -1; }
free_h() { df -h --output=avail "$WORK" | tail -1 | tr -d ' '; }
# what an interrupted prep left behind (the source files are rewritten anyway)
[ "$PHASE" = bench ] || rm -f "$WORK"/qwen3-*-random-*-f16.gguf "$WORK"/qwen3-*-random-*-q8_0.gguf "$WORK"/*.gguf.part

case "$MODEL" in
dense) ARCH=qwen3 LAYERS=${LAYERS:-36} QUANT=${QUANT:-llama} PREFIX=qwen3-8b-random ;;
moe) ARCH=qwen3moe LAYERS=${LAYERS:-48} QUANT=${QUANT:-direct} PREFIX=qwen3-30b-a3b-random ;;
*) echo "usage: bench/cuda_peer.sh [dense|moe] [all|prep|bench]" >&2; exit 2 ;;
esac
if [ "$PHASE" = bench ] && [ ! -f "$WORK/$PREFIX-${LAYERS}l-Q4_K_M.gguf" ]; then
	# the file prep wrote with fewer layers, if the disk made it do so
	for f in "$WORK/$PREFIX"-*l-Q4_K_M.gguf; do
		[ ! -f "$f" ] || LAYERS=$(basename "$f" | sed 's/.*random-\([0-9]*\)l-.*/\1/')
	done
fi
if [ "$QUANT" = llama ] && [ ! -x "$LLAMA_QUANTIZE" ]; then
	ts "no $LLAMA_QUANTIZE: writing the Q4_K_M file directly"
	QUANT=direct
fi
# bytes a layer and the rest (embeddings, 2 GB to spare) the prep needs on disk at its peak:
# dense: F16 0.39 GB + Q4_K_M 0.13 GB a layer (Q8_0 instead of F16: 0.21 GB); moe: Q8_0 0.66 GB +
# Q4_K_M 0.37 GB a layer
case "$MODEL-$QUANT" in
dense-llama) WTYPE=f16 PER=520000000 REST=5400000000 ;;
moe-llama) WTYPE=q8_0 PER=1050000000 REST=3300000000 ;;
dense-*) WTYPE=q4_k_m PER=130000000 REST=2900000000 ;;
moe-*) WTYPE=q4_k_m PER=380000000 REST=2500000000 ;;
esac
Q4="$WORK/$PREFIX-${LAYERS}l-Q4_K_M.gguf"
if [ "$PHASE" != bench ] && [ ! -f "$Q4" ] && [ "$(avail)" -lt $((LAYERS * PER + REST)) ]; then
	if ls "$WORK"/qwen3-*-random-*.gguf >/dev/null 2>&1; then
		ts "disk: deleting the other model's files in $WORK to make room"
		rm -f "$WORK"/qwen3-*-random-*.gguf "$WORK"/qwen3-*-random-*.gguf.how
	fi
	if [ "$MODEL-$QUANT" = dense-llama ] && [ "$(avail)" -lt $((LAYERS * PER + REST)) ]; then
		ts "disk: $(free_h) free in $WORK, too little beside an F16 file: writing Q8_0 for llama-quantize"
		WTYPE=q8_0 PER=340000000
	fi
	fit=$((($(avail) - REST) / PER))
	if [ "$fit" -lt "$LAYERS" ]; then
		ts "disk: $(free_h) free in $WORK holds $fit layers, not $LAYERS (a larger WORK, or QUANT=direct, gives all)"
		[ "$fit" -ge 1 ] || exit 1
		LAYERS=$fit
		Q4="$WORK/$PREFIX-${LAYERS}l-Q4_K_M.gguf"
	fi
fi
SRC="$WORK/$PREFIX-${LAYERS}l-$WTYPE.gguf"
LOGS="$WORK/logs-$MODEL"
mkdir -p "$LOGS"
save() {
	[ -n "$RESULTS" ] || return 0
	mkdir -p "$RESULTS"
	[ ! -f "$LOGS/summary.md" ] || cp "$LOGS/summary.md" "$RESULTS/$MODEL-summary.md"
	for f in "$LOGS"/*; do
		[ "$f" = "$LOGS/summary.md" ] || { echo "==> $(basename "$f")"; cat "$f"; }
	done >"$RESULTS/$MODEL-logs.txt"
}
trap save EXIT  # failed runs too
ts "model $MODEL: $ARCH, $LAYERS layers -> $Q4"
echo "host: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GB RAM, $(free_h) free in $WORK"
if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader; fi

if [ "$PHASE" != bench ]; then
	if [ -f "$Q4" ]; then
		ts "reusing $Q4 ($(du -h "$Q4" | cut -f1)); delete it to write a new one"
	elif [ "$WTYPE" = q4_k_m ]; then
		VOCAB=${VOCAB:?VOCAB: a GGUF holding a Qwen vocabulary}
		ts "writing $Q4 (Q4_K_M mix written directly)"
		"$PY" tools/make_random_model.py "$ARCH" --layers "$LAYERS" --gguf "$VOCAB" --gguf-type q4_k_m --out "$WORK"
		echo direct >"$Q4.how"
		ts "written: $(du -h "$Q4" | cut -f1)"
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
		echo llama >"$Q4.how"
		grep -E "model size|quant size|quantize time" "$LOGS/quantize.log" | sed 's/^llama_model_quantize_impl: //'
		rm -f "$SRC"
		ts "quantized: $(du -h "$Q4" | cut -f1); $SRC deleted"
	fi
fi

if [ "$PHASE" != prep ]; then
	[ -f "$Q4" ] || { echo "no $Q4: run the prep phase first" >&2; exit 1; }
	rm -f "$LOGS"/llama-*.csv "$LOGS"/sg-*.txt "$LOGS/summary.md"
	ts "llama-bench: pp ${PP// /,}"
	"$LLAMA_BIN/llama-bench" -m "$Q4" -ngl 99 -fa 1 -r "$REPS" -p "${PP// /,}" -n 0 -o csv \
		>"$LOGS/llama-pp.csv" 2>"$LOGS/llama-pp.err" || { tail -20 "$LOGS/llama-pp.err"; exit 1; }
	ts "llama-bench: tg$TG at depth ${DEPTHS// /,}"
	"$LLAMA_BIN/llama-bench" -m "$Q4" -ngl 99 -fa 1 -r "$REPS" -p 0 -n "$TG" -d "${DEPTHS// /,}" -o csv \
		>"$LOGS/llama-tg.csv" 2>"$LOGS/llama-tg.err" || { tail -20 "$LOGS/llama-tg.err"; exit 1; }
	grep -m2 -E "ggml_cuda_init|Device 0" "$LOGS/llama-pp.err" || true
	# the weights live on the GPU: the host-memory check (sized for CPU loads) is skipped
	export SARAGOSSA_KV_TYPE=f16 SARAGOSSA_MEM_LIMIT=-1
	# one process per test, so that each holds a KV cache of that test's rows alone, as llama-bench
	# sizes its context per test (a decode depth paired with a prompt test in one process decoded
	# in a cache sized for the prompt: the d1024 line in 8193 rows, whose attention takes other
	# slices and kernels than a 1.2k-row cache)
	runs=()
	for p in $PP; do runs+=("-p $p -n 0"); done
	for d in $DEPTHS; do runs+=("-p 0 -n $TG -d $d"); done
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
	"$PY" - "$LOGS" "$MODEL" "$LAYERS" "$REPS" "$PP" "$TG" "$DEPTHS" "$(cat "$Q4.how" 2>/dev/null || echo ?)" <<'PY' | tee "$LOGS/summary.md"
import csv, glob, re, sys
logs, model, layers, reps, pp, tg, depths, quant = sys.argv[1:]
ll, about = {}, ""
for f in ("llama-pp.csv", "llama-tg.csv"):
    for r in csv.DictReader(open(f"{logs}/{f}")):
        about = (f"llama.cpp {r.get('build_commit', '?')} ({r.get('backends', '?')}, {r.get('gpu_info', '?')}), "
                 f"model {r.get('model_type', '?')}, {int(r.get('model_size') or 0) / 1e9:.2f} GB, "
                 f"-ngl {r.get('n_gpu_layers', '?')} -fa {r.get('flash_attn', '?')} -b {r.get('n_batch', '?')} "
                 f"-ub {r.get('n_ubatch', '?')} kv {r.get('type_k', '?')}/{r.get('type_v', '?')}")
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
how = {"direct": "written directly in llama-quantize's mix", "llama": "made by llama-quantize"}.get(quant, "origin unknown")
print(f"\n{shape} shapes ({layers} layers), random weights, one Q4_K_M file ({how}); tok/s, mean +- sd of {reps} runs")
print(about)
if info:
    print("saragossa " + info)
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
ts "done"
