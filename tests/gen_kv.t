#!/bin/sh
# tests/gen_kv.t — the static side of generation with the KV cache (issue 25
# §4): `generate = kv_cache(batch, microbatches, length, prefill)` sizes the
# caches the memory plan lays out, `pipegen plan` shows them (2 x batch x
# length x kv dim x 4 bytes per attention layer) and plan.json records them;
# `generate = none` leaves generation out and says so; the refusals of
# `pipegen gen` (a cache longer than the position table, a model that is not a
# language model), located.
. "$(dirname "$0")/lib.sh"
T=$(mktemp -d /tmp/pg-gen-kv.XXXXXX)
trap 'rm -rf "$T"' EXIT

# kv SETTING: lm_tiny (2 stages, d 32, one attention layer each) with that generate line
kv() { sed "s/^train {\$/train {\n  generate = $1/" "$TOP/tests/models/lm_tiny.pipe" >"$T/lm.pipe"; }

kv "kv_cache(batch = 3, microbatches = 3, length = 10, prefill = 4)"
"$PIPEGEN" plan "$T/lm.pipe" >"$T/plan" 2>&1; ok $? "plan with generate = kv_cache(...)"
like "$(cat "$T/plan")" "generation with the KV cache: 3 sequences at a time in 3 micro-batches, 10 positions each, prompts in pieces of 4" \
    "plan states the sizes"
is "$(grep -c '^  kv cache .* 7680 bytes$' "$T/plan")" 2 "each stage's cache: 2 x 3 sequences x 10 positions x 32 x 4 bytes"
kv "kv_cache(batch = 3, microbatches = 3, length = 16, prefill = 4)"
"$PIPEGEN" plan "$T/lm.pipe" >"$T/plan2" 2>&1
is "$(grep -c '^  kv cache .* 12288 bytes$' "$T/plan2")" 2 "16 positions: 12288 bytes"
"$PIPEGEN" gen "$T/lm.pipe" -o "$T/gen" >/dev/null 2>&1
like "$(cat "$T/gen/plan.json")" '"generate": \{"batch": 3, "microbatches": 3, "length": 16, "prefill": 4\}' \
    "plan.json records the sizes"

sed '/^train {$/!b' "$TOP/tests/models/lm_tiny.pipe" >"$T/def.pipe"
"$PIPEGEN" plan "$T/def.pipe" >"$T/plan3" 2>&1
like "$(cat "$T/plan3")" "generation with the KV cache: 2 sequences at a time in 2 micro-batches, 16 positions each, prompts in pieces of 16" \
    "without the setting: batch and micro-batches the stage count, length the input's positions"

kv none
"$PIPEGEN" plan "$T/lm.pipe" >"$T/plan4" 2>&1
like "$(cat "$T/plan4")" 'no generation with the KV cache: its .pipe says `generate = none`' "generate = none is said"
! grep -q 'kv cache' "$T/plan4"; ok $? "... and lays out no cache"

kv "kv_cache(length = 17)"
"$PIPEGEN" gen "$T/lm.pipe" -o "$T/g2" >"$T/o" 2>&1; st=$?
[ $st = 1 ] && grep -q "lm.pipe:14:14: error: kv_cache: length = 17 is more than the 16 positions of pos_embed 'pos'" "$T/o" &&
    grep -q "note: the position table is here" "$T/o"
ok $? "a cache longer than the position table: located, with the table"
sed 's/^/# /' "$T/o" | head -4

sed "s/^train {\$/train {\n  generate = kv_cache(batch = 2)/" "$TOP/examples/mlp.pipe" >"$T/mlp.pipe"
"$PIPEGEN" gen "$T/mlp.pipe" -o "$T/g3" >"$T/o" 2>&1; st=$?
[ $st = 1 ] && grep -q "error: generate = kv_cache(...) needs a language model (input and target both i32\[seq\]), but the input is f32" "$T/o"
ok $? "kv_cache on a model that is not a language model is refused"
done_testing
