#!/usr/bin/env bash
# Kernel benches: builds bench/kernels/*.c against the library and runs them.
# The CPU kernel table goes to stdout and into the "CPU kernels" section of bench/RESULTS.md.
# Environment: BENCH_THREADS (default 2), BENCH_QUICK=1 for a shorter run.
#   bench/run.sh --build-only   only builds $BUILD/bench/bench_matvec (bench/forward_vs_llamacpp.sh
#                               takes its streaming-read bandwidth from it)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
mkdir -p "$BUILD/bench"
CFLAGS="-std=c17 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Iinclude -Isrc -pthread"
LIBS="$(pkg-config --libs jansson libmicrohttpd libcurl libcrypto libpcre2-8 libutf8proc fftw3f sndfile soxr libedit liburing 2>/dev/null) -lm -lpthread -ldl"
if nm "$BUILD/libsaragossa.a" 2>/dev/null | grep -q ' U cuda'; then
  LIBS="$LIBS -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudart -lcublas -lstdc++"
fi
cc $CFLAGS bench/kernels/bench_matvec.c -o "$BUILD/bench/bench_matvec" "$BUILD/libsaragossa.a" $LIBS
[ "${1:-}" = --build-only ] && exit 0

args=(--threads "${BENCH_THREADS:-2}" --markdown "$BUILD/bench/cpu_kernels.md")
[ "${BENCH_QUICK:-0}" = 1 ] && args+=(--quick)
"$BUILD/bench/bench_matvec" "${args[@]}"

# Replace the CPU kernels section of bench/RESULTS.md (create the file if needed).
python3 - "$BUILD/bench/cpu_kernels.md" <<'PY'
import sys, datetime, pathlib, os
table = pathlib.Path(sys.argv[1]).read_text()
res = pathlib.Path("bench/RESULTS.md")
begin, end = "<!-- cpu-kernels:begin -->", "<!-- cpu-kernels:end -->"
section = (f"{begin}\n## CPU kernels\n\nMeasured by `make bench` (bench/kernels/bench_matvec.c) on "
           f"{datetime.date.today().isoformat()}. Decode matvec: GB/s of weights (and MLX scales/biases) read "
           "per second; *cold* cycles through copies of the matrix filling more than the last-level cache, "
           "so weights come from DRAM; *hot* repeats one copy (resident in the cache when it fits). GEMM: "
           "128 tokens, GFLOP/s per CPU time, with the blocked GEMM kernels and with them switched off "
           "(`SARAGOSSA_CPU_GEMM=0`: the one-token kernel per token, the path before the GEMM). Each "
           "figure is the best of a few rounds. Types with GEMM kernels: Q8_0, Q4_0, Q5_0, Q4_K, Q6_K, "
           "MLX 4-bit (8-bit activations; AVX-512: 8 rows packed into dword lanes, one VNNI dot per "
           "4 elements x 8 rows x token) and F32, F16, BF16; the others loop the one-token kernel "
           "either way. MLX weights are bound as a model load binds them: MLX 4-bit with groups of 64 "
           "and 128 is repacked into one stream of [scale, bias, codes] groups (`SARAGOSSA_CPU_MLX_REPACK`). Load average while measuring (1/5/15 min): "
           f"{' / '.join(open('/proc/loadavg').read().split()[:3])} on {os.cpu_count()} cores.\n\n"
           "Reading it: on a machine whose two cores are shared with other work, wall-clock rates (the "
           "first two columns) measure the other work as much as the kernels. The *(cpu)* columns divide "
           "by the CPU time the bench's own threads got (getrusage), for the kernels and for the "
           "streaming read alike, and are the better estimate of what the kernels do on quiet cores; "
           "they are still pessimistic, since a thread that waits at a barrier for a descheduled "
           "partner spins on CPU time, and other tenants share the memory bandwidth and the caches. "
           "Repeat the run before trusting a single number.\n\n"
           f"{table}\n{end}\n")
text = res.read_text() if res.exists() else "# Benchmark results\n\n"
if begin in text and end in text:
    pre, rest = text.split(begin, 1)
    post = rest.split(end, 1)[1].lstrip("\n")
    text = pre + section + ("\n" + post if post else "")
else:
    text = text.rstrip("\n") + "\n\n" + section
res.write_text(text)
print("bench: wrote the CPU kernels section of bench/RESULTS.md")
PY
