#!/usr/bin/env bash
# An MoE model larger than a memory limit: saragossa's expert slot cache against llama.cpp's mmap,
# both inside the same memory cgroup, decode tok/s side by side, plus the cache's hit rate and MB
# read per token.
#
#   bench/expert_cache.sh MODEL.gguf [LIMIT] [TOKENS]
#
# LIMIT (default 8G) is enforced with `systemd-run --scope -p MemoryMax=LIMIT` where systemd runs,
# else with a cgroup of our own (v2: memory.max; v1: memory.limit_in_bytes) under /sys/fs/cgroup.
# The file is dropped from the page cache (posix_fadvise DONTNEED) before each run, so neither run
# starts with pages another run read. Make a Qwen3-30B-A3B-shaped file with
#   tools/make_random_model.py qwen3moe --gguf VOCAB.gguf --gguf-type q4_k_m --out DIR
# llama.cpp comes from bench/peer/build_llama_cpp.sh. Threads: SARAGOSSA_THREADS / -t (default
# all cores). Extra saragossa flags (SARAGOSSA_EXPERT_*) pass through the environment.
set -euo pipefail
MODEL="$1"
LIMIT="${2:-8G}"
N="${3:-16}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SG="${SARAGOSSA_BIN:-$ROOT/build/saragossa}"
LLAMA="${LLAMA_BIN:-$("$ROOT/bench/peer/build_llama_cpp.sh")}"
T="${THREADS:-$(nproc)}"

drop() { python3 -c "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)" "$MODEL"; }

bytes() { python3 -c "import sys; s=sys.argv[1]; m={'K':1<<10,'M':1<<20,'G':1<<30}; print(int(s[:-1])*m[s[-1].upper()] if s[-1].upper() in m else int(s))" "$1"; }

# Runs "$@" under the limit.
limited() {
	if systemd-run --scope -q -p MemoryMax="$LIMIT" true 2>/dev/null; then
		systemd-run --scope -q -p MemoryMax="$LIMIT" "$@"
		return
	fi
	local cg
	if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
		cg=/sys/fs/cgroup/sg-expert-bench
		mkdir -p "$cg"
		echo "$(bytes "$LIMIT")" >"$cg/memory.max"
	else
		cg=/sys/fs/cgroup/memory/sg-expert-bench
		mkdir -p "$cg"
		echo "$(bytes "$LIMIT")" >"$cg/memory.limit_in_bytes"
	fi
	bash -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' _ "$cg" "$@"
}

echo "== $(basename "$MODEL"): $(du -h "$MODEL" | cut -f1) under a memory limit of $LIMIT, $T threads, $N tokens"
# llama.cpp's CPU backend repacks K-quant weights into anonymous memory by default (--repack 1),
# which cannot fit under a limit below the file's size: it is OOM-killed (reported as such); with
# --repack 0 the weights stay in the file's mapping and page in and out under the limit.
# --n-cpu-moe only moves experts off a GPU: on a CPU-only build every layer is already there.
for repack in 1 0; do
	echo "-- llama.cpp (mmap, --repack $repack)"
	drop
	limited timeout "${PEER_TIMEOUT:-1800}" "$LLAMA/llama-bench" -m "$MODEL" -p 0 -n "$N" -r 1 -t "$T" --repack "$repack" -lm mmap -o md 2>&1 \
		| grep -E "^\||Killed|error" || echo "   (exit status $?: killed by the memory limit or the timeout)"
done
echo "-- saragossa --expert-cache auto"
drop
limited "$SG" bench -m "$MODEL" -p 0 -n "$N" -r 1 -t "$T" --expert-cache auto 2>&1 | grep -Ev "^(repetitions)"
