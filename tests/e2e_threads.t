#!/bin/sh
# tests/e2e_threads.t — training gives the same bits whatever the thread count
# and the GEMM kernel (runtime/cpu/gemm.c), end to end through piperun:
#  - examples/mlp.pipe (512 -> 512 -> 1024 -> 256, 64-row micro-batches: every
#    product is split among the threads) on 1 stage and on its 3 stages with
#    piperun's default threads (the host's cores / the stage count: 2 and 1 on
#    a 2-core host), and on 1 stage with --threads 1, 2 and 4: the same loss
#    text and byte-identical saved weights;
#  - examples/gpt_char.pipe (attention, layernorm, gelu, the tied embedding) on
#    1 stage and on its 4 stages, default threads: the same;
#  - tests/models/gpt_tiny.pipe with every GEMM kernel this CPU runs
#    (PIPE_CPU_GEMM=avx512|avx2|portable: what an AVX-512, an AVX2-only and an
#    older host pick; portable also runs the elementwise and row loops' baseline
#    build, runtime/cpu/README.md) on 1 and 2 threads: the same; and on 2 stages started by
#    hand with a different kernel each (stages on different kinds of host): the
#    same as through piperun.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
. "$TOP/tests/lib_fault.sh" # free_port, start_stage, wait_exit
T=$(mktemp -d /tmp/pg-e2e-threads.XXXXXX)
trap 'rm -rf "$T"' EXIT
CORES=$(getconf _NPROCESSORS_ONLN)

# gen_variant DIR SRC SED...: SRC with the sed expressions applied, generated and built in DIR
gen_variant() {
    _gd=$1 _gs=$2
    shift 2
    mkdir -p "$_gd"
    sed "$@" "$_gs" >"$_gd/m.pipe" || return 1
    "$PIPEGEN" gen "$_gd/m.pipe" -o "$_gd/gen" >"$_gd/gen.out" 2>&1 || { sed 's/^/# /' "$_gd/gen.out"; return 1; }
    build "$_gd/gen"
}

# train DIR NAME STEPS [STAGE OPTIONS]: piperun DIR/gen/bin; loss text in DIR/NAME.loss,
# weights in DIR/NAME.st
train() {
    _td=$1 _tn=$2 _tst=$3
    shift 3
    "$PIPERUN" "$_td/gen/bin" -- --steps "$_tst" --save "$_td/$_tn.st" "$@" >"$_td/$_tn.out" 2>&1 ||
        { sed 's/^/# /' "$_td/$_tn.out" | tail -20; return 1; }
    grep 'final loss' "$_td/$_tn.out" | sed 's/^\[stage [0-9]*\] //' >"$_td/$_tn.loss"
    [ -s "$_td/$_tn.loss" ]
}

# same A B NAME: runs A and B (DIR/NAME pairs) printed the same loss and saved the same bytes
same() {
    cmp -s "$1.loss" "$2.loss" && cmp -s "$1.st" "$2.st" && return 0
    echo "# $(cat "$1.loss" 2>/dev/null) vs $(cat "$2.loss" 2>/dev/null)"
    return 1
}

# --- the quickstart MLP: 1 stage and 3 stages, piperun's default threads ------
M1=$T/mlp1 M3=$T/mlp3
gen_variant "$M1" "$TOP/examples/mlp.pipe" -e '/^[[:space:]]*split[[:space:]]*$/d'
ok $? "examples/mlp.pipe builds on 1 stage"
gen_variant "$M3" "$TOP/examples/mlp.pipe" -e ''
ok $? "examples/mlp.pipe builds on its 3 stages"
train "$M1" default 3; ok $? "1 stage trains with piperun's default threads ($CORES)"
t3=$((CORES / 3)); [ "$t3" -ge 1 ] || t3=1
train "$M3" default 3; ok $? "3 stages train with piperun's default threads ($t3 each)"
same "$M1/default" "$M3/default"
ok $? "mlp: 1 stage ($CORES threads) and 3 stages ($t3 thread(s) each) give the same loss and weights, bitwise"
for t in 1 2 4; do
    train "$M1" "t$t" 3 --threads "$t" && same "$M1/default" "$M1/t$t"
    ok $? "mlp on 1 stage with --threads $t: the same loss and weights, bitwise"
done

# --- gpt_char: 1 stage and 4 stages, default threads --------------------------
G1=$T/gpt1 G4=$T/gpt4
gen_variant "$G1" "$TOP/examples/gpt_char.pipe" -e '/^[[:space:]]*split[[:space:]]*$/d' -e '/^[[:space:]]*tie[[:space:]]/d'
ok $? "examples/gpt_char.pipe builds on 1 stage"
gen_variant "$G4" "$TOP/examples/gpt_char.pipe" -e ''
ok $? "examples/gpt_char.pipe builds on its 4 stages"
train "$G1" default 2 && train "$G4" default 2 && same "$G1/default" "$G4/default"
ok $? "gpt_char: 1 stage ($CORES threads) and 4 stages (default threads) give the same loss and weights, bitwise"

# --- every GEMM kernel --------------------------------------------------------
K=$T/tiny
gen_variant "$K" "$TOP/tests/models/gpt_tiny.pipe" -e '/# S[123]$/d' -e '/^tie /d'
ok $? "tests/models/gpt_tiny.pipe builds on 1 stage"
flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
ref=""
gemm_list=""
for k in avx512 avx2 portable; do
    case $k in
        avx512) case $flags in *" avx512f "*) ;; *) ok 0 "# SKIP this CPU has no AVX-512F"; continue ;; esac ;;
        avx2) case $flags in *" avx2 "*" fma "*|*" fma "*" avx2 "*) ;; *) ok 0 "# SKIP this CPU has no AVX2+FMA"; continue ;; esac ;;
    esac
    gemm_list="$gemm_list $k"
    for t in 1 2; do
        export PIPE_CPU_GEMM=$k
        train "$K" "$k-$t" 4 --threads "$t"
        st=$?
        unset PIPE_CPU_GEMM
        if [ $st = 0 ] && [ -n "$ref" ]; then same "$K/$ref" "$K/$k-$t"; st=$?; fi
        [ -n "$ref" ] || ref=$k-$t
        ok $st "gpt_tiny with PIPE_CPU_GEMM=$k, $t thread(s): the same loss and weights as $ref, bitwise"
    done
done
# 2 stages, each with its own kernel, against the same 2 stages through piperun
K2=$T/tiny2
gen_variant "$K2" "$TOP/tests/models/gpt_tiny.pipe" -e '/# S[13]$/d'
ok $? "tests/models/gpt_tiny.pipe builds on 2 stages"
train "$K2" piperun 4 --threads 1
ok $? "2 stages train through piperun"
k0=portable k1=portable # an AVX2 host's kernel on stage 0 where there is one, and no SIMD on stage 1
case $gemm_list in *avx2*) k0=avx2 ;; esac
port=$(free_port)
export PIPE_CPU_GEMM=$k0
start_stage "$K2/gen/bin" 0 2 "127.0.0.1:$port" "$K2/mixed.0.out" --steps 4 --save "$K2/mixed.st"
export PIPE_CPU_GEMM=$k1
start_stage "$K2/gen/bin" 1 2 "127.0.0.1:$port" "$K2/mixed.1.out" --steps 4 --save "$K2/mixed.st"
unset PIPE_CPU_GEMM
wait_exit "$(cat "$K2/mixed.0.out.pid")" 60; x0=$WX
wait_exit "$(cat "$K2/mixed.1.out.pid")" 60; x1=$WX
grep 'final loss' "$K2/mixed.1.out" >"$K2/mixed.loss"
[ "$x0" = 0 ] && [ "$x1" = 0 ] && sed 's/^\[stage [0-9]*\] //' "$K2/piperun.loss" | cmp -s - "$K2/mixed.loss" &&
    cmp -s "$K2/piperun.st" "$K2/mixed.st"
ok $? "2 stages by hand, stage 0 with the $k0 GEMM kernel and stage 1 with the $k1 one (exits $x0, $x1): the same loss and weights as through piperun"

PIPE_CPU_GEMM=avx3 "$PIPERUN" "$K/gen/bin" -- --steps 1 >"$T/bad.out" 2>&1
st=$?
[ $st != 0 ]; ok $? "PIPE_CPU_GEMM=avx3 is refused (exit $st)"
like "$(cat "$T/bad.out")" "PIPE_CPU_GEMM=avx3 is not a GEMM kernel: use avx512, avx2 or portable" "... saying which kernels there are"
done_testing
