#!/usr/bin/env bash
# The GPU checks and measurements a change to the CUDA backend needs, for a GPU machine that may not
# build the project. Run from the repository root, in parts when a command's time is limited (STEPS
# picks them, in this order):
#   STEPS=pack bash bench/cuda_pending.sh                      (where nvcc links; no GPU needed)
#   STEPS="unpack tests" bash bench/cuda_pending.sh            (on the GPU machine)
#   STEPS="unpack models ab" VOCAB=ggml-vocab-qwen2.gguf BEFORE_BIN=before/saragossa bash bench/cuda_pending.sh
# pack    make CUDA=1 (in BUILD), then build/gpu.tar.xz: saragossa, test_unit and libsaragossa.so stripped, and the
#         shared libraries they load outside the C runtime (a bare CUDA image lacks jansson, curl,
#         pcre2, criterion, ...), about 25 MB; take it to a GPU machine whose image cannot build the
#         project (a second pack, unpacked elsewhere, is the BEFORE_BIN of a side-by-side)
# unpack  build/gpu.tar.xz into build/gpu: the later steps then run build/gpu's binaries with
#         LD_LIBRARY_PATH=build/gpu/lib
# build   make CUDA=1 (all cores) on a machine that has the project's dependencies
# tests   the CUDA unit tests (build/test_unit --filter 'cuda*/*'), the parity suite on the GPU
#         (tests/e2e/test_parity*.py, python3 with numpy and pytest), then compute-sanitizer memcheck
#         and racecheck on SANITIZE (unit tests to check; none by default) where the tool is found
# models  random-weight files in WORK: Qwen3-8B and Qwen3-30B-A3B shapes as Q4_K_M GGUF (written
#         directly; VOCAB: a GGUF holding a Qwen vocabulary, as for bench/cuda_peer.sh) and a
#         Qwen3.6-35B-A3B-shaped MLX 4-bit folder of HYBRID_LAYERS layers (no vocabulary needed)
# ab      bench/flag_ab.sh: "builds", BEFORE_BIN against this build (SG_BIN) on both GGUF files at
#         DEPTHS, each run in turn; "hybrid", SARAGOSSA_CUDA_GRAPHS_HYBRID 0 1 on the hybrid folder
# env: BUILD (build: where the pack step builds with CUDA=1), AB ("builds hybrid": which of the ab
#      step's runs; each takes a few minutes), WORK (/tmp/peer), DEPTHS ("1024 8192"), HYBRID_LAYERS
#      (8), PY (python3 with numpy), OUT (a folder that also receives the logs and tables; none),
#      SG_BIN (build/saragossa, build/gpu's after unpack), TEST_BIN (likewise), BEFORE_BIN, SANITIZE
# A switch written where no GPU runs stays off until these have run; one that measures faster and
# passes its tests becomes its flag's default in src/base/flags.c, with the numbers in
# bench/RESULTS.md, and one that does not leaves src/.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-build tests models ab}
AB=${AB:-builds hybrid}
WORK=${WORK:-/tmp/peer}
DEPTHS=${DEPTHS:-1024 8192}
HYBRID_LAYERS=${HYBRID_LAYERS:-8}
PY=${PY:-python3}
SG_BIN=${SG_BIN:-build/saragossa}
TEST_BIN=${TEST_BIN:-build/test_unit}
OUT=${OUT:-}
BUILD=${BUILD:-build} # the pack step's build folder (a CUDA=0 build elsewhere keeps its own)
export PYTHONUNBUFFERED=1
T0=$SECONDS
ts() { echo "[$(date +%H:%M:%S) +$((SECONDS - T0))s] $*"; }
keep() { [ -z "$OUT" ] || { mkdir -p "$OUT" && cp "$1" "$OUT/"; }; }
has() { case " $STEPS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
ab() { case " $AB " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
mkdir -p "$WORK"
DENSE="$WORK/qwen3-8b-random-36l-Q4_K_M.gguf"
MOE="$WORK/qwen3-30b-a3b-random-48l-Q4_K_M.gguf"
HYB="$WORK/qwen36-random-${HYBRID_LAYERS}l"

if has pack; then
	ts "build (CUDA=1) and pack"
	make -j"$(nproc)" CUDA=1 BUILD="$BUILD" "$BUILD/saragossa" "$BUILD/test_unit" "$BUILD/libsaragossa.so" >"$WORK/build.log" 2>&1 || { tail -30 "$WORK/build.log"; exit 1; }
	rm -rf build/gpu build/gpu.tar.xz
	mkdir -p build/gpu/lib
	strip -o build/gpu/saragossa "$BUILD/saragossa"
	strip -o build/gpu/test_unit "$BUILD/test_unit"
	strip -o build/gpu/libsaragossa.so "$BUILD/libsaragossa.so" # the ctypes benches (qwen_tts_bench.py, embed_gpu.py)
	ldd "$BUILD/saragossa" "$BUILD/test_unit" | awk '/=> \// {print $3}' | sort -u |
		grep -v -E '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|libresolv)\.so' | xargs -r cp -L -t build/gpu/lib
	tar -C build -cJf build/gpu.tar.xz gpu
	rm -rf build/gpu
	ts "build/gpu.tar.xz: $(du -h build/gpu.tar.xz | cut -f1)"
fi

if has unpack; then
	[ -f build/gpu.tar.xz ] || { ts "no build/gpu.tar.xz: run the pack step first"; exit 1; }
	rm -rf build/gpu
	tar -C build -xJf build/gpu.tar.xz
fi
if [ -x build/gpu/saragossa ]; then
	SG_BIN=build/gpu/saragossa TEST_BIN=build/gpu/test_unit
	export LD_LIBRARY_PATH="$PWD/build/gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

if has build; then
	ts "build (CUDA=1)"
	make -j"$(nproc)" CUDA=1 build/saragossa build/test_unit >"$WORK/build.log" 2>&1 || { tail -30 "$WORK/build.log"; exit 1; }
fi

if has tests; then
	ts "CUDA unit tests"
	rc=0
	"$TEST_BIN" --jobs=1 --filter 'cuda*/*' >"$WORK/tests.log" 2>&1 || rc=$?
	grep -E 'Synthesis|FAIL|CRASH|skipp' "$WORK/tests.log" | tail -20
	ts "parity on the GPU (eval, SARAGOSSA_BACKEND=cuda)"
	SARAGOSSA_BACKEND=cuda SARAGOSSA_BIN="$PWD/$SG_BIN" "$PY" -m pytest -q -p no:cacheprovider tests/e2e/test_parity.py \
		tests/e2e/test_parity_hybrid.py >>"$WORK/tests.log" 2>&1 || rc=$?
	tail -3 "$WORK/tests.log"
	keep "$WORK/tests.log"
	if command -v compute-sanitizer >/dev/null; then
		: >"$WORK/sanitizer.log"
		for tool in memcheck racecheck; do
			for t in ${SANITIZE:-}; do
				ts "compute-sanitizer $tool: $t" | tee -a "$WORK/sanitizer.log"
				compute-sanitizer --tool "$tool" --error-exitcode 9 "$TEST_BIN" --jobs=1 \
					--filter "cuda/$t" >"$WORK/sanitizer-one.log" 2>&1 || rc=$?
				cat "$WORK/sanitizer-one.log" >>"$WORK/sanitizer.log"
				grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|Synthesis' "$WORK/sanitizer-one.log" | tail -3
			done
		done
		keep "$WORK/sanitizer.log"
	else
		ts "no compute-sanitizer on PATH: the sanitizer runs are skipped"
	fi
	[ "$rc" = 0 ] || { ts "tests failed (exit $rc): see $WORK/tests.log"; exit "$rc"; }
fi

if has models; then
	for am in "qwen3 $DENSE" "qwen3moe $MOE"; do
		set -- $am
		[ ! -f "$2" ] || continue
		VOCAB=${VOCAB:?VOCAB: a GGUF holding a Qwen vocabulary (see bench/cuda_peer.sh)}
		ts "writing $2"
		"$PY" tools/make_random_model.py "$1" --gguf "$VOCAB" --gguf-type q4_k_m --out "$WORK"
		[ -f "$2" ] || { ts "make_random_model.py wrote no $2"; exit 1; }
	done
	if [ ! -d "$HYB" ]; then
		ts "writing $HYB"
		"$PY" tools/make_random_model.py qwen36 --layers "$HYBRID_LAYERS" --bits 4 --group 64 --out "$WORK/hyb.tmp"
		mv "$(find "$WORK/hyb.tmp" -name config.json -printf '%h\n' | head -1)" "$HYB"
		rm -rf "$WORK/hyb.tmp"
	fi
fi

if has ab; then
	if ab builds; then
		[ -n "${BEFORE_BIN:-}" ] || { ts "ab builds: BEFORE_BIN (the build to compare against) is not set"; exit 1; }
		for m in "$DENSE" "$MOE"; do
			[ -f "$m" ] || { ts "no $m: run the models step first"; exit 1; }
			ts "$BEFORE_BIN against $SG_BIN on $(basename "$m")"
			bench/flag_ab.sh -m "$m" -d "$DEPTHS" SG_BIN "$BEFORE_BIN" "$SG_BIN" | tee "$WORK/ab-builds-$(basename "$m" .gguf).md"
			keep "$WORK/ab-builds-$(basename "$m" .gguf).md"
		done
	fi
	if ab hybrid; then
		[ -d "$HYB" ] || { ts "no $HYB: run the models step first"; exit 1; }
		ts "SARAGOSSA_CUDA_GRAPHS_HYBRID on $(basename "$HYB")"
		SG_BIN=$SG_BIN bench/flag_ab.sh -m "$HYB" -d 1024 SARAGOSSA_CUDA_GRAPHS_HYBRID 0 1 | tee "$WORK/ab-graphs-hybrid.md"
		keep "$WORK/ab-graphs-hybrid.md"
	fi
fi
ts "done"
