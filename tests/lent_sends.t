#!/bin/sh
# tests/lent_sends.t — the pipeline's messages leave from the arena where they
# lie, lent to the sender thread instead of copied into its ring
# (runtime/core/step.c, "messages lent from the arena"; issue 28 §4): a slot's
# lent messages are waited for before the next compute action of that slot,
# before a receive into their bytes and at the step's end. PIPE_CHECK_SENDS
# (tests/lib.sh sets it for every test) makes each stage hash a lent message
# when it lends it and again when it is written. Here: gpt_tiny with 6
# micro-batches (so 1f1b reuses its slots within a step) on 1, 4 stages (1f1b)
# and 2 stages (zbv): the same losses and weights, with and without the
# check; and a stage table whose send names a slot that is not the one its
# buffer belongs to (as a generator bug would) stops the run with the
# check's message, naming the action, the bytes and where they lie; without
# .lend_sends (pipegen's simulation with the waits did not finish) the same
# table copies its messages and trains.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_e2e.sh"
T=$(mktemp -d /tmp/pg-lent.XXXXXX)
trap 'rm -rf "$T"' EXIT

# variant NAME N SCHEDULE: gpt_tiny, 6 micro-batches, N stages, built into $T/NAME
variant() {
    e2e_gen "$T/$1" gpt_tiny "$(e2e_splits "$2")" "$3" never \
        -e "s/batch = 6  microbatches = 3/batch = 12  microbatches = 6/" && build_strict "$T/$1/gen"
}
# train NAME CHECK: 3 steps with PIPE_CHECK_SENDS=CHECK; the final loss into NAME.CHECK.loss
train() {
    PIPE_CHECK_SENDS=$2 OPENBLAS_NUM_THREADS=1 "$PIPERUN" "$T/$1/gen/bin" -- --steps 3 --threads 1 \
        --save "$T/$1.$2.safetensors" >"$T/$1.$2.out" 2>&1 || { sed 's/^/# /' "$T/$1.$2.out" | tail -15; return 1; }
    grep 'final loss' "$T/$1.$2.out" | sed 's/^\[stage [0-9]*\] //' >"$T/$1.$2.loss"
}

variant s1 1 1f1b; ok $? "gpt_tiny, 6 micro-batches, 1 stage: generated and built"
variant s4 4 1f1b; ok $? "gpt_tiny, 6 micro-batches, 4 stages (1f1b): generated and built"
variant v2 2 zbv; ok $? "gpt_tiny, 6 micro-batches, 2 stages (zbv): generated and built"
reuse=$(grep -c 'PG_SEND_ACT, .mb = [0-9]*, .chunk = 0, .slot = 0,' "$T/s4/gen/stage0.c")
[ "$reuse" -ge 2 ]; ok $? "stage 0 of the 4 sends from slot 0 more than once a step ($reuse times): a lent message's slot is rewritten within the step"

train s1 1; ok $? "1 stage trains"
for v in s4 v2; do
    train $v 1; ok $? "$v: trains with PIPE_CHECK_SENDS=1 (every lent message unchanged until written)"
    train $v 0; ok $? "$v: trains with PIPE_CHECK_SENDS=0"
    cmp -s "$T/s1.1.loss" "$T/$v.1.loss" && cmp -s "$T/s1.1.safetensors" "$T/$v.1.safetensors"
    ok $? "$v: final loss and weights bitwise those of 1 stage ($(cat "$T/$v.1.loss"))"
    cmp -s "$T/$v.1.loss" "$T/$v.0.loss" && cmp -s "$T/$v.1.safetensors" "$T/$v.0.safetensors"
    ok $? "$v: the same with and without the check"
done

# stage 0's first send of mb 0 says slot 9: nothing waits for it before slot 0 is rewritten
mkdir -p "$T/bad" && cp -r "$T/s4/gen" "$T/bad/gen" && rm -rf "$T/bad/gen/bin"
sed -i '0,/{.kind = PG_SEND_ACT, .mb = 0, .chunk = 0, .slot = 0,/s//{.kind = PG_SEND_ACT, .mb = 0, .chunk = 0, .slot = 9,/' \
    "$T/bad/gen/stage0.c"
[ "$(grep -c 'slot = 9' "$T/bad/gen/stage0.c")" = 1 ] && build_strict "$T/bad/gen"
ok $? "a stage table whose first send names slot 9 (its buffer is slot 0's) builds"
PIPE_CHECK_SENDS=1 OPENBLAS_NUM_THREADS=1 timeout 60 "$PIPERUN" "$T/bad/gen/bin" -- --steps 2 --threads 1 >"$T/bad.out" 2>&1
st=$?
[ $st = 1 ]; ok $? "...with PIPE_CHECK_SENDS=1 the run fails (status $st, not a hang or a signal)"
like "$(cat "$T/bad.out")" '^\[stage 0\] action 1 SEND_ACT\(mb 0\) to stage 1: its 1024 bytes at arena offset [0-9]+ changed before they were sent \(PIPE_CHECK_SENDS; a message lent from the arena must stay as it is\)$' \
    "...stage 0 names the send, its bytes and where they lie"
# the same table without .lend_sends (as pipegen emits it where its simulation
# with the waits does not finish): the messages are copied, the run trains
grep -q '^    \.lend_sends = 1,' "$T/s4/gen/stage0.c"; ok $? "pipegen marks gpt_tiny's 4 stages as lending (.lend_sends = 1)"
sed -i '/^    \.lend_sends = 1,/d' "$T/bad/gen/stage"*.c && build_strict "$T/bad/gen" &&
    PIPE_CHECK_SENDS=1 OPENBLAS_NUM_THREADS=1 timeout 60 "$PIPERUN" "$T/bad/gen/bin" -- --steps 3 --threads 1 >"$T/bad2.out" 2>&1 &&
    [ "$(grep 'final loss' "$T/bad2.out" | sed 's/^\[stage [0-9]*\] //')" = "$(cat "$T/s4.1.loss")" ]
ok $? "...without .lend_sends the same table copies its messages: it trains to the same loss"
done_testing
