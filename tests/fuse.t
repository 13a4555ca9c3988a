#!/bin/sh
# tests/fuse.t — layers fused with their neighbours (issue 28 §4): pipegen
# emits one call for a linear and the activation after it (pg_linear_act_fwd,
# the activation in the GEMM's store) and one for a linear and the backward of
# the activation before it (pg_linear_bwd_in_act), only where the two are
# neighbours in one chunk (a stash between them or a split keeps the calls
# apart); and one call for a residual add (pop ... add) and the layernorm or
# rmsnorm after it, a stash between them or not (pg_add_layernorm_fwd,
# pg_add_rmsnorm_fwd), and for a norm's backward and the skip gradient its
# stash adds (pg_layernorm_bwd_in_add, pg_rmsnorm_bwd_in_add). Trained, each
# fused model gives the losses and the weights of the same model cut so that
# the fusion cannot happen (tests/kernels.t compares the kernels' bytes).
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
. "$TOP/tests/lib_fault.sh"
fault_tmpdir fuse
# model FILE LAYERS...: a small regression model with these layer lines (all named fz,
# so that their saved weights, whose header names the model, compare byte for byte)
model() {
    _m=$1
    shift
    printf 'model fz\ninput x : f32[24]\ntarget y : f32[8]\ntrain {\n  batch = 16  microbatches = 4\n  schedule = 1f1b  checkpoint = except_last\n  loss = mse(sum)  optimizer = sgd(lr = 1e-2, momentum = 0.9)  seed = 3\n}\n' >"$T/$_m.pipe"
    for l in "$@"; do echo "$l" >>"$T/$_m.pipe"; done
}
# gen_run NAME: generated, built and trained 4 steps, saving its weights
gen_run() {
    "$PIPEGEN" gen "$T/$1.pipe" -o "$T/$1" >"$T/$1.gen" 2>&1 && build_strict "$T/$1" &&
        "$PIPERUN" "$T/$1/bin" -- --steps 4 --threads 1 --save "$T/$1.st" >"$T/$1.out" 2>&1 ||
        { sed 's/^/# /' "$T/$1.gen" "$T/$1.out" 2>/dev/null; return 1; }
    grep -oE 'step [0-9]+/4  loss [^ ]+' "$T/$1.out" >"$T/$1.loss"
}
# same_as NAME FUSED: NAME trained to FUSED's losses and weights
same_as() {
    is "$(cat "$T/$1.loss")" "$(cat "$T/$2.loss")" "...the same losses as the fused one"
    cmp -s "$T/$1.st" "$T/$2.st"; ok $? "...and the same weights"
}
# calls NAME PATTERN: how many lines of NAME's stage programs call PATTERN
calls() { cat "$T/$1"/stage*.c | grep -c -- "$2"; }

model fused 'fc1 = linear(24 -> 40) gelu' 'fc2 = linear(40 -> 33) relu' 'fc3 = linear(33 -> 8) tanh' 'fc4 = linear(8 -> 8)'
model apart_f 'fc1 = linear(24 -> 40)' split gelu 'fc2 = linear(40 -> 33)' split relu 'fc3 = linear(33 -> 8)' split tanh 'fc4 = linear(8 -> 8)'
model apart_b 'fc1 = linear(24 -> 40) gelu' split 'fc2 = linear(40 -> 33) relu' split 'fc3 = linear(33 -> 8) tanh' split 'fc4 = linear(8 -> 8)'
model stashed 'fc1 = linear(24 -> 40) gelu' 'stash s' 'fc2 = linear(40 -> 40) relu' 'pop s add' 'fc3 = linear(40 -> 8)'

gen_run fused; ok $? "a linear-activation model trains on one stage"
is "$(calls fused 'pg_linear_act_fwd(c, pg_gelu_fwd, r, 24, 40, ')/$(calls fused 'pg_linear_act_fwd(c, pg_relu_fwd, r, 40, 33, ')/$(calls fused 'pg_linear_act_fwd(c, pg_tanh_fwd, r, 33, 8, ')" "1/1/1" \
    "...each linear's forward applies the activation after it in one call"
is "$(calls fused 'pg_linear_bwd_in_act(c, pg_gelu_bwd_in, r, 40, 33, ')/$(calls fused 'pg_linear_bwd_in_act(c, pg_relu_bwd_in, r, 33, 8, ')/$(calls fused 'pg_linear_bwd_in_act(c, pg_tanh_bwd_in, r, 8, 8, ')" "1/1/1" \
    "...each linear's backward-input applies the backward of the activation before it in one call"
is "$(calls fused 'PG_TRY(pg_[a-z]*_fwd(c, r \* [0-9]*, ')/$(calls fused 'PG_TRY(pg_[a-z]*_bwd_in(c, r \* [0-9]*, ')" "0/0" \
    "...and no activation has a call of its own"
like "$(cat "$T/fused/stage0.c")" '/\* fc1.gelu[0-9]*: in fc1.s call above \*/|/\* [a-z0-9._]*: in fc1.s call above \*/' \
    "...the activation's place says where it went"

gen_run apart_f; ok $? "the same model split after every linear (no forward fusion) trains on 4 stages"
is "$(calls apart_f 'pg_linear_act_fwd(')/$(calls apart_f 'pg_linear_bwd_in_act(')" "0/3" "...with the activations' forwards apart, their backwards fused"
same_as apart_f fused

gen_run apart_b; ok $? "split after every activation (no backward fusion) it trains on 4 stages"
is "$(calls apart_b 'pg_linear_act_fwd(')/$(calls apart_b 'pg_linear_bwd_in_act(')" "3/0" "...with the forwards fused, the backwards apart"
same_as apart_b fused

gen_run stashed; ok $? "a model that stashes an activation's output trains"
is "$(calls stashed 'pg_linear_act_fwd(')/$(calls stashed 'pg_linear_bwd_in_act(c, pg_relu')/$(calls stashed 'PG_TRY(pg_gelu_bwd_in(')" "2/0/1" \
    "...the gelu whose output's gradient also comes from the skip keeps its backward apart (a stash between)"
# a residual block with both norms: add -> stash -> norm, and norm's backward + its stash's skip gradient
res() {
    model "$@" 'fc0 = linear(24 -> 32)' 'stash a' 'fc1 = linear(32 -> 32) silu' 'pop a add' 'stash b' layernorm \
        'fc2 = linear(32 -> 32)' 'pop b add' 'stash c' 'rmsnorm' 'fc3 = linear(32 -> 32)' 'pop c add' 'fc4 = linear(32 -> 8)'
}
res norms
gen_run norms; ok $? "a residual model with a layernorm and an rmsnorm after its adds trains on one stage"
is "$(calls norms 'pg_add_layernorm_fwd(c, r, 32, 1e-05f, silu0_out, fc0_out, pop_a_out, ')/$(calls norms 'pg_add_rmsnorm_fwd(c, r, 32, ')" "1/1" \
    "...each add and the norm after it are one call (forward)"
is "$(calls norms 'pg_layernorm_bwd_in_add(c, r, 32, pop_a_out, ')/$(calls norms 'pg_rmsnorm_bwd_in_add(c, r, 32, ')" "1/1" \
    "...each norm's backward adds its stash's skip gradient in the same call"
is "$(calls norms 'pg_add_fwd(')/$(calls norms 'PG_TRY(pg_layernorm_fwd(')/$(calls norms 'PG_TRY(pg_rmsnorm_fwd(')/$(calls norms 'pg_axpy_inplace(c, d_pop_[bc]_out')" "1/0/0/0" \
    "...leaving apart only the add no norm follows"
# split between each add and its stash: no forward fusion; between each stash and its norm: none
sed -e 's/^pop a add$/pop a add\nsplit/' -e 's/^pop b add$/pop b add\nsplit/' "$T/norms.pipe" >"$T/norms_f.pipe"
sed -e 's/^stash b$/stash b\nsplit/' -e 's/^stash c$/stash c\nsplit/' "$T/norms.pipe" >"$T/norms_b.pipe"
gen_run norms_f; ok $? "split after each add, it trains on 3 stages"
is "$(calls norms_f 'pg_add_[a-z]*norm_fwd(')/$(calls norms_f '_bwd_in_add(')" "0/2" "...with the adds apart from the norms, the backwards fused"
same_as norms_f norms
gen_run norms_b; ok $? "split after each stash, it trains on 3 stages"
is "$(calls norms_b 'pg_add_[a-z]*norm_fwd(')/$(calls norms_b '_bwd_in_add(')" "0/0" "...with nothing fused (each norm begins a stage)"
same_as norms_b norms
done_testing
