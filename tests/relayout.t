#!/bin/sh
# tests/relayout.t — a checkpoint resumes onto another layout of the same model:
# written by A stages, resumed on B stages (4 -> 2, 1 -> 3, 3 -> 1), or with
# another split, schedule, checkpoint mode or guard gaps, the run goes on bitwise
# as a run of the new layout started from the beginning (loss lines and --save
# weights),
# for mlp_small, resmlp_small (a skip across splits), gpt_tiny (the tied wte:
# local on 1 stage, across stages on 3; replicated or transmitted, and the one
# resumed as the other) and relayout_bn (AdamW's two moments, a cosine learning
# rate, batch norm running statistics). Refused, naming what
# differs: another model (a training setting, a layer); a missing tensor, a
# shape mismatch, a corrupted old stage file or disagreeing copies of a tied
# parameter fall back to the newest usable checkpoint. Recorded replicas and
# checkpoints from before model identities are read.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
export OPENBLAS_NUM_THREADS=1
PY=${PYTHON:-/usr/bin/python3}
EDIT="$PY $TOP/tests/ckpt_edit.py"
T=$(mktemp -d /tmp/pg-relayout.XXXXXX)
trap 'rm -rf "$T"' EXIT

# gen MODEL N: tests/models/MODEL.pipe on N stages, built into $T/MODEL.N/gen/bin;
# MODEL gpt_tx is gpt_tiny with its tie transmitted
gen() {
    _m=$1 _k=$2
    if [ "$_m" = gpt_tx ]; then
        e2e_gen "$T/$_m.$_k" gpt_tiny "$(e2e_splits "$_k")" 1f1b except_last -e 's/tie wte replicate/tie wte transmit/'
    else
        e2e_gen "$T/$_m.$_k" "$_m" "$(e2e_splits "$_k")" 1f1b except_last
    fi && build "$T/$_m.$_k/gen"
}
# run DIR ARGS...: piperun of DIR's stages, one thread each
run() { _d=$1; shift; timeout 120 "$PIPERUN" "$_d" -- --threads 1 "$@"; }
# losses OUT FIRST: the loss text of steps FIRST.. (no throughput)
losses() { sed -n 's/^\[stage [0-9]*\] \(step \([0-9]*\)\/[0-9]*  loss [^ ]*\).*/\2 \1/p' "$1" | awk -v f="$2" '$1 >= f { $1 = ""; print }'; }

# relayout MODEL A B [MODEL_B]: A stages of MODEL write checkpoints for 5 steps; B
# stages (of MODEL_B, a variant: by default MODEL) resume to step 8; equal to 8
# steps straight on them
relayout() {
    _m=$1 _a=$2 _b=$3 _mb=${4:-$1}
    _w=$T/$_m.$_a-$_b${4:+-$4}
    mkdir -p "$_w"
    run "$T/$_mb.$_b/gen/bin" --steps 8 --log-every 1 --save "$_w/straight.st" >"$_w/straight.out" 2>&1
    run "$T/$_m.$_a/gen/bin" --steps 5 --log-every 1 --checkpoint-dir "$_w/ck" --save-every 2 >"$_w/first.out" 2>&1 &&
        run "$T/$_mb.$_b/gen/bin" --steps 8 --log-every 1 --resume "$_w/ck" --save "$_w/resumed.st" >"$_w/resumed.out" 2>&1
    ok $? "$_m: $_a stages write a checkpoint at step 5, $_b stages${4:+ of $4} resume it and train to step 8"
    like "$(cat "$_w/resumed.out")" "continuing from .*step-00000005 \\(step 5\\), written by $_a stages? x 1 replica( of another plan)? \\(this run: $_b stages? x 1 replica\\)" \
        "$_m $_a -> $_b: the resume line names the old layout"
    _s=$(losses "$_w/straight.out" 6)
    [ -n "$_s" ] && [ "$(losses "$_w/resumed.out" 6)" = "$_s" ]
    ok $? "$_m $_a -> $_b: the loss lines of steps 6..8 equal those of 8 steps straight on $_b stages"
    cmp -s "$_w/straight.st" "$_w/resumed.st"
    ok $? "$_m $_a -> $_b: the saved weights are byte-identical to the straight run's"
}

for m in mlp_small resmlp_small gpt_tiny relayout_bn; do
    for k in 1 2 3 4; do
        gen $m $k || echo "# $m on $k stages failed to build"
    done
    relayout $m 4 2
    relayout $m 1 3
    relayout $m 3 1
done

# --- another tie mode: gpt_tiny's wte transmitted (its users hold a copy sent each step) ---
for k in 2 4; do
    gen gpt_tx $k 2>/dev/null || echo "# gpt_tx on $k stages failed to build"
done
relayout gpt_tx 4 2
relayout gpt_tx 4 2 gpt_tiny
relayout gpt_tiny 4 4 gpt_tx

# --- another split, schedule and checkpoint mode of the same stage count ------------
# the 3-stage mlp_small split at S1 and S3 resumed onto one split at S2 and S3
e2e_gen "$T/other3" mlp_small '/# S1$/d' gpipe always && build "$T/other3/gen"
ok $? "mlp_small on 3 stages split otherwise, gpipe, checkpoint always"
W=$T/mlp_small.4-2
run "$T/other3/gen/bin" --steps 8 --save "$T/other3.st" >/dev/null 2>&1
cp -a "$T/mlp_small.3-1/ck" "$T/ck3"
run "$T/other3/gen/bin" --steps 8 --resume "$T/ck3" --save "$T/other3.res.st" >"$T/other3.out" 2>&1
ok $? "...resumes the checkpoint of the other 3-stage plan"
like "$(cat "$T/other3.out")" 'continuing from .*step-00000005 \(step 5\), written by 3 stages x 1 replica of another plan \(this run: 3 stages x 1 replica\)' \
    "...saying it was written by another plan"
cmp -s "$T/other3.st" "$T/other3.res.st"; ok $? "...and ends byte-identical to its own straight run"

# guard gaps (pipegen gen --guard-bytes) move every offset: the packed checkpoint resumes
E2E_GEN_FLAGS="--guard-bytes 64"
e2e_gen "$T/guard" mlp_small "$(e2e_splits 3)" 1f1b except_last && build "$T/guard/gen"
ok $? "mlp_small on 3 stages with --guard-bytes 64"
E2E_GEN_FLAGS=
cp -a "$T/mlp_small.3-1/ck" "$T/ckg"
run "$T/guard/gen/bin" --steps 8 --resume "$T/ckg" --save "$T/guard.st" >"$T/guard.out" 2>&1
ok $? "...resumes the packed 3-stage checkpoint"
like "$(cat "$T/guard.out")" 'continuing from .*step-00000005 \(step 5\), written by 3 stages x 1 replica of another plan' \
    "...another plan of the same model"
run "$T/mlp_small.3/gen/bin" --steps 8 --save "$T/packed.st" >/dev/null 2>&1
cmp -s "$T/packed.st" "$T/guard.st"; ok $? "...and ends byte-identical to the packed straight run"

# --- a resumed run with fewer stages prunes the old layout's files too ----------------
cp -a "$W/ck" "$T/ckp"
# a temporary of old stage 3 whose writer died (no such process: pids stay below 2^22)
cp "$T/ckp/step-00000004/stage3.safetensors" "$T/ckp/step-00000004/stage3.safetensors.tmp.99999999"
run "$T/mlp_small.2/gen/bin" --steps 10 --resume "$T/ckp" --checkpoint-dir "$T/ckp" --save-every 2 >"$T/prune.out" 2>&1
ok $? "4-stage checkpoints resumed on 2 stages into the same directory"
is "$(cd "$T/ckp" && echo *)" "LATEST step-00000008 step-00000010" \
    "...the old steps (with the files and dead temporaries of stages 2 and 3) are removed"

# --- refusals: another model ----------------------------------------------------------
refused() { # refused NAME OUT REGEX
    like "$(cat "$2")" "$3" "$1: refused, naming what differs"
    like "$(cat "$2")" 'no complete checkpoint there is usable by every stage' "$1: nothing is usable"
    ! grep -q 'step 6/' "$2"; ok $? "$1: no step is run"
}
e2e_gen "$T/lr" mlp_small "$(e2e_splits 2)" 1f1b except_last -e 's/lr = 1e-3/lr = 2e-3/' && build "$T/lr/gen"
run "$T/lr/gen/bin" --steps 8 --resume "$W/ck" >"$T/lr.out" 2>&1
[ $? -ne 0 ]; ok $? "another learning rate: the resume fails"
refused "another learning rate" "$T/lr.out" "MANIFEST was written by another model 'mlp_small' than this one \\(model identity [0-9a-f]{16} there, [0-9a-f]{16} here\\): its training settings differ: lr=0.001 there, lr=0.002 here; only the layout"
e2e_gen "$T/act" mlp_small "$(e2e_splits 2)" 1f1b except_last -e 's/^relu$/gelu/' && build "$T/act/gen"
run "$T/act/gen/bin" --steps 8 --resume "$W/ck" >"$T/act.out" 2>&1
[ $? -ne 0 ]; ok $? "another layer (gelu for relu): the resume fails"
refused "another layer" "$T/act.out" "its layers differ \\(a layer's kind, shape or attributes, or a skip\\)"
e2e_gen "$T/wide" mlp_small "$(e2e_splits 2)" 1f1b except_last -e 's/64 -> 128/64 -> 96/' -e 's/128 -> 32/96 -> 32/' &&
    build "$T/wide/gen"
run "$T/wide/gen/bin" --steps 8 --resume "$W/ck" >"$T/wide.out" 2>&1
[ $? -ne 0 ]; ok $? "other parameter shapes: the resume fails"
refused "other parameter shapes" "$T/wide.out" "its layers differ .*; its parameters differ \\(a name, shape, initialisation or weight-decay flag\\)"
run "$T/gpt_tiny.2/gen/bin" --steps 8 --resume "$W/ck" >"$T/model.out" 2>&1
[ $? -ne 0 ]; ok $? "another model: the resume fails"
refused "another model" "$T/model.out" "MANIFEST belongs to model 'mlp_small' but this stage is model 'gpt_tiny'"

# --- refusals of one step, each falling back to step 4 ----------------------------------
# fallback NAME MODEL.A-B REGEX: resume on B stages from $T/fb (edited), expect REGEX
# and step 4, ending equal to the straight run on B
fallback() {
    _w=$T/$2
    _b=${2#*-}
    run "$T/${2%%.*}.$_b/gen/bin" --steps 8 --resume "$T/fb" --save "$T/fb.st" >"$T/fb.out" 2>&1
    ok $? "$1: the run goes on"
    like "$(cat "$T/fb.out")" "$3" "$1: refused with the reason"
    like "$(cat "$T/fb.out")" 'continuing from .*step-00000004 \(step 4\), written by' "$1: falls back to step 4"
    cmp -s "$_w/straight.st" "$T/fb.st"; ok $? "$1: and still ends bitwise equal"
    rm -rf "$T/fb"
}
S5=$T/fb/step-00000005
cp -a "$W/ck" "$T/fb"
f=$S5/stage3.safetensors
sz=$(stat -c %s "$f")
b=$(od -An -tu1 -j $((sz - 5)) -N1 "$f" | tr -d ' ')
printf "\\$(printf %o $((255 - b)))" | dd of="$f" bs=1 seek=$((sz - 5)) conv=notrunc 2>/dev/null
fallback "a corrupted byte in old stage 3 (read by new stage 1)" mlp_small.4-2 'stage 1\] cannot resume from .*step-00000005: .*stage3\.safetensors is corrupted: its tensor names, dtypes, shapes, offsets and bytes hash to'
cp -a "$W/ck" "$T/fb"
perl -0777 -pi -e 's/"w:layer2\.weight"/"w:layer2.weighs"/' "$S5/stage3.safetensors"
fallback "a tensor missing from every old file" mlp_small.4-2 "no file of the checkpoint in .*step-00000005 \\(4 stage files\\) holds tensor 'w:layer2.weight', which this stage needs"
cp -a "$W/ck" "$T/fb"
perl -0777 -pi -e 's/"shape":\[128,64\]/"shape":[64,128]/g' "$S5/stage2.safetensors"
fallback "a shape edited (the checksum covers shapes)" mlp_small.4-2 'stage2\.safetensors is corrupted: its tensor names, dtypes, shapes, offsets and bytes hash to'
cp -a "$W/ck" "$T/fb"
perl -0777 -pi -e 's/"shape":\[128,64\]/"shape":[64,128]/g' "$S5/stage2.safetensors"
sum=$($EDIT rehash "$S5/stage2.safetensors") && $EDIT manifest "$S5/MANIFEST" "stage 2=$sum"
fallback "a tensor of another shape, its checksums consistent" mlp_small.4-2 "stage2\\.safetensors: tensor 'w:layer1\\.weight' has shape \\[64, 128\\] but the model expects \\[128, 64\\]"
# gpt_tiny on 4 stages holds wte on stages 0 and 3 (tie replicate): make stage 3's
# copy differ, its checksums consistent
cp -a "$T/gpt_tiny.4-2/ck" "$T/fb"
sum=$($EDIT poke "$S5/stage3.safetensors" w:wte) && $EDIT manifest "$S5/MANIFEST" "stage 3=$sum"
ok $? "stage 3's copy of the tied wte changed, its checksums updated"
fallback "copies of a tied parameter that differ" gpt_tiny.4-2 "tensor 'w:wte' differs between .*step-00000005/stage0\\.safetensors and stage3\\.safetensors: the copies of a parameter held by several stages must be bitwise equal"

# --- recorded replicas, and checkpoints from before model identities --------------------
cp -a "$W/ck" "$T/rep"
for k in 0 1 2 3; do $EDIT meta "$T/rep/step-00000005/stage$k.safetensors" replicas 2; done
$EDIT manifest "$T/rep/step-00000005/MANIFEST" replicas=2
run "$T/mlp_small.2/gen/bin" --steps 8 --resume "$T/rep" --save "$T/rep.st" >"$T/rep.out" 2>&1
ok $? "a checkpoint recording 2 replicas resumes on 1"
like "$(cat "$T/rep.out")" 'continuing from .*step-00000005 \(step 5\), written by 4 stages x 2 replicas \(this run: 2 stages x 1 replica\)' \
    "...and the resume line says so"
cmp -s "$W/straight.st" "$T/rep.st"; ok $? "...bitwise as the straight run"
cp -a "$T/mlp_small.3-1/ck" "$T/old"
$EDIT manifest "$T/old/step-00000005/MANIFEST" -replicas -model_id -arch -params -train
run "$T/mlp_small.3/gen/bin" --steps 8 --resume "$T/old" --save "$T/old.st" >"$T/old.out" 2>&1
ok $? "a checkpoint without a model identity resumes on its own plan"
like "$(cat "$T/old.out")" 'continuing from .*step-00000005 \(step 5\)$' "...from step 5"
run "$T/mlp_small.3/gen/bin" --steps 8 --save "$T/s3.st" >/dev/null 2>&1
cmp -s "$T/s3.st" "$T/old.st"; ok $? "...bitwise as the straight run"
run "$T/mlp_small.1/gen/bin" --steps 8 --resume "$T/old" >"$T/old1.out" 2>&1
like "$(cat "$T/old1.out")" "it was written before checkpoints recorded a model identity, so it resumes only onto its own plan" \
    "...but not on another plan, saying why"
like "$(cat "$T/old1.out")" 'continuing from .*step-00000004' "...(step 4, with an identity, is taken instead)"
done_testing
