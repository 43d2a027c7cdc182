#!/usr/bin/env bash
# Interleaved rounds of whole jfk.wav runs, whisper.cpp beside saragossa (and saragossa variants
# given as environment assignments), for cores shared with other work: each round runs every
# engine once, so load that comes and goes falls on all of them alike.
#   bench/whisper_vs_cpp_rounds.sh THREADS ROUNDS ['VAR=0 VAR2=1' | bin=OTHER_WHISPER_BENCH ...]
# (bin= runs another build of bench/whisper_bench.c, e.g. one of the base branch, as a variant)
# Prints one line per run: the process CPU time (user + sys, /usr/bin/time) and the wall time of
# the whole run (load, mel, encode, greedy decode). Run bench/whisper_vs_cpp.sh once first: it
# builds whisper.cpp, the ggml file and build/bench/whisper_bench.
set -euo pipefail
cd "$(dirname "$0")/.."
threads="${1:-1}"
rounds="${2:-3}"
shift 2 || true
work=build/bench/whispercpp
model="$work/ggml-tiny.en.bin"
wav="$work/jfk.wav"
[ -x "$work/build/bin/whisper-cli" ] && [ -x build/bench/whisper_bench ] || {
	echo "run bench/whisper_vs_cpp.sh first" >&2
	exit 1
}
tf="$(mktemp)"
trap 'rm -f "$tf"' EXIT
one() { # label, command...: "label cpu wall"
	local label="$1"
	shift
	/usr/bin/time -o "$tf" -f "%U %S %e" "$@" >/dev/null 2>&1
	awk -v l="$label" '{printf "%-40s cpu %.2f s  wall %.2f s\n", l, $1 + $2, $3}' "$tf"
}
for r in $(seq "$rounds"); do
	echo "-- round $r (load average $(cut -d' ' -f1-3 /proc/loadavg))"
	one "whisper.cpp" "$work/build/bin/whisper-cli" -m "$model" -f "$wav" -t "$threads" -nt -bs 1 -bo 1 -nf -ng
	one "saragossa" build/bench/whisper_bench "$model" "$wav" "$threads" 1
	for v in "$@"; do
		case "$v" in
		bin=*) one "saragossa ${v#bin=}" "${v#bin=}" "$model" "$wav" "$threads" 1 ;;
		*) one "saragossa $v" env $v build/bench/whisper_bench "$model" "$wav" "$threads" 1 ;;
		esac
	done
done
