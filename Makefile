# pipegen — build, test and run.
#   make            build/pipegen, the CPU runtime, piperun
#   make run        generate, build and train the example pipeline on the CPU
#   make test       the whole suite (installs missing Debian packages as root)
#   make test-matrix the whole bitwise matrix of convolutional networks (tests/conv_matrix.sh, ~30 min)
#   make bench      benchmarks (bench/)
#   make fuzz       fuzz every parser of outside input (tests/fuzz.sh), FUZZ_SECONDS each (default 600)
#   make cuda       compile every CUDA file (nvcc); done by `make test` too
#   make gpu-bundle the GPU bundle: build/gpu-bundle.tar.gz, everything a GPU host
#                   needs beyond driver, toolkit, cuBLAS, NCCL and a C compiler
#   make test-gpu   the GPU tests through the unpacked bundle (needs a GPU)
#   make bench-gpu  GPT-2 small on the GPU against PyTorch, MFU (needs a GPU)
# CUDA=1 builds into build-cuda/ with the CUDA runtime: `make CUDA=1
# build-cuda/<model>/stages` links the generated stages for the GPU.
# SAN=1 builds into build-san/ with ASan and UBSan.
#   make install PREFIX=DIR   bin/ (pipegen, piperun, pipedata), lib/pipegen/ (the
#                   runtimes), include/pipegen/ (what generated stages include)
# V=1 prints every command in full; otherwise one short line each (`CC dsl/ast.c`).

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
ALLCFLAGS = $(CSTD) $(WARN) $(CFLAGS) $(SANFLAGS) -Idsl -Icodegen -Iruntime/core -Iruntime/cpu -I$(BUILD)/gen
LDLIBS_RT = -lpthread -lm
RE2C     ?= re2c
LEMON    ?= lemon
LEMPAR   ?= /usr/share/lemon/lempar.c
PYTHON   ?= /usr/bin/python3
# The CUDA toolkit: CUDA_HOME, else /usr/local/cuda, else the nvcc on PATH.
CUDA_HOME ?= $(or $(wildcard /usr/local/cuda),$(patsubst %/bin/nvcc,%,$(shell command -v nvcc 2>/dev/null)),/usr/local/cuda)
NVCC     ?= $(CUDA_HOME)/bin/nvcc
export PYTHON CUDA_HOME NVCC RE2C LEMON LEMPAR

# One line per command: `$(call say,CC,$<)` in front of a recipe line prints
# "  CC     dsl/ast.c" and hides the command; with V=1 it is nothing, and make
# prints the command itself. Inside a shell loop, `$(call say_sh,TAG,WHAT)`
# echoes the same short line (with V=1 the shell traces the loop's commands).
V ?= 0
ifeq ($(V),1)
say =
say_sh = set -x;
else
say = @printf '  %-6s %s\n' '$(1)' '$(2)';
say_sh = printf '  %-6s %s\n' '$(1)' "$(2)";
endif

# ---- the compiler: dsl/ + codegen/ -----------------------------------------
DSL_SRC  := $(wildcard dsl/*.c)
CG_SRC   := $(wildcard codegen/*/*.c codegen/gen/layers/*.c)  # codegen/README.md: cli -> choose -> gen -> schedule, base; gen/layers/: one entry per layer kind
GEN_SRC  := $(BUILD)/gen/lexer.c $(BUILD)/gen/pipe.c
FE_OBJ   := $(patsubst %.c,$(BUILD)/obj/%.o,$(DSL_SRC)) $(BUILD)/obj/gen/lexer.o $(BUILD)/obj/gen/pipe.o
CG_OBJ   := $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out codegen/cli/main.c,$(CG_SRC))) \
            $(BUILD)/obj/runtime/core/io_atomic.o \
            $(BUILD)/obj/runtime/core/json.o \
            $(BUILD)/obj/runtime/core/pytool.o      # gen writes its files atomically too; one JSON reader; tools/*.py

# ---- the runtime: core + cpu ----------------------------------------------
RT_CORE  := $(wildcard runtime/core/*.c)
RT_CPU   := $(wildcard runtime/cpu/*.c)
RT_OBJ   := $(patsubst %.c,$(BUILD)/obj/%.o,$(RT_CORE) $(RT_CPU))
CUDA_SRC := $(wildcard runtime/cuda/*.cu)
# nvcc's objects live in build-cuda/ whatever BUILD is, so `make cuda` and
# `make CUDA=1` (and so `make test`) compile each .cu file once
CUDA_OBJ := $(patsubst runtime/cuda/%.cu,build-cuda/cuda/%.o,$(CUDA_SRC))
CUDA_TEST_OBJ := $(patsubst tests/gpu/%.cu,build-cuda/cuda-tests/%.o,$(wildcard tests/gpu/*.cu))
# static gates: no register spills, no local memory in any kernel (ptxas warnings as errors)
NVCCFLAGS = -std=c++17 -O2 -arch=sm_90 -Xcompiler -Wall,-Wextra,-Werror -Xptxas -warn-spills,-warn-lmem-usage,-Werror \
            -Iruntime/core -Iruntime/cuda
# the objects depend on the flags too (a stamp rewritten when they change)
NVCC_STAMP := build-cuda/.nvccflags
NVCC_FOUND = @[ -x $(NVCC) ] || { echo "nvcc not found at $(NVCC) (set CUDA_HOME or NVCC): cannot compile CUDA files"; exit 1; }

EXAMPLES := $(wildcard examples/*.pipe)

.PHONY: all deps test-deps install run test test-matrix test-slurm bench bench-gpu fuzz cuda cuda-if-found test-gpu clean san-all binaries test-fresh \
        gpu-bundle gpu-bundle-dir
.SUFFIXES:

# `all` checks (and as root installs) the dependencies, then builds in a
# sub-make so that what was just installed is seen.
all: deps
	@$(MAKE) --no-print-directory $(if $(filter 1,$(V)),,-s) binaries

binaries: $(BUILD)/pipegen $(BUILD)/libpgrt_cpu.a $(BUILD)/piperun $(BUILD)/pipedata

deps:
	@tools/deps.sh build
test-deps:
	@tools/deps.sh test

# re2c and lemon output is generated here, never committed; flags keep it
# byte-stable (no dates, no versions).
$(BUILD)/gen/lexer.c: dsl/lexer.re dsl/ast.h | $(BUILD)/gen/pipe.c
	@mkdir -p $(dir $@)
	$(call say,RE2C,$<)$(RE2C) --no-generation-date --no-version -W --input-encoding ascii -o $@ $<

$(BUILD)/gen/pipe.c: dsl/pipe.y
	@mkdir -p $(dir $@)
	@# run on dsl/pipe.y itself, so its #line directives name dsl/pipe.y: a debugger lands in the grammar
	$(call say,LEMON,dsl/pipe.y)$(LEMON) -s -T$(LEMPAR) -d$(BUILD)/gen dsl/pipe.y >/dev/null && rm -f $(BUILD)/gen/pipe.out

$(BUILD)/gen/pipe.h: $(BUILD)/gen/pipe.c

$(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c
	@mkdir -p $(dir $@)
	$(call say,CC,$<)$(CC) $(ALLCFLAGS) -Wno-unused-parameter -Wno-unused-variable -Wno-sign-compare -MMD -MP -c -o $@ $<

$(BUILD)/obj/%.o: %.c $(BUILD)/gen/pipe.c
	@mkdir -p $(dir $@)
	$(call say,CC,$<)$(CC) $(ALLCFLAGS) -MMD -MP -c -o $@ $<

# pipegen import/export hf, pipedata tokenize and a stage's --tokenizer run
# tools/*.py from this checkout (PIPEGEN_TOOLS overrides)
$(BUILD)/obj/runtime/core/pytool.o: ALLCFLAGS += -DPG_TOOLS_DIR='"$(abspath tools)"'

$(BUILD)/libpgfront.a: $(FE_OBJ) $(CG_OBJ)
	$(call say,AR,$@)rm -f $@ && ar rcs $@ $^

$(BUILD)/pipegen: $(BUILD)/obj/codegen/cli/main.o $(BUILD)/libpgfront.a
	$(call say,LINK,$@)$(CC) $(ALLCFLAGS) -o $@ $^ -lm

# libpgrt_cpu.flags: how a stage compiles and links against this runtime
# (the sanitizers of a SAN=1 build), read by `pipegen build`
$(BUILD)/libpgrt_cpu.a: $(RT_OBJ)
	$(call say,AR,$@)rm -f $@ && ar rcs $@ $^
	@printf 'cflags %s\nlibs %s\n' '$(SANFLAGS)' '$(LDLIBS_RT)' >$(BUILD)/libpgrt_cpu.flags

$(BUILD)/piperun: $(BUILD)/obj/cmd/piperun.o
	$(call say,LINK,$@)$(CC) $(ALLCFLAGS) -o $@ $^

# pipedata: .pgd files from plain files (text -> a token stream, numpy arrays, CSV tables, a tokenizer's ids)
$(BUILD)/pipedata: $(BUILD)/obj/cmd/pipedata.o $(BUILD)/obj/cmd/pd_npy.o $(BUILD)/obj/cmd/pd_csv.o \
                   $(BUILD)/obj/cmd/pd_tokenize.o $(BUILD)/libpgrt_cpu.a
	$(call say,LINK,$@)$(CC) $(ALLCFLAGS) -o $@ $^

# ---- stage binaries: build/<model>/stage<k> from generated/<model>/ --------
# `make $(BUILD)/<model>/stages` links every stage of an example's committed
# generation (generated/<model>/), with CUDA=1 against the CUDA runtime (the
# same stage<k>.c). The stage binaries of an older generation go first: piperun
# runs every stage<k> it finds. A model of your own: `pipegen build MODEL.pipe
# -o DIR`, whose build folder is DIR (codegen/cli/cmd_build.c).
ifeq ($(CUDA),1)
STAGE_RT = $(BUILD)/libpgrt_cuda.a
STAGE_LIBS = $(LDLIBS_CUDA)
STAGE_NOTE = (cuda)
else
STAGE_RT = $(BUILD)/libpgrt_cpu.a
STAGE_LIBS = $(LDLIBS_RT)
STAGE_NOTE =
endif
$(BUILD)/%/stages: generated/%/plan.json $(STAGE_RT)
	@mkdir -p $(BUILD)/$*
	@rm -f $(BUILD)/$*/stage[0-9]*
	@set -e; for f in generated/$*/stage*.c; do \
	  k=$$(basename $$f .c); \
	  $(call say_sh,LINK,$(BUILD)/$*/$$k $(STAGE_NOTE)) \
	  $(CC) $(ALLCFLAGS) -Igenerated/$* -o $(BUILD)/$*/$$k $$f $(STAGE_RT) $(STAGE_LIBS); \
	done; touch $@

# ---- make run's model: generated from examples/<m>.pipe into build/run/<m>/c/ --
# (not over generated/, the committed copy), linked into build/run/<m>/stage<k>.
# A new generation replaces every stage binary of the old one, so a model cut
# into fewer stages leaves no stale stage<k> for piperun to start.
.PRECIOUS: $(BUILD)/run/%/c/plan.json
$(BUILD)/run/%/c/plan.json: examples/%.pipe $(BUILD)/pipegen
	$(call say,GEN,$(BUILD)/run/$*/c)$(BUILD)/pipegen gen $< -o $(BUILD)/run/$*/c >/dev/null

$(BUILD)/run/%/stages: $(BUILD)/run/%/c/plan.json $(BUILD)/libpgrt_cpu.a
	@rm -f $(BUILD)/run/$*/stage[0-9]*
	@set -e; for f in $(BUILD)/run/$*/c/stage*.c; do \
	  k=$$(basename $$f .c); \
	  $(call say_sh,LINK,$(BUILD)/run/$*/$$k) \
	  $(CC) $(ALLCFLAGS) -I$(BUILD)/run/$*/c -o $(BUILD)/run/$*/$$k $$f $(BUILD)/libpgrt_cpu.a $(LDLIBS_RT); \
	done; touch $@

# ---- make install PREFIX=DIR: pipegen outside the checkout --------------------
# DIR/bin: pipegen, piperun, pipedata; DIR/lib/pipegen: the CPU runtime (and the
# CUDA runtime with the script that finds cuBLAS, NCCL and cudart, when it was
# built: build-cuda/libpgrt_cuda.a); DIR/include/pipegen: the headers generated
# stages include; DIR/share/pipegen: the examples and their data, python/
# load_safetensors.py (weights into torch without the safetensors package); DIR/share/doc/
# pipegen: README.md and docs/. `pipegen build` finds the runtime beside itself
# (DIR/bin/../lib/pipegen), so the folder may be moved as a whole.
PREFIX ?= /usr/local
INST := $(DESTDIR)$(PREFIX)
RT_HEADERS := runtime/core/pg_stage.h runtime/core/pg_contract.h runtime/core/pg_ops.h runtime/core/pg_conv.h
install: all
	@if [ -f build-cuda/libpgrt_cuda.a ] && [ -x "$(NVCC)" ]; then \
	   $(MAKE) --no-print-directory CUDA=1 build-cuda/libpgrt_cuda.a; fi
	$(call say,INSTALL,$(INST))mkdir -p $(INST)/bin $(INST)/lib/pipegen $(INST)/include/pipegen \
	    $(INST)/share/pipegen/examples $(INST)/share/pipegen/data $(INST)/share/pipegen/python \
	    $(INST)/share/doc/pipegen/docs/tutorial && \
	  install -m 755 $(BUILD)/pipegen $(BUILD)/piperun $(BUILD)/pipedata $(INST)/bin/ && \
	  install -m 644 $(BUILD)/libpgrt_cpu.a $(BUILD)/libpgrt_cpu.flags $(INST)/lib/pipegen/ && \
	  install -m 644 $(RT_HEADERS) $(INST)/include/pipegen/ && \
	  install -m 644 examples/*.pipe $(INST)/share/pipegen/examples/ && \
	  install -m 644 data/tiny_text.txt $(INST)/share/pipegen/data/ && \
	  install -m 644 tools/load_safetensors.py $(INST)/share/pipegen/python/ && \
	  install -m 644 README.md $(INST)/share/doc/pipegen/ && \
	  install -m 644 docs/*.md $(INST)/share/doc/pipegen/docs/ && \
	  install -m 644 docs/tutorial/*.md $(INST)/share/doc/pipegen/docs/tutorial/
	@if [ -f build-cuda/libpgrt_cuda.a ]; then \
	   install -m 644 build-cuda/libpgrt_cuda.a $(INST)/lib/pipegen/ && \
	   install -m 755 tools/gpu_ldlibs.sh tools/gpu_env.sh $(INST)/lib/pipegen/ && \
	   echo "installed into $(INST): bin/ (pipegen, piperun, pipedata), lib/pipegen/ (the CPU and the CUDA runtime), include/pipegen/, share/"; \
	 else rm -f $(INST)/lib/pipegen/libpgrt_cuda.a; \
	   echo "installed into $(INST): bin/ (pipegen, piperun, pipedata), lib/pipegen/ (the CPU runtime; no CUDA runtime: build-cuda/libpgrt_cuda.a is not built), include/pipegen/, share/"; fi

# ---- the CUDA stage runtime: libpgrt_cuda.a ---------------------------------
# The core objects (the TCP transport runtime/core/tcp.c among them, under the
# CUDA transport cuda_net.cu) and every CUDA object.
# cudart, cuBLAS and NCCL as tools/gpu_env.sh finds them (the toolkit, the
# system, or the NVIDIA Python wheels, versioned names only included), linked
# through unversioned symlinks in $(BUILD)/cuda-libs with an rpath to each;
# asked once per make that links CUDA code (CUDA=1).
ifeq ($(CUDA),1)
ifndef LDLIBS_CUDA
LDLIBS_CUDA := $(shell tools/gpu_ldlibs.sh $(BUILD)/cuda-libs)
endif
endif
CUDA_NET_OBJ := build-cuda/cuda/cuda_net.o
RT_CUDA_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(RT_CORE)) $(CUDA_OBJ)

$(BUILD)/libpgrt_cuda.a: $(RT_CUDA_OBJ)
	$(call say,AR,$@)rm -f $@ && ar rcs $@ $^

# ---- CUDA: every .cu compiles in every test run, GPU or not ---------------
# Objects are real targets with nvcc -MMD dependencies: only changed files recompile.
cuda: $(CUDA_OBJ) $(CUDA_TEST_OBJ)
	@echo "cuda: $(words $(CUDA_OBJ) $(CUDA_TEST_OBJ)) files compiled and up to date"

$(NVCC_STAMP): FORCE
	@mkdir -p $(dir $@)
	@echo '$(NVCCFLAGS)' | cmp -s - $@ || echo '$(NVCCFLAGS)' >$@

.PHONY: FORCE nvccflags
FORCE:
nvccflags:
	@echo '$(NVCCFLAGS)'

build-cuda/cuda/%.o: runtime/cuda/%.cu $(NVCC_STAMP)
	$(NVCC_FOUND)
	@mkdir -p $(dir $@)
	$(call say,NVCC,$<)$(NVCC) $(NVCCFLAGS) -MMD -MP -c -o $@ $<

build-cuda/cuda-tests/%.o: tests/gpu/%.cu $(NVCC_STAMP)
	$(NVCC_FOUND)
	@mkdir -p $(dir $@)
	$(call say,NVCC,$<)$(NVCC) $(NVCCFLAGS) -MMD -MP -c -o $@ $<

# ---- the CUDA runtime under emulation (tests/gpu/emu/README.md) ------------
# runtime/cuda's own sources compiled by the host's C++ compiler against the
# emulated CUDA runtime, cuBLAS(Lt) and NCCL of tests/gpu/emu/: each file
# rewritten by tests/gpu/emu/emu_cu.sh (launches become calls), kernels on
# fibers (tests/gpu/cuda_emu.h), GEMMs by the host BLAS's sgemm_, conv.cu's
# cuDNN calls by tests/gpu/emu/cudnn_emu.cc. Every runtime/cuda/*.cu joins by
# itself.
# $(BUILD)/emu/libpgrt_cuemu.a replaces libpgrt_cuda.a at link time
# (LDLIBS_EMU instead of LDLIBS_CUDA).
CXX      ?= c++
EMU_DIR  := $(BUILD)/emu
EMU_HDR  := $(patsubst runtime/cuda/%,$(EMU_DIR)/src/%,$(wildcard runtime/cuda/*.h runtime/cuda/*.cuh))
EMU_OBJ  := $(patsubst runtime/cuda/%.cu,$(EMU_DIR)/obj/%.o,$(CUDA_SRC)) \
            $(patsubst tests/gpu/emu/%.cc,$(EMU_DIR)/obj/shim/%.o,$(wildcard tests/gpu/emu/*.cc))
# nvcc fuses a * b + c in kernels: so does the emulated build where the CPU has FMA (cuda_emu.h)
EMU_FMA  := $(shell grep -qw fma /proc/cpuinfo 2>/dev/null && echo -mfma)
EMUFLAGS  = -std=c++20 -O2 -g -Wall -Wextra -Werror -Wno-unknown-pragmas -fno-strict-aliasing -ffp-contract=off $(EMU_FMA) -pthread \
            -Itests/gpu/emu/include -I$(EMU_DIR)/src -Iruntime/core
LDLIBS_EMU = -lstdc++ -lblas -lpthread -lm
export LDLIBS_EMU

.PHONY: emu
emu: $(EMU_DIR)/libpgrt_cuemu.a $(EMU_DIR)/test_ops_gpu $(EMU_DIR)/emu_rules

$(EMU_DIR)/src/%: runtime/cuda/% tests/gpu/emu/emu_cu.sh
	@tests/gpu/emu/emu_cu.sh $< $@

$(EMU_DIR)/obj/%.o: $(EMU_DIR)/src/%.cu $(EMU_HDR)
	@mkdir -p $(dir $@)
	@echo "  CXX (emulated CUDA) $<"
	@$(CXX) $(EMUFLAGS) -MMD -MP -x c++ -c -o $@ $<

$(EMU_DIR)/obj/shim/%.o: tests/gpu/emu/%.cc
	@mkdir -p $(dir $@)
	$(CXX) $(EMUFLAGS) -MMD -MP -c -o $@ $<

$(EMU_DIR)/libpgrt_cuemu.a: $(patsubst %.c,$(BUILD)/obj/%.o,$(RT_CORE)) $(EMU_OBJ)
	rm -f $@ && ar rcs $@ $^

$(EMU_DIR)/test_ops_gpu: tests/gpu/test_ops_gpu.cu $(EMU_DIR)/libpgrt_cuemu.a $(EMU_HDR)
	$(CXX) $(EMUFLAGS) -MMD -MP -x c++ -o $@ $< -x none $(EMU_DIR)/libpgrt_cuemu.a $(LDLIBS_EMU)

# the emulator's own rules (tests/cuda_emu_rules.t), its launches rewritten like runtime/cuda's
$(EMU_DIR)/src/tests/emu_rules.cu: tests/gpu/emu/emu_rules.cu tests/gpu/emu/emu_cu.sh
	@tests/gpu/emu/emu_cu.sh $< $@

$(EMU_DIR)/emu_rules: $(EMU_DIR)/src/tests/emu_rules.cu $(EMU_DIR)/libpgrt_cuemu.a
	$(CXX) $(EMUFLAGS) -Itests -MMD -MP -x c++ -o $@ $< -x none $(EMU_DIR)/libpgrt_cuemu.a $(LDLIBS_EMU)

# ---- the GPU bundle: build here, run on a GPU host --------------------------
# tools/gpu_bundle.sh assembles build/gpu-bundle/pipegen-gpu/ (static pipegen
# and piperun, libpgrt_cuda.a, the op tests' object, headers, the scripts, the
# CPU references computed here) and packs build/gpu-bundle.tar.gz. On the GPU
# host: tar xzf, then pipegen-gpu/run.sh OUTDIR [all|test|bench|check].
# make test-gpu / bench-gpu run that same run.sh from the unpacked directory.
gpu-bundle: gpu-bundle-parts
	@tools/gpu_bundle.sh build/gpu-bundle build/gpu-bundle.tar.gz

gpu-bundle-dir: gpu-bundle-parts
	@tools/gpu_bundle.sh build/gpu-bundle

.PHONY: gpu-bundle-parts
gpu-bundle-parts: all
	$(NVCC_FOUND)
	@$(MAKE) --no-print-directory cuda
	@$(MAKE) --no-print-directory CUDA=1 build-cuda/libpgrt_cuda.a build-cuda/bench/gemm_peak.o

# tests/gpu/run_gpu_tests.sh runs everything in one go: the op tests,
# graph replay, gpt_tiny on 1 and 4 stages with and without CUDA graphs, other
# schedules, checkpoint modes, bf16, dropout, against the CPU, a killed stage.
test-gpu: gpu-bundle-dir
	@build/gpu-bundle/pipegen-gpu/run.sh build/gpu-results test

# ---- the two commands -----------------------------------------------------
# make run: generate examples/gpt_char.pipe into build/run/gpt_char (so an edit
# to the example takes effect; generated/ stays the committed, diff-tested
# copy), build its stages and train it (tools/run_example.sh).
run: all
	@tools/run_example.sh

# The suite runs pipegen and the runtime under ASan+UBSan (build-san/) and the
# stage binaries of the long end-to-end runs from build/. Without a CUDA
# toolkit the CUDA builds are skipped here and tests/cuda_*.t report the skip.
#
# The builds and the test files run TEST_JOBS at a time (the cores, at most 4:
# most files start 2 to 4 stage processes of their own); the longest files go
# first so the run does not end waiting on one of them. TEST_JOBS=1 runs one
# at a time.
TEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ "$$n" -gt 4 ] && n=4; echo $$n)
SLOW_TESTS := tests/gpu_bundle.t tests/cuda_emu_train.t tests/gpu_scripts.t tests/install.t tests/gen_output.t \
	tests/device_scripts.t tests/deps.t tests/hf.t tests/balance.t tests/e2e_san.t tests/e2e_llama.t tests/e2e.t \
	tests/e2e_gpt.t tests/e2e_conv.t tests/docs.t tests/digits.t
test: test-deps
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) binaries
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) SAN=1 binaries
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) cuda-if-found
	@# the emulated CUDA runtime once, before the tests that use it start side by
	@# side (each one's `make emu` then finds it current); a failure is theirs to report
	@$(MAKE) --no-print-directory -s -j$(TEST_JOBS) emu >/dev/null 2>&1 || echo "make emu failed: tests/cuda_emu_*.t say why"
	@prove -f -j$(TEST_JOBS) $(foreach t,$(SLOW_TESTS),$(filter $(t),$(wildcard tests/*.t))) \
	    $(filter-out $(SLOW_TESTS),$(wildcard tests/*.t))

# make test-matrix: convolutional networks bitwise across 1-4 stages x every
# schedule x checkpoint mode x 1/2 threads x 1/2 replicas (make test runs a
# sample of it, tests/e2e_conv.t)
test-matrix: test-deps
	@$(MAKE) --no-print-directory binaries
	@$(MAKE) --no-print-directory SAN=1 binaries
	@prove -v tests/conv_matrix.sh

# make test-slurm: a real Slurm on this host (slurmctld, slurmd, munged started
# in a temporary folder, killed at the end): srun --multi-prog and docs/launch.md's
# sbatch script with a SIGTERM and a resubmission, and 2 stages x 2 replicas by
# srun --multi-prog and docs/launch.md's pp x dp script (tests/slurm.sh). Not in
# `make test`: it installs packages and starts daemons as root.
test-slurm:
	@tools/deps.sh slurm
	@$(MAKE) --no-print-directory binaries
	@prove -v tests/slurm.sh

# every CUDA file, the CUDA runtime and CUDA stage binaries, when nvcc is here
cuda-if-found:
	@if [ -x "$(NVCC)" ]; then $(MAKE) --no-print-directory cuda && \
	   $(MAKE) --no-print-directory CUDA=1 build-cuda/mlp/stages build-cuda/gpt_char/stages build-cuda/bench/gemm_peak \
	     build-cuda/bench/gemm_peak.o; \
	 else echo "make test: SKIP the CUDA builds: nvcc not found at $(NVCC) (set CUDA_HOME or NVCC; tests/cuda_*.t skip)"; fi

san-all: binaries

# make test-fresh: `make run` and `make test` in a new Debian 12 root, with and
# without the CUDA toolkit (tools/fresh_check.sh; root, downloads packages).
test-fresh:
	@tools/fresh_check.sh

# OpenBLAS is the anchor bench/gemm.sh measures the runtime's GEMM against
# (the runtime itself does not use it): `tools/deps.sh bench` adds it.
bench: all
	@tools/deps.sh bench
	@bench/run.sh

# GPU benchmark (bench/gpu/run.sh; needs a GPU). Its C part, the bf16 GEMM
# peak timer, is compiled by `make test` too (tests/cuda_link.t checks it).
$(BUILD)/bench/gemm_peak.o: bench/gpu/gemm_peak.c
	@mkdir -p $(dir $@)
	$(call say,CC,$<)$(CC) $(CSTD) $(WARN) $(CFLAGS) -I$(CUDA_HOME)/include -c -o $@ $<

$(BUILD)/bench/gemm_peak: $(BUILD)/bench/gemm_peak.o
	$(call say,LINK,$@)$(CC) -o $@ $< $(LDLIBS_CUDA)

bench-gpu: gpu-bundle-dir
	@build/gpu-bundle/pipegen-gpu/run.sh build/gpu-results bench

fuzz: all
	@tests/fuzz.sh $${FUZZ_SECONDS:-600}

clean:
	rm -rf build build-san build-cuda

# header dependencies of every build folder, a BUILD=elsewhere one included
-include $(shell find $(sort build build-san build-cuda $(BUILD)) -name '*.d' 2>/dev/null)
