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
# automatic when the GPU is older than the prebuilt sm_90 code or the driver
# older than the bundle's CUDA; the libraries are then those of this host's
# nvcc), PG_REBUILD_JOBS (nvcc processes at a time);
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
WORK=$OUT # the probe, the library links and a rebuild: OUTDIR/.gpu_probe, .lib, .rebuild
. "$B/tools/gpu_bundle/prepare.sh"
bundle_probe
printf '%s\n' "$GPU_LINES" | sed 's/^/gpu-bundle: /' | tee -a "$OUT/run.log"
if [ "$PROBE_RC" != 0 ]; then
    if [ "$MODE" != check ]; then
        results_json "no GPU" "$GPU_CAUSE"
        echo "gpu-bundle: no GPU found ($GPU_CAUSE)" | tee -a "$OUT/run.log" >&2
        exit 3
    fi
    say "no GPU ($GPU_CAUSE); check mode goes on"
fi
case $COMPUTE_MODE in EXCLUSIVE_PROCESS | EXCLUSIVE_THREAD)
    say "GPU 0 is in compute mode $COMPUTE_MODE: one process at a time, so every multi-stage run fails (nvidia-smi -c DEFAULT, as root, allows them)" ;;
esac

# --- 2. the tools and libraries (of the CUDA that will run) ---------------------------
bundle_env
printf '%s\n' "$GPU_ENV_REPORT" | sed 's/^/gpu-bundle: found /' | tee -a "$OUT/run.log"
if [ -n "$MISSING" ]; then
    results_json "missing" "not found:$MISSING"
    echo "gpu-bundle: not found:$MISSING (set CUDA_HOME, CUDART_LIB, CUBLAS_LIB, NCCL_LIB or CC)" | tee -a "$OUT/run.log" >&2
    exit 1
fi

# --- 3. the CUDA objects: prebuilt for sm_90 (and newer through PTX), or rebuilt ----
if ! bundle_rebuild >>"$OUT/run.log" 2>&1; then
    tail -30 "$OUT/run.log"
    results_json "fail" "rebuilding the CUDA files failed ($OUT/.rebuild/nvcc.log)"
    say "rebuilding the CUDA files failed"
    exit 1
fi
[ "$REBUILD" = 1 ] && say "rebuilt the CUDA files ($REBUILD_WHY): $CUDALIB"

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
