#!/bin/sh
# tests/gpu/run_gpu_tests.sh — the CUDA stage runtime on a GPU machine (run by
# `make test-gpu` after the op tests; needs a CUDA GPU, fails without one):
#  1. tests/gpu/graph_smoke.c: the process context, a CUDA graph replayed;
#  2. tests/models/gpt_tiny.pipe trained STEPS steps on 1 stage and on 4 stage
#     processes sharing the GPU (the same-device CUDA IPC path), with the CUDA
#     stage binaries: the 4-stage losses and saved weights are bitwise those of
#     1 stage, and every step's loss is within TOL (relative) of the CPU
#     runtime's;
#  3. with 2+ GPUs, stages 0-1 on GPU 0 and 2-3 on GPU 1 (NCCL between 1 and 2,
#     IPC within each pair): bitwise the 1-stage result again;
#  4. a stage killed with SIGKILL: every other stage exits non-zero within
#     KILL_S seconds, stage 0 and stage 2 naming stage 1.
# Syntax-checked (sh -n) on every machine by tests/cuda_link.t. TAP on stdout.
. "$(dirname "$0")/../lib.sh"
TOP=$(cd "$(dirname "$0")/../.." && pwd)
PIPEGEN=$TOP/build/pipegen
PIPERUN=$TOP/build/piperun
STEPS=${STEPS:-20}
TOL=${TOL:-2e-3}
KILL_S=${KILL_S:-30}
CC=${CC:-cc}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
LDLIBS_CUDA="-L$CUDA_HOME/lib64 -Wl,-rpath,$CUDA_HOME/lib64 -lcudart -lcublas -lnccl -lstdc++ -lpthread -lm"
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

# --- 1. graph replay and the process context, from C -------------------------------
$CC $CFLAGS_T -I"$TOP/runtime/core" -I"$TOP/runtime/cuda" -o "$T/graph_smoke" "$TOP/tests/gpu/graph_smoke.c" \
    "$CUDALIB" $LDLIBS_CUDA 2>"$T/graph.log" && "$T/graph_smoke" >"$T/graph.out" 2>&1
ok $? "tests/gpu/graph_smoke.c links and passes"
sed 's/^/# /' "$T/graph.log" "$T/graph.out" 2>/dev/null

# --- 2. gpt_tiny: 1 and 4 stages, CUDA and CPU -------------------------------------
# variant N: generate gpt_tiny cut to N stages into $T/gN, link it for both runtimes
variant() {
    d=$T/g$1
    case $1 in 1) del='/# S[123]$/d' ;; 2) del='/# S[13]$/d' ;; *) del='' ;; esac
    mkdir -p "$d/cpu" "$d/cuda"
    sed -e "$del" "$TOP/tests/models/gpt_tiny.pipe" >"$d/gpt_tiny.pipe"
    "$PIPEGEN" gen "$d/gpt_tiny.pipe" -o "$d/gen" >"$d/gen.log" 2>&1 || { sed 's/^/# /' "$d/gen.log"; return 1; }
    for f in "$d"/gen/stage*.c; do
        k=$(basename "$f" .c)
        $CC $CFLAGS_T -I"$TOP/runtime/core" -I"$d/gen" -o "$d/cpu/$k" "$f" "$CPULIB" -lopenblas -lpthread -lm &&
            $CC $CFLAGS_T -I"$TOP/runtime/core" -I"$d/gen" -o "$d/cuda/$k" "$f" "$CUDALIB" $LDLIBS_CUDA ||
            return 1
    done
}

# train DIR OUT: STEPS steps with every loss printed and the weights saved
train() {
    : >"$2.loss"
    "$PIPERUN" "$1" -- --steps "$STEPS" --log-every 1 --threads 1 --timeout 60 --save "$2.safetensors" \
        >"$2.out" 2>&1 || { tail -20 "$2.out" | sed 's/^/# /'; return 1; }
    # "[stage k] step 3/20  loss 3.412345678  ..." -> "3 3.412345678", then the final loss
    sed -n 's/^.*step \([0-9]*\)\/[0-9]*  *loss \([-0-9.eEinfa+]*\).*$/\1 \2/p' "$2.out" >"$2.loss"
    grep 'final loss' "$2.out" | sed 's/^\[stage [0-9]*\] //' >>"$2.loss"
}

for n in 1 4; do
    variant $n; ok $? "gpt_tiny on $n stage(s) generates and links for the CPU and CUDA runtimes"
done
train "$T/g1/cpu" "$T/cpu1"; ok $? "CPU, 1 stage: $STEPS steps"
train "$T/g1/cuda" "$T/cuda1"; ok $? "CUDA, 1 stage: $STEPS steps"
train "$T/g4/cuda" "$T/cuda4"; ok $? "CUDA, 4 stages on one GPU (CUDA IPC): $STEPS steps"
[ "$(wc -l <"$T/cuda1.loss")" -eq $((STEPS + 1)) ]
ok $? "every step's loss is printed ($(wc -l <"$T/cuda1.loss") lines)"
[ -s "$T/cuda1.loss" ] && cmp -s "$T/cuda1.loss" "$T/cuda4.loss"
st=$?
ok $st "CUDA: 4 stages give the 1-stage losses bitwise"
[ $st = 0 ] || diff "$T/cuda1.loss" "$T/cuda4.loss" 2>&1 | head -10 | sed 's/^/# /'
cmp -s "$T/cuda1.safetensors" "$T/cuda4.safetensors"
ok $? "CUDA: 4 stages save the 1-stage weights bitwise"
# CUDA vs CPU: cuBLAS vs OpenBLAS, device expf/tanhf: close, not bitwise
cmpl=$(paste -d ' ' "$T/cpu1.loss" "$T/cuda1.loss" | awk -v tol="$TOL" '
    $1 == "final" { next }
    { d = $2 - $4; if (d < 0) d = -d; m = $2 < 0 ? -$2 : $2; if (m < 1) m = 1;
      if ($1 != $3 || d > tol * m) { printf "step %s: cpu %s cuda %s\n", $1, $2, $4; bad++ } n++ }
    END { if (n == 0) print "no losses"; else if (!bad) print "ok" }')
is "$cmpl" ok "CUDA losses are within $TOL of the CPU's at every step"
first=$(head -1 "$T/cuda1.loss" | cut -d' ' -f2)
last=$(sed -n "${STEPS}p" "$T/cuda1.loss" | cut -d' ' -f2)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(a + 0 > b + 0 && b == b + 0) }'
ok $? "CUDA: the loss falls ($first -> $last)"

# --- 3. two GPUs: NCCL between different devices ------------------------------------
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
free_port() {
    /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
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

# --- 4. a killed stage --------------------------------------------------------------
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
