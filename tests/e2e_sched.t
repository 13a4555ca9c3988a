#!/bin/sh
# tests/e2e_sched.t — interleaved(v), zb1 and zbv end to end, bitwise against one stage:
#  - for tests/models/{mlp_small,resmlp_small,sched_bn,gpt_tiny}.pipe (rewritten to
#    an even micro-batch count that does not divide the batch): interleaved(2) on 2
#    stages (4 chunks: skips and batch norm in two chunks of one stage),
#    interleaved(2) and interleaved(4) on 1 stage (chunks hand over on the stage),
#    zb1 on 2 to 4 stages, and zbv (V placement) on 2 stages and on 1, over the three
#    checkpoint modes and both tie modes of the GPT's wte (under zbv both of its
#    uses are on stage 0: no tie message), give the final loss text and the saved
#    weights of the 1-stage 1f1b run byte for byte (and the GPT the same
#    --generate sample);
#  - tests/models/skips_far.pipe: skips stashed in one round and popped in a later
#    round on another stage (interleaved(2) and zbv on 3 and 2 stages, a skip
#    running against the stage order under zbv), the same;
#  - what the code generator refuses is refused with a located error: a chunk
#    count interleaved(v) cannot divide, a micro-batch count that is not a multiple
#    of the stages, a tied parameter whose uses the stages would sum out of order;
#  - `pipegen plan` and `pipegen schedule` work on the examples under both schedules.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
T=$(mktemp -d /tmp/pg-e2e-sched.XXXXXX)
trap 'rm -rf "$T"' EXIT

# variant MODEL SPLITS SCHEDULE CKPT TIE: gen, build, train 3 steps, save.
# SPLITS: 4 keeps every split (4 chunks), 3 all but S2, 2 only S2, 1 none;
# for skips_far: 6 every split, 4 all but T3 and T5, 1 none.
variant() {
    m=$1; n=$2; s=$3; c=$4; tie=$5
    d="$T/$m-$n-$s-$c-$tie"
    del=$(e2e_splits "$n")
    [ "$m" = skips_far ] && case $n in 6) del='' ;; 4) del='/# T[35]$/d' ;; *) del='/# T[1-5]$/d' ;; esac
    e2e_gen "$d" "$m" "$del" "$s" "$c" \
        -e "s/batch = 24  microbatches = 5/batch = 22  microbatches = 4/" \
        -e "s/batch = 6  microbatches = 3/batch = 7  microbatches = 4/" \
        -e "s/^tie wte .*/tie wte $tie/" || return 1
    build_strict "$d/gen" || return 1
    extra=""
    [ "$m" = gpt_tiny ] && extra="--generate 6 --temperature 0"
    # shellcheck disable=SC2086
    PIPE_CHECK_TIES=1 OPENBLAS_NUM_THREADS=1 "$PIPERUN" "$d/gen/bin" -- --steps 3 --threads 1 \
        --save "$d/w.safetensors" $extra >"$d/run.out" 2>&1 || { sed 's/^/# /' "$d/run.out" | tail -20; return 1; }
    grep 'final loss\|^\[stage [0-9]*\] sample: ' "$d/run.out" | sed 's/^\[stage [0-9]*\] //' >"$d/loss"
    ls "$d/gen"/stage*.c | wc -l | tr -d ' ' >"$d/nstages"
}

# matrix MODEL "SPLITS:SCHEDULE:CKPT:TIE ...": the first entry is the reference
matrix() {
    m=$1; ref=""; fails=0; runs=0; stages=""
    for v in $2; do
        IFS=: read -r n s c tie <<EOF
$v
EOF
        runs=$((runs + 1))
        d="$T/$m-$n-$s-$c-$tie"
        if ! variant "$m" "$n" "$s" "$c" "$tie"; then
            echo "# $m: $v failed"; fails=$((fails + 1)); continue
        fi
        stages="$stages $(cat "$d/nstages")"
        if [ -z "$ref" ]; then ref=$d; continue; fi
        if ! cmp -s "$ref/loss" "$d/loss" || ! cmp -s "$ref/w.safetensors" "$d/w.safetensors"; then
            echo "# $m: $v differs from $(basename "$ref"): $(cat "$d/loss") vs $(cat "$ref/loss")"
            fails=$((fails + 1))
        fi
    done
    is "$fails" 0 "$m: loss and saved weights of $runs runs (stages:$stages) bitwise equal to one stage"
    grep -q 'final loss' "$ref/loss" 2>/dev/null
    ok $? "$m: the runs print a final loss ($(head -1 "$ref/loss" 2>/dev/null))"
}

I2=interleaved\(2\)
I4=interleaved\(4\)
C3="always except_last never"
# mlp_small, resmlp_small: every checkpoint mode of interleaved(2) on 2 stages and on
# 1 stage (2 chunks), interleaved(4) on 1 stage, zb1 on 2, 3 and 4 stages
list=""
for c in $C3; do
    list="$list 4:$I2:$c:- 2:$I2:$c:- 4:$I4:$c:- 4:zb1:$c:- 3:zb1:$c:- 2:zb1:$c:- 4:zbv:$c:- 2:zbv:$c:-"
done
for m in mlp_small resmlp_small; do
    matrix $m "1:1f1b:except_last:- $list"
done
# batch norm (deferred and per micro-batch) in two chunks of one stage
list=""
for c in $C3; do
    list="$list 4:$I2:$c:- 4:zb1:$c:- 4:zbv:$c:-"
done
matrix sched_bn "1:1f1b:always:- $list 2:$I2:except_last:- 4:$I4:never:- 2:zb1:always:-"
# the GPT with wte tied between the first and the last chunk (stages 0 and 1 under
# interleaved(2)), both tie modes; on 1 stage both uses share it
list=""
for c in $C3; do
    list="$list 4:$I2:$c:replicate 4:$I2:$c:transmit 4:zb1:$c:replicate 4:zb1:$c:transmit 4:zbv:$c:replicate"
done
list="$list 4:zbv:never:transmit"
matrix gpt_tiny "1:1f1b:except_last:replicate $list 2:$I2:always:replicate 2:zb1:never:transmit"
like "$(cat "$T/gpt_tiny-1-1f1b-except_last-replicate/loss" 2>/dev/null)" '^sample: ' \
    "gpt_tiny: the runs sample text after training, the same at every layout"
# skips across rounds: interleaved(2) and zbv on 3 stages (6 chunks) and on 2 (4 chunks)
list=""
for c in $C3; do
    list="$list 6:$I2:$c:- 6:zbv:$c:- 4:$I2:$c:- 4:zbv:$c:-"
done
matrix skips_far "1:1f1b:except_last:- $list 6:gpipe:never:-"

# V placement: what the listing and the plan say, and what stays on a stage
d="$T/gpt_tiny-4-zbv-except_last-replicate/gen"
grep -q '"placement": "v"' "$d/plan.json"
ok $? "zbv: plan.json records the V placement"
is "$(grep -c '\.kind = PG_TIE_' "$d/stage0.c" "$d/stage1.c" | sed 's/.*://' | tr '\n' ' ')" "0 0 " \
    "zbv: wte, used by chunks 0 and 3 on stage 0, needs no tie message"
is "$(grep -c '^    {\.chunk = [0-9]*, \.fwd = fwd_c' "$d/stage0.c")" 2 "zbv: stage 0 holds two chunks"
grep -q 'has_loss = 1' "$d/stage0.c"
ok $? "zbv: the loss is on stage 0, with the first chunk"
got=$("$PIPEGEN" schedule "$T/skips_far-6-zbv-except_last--/skips_far.pipe" 2>&1)
like "$got" "placement v: stage 0 runs chunks 0, 5; stage 1 runs chunks 1, 4; stage 2 runs chunks 2, 3" \
    "pipegen schedule shows the V placement table"
like "$got" "SEND_SKIP\(skip 2, mb 0, chunk 1\) to stage 0" "... and the skip that runs from stage 1 back to stage 0"
got=$("$PIPEGEN" schedule "$T/skips_far-6-$I2-except_last--/skips_far.pipe" 2>&1)
like "$got" "placement loop: stage 0 runs chunks 0, 3; stage 1 runs chunks 1, 4; stage 2 runs chunks 2, 5" \
    "... and the loop placement of interleaved(2)"

# the layouts are what the matrix claims: chunks per stage and what stays on a stage
d="$T/resmlp_small-4-$I2-except_last--/gen"
is "$(grep -c '^    {\.chunk = [0-9]*, \.fwd = fwd_c' "$d/stage0.c")" 2 "interleaved(2): stage 0 holds two chunks"
grep -q 'float \*const c2_skip0_in = .*mb_slot_c0\[io->mb\]' "$d/stage0.c"
ok $? "interleaved(2): the skip from chunk 0 to chunk 2 is read in place on stage 0"
d="$T/mlp_small-4-$I4-except_last--/gen"
grep -q 'chunk 2.s output of this micro-batch, on this stage' "$d/stage0.c"
ok $? "interleaved(4) on one stage: a chunk takes its input from the chunk before it"
grep -q '"interleave": 4' "$d/plan.json"
ok $? "plan.json records the interleave"

# --- refused, with a place --------------------------------------------------------
sed -e '/# S3$/d' -e "s/schedule = .*/schedule = $I2/" -e "s/microbatches = 5/microbatches = 4/" \
    "$TOP/tests/models/mlp_small.pipe" >"$T/three.pipe"
got=$("$PIPEGEN" gen "$T/three.pipe" -o "$T/three" 2>&1); rc=$?
[ $rc != 0 ]
ok $? "interleaved(2) over 3 chunks is refused"
like "$got" "three.pipe:[0-9]+:[0-9]+: error: interleaved\(2\) needs a chunk count divisible by 2, but the splits make 3 chunks" \
    "... with a located error naming the chunk count"
sed -e "s/schedule = .*/schedule = $I2/" "$TOP/tests/models/mlp_small.pipe" >"$T/odd.pipe"
got=$("$PIPEGEN" gen "$T/odd.pipe" -o "$T/odd" 2>&1); rc=$?
[ $rc != 0 ]
ok $? "interleaved(2) on 2 stages with 5 micro-batches is refused"
like "$got" "odd.pipe:[0-9]+:[0-9]+: error: schedule interleaved\(2\) needs the micro-batch count \(5\) to be a multiple of the stage count \(2\)" \
    "... with a located error"
cat >"$T/tie3.pipe" <<'EOF'
model tie3
input  tokens : i32[4]
target next   : i32[4]
param wte : f32[16, 16]
train {
  batch = 4  microbatches = 2
  schedule = interleaved(2)
  loss = cross_entropy  optimizer = sgd(lr = 0.1)
}
emb = embed(wte)
split
l1 = logits(wte)
split
l2 = logits(wte)
split
out = linear(16 -> 16)
tie wte replicate
EOF
got=$("$PIPEGEN" gen "$T/tie3.pipe" -o "$T/tie3" 2>&1); rc=$?
[ $rc != 0 ]
ok $? "a tied parameter used on stages 0, 1, 0 in layer order is refused under interleaved(2)"
like "$got" "tie3.pipe:14:1: error: parameter 'wte' is used here on stage 0 after a use on stage 1" "... at the use out of order"
like "$got" "tie3.pipe:12:1: note: the use on stage 1 is here" "... with a note at the earlier use"
like "$got" "tie3.pipe:17:1: note: tied here" "... and at the tie"
sed -e "s/schedule = .*/schedule = 1f1b/" "$T/tie3.pipe" >"$T/tie3_1f1b.pipe"
"$PIPEGEN" gen "$T/tie3_1f1b.pipe" -o "$T/tie3_1f1b" >/dev/null 2>&1
ok $? "the same model on 4 stages in order is generated"

# --- plan and schedule on the examples ----------------------------------------------
# resmlp and gpt_char have 4 split pieces (2 stages of 2 chunks), gpt2_small `stages = 4` (8 chunks)
for e in resmlp:2 gpt_char:2 gpt2_small:4; do
    p=${e#*:} e=${e%:*}
    sed -e "s/ schedule = [a-z0-9()]*/ schedule = $I2/" "$TOP/examples/$e.pipe" >"$T/$e-i2.pipe"
    got=$("$PIPEGEN" plan "$T/$e-i2.pipe" 2>&1)
    like "$got" "^model $e: $p stages, $((2 * p)) chunks" "pipegen plan examples/$e.pipe as interleaved(2)"
    like "$got" "stage 1 \(chunk 1: [0-9]+ slots.*, chunk $((p + 1)): [0-9]+ slots" "... lists stage 1's two chunks"
    got=$("$PIPEGEN" schedule "$T/$e-i2.pipe" 2>&1)
    like "$got" "schedule interleaved\(2\), $p stages, $((2 * p)) chunks" "pipegen schedule examples/$e.pipe as interleaved(2)"
done
for e in mlp resmlp gpt_char resmlp_bn; do
    sed -e "s/ schedule = [a-z0-9()]*/ schedule = zb1/" "$TOP/examples/$e.pipe" >"$T/$e-zb1.pipe"
    "$PIPEGEN" plan "$T/$e-zb1.pipe" >"$T/$e-zb1.plan" 2>&1
    ok $? "pipegen plan examples/$e.pipe as zb1"
    got=$("$PIPEGEN" schedule "$T/$e-zb1.pipe" 2>&1)
    like "$got" "schedule zb1, " "pipegen schedule examples/$e.pipe as zb1"
done
for e in resmlp:2 gpt_char:2 gpt2_small:4; do
    p=${e#*:} e=${e%:*}
    sed -e "s/ schedule = [a-z0-9()]*/ schedule = zbv/" "$TOP/examples/$e.pipe" >"$T/$e-zbv.pipe"
    got=$("$PIPEGEN" plan "$T/$e-zbv.pipe" 2>&1)
    like "$got" "^model $e: $p stages, $((2 * p)) chunks" "pipegen plan examples/$e.pipe as zbv"
    like "$got" "stage 0 \(chunk 0: [0-9]+ slots.*, chunk $((2 * p - 1)): [0-9]+ slots" \
        "... stage 0 holds the first and the last chunk"
done
done_testing
