#!/bin/sh
# tests/textdata.t — text as data: `pipedata text` writes a rank-1 i32 token
# stream (one token per byte) that `pipedata bytes` turns back into the same
# bytes; usage errors exit 2; a language model (tests/models/lm_tiny.pipe)
# reads the stream with --data, cutting windows at seeded offsets that stage 0
# (inputs) and the loss stage (targets, one token later) agree on without
# talking: the losses are bit-identical on 1 and 2 stages, differ from the
# synthetic data's, and fall on a regular text; bad streams are refused.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_lm.sh"
T=$(mktemp -d /tmp/pg-textdata.XXXXXX)
trap 'rm -rf "$T"' EXIT

"$PIPEDATA" --help >"$T/help" 2>&1
ok $? "pipedata --help exits 0"
like "$(cat "$T/help")" "pipedata text FILE -o OUT.pgd" "--help shows the text command"
out=$("$PIPEDATA" --version 2>&1); rc=$?
is "$rc.$out" "0.pipedata (pipegen 0.1.0)" "pipedata --version prints the version, exit 0"
"$PIPEDATA" >/dev/null 2>&1; is $? 2 "no arguments: usage error, exit 2"
"$PIPEDATA" frobnicate a -o b >"$T/e" 2>&1; is $? 2 "unknown command: exit 2"
like "$(cat "$T/e")" "unknown command 'frobnicate'" "unknown command named"
"$PIPEDATA" text a b c >/dev/null 2>&1; is $? 2 "missing -o: exit 2"

printf 'Hello, tokens!\nline two\t\001\377' >"$T/in.txt"
"$PIPEDATA" text "$T/in.txt" -o "$T/in.pgd" >"$T/o" 2>&1
ok $? "pipedata text writes a token file"
like "$(cat "$T/o")" "26 tokens" "it reports the token count"
is "$(od -An -tu4 -j8 -N8 "$T/in.pgd" | tr -s ' ')" " 2 1" "header: dtype i32 (2), rank 1"
is "$(od -An -tu8 -j16 -N8 "$T/in.pgd" | tr -d ' ')" "26" "header: dims [26]"
is "$(od -An -tu4 -j24 -N4 "$T/in.pgd" | tr -d ' ')" "72" "first token is 'H' (72)"
"$PIPEDATA" bytes "$T/in.pgd" -o "$T/back.txt" >/dev/null 2>&1
ok $? "pipedata bytes reads it back"
cmp -s "$T/in.txt" "$T/back.txt"
ok $? "round trip gives the same bytes"
: >"$T/empty.txt"
"$PIPEDATA" text "$T/empty.txt" -o "$T/empty.pgd" >"$T/e" 2>&1; is $? 1 "an empty text is refused"
"$PIPEDATA" text "$T/nonexistent" -o "$T/x.pgd" >"$T/e" 2>&1; is $? 1 "a missing file is refused"
like "$(cat "$T/e")" "cannot open .*nonexistent" "and named"

lm_build "$T/one" 1 replicate; ok $? "lm_tiny builds on 1 stage"
lm_build "$T/two" 2 replicate; ok $? "lm_tiny builds on 2 stages"
lm_text "$T/text.txt"
"$PIPEDATA" text "$T/text.txt" -o "$T/text.pgd" >/dev/null
lm_run "$T/one" "$T/one.out" --steps 60 --log-every 1 --data "$T/text.pgd"
ok $? "1 stage trains on the token stream"
lm_run "$T/two" "$T/two.out" --steps 60 --log-every 1 --data "$T/text.pgd"
ok $? "2 stages train on the token stream"
# the lines without their timing (tokens/s, ms/step)
l1=$(grep 'step .*loss' "$T/one.out" | sed 's/^\[stage [0-9]*\] //; s/  [0-9.]* \(samples\|tokens\)\/s.*//')
l2=$(grep 'step .*loss' "$T/two.out" | sed 's/^\[stage [0-9]*\] //; s/  [0-9.]* \(samples\|tokens\)\/s.*//')
[ -n "$l1" ] && [ "$l1" = "$l2" ]
ok $? "every step's loss is identical on 1 and 2 stages (stage 0 and the loss stage cut the same windows)"
[ "$l1" = "$l2" ] || { echo "$l1" | head -3 | sed 's/^/# 1: /'; echo "$l2" | head -3 | sed 's/^/# 2: /'; }
first=$(echo "$l1" | head -1 | awk '{print $4}')
last=$(echo "$l1" | tail -1 | awk '{print $4}')
awk -v a="$first" -v b="$last" 'BEGIN { exit !(a > 4.0 && b < 2.3) }'
ok $? "the loss falls on a regular text ($first -> $last): below the text's unigram entropy 2.53, so targets are the inputs one token later"
lm_run "$T/one" "$T/syn.out" --steps 3 --log-every 1
s1=$(grep 'step 1/' "$T/syn.out" | awk '{print $6}'); d1=$(grep 'step 1/' "$T/one.out" | awk '{print $6}')
[ -n "$s1" ] && [ "$s1" != "$d1" ]
ok $? "the token stream is what is read (loss differs from synthetic data: $d1 vs $s1)"

printf 'abc\200defghijklmnop' >"$T/high.txt"
"$PIPEDATA" text "$T/high.txt" -o "$T/high.pgd" >/dev/null
lm_run "$T/two" "$T/high.out" --steps 1 --data "$T/high.pgd"
ok $((! $?)) "a token outside the vocabulary is refused"
like "$(cat "$T/high.out")" "high.pgd: token 128 at position 3 is outside the model's vocabulary \[0, 128\)" "with the token and its position"
printf 'too short' >"$T/short.txt"
"$PIPEDATA" text "$T/short.txt" -o "$T/short.pgd" >/dev/null
lm_run "$T/one" "$T/short.out" --steps 1 --data "$T/short.pgd"
ok $((! $?)) "a stream shorter than seq + 1 is refused"
like "$(cat "$T/short.out")" "holds 9 tokens, but one window of the model needs seq \+ 1 = 17" "with both counts"
lm_run "$T/one" "$T/tg.out" --steps 1 --data "$T/text.pgd" --targets "$T/text.pgd"
ok $((! $?)) "--targets next to a token stream is refused"
like "$(cat "$T/tg.out")" "leave out --targets" "saying why"
done_testing
