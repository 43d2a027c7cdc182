#!/usr/bin/env bash
# Constrained-decoding bench on a real 262,144-token vocabulary (Gemma 3's, from its GGUF).
#   bench/grammar_bench.sh [MODEL.gguf]
# Builds the library if needed, dumps the vocabulary, compiles bench/grammar_bench.c and runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:-$(.venv/bin/python tools/fetch_models.py gemma3-270m | awk '{print $2}')}"
make -s build/libsaragossa.a
mkdir -p build/bench
.venv/bin/python bench/grammar_vocab.py "$model" build/bench/vocab.bin
cc -std=c17 -D_GNU_SOURCE -O2 -Iinclude -Isrc bench/grammar_bench.c build/libsaragossa.a \
  $(pkg-config --cflags --libs jansson) -lm -lpthread -o build/bench/grammar_bench
build/bench/grammar_bench build/bench/vocab.bin
