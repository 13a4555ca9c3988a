#!/bin/sh
# tests/gpu/run_gpu_tests.sh — the CUDA runtime on a GPU machine, everything in
# one go (TAP on stdout; run by the GPU bundle's device_check.sh and `run.sh
# OUT test`, by `make test-gpu` in a checkout, and in `make test` against the
# emulated CUDA runtime: tests/cuda_emu_train.t). Builds nothing with make: it
# uses what is there, at the paths of a checkout (and of the bundle, which has
# the same layout):
#   build/pipegen, build/piperun             the compiler and the launcher
#   build-cuda/libpgrt_cuda.a                the CUDA stage runtime
#   build-cuda/cuda-tests/test_ops_gpu.o     the op tests (nvcc-compiled object)
#   tests/gpu/ref/                           the CPU references (tests/gpu/cpu_refs.sh;
#                                            made here when missing and build/libpgrt_cpu.a exists)
# and links the stages with the C compiler against the cuBLAS, NCCL and CUDA
# runtime that tools/gpu_env.sh finds (or LDLIBS_CUDA when set).
#  0. the op tests, each group of tests/gpu/test_ops_gpu.cu in its own process
#     (against host references, and against the CPU backend's results from
#     the same inputs: tests/gpu/ref/cpu_ops.rec), and tests/gpu/graph_smoke.c;
#  1. tests/models/gpt_tiny.pipe trained STEPS steps on 1 stage and on 4 stage
#     processes sharing the GPU (the same-device CUDA IPC path), each with CUDA
#     graphs (the default) and with --no-graph: all four give the same losses
#     and saved weights bit for bit, every step's loss within TOL (relative) of
#     the CPU runtime's, and the 1-stage run reports graphs captured and
#     launched;
#  1b. the Llama layers (tests/models/oracle_llama.pipe: rmsnorm, grouped-query
#     attention with rotary positions, swiglu, cross_entropy ignoring -100) on
#     1 stage with graphs and --no-graph and on 3 stage processes: bitwise
#     alike, within TOL of the CPU's (its synthetic tokens are random: the
#     loss stays near ln 13), graphs captured; with precision = bf16, 1 and 3
#     stages bitwise alike, each stage's bf16 operand copies inside the
#     arena buffer the plan reserved for them (the run's report);
#  2. the 4-stage run under the other schedules (gpipe, zb1) and checkpoint
#     modes (always, never): bitwise the 1-stage result again;
#  3. a cosine lr schedule (the per-step lr that graphs read from device
#     memory): graph = --no-graph = 4 stages bitwise, within TOL of the CPU;
#  4. precision = bf16: 1 and 4 stages and --no-graph bitwise alike, within
#     TOL_BF16 of the CPU (which computes bf16 models in f32), the loss falls,
#     the bf16 GEMMs and the fast kernel paths gpt_tiny can use (colsum,
#     shadow, flash, lt; msplit where an m is odd) taken, by the run's own "kernel paths taken" report;
#     with PIPE_CUDA_KERNELS=reference (the kernels before the fast paths)
#     1 and 4 stages bitwise alike again, no fast path taken, within TOL_BF16
#     of the fast paths; the operand copies in the plan's buffer with the fast
#     paths, beside the arena (and said) with the reference kernels, which
#     copy the weights too;
#     every byte of device memory a stage holds beyond the context is its
#     arena or one of the runtime's allocations its report names (under the
#     emulator, exactly; on a GPU the rest, the libraries' and the driver's,
#     is shown);
#  5. a model with dropout: graphs stay off with a note, 1 and 4 stages
#     bitwise alike, within TOL of the CPU (the masks are the CPU's);
#  5c. tests/models/conv_small.pipe (every layer of convolutional networks:
#     cuDNN's convolutions, pooling, upsample, batchnorm2d(deferred), skips
#     across splits) on 1, 2 and 4 stages, graphs and --no-graph: bitwise
#     alike, every step within TOL_CONV of the CPU's, the loss falls, the
#     start-up and report lines name the cuDNN plans, the stage table's
#     geometries, a table one short or without its plan function refused
#     (emulated: the cuDNN of tests/gpu/emu);
#  6. with 2+ GPUs, stages 0-1 on GPU 0 and 2-3 on GPU 1 (NCCL between 1 and 2,
#     IPC within each pair): bitwise the 1-stage result again;
#  6b. with 2+ GPUs, gpt_tiny 2 stages x 2 replicas, replica q on GPU q: the
#     replicas' gradients summed by NCCL (runtime/cuda/dp_nccl.cu) give the
#     losses and weights of the host path (PIPE_DP_NCCL=0, and 5b's one-GPU
#     run) bit for bit, within TOL of the CPU; the start-up lines name each
#     path (and why not NCCL), the NCCL run reports its time per step;
#  5b. pp x dp on the one GPU (every process on it: the replicas' gradients
#     are summed in host memory over TCP): gpt_tiny at 1, 2 and 4 stages x 2
#     replicas (piperun --dp 2) gives the same losses and weights bit for bit
#     at every stage count, twice alike, graphs = --no-graph; its first step's
#     loss (the same weights, other micro-batches) within 1e-6 relative of the
#     1-replica run's, every step within TOL of the CPU's; the start-up line
#     names the reduction's path (the host one: NCCL refuses two replicas on
#     one GPU); tests/models/bn_small.pipe (deferred batch
#     norm, batch 12) at 1 and 2 stages x 2 replicas bitwise alike, step 1
#     within 1e-6 relative of one replica of twice the micro-batches (the same
#     micro-batches of rows), graphs off with a note naming the sums;
#  7. a stage killed with SIGKILL mid-run (once the last stage reached step
#     KILL_AT): every other stage exits non-zero within KILL_S seconds, one
#     of its neighbours naming it, each naming the stage it lost.
# Every check needs its runs to have happened: nothing passes when nothing ran
# (tests/gpu_scripts.t runs this script here with PG_GPU_FAKE=cpu, the CPU
# runtime standing in for the CUDA one, both working and with nothing to run).
# What must be there to start (pipegen, piperun, the runtime and its
# libraries) is not a check: without it the script bails out.
#
# Time: every run is under `timeout`, RUN_TIMEOUT (120 s) or what is left
# before TEST_DEADLINE (seconds since the epoch) when less; a run that cannot
# start before it fails as "not run: out of time". Logs: every run's output,
# losses and weights are written to LOGDIR (default: the work directory) as
# they happen, so a run killed at a limit leaves its evidence.
#
# Knobs: GPU_SECTIONS (the sections to run, of 0 1 1b 2 3 4 5 5b 5c 6 6b 7; default
# all: tools/gpu_bundle/device_rerun.sh reruns one), STEPS (20), TOL (2e-3),
# TOL_BF16 (5e-2), TOL_CONV (TOL), KILL_S (30), KILL_AT (100),
# RUN_TIMEOUT, TEST_DEADLINE, LOGDIR, GPU_PIPEGEN, GPU_PIPERUN, CUDALIB,
# LDLIBS_CUDA, TEST_OPS_OBJ, GPU_REF, PG_GPU_FAKE: cpu (the CPU runtime stands
# in) or emu (the emulated CUDA runtime, build/emu: tests/gpu/emu/README.md).
. "$(dirname "$0")/../lib.sh"
TOP=$(cd "$(dirname "$0")/../.." && pwd)
. "$TOP/tools/gpu_env.sh"
PIPEGEN=${GPU_PIPEGEN:-$TOP/build/pipegen}
PIPERUN=${GPU_PIPERUN:-$TOP/build/piperun}
STEPS=${STEPS:-20}
export STEPS # tests/gpu/cpu_refs.sh reads it
TOL=${TOL:-2e-3}
TOL_BF16=${TOL_BF16:-5e-2}
TOL_CONV=${TOL_CONV:-$TOL} # conv_small against the CPU (the emulated cuDNN sums in double: 1e-5 there)
KILL_S=${KILL_S:-30}
KILL_AT=${KILL_AT:-100}
CC=${CC:-cc}
FAKE=${PG_GPU_FAKE:-}
GPU_MODEL=$TOP/tests/models/gpt_tiny.pipe
TEST_OPS_OBJ=${TEST_OPS_OBJ:-$TOP/build-cuda/cuda-tests/test_ops_gpu.o}
export OPENBLAS_NUM_THREADS=1
T=$(mktemp -d /tmp/pg-gpu.XXXXXX)
L=${LOGDIR:-$T}
mkdir -p "$L" || { echo "Bail out! cannot make LOGDIR $L"; exit 1; }
cleanup() {
    for f in "$T"/*.pid "$L"/*.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
. "$TOP/tests/gpu/lib_gpu.sh"

# --- what runs: the CUDA runtime, the emulated one, or the CPU one standing in ---
CPULIB=""
case $FAKE in
cpu)
    CUDALIB=$TOP/build/libpgrt_cpu.a
    LDLIBS_CUDA="-lpthread -lm"
    echo "# PG_GPU_FAKE=cpu: the CPU runtime stands in for the CUDA one (this checks the script, not a GPU)" ;;
emu)
    CUDALIB=${CUDALIB:-$TOP/build/emu/libpgrt_cuemu.a}
    LDLIBS_CUDA=${LDLIBS_EMU:--lstdc++ -lblas -lpthread -lm}
    TEST_OPS_BIN=$TOP/build/emu/test_ops_gpu
    echo "# PG_GPU_FAKE=emu: runtime/cuda on the emulated CUDA runtime (tests/gpu/emu/README.md): its logic, not a GPU's" ;;
'')
    CUDALIB=${CUDALIB:-$TOP/build-cuda/libpgrt_cuda.a}
    if [ -z "${LDLIBS_CUDA:-}" ]; then
        gpu_env_find "$T/lib" "${BUILT_CUDA_MAJOR:-}"
        printf '%s\n' "$GPU_ENV_REPORT" | sed 's/^/# /'
    fi ;;
*) echo "Bail out! PG_GPU_FAKE=$FAKE: cpu, emu or unset"; exit 1 ;;
esac
for f in "$PIPEGEN" "$PIPERUN"; do
    [ -x "$f" ] || { echo "Bail out! $f is missing"; exit 1; }
done
[ -f "$CUDALIB" ] && [ -n "$LDLIBS_CUDA" ] || { echo "Bail out! no runtime to link ($CUDALIB, LDLIBS_CUDA '$LDLIBS_CUDA')"; exit 1; }
REF=${GPU_REF:-$TOP/tests/gpu/ref}
if [ ! -s "$REF/cpu1.loss" ] && [ -f "$TOP/build/libpgrt_cpu.a" ]; then
    echo "# no CPU references in $REF: computing them (tests/gpu/cpu_refs.sh)"
    limited 600 "$TOP/tests/gpu/cpu_refs.sh" "$T/ref" 2>&1 | sed 's/^/# /'
    REF=$T/ref
fi
[ "$(grep -c '^[0-9]' "$REF/cpu1.loss" 2>/dev/null)" = "$STEPS" ] ||
    echo "# the CPU references in $REF are missing or not of $STEPS steps: every comparison with the CPU fails"

# section N: is section N among GPU_SECTIONS (default: all)?
section() {
    case " ${GPU_SECTIONS:-0 1 1b 2 3 4 5 5b 5c 6 6b 7} " in *" $1 "*) return 0 ;; esac
    return 1
}

# baseline: gpt_tiny on 1 stage, linked and trained (cuda1), once: what
# sections 1, 2, 5b and 6 compare with
BASELINE=""
baseline() {
    [ -z "$BASELINE" ] || return 0
    BASELINE=done
    variant g1 1; ok $? "gpt_tiny on 1 stage generates and links"
    train "$T/g1/cuda" "$L/cuda1"; ok $? "1 stage, graphs: $STEPS steps"
}

# tap_ran FILE WHAT: FILE is TAP output with a plan of at least one test, as
# many ok lines as planned and no failure
tap_ran() {
    awk '/^1\.\.[0-9]+/ { split($1, p, "\\.\\."); plan = p[2] } /^ok / { k++ } /^not ok/ { bad++ }
         END { exit !(plan > 0 && k == plan && !bad) }' "$1" 2>/dev/null
    tr_st=$?
    ok $tr_st "$2 ($(grep -c '^ok' "$1" 2>/dev/null) ok, $(grep -c '^not ok' "$1" 2>/dev/null) not ok)"
    [ $tr_st = 0 ] || grep -v '^ok' "$1" 2>/dev/null | head -30 | sed 's/^/# /'
}

# --- 0. the op tests, one process per group, and graph replay from C ---------------
if ! section 0; then
    :
elif [ "$FAKE" = cpu ]; then
    skip "the op tests need the CUDA runtime (tests/gpu_ops_on_cpu.t runs them on the CPU backend)"
    skip "graph replay needs the CUDA runtime"
else
    ops=${TEST_OPS_BIN:-$T/test_ops_gpu}
    # shellcheck disable=SC2086
    [ -n "${TEST_OPS_BIN:-}" ] || $CC -o "$ops" "$TEST_OPS_OBJ" "$CUDALIB" $LDLIBS_CUDA >"$L/ops_link.log" 2>&1
    groups=$("$ops" --list 2>>"$L/ops_link.log")
    [ -n "$groups" ] || { ok 1 "tests/gpu/test_ops_gpu.cu links and lists its groups"; sed 's/^/# /' "$L/ops_link.log" | tail -20; }
    against=""
    [ -s "$REF/cpu_ops.rec" ] && against=$REF/cpu_ops.rec
    for g in $groups; do
        PG_OPS_AGAINST=$against limited 120 "$ops" "$g" >"$L/ops-$g.tap" 2>"$L/ops-$g.log"
        tap_ran "$L/ops-$g.tap" "tests/gpu/test_ops_gpu.cu, group $g${against:+ (and against the CPU backend's results)}"
        [ -s "$L/ops-$g.tap" ] || tail -5 "$L/ops-$g.log" | sed 's/^/# /'
    done
    # shellcheck disable=SC2086
    $CC $CFLAGS_T -I"$TOP/runtime/core" -I"$TOP/runtime/cuda" -o "$T/graph_smoke" "$TOP/tests/gpu/graph_smoke.c" \
        "$CUDALIB" $LDLIBS_CUDA >"$L/graph.log" 2>&1 && limited 60 "$T/graph_smoke" >"$L/graph.tap" 2>>"$L/graph.log"
    [ -s "$L/graph.tap" ] || sed 's/^/# /' "$L/graph.log" | tail -20
    tap_ran "$L/graph.tap" "tests/gpu/graph_smoke.c: graph capture, replay and the failure path"
fi

# --- 1-5. gpt_tiny: stage counts, graphs, schedules, precision ----------------------

# 1. stage counts and graphs
if section 1; then
baseline
variant g4 4; ok $? "gpt_tiny on 4 stages generates and links"
train "$T/g1/cuda" "$L/cuda1e" --no-graph; ok $? "1 stage, --no-graph: $STEPS steps"
train "$T/g4/cuda" "$L/cuda4"; ok $? "4 stages on one GPU (CUDA IPC), graphs: $STEPS steps"
train "$T/g4/cuda" "$L/cuda4e" --no-graph; ok $? "4 stages, --no-graph: $STEPS steps"
[ "$(wc -l <"$L/cuda1.loss")" -eq $((STEPS + 1)) ]
ok $? "every step's loss is printed ($(wc -l <"$L/cuda1.loss") lines)"
same "$L/cuda1" "$L/cuda1e" "1 stage: graphs vs --no-graph"
same "$L/cuda1" "$L/cuda4" "4 stages vs 1 stage"
same "$L/cuda1" "$L/cuda4e" "4 stages --no-graph vs 1 stage graphs"
close "$REF/cpu1" "$L/cuda1" "$TOL" "CUDA vs CPU (cuBLAS vs the CPU GEMM, device expf/tanhf: close, not bitwise)" g1
falls "$L/cuda1" "1 stage"
if [ "$FAKE" = cpu ]; then
    skip "graphs are a CUDA-runtime feature"
else
    g_out=$(cat "$L/cuda1.out" 2>/dev/null)
    ! printf '%s' "$g_out" | grep -q 'CUDA graphs off' &&
        printf '%s' "$g_out" | grep -Eq 'CUDA graphs: [1-9][0-9]* captured, [1-9][0-9]* launched'
    ok $? "graphs are on for gpt_tiny: $(printf '%s' "$g_out" | grep -o 'CUDA graphs: [0-9]* captured, [0-9]* launched' || echo 'no graph report')"
fi
grep 'GPU memory' "$L/cuda1.out" 2>/dev/null | sed 's/^/# /'
fi

# 1b. the Llama layers: 1 stage with graphs and without, 3 stage processes
if section 1b; then
GPU_MODEL=$LLAMA_MODEL VARIANT_DEL=$LLAMA_1
variant l1 1; ok $? "oracle_llama (rmsnorm, grouped-query attention with rope, swiglu) on 1 stage generates and links"
VARIANT_DEL=''
variant l3 3; ok $? "oracle_llama on 3 stages generates and links"
GPU_MODEL=$TOP/tests/models/gpt_tiny.pipe
unset VARIANT_DEL
train "$T/l1/cuda" "$L/llama1"; ok $? "Llama layers, 1 stage, graphs: $STEPS steps"
train "$T/l1/cuda" "$L/llama1e" --no-graph; ok $? "Llama layers, 1 stage, --no-graph: $STEPS steps"
train "$T/l3/cuda" "$L/llama3"; ok $? "Llama layers, 3 stages on one GPU (CUDA IPC), graphs: $STEPS steps"
same "$L/llama1" "$L/llama1e" "Llama layers: graphs vs --no-graph"
same "$L/llama1" "$L/llama3" "Llama layers: 3 stages vs 1"
close "$REF/cpul1" "$L/llama1" "$TOL" "Llama layers: CUDA vs CPU (rope's sincospi, cuBLAS, expf: close, not bitwise)" l1
if [ "$FAKE" = cpu ]; then
    skip "graphs are a CUDA-runtime feature"
else
    grep -Eq 'CUDA graphs: [1-9][0-9]* captured, [1-9][0-9]* launched' "$L/llama1.out" 2>/dev/null
    ok $? "graphs are on for the Llama layers: $(grep -o 'CUDA graphs: [0-9]* captured, [0-9]* launched' "$L/llama1.out" 2>/dev/null || echo 'no graph report')"
fi
# with bf16 GEMM operands: the parts' per-head products (no fused kernel) and
# the padded vocabulary (13) take their copies in the plan's buffer too
GPU_MODEL=$LLAMA_MODEL VARIANT_DEL=$LLAMA_1
variant l1bf 1 -e "$LLAMA_BF16"; ok $? "oracle_llama, bf16, 1 stage: generates and links"
VARIANT_DEL=''
variant l3bf 3 -e "$LLAMA_BF16"; ok $? "oracle_llama, bf16, 3 stages: generates and links"
GPU_MODEL=$TOP/tests/models/gpt_tiny.pipe
unset VARIANT_DEL
train "$T/l1bf/cuda" "$L/llama1bf"; ok $? "Llama layers, bf16, 1 stage: $STEPS steps"
train "$T/l3bf/cuda" "$L/llama3bf"; ok $? "Llama layers, bf16, 3 stages: $STEPS steps"
same "$L/llama1bf" "$L/llama3bf" "Llama layers, bf16: 3 stages vs 1"
if [ "$FAKE" = cpu ]; then
    skip "the bf16 operand copies are the CUDA runtime's"
else
    lb_lines=$(grep -h 'bf16 operand copies:' "$L/llama1bf.out" "$L/llama3bf.out" 2>/dev/null)
    lb_n=$(printf '%s\n' "$lb_lines" | grep -c ' took [1-9][0-9]* bytes, the plan reserved [0-9]*; 0 bytes beside')
    lb_over=$(printf '%s\n' "$lb_lines" | sed -n 's/.* took \([0-9]*\) bytes, the plan reserved \([0-9]*\);.*/\1 \2/p' |
        awk '$1 > $2 { k++ } END { print k + 0 }')
    [ "$lb_n" = 4 ] && [ "$lb_over" = 0 ]
    lb_st=$?
    ok $lb_st "Llama layers, bf16: on each of the 4 stages of 1 and 3 the operand copies fit the plan's buffer ($lb_n reports)"
    [ $lb_st = 0 ] || printf '%s\n' "$lb_lines" | sed 's/^/# /'
fi
fi

# 2. schedules and checkpoint modes
if section 2; then
baseline
variant g4gpipe 4 -e 's/schedule = 1f1b/schedule = gpipe/'; ok $? "gpt_tiny, gpipe, 4 stages: generates and links"
variant g4zb1 4 -e 's/schedule = 1f1b/schedule = zb1/'; ok $? "gpt_tiny, zb1, 4 stages: generates and links"
variant g4always 4 -e 's/checkpoint = except_last/checkpoint = always/'
ok $? "gpt_tiny, checkpoint = always, 4 stages: generates and links"
variant g4never 4 -e 's/checkpoint = except_last/checkpoint = never/'
ok $? "gpt_tiny, checkpoint = never, 4 stages: generates and links"
for v in g4gpipe g4zb1 g4always g4never; do
    train "$T/$v/cuda" "$L/cuda-$v"; ok $? "$v: $STEPS steps"
    same "$L/cuda1" "$L/cuda-$v" "$v vs 1 stage"
done
fi

# three_ways NAME WHAT SED TOL: gpt_tiny changed by SED, on 1 stage with graphs
# ($L/cuda1NAME), with --no-graph (cuda1NAMEe) and on 4 stages (cuda4NAME):
# bitwise alike, within TOL of the CPU's reference cpu1NAME
three_ways() {
    tw_n=$1 tw_w=$2 tw_e=$3 tw_tol=$4
    variant "g1$tw_n" 1 -e "$tw_e"; ok $? "gpt_tiny, $tw_w, 1 stage: generates and links"
    variant "g4$tw_n" 4 -e "$tw_e"; ok $? "gpt_tiny, $tw_w, 4 stages: generates and links"
    train "$T/g1$tw_n/cuda" "$L/cuda1$tw_n"; ok $? "$tw_w, 1 stage, graphs: $STEPS steps"
    train "$T/g1$tw_n/cuda" "$L/cuda1${tw_n}e" --no-graph; ok $? "$tw_w, --no-graph: $STEPS steps"
    train "$T/g4$tw_n/cuda" "$L/cuda4$tw_n"; ok $? "$tw_w, 4 stages: $STEPS steps"
    same "$L/cuda1$tw_n" "$L/cuda1${tw_n}e" "$tw_w: graphs vs --no-graph"
    same "$L/cuda1$tw_n" "$L/cuda4$tw_n" "$tw_w: 4 stages vs 1"
    close "$REF/cpu1$tw_n" "$L/cuda1$tw_n" "$tw_tol" "$tw_w vs the CPU" "g1$tw_n"
}

# 3. a per-step lr (cosine): graphs must read it from device memory
if section 3; then
three_ways cos "cosine lr" "$COS" "$TOL"
fi

# 4. bf16 GEMM operands (the CPU computes the bf16 model in f32)
if section 4; then
three_ways bf bf16 "$BF16" "$TOL_BF16"
falls "$L/cuda1bf" "bf16"

# 4b. the fast kernel paths (runtime/cuda/README.md, "Kernel paths") against the
# reference kernels they replaced: bitwise across stage counts either way, close
# to each other; each run's own report says which paths it took
export PIPE_CUDA_KERNELS=reference
train "$T/g1bf/cuda" "$L/cuda1bfr"; ok $? "CUDA, bf16, PIPE_CUDA_KERNELS=reference, 1 stage: $STEPS steps"
train "$T/g4bf/cuda" "$L/cuda4bfr"; ok $? "CUDA, bf16, PIPE_CUDA_KERNELS=reference, 4 stages: $STEPS steps"
unset PIPE_CUDA_KERNELS
same "$L/cuda1bfr" "$L/cuda4bfr" "CUDA, bf16, reference kernels: 4 stages vs 1"
close "$L/cuda1bfr" "$L/cuda1bf" "$TOL_BF16" "CUDA bf16, fast kernel paths vs reference kernels"
if [ "$FAKE" = cpu ]; then
    for p in "bf16 GEMMs" colsum shadow flash lt "no fast path with PIPE_CUDA_KERNELS=reference" "no bf16 GEMM in the f32 run"; do
        skip "the CPU runtime has no kernel paths to report ($p)"
    done
else
    for p in "bf16 GEMMs" colsum shadow flash lt; do
        n_p=$(path_count "$L/cuda1bf" "$p")
        [ -s "$L/cuda1bf.out" ] && [ "$n_p" -gt 0 ]
        ok $? "bf16, fast paths: $p taken ($n_p host calls by the run's report)"
    done
    n_f=0
    for p in colsum pad shadow flash lt msplit; do n_f=$((n_f + $(path_count "$L/cuda1bfr" "$p"))); done
    [ -s "$L/cuda1bfr.out" ] && [ "$(paths_used "$L/cuda1bfr" | wc -l)" -ge 1 ] && [ $n_f = 0 ] &&
        [ "$(path_count "$L/cuda1bfr" "bf16 GEMMs")" -gt 0 ]
    ok $? "bf16, PIPE_CUDA_KERNELS=reference: no fast path taken, bf16 GEMMs still ($(paths_used "$L/cuda1bfr" | head -n 1))"
    baseline
    [ -s "$L/cuda1.out" ] && [ "$(paths_used "$L/cuda1" | wc -l)" -ge 1 ] && [ "$(path_count "$L/cuda1" "bf16 GEMMs")" = 0 ]
    ok $? "f32: no bf16 GEMM ($(paths_used "$L/cuda1" | head -n 1))"
    # the bf16 operand copies (runtime/core/pg_bf16ws.h): with the fast paths,
    # every product's fit the arena buffer the plan reserved, on every stage;
    # the reference kernels copy the weights too, so theirs go beside it, said
    bf_lines=$(grep -h 'bf16 operand copies:' "$L/cuda1bf.out" "$L/cuda4bf.out" 2>/dev/null)
    bf_want=$(cat "$L/cuda1bf.out" "$L/cuda4bf.out" 2>/dev/null | grep -c 'bf16 GEMMs [1-9]') # stages with bf16 GEMMs
    bf_bad=$(printf '%s\n' "$bf_lines" | sed -n 's/.* took \([0-9]*\) bytes, the plan reserved \([0-9]*\); \([0-9]*\) bytes beside.*/\1 \2 \3/p' |
        awk -v want="$bf_want" '{ n++ } !($1 > 0 && $1 <= $2 && $3 == 0) { bad++ }
            END { print (n == want && n > 0 ? bad + 0 : "the reports of " n + 0 " of " want " stages") }')
    ok "$([ "$bf_bad" = 0 ] && echo 0 || echo 1)" "bf16, fast paths: every product's operand copies fit the plan's buffer, none beside the arena ($bf_want stages of 1 and 4; $(printf '%s\n' "$bf_lines" | head -n 1 | sed 's/.*copies: //'))"
    [ "$bf_bad" = 0 ] || printf '%s\n' "$bf_lines" | sed 's/^/# /'
    grep -q 'more than the [0-9]* the memory plan reserved .*beside the arena' "$L/cuda1bfr.out" 2>/dev/null &&
        ! grep -q 'bf16 operand copies: .* 0 bytes beside' "$L/cuda1bfr.out"
    ok $? "bf16, PIPE_CUDA_KERNELS=reference: the weights' copies too, beside the arena, and said ($(grep -h 'bf16 operand copies:' "$L/cuda1bfr.out" 2>/dev/null | sed 's/.*copies: //'))"
    # device memory beyond the context: the plan's arena and the runtime's own
    # named allocations (the run's report); the emulator counts exactly what
    # is allocated, so there nothing is left over, the reference run's bf16
    # copies beside the arena included; on a GPU the rest is the CUDA
    # libraries' and the driver's (shown)
    mem_lines=$(grep -h 'GPU memory beside the arena at that peak' "$L/cuda1.out" "$L/cuda1bf.out" "$L/cuda4bf.out" \
        "$L/cuda1bfr.out" 2>/dev/null)
    mem_n=$(printf '%s\n' "$mem_lines" | grep -c 'the rest, -*[0-9]* bytes')
    if [ "$FAKE" = emu ]; then
        mem_zero=$(printf '%s\n' "$mem_lines" | grep -c 'the rest, 0 bytes')
        [ "$mem_n" = 7 ] && [ "$mem_zero" = 7 ] && printf '%s\n' "$mem_lines" | grep -q 'bf16 copies [1-9]'
        mem_st=$?
        ok $mem_st "every byte of device memory beyond the context is the arena or the runtime's named allocations ($mem_zero of $mem_n stage reports of f32, bf16 on 1 and 4 stages, and the reference kernels' copies beside)"
        [ $mem_st = 0 ] || printf '%s\n' "$mem_lines" | sed 's/^/# /'
    else
        [ "$mem_n" = 7 ]
        ok $? "each stage reports the runtime's own device memory beside the arena ($mem_n of 7 reports)"
        printf '%s\n' "$mem_lines" | head -n 2 | sed 's/^/# /'
    fi
fi
fi

# 5. dropout: its seed is a per-step host value, graphs stay off; its masks are
# the CPU's (a counter hash of seed, step and sample), whatever the stage count
if section 5; then
variant g1drop 1 -e "$DROP"; ok $? "gpt_tiny with dropout, 1 stage: generates and links"
variant g4drop 4 -e "$DROP"; ok $? "gpt_tiny with dropout, 4 stages: generates and links"
train "$T/g1drop/cuda" "$L/cuda1drop"; ok $? "dropout, graphs requested: $STEPS steps"
train "$T/g4drop/cuda" "$L/cuda4drop"; ok $? "dropout, 4 stages: $STEPS steps"
if [ "$FAKE" = cpu ]; then
    skip "graphs are a CUDA-runtime feature"
else
    like "$(cat "$L/cuda1drop.out" 2>/dev/null)" 'CUDA graphs off: .*dropout' "dropout: says graphs are off"
fi
same "$L/cuda1drop" "$L/cuda4drop" "dropout: 4 stages vs 1"
close "$REF/cpu1drop" "$L/cuda1drop" "$TOL" "dropout vs the CPU (the same masks)" g1drop
fi

# --- 5b. pp x dp: 2 replicas of 1, 2 and 4 stages on one GPU ---------------------------
if section 5b; then
baseline
[ -d "$T/g4" ] || { variant g4 4; ok $? "gpt_tiny on 4 stages generates and links"; }
variant g2 2; ok $? "gpt_tiny on 2 stages generates and links"
TRAIN_DP=2 train "$T/g1/cuda" "$L/cuda1d2"; ok $? "1 stage x 2 replicas on one GPU: $STEPS steps"
TRAIN_DP=2 train "$T/g2/cuda" "$L/cuda2d2"; ok $? "2 stages x 2 replicas on one GPU: $STEPS steps"
TRAIN_DP=2 train "$T/g2/cuda" "$L/cuda2d2b"; ok $? "2 stages x 2 replicas again: $STEPS steps"
TRAIN_DP=2 train "$T/g2/cuda" "$L/cuda2d2e" --no-graph; ok $? "2 stages x 2 replicas, --no-graph: $STEPS steps"
TRAIN_DP=2 train "$T/g4/cuda" "$L/cuda4d2"; ok $? "4 stages x 2 replicas (8 processes) on one GPU: $STEPS steps"
same "$L/cuda2d2" "$L/cuda2d2b" "2 stages x 2 replicas, twice"
same "$L/cuda1d2" "$L/cuda2d2" "2 replicas: 2 stages vs 1 stage"
same "$L/cuda1d2" "$L/cuda4d2" "2 replicas: 4 stages vs 1 stage"
same "$L/cuda2d2" "$L/cuda2d2e" "2 stages x 2 replicas: graphs vs --no-graph"
# step 1 runs the same weights on other micro-batches of the same rows: only
# the order of the loss's sums differs
d_a=$(sed -n 1p "$L/cuda1.loss" 2>/dev/null | cut -d' ' -f2) d_b=$(sed -n 1p "$L/cuda1d2.loss" 2>/dev/null | cut -d' ' -f2)
awk -v a="$d_a" -v b="$d_b" 'BEGIN { d = a - b; if (d < 0) d = -d; m = a < 0 ? -a : a;
    exit !(a != "" && b != "" && a == a + 0 && b == b + 0 && d <= 1e-6 * m) }'
ok $? "2 replicas: step 1's loss within 1e-6 relative of 1 replica's (${d_b:-none} vs ${d_a:-none})"
close "$REF/cpu1" "$L/cuda2d2" "$TOL" "2 stages x 2 replicas vs the CPU's 1 stage x 1 replica" g1
if [ "$FAKE" = cpu ]; then
    skip "the CPU runtime sums the replicas' gradients in place: no path to name"
else
    like "$(cat "$L/cuda2d2.out" 2>/dev/null)" \
        'gradient reduction over 2 replicas: through host memory over TCP .*not by NCCL: replicas 0 and 1 share GPU' \
        "2 replicas on one GPU: the start-up line names the host path, NCCL refusing two ranks on one GPU"
fi

# deferred batch norm: its sums over the replicas (the stats hook) keep graphs off
BN_BATCH='s/batch = 10  microbatches = 3/batch = 12  microbatches = 3/'
BN_MB6='s/batch = 10  microbatches = 3/batch = 12  microbatches = 6/'
GPU_MODEL=$TOP/tests/models/bn_small.pipe
variant b1 1 -e "$BN_BATCH"; ok $? "bn_small, 1 stage: generates and links"
VARIANT_DEL='' # bn_small has one split, # S1
variant b2 2 -e "$BN_BATCH"; ok $? "bn_small, 2 stages: generates and links"
variant b2m6 2 -e "$BN_MB6"; ok $? "bn_small, 6 micro-batches, 2 stages: generates and links"
unset VARIANT_DEL
GPU_MODEL=$TOP/tests/models/gpt_tiny.pipe
TRAIN_DP=2 train "$T/b1/cuda" "$L/bn1d2"; ok $? "bn_small, 1 stage x 2 replicas: $STEPS steps"
TRAIN_DP=2 train "$T/b2/cuda" "$L/bn2d2"; ok $? "bn_small, 2 stages x 2 replicas: $STEPS steps"
train "$T/b2m6/cuda" "$L/bn2m6"; ok $? "bn_small, 6 micro-batches, 2 stages x 1 replica: $STEPS steps"
same "$L/bn1d2" "$L/bn2d2" "bn_small, 2 replicas: 2 stages vs 1 stage (running statistics included)"
d_a=$(sed -n 1p "$L/bn2m6.loss" 2>/dev/null | cut -d' ' -f2) d_b=$(sed -n 1p "$L/bn2d2.loss" 2>/dev/null | cut -d' ' -f2)
awk -v a="$d_a" -v b="$d_b" 'BEGIN { d = a - b; if (d < 0) d = -d; m = a < 0 ? -a : a;
    exit !(a != "" && b != "" && a == a + 0 && b == b + 0 && d <= 1e-6 * m) }'
ok $? "bn_small: 2 replicas of 3 micro-batches, step 1's loss within 1e-6 relative of 1 replica of 6 (${d_b:-none} vs ${d_a:-none})"
if [ "$FAKE" = cpu ]; then
    skip "graphs are a CUDA-runtime feature"
else
    like "$(cat "$L/bn2d2.out" 2>/dev/null)" "CUDA graphs off: .*batch norm's sums over the data-parallel replicas" \
        "bn_small, 2 replicas: says graphs are off for the batch-norm sums"
fi
fi

# --- 5c. convolutional networks: conv_small on 1, 2 and 4 stages ---------------------
# (its split points are tagged # K1 .. # K7: 2 stages keep K4, 4 keep K2, K4, K6)
if ! section 5c; then
    :
else
GPU_MODEL=$TOP/tests/models/conv_small.pipe
VARIANT_DEL='/# K[1-7]$/d'
variant c1 1; ok $? "conv_small, 1 stage: generates and links"
VARIANT_DEL='/# K[1235-7]$/d'
variant c2 2; ok $? "conv_small, 2 stages: generates and links"
VARIANT_DEL='/# K[1357]$/d'
variant c4 4; ok $? "conv_small, 4 stages: generates and links"
unset VARIANT_DEL
GPU_MODEL=$TOP/tests/models/gpt_tiny.pipe
train "$T/c1/cuda" "$L/conv1"; ok $? "conv_small, 1 stage: $STEPS steps"
train "$T/c2/cuda" "$L/conv2"; ok $? "conv_small, 2 stages: $STEPS steps"
train "$T/c4/cuda" "$L/conv4"; ok $? "conv_small, 4 stages: $STEPS steps"
train "$T/c4/cuda" "$L/conv4e" --no-graph; ok $? "conv_small, 4 stages, --no-graph: $STEPS steps"
same "$L/conv1" "$L/conv2" "conv_small: 2 stages vs 1 stage"
same "$L/conv1" "$L/conv4" "conv_small: 4 stages vs 1 stage"
same "$L/conv4" "$L/conv4e" "conv_small: graphs vs --no-graph"
close "$REF/cpuconv" "$L/conv1" "$TOL_CONV" "conv_small: CUDA (cuDNN, own pooling and batch-norm kernels) vs the CPU" c1
falls "$L/conv1" "conv_small"
if [ "$FAKE" = cpu ]; then
    skip "the cuDNN plans are the CUDA runtime's"
else
    like "$(cat "$L/conv1.out" 2>/dev/null)" 'cuDNN [0-9.]*: [0-9]* convolution geometr.*deterministic fp32 algorithms, workspace [0-9]* bytes' \
        "conv_small: the end-of-run report names the cuDNN plans and their workspace"
fi
# the stage table's geometries (pg_stage_desc.convs) planned at start-up; a table
# one short makes the op that meets the missing geometry fail, naming why; a
# table without its plan function is refused at start-up
grep -qx '    .nconvs = 7, .convs = stage_convs, .conv_plan = pg_conv_plan,' "$T/c1/gen/stage0.c"
ok $? "conv_small, 1 stage: the stage table lists its 7 convolution geometries and the plan function"
cut_stage() { # cut_stage NAME SED: c1's stage0.c edited by SED, built into $T/NAME, run for a step: exit 1
    mkdir -p "$T/$1/cuda" && sed "$2" "$T/c1/gen/stage0.c" >"$T/$1/stage0.c" &&
        $CC $CFLAGS_T -I"$TOP/runtime/core" -I"$T/c1/gen" -o "$T/$1/cuda/stage0" "$T/$1/stage0.c" "$CUDALIB" \
            $LDLIBS_CUDA >"$T/$1/cc.log" 2>&1 &&
        { limited 120 "$PIPERUN" "$T/$1/cuda" -- --steps 1 --threads 1 --timeout 20 >"$L/$1.out" 2>&1; [ $? = 1 ]; }
}
cut_stage c1nofn 's/, \.conv_plan = pg_conv_plan,$/,/'
st=$?
grep -q '7 convolution geometries without their table or plan function: the stage file is corrupt' "$L/c1nofn.out" &&
    [ $st = 0 ]
ok $? "conv_small, a table without its plan function: refused at start-up, exit 1"
if [ "$FAKE" = cpu ]; then
    for i in 1 2; do skip "the cuDNN plans are the CUDA runtime's"; done
else
    like "$(cat "$L/conv1.out" 2>/dev/null)" 'cuDNN [0-9.]* at start-up: 7 convolution geometries planned \(forward / backward-data / backward-filter algorithms: 3->8 8x8 k3x3 s1x1 p1x1 d1x1 g1 [0-9]*/[0-9]*/[0-9]*,.*\), workspace [0-9]* bytes, allocated once' \
        "conv_small: the start-up line names the 7 geometries, their algorithms and the workspace"
    cut_stage c1cut 's/^    \.nconvs = 7, /    .nconvs = 6, /'
    st=$?
    grep -Eq 'conv[a-z_0-9]*: a convolution geometry the stage.s table \(pg_stage_desc.convs\) does not list: the stage file and its calls disagree' "$L/c1cut.out" &&
        [ $st = 0 ]
    ok $? "conv_small, a table one geometry short: the op meeting it fails naming the disagreement, exit 1"
fi
fi

# --- 6. two GPUs: NCCL between different devices ------------------------------------
ngpu=0
[ -n "$FAKE" ] || ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
no_nccl="$ngpu GPU(s)"
[ "$FAKE" = emu ] && no_nccl="the emulator runs every process on one GPU, and NCCL is not emulated"
free_port() {
    for fp_py in $(ge_pythons); do
        "$fp_py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' && return
    done
    awk 'BEGIN { srand(); print 20000 + int(rand() * 40000) }'
}
# start K WORLD MASTER GPU LOG [args]: run $T/g4/cuda/stageK by hand on GPU
start() {
    s_k=$1 s_w=$2 s_m=$3 s_g=$4 s_l=$5
    shift 5
    rm -f "$s_l.pid"
    [ -x "$T/g4/cuda/stage$s_k" ] || { echo "# $T/g4/cuda/stage$s_k: not built"; return 1; }
    CUDA_VISIBLE_DEVICES=$s_g PIPE_RANK=$s_k PIPE_WORLD=$s_w PIPE_MASTER=$s_m "$T/g4/cuda/stage$s_k" --threads 1 "$@" \
        >"$s_l" 2>&1 &
    echo $! >"$s_l.pid"
}
# wait_exit PIDFILE SECONDS: WX = the exit status, "hung" (killed after
# SECONDS, or when TEST_DEADLINE comes first) or "none" (no such process was started)
wait_exit() {
    WX=none
    we_p=$(cat "$1" 2>/dev/null)
    case $we_p in '' | *[!0-9]*) return ;; esac
    we_t=0 we_lim=$(time_left "$2")
    while kill -0 "$we_p" 2>/dev/null && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$we_p/stat" 2>/dev/null; do
        sleep 0.1; we_t=$((we_t + 1))
        if [ $we_t -ge $((we_lim * 10)) ]; then kill -9 "$we_p" 2>/dev/null; wait "$we_p" 2>/dev/null; WX=hung; return; fi
    done
    wait "$we_p"; WX=$?
    rm -f "$1"
}
if ! section 6; then
    :
elif [ "${ngpu:-0}" -ge 2 ]; then
    baseline
    [ -d "$T/g4" ] || { variant g4 4; ok $? "gpt_tiny on 4 stages generates and links"; }
    M=127.0.0.1:$(free_port)
    for k in 0 1 2 3; do
        start $k 4 "$M" $((k / 2)) "$L/n$k.log" --steps "$STEPS" --log-every 1 --timeout 60 --save "$L/cuda4n.safetensors"
    done
    st=0
    for k in 0 1 2 3; do wait_exit "$L/n$k.log.pid" 300; [ "$WX" = 0 ] || st=1; done
    ok $st "4 stages on 2 GPUs (NCCL between stages 1 and 2): $STEPS steps"
    [ $st = 0 ] || tail -5 "$L"/n?.log | sed 's/^/# /'
    [ -s "$L/cuda1.safetensors" ] && cmp -s "$L/cuda1.safetensors" "$L/cuda4n.safetensors"
    ok $? "2 GPUs: the 1-stage weights bitwise (same GPU model)"
else
    skip "$no_nccl: the NCCL path between GPUs needs two"
    skip "$no_nccl: the NCCL path between GPUs needs two"
fi

# --- 6b. pp x dp across GPUs: each replica on its own GPU, the sum by NCCL ----------
# dp_hand OUT [VAR=value...]: gpt_tiny's 2 stages x 2 replicas ($T/g2/cuda)
# started by hand, replica q on GPU q (rank = replica x 2 + stage), with the
# environment given; OUT.out all four logs, OUT.loss as train() makes it
dp_hand() {
    dh_o=$1
    shift
    : >"$dh_o.loss"
    dh_m=127.0.0.1:$(free_port)
    for k in 0 1 2 3; do
        [ -x "$T/g2/cuda/stage$((k % 2))" ] || { echo "# $T/g2/cuda: not built"; return 1; }
        env "$@" CUDA_VISIBLE_DEVICES=$((k / 2)) PIPE_RANK=$k PIPE_WORLD=4 PIPE_MASTER=$dh_m \
            "$T/g2/cuda/stage$((k % 2))" --threads 1 --steps "$STEPS" --log-every 1 --timeout 60 \
            --save "$dh_o.safetensors" >"$dh_o.$k.log" 2>&1 &
        echo $! >"$dh_o.$k.log.pid"
    done
    dh_st=0
    for k in 0 1 2 3; do wait_exit "$dh_o.$k.log.pid" 300; [ "$WX" = 0 ] || dh_st=1; done
    cat "$dh_o".[0-3].log >"$dh_o.out"
    sed -n 's/^.*step \([0-9]*\)\/[0-9]*  *loss \([-0-9.eEinfa+]*\).*$/\1 \2/p' "$dh_o.1.log" >"$dh_o.loss"
    grep 'final loss' "$dh_o.1.log" | sed 's/^\[stage [0-9]*\( replica 0\)*\] //' >>"$dh_o.loss"
    [ $dh_st = 0 ] || tail -5 "$dh_o".[0-3].log | sed 's/^/# /'
    return $dh_st
}
# the CPU runtime (PG_GPU_FAKE=cpu) checks the plumbing: its host path
# (PIPE_DP_STAGED=1) says why it is not NCCL where the GPUs say NCCL
if [ "$FAKE" = cpu ]; then
    dp_nccl='through host memory over TCP .*not by NCCL: the CPU runtime has no NCCL' dp_off=$dp_nccl
    dp_env=PIPE_DP_STAGED=1 dp_by=''
else
    dp_nccl='gradient reduction over 2 replicas: on the GPUs by NCCL'
    dp_off='through host memory over TCP .*not by NCCL: PIPE_DP_NCCL=0 on replica 0'
    dp_env=PIPE_DP_NCCL=1 dp_by=' by NCCL'
fi
if ! section 6b; then
    :
elif [ "${ngpu:-0}" -ge 2 ] || [ "$FAKE" = cpu ]; then
    baseline
    [ -d "$T/g2" ] || { variant g2 2; ok $? "gpt_tiny on 2 stages generates and links"; }
    [ -s "$L/cuda2d2.loss" ] || { TRAIN_DP=2 train "$T/g2/cuda" "$L/cuda2d2"; ok $? "2 stages x 2 replicas on one GPU: $STEPS steps"; }
    dp_hand "$L/dpn" $dp_env; ok $? "2 stages x 2 replicas, replica q on GPU q (the sum by NCCL): $STEPS steps"
    dp_hand "$L/dph" $dp_env PIPE_DP_NCCL=0; ok $? "the same with PIPE_DP_NCCL=0 (through host memory): $STEPS steps"
    n=$(grep -Ec "$dp_nccl" "$L/dpn.out" 2>/dev/null)
    is "$n" 2 "NCCL run: replica 0 of each stage names the path at start-up"
    grep -Eq "gradient reduction over 2 replicas$dp_by: [0-9]+ bytes sent per step in [0-9.]+ ms" "$L/dpn.out" 2>/dev/null
    ok $? "NCCL run: the reduction's time per step is reported: $(grep -m1 'bytes sent per step in' "$L/dpn.out" 2>/dev/null | cut -c1-140)"
    n=$(grep -Ec "$dp_off" "$L/dph.out" 2>/dev/null)
    is "$n" 2 "PIPE_DP_NCCL=0: replica 0 of each stage names the host path and why"
    same "$L/dph" "$L/dpn" "2 x 2 on 2 GPUs: NCCL vs the host path"
    same "$L/cuda2d2" "$L/dpn" "2 x 2: NCCL on 2 GPUs vs the host path on one"
    close "$REF/cpu1" "$L/dpn" "$TOL" "2 x 2 by NCCL vs the CPU's 1 stage x 1 replica" g1
else
    for i in 1 2 3 4 5 6 7 8; do skip "$no_nccl: the replicas' sum by NCCL needs a GPU per replica"; done
fi

# --- 7. a killed stage --------------------------------------------------------------
if section 7; then
[ -d "$T/g4" ] || { variant g4 4; ok $? "gpt_tiny on 4 stages generates and links"; }
M=127.0.0.1:$(free_port)
started=0
for k in 0 1 2 3; do
    start $k 4 "$M" "${CUDA_VISIBLE_DEVICES:-0}" "$L/kill$k.log" --steps 100000000 --log-every "$KILL_AT" --timeout 20 &&
        started=$((started + 1))
done
k_t=0 k_lim=$(time_left 120)
while [ $started = 4 ] && ! grep -q "step $KILL_AT/" "$L/kill3.log" 2>/dev/null && [ $k_t -lt $((k_lim * 10)) ] &&
    kill -0 "$(cat "$L/kill3.log.pid")" 2>/dev/null; do sleep 0.1; k_t=$((k_t + 1)); done
trained=1
grep -q "step $KILL_AT/" "$L/kill3.log" 2>/dev/null && trained=0
alive=0
for k in 0 1 2 3; do kill -0 "$(cat "$L/kill$k.log.pid" 2>/dev/null)" 2>/dev/null && alive=$((alive + 1)); done
[ $trained = 0 ] && [ $alive = 4 ]
ok $? "four stages train together (stage 3 at step $KILL_AT, $alive of 4 alive) until one is killed"
kill -9 "$(cat "$L/kill1.log.pid" 2>/dev/null)" 2>/dev/null
wait_exit "$L/kill1.log.pid" 5
st=""
for k in 0 2 3; do wait_exit "$L/kill$k.log.pid" "$KILL_S"; st="$st $k:$WX"; done
[ $trained = 0 ] && [ $alive = 4 ] && printf '%s' "$st" | grep -Eq '^ 0:[1-9][0-9]* 2:[1-9][0-9]* 3:[1-9][0-9]*$'
ok $? "stages 0, 2, 3 exit non-zero within $KILL_S s after stage 1 is killed ($st)"
# which neighbour notices first depends on where each was waiting (a stage
# blocked on stage 3 hears of stage 3's exit instead): one of stage 1's
# neighbours must name it, and every stage must name the stage it lost
lost='stage [0-3] closed its connection|stage [0-3].*failed|from stage [0-3] within'
[ $trained = 0 ] && cat "$L/kill0.log" "$L/kill2.log" 2>/dev/null | grep -Eq 'stage 1 closed its connection|from stage 1.*failed|with stage 1.*failed|stage 1.*within'
ok $? "stage 0 or stage 2 (its neighbours) names stage 1: $(grep -Ehm1 'stage 1' "$L/kill0.log" "$L/kill2.log" 2>/dev/null | head -n 1 | cut -c1-160)"
n_named=0
for k in 0 2 3; do grep -Eq "$lost" "$L/kill$k.log" 2>/dev/null && n_named=$((n_named + 1)); done
[ $trained = 0 ] && [ $n_named = 3 ]
ok $? "stages 0, 2 and 3 each name the stage they lost ($n_named of 3)"
for k in 0 2 3; do grep -Ehm1 "$lost" "$L/kill$k.log" 2>/dev/null | cut -c1-200 | sed 's/^/# /'; done
fi
done_testing
