#!/usr/bin/env bash
# A/B of one switch on one binary: decode tok/s (saragossa bench, tg N after D tokens of context)
# for each value of FLAG, the values taken in turn K times over (so drift on the machine falls on
# every value alike), then a markdown table: per depth the runs of each value and the ratio of
# each value's mean to the first value's.
#   bench/flag_ab.sh -m MODEL [-d "1024 8192"] [-n 128] [-r 2] [-k 2] [-b cuda] FLAG V1 V2 [V3 ...]
# env: SG_BIN (build/saragossa); anything else exported (SARAGOSSA_KV_TYPE=f16 ...) reaches every run.
# FLAG SG_BIN compares builds instead: the values are saragossa binaries (the build before a change
# and after it, run in turn on one machine).
# Example: bench/flag_ab.sh -m qwen3-8b.gguf -d "1024 32768" SARAGOSSA_CUDA_ATTN_KPIPE 0 1
#          bench/flag_ab.sh -m qwen3-8b.gguf SG_BIN before/saragossa after/saragossa
set -euo pipefail
cd "$(dirname "$0")/.."
SG_BIN=${SG_BIN:-build/saragossa}
MODEL= DEPTHS=1024 N=128 REPS=2 K=2 BACKEND=cuda
while getopts "m:d:n:r:k:b:" o; do
  case $o in
  m) MODEL=$OPTARG ;; d) DEPTHS=$OPTARG ;; n) N=$OPTARG ;; r) REPS=$OPTARG ;; k) K=$OPTARG ;; b) BACKEND=$OPTARG ;;
  *) sed -n '2,9p' "$0" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
if [ -z "$MODEL" ] || [ $# -lt 3 ]; then sed -n '2,9p' "$0" >&2; exit 2; fi
FLAG=$1; shift
VALUES=("$@")
declare -A runs
for d in $DEPTHS; do
  for ((i = 0; i < K; i++)); do
    for v in "${VALUES[@]}"; do
      if [ "$FLAG" = SG_BIN ]; then bin=$v envs=(); else bin=$SG_BIN envs=("$FLAG=$v"); fi
      out=$(env "${envs[@]}" "$bin" bench -m "$MODEL" --backend "$BACKEND" -r "$REPS" -p 0 -n "$N" -d "$d" 2>&1) || {
        echo "$FLAG=$v at depth $d failed:" >&2; echo "$out" | tail -5 >&2; exit 1; }
      t=$(echo "$out" | awk '/^tg/ {print $2; exit}')
      [ -n "$t" ] || { echo "no tg line for $FLAG=$v at depth $d:" >&2; echo "$out" | tail -5 >&2; exit 1; }
      runs[$d,$v]="${runs[$d,$v]:+${runs[$d,$v]} }$t"
      echo "depth $d $FLAG=$v: $t tok/s" >&2
    done
  done
done
mean() { echo "$1" | tr ' ' '\n' | awk '{s += $1; n++} END {printf "%.2f", s / n}'; }
hdr="| depth |"; sep="|---:|"
for v in "${VALUES[@]}"; do hdr="$hdr $FLAG=$v |"; sep="$sep---:|"; done
for v in "${VALUES[@]:1}"; do hdr="$hdr $v / ${VALUES[0]} |"; sep="$sep---:|"; done
echo "tg$N tok/s, $(basename "$MODEL"), --backend $BACKEND, $REPS repetitions a run, $K runs a value"
echo
echo "$hdr"
echo "$sep"
for d in $DEPTHS; do
  row="| $d |"
  for v in "${VALUES[@]}"; do row="$row $(echo "${runs[$d,$v]}" | sed 's/ /, /g') |"; done
  m0=$(mean "${runs[$d,${VALUES[0]}]}")
  for v in "${VALUES[@]:1}"; do row="$row $(awk -v a="$(mean "${runs[$d,$v]}")" -v b="$m0" 'BEGIN {printf "%.3f", a / b}') |"; done
  echo "$row"
done
