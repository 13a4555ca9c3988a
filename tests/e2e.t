#!/bin/sh
# tests/e2e.t — end-to-end training through generated stage programs:
#  - examples/mlp.pipe on 3 stages via piperun trains 20 steps and the loss falls;
#  - the bitwise invariance matrix: two small models (uneven micro-batches, a skip
#    across two splits) at 1..4 stages x gpipe/1f1b x always/except_last/never give
#    the same final loss text and byte-identical saved weights.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
T=$(mktemp -d /tmp/pg-e2e.XXXXXX)
trap 'rm -rf "$T"' EXIT

# --- the quickstart MLP on 3 stages -----------------------------------------
"$PIPEGEN" gen "$TOP/examples/mlp.pipe" -o "$T/mlp" >"$T/gen.out" 2>&1
ok $? "pipegen gen examples/mlp.pipe"
build "$T/mlp"
ok $? "the 3 stage programs of mlp compile"
OPENBLAS_NUM_THREADS=1 "$PIPERUN" "$T/mlp/bin" -- --steps 20 --threads 1 >"$T/mlp.out" 2>&1
ok $? "mlp trains 20 steps on 3 stages"
n=$(grep -c 'step [0-9]*/20  loss' "$T/mlp.out")
is "$n" 20 "the last stage prints the loss of every step"
# same synthetic batch (8 batches cycled): steps 1 and 17
l1=$(sed -n 's/.*step 1\/20  loss \([0-9.]*\).*/\1/p' "$T/mlp.out")
l17=$(sed -n 's/.*step 17\/20  loss \([0-9.]*\).*/\1/p' "$T/mlp.out")
awk -v a="$l1" -v b="$l17" 'BEGIN { exit !(b < a) }'
ok $? "the loss on the same batch falls ($l1 -> $l17)"
like "$(cat "$T/mlp.out")" '\[stage 0\] bubble [0-9.]+%' "each stage reports its bubble fraction"
like "$(cat "$T/mlp.out")" 'throughput: [0-9.]+ samples/s' "the last stage reports the mean throughput"

# --- the invariance matrix ------------------------------------------------------
# variant MODEL STAGES SCHEDULE CKPT: gen, build, train 3 steps, save
variant() {
    m=$1; n=$2; s=$3; c=$4
    d="$T/$m-$n-$s-$c"
    e2e_gen "$d" "$m" "$(e2e_splits "$n")" "$s" "$c" || return 1
    [ "$(ls "$d/gen"/stage*.c | wc -l)" = "$n" ] || { echo "# expected $n stages"; return 1; }
    build "$d/gen" || return 1
    OPENBLAS_NUM_THREADS=1 "$PIPERUN" "$d/gen/bin" -- --steps 3 --threads 1 --save "$d/w.safetensors" >"$d/run.out" 2>&1 || { cat "$d/run.out"; return 1; }
    grep 'final loss' "$d/run.out" | sed 's/^\[stage [0-9]*\] //' >"$d/loss"
}

for m in mlp_small resmlp_small; do
    ref=""
    fails=0
    for n in 1 2 3 4; do for s in gpipe 1f1b; do for c in always except_last never; do
        if ! variant $m $n $s $c; then
            echo "# $m: $n stages, $s, checkpoint $c: failed"; fails=$((fails + 1)); continue
        fi
        d="$T/$m-$n-$s-$c"
        if [ -z "$ref" ]; then ref=$d; continue; fi
        if ! cmp -s "$ref/loss" "$d/loss" || ! cmp -s "$ref/w.safetensors" "$d/w.safetensors"; then
            echo "# $m: $n stages, $s, checkpoint $c differs from $(basename "$ref"): $(cat "$d/loss") vs $(cat "$ref/loss")"
            fails=$((fails + 1))
        fi
    done; done; done
    is "$fails" 0 "$m: loss and saved weights bitwise equal over 1..4 stages x gpipe/1f1b x always/except_last/never"
    [ -s "$ref/loss" ]
    ok $? "$m: the runs print a final loss ($(cat "$ref/loss" 2>/dev/null))"
done
done_testing
