#!/bin/sh
# tests/wpack.t — the GEMM weights packed once a step, end to end (runtime/cpu/
# wpack.c; the products themselves: tests/kernels.t): the stage table lists
# them and `pipegen plan` prints their bytes, a stage says at start-up what it
# reserved, PIPE_CPU_PACK_MIB caps it (0: none, the same losses) or is refused,
# and a table naming what is not a matrix of the stage, an index past its
# parameters or a count without its table is refused at start-up.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
. "$TOP/tests/lib_fault.sh"
fault_tmpdir wpack
sed '/# S[123]$/d' "$TOP/tests/models/mlp_small.pipe" >"$T/m.pipe"
"$PIPEGEN" gen "$T/m.pipe" -o "$T/gen" >"$T/gen.log" 2>&1 && build "$T/gen"
ok $? "mlp_small on 1 stage generated and built"
is "$(sed -n '/stage_gemm_weights\[\] = {/,/^};/p' "$T/gen/stage0.c" | sed -n 's|^    \([0-9]*\), /\* \(.*\) \*/$|\1 \2|p' | tr '\n' ';')" \
    "0 layer0.weight;2 layer1.weight;4 layer2.weight;" "the stage table lists the three linear weights, not their biases"
like "$(cat "$T/gen/stage0.c")" "    \.ngemm_weights = 3, \.gemm_weights = stage_gemm_weights," "...and the stage names it"
like "$("$PIPEGEN" plan "$T/m.pipe")" \
    "  CPU: 3 GEMM weights packed once a step \\(W\\^T and W\\), at most 0\\.125 MiB \\(131072 bytes\\) beside the arena" \
    "pipegen plan prints their bytes for the widest panels (32 columns)"

run() { # run NAME [ENV...]: one stage, 3 steps, into $T/NAME.out / .err
    r_name=$1
    shift
    env "$@" PIPE_RANK=0 PIPE_WORLD=1 timeout 60 "$T/gen/bin/stage0" --steps 3 --threads 2 >"$T/$r_name.out" \
        2>"$T/$r_name.err"
}
run plain
ok $? "3 steps"
like "$(cat "$T/plain.out")" "stage 0: 3 GEMM weights packed once a step \\(W\\^T and W\\): [0-9]+ bytes \\([0-9.]+ MiB\\) beside the arena" \
    "the stage says at start-up what it reserved"
run none PIPE_CPU_PACK_MIB=0
ok $? "PIPE_CPU_PACK_MIB=0 trains"
like "$(cat "$T/none.out")" "stage 0: 0 GEMM weights packed once a step \\(W\\^T and W\\): 0 bytes \\(0\\.00 MiB\\) beside the arena; 3 more packed in every product \\(over PIPE_CPU_PACK_MIB\\)" \
    "...packing none of them, and says so"
losses() { grep 'step [0-9]*/[0-9]*  loss' "$1" | sed 's/  lr .*//'; }
is "$(losses "$T/none.out")" "$(losses "$T/plain.out")" "...with the same losses, bit for bit"
run bad PIPE_CPU_PACK_MIB=lots
st=$?
ok $((st == 0)) "PIPE_CPU_PACK_MIB=lots stops the stage"
like "$(cat "$T/bad.err")" "wpack\\.c:[0-9]+: error: PIPE_CPU_PACK_MIB=lots: not a size in MiB \\(0 packs no weight; unset: at most 1024 MiB a stage\\)" \
    "...saying what it wants"

# a table naming a parameter that is not a matrix of the stage (layer0.bias)
mkdir -p "$T/bad"
cp "$T/gen"/*.h "$T/bad/" && sed 's|^    0, /\* layer0.weight \*/|    1, /* layer0.bias */|' "$T/gen/stage0.c" >"$T/bad/stage0.c" &&
    build "$T/bad"
ok $? "a stage file whose table names layer0.bias built"
PIPE_RANK=0 PIPE_WORLD=1 timeout 60 "$T/bad/bin/stage0" --steps 1 >"$T/corrupt.out" 2>"$T/corrupt.err"
st=$?
ok $((st == 0)) "...stops at start-up"
like "$(cat "$T/corrupt.err")" "stage 0: GEMM weight 0 names parameter 1 of 6, not a matrix in the arena: the stage file is corrupt" \
    "...naming the entry and the parameter"

# corrupt: an index past the stage's parameters, and a count without its table
corrupt() { # corrupt NAME SED: stage0.c edited by SED, built, run: its stderr in $T/NAME.err
    mkdir -p "$T/$1" && cp "$T/gen"/*.h "$T/$1/" && sed "$2" "$T/gen/stage0.c" >"$T/$1/stage0.c" && build "$T/$1" &&
        { PIPE_RANK=0 PIPE_WORLD=1 timeout 60 "$T/$1/bin/stage0" --steps 1 >"$T/$1.out" 2>"$T/$1.err"; [ $? -ne 0 ]; }
}
corrupt range 's|^    0, /\* layer0.weight \*/|    99, /* past the table */|'
ok $? "a table naming parameter 99 of 6 stops the stage at start-up"
like "$(cat "$T/range.err")" "stage 0: GEMM weight 0 names parameter 99 of 6: the stage file is corrupt" "...naming the index"
corrupt notable 's|\.gemm_weights = stage_gemm_weights,|.gemm_weights = 0,|'
ok $? "a count of GEMM weights without their table stops the stage at start-up"
like "$(cat "$T/notable.err")" "stage 0: 3 GEMM weights without their table: the stage file is corrupt" "...saying so"
done_testing
