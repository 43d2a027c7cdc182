#!/usr/bin/env bash
# Builds llama.cpp (the speed and output peer) from the llama-cpp-python source package, which
# vendors it, into the cache: ${SARAGOSSA_CACHE_DIR:-~/.cache/saragossa}/llama.cpp/<version>/build/bin.
# Only the tools the benches use are built (llama-bench, llama-completion, llama-simple, llama-tokenize). Nothing is
# committed. Prints the bin folder. Native CPU tuning is off (a native build can fault on a CPU
# other than the build machine's): the CPU build takes AVX2/FMA/F16C; CUDA=1 builds the CUDA
# backend (sm_90, no flash-attention kernels: half the build time) with every CPU variant as
# loadable backends beside the binaries, picked at run time (the folder carries to a GPU machine
# that cannot build; --n-cpu-moe runs experts on that machine's best CPU kernels).
set -euo pipefail
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
CACHE="${SARAGOSSA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/saragossa}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || PY=python3
SRC="$CACHE/llama.cpp/$VERSION"
SDIST="$CACHE/pypi/llama_cpp_python-$VERSION.tar.gz"
CUDA="${CUDA:-0}"
BUILD="$SRC/build$([ "$CUDA" = 1 ] && echo -cuda || true)"

if [ ! -f "$SDIST" ]; then
	mkdir -p "$CACHE/pypi"
	"$PY" -m pip download --no-deps --no-binary :all: -q -d "$CACHE/pypi" "llama-cpp-python==$VERSION" >&2
fi
if [ ! -f "$SRC/CMakeLists.txt" ]; then
	mkdir -p "$SRC"
	tar xzf "$SDIST" -C "$SRC" --strip-components=3 "llama_cpp_python-$VERSION/vendor/llama.cpp"
fi
if [ ! -x "$BUILD/bin/llama-simple" ]; then
	cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF \
		-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_SERVER=OFF \
		$([ "$CUDA" = 1 ] && echo "-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_FA=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DBUILD_SHARED_LIBS=ON" \
			|| echo "-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON") >&2
	cmake --build "$BUILD" -j"$(nproc)" --target llama-bench llama-completion llama-simple llama-tokenize >&2
	if [ "$CUDA" = 1 ]; then # the loadable backends
		cmake --build "$BUILD" -j"$(nproc)" --target ggml-cuda $(cmake --build "$BUILD" --target help | grep -oE 'ggml-cpu-[a-z0-9_]+' | grep -v feats | sort -u) >&2
	fi
fi
echo "$BUILD/bin"
