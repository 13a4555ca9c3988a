#!/bin/sh
# tests/debug_gdb.t — generated C you can step through: a stage built with
# -g -O0 and run under gdb in batch mode stops in a chunk function whose
# tensors and parameters are named locals (`info locals` shows a layer's output
# and a weight by name, with the token ids as int32_t), and the grammar's #line directives name
# dsl/pipe.y, so a debugger in the parser lands in the grammar.
. "$(dirname "$0")/lib.sh"
. "$TOP/tests/lib_lm.sh"
T=$(mktemp -d /tmp/pg-debug-gdb.XXXXXX)
trap 'rm -rf "$T"' EXIT
GDB=${GDB:-gdb}

# lm_tiny on one stage: tokens in, an embedding, attention blocks, logits
sed -e '/# S1$/d' "$TOP/tests/models/lm_tiny.pipe" >"$T/lm.pipe"
"$PIPEGEN" gen "$T/lm.pipe" -o "$T/gen" >"$T/gen.out" 2>&1
ok $? "lm_tiny generates on one stage"
$CC -std=c11 -g -O0 -Wall -Wextra -Werror -I"$TOP/runtime/core" -I"$T/gen" -o "$T/stage0" "$T/gen/stage0.c" \
    "$RTLIB" -lpthread -lm 2>"$T/cc.log"
ok $? "stage 0 builds with -g -O0 and every warning an error"
# the first layer's output, as the generated code names it
out=$(sed -n 's/^    float \*const \([a-z0-9_]*_out\) = (float \*)(A + F\[[0-9]*\]);.*/\1/p' "$T/gen/stage0.c" | head -1)
[ -n "$out" ]
ok $? "stage0.c declares the tensors as locals (first: $out)"
# the first parameter, a local at its arena offset like the tensors (no macros)
par=$(sed -n 's/^    float \*const \([a-z0-9_]*\) = (float \*)(A + [0-9]*); \/\* [a-z0-9_.]*: f32\[.*/\1/p' "$T/gen/stage0.c" | head -1)
[ -n "$par" ]
ok $? "stage0.c declares the parameters as locals (first: $par)"
! grep -q '^#define G\{0,1\}P[0-9]' "$T/gen/stage0.c"
ok $? "... and no parameter macros"
grep -q "^    float \*const d_$par = (float \*)(A + [0-9]*); /\* gradient of " "$T/gen/stage0.c"
ok $? "... and its gradient accumulator is a local too (d_$par)"
# a parameter named like a tensor's local (the embedding's output tok_out): p<index>_ before it
sed -e 's/\bwte\b/tok_out/g' "$T/lm.pipe" >"$T/clash.pipe"
"$PIPEGEN" gen "$T/clash.pipe" -o "$T/clash" >"$T/clash.out" 2>&1 &&
    $CC -std=c11 -fsyntax-only -Wall -Wextra -Werror -I"$TOP/runtime/core" -I"$T/clash" "$T/clash/stage0.c" 2>"$T/clash.log"
ok $? "a parameter named tok_out beside the tensor tok_out: stage 0 compiles"
like "$(grep 'pg_embed_fwd' "$T/clash/stage0.c")" '\(const int32_t \*\)tokens, p0_tok_out, tok_out\)' \
    "... the parameter is p0_tok_out, the tensor tok_out"
grep -q '^    float \*const d_p0_tok_out = (float \*)(A + [0-9]*); /\* gradient of tok_out: ' "$T/clash/stage0.c"
ok $? "... and its gradient d_p0_tok_out"
lm_text "$T/text.txt"
"$PIPEDATA" text "$T/text.txt" -o "$T/text.pgd" >/dev/null
if command -v "$GDB" >/dev/null 2>&1; then
    # stop at fwd_body_c0's first call, after its locals are set
    line=$(awk '/^static int fwd_body_c0\(/ { f = 1 } f && /PG_TRY\(/ { print NR; exit }' "$T/gen/stage0.c")
    PIPE_RANK=0 PIPE_WORLD=1 OPENBLAS_NUM_THREADS=1 timeout 120 "$GDB" -nx -batch \
        -ex 'set pagination off' -ex "break stage0.c:$line" -ex run -ex 'info locals' \
        -ex "whatis $out" -ex 'whatis tokens' -ex "whatis $par" -ex 'whatis F' -ex 'print F[0] >= 0' -ex 'kill' \
        --args "$T/stage0" --threads 1 --steps 1 --data "$T/text.pgd" >"$T/gdb.out" 2>&1
    sed 's/^/# /' "$T/gdb.out" | grep -v '^# \[\|^# Using host\|^# warning: Error disabling' | head -60
    grep -q "^Breakpoint 1, fwd_body_c0 (.*stage0.c:$line" "$T/gdb.out"
    ok $? "gdb stops in fwd_body_c0 at its first call (stage0.c:$line)"
    grep -q "^$out = (float \*) 0x[0-9a-f]*[1-9a-f][0-9a-f]*$" "$T/gdb.out" ||
        grep -q "^$out = 0x[0-9a-f]*[1-9a-f]" "$T/gdb.out"
    ok $? "info locals shows the layer output $out by name, pointing into the arena"
    grep -q '^type = float \* const$' "$T/gdb.out"
    ok $? "... a float * const"
    grep -q "^$par = (float \*) 0x[0-9a-f]*[1-9a-f][0-9a-f]*$" "$T/gdb.out" ||
        grep -q "^$par = 0x[0-9a-f]*[1-9a-f]" "$T/gdb.out"
    ok $? "info locals shows the parameter $par by name, pointing into the arena"
    [ "$(grep -c '^type = float \* const$' "$T/gdb.out")" -ge 2 ]
    ok $? "... a float * const too"
    grep -q '^type = const int32_t \* const$' "$T/gdb.out"
    ok $? "... and the token ids are a const int32_t * const"
    grep -q '^type = const int64_t \* const$' "$T/gdb.out" && grep -q '^\$1 = 1$' "$T/gdb.out"
    ok $? "... and F is this micro-batch's row of frame offsets"
else
    skip "gdb not found (tools/deps.sh test installs it)"
fi
grep -q '^#line [0-9]* "dsl/pipe.y"' "$TOP/build/gen/pipe.c"
ok $? "the parser's #line directives name dsl/pipe.y"
! grep -q '^#line [0-9]* "pipe.y"' "$TOP/build/gen/pipe.c"
ok $? "... and none names a copy of it"
done_testing
