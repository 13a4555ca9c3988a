# pipegen — build, test and run.
#   make            build/pipegen, the CPU runtime, piperun
#   make run        generate, build and train the example pipeline on the CPU
#   make test       the whole suite (installs missing Debian packages as root)
#   make bench      benchmarks (bench/)
#   make fuzz       fuzz every parser of outside input (tests/fuzz.sh), FUZZ_SECONDS each (default 600)
#   make cuda       compile every CUDA file (nvcc); done by `make test` too
#   make test-gpu   build and run the CUDA kernel and stage tests (needs a GPU)
#   make bench-gpu  GPT-2 small on the GPU against PyTorch, MFU (bench/gpu/; needs a GPU)
# CUDA=1 builds into build-cuda/ with the CUDA runtime: `make CUDA=1
# build-cuda/<model>/stages` links the generated stages for the GPU.
# SAN=1 builds into build-san/ with ASan and UBSan.

CC      ?= cc
SAN     ?= 0
CUDA    ?= 0
ifeq ($(CUDA),1)
BUILD   ?= build-cuda
endif
ifeq ($(SAN),1)
BUILD   ?= build-san
SANFLAGS = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
OPT      = -O1
else
BUILD   ?= build
SANFLAGS =
OPT      = -O2
endif
CSTD     = -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE
WARN     = -Wall -Wextra -Werror
CFLAGS  ?= $(OPT) -g
ALLCFLAGS = $(CSTD) $(WARN) $(CFLAGS) $(SANFLAGS) -Idsl -Icodegen -Iruntime/core -Iruntime/cpu -I$(BUILD)/gen $(filter-out none,$(BLAS_CFLAGS))
LDLIBS_RT = -lopenblas -lpthread -lm
RE2C     ?= re2c
LEMON    ?= lemon
PYTHON   ?= /usr/bin/python3
# The CUDA toolkit: CUDA_HOME, else /usr/local/cuda, else the nvcc on PATH.
CUDA_HOME ?= $(or $(wildcard /usr/local/cuda),$(patsubst %/bin/nvcc,%,$(shell command -v nvcc 2>/dev/null)),/usr/local/cuda)
NVCC     ?= $(CUDA_HOME)/bin/nvcc
export PYTHON CUDA_HOME NVCC

# OpenBLAS's own cblas.h (tools/deps.sh probes: compile, link and run of
# openblas_set_num_threads + cblas_sgemm). Probed once per top-level make;
# `make`, `make run` and `make test` install it first (as root) and then build
# in a sub-make, which probes again if it was missing.
ifneq ($(PG_BLAS_OK),1)
BLAS_CFLAGS := $(shell tools/deps.sh blas-cflags 2>/dev/null)
PG_BLAS_OK := $(if $(filter none,$(BLAS_CFLAGS)),0,1)
endif
export BLAS_CFLAGS PG_BLAS_OK
BLAS_GUARD = @[ "$(PG_BLAS_OK)" = 1 ] || { tools/deps.sh build; \
    echo "pipegen: OpenBLAS was not found when make started; run 'make' (it checks and installs dependencies first)" >&2; exit 1; }

# ---- the compiler: dsl/ + codegen/ -----------------------------------------
DSL_SRC  := $(filter-out dsl/fuzz_%.c,$(wildcard dsl/*.c))
CG_SRC   := $(wildcard codegen/*.c)
GEN_SRC  := $(BUILD)/gen/lexer.c $(BUILD)/gen/pipe.c
FE_OBJ   := $(patsubst %.c,$(BUILD)/obj/%.o,$(DSL_SRC)) $(BUILD)/obj/gen/lexer.o $(BUILD)/obj/gen/pipe.o
CG_OBJ   := $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out codegen/main.c,$(CG_SRC)))

# ---- the runtime: core + cpu ----------------------------------------------
RT_CORE  := $(filter-out runtime/core/piperun.c runtime/core/pipedata.c,$(wildcard runtime/core/*.c))
RT_CPU   := $(wildcard runtime/cpu/*.c)
RT_OBJ   := $(patsubst %.c,$(BUILD)/obj/%.o,$(RT_CORE) $(RT_CPU))
CUDA_SRC := $(wildcard runtime/cuda/*.cu)
CUDA_OBJ := $(patsubst runtime/cuda/%.cu,$(BUILD)/cuda/%.o,$(CUDA_SRC))
CUDA_TEST_OBJ := $(patsubst tests/gpu/%.cu,$(BUILD)/cuda-tests/%.o,$(wildcard tests/gpu/*.cu))
NVCCFLAGS = -std=c++17 -O2 -arch=sm_90 -Xcompiler -Wall,-Wextra,-Werror -Iruntime/core -Iruntime/cuda
NVCC_FOUND = @[ -x $(NVCC) ] || { echo "nvcc not found at $(NVCC) (set CUDA_HOME or NVCC): cannot compile CUDA files"; exit 1; }

EXAMPLES := $(wildcard examples/*.pipe)

.PHONY: all deps test-deps run test bench bench-gpu fuzz cuda cuda-test-build test-gpu clean san-all binaries test-fresh
.SUFFIXES:

# `all` checks (and as root installs) the dependencies, then builds in a
# sub-make so that what was just installed is seen.
all: deps
	@$(MAKE) --no-print-directory binaries

binaries: $(BUILD)/pipegen $(BUILD)/libpgrt_cpu.a $(BUILD)/piperun $(BUILD)/pipedata

deps:
	@tools/deps.sh build
test-deps:
	@tools/deps.sh test

# re2c and lemon output is generated here, never committed; flags keep it
# byte-stable (no dates, no versions).
$(BUILD)/gen/lexer.c: dsl/lexer.re dsl/ast.h | $(BUILD)/gen/pipe.c
	@mkdir -p $(dir $@)
	$(RE2C) --no-generation-date --no-version -W --input-encoding ascii -o $@ $<

$(BUILD)/gen/pipe.c: dsl/pipe.y
	@mkdir -p $(dir $@)
	cp dsl/pipe.y $(BUILD)/gen/pipe.y
	cd $(BUILD)/gen && $(LEMON) -s -T/usr/share/lemon/lempar.c pipe.y >/dev/null
	rm -f $(BUILD)/gen/pipe.y $(BUILD)/gen/pipe.out

$(BUILD)/gen/pipe.h: $(BUILD)/gen/pipe.c

$(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) -Wno-unused-parameter -Wno-unused-variable -Wno-sign-compare -MMD -MP -c -o $@ $<

$(BUILD)/obj/%.o: %.c $(BUILD)/gen/pipe.c
	$(if $(filter runtime/cpu/%,$<),$(BLAS_GUARD))
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/libpgfront.a: $(FE_OBJ) $(CG_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/pipegen: $(BUILD)/obj/codegen/main.o $(BUILD)/libpgfront.a
	$(CC) $(ALLCFLAGS) -o $@ $^ -lm

$(BUILD)/libpgrt_cpu.a: $(RT_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/piperun: $(BUILD)/obj/runtime/core/piperun.o
	$(CC) $(ALLCFLAGS) -o $@ $^

# pipedata: .pgd files from plain files (text -> a token stream)
$(BUILD)/pipedata: $(BUILD)/obj/runtime/core/pipedata.o $(BUILD)/libpgrt_cpu.a
	$(CC) $(ALLCFLAGS) -o $@ $^

# ---- stage binaries: build/<model>/stage<k> from generated/<model>/ --------
# `make $(BUILD)/<model>/stages` links every generated stage of one model;
# with CUDA=1 against the CUDA runtime (the same stage<k>.c).
ifeq ($(CUDA),1)
$(BUILD)/%/stages: generated/%/plan.json $(BUILD)/libpgrt_cuda.a
	@mkdir -p $(BUILD)/$*
	@set -e; for f in generated/$*/stage*.c; do \
	  k=$$(basename $$f .c); \
	  echo "  CC $(BUILD)/$*/$$k (cuda)"; \
	  $(CC) $(ALLCFLAGS) -Igenerated/$* -o $(BUILD)/$*/$$k $$f $(BUILD)/libpgrt_cuda.a $(LDLIBS_CUDA); \
	done; touch $@
else
$(BUILD)/%/stages: generated/%/plan.json $(BUILD)/libpgrt_cpu.a
	@mkdir -p $(BUILD)/$*
	@set -e; for f in generated/$*/stage*.c; do \
	  k=$$(basename $$f .c); \
	  echo "  CC $(BUILD)/$*/$$k"; \
	  $(CC) $(ALLCFLAGS) -Igenerated/$* -o $(BUILD)/$*/$$k $$f $(BUILD)/libpgrt_cpu.a $(LDLIBS_RT); \
	done; touch $@
endif

# ---- the CUDA stage runtime: libpgrt_cuda.a ---------------------------------
# The core objects (not net.c), every CUDA object, and net.c once more with its
# names renamed (runtime/cuda/net_rename.h) under the CUDA transport cuda_net.cu.
LDLIBS_CUDA = -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcublas -lcublasLt -lnccl -lstdc++ -lpthread -lm
CUDA_NET_OBJ := $(BUILD)/cuda/cuda_net.o
RT_CUDA_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out runtime/core/net.c,$(RT_CORE))) \
               $(BUILD)/cuda/net_tcp.o $(CUDA_OBJ)

$(BUILD)/cuda/net_tcp.o: runtime/core/net.c runtime/cuda/net_rename.h runtime/cuda/pg_tcp_net.h
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) -Iruntime/cuda -include runtime/cuda/net_rename.h -MMD -MP -c -o $@ $<

$(BUILD)/libpgrt_cuda.a: $(RT_CUDA_OBJ)
	rm -f $@ && ar rcs $@ $^

# ---- CUDA: every .cu compiles in every test run, GPU or not ---------------
# Objects are real targets with nvcc -MMD dependencies: only changed files recompile.
cuda: $(CUDA_OBJ) $(CUDA_TEST_OBJ)
	@echo "cuda: $(words $(CUDA_OBJ) $(CUDA_TEST_OBJ)) files compiled and up to date"

$(BUILD)/cuda/%.o: runtime/cuda/%.cu
	$(NVCC_FOUND)
	@mkdir -p $(dir $@)
	@echo "  NVCC $<"
	@$(NVCC) $(NVCCFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/cuda-tests/%.o: tests/gpu/%.cu
	$(NVCC_FOUND)
	@mkdir -p $(dir $@)
	@echo "  NVCC $<"
	@$(NVCC) $(NVCCFLAGS) -MMD -MP -c -o $@ $<

# GPU kernel tests (tests/gpu/): every op against host references; needs a GPU
# ("no GPU found" and a failure without one).
$(BUILD)/cuda-tests/test_ops_gpu: $(BUILD)/cuda-tests/test_ops_gpu.o $(filter-out $(CUDA_NET_OBJ),$(CUDA_OBJ))
	$(NVCC) -arch=sm_90 -o $@ $^ -lcublas -lcublasLt

# tests/gpu/run_gpu_tests.sh runs everything in one go: the op tests above,
# graph replay, gpt_tiny on 1 and 4 stages with and without CUDA graphs, other
# schedules, checkpoint modes, bf16, dropout, against the CPU, a killed stage.
test-gpu: all $(BUILD)/cuda-tests/test_ops_gpu
	tests/gpu/run_gpu_tests.sh

# ---- the two commands -----------------------------------------------------
# make run: generate examples/gpt_char.pipe into build/run/gpt_char (so an edit
# to the example takes effect; generated/ stays the committed, diff-tested
# copy), build its stages and train it (tools/run_example.sh).
run: all
	@tools/run_example.sh

# The suite runs pipegen and the runtime under ASan+UBSan (build-san/) and the
# stage binaries of the long end-to-end runs from build/. Without a CUDA
# toolkit the CUDA builds are skipped here and tests/cuda_*.t report the skip.
test: test-deps
	@$(MAKE) --no-print-directory binaries
	@$(MAKE) --no-print-directory SAN=1 binaries
	@if [ -x "$(NVCC)" ]; then $(MAKE) --no-print-directory cuda-test-build; \
	 else echo "make test: nvcc not found at $(NVCC): the CUDA files are not compiled (tests/cuda_*.t skip)"; fi
	@prove -f tests/*.t

cuda-test-build: cuda
	@$(MAKE) --no-print-directory CUDA=1 build-cuda/mlp/stages build-cuda/gpt_char/stages build-cuda/bench/gemm_peak

san-all: binaries

# make test-fresh: `make run` and `make test` in a new Debian 12 root, with and
# without the CUDA toolkit (tools/fresh_check.sh; root, downloads packages).
test-fresh:
	@tools/fresh_check.sh

bench: all
	@bench/run.sh

# GPU benchmark (bench/gpu/run.sh; needs a GPU). Its C part, the bf16 GEMM
# peak timer, is compiled by `make test` too (tests/cuda_link.t checks it).
$(BUILD)/bench/gemm_peak: bench/gpu/gemm_peak.c
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) $(CFLAGS) -I$(CUDA_HOME)/include -o $@ $< $(LDLIBS_CUDA)

bench-gpu: all
	@bench/gpu/run.sh

fuzz: all
	@tests/fuzz.sh $${FUZZ_SECONDS:-600}

clean:
	rm -rf build build-san build-cuda

-include $(shell find build build-san build-cuda -name '*.d' 2>/dev/null)
