#!/usr/bin/env bash
# Builds and runs the CUDA kernel benches against build/libsaragossa.a (make CUDA=1 first).
# Usage: bench/kernels/cuda/run.sh [--quick]
set -euo pipefail
cd "$(dirname "$0")/../../.."
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
mkdir -p build
cc -O2 -std=c17 -D_GNU_SOURCE -DSG_CUDA=1 -Iinclude -Isrc -isystem "$CUDA_HOME/include" \
	bench/kernels/cuda/gemv_bench.c build/libsaragossa.a -L"$CUDA_HOME/lib64" -Wl,-rpath,"$CUDA_HOME/lib64" \
	-lcudart -lcublas -lstdc++ -lm -lpthread -ldl -o build/gemv_bench
[ "${BUILD_ONLY:-0}" = 1 ] || build/gemv_bench "$@"
