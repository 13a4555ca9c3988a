#!/bin/sh
# tests/gpu/run_gpu_tests.sh — the CUDA runtime on a GPU machine, everything in
# one go (TAP on stdout; run by the GPU bundle's `run.sh OUT test`, and by
# `make test-gpu` in a checkout). Needs a CUDA GPU; builds nothing with make:
# it uses what is there, at the paths of a checkout (and of the bundle, which
# has the same layout):
#   build/pipegen, build/piperun             the compiler and the launcher
#   build-cuda/libpgrt_cuda.a                the CUDA stage runtime
#   build-cuda/cuda-tests/test_ops_gpu.o        the op tests (nvcc-compiled object)
#   tests/gpu/ref/                           the CPU references (tests/gpu/cpu_refs.sh;
#                                            made here when missing and build/libpgrt_cpu.a exists)
# and links the stages with the C compiler against the cuBLAS, NCCL and CUDA
# runtime that tools/gpu_env.sh finds (or LDLIBS_CUDA when set).
#  0. the op tests (every op against host references) and tests/gpu/graph_smoke.c;
#  1. tests/models/gpt_tiny.pipe trained STEPS steps on 1 stage and on 4 stage
#     processes sharing the GPU (the same-device CUDA IPC path), each with CUDA
#     graphs (the default) and with --no-graph: all four give the same losses
#     and saved weights bit for bit, every step's loss within TOL (relative) of
#     the CPU runtime's, and the 1-stage run reports graphs captured and
#     launched;
#  2. the 4-stage run under the other schedules (gpipe, zb1) and checkpoint
#     modes (always, never): bitwise the 1-stage result again;
#  3. a cosine lr schedule (the per-step lr that graphs read from device
#     memory): graph = --no-graph = 4 stages bitwise, within TOL of the CPU;
#  4. precision = bf16: 1 and 4 stages and --no-graph bitwise alike, within
#     TOL_BF16 of the CPU (which computes bf16 models in f32), the loss falls;
#     with PIPE_CUDA_KERNELS=reference (the kernels before the fast paths)
#     1 and 4 stages bitwise alike again, within TOL_BF16 of the fast paths;
#  5. a model with dropout: graphs stay off with a note, the results equal --no-graph;
#  5c. tests/models/conv_small.pipe (every layer of convolutional networks:
#     cuDNN's convolutions, pooling, upsample, batchnorm2d(deferred), skips
#     across splits) on 1, 2 and 4 stages, graphs and --no-graph: bitwise
#     alike, every step within TOL of the CPU's, the loss falls, the report
#     line names the cuDNN plans;
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
#  7. a stage killed with SIGKILL mid-run: every other stage exits non-zero
#     within KILL_S seconds, one of its neighbours naming it, each naming the
#     stage it lost.
# Every check needs its runs to have happened: nothing passes when nothing ran
# (tests/gpu_scripts.t runs this script here with PG_GPU_FAKE=cpu, the CPU
# runtime standing in for the CUDA one, both working and with nothing to run).
# Knobs: STEPS (20), TOL (2e-3), TOL_BF16 (5e-2), KILL_S (30), RUN_TIMEOUT (120 s
# per run; each stage gives up a receive after 20 s), TEST_DEADLINE (seconds
# since the epoch: runs that would start later fail as "not run: out of
# time"), LOGDIR (copy every log there at the end), GPU_PIPEGEN, GPU_PIPERUN,
# CUDALIB, LDLIBS_CUDA, TEST_OPS_OBJ, GPU_REF, PG_GPU_FAKE=cpu.
. "$(dirname "$0")/../lib.sh"
TOP=$(cd "$(dirname "$0")/../.." && pwd)
. "$TOP/tools/gpu_env.sh"
PIPEGEN=${GPU_PIPEGEN:-$TOP/build/pipegen}
PIPERUN=${GPU_PIPERUN:-$TOP/build/piperun}
STEPS=${STEPS:-20}
TOL=${TOL:-2e-3}
TOL_BF16=${TOL_BF16:-5e-2}
KILL_S=${KILL_S:-30}
CC=${CC:-cc}
FAKE=${PG_GPU_FAKE:-}
GPU_MODEL=$TOP/tests/models/gpt_tiny.pipe
TEST_OPS_OBJ=${TEST_OPS_OBJ:-$TOP/build-cuda/cuda-tests/test_ops_gpu.o}
export OPENBLAS_NUM_THREADS=1
TIMEOUT=""
command -v timeout >/dev/null 2>&1 && TIMEOUT="timeout ${RUN_TIMEOUT:-120}"
T=$(mktemp -d /tmp/pg-gpu.XXXXXX)
cleanup() {
    for f in "$T"/*.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
    if [ -n "${LOGDIR:-}" ] && mkdir -p "$LOGDIR"; then
        for f in "$T"/*.out "$T"/*.log "$T"/*.loss; do [ -f "$f" ] && cp "$f" "$LOGDIR/"; done
    fi
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
. "$TOP/tests/gpu/lib_gpu.sh"

# --- what runs: the CUDA runtime, or the CPU one standing in (PG_GPU_FAKE=cpu) ---
CPULIB=""
if [ "$FAKE" = cpu ]; then
    CUDALIB=$TOP/build/libpgrt_cpu.a
    LDLIBS_CUDA="-lpthread -lm"
    echo "# PG_GPU_FAKE=cpu: the CPU runtime stands in for the CUDA one (this checks the script, not a GPU)"
else
    CUDALIB=${CUDALIB:-$TOP/build-cuda/libpgrt_cuda.a}
    if [ -z "${LDLIBS_CUDA:-}" ]; then
        gpu_env_find "$T/lib" "${BUILT_CUDA_MAJOR:-}"
        printf '%s\n' "$GPU_ENV_REPORT" | sed 's/^/# /'
    fi
fi
[ -x "$PIPEGEN" ] && [ -x "$PIPERUN" ] && [ -f "$CUDALIB" ] && [ -n "$LDLIBS_CUDA" ]
ok $? "pipegen, piperun, the runtime and its libraries are there ($PIPEGEN, $CUDALIB)"
REF=${GPU_REF:-$TOP/tests/gpu/ref}
if [ ! -s "$REF/cpu1.loss" ] && [ -f "$TOP/build/libpgrt_cpu.a" ]; then
    echo "# no CPU references in $REF: computing them (tests/gpu/cpu_refs.sh)"
    STEPS=$STEPS "$TOP/tests/gpu/cpu_refs.sh" "$T/ref" 2>&1 | sed 's/^/# /'
    REF=$T/ref
fi
[ -s "$REF/cpu1.loss" ] && [ -s "$REF/cpu1cos.loss" ] && [ -s "$REF/cpu1bf.loss" ] && [ -s "$REF/cpuconv.loss" ] &&
    [ "$(grep -c '^[0-9]' "$REF/cpu1.loss")" = "$STEPS" ]
ok $? "the CPU references are there, $STEPS steps each ($REF)"

# tap_ran FILE WHAT: FILE is TAP output with a plan of at least one test, as
# many ok lines as planned and no failure
tap_ran() {
    awk '/^1\.\.[0-9]+/ { split($1, p, "\\.\\."); plan = p[2] } /^ok / { k++ } /^not ok/ { bad++ }
         END { exit !(plan > 0 && k == plan && !bad) }' "$1" 2>/dev/null
    tr_st=$?
    ok $tr_st "$2 ($(grep -c '^ok' "$1" 2>/dev/null) ok, $(grep -c '^not ok' "$1" 2>/dev/null) not ok)"
    [ $tr_st = 0 ] || grep -v '^ok' "$1" 2>/dev/null | head -30 | sed 's/^/# /'
}

# --- 0. the op tests and graph replay from C --------------------------------------
if [ "$FAKE" = cpu ]; then
    skip "the op tests need the CUDA runtime (tests/gpu_ops_on_cpu.t runs them on the CPU backend)"
    skip "graph replay needs the CUDA runtime"
else
    # shellcheck disable=SC2086
    $CC -o "$T/test_ops_gpu" "$TEST_OPS_OBJ" "$CUDALIB" $LDLIBS_CUDA >"$T/ops_link.log" 2>&1 &&
        $TIMEOUT "$T/test_ops_gpu" >"$T/ops.out" 2>"$T/ops.log"
    [ -s "$T/ops.out" ] || sed 's/^/# /' "$T/ops_link.log" "$T/ops.log" 2>/dev/null | tail -20
    tap_ran "$T/ops.out" "tests/gpu/test_ops_gpu.cu: every op against the host references"
    # shellcheck disable=SC2086
    $CC $CFLAGS_T -I"$TOP/runtime/core" -I"$TOP/runtime/cuda" -o "$T/graph_smoke" "$TOP/tests/gpu/graph_smoke.c" \
        "$CUDALIB" $LDLIBS_CUDA >"$T/graph.log" 2>&1 && $TIMEOUT "$T/graph_smoke" >"$T/graph.out" 2>>"$T/graph.log"
    [ -s "$T/graph.out" ] || sed 's/^/# /' "$T/graph.log" | tail -20
    tap_ran "$T/graph.out" "tests/gpu/graph_smoke.c: graph capture, replay and the failure path"
fi

# --- 1-5. gpt_tiny: stage counts, graphs, schedules, precision ----------------------
variant g1 1; ok $? "gpt_tiny on 1 stage generates and links"
variant g4 4; ok $? "gpt_tiny on 4 stages generates and links"
variant g4gpipe 4 -e 's/schedule = 1f1b/schedule = gpipe/'; ok $? "gpt_tiny, gpipe, 4 stages: generates and links"
variant g4zb1 4 -e 's/schedule = 1f1b/schedule = zb1/'; ok $? "gpt_tiny, zb1, 4 stages: generates and links"
variant g4always 4 -e 's/checkpoint = except_last/checkpoint = always/'
ok $? "gpt_tiny, checkpoint = always, 4 stages: generates and links"
variant g4never 4 -e 's/checkpoint = except_last/checkpoint = never/'
ok $? "gpt_tiny, checkpoint = never, 4 stages: generates and links"
variant g1cos 1 -e "$COS"; ok $? "gpt_tiny, cosine lr, 1 stage: generates and links"
variant g4cos 4 -e "$COS"; ok $? "gpt_tiny, cosine lr, 4 stages: generates and links"
variant g1bf 1 -e "$BF16"; ok $? "gpt_tiny, bf16, 1 stage: generates and links"
variant g4bf 4 -e "$BF16"; ok $? "gpt_tiny, bf16, 4 stages: generates and links"
variant g1drop 1 -e "$DROP"; ok $? "gpt_tiny with dropout, 1 stage: generates and links"
ref_matches cpu1 g1
ref_matches cpu1cos g1cos
ref_matches cpu1bf g1bf

# 1. stage counts and graphs
train "$T/g1/cuda" "$T/cuda1"; ok $? "1 stage, graphs: $STEPS steps"
train "$T/g1/cuda" "$T/cuda1e" --no-graph; ok $? "1 stage, --no-graph: $STEPS steps"
train "$T/g4/cuda" "$T/cuda4"; ok $? "4 stages on one GPU (CUDA IPC), graphs: $STEPS steps"
train "$T/g4/cuda" "$T/cuda4e" --no-graph; ok $? "4 stages, --no-graph: $STEPS steps"
[ "$(wc -l <"$T/cuda1.loss")" -eq $((STEPS + 1)) ]
ok $? "every step's loss is printed ($(wc -l <"$T/cuda1.loss") lines)"
same "$T/cuda1" "$T/cuda1e" "1 stage: graphs vs --no-graph"
same "$T/cuda1" "$T/cuda4" "4 stages vs 1 stage"
same "$T/cuda1" "$T/cuda4e" "4 stages --no-graph vs 1 stage graphs"
close "$REF/cpu1" "$T/cuda1" "$TOL" "CUDA vs CPU (cuBLAS vs the CPU GEMM, device expf/tanhf: close, not bitwise)"
falls "$T/cuda1" "1 stage"
if [ "$FAKE" = cpu ]; then
    skip "graphs are a CUDA-runtime feature"
else
    g_out=$(cat "$T/cuda1.out" 2>/dev/null)
    ! printf '%s' "$g_out" | grep -q 'CUDA graphs off' &&
        printf '%s' "$g_out" | grep -Eq 'CUDA graphs: [1-9][0-9]* captured, [1-9][0-9]* launched'
    ok $? "graphs are on for gpt_tiny: $(printf '%s' "$g_out" | grep -o 'CUDA graphs: [0-9]* captured, [0-9]* launched' || echo 'no graph report')"
fi
grep 'GPU memory' "$T/cuda1.out" 2>/dev/null | sed 's/^/# /'

# 2. schedules and checkpoint modes
for v in g4gpipe g4zb1 g4always g4never; do
    train "$T/$v/cuda" "$T/cuda-$v"; ok $? "$v: $STEPS steps"
    same "$T/cuda1" "$T/cuda-$v" "$v vs 1 stage"
done

# 3. a per-step lr (cosine): graphs must read it from device memory
train "$T/g1cos/cuda" "$T/cuda1cos"; ok $? "cosine lr, graphs: $STEPS steps"
train "$T/g1cos/cuda" "$T/cuda1cose" --no-graph; ok $? "cosine lr, --no-graph: $STEPS steps"
train "$T/g4cos/cuda" "$T/cuda4cos"; ok $? "cosine lr, 4 stages: $STEPS steps"
same "$T/cuda1cos" "$T/cuda1cose" "cosine lr: graphs vs --no-graph"
same "$T/cuda1cos" "$T/cuda4cos" "cosine lr: 4 stages vs 1"
close "$REF/cpu1cos" "$T/cuda1cos" "$TOL" "cosine lr, vs CPU"

# 4. bf16 GEMM operands
like "$(cat "$REF/cpu1bf.out" 2>/dev/null)" 'CPU runtime computes in f32' "the CPU reference says it computed the bf16 model in f32"
train "$T/g1bf/cuda" "$T/cuda1bf"; ok $? "bf16, 1 stage, graphs: $STEPS steps"
train "$T/g1bf/cuda" "$T/cuda1bfe" --no-graph; ok $? "bf16, --no-graph: $STEPS steps"
train "$T/g4bf/cuda" "$T/cuda4bf"; ok $? "bf16, 4 stages: $STEPS steps"
same "$T/cuda1bf" "$T/cuda1bfe" "bf16: graphs vs --no-graph"
same "$T/cuda1bf" "$T/cuda4bf" "bf16: 4 stages vs 1"
close "$REF/cpu1bf" "$T/cuda1bf" "$TOL_BF16" "bf16 vs CPU f32"
falls "$T/cuda1bf" "bf16"
if [ "$FAKE" = cpu ]; then
    skip "the CPU runtime computes bf16 models in f32: no bf16 path to see"
else
    [ -s "$T/cuda1.loss" ] && [ -s "$T/cuda1bf.loss" ] && ! cmp -s "$T/cuda1.loss" "$T/cuda1bf.loss"
    ok $? "bf16 changes the losses (the bf16 GEMM path is taken)"
fi

# 4b. the fast kernel paths (runtime/cuda/README.md, "Kernel paths") against the
# reference kernels they replaced: bitwise across stage counts either way, close
# to each other, and different (so the fast paths are taken)
export PIPE_CUDA_KERNELS=reference
train "$T/g1bf/cuda" "$T/cuda1bfr"; ok $? "CUDA, bf16, PIPE_CUDA_KERNELS=reference, 1 stage: $STEPS steps"
train "$T/g4bf/cuda" "$T/cuda4bfr"; ok $? "CUDA, bf16, PIPE_CUDA_KERNELS=reference, 4 stages: $STEPS steps"
unset PIPE_CUDA_KERNELS
same "$T/cuda1bfr" "$T/cuda4bfr" "CUDA, bf16, reference kernels: 4 stages vs 1"
close "$T/cuda1bfr" "$T/cuda1bf" "$TOL_BF16" "CUDA bf16, fast kernel paths vs reference kernels"
if [ "$FAKE" = cpu ]; then
    skip "the CPU runtime has no kernel paths: fast and reference are the same code"
else
    [ -s "$T/cuda1bfr.loss" ] && [ -s "$T/cuda1bf.loss" ] && ! cmp -s "$T/cuda1bfr.loss" "$T/cuda1bf.loss"
    ok $? "CUDA, bf16: the fast kernel paths change the bits (they are taken)"
fi

# 5. dropout: its seed is a per-step host value, graphs stay off
train "$T/g1drop/cuda" "$T/cuda1drop"; ok $? "dropout, graphs requested: $STEPS steps"
train "$T/g1drop/cuda" "$T/cuda1drope" --no-graph; ok $? "dropout, --no-graph: $STEPS steps"
if [ "$FAKE" = cpu ]; then
    skip "graphs are a CUDA-runtime feature"
else
    like "$(cat "$T/cuda1drop.out" 2>/dev/null)" 'CUDA graphs off: .*dropout' "dropout: says graphs are off"
fi
same "$T/cuda1drop" "$T/cuda1drope" "dropout: default vs --no-graph"

# --- 5b. pp x dp: 2 replicas of 1, 2 and 4 stages on one GPU ---------------------------
variant g2 2; ok $? "gpt_tiny on 2 stages generates and links"
TRAIN_DP=2 train "$T/g1/cuda" "$T/cuda1d2"; ok $? "1 stage x 2 replicas on one GPU: $STEPS steps"
TRAIN_DP=2 train "$T/g2/cuda" "$T/cuda2d2"; ok $? "2 stages x 2 replicas on one GPU: $STEPS steps"
TRAIN_DP=2 train "$T/g2/cuda" "$T/cuda2d2b"; ok $? "2 stages x 2 replicas again: $STEPS steps"
TRAIN_DP=2 train "$T/g2/cuda" "$T/cuda2d2e" --no-graph; ok $? "2 stages x 2 replicas, --no-graph: $STEPS steps"
TRAIN_DP=2 train "$T/g4/cuda" "$T/cuda4d2"; ok $? "4 stages x 2 replicas (8 processes) on one GPU: $STEPS steps"
same "$T/cuda2d2" "$T/cuda2d2b" "2 stages x 2 replicas, twice"
same "$T/cuda1d2" "$T/cuda2d2" "2 replicas: 2 stages vs 1 stage"
same "$T/cuda1d2" "$T/cuda4d2" "2 replicas: 4 stages vs 1 stage"
same "$T/cuda2d2" "$T/cuda2d2e" "2 stages x 2 replicas: graphs vs --no-graph"
# step 1 runs the same weights on other micro-batches of the same rows: only
# the order of the loss's sums differs
d_a=$(sed -n 1p "$T/cuda1.loss" 2>/dev/null | cut -d' ' -f2) d_b=$(sed -n 1p "$T/cuda1d2.loss" 2>/dev/null | cut -d' ' -f2)
awk -v a="$d_a" -v b="$d_b" 'BEGIN { d = a - b; if (d < 0) d = -d; m = a < 0 ? -a : a;
    exit !(a != "" && b != "" && a == a + 0 && b == b + 0 && d <= 1e-6 * m) }'
ok $? "2 replicas: step 1's loss within 1e-6 relative of 1 replica's (${d_b:-none} vs ${d_a:-none})"
close "$REF/cpu1" "$T/cuda2d2" "$TOL" "2 stages x 2 replicas vs the CPU's 1 stage x 1 replica"
if [ "$FAKE" = cpu ]; then
    skip "the CPU runtime sums the replicas' gradients in place: no path to name"
else
    like "$(cat "$T/cuda2d2.out" 2>/dev/null)" \
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
TRAIN_DP=2 train "$T/b1/cuda" "$T/bn1d2"; ok $? "bn_small, 1 stage x 2 replicas: $STEPS steps"
TRAIN_DP=2 train "$T/b2/cuda" "$T/bn2d2"; ok $? "bn_small, 2 stages x 2 replicas: $STEPS steps"
train "$T/b2m6/cuda" "$T/bn2m6"; ok $? "bn_small, 6 micro-batches, 2 stages x 1 replica: $STEPS steps"
same "$T/bn1d2" "$T/bn2d2" "bn_small, 2 replicas: 2 stages vs 1 stage (running statistics included)"
d_a=$(sed -n 1p "$T/bn2m6.loss" 2>/dev/null | cut -d' ' -f2) d_b=$(sed -n 1p "$T/bn2d2.loss" 2>/dev/null | cut -d' ' -f2)
awk -v a="$d_a" -v b="$d_b" 'BEGIN { d = a - b; if (d < 0) d = -d; m = a < 0 ? -a : a;
    exit !(a != "" && b != "" && a == a + 0 && b == b + 0 && d <= 1e-6 * m) }'
ok $? "bn_small: 2 replicas of 3 micro-batches, step 1's loss within 1e-6 relative of 1 replica of 6 (${d_b:-none} vs ${d_a:-none})"
if [ "$FAKE" = cpu ]; then
    skip "graphs are a CUDA-runtime feature"
else
    like "$(cat "$T/bn2d2.out" 2>/dev/null)" "CUDA graphs off: .*batch norm's sums over the data-parallel replicas" \
        "bn_small, 2 replicas: says graphs are off for the batch-norm sums"
fi

# --- 5c. convolutional networks: conv_small on 1, 2 and 4 stages ---------------------
# (its split points are tagged # K1 .. # K7: 2 stages keep K4, 4 keep K2, K4, K6)
GPU_MODEL=$TOP/tests/models/conv_small.pipe
VARIANT_DEL='/# K[1-7]$/d'
variant c1 1; ok $? "conv_small, 1 stage: generates and links"
VARIANT_DEL='/# K[1235-7]$/d'
variant c2 2; ok $? "conv_small, 2 stages: generates and links"
VARIANT_DEL='/# K[1357]$/d'
variant c4 4; ok $? "conv_small, 4 stages: generates and links"
unset VARIANT_DEL
GPU_MODEL=$TOP/tests/models/gpt_tiny.pipe
train "$T/c1/cuda" "$T/conv1"; ok $? "conv_small, 1 stage: $STEPS steps"
train "$T/c2/cuda" "$T/conv2"; ok $? "conv_small, 2 stages: $STEPS steps"
train "$T/c4/cuda" "$T/conv4"; ok $? "conv_small, 4 stages: $STEPS steps"
train "$T/c4/cuda" "$T/conv4e" --no-graph; ok $? "conv_small, 4 stages, --no-graph: $STEPS steps"
same "$T/conv1" "$T/conv2" "conv_small: 2 stages vs 1 stage"
same "$T/conv1" "$T/conv4" "conv_small: 4 stages vs 1 stage"
same "$T/conv4" "$T/conv4e" "conv_small: graphs vs --no-graph"
ref_matches cpuconv c1
close "$REF/cpuconv" "$T/conv1" "$TOL" "conv_small: CUDA (cuDNN, own pooling and batch-norm kernels) vs the CPU"
falls "$T/conv1" "conv_small"
if [ "$FAKE" = cpu ]; then
    skip "the cuDNN plans are the CUDA runtime's"
else
    like "$(cat "$T/conv1.out" 2>/dev/null)" 'cuDNN [0-9.]*: [0-9]* convolution geometr.*deterministic fp32 algorithms, workspace [0-9]* bytes' \
        "conv_small: the end-of-run report names the cuDNN plans and their workspace"
fi

# --- 6. two GPUs: NCCL between different devices ------------------------------------
ngpu=0
[ "$FAKE" = cpu ] || ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
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
# SECONDS) or "none" (no such process was started)
wait_exit() {
    WX=none
    we_p=$(cat "$1" 2>/dev/null)
    case $we_p in '' | *[!0-9]*) return ;; esac
    we_t=0
    while kill -0 "$we_p" 2>/dev/null && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$we_p/stat" 2>/dev/null; do
        sleep 0.1; we_t=$((we_t + 1))
        if [ $we_t -ge $(($2 * 10)) ]; then kill -9 "$we_p" 2>/dev/null; wait "$we_p" 2>/dev/null; WX=hung; return; fi
    done
    wait "$we_p"; WX=$?
    rm -f "$1"
}
if [ "${ngpu:-0}" -ge 2 ]; then
    M=127.0.0.1:$(free_port)
    for k in 0 1 2 3; do
        start $k 4 "$M" $((k / 2)) "$T/n$k.log" --steps "$STEPS" --log-every 1 --timeout 60 --save "$T/cuda4n.safetensors"
    done
    st=0
    for k in 0 1 2 3; do wait_exit "$T/n$k.log.pid" 300; [ "$WX" = 0 ] || st=1; done
    ok $st "4 stages on 2 GPUs (NCCL between stages 1 and 2): $STEPS steps"
    [ $st = 0 ] || tail -5 "$T"/n?.log | sed 's/^/# /'
    [ -s "$T/cuda1.safetensors" ] && cmp -s "$T/cuda1.safetensors" "$T/cuda4n.safetensors"
    ok $? "2 GPUs: the 1-stage weights bitwise (same GPU model)"
else
    skip "$ngpu GPU(s): the NCCL path between GPUs needs two"
    skip "$ngpu GPU(s): the NCCL path between GPUs needs two"
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
if [ "${ngpu:-0}" -ge 2 ] || [ "$FAKE" = cpu ]; then
    dp_hand "$T/dpn" $dp_env; ok $? "2 stages x 2 replicas, replica q on GPU q (the sum by NCCL): $STEPS steps"
    dp_hand "$T/dph" $dp_env PIPE_DP_NCCL=0; ok $? "the same with PIPE_DP_NCCL=0 (through host memory): $STEPS steps"
    n=$(grep -Ec "$dp_nccl" "$T/dpn.out" 2>/dev/null)
    is "$n" 2 "NCCL run: replica 0 of each stage names the path at start-up"
    grep -Eq "gradient reduction over 2 replicas$dp_by: [0-9]+ bytes sent per step in [0-9.]+ ms" "$T/dpn.out" 2>/dev/null
    ok $? "NCCL run: the reduction's time per step is reported: $(grep -m1 'bytes sent per step in' "$T/dpn.out" 2>/dev/null | cut -c1-140)"
    n=$(grep -Ec "$dp_off" "$T/dph.out" 2>/dev/null)
    is "$n" 2 "PIPE_DP_NCCL=0: replica 0 of each stage names the host path and why"
    same "$T/dph" "$T/dpn" "2 x 2 on 2 GPUs: NCCL vs the host path"
    same "$T/cuda2d2" "$T/dpn" "2 x 2: NCCL on 2 GPUs vs the host path on one"
    close "$REF/cpu1" "$T/dpn" "$TOL" "2 x 2 by NCCL vs the CPU's 1 stage x 1 replica"
else
    for i in 1 2 3 4 5 6 7 8; do skip "$ngpu GPU(s): the replicas' sum by NCCL needs a GPU per replica"; done
fi

# --- 7. a killed stage --------------------------------------------------------------
M=127.0.0.1:$(free_port)
started=0
for k in 0 1 2 3; do
    start $k 4 "$M" "${CUDA_VISIBLE_DEVICES:-0}" "$T/k$k.log" --steps 100000000 --log-every 50 --timeout 20 &&
        started=$((started + 1))
done
k_t=0
while [ $started = 4 ] && ! grep -q 'step 100/' "$T/k3.log" 2>/dev/null && [ $k_t -lt 1200 ] &&
    kill -0 "$(cat "$T/k3.log.pid")" 2>/dev/null; do sleep 0.1; k_t=$((k_t + 1)); done
trained=1
grep -q 'step 100/' "$T/k3.log" 2>/dev/null && trained=0
alive=0
for k in 0 1 2 3; do kill -0 "$(cat "$T/k$k.log.pid" 2>/dev/null)" 2>/dev/null && alive=$((alive + 1)); done
[ $trained = 0 ] && [ $alive = 4 ]
ok $? "four stages train together (stage 3 at step 100, $alive of 4 alive) until one is killed"
kill -9 "$(cat "$T/k1.log.pid" 2>/dev/null)" 2>/dev/null
wait_exit "$T/k1.log.pid" 5
st=""
for k in 0 2 3; do wait_exit "$T/k$k.log.pid" "$KILL_S"; st="$st $k:$WX"; done
[ $trained = 0 ] && [ $alive = 4 ] && printf '%s' "$st" | grep -Eq '^ 0:[1-9][0-9]* 2:[1-9][0-9]* 3:[1-9][0-9]*$'
ok $? "stages 0, 2, 3 exit non-zero within $KILL_S s after stage 1 is killed ($st)"
# which neighbour notices first depends on where each was waiting (a stage
# blocked on stage 3 hears of stage 3's exit instead): one of stage 1's
# neighbours must name it, and every stage must name the stage it lost
lost='stage [0-3] closed its connection|stage [0-3].*failed|from stage [0-3] within'
[ $trained = 0 ] && cat "$T/k0.log" "$T/k2.log" 2>/dev/null | grep -Eq 'stage 1 closed its connection|from stage 1.*failed|with stage 1.*failed|stage 1.*within'
ok $? "stage 0 or stage 2 (its neighbours) names stage 1: $(grep -Ehm1 'stage 1' "$T/k0.log" "$T/k2.log" 2>/dev/null | head -n 1 | cut -c1-160)"
n_named=0
for k in 0 2 3; do grep -Eq "$lost" "$T/k$k.log" 2>/dev/null && n_named=$((n_named + 1)); done
[ $trained = 0 ] && [ $n_named = 3 ]
ok $? "stages 0, 2 and 3 each name the stage they lost ($n_named of 3)"
for k in 0 2 3; do grep -Ehm1 "$lost" "$T/k$k.log" 2>/dev/null | cut -c1-200 | sed 's/^/# /'; done
for k in 0 1 2 3; do [ -f "$T/k$k.log" ] && cp "$T/k$k.log" "$T/kill$k.log"; done
done_testing
