#!/bin/sh
# run.sh — the pipegen GPU bundle (made by `make gpu-bundle`; see docs/gpu.md,
# "Build here, run on a GPU host"). On a GPU host that has the NVIDIA driver,
# the CUDA toolkit (nvcc), cuBLAS and NCCL (the toolkit's, the system's, or
# the NVIDIA Python wheels PyTorch installs) and a C compiler:
#
#   ./run.sh OUTDIR [all|test|bench|check]
#
#   all    (default) the GPU tests, then the benchmark
#   test   tests/gpu/run_gpu_tests.sh: TAP in OUTDIR/tests.tap, logs in OUTDIR/logs/
#   bench  bench/gpu/run.sh: GPT-2 small against PyTorch eager and torch.compile,
#          MFU, 4 stages vs 1, graphs, trace prediction, memory; OUTDIR/bench.log
#   check  no GPU needed: find the tools and libraries and link every CUDA
#          binary, then stop (what a host lacks, before any GPU time is spent)
#
# First of all it asks the driver whether a usable GPU is there (tools/
# gpu_probe.c, compiled here); if not it writes OUTDIR/results.json and exits
# 3 with "gpu-bundle: no GPU found (CAUSE)". Then it says what it found where
# (tools/gpu_env.sh), links the CUDA stage binaries here and runs. Everything
# goes to OUTDIR: results.json (the tests' counts and every figure of the
# benchmark), tests.tap, bench.log, run.log, logs/. Exit 0 when everything
# ran and passed, 1 when something failed or is missing, 2 on a bad command
# line, 3 when there is no usable GPU.
#
# Knobs: CC; CUDA_HOME or NVCC; PYTHON (the interpreter with torch);
# CUDART_LIB, CUBLAS_LIB, NCCL_LIB (full paths, to override the search);
# PG_REBUILD_CUDA=1 (compile the CUDA sources here with nvcc for this GPU;
# automatic when the GPU is older than the prebuilt sm_90 code);
# STEPS, KILL_S (tests), BENCH_STEPS, BENCH_WARMUP (benchmark); PG_TEST_BUDGET_S
# (300: no test run starts later) and PG_BUDGET_S (465: no benchmark run goes
# on later), counted from the start, so that `all` ends within 8 minutes.
B=$(cd "$(dirname "$0")" && pwd)
usage() { echo "usage: $0 OUTDIR [all|test|bench|check]" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
OUT=$1
MODE=${2:-all}
case $MODE in all|test|bench|check) ;; *) usage ;; esac
mkdir -p "$OUT" || { echo "gpu-bundle: cannot create $OUT" >&2; exit 1; }
OUT=$(cd "$OUT" && pwd)
. "$B/tools/gpu_env.sh"
. "$B/BUNDLE"   # BUILT_CUDA_MAJOR, BUILT_ARCH, BUILT_COMMIT
export BUILT_CUDA_MAJOR
CC=${CC:-cc}
export CC
T0=$(date +%s)
: >"$OUT/run.log"
say() { echo "gpu-bundle: $*" | tee -a "$OUT/run.log"; }

# results_json STATUS [CAUSE]: OUTDIR/results.json from what is known so far
results_json() {
    {
        echo "{"
        printf '%s\n' "  \"status\": $(json_str "$1"),"
        [ -n "${2:-}" ] && printf '%s\n' "  \"cause\": $(json_str "$2"),"
        printf '%s\n' "  \"bundle\": {\"commit\": $(json_str "$BUILT_COMMIT"), \"cuda_major\": $(json_num "$BUILT_CUDA_MAJOR"), \"arch\": $(json_str "$BUILT_ARCH")},"
        printf '%s\n' "  \"mode\": $(json_str "$MODE"), \"seconds\": $(($(date +%s) - T0)),"
        printf '%s\n' "  \"host\": {\"gpu\": $(json_str "${GPU_LINES:-}"), \"nvcc\": $(json_str "${NVCC:-}"),"
        printf '%s\n' "    \"cudart\": $(json_str "${CUDART_LIB:-}"), \"cublas\": $(json_str "${CUBLAS_LIB:-}"), \"nccl\": $(json_str "${NCCL_LIB:-}"),"
        printf '%s\n' "    \"python\": $(json_str "${PY_TORCH:-}"), \"torch\": $(json_str "${TORCH_VERSION:-}")},"
        if [ -s "$OUT/tests.tap" ]; then
            not_ok=$(grep '^not ok' "$OUT/tests.tap" | cut -c1-200 | while read -r l; do printf '%s, ' "$(json_str "$l")"; done)
            NOT_OK=${not_ok%, } awk '/^ok .*# SKIP/ { s++; next } /^ok / { p++ } /^not ok/ { f++ }
                 /^1\.\.[0-9]+/ { split($1, a, "\\.\\."); plan = a[2] }
                 END { printf "  \"tests\": {\"planned\": %d, \"passed\": %d, \"failed\": %d, \"skipped\": %d, \"not_ok\": [%s]},\n", plan, p, f, s, ENVIRON["NOT_OK"] }' \
                "$OUT/tests.tap"
        else
            printf '%s\n' "  \"tests\": null,"
        fi
        if [ -s "$OUT/bench/bench.json" ]; then
            printf '  "bench": '; sed '1!s/^/  /' "$OUT/bench/bench.json" | sed '$s/$/,/'
        else
            printf '%s\n' "  \"bench\": null,"
        fi
        printf '%s\n' "  \"end\": true"
        echo "}"
    } >"$OUT/results.json.tmp" && mv "$OUT/results.json.tmp" "$OUT/results.json"
}

# --- 1. a usable GPU? (before anything else) ----------------------------------------
GPU_LINES=""
probe_rc=3
if command -v "$CC" >/dev/null 2>&1 && "$CC" -O1 -o "$OUT/.gpu_probe" "$B/tools/gpu_probe.c" -ldl >"$OUT/.probe.log" 2>&1; then
    GPU_LINES=$("$OUT/.gpu_probe" 2>&1)
    probe_rc=$?
elif command -v nvidia-smi >/dev/null 2>&1; then
    GPU_LINES=$(nvidia-smi -L 2>&1)
    printf '%s\n' "$GPU_LINES" | grep -q '^GPU [0-9]' && probe_rc=0
else
    GPU_LINES="no C compiler ($CC) to ask the driver, and no nvidia-smi"
fi
printf '%s\n' "$GPU_LINES" | sed 's/^/gpu-bundle: /' | tee -a "$OUT/run.log"
if [ $probe_rc != 0 ]; then
    cause=$(printf '%s\n' "$GPU_LINES" | tail -n 1)
    if [ "$MODE" != check ]; then
        results_json "no GPU" "$cause"
        echo "gpu-bundle: no GPU found ($cause)" | tee -a "$OUT/run.log" >&2
        exit 3
    fi
    say "no GPU ($cause); check mode goes on"
fi
ARCH=$(printf '%s\n' "$GPU_LINES" | sed -n 's/^gpu 0: .*, sm_\([0-9]*\),.*/\1/p' | head -n 1)

# --- 2. the tools and libraries -----------------------------------------------------
gpu_env_find "$OUT/.lib" "$BUILT_CUDA_MAJOR"
printf '%s\n' "$GPU_ENV_REPORT" | sed 's/^/gpu-bundle: found /' | tee -a "$OUT/run.log"
export LDLIBS_CUDA PY_TORCH TORCH_VERSION
missing=$GPU_ENV_MISSING
command -v "$CC" >/dev/null 2>&1 || missing="$missing a C compiler ($CC)"
if [ -n "$missing" ]; then
    results_json "missing" "not found:$missing"
    echo "gpu-bundle: not found:$missing (set CUDA_HOME, CUDART_LIB, CUBLAS_LIB, NCCL_LIB or CC)" | tee -a "$OUT/run.log" >&2
    exit 1
fi

# --- 3. the CUDA objects: prebuilt for sm_90 (and newer through PTX), or rebuilt ----
CUDALIB=$B/build-cuda/libpgrt_cuda.a
TEST_OPS_OBJ=$B/build/cuda-tests/test_ops_gpu.o
GEMM_OBJ=$B/build-cuda/bench/gemm_peak.o
rebuild=${PG_REBUILD_CUDA:-0}
if [ -n "$ARCH" ] && [ "$ARCH" -lt "${BUILT_ARCH#sm_}" ] 2>/dev/null; then
    say "this GPU is sm_$ARCH, older than the prebuilt $BUILT_ARCH code: rebuilding the CUDA files for it"
    rebuild=1
fi
if [ "$rebuild" = 1 ]; then
    [ -n "$NVCC" ] || { results_json "missing" "nvcc (to rebuild the CUDA files)"; say "no nvcc to rebuild the CUDA files"; exit 1; }
    RB=$OUT/.rebuild
    rm -rf "$RB" && mkdir -p "$RB/obj" || exit 1
    arch=sm_${ARCH:-${BUILT_ARCH#sm_}}
    say "nvcc -arch=$arch: runtime/cuda/*.cu, tests/gpu/test_ops_gpu.cu, bench/gpu/gemm_peak.c (log: $RB/nvcc.log)"
    inc="-I$B/runtime/core -I$B/runtime/cuda ${NCCL_INC:+-I$NCCL_INC} ${CUBLAS_INC:+-I$CUBLAS_INC} ${CUDNN_INC:+-I$CUDNN_INC}"
    pids=""
    for f in "$B"/runtime/cuda/*.cu "$B/tests/gpu/test_ops_gpu.cu"; do
        # shellcheck disable=SC2086
        "$NVCC" -std=c++17 -O2 -arch="$arch" -Xcompiler -Wall,-Wextra $inc -c -o "$RB/obj/$(basename "$f" .cu).o" "$f" \
            >"$RB/$(basename "$f").log" 2>&1 &
        pids="$pids $!"
    done
    st=0
    for p in $pids; do wait "$p" || st=1; done
    cat "$RB"/*.log >"$RB/nvcc.log" 2>/dev/null
    # shellcheck disable=SC2086
    "$CC" -std=c11 -O2 -I"$CUDA_HOME/include" ${CUBLAS_INC:+-I$CUBLAS_INC} -c -o "$RB/gemm_peak.o" "$B/bench/gpu/gemm_peak.c" \
        >>"$RB/nvcc.log" 2>&1 || st=1
    mv "$RB/obj/test_ops_gpu.o" "$RB/test_ops_gpu.o" 2>/dev/null || st=1
    rm -f "$RB/libpgrt_cuda.a"
    [ $st = 0 ] && ar rcs "$RB/libpgrt_cuda.a" "$B"/build-cuda/rt-c/*.o "$RB"/obj/*.o || st=1
    if [ $st != 0 ]; then
        tail -30 "$RB/nvcc.log" | tee -a "$OUT/run.log"
        results_json "fail" "rebuilding the CUDA files failed ($RB/nvcc.log)"
        say "rebuilding the CUDA files failed"
        exit 1
    fi
    CUDALIB=$RB/libpgrt_cuda.a TEST_OPS_OBJ=$RB/test_ops_gpu.o GEMM_OBJ=$RB/gemm_peak.o
    say "rebuilt: $CUDALIB"
fi
export CUDALIB TEST_OPS_OBJ GEMM_OBJ

# --- check: link one of everything, see every library resolve ------------------------
if [ "$MODE" = check ]; then
    C=$OUT/check
    rm -rf "$C" && mkdir -p "$C" || exit 1
    st=0
    "$B/build/pipegen" gen "$B/examples/gpt2_small.pipe" -o "$C/gen" >"$C/gen.log" 2>&1 || { cat "$C/gen.log"; st=1; }
    for f in "$C"/gen/stage*.c; do
        [ $st = 0 ] || break
        # shellcheck disable=SC2086
        "$CC" -std=c11 -O2 -I"$B/runtime/core" -I"$C/gen" -o "$C/$(basename "$f" .c)" "$f" "$CUDALIB" $LDLIBS_CUDA \
            >>"$C/cc.log" 2>&1 || st=1
    done
    # shellcheck disable=SC2086
    [ $st = 0 ] && "$CC" -o "$C/test_ops_gpu" "$TEST_OPS_OBJ" "$CUDALIB" $LDLIBS_CUDA >>"$C/cc.log" 2>&1 &&
        "$CC" -o "$C/gemm_peak" "$GEMM_OBJ" $LDLIBS_CUDA >>"$C/cc.log" 2>&1 || st=1
    for b in "$C"/stage0 "$C"/test_ops_gpu "$C"/gemm_peak; do
        [ -x "$b" ] || { st=1; continue; }
        if ldd "$b" 2>&1 | grep -q 'not found'; then
            say "$(basename "$b"): unresolved: $(ldd "$b" | grep 'not found' | tr '\n' ' ')"; st=1
        else
            say "$(basename "$b") links: $(ldd "$b" | grep -Eo 'lib(cudart|cublas|cublasLt|nccl)\.so[^ ]* => [^ ]*' | tr '\n' ' ')"
        fi
    done
    [ $st = 0 ] || tail -20 "$C/cc.log" 2>/dev/null | tee -a "$OUT/run.log"
    results_json "$([ $st = 0 ] && echo checked || echo fail)" "$([ $st = 0 ] || echo "linking failed: $C/cc.log")"
    say "check: $([ $st = 0 ] && echo 'everything links' || echo 'linking failed')"
    exit $st
fi

# --- 4. the tests, then the benchmark -------------------------------------------------
# time limits, so that `all` ends within 8 minutes even when runs hang: no test
# run starts after T0 + 300 s, no benchmark run goes past T0 + 465 s
TEST_DEADLINE=$((T0 + ${PG_TEST_BUDGET_S:-300}))
BENCH_DEADLINE=$((T0 + ${PG_BUDGET_S:-465}))
export TEST_DEADLINE BENCH_DEADLINE
rc=0
if [ "$MODE" = all ] || [ "$MODE" = test ]; then
    say "tests: tests/gpu/run_gpu_tests.sh > $OUT/tests.tap"
    LOGDIR=$OUT/logs GPU_REF=$B/tests/gpu/ref "$B/tests/gpu/run_gpu_tests.sh" >"$OUT/tests.tap" 2>>"$OUT/run.log"
    t_rc=$?
    grep -E '^(not ok|1\.\.)' "$OUT/tests.tap" | tee -a "$OUT/run.log"
    say "tests: $(grep -c '^ok' "$OUT/tests.tap") ok, $(grep -c '^not ok' "$OUT/tests.tap") not ok (exit $t_rc, $(($(date +%s) - T0)) s)"
    [ $t_rc = 0 ] || rc=1
    results_json "tests done" # in case the benchmark does not end
fi
if [ "$MODE" = all ] || [ "$MODE" = bench ]; then
    say "benchmark: bench/gpu/run.sh > $OUT/bench.log"
    BENCH_DIR=$OUT/bench "$B/bench/gpu/run.sh" >"$OUT/bench.log" 2>&1
    b_rc=$?
    tee -a "$OUT/run.log" <"$OUT/bench.log" | tail -n 25
    say "benchmark: exit $b_rc ($(($(date +%s) - T0)) s)"
    [ $b_rc = 0 ] || rc=1
fi
results_json "$([ $rc = 0 ] && echo pass || echo fail)"
# what to copy back: results, TAP, logs, the benchmark's logs, figures and predictions
(cd "$OUT" && find results.json tests.tap run.log bench.log logs bench -maxdepth 1 -type f \
    \( -name '*.json' -o -name '*.tap' -o -name '*.log' -o -name '*.loss' -o -name '*.out' -o -name '*.pred' \
    -o -name '*.svg' \) -size -8M 2>/dev/null | tar -czf report.tar.gz -T - 2>/dev/null)
say "results: $OUT/results.json, everything to copy back: $OUT/report.tar.gz ($(($(date +%s) - T0)) s in all)"
exit $rc
