#!/bin/sh
# tests/e2e_bf16.t — precision = bf16 end to end on the CPU runtime, and the
# bf16 shadow weights pipegen plans for the CUDA runtime (pg_ops.h, "bf16
# shadow weights"): tests/models/gpt_tiny.pipe with `precision = bf16`
#  - lists a shadow for each GEMM weight its stage holds (attention qkv and
#    output projection, both linears of the MLP, the tied wte of logits) and
#    none in the f32 model;
#  - runs on 1 stage and on 4 (wte transmitted, so the users' copies are
#    written by receives: pg_param_written) with the shadows registered, and
#    since the CPU computes a bf16 model in f32, its losses and saved weights
#    are byte-identical to the f32 model's.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
T=$(mktemp -d /tmp/pg-e2e-bf16.XXXXXX)
trap 'rm -rf "$T"' EXIT

# variant NAME STAGES TIE PRECISION-SED: gen, build, train 4 steps, save
variant() {
    d="$T/$1"
    e2e_gen "$d" gpt_tiny "$(e2e_splits "$2")" 1f1b except_last -e "s/^tie wte .*/tie wte $3/" -e "$4" || return 1
    build_strict "$d/gen" || return 1
    OPENBLAS_NUM_THREADS=1 "$PIPERUN" "$d/gen/bin" -- --steps 4 --threads 1 --save "$d/w.safetensors" \
        >"$d/run.out" 2>&1 || { sed 's/^/# /' "$d/run.out" | tail -20; return 1; }
    grep 'final loss' "$d/run.out" | sed 's/^\[stage [0-9]*\] //' >"$d/loss"
}
BF16='s/^  grad_clip = 1.0  seed = 5$/  grad_clip = 1.0  seed = 5  precision = bf16/'

variant f32 1 replicate 's/^$//'
ok $? "gpt_tiny (f32) trains on 1 stage"
variant bf16 1 replicate "$BF16"
ok $? "gpt_tiny with precision = bf16 trains on 1 stage"
grep -q 'precision = bf16' "$T/bf16/gpt_tiny.pipe"
ok $? "the bf16 variant really says precision = bf16"
variant bf16x4 4 transmit "$BF16"
ok $? "gpt_tiny bf16 trains on 4 stages with wte transmitted"

grep -q 'stage_shadows' "$T/f32/gen/stage0.c" && st=1 || st=0
ok $st "the f32 model plans no shadows"
sh=$(sed -n '/^static const pg_shadow_desc stage_shadows/,/^};/p' "$T/bf16/gen/stage0.c" | grep -o '/\* [^*]* \*/' | tr -d '/*' | tr -s ' ' | sort | tr '\n' ' ')
is "$sh" " h0.attn.proj.weight   h0.attn.qkv.weight   h0.fc.weight   h0.proj.weight   h1.attn.proj.weight   h1.attn.qkv.weight   h1.fc.weight   h1.proj.weight   wte  " \
    "one stage: a shadow for every GEMM weight (attention, MLP, the tied logits table), none for biases, norms, embeddings"
grep -q '\.nshadows = 9, \.shadows = stage_shadows' "$T/bf16/gen/stage0.c"
ok $? "the stage description points at them"
n0=$(grep -c 'stage_shadows' "$T/bf16x4/gen/stage0.c")
n3=$(sed -n '/stage_shadows\[\]/,/^};/p' "$T/bf16x4/gen/stage3.c" | grep -c 'wte')
is "$n0:$n3" "0:1" "4 stages: the embedding stage has no GEMM weight; the last stage's logits read a shadow of its wte copy"
grep -q '"shadow h0.fc.weight"' "$T/bf16/gen/plan.json" || grep -q 'shadow h0.fc.weight' "$T/bf16/gen/plan.json"
ok $? "the memory plan names the shadow buffers"
# the operands' bf16 copies (runtime/core/pg_bf16ws.h), one buffer per stage for
# its largest product: on 1 stage fc's weight gradient over 16 rows, x (16 x 16)
# and dy (16 x 64) in bf16, dy 256-byte aligned after x
grep -q '\.bf16_ws_off = [0-9]*, \.bf16_ws_bytes = 2560,' "$T/bf16/gen/stage0.c"
ok $? "one stage: the bf16 operand copies planned for its largest product (fc's weight gradient: 512 + 2048 bytes)"
b3=$(sed -n 's/.*\.bf16_ws_bytes = \([0-9]*\),.*/\1/p' "$T/bf16x4/gen/stage3.c")
is "$b3" 1536 "4 stages: the last stage's, for the logits' weight gradient (x 16 x 16, dy 16 x 32: 512 + 1024 bytes)"
grep -q 'bf16_ws' "$T/f32/gen/stage0.c" && st=1 || st=0
ok $st "the f32 model plans no operand copies"
# a stage file whose operand buffer is not inside its arena is refused, said
rm -rf "$T/bad" && cp -r "$T/bf16/gen" "$T/bad" && rm -rf "$T/bad/bin" &&
    sed -i 's/\.bf16_ws_off = [0-9]*,/.bf16_ws_off = 999999999999,/' "$T/bad/stage0.c" && build_strict "$T/bad"
ok $? "a stage file with its bf16 operand buffer moved out of the arena builds"
out=$(OPENBLAS_NUM_THREADS=1 "$PIPERUN" "$T/bad/bin" -- --steps 1 --threads 1 2>&1)
st=$?
[ $st != 0 ]
ok $? "... and the stage refuses to start (exit $st)"
like "$out" "\[stage 0\] the bf16 operand buffer \(2560 bytes at 999999999999\) is not inside the arena of [0-9]* bytes: the stage file is corrupt" \
    "... naming the buffer, the arena and the cause"

cmp -s "$T/f32/loss" "$T/bf16/loss" && cmp -s "$T/f32/w.safetensors" "$T/bf16/w.safetensors"
ok $? "CPU: bf16 model on 1 stage = the f32 model, bytes of losses and weights ($(cat "$T/bf16/loss"))"
cmp -s "$T/f32/loss" "$T/bf16x4/loss" && cmp -s "$T/f32/w.safetensors" "$T/bf16x4/w.safetensors"
ok $? "CPU: bf16 model on 4 stages (wte transmitted) = the same bytes"
grep -q 'the CPU runtime computes in f32' "$T/bf16/run.out"
ok $? "the CPU runtime says it computes a bf16 model in f32"
done_testing
