#!/bin/sh
# tests/gpu/run_gpu_tests.sh — the CUDA runtime on a GPU machine, everything in
# one go (`make test-gpu`; needs a CUDA GPU, fails without one):
#  0. the op tests (build/cuda-tests/test_ops_gpu: every op against host
#     references, when built) and tests/gpu/graph_smoke.c;
#  1. tests/models/gpt_tiny.pipe trained STEPS steps with the CUDA stages on 1
#     stage and on 4 stage processes sharing the GPU (the same-device CUDA IPC
#     path), each with CUDA graphs (the default) and with --no-graph: all four
#     give the same losses and saved weights bit for bit, and every step's loss
#     is within TOL (relative) of the CPU runtime's;
#  2. the 4-stage run under the other schedules (gpipe, zb1) and checkpoint
#     modes (always, never): bitwise the 1-stage result again;
#  3. a cosine lr schedule (the per-step lr that graphs read from device
#     memory): graph = --no-graph = 4 stages bitwise, within TOL of the CPU;
#  4. precision = bf16: 1 and 4 stages and --no-graph bitwise alike, within
#     TOL_BF16 of the CPU (which computes bf16 models in f32), the loss falls;
#     with PIPE_CUDA_KERNELS=reference (the kernels before the fast paths)
#     1 and 4 stages bitwise alike again, within TOL_BF16 of the fast paths;
#  5. a model with dropout: graphs stay off with a note, the results equal --no-graph;
#  6. with 2+ GPUs, stages 0-1 on GPU 0 and 2-3 on GPU 1 (NCCL between 1 and 2,
#     IPC within each pair): bitwise the 1-stage result again;
#  7. a stage killed with SIGKILL mid-run: every other stage exits non-zero
#     within KILL_S seconds, stage 0 and stage 2 naming stage 1.
# Syntax-checked (sh -n) on every machine by tests/cuda_link.t. TAP on stdout.
. "$(dirname "$0")/../lib.sh"
TOP=$(cd "$(dirname "$0")/../.." && pwd)
PIPEGEN=$TOP/build/pipegen
PIPERUN=$TOP/build/piperun
STEPS=${STEPS:-20}
TOL=${TOL:-2e-3}
TOL_BF16=${TOL_BF16:-5e-2}
KILL_S=${KILL_S:-30}
CC=${CC:-cc}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
LDLIBS_CUDA="-L$CUDA_HOME/lib64 -Wl,-rpath,$CUDA_HOME/lib64 -lcudart -lcublas -lcublasLt -lnccl -lstdc++ -lpthread -lm"
CFLAGS_T="-std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -O2 -Wall -Wextra -Werror"
export OPENBLAS_NUM_THREADS=1
T=$(mktemp -d /tmp/pg-gpu.XXXXXX)
cleanup() {
    for f in "$T"/*.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
    rm -rf "$T"
}
trap cleanup EXIT

cd "$TOP" || exit 1
make --no-print-directory build/pipegen build/piperun build/libpgrt_cpu.a >"$T/make.log" 2>&1 &&
    make --no-print-directory CUDA=1 build-cuda/libpgrt_cuda.a >>"$T/make.log" 2>&1
st=$?
ok $st "the CPU and CUDA runtimes build"
[ $st = 0 ] || { tail -20 "$T/make.log" | sed 's/^/# /'; done_testing; }
CPULIB=$TOP/build/libpgrt_cpu.a
CUDALIB=$TOP/build-cuda/libpgrt_cuda.a

# --- 0. the op tests and graph replay from C --------------------------------------
if make --no-print-directory build/cuda-tests/test_ops_gpu >>"$T/make.log" 2>&1; then
    build/cuda-tests/test_ops_gpu >"$T/ops.out" 2>&1
    st=$?
    ok $st "tests/gpu/test_ops_gpu.cu: every op against the host references ($(grep -c '^ok' "$T/ops.out") ok)"
    [ $st = 0 ] || grep -v '^ok' "$T/ops.out" | head -30 | sed 's/^/# /'
else
    ok 1 "tests/gpu/test_ops_gpu.cu builds"
    tail -10 "$T/make.log" | sed 's/^/# /'
fi
$CC $CFLAGS_T -I"$TOP/runtime/core" -I"$TOP/runtime/cuda" -o "$T/graph_smoke" "$TOP/tests/gpu/graph_smoke.c" \
    "$CUDALIB" $LDLIBS_CUDA 2>"$T/graph.log" && "$T/graph_smoke" >"$T/graph.out" 2>&1
ok $? "tests/gpu/graph_smoke.c links and passes"
sed 's/^/# /' "$T/graph.log" "$T/graph.out" 2>/dev/null

# --- 1-5. gpt_tiny: stage counts, graphs, schedules, precision ----------------------
# variant NAME N [sed expressions]: gpt_tiny cut to N stages with the train
# block edited, generated into $T/NAME and linked for both runtimes
variant() {
    d=$T/$1 _n=$2
    shift 2
    case $_n in 1) del='/# S[123]$/d' ;; 2) del='/# S[13]$/d' ;; *) del='' ;; esac
    mkdir -p "$d/cpu" "$d/cuda"
    sed -e "$del" "$@" "$TOP/tests/models/gpt_tiny.pipe" >"$d/gpt_tiny.pipe"
    "$PIPEGEN" gen "$d/gpt_tiny.pipe" -o "$d/gen" >"$d/gen.log" 2>&1 || { sed 's/^/# /' "$d/gen.log"; return 1; }
    for f in "$d"/gen/stage*.c; do
        k=$(basename "$f" .c)
        $CC $CFLAGS_T -I"$TOP/runtime/core" -I"$d/gen" -o "$d/cpu/$k" "$f" "$CPULIB" -lopenblas -lpthread -lm &&
            $CC $CFLAGS_T -I"$TOP/runtime/core" -I"$d/gen" -o "$d/cuda/$k" "$f" "$CUDALIB" $LDLIBS_CUDA ||
            return 1
    done
}

# train DIR OUT [args]: STEPS steps with every loss printed and the weights saved
train() {
    _dir=$1 _out=$2
    shift 2
    : >"$_out.loss"
    "$PIPERUN" "$_dir" -- --steps "$STEPS" --log-every 1 --threads 1 --timeout 60 --save "$_out.safetensors" "$@" \
        >"$_out.out" 2>&1 || { tail -20 "$_out.out" | sed 's/^/# /'; return 1; }
    # "[stage k] step 3/20  loss 3.412345678  ..." -> "3 3.412345678", then the final loss
    sed -n 's/^.*step \([0-9]*\)\/[0-9]*  *loss \([-0-9.eEinfa+]*\).*$/\1 \2/p' "$_out.out" >"$_out.loss"
    grep 'final loss' "$_out.out" | sed 's/^\[stage [0-9]*\] //' >>"$_out.loss"
}

# same A B WHAT: runs A and B have the same losses and weights bit for bit
same() {
    [ -s "$T/$1.loss" ] && cmp -s "$T/$1.loss" "$T/$2.loss" && cmp -s "$T/$1.safetensors" "$T/$2.safetensors"
    _st=$?
    ok $_st "$3: losses and saved weights bitwise equal ($1 = $2)"
    [ $_st = 0 ] || diff "$T/$1.loss" "$T/$2.loss" 2>&1 | head -6 | sed 's/^/# /'
}

# close CPU CUDA TOL WHAT: every step's loss within TOL (relative, floor 1)
close() {
    _c=$(paste -d ' ' "$T/$1.loss" "$T/$2.loss" | awk -v tol="$3" '
        $1 == "final" { next }
        { d = $2 - $4; if (d < 0) d = -d; m = $2 < 0 ? -$2 : $2; if (m < 1) m = 1;
          if ($1 != $3 || d > tol * m) { printf "step %s: cpu %s cuda %s\n", $1, $2, $4; bad++ } n++ }
        END { if (n == 0) print "no losses"; else if (!bad) print "ok" }')
    is "$_c" ok "$4: losses within $3 of the CPU's at every step"
}

# falls RUN WHAT: the loss of the last step is below the first's
falls() {
    _a=$(head -1 "$T/$1.loss" | cut -d' ' -f2)
    _b=$(sed -n "${STEPS}p" "$T/$1.loss" | cut -d' ' -f2)
    awk -v a="$_a" -v b="$_b" 'BEGIN { exit !(a + 0 > b + 0 && b == b + 0) }'
    ok $? "$2: the loss falls ($_a -> $_b)"
}

COS='s/grad_clip = 1.0  seed = 5/grad_clip = 1.0  seed = 5  steps = 20  lr_schedule = cosine(warmup = 3, min = 1e-3)/'
BF16='s/grad_clip = 1.0  seed = 5/grad_clip = 1.0  seed = 5  precision = bf16/'
DROP='s/fc = linear(d -> 4\*d)  gelu/fc = linear(d -> 4*d)  gelu  dropout(p = 0.1)/'
variant g1 1; ok $? "gpt_tiny on 1 stage generates and links for the CPU and CUDA runtimes"
variant g4 4; ok $? "gpt_tiny on 4 stages generates and links for the CPU and CUDA runtimes"
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

# 1. stage counts and graphs
train "$T/g1/cpu" "$T/cpu1"; ok $? "CPU, 1 stage: $STEPS steps"
train "$T/g1/cuda" "$T/cuda1"; ok $? "CUDA, 1 stage, graphs: $STEPS steps"
train "$T/g1/cuda" "$T/cuda1e" --no-graph; ok $? "CUDA, 1 stage, --no-graph: $STEPS steps"
train "$T/g4/cuda" "$T/cuda4"; ok $? "CUDA, 4 stages on one GPU (CUDA IPC), graphs: $STEPS steps"
train "$T/g4/cuda" "$T/cuda4e" --no-graph; ok $? "CUDA, 4 stages, --no-graph: $STEPS steps"
[ "$(wc -l <"$T/cuda1.loss")" -eq $((STEPS + 1)) ]
ok $? "every step's loss is printed ($(wc -l <"$T/cuda1.loss") lines)"
same cuda1 cuda1e "CUDA, 1 stage: graphs vs --no-graph"
same cuda1 cuda4 "CUDA: 4 stages vs 1 stage"
same cuda1 cuda4e "CUDA: 4 stages --no-graph vs 1 stage graphs"
close cpu1 cuda1 "$TOL" "CUDA vs CPU (cuBLAS vs OpenBLAS, device expf/tanhf: close, not bitwise)"
falls cuda1 "CUDA"
! grep -q 'CUDA graphs off' "$T/cuda1.out"
ok $? "CUDA: graphs are on for gpt_tiny (no 'graphs off' note)"

# 2. schedules and checkpoint modes
for v in g4gpipe g4zb1 g4always g4never; do
    train "$T/$v/cuda" "$T/cuda-$v"; ok $? "CUDA, $v: $STEPS steps"
    same cuda1 "cuda-$v" "CUDA: $v vs 1 stage"
done

# 3. a per-step lr (cosine): graphs must read it from device memory
train "$T/g1cos/cpu" "$T/cpu1cos"; ok $? "CPU, cosine lr: $STEPS steps"
train "$T/g1cos/cuda" "$T/cuda1cos"; ok $? "CUDA, cosine lr, graphs: $STEPS steps"
train "$T/g1cos/cuda" "$T/cuda1cose" --no-graph; ok $? "CUDA, cosine lr, --no-graph: $STEPS steps"
train "$T/g4cos/cuda" "$T/cuda4cos"; ok $? "CUDA, cosine lr, 4 stages: $STEPS steps"
same cuda1cos cuda1cose "CUDA, cosine lr: graphs vs --no-graph"
same cuda1cos cuda4cos "CUDA, cosine lr: 4 stages vs 1"
close cpu1cos cuda1cos "$TOL" "CUDA, cosine lr, vs CPU"

# 4. bf16 GEMM operands
train "$T/g1bf/cpu" "$T/cpu1bf"; ok $? "CPU, bf16 model (computed in f32): $STEPS steps"
like "$(cat "$T/cpu1bf.out")" 'CPU runtime computes in f32' "CPU: says it computes a bf16 model in f32"
train "$T/g1bf/cuda" "$T/cuda1bf"; ok $? "CUDA, bf16, 1 stage, graphs: $STEPS steps"
train "$T/g1bf/cuda" "$T/cuda1bfe" --no-graph; ok $? "CUDA, bf16, --no-graph: $STEPS steps"
train "$T/g4bf/cuda" "$T/cuda4bf"; ok $? "CUDA, bf16, 4 stages: $STEPS steps"
same cuda1bf cuda1bfe "CUDA, bf16: graphs vs --no-graph"
same cuda1bf cuda4bf "CUDA, bf16: 4 stages vs 1"
close cpu1bf cuda1bf "$TOL_BF16" "CUDA bf16 vs CPU f32"
falls cuda1bf "CUDA, bf16"
! cmp -s "$T/cuda1.loss" "$T/cuda1bf.loss"
ok $? "CUDA: bf16 changes the losses (the bf16 GEMM path is taken)"

# 4b. the fast kernel paths (runtime/cuda/README.md, "Kernel paths") against the
# reference kernels they replaced: bitwise across stage counts either way, close
# to each other, and different (so the fast paths are taken)
export PIPE_CUDA_KERNELS=reference
train "$T/g1bf/cuda" "$T/cuda1bfr"; ok $? "CUDA, bf16, PIPE_CUDA_KERNELS=reference, 1 stage: $STEPS steps"
train "$T/g4bf/cuda" "$T/cuda4bfr"; ok $? "CUDA, bf16, PIPE_CUDA_KERNELS=reference, 4 stages: $STEPS steps"
unset PIPE_CUDA_KERNELS
same cuda1bfr cuda4bfr "CUDA, bf16, reference kernels: 4 stages vs 1"
close cuda1bfr cuda1bf "$TOL_BF16" "CUDA bf16, fast kernel paths vs reference kernels (cpu = reference)"
! cmp -s "$T/cuda1bfr.loss" "$T/cuda1bf.loss"
ok $? "CUDA, bf16: the fast kernel paths change the bits (they are taken)"

# 5. dropout: its seed is a per-step host value, graphs stay off
train "$T/g1drop/cuda" "$T/cuda1drop"; ok $? "CUDA, dropout, graphs requested: $STEPS steps"
train "$T/g1drop/cuda" "$T/cuda1drope" --no-graph; ok $? "CUDA, dropout, --no-graph: $STEPS steps"
like "$(cat "$T/cuda1drop.out")" 'CUDA graphs off: .*dropout' "CUDA, dropout: says graphs are off"
same cuda1drop cuda1drope "CUDA, dropout: default vs --no-graph"

# --- 6. two GPUs: NCCL between different devices ------------------------------------
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
free_port() {
    "${PYTHON:-/usr/bin/python3}" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# start K WORLD MASTER GPU LOG [args]: run $T/g4/cuda/stageK by hand on GPU
start() {
    _k=$1 _w=$2 _m=$3 _g=$4 _l=$5
    shift 5
    CUDA_VISIBLE_DEVICES=$_g PIPE_RANK=$_k PIPE_WORLD=$_w PIPE_MASTER=$_m "$T/g4/cuda/stage$_k" --threads 1 "$@" \
        >"$_l" 2>&1 &
    echo $! >"$_l.pid"
}
# wait_exit PID SECONDS: WX = exit status, or "hung" (killed)
wait_exit() {
    _t=0
    while kill -0 "$1" 2>/dev/null && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null; do
        sleep 0.1; _t=$((_t + 1))
        if [ $_t -ge $(($2 * 10)) ]; then kill -9 "$1" 2>/dev/null; wait "$1" 2>/dev/null; WX=hung; return; fi
    done
    wait "$1"; WX=$?
}
if [ "${ngpu:-0}" -ge 2 ]; then
    M=127.0.0.1:$(free_port)
    for k in 0 1 2 3; do
        start $k 4 "$M" $((k / 2)) "$T/n$k.log" --steps "$STEPS" --log-every 1 --timeout 60 --save "$T/cuda4n.safetensors"
    done
    st=0
    for k in 0 1 2 3; do wait_exit "$(cat "$T/n$k.log.pid")" 300; [ "$WX" = 0 ] || st=1; done
    ok $st "CUDA, 4 stages on 2 GPUs (NCCL between stages 1 and 2): $STEPS steps"
    [ $st = 0 ] || tail -5 "$T"/n?.log | sed 's/^/# /'
    cmp -s "$T/cuda1.safetensors" "$T/cuda4n.safetensors"
    ok $? "CUDA, 2 GPUs: the 1-stage weights bitwise (same GPU model)"
else
    echo "ok $((_n + 1)) # SKIP one GPU: the NCCL path needs two"; _n=$((_n + 1))
fi

# --- 7. a killed stage --------------------------------------------------------------
M=127.0.0.1:$(free_port)
for k in 0 1 2 3; do start $k 4 "$M" "${CUDA_VISIBLE_DEVICES:-0}" "$T/k$k.log" --steps 100000000 --log-every 50 --timeout 20; done
_t=0
while ! grep -q 'step 100/' "$T/k3.log" 2>/dev/null && [ $_t -lt 600 ] && kill -0 "$(cat "$T/k3.log.pid")" 2>/dev/null; do sleep 0.1; _t=$((_t + 1)); done
grep -q 'step 100/' "$T/k3.log"; ok $? "four CUDA stages train (until one is killed)"
kill -9 "$(cat "$T/k1.log.pid")" 2>/dev/null
wait "$(cat "$T/k1.log.pid")" 2>/dev/null
sleep 0.2
st=""
for k in 0 2 3; do wait_exit "$(cat "$T/k$k.log.pid")" "$KILL_S"; st="$st $k:$WX"; done
like "$st" '^ 0:[1-9][0-9]* 2:[1-9][0-9]* 3:[1-9][0-9]*$' "stages 0, 2, 3 exit non-zero within $KILL_S s after stage 1 is killed ($st)"
like "$(cat "$T/k0.log")" 'stage 0.*stage 1.*(closed its connection|failed|within)' "stage 0 names stage 1"
like "$(cat "$T/k2.log")" 'stage 2.*stage 1.*(closed its connection|failed|within)' "stage 2 names stage 1"
done_testing
