#!/bin/sh
# tests/debug_gdb.t — generated C you can step through: a stage built with
# -g -O0 and run under gdb in batch mode stops in a chunk function whose
# tensors are named locals (`info locals` shows a layer's output by name, with
# the token ids as int32_t), and the grammar's #line directives name
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
lm_text "$T/text.txt"
"$PIPEDATA" text "$T/text.txt" -o "$T/text.pgd" >/dev/null
if command -v "$GDB" >/dev/null 2>&1; then
    # stop at fwd_body_c0's first call, after its locals are set
    line=$(awk '/^static int fwd_body_c0\(/ { f = 1 } f && /PG_TRY\(/ { print NR; exit }' "$T/gen/stage0.c")
    PIPE_RANK=0 PIPE_WORLD=1 OPENBLAS_NUM_THREADS=1 timeout 120 "$GDB" -nx -batch \
        -ex 'set pagination off' -ex "break stage0.c:$line" -ex run -ex 'info locals' \
        -ex "whatis $out" -ex 'whatis tokens' -ex 'whatis F' -ex 'print F[0] >= 0' -ex 'kill' \
        --args "$T/stage0" --threads 1 --steps 1 --data "$T/text.pgd" >"$T/gdb.out" 2>&1
    sed 's/^/# /' "$T/gdb.out" | grep -v '^# \[\|^# Using host\|^# warning: Error disabling' | head -60
    grep -q "^Breakpoint 1, fwd_body_c0 (.*stage0.c:$line" "$T/gdb.out"
    ok $? "gdb stops in fwd_body_c0 at its first call (stage0.c:$line)"
    grep -q "^$out = (float \*) 0x[0-9a-f]*[1-9a-f][0-9a-f]*$" "$T/gdb.out" ||
        grep -q "^$out = 0x[0-9a-f]*[1-9a-f]" "$T/gdb.out"
    ok $? "info locals shows the layer output $out by name, pointing into the arena"
    grep -q '^type = float \* const$' "$T/gdb.out"
    ok $? "... a float * const"
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
