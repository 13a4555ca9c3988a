#!/bin/sh
# tests/e2e_conv.t — convolutional networks end to end, bitwise: a sample of the
# matrix that tests/conv_matrix.sh (make test-matrix) runs whole.
#  - tests/models/conv_small.pipe (every convolutional layer, skips across splits,
#    deferred batch norm over images): against 1 stage, 1f1b, checkpoint never, 1
#    thread, the loss and the saved weights (running statistics included) of 2, 3
#    and 4 stages under gpipe, 1f1b, zb1, interleaved(2) and zbv (up to 8 chunks),
#    every checkpoint mode, 1 and 2 threads, byte for byte; the same with 2
#    data-parallel replicas against 1 stage x 2 replicas, and 2 replicas (of 12
#    micro-batches) within 1e-6 of one (of the same 24 micro-batches of rows:
#    the sums are grouped otherwise across D);
#  - the examples resnet, unet and vit (batch 8 in 4): 1 stage against the
#    examples' own split (4, 4 and 2 stages), bitwise.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
. "$TOP/tests/lib_conv.sh"
T=$(mktemp -d /tmp/pg-e2e-conv.XXXXXX)
trap 'rm -rf "$T"' EXIT

conv_same conv_small "1:1f1b:never:1:1 2:gpipe:always:2:1 3:1f1b:except_last:1:1 4:zb1:never:2:1
                      2:interleaved(2):always:1:1 4:interleaved(2):except_last:2:1 2:zbv:never:1:1
                      3:zbv:always:2:1"
conv_same conv_small "1:1f1b:never:1:2 3:zbv:except_last:2:2 4:1f1b:always:1:2"
# 2 replicas of 12 micro-batches against one of 24: the same micro-batches of
# rows, so batch norm normalises alike (README "What holds")
mkdir -p "$T/mb24"
e2e_gen "$T/mb24" conv_small "$(conv_keep 1)" 1f1b never -e 's/microbatches = 12/microbatches = 24/' &&
    build_strict "$T/mb24/gen" >"$T/mb24/build.out" 2>&1 &&
    "$PIPERUN" "$T/mb24/gen/bin" -- --steps 3 --threads 1 >"$T/mb24/run.out" 2>&1
ok $? "conv_small: 1 stage, 24 micro-batches trains"
l1=$(sed -n 's/.*final loss //p' "$T/mb24/run.out")
l2=$(sed -n 's/.*final loss //p' "$T/conv_small-1-1f1b-never/t1d2.loss")
awk -v a="$l1" -v b="$l2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d / a <= 1e-6) }'
ok $? "conv_small: 2 replicas of 12 micro-batches, loss $l2, within 1e-6 of one replica of 24, $l1"

# the examples: their own split against one stage (split lines removed)
for m in resnet unet vit; do
    d="$T/ex-$m"
    mkdir -p "$d/one" "$d/own"
    sed -e 's/batch = [0-9]*  microbatches = [0-9]*/batch = 8  microbatches = 4/' "$TOP/examples/$m.pipe" >"$d/own/$m.pipe"
    sed -e '/^split$/d' "$d/own/$m.pipe" >"$d/one/$m.pipe"
    for v in one own; do
        "$PIPEGEN" gen "$d/$v/$m.pipe" -o "$d/$v/gen" >"$d/$v/gen.out" 2>&1 && build_strict "$d/$v/gen" >"$d/$v/build.out" 2>&1 &&
            OPENBLAS_NUM_THREADS=1 "$PIPERUN" "$d/$v/gen/bin" -- --steps 2 --threads 1 --save "$d/$v/w.st" >"$d/$v/run.out" 2>&1
        st=$?
        [ $st = 0 ] || cat "$d/$v"/*.out | sed 's/^/# /' | tail -20
        grep 'final loss' "$d/$v/run.out" | sed 's/^\[stage [0-9]*\] //' >"$d/$v/loss"
    done
    n=$(ls "$d/own/gen"/stage*.c | wc -l)
    cmp -s "$d/one/loss" "$d/own/loss" && [ -s "$d/one/loss" ] && cmp -s "$d/one/w.st" "$d/own/w.st"
    ok $? "examples/$m.pipe (batch 8 in 4): $n stages give the loss and weights of 1, bitwise ($(cat "$d/own/loss"))"
done
done_testing
