#!/bin/sh
# tests/generate.t — --generate: after training, tests/models/lm_tiny.pipe
# generates text with the KV cache through its stages, and stage 0 prints it
# after 'sample: ' with the prompt in front. The logits are the same bits on 1
# and 2 stages, so the text is byte-identical for a fixed seed, with the tie
# replicated or transmitted (the user's transmitted copy is refreshed after the
# last update); greedy sampling is deterministic; --load of a --save file gives
# the same text with --steps 0; bad options are usage errors. (The cache holds
# 16 positions: 60 new tokens go on past a full cache, which keeps its last
# half.)
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_lm.sh"
T=$(mktemp -d /tmp/pg-generate.XXXXXX)
trap 'rm -rf "$T"' EXIT

lm_build "$T/one" 1 replicate; ok $? "lm_tiny builds on 1 stage"
lm_build "$T/two" 2 replicate; ok $? "lm_tiny builds on 2 stages (replicate)"
lm_build "$T/twot" 2 transmit; ok $? "lm_tiny builds on 2 stages (transmit)"
lm_text "$T/text.txt"
"$PIPEDATA" text "$T/text.txt" -o "$T/text.pgd" >/dev/null

sample() { grep -A100 '^\[stage [0-9]*\] sample: ' "$1" | grep -v 'bubble\|throughput\|started as replica \|\] generation: \|\] step [0-9]*/[0-9]*  loss \|\] final loss ' | sed 's/^\[stage [0-9]*\] //'; }
G="--steps 40 --log-every 40 --data $T/text.pgd --generate 60 --prompt the"
lm_run "$T/one" "$T/one.out" $G --save "$T/w.safetensors"; ok $? "1 stage trains and generates"
lm_run "$T/two" "$T/two.out" $G; ok $? "2 stages train and generate"
lm_run "$T/twot" "$T/twot.out" $G; ok $? "2 stages with a transmitted tie train and generate"
s1=$(sample "$T/one.out"); s2=$(sample "$T/two.out"); s3=$(sample "$T/twot.out")
like "$s1" "^sample: the" "stage 0 prints 'sample: ' and the prompt"
is "$(printf '%s' "$s1" | wc -c)" 71 "prompt (3) + 60 tokens, after 'sample: ' (8)"
is "$s2" "$s1" "2 stages give byte-identical text"
is "$s3" "$s1" "2 stages with tie transmit give byte-identical text"
grep -q '^\[stage 1\] sample' "$T/two.out"; ok $((! $?)) "only stage 0 prints it"

GG="--steps 200 --log-every 200 --data $T/text.pgd --generate 60 --temperature 0"
lm_run "$T/two" "$T/g1.out" $GG --prompt "the cat "; ok $? "greedy generation runs"
lm_run "$T/two" "$T/g2.out" $GG --prompt "the cat "
is "$(sample "$T/g2.out")" "$(sample "$T/g1.out")" "greedy generation is deterministic"
lm_run "$T/one" "$T/g3.out" $GG --prompt "the cat "
is "$(sample "$T/g3.out")" "$(sample "$T/g1.out")" "greedy text is the same on 1 stage"
lm_run "$T/two" "$T/g4.out" $G --temperature 0
[ "$(sample "$T/g4.out")" != "$s1" ]
ok $? "temperature 0.8 samples differ from greedy ones"
# (the longest stretch of the text in it, not given words: where the 200
# steps' model slips first depends on every bit of the training -- the loss rows
# of lnorm moved it before 'the mat', the exp of gelu after 'the dog ran')
lm_line="the cat sat on the mat. the dog ran to the log. a bird sang in the tree."
longest=$(sample "$T/g1.out" | sed 's/^sample: the cat //' | awk -v t="$lm_line$lm_line" '{
    for (i = 1; i <= length($0); i++)
        for (l = best + 1; i + l - 1 <= length($0) && index(t, substr($0, i, l)); l++) best = l
    } END { print best + 0 }')
[ "$longest" -ge 24 ]
ok $? "after 200 steps the greedy continuation of the regular text reproduces a stretch of it ($longest >= 24 characters)"

lm_run "$T/twot" "$T/ld.out" --steps 0 --load "$T/w.safetensors" --generate 60 --prompt the
ok $? "--steps 0 --load FILE --generate runs"
is "$(sample "$T/ld.out")" "$s1" "the loaded weights give the trained model's text"
lm_run "$T/two" "$T/bad.out" --steps 0 --load "$T/nonexistent.safetensors"
ok $((! $?)) "--load of a missing file fails"
like "$(cat "$T/bad.out")" "--load: .*nonexistent" "naming the file"

# Inference is not training: dropout is off and batch norm uses its running
# statistics (untrained: mean 0, variance 1, so about the identity) and updates
# nothing. So at initialisation a model with a dropout or a batchnorm layer
# after the embeddings continues a prompt as the same model without it does
# (the layers hold no parameters that would shift the others' initial values).
for v in drop bn; do
    case $v in drop) L='drop = dropout(0.5)' ;; bn) L='bn = batchnorm' ;; esac
    mkdir -p "$T/$v"
    sed -e '/# S1$/d' -e "s/^pos = pos_embed(seq, d)\$/&\\
$L/" "$TOP/tests/models/lm_tiny.pipe" >"$T/$v/lm_tiny.pipe"
    grep -q "^$L\$" "$T/$v/lm_tiny.pipe"; ok $? "$v: the model has the layer"
    "$PIPEGEN" gen "$T/$v/lm_tiny.pipe" -o "$T/$v/gen" >"$T/$v/gen.out" 2>&1 && mkdir -p "$T/$v/bin" &&
        $CC -std=c11 -O1 -I"$TOP/runtime/core" -I"$T/$v/gen" -o "$T/$v/bin/stage0" "$T/$v/gen/stage0.c" "$RTLIB" \
            -lpthread -lm
    ok $? "$v: builds"
done
GI="--steps 0 --generate 40 --temperature 0 --prompt the"
lm_run "$T/one" "$T/i0.out" $GI; ok $? "greedy generation from the initial weights"
lm_run "$T/drop" "$T/i1.out" $GI; ok $? "... with a dropout(0.5) layer"
lm_run "$T/bn" "$T/i2.out" $GI; ok $? "... with a batchnorm layer"
like "$(sample "$T/i0.out")" "^sample: the.{40}" "the plain model's sample"
is "$(sample "$T/i1.out")" "$(sample "$T/i0.out")" "dropout is off in generation"
is "$(sample "$T/i2.out")" "$(sample "$T/i0.out")" "batch norm generates from its running statistics"

lm_run "$T/one" "$T/u.out" --generate x; is $? 2 "--generate x: usage error"
lm_run "$T/one" "$T/u.out" --temperature -1; is $? 2 "--temperature -1: usage error"
lm_run "$T/one" "$T/u.out" --steps 0 --generate 5 --prompt "$(printf 'a\200')"
ok $((! $?)) "a prompt byte outside the vocabulary is refused"
like "$(cat "$T/u.out")" "byte 128 at position 1 is outside the vocabulary" "with the byte and its position"
done_testing
