#!/bin/sh
# tests/eval.t — evaluation and --predict (runtime/core/eval.c), on
# tests/models/eval_cls.pipe (a classifier whose inference differs from its
# training: batch norm by its running statistics, no dropout) and on lm_tiny
# (a language model: perplexity over a token stream):
#  - `eval step N/M  loss X  accuracy A (K of R)` after every eval_every steps
#    and the last, over every row of --eval-data, the last batch shorter than
#    the micro-batch count (filler rows dropped);
#  - the figures bitwise equal on 1 to 4 stages, under gpipe, 1f1b, zb1,
#    interleaved(2) and zbv, every checkpoint mode, 1 and 2 threads, and on
#    --dp 2 (replica 0 evaluates whole batches);
#  - a run with evaluation trains bitwise as one without (final loss, weights);
#  - loss and accuracy equal an independent float64 forward of the saved
#    weights (tests/eval_oracle.py); --steps 0 --load evaluates the same bits;
#  - --predict writes every row's outputs in order (the oracle's, to 1e-5),
#    the same bytes on 1 and 3 stages and on --dp 2;
#  - a language model's eval line gives the perplexity exp(loss), the same on
#    1 stage, 2 stages with `tie wte replicate` and with `tie wte transmit`
#    (the evaluation refreshes the users' copy), and trains as without it;
#  - every wrong combination of options is refused with its message.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
. "$TOP/tests/lib_lm.sh"
T=$(mktemp -d /tmp/pg-eval.XXXXXX)
trap 'rm -rf "$T"' EXIT

need_python torch numpy

# the data: a seeded teacher's classes, 48 training rows and 14 evaluation rows
# (a last batch of 2 rows, fewer than the 4 micro-batches), as numpy saves them
$PY - "$T" <<'EOF'
import sys, numpy as np
d = sys.argv[1]
rng = np.random.default_rng(11)
w = rng.normal(size=(16, 4))
for name, n in (("train", 48), ("val", 14)):
    x = rng.normal(size=(n, 16))                   # float64: pipedata makes f32
    np.save(f"{d}/{name}_x.npy", x)
    np.save(f"{d}/{name}_y.npy", (x @ w).argmax(1))  # int64: pipedata makes i32
EOF
for f in train_x train_y val_x val_y; do
    "$PIPEDATA" npy "$T/$f.npy" -o "$T/$f.pgd" >>"$T/pipedata.out" 2>&1 || { cat "$T/pipedata.out"; exit 1; }
done
DATA="--data $T/train_x.pgd --targets $T/train_y.pgd"
EVAL="--eval-data $T/val_x.pgd --eval-targets $T/val_y.pgd"

# variant NAME STAGES SCHEDULE CKPT [SED...]: eval_cls built into $T/NAME/gen/bin
variant() {
    _v=$1 _vn=$2 _vs=$3 _vc=$4
    shift 4
    e2e_gen "$T/$_v" eval_cls "$(e2e_splits "$_vn")" "$_vs" "$_vc" "$@" && build "$T/$_v/gen" >"$T/$_v/build.out" 2>&1
}
# run NAME OUT [OPTION...]: train through piperun (one thread each unless given)
run() {
    _r=$1 _o=$2
    shift 2
    OPENBLAS_NUM_THREADS=1 "$PIPERUN" "$T/$_r/gen/bin" -- --timeout 60 "$@" >"$_o" 2>&1
}
evals() { sed -n 's/^\[stage [0-9]*\( replica 0\)*\] \(eval step [0-9/]*  loss [^ ]*  accuracy [^ ]* ([^)]*)\).*/\2/p' "$1"; }

variant s1 1 1f1b except_last && variant s2g 2 gpipe except_last && variant s3 3 1f1b except_last &&
    variant s4 4 zb1 never && variant s3a 3 1f1b always &&
    variant il 4 'interleaved(2)' except_last && variant zbv 4 zbv except_last # 4 chunks on 2 stages
ok $? "eval_cls builds on 1 to 4 stages, gpipe, 1f1b, zb1, interleaved(2), zbv, every checkpoint mode"

run s3 "$T/s3.out" --steps 6 --threads 1 $DATA $EVAL --save "$T/s3.st"
ok $? "3 stages train 6 steps with an evaluation set"
is "$(evals "$T/s3.out" | sed 's/  loss.*//' | tr '\n' ' ')" "eval step 3/6 eval step 6/6 " \
    "evaluated after step 3 (eval_every = 3) and after the last step"
like "$(grep 'eval step 6/6' "$T/s3.out")" 'eval step 6/6  loss [0-9.]+  accuracy [0-9.]+ \([0-9]+ of 14\)  14 rows' \
    "the eval line: loss, accuracy (hits of rows) over every row of --eval-data (14: a last batch of 2 rows)"
ref=$(evals "$T/s3.out")
fails=""
for v in s1 s2g s4 s3a il zbv; do
    run $v "$T/$v.out" --steps 6 --threads 1 $DATA $EVAL --save "$T/$v.st" || { fails="$fails $v(run)"; continue; }
    [ "$(evals "$T/$v.out")" = "$ref" ] || fails="$fails $v"
    cmp -s "$T/$v.st" "$T/s3.st" || fails="$fails $v(weights)"
done
is "$fails" "" "the eval lines (and weights) are bitwise those of 3 stages on 1, 2 (gpipe), 4 (zb1, never), 3 (always), interleaved(2), zbv"
run s3 "$T/s3t2.out" --steps 6 --threads 2 $DATA $EVAL
is "$(evals "$T/s3t2.out")" "$ref" "the eval lines are the same with 2 threads a stage"

run s3 "$T/noeval.out" --steps 6 --threads 1 $DATA --save "$T/noeval.st"
[ "$(grep 'final loss' "$T/noeval.out")" = "$(grep 'final loss' "$T/s3.out")" ] && cmp -s "$T/noeval.st" "$T/s3.st"
ok $? "a run with evaluation trains bitwise as one without (final loss and saved weights)"
! grep -q 'eval step' "$T/noeval.out"
ok $? "without --eval-data nothing is evaluated"

# the independent check: a float64 forward of the saved weights
set -- $($PY "$TOP/tests/eval_oracle.py" eval "$T/s3.st" "$T/val_x.pgd" "$T/val_y.pgd")
o_loss=$1 o_hits=$2
p_loss=$(grep 'eval step 6/6' "$T/s3.out" | sed 's/.*  loss \([0-9.]*\).*/\1/')
awk -v a="$p_loss" -v b="$o_loss" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b > 0 && d / b < 1e-5) }'
ok $? "the eval loss is the mean cross entropy of the weights over every row ($p_loss vs float64 $o_loss)"
like "$(grep 'eval step 6/6' "$T/s3.out")" "accuracy [0-9.]+ \\($o_hits of 14\\)" "the accuracy counts the rows whose arg max is the class ($o_hits)"

run s3 "$T/load.out" --steps 0 --load "$T/s3.st" $EVAL
is "$(evals "$T/load.out" | sed 's/^eval step [0-9/]*//')" "$(evals "$T/s3.out" | tail -1 | sed 's/^eval step [0-9/]*//')" \
    "--steps 0 --load evaluates the loaded weights: the same bits as the end of training"

run s3 "$T/pred3.out" --steps 0 --load "$T/s3.st" --predict "$T/val_x.pgd" --out "$T/p3.pgd"
like "$(cat "$T/pred3.out")" "predict: the outputs of 14 rows of $T/val_x.pgd -> $T/p3.pgd \\(f32\\[14, 4\\]\\)" \
    "--predict says what it wrote"
err=$($PY "$TOP/tests/eval_oracle.py" predict "$T/s3.st" "$T/val_x.pgd" "$T/p3.pgd")
ok $? "--out holds the model's outputs of every row, in order (max error $err of the largest)"
run s1 "$T/pred1.out" --steps 0 --load "$T/s3.st" --predict "$T/val_x.pgd" --out "$T/p1.pgd"
cmp -s "$T/p1.pgd" "$T/p3.pgd"
ok $? "--predict writes the same bytes on 1 and 3 stages"
OPENBLAS_NUM_THREADS=1 "$PIPERUN" --dp 2 "$T/s1/gen/bin" -- --threads 1 --steps 0 --load "$T/s3.st" $EVAL \
    --predict "$T/val_x.pgd" --out "$T/pdp.pgd" >"$T/dp.out" 2>&1
ok $? "--dp 2: evaluation and --predict run (replica 0 passes whole batches, the other waits)"
is "$(evals "$T/dp.out")" "$(evals "$T/load.out")" "--dp 2 evaluates the same bits as one replica"
cmp -s "$T/pdp.pgd" "$T/p3.pgd"
ok $? "--dp 2 predicts the same bytes"
is "$(grep -c 'eval step' "$T/dp.out")" 1 "one eval line, from replica 0"

# cross_entropy(ignore = 3): class-3 rows count nowhere, in the loss and in the accuracy
variant ig3 3 1f1b except_last -e 's/loss = cross_entropy /loss = cross_entropy(ignore = 3) /' &&
    variant ig1 1 1f1b except_last -e 's/loss = cross_entropy /loss = cross_entropy(ignore = 3) /' &&
    run ig3 "$T/ig3.out" --steps 6 $DATA $EVAL --save "$T/ig3.st" && run ig1 "$T/ig1.out" --steps 6 $DATA $EVAL
is "$(evals "$T/ig1.out")" "$(evals "$T/ig3.out")" "cross_entropy(ignore = 3): the eval lines are the same on 1 and 3 stages"
set -- $($PY "$TOP/tests/eval_oracle.py" eval "$T/ig3.st" "$T/val_x.pgd" "$T/val_y.pgd" 3)
line=$(grep 'eval step 6/6' "$T/ig3.out")
p_loss=$(echo "$line" | sed 's/.*  loss \([0-9.]*\).*/\1/')
awk -v a="$p_loss" -v b="$1" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b > 0 && d / b < 1e-5) }' &&
    echo "$line" | grep -q "accuracy [0-9.]* ($2 of $3)"
ok $? "...the loss and accuracy over the rows whose class is not 3 ($3 of 14; loss $p_loss vs float64 $1)"

run s3 "$T/metrics.out" --steps 3 $DATA $EVAL --metrics "$T/m.jsonl"
$PY - "$T/m.jsonl" <<'EOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
ev = [l for l in lines if "eval_loss" in l]
assert len(ev) == 1 and ev[0]["step"] == 3 and 0 <= ev[0]["accuracy"] <= 1 and ev[0]["eval_rows"] == 14, ev
EOF
ok $? "--metrics: the evaluation is a JSON line with step, eval_loss, accuracy, eval_rows"

# a language model: perplexity over a token stream; the tie refreshed
lm_build "$T/lm1" 1 replicate && lm_build "$T/lm2" 2 replicate && lm_build "$T/lm2t" 2 transmit
ok $? "lm_tiny builds on 1 stage and on 2 with the embedding tied by replicate and by transmit"
lm_text "$T/text.txt"
"$PIPEDATA" text "$T/text.txt" -o "$T/text.pgd" >/dev/null
head -c 700 "$T/text.txt" >"$T/val.txt"
"$PIPEDATA" text "$T/val.txt" -o "$T/val.pgd" >/dev/null
lmeval() { sed -n 's/^\[stage [0-9]*\] \(eval step .*perplexity [0-9.]*\).*/\1/p' "$1"; }
lm_run "$T/lm1" "$T/lm1.out" --steps 4 --data "$T/text.pgd" --eval-data "$T/val.pgd"
line=$(lmeval "$T/lm1.out")
like "$line" '^eval step 4/4  loss [0-9.]+  perplexity [0-9.]+$' "a language model's eval line gives the perplexity"
echo "$line" | awk '{ l = $5; p = $7; d = exp(l) - p; if (d < 0) d = -d; exit !(d < 1e-4 * p) }'
ok $? "perplexity = exp(loss) ($line)"
like "$(grep 'eval step' "$T/lm1.out")" '  43 rows  ' "the stream is cut into windows one after another: (700 - 1) / 16 = 43 rows"
fails=""
for v in lm2 lm2t; do
    lm_run "$T/$v" "$T/$v.out" --steps 4 --data "$T/text.pgd" --eval-data "$T/val.pgd" || fails="$fails $v(run)"
    [ "$(lmeval "$T/$v.out")" = "$line" ] || fails="$fails $v"
done
is "$fails" "" "the same eval line on 2 stages, with tie replicate and with tie transmit"
lm_run "$T/lm2t" "$T/lm2t-noeval.out" --steps 4 --data "$T/text.pgd" --save "$T/lm.st"
is "$(grep 'final loss' "$T/lm2t-noeval.out")" "$(grep 'final loss' "$T/lm2t.out")" \
    "with tie transmit, a run with evaluation trains bitwise as one without"
$PY -c 'import numpy as np, sys; np.save(sys.argv[1], np.frombuffer(open(sys.argv[2], "rb").read()[:80], np.uint8).reshape(5, 16))' \
    "$T/rows.npy" "$T/val.txt"
"$PIPEDATA" npy "$T/rows.npy" -o "$T/rows.pgd" >/dev/null 2>&1 &&
    lm_run "$T/lm1" "$T/lmp1.out" --steps 0 --load "$T/lm.st" --predict "$T/rows.pgd" --out "$T/lmp1.pgd" &&
    lm_run "$T/lm2t" "$T/lmp2.out" --steps 0 --load "$T/lm.st" --predict "$T/rows.pgd" --out "$T/lmp2.pgd"
like "$(cat "$T/lmp1.out")" "predict: the outputs of 5 rows of $T/rows.pgd -> $T/lmp1.pgd \\(f32\\[5, 16, 128\\]\\)" \
    "a language model predicts its logits for every row (5 windows of 16 tokens, 128 classes each)"
cmp -s "$T/lmp1.pgd" "$T/lmp2.pgd"
ok $? "...the same bytes on 1 stage and on 2 with the embedding transmitted"

# what cannot work, said before anything runs
refuse() { # NAME EXIT REGEX OPTION...
    _rn=$1 _rx=$2 _re=$3
    shift 3
    run s2g "$T/$_rn.err" --steps 1 "$@"
    is "$?" "$_rx" "$_rn: exit $_rx"
    like "$(cat "$T/$_rn.err")" "$_re" "$_rn: the message says why"
}
refuse no_targets 2 "--eval-data $T/val_x.pgd without --eval-targets: an evaluation needs the targets of its inputs" \
    --eval-data "$T/val_x.pgd"
refuse no_data 2 "--eval-targets $T/val_y.pgd without --eval-data: give the evaluation inputs too" \
    --eval-targets "$T/val_y.pgd"
refuse no_out 2 "--predict needs --out OUT.pgd, the file that gets the model's outputs" --predict "$T/val_x.pgd"
refuse no_predict 2 "--out names where --predict writes the model's outputs: give the rows too" --out "$T/o.pgd"
refuse out_dir 2 "--out $T cannot be written: .*a folder" --predict "$T/val_x.pgd" --out "$T"
refuse pairing 1 "--eval-data $T/val_x.pgd holds 14 samples \\(stage 0\\) but --eval-targets $T/train_y.pgd holds 48 \\(stage 1\\): inputs and targets must pair one to one" \
    --eval-data "$T/val_x.pgd" --eval-targets "$T/train_y.pgd"
refuse shape 1 "$T/val_y.pgd holds i32 but the model expects f32\\[16\\]" --eval-data "$T/val_y.pgd" --eval-targets "$T/val_y.pgd"
lm_run "$T/lm1" "$T/lmtg.err" --steps 1 --eval-data "$T/val.pgd" --eval-targets "$T/val.pgd"
is "$?" 2 "a token stream with --eval-targets: exit 2"
like "$(cat "$T/lmtg.err")" "--eval-data $T/val.pgd is a token stream, which holds the targets too: leave out --eval-targets" \
    "...and says that the stream holds the targets"
sed 's/eval_every = 3/eval_every = 2/' "$T/s1/eval_cls.pipe" >"$T/every.pipe"
mkdir -p "$T/every" && "$PIPEGEN" gen "$T/every.pipe" -o "$T/every/gen" >/dev/null 2>&1 && build "$T/every/gen" &&
    run every "$T/every.out" --steps 1
like "$(cat "$T/every.out")" "train.eval_every = 2 but no --eval-data: nothing is evaluated" \
    "eval_every without --eval-data is said at the start"
done_testing
