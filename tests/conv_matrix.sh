#!/bin/sh
# tests/conv_matrix.sh — `make test-matrix`: the whole bitwise matrix of
# convolutional networks (tests/e2e_conv.t runs a sample of it in make test).
#  - tests/models/conv_small.pipe: 1, 2, 3 and 4 stages x gpipe, 1f1b, zb1,
#    interleaved(2), zbv (2 chunks a stage: up to 8) x checkpoint always,
#    except_last, never x 1 and 2 threads, each with 1 and with 2 data-parallel
#    replicas: every variant's loss and saved weights the bytes of 1 stage, 1f1b,
#    never, 1 thread with the same replica count (240 runs);
#  - examples/resnet, unet, vit and digits_cnn (batch 24 in 12, the split lines
#    removed and `stages = P`: the balancer's split): every stage count x
#    schedule, the checkpoint mode and the threads turning with them, against 1
#    stage, 1f1b, never, 1 thread; and 2 replicas on 1, 2 and 4 stages (80 + 16 runs).
# About 30 minutes on 2 loaded cores. Not in make test.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
. "$TOP/tests/lib_conv.sh"
T=$(mktemp -d /tmp/pg-conv-matrix.XXXXXX)
trap 'rm -rf "$T"' EXIT

for d in 1 2; do
    all="1:1f1b:never:1:$d"
    for p in 1 2 3 4; do
        for s in gpipe 1f1b zb1 'interleaved(2)' zbv; do
            for c in always except_last never; do
                for t in 1 2; do
                    [ "$p:$s:$c:$t" = "1:1f1b:never:1" ] || all="$all $p:$s:$c:$t:$d"
                done
            done
        done
    done
    conv_same conv_small "$all"
done

CONV_EX_BATCH="batch = 24  microbatches = 12"
modes="always except_last never"
for m in resnet unet vit digits_cnn; do
    all="1:1f1b:never:1:1" k=0
    for p in 1 2 3 4; do
        for s in gpipe 1f1b zb1 'interleaved(2)' zbv; do
            k=$((k + 1))
            c=$(echo $modes | cut -d' ' -f$((k % 3 + 1)))
            all="$all $p:$s:$c:$((k % 2 + 1)):1"
        done
    done
    conv_same "$m" "$all"
    conv_same "$m" "1:1f1b:never:1:2 2:zbv:always:2:2 4:interleaved(2):except_last:1:2 4:1f1b:never:2:2"
done
done_testing
