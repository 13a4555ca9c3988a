#!/bin/sh
# tests/conv_plan.t — the convolution geometries a stage table lists
# (pg_stage_desc.convs, contract version 9: the CUDA runtime makes their cuDNN
# plans and its one workspace at start-up from them) and `pipegen plan`'s GPU
# note per stage: every generated convolutional example's stage files list
# as many distinct geometries as the plan says, duplicates (unet's twice-used
# 3x3 convolutions) once, with the plan function; a model without
# convolutions gets neither the table nor the note. The runtime side (the
# start-up line, a table one short, one without its function) runs in
# tests/gpu/run_gpu_tests.sh section 5c (tests/cuda_emu_train.t).
. "$(dirname "$0")/lib.sh"
T=$(mktemp -d /tmp/pg-conv-plan.XXXXXX)
trap 'rm -rf "$T"' EXIT
for m in digits_cnn resnet unet; do
    "$PIPEGEN" plan "$TOP/examples/$m.pipe" >"$T/$m.plan" 2>&1
    ok $? "pipegen plan examples/$m.pipe"
    want=$(sed -n 's/^  GPU: \([0-9]*\) convolution geometr[a-z]* through cuDNN, planned at start-up; the cuDNN workspace is sized on the GPU then (its bytes depend on the GPU.s algorithms), allocated once, outside the arena$/\1/p' "$T/$m.plan" | tr '\n' ' ')
    got=""
    for f in "$TOP/generated/$m"/stage*.c; do
        n=$(sed -n '/^static const pg_conv stage_convs\[\] = {$/,/^};$/p' "$f" | grep -c '^    {\.in = ')
        grep -qx "    .nconvs = $n, .convs = stage_convs, .conv_plan = pg_conv_plan," "$f" || n="$n(no .nconvs line)"
        dup=$(sed -n '/^static const pg_conv stage_convs\[\] = {$/,/^};$/p' "$f" | grep '^    {\.in = ' | sort | uniq -d)
        [ -z "$dup" ] || n="$n(duplicates)"
        got="$got$n "
    done
    is "$got" "$want" "$m: each stage's table lists the distinct geometries the plan's GPU note counts ($want)"
done
"$PIPEGEN" gen "$TOP/examples/mlp.pipe" -o "$T/mlp" >/dev/null 2>&1 && "$PIPEGEN" plan "$TOP/examples/mlp.pipe" >"$T/mlp.plan" 2>&1 &&
    ! grep -q 'GPU:' "$T/mlp.plan" && ! grep -q 'conv' "$T/mlp"/stage*.c
ok $? "mlp (no convolutions): no GPU note, no geometry table"
done_testing
