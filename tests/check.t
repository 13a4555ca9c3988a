#!/bin/sh
# tests/check.t — the semantic checker and its summary through `pipegen check FILE`.
# Every tests/golden/check/NAME.pipe is run in that folder; its whole output
# (stdout, stderr, then `[exit N]`) must equal NAME.out. Every examples/NAME.pipe
# must check clean and print tests/golden/check/examples/NAME.out.
# PIPEGEN_UPDATE_GOLDEN=1 rewrites the .out files instead.
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ ! -x "$PIPEGEN" ]; then
    echo "1..0 # SKIP no pipegen binary (make build/pipegen)"
    exit 0
fi

# run NAME ARGS...: output and `[exit N]` into $tmp/NAME.got, 20 s at most
run() {
    out=$tmp/$1.got; shift
    timeout 20 "$PIPEGEN" "$@" >"$out" 2>&1
    echo "[exit $?]" >>"$out"
}

# compare NAME WANT-FILE LABEL
compare() {
    if [ "${PIPEGEN_UPDATE_GOLDEN:-0}" = 1 ]; then cp "$tmp/$1.got" "$2"; fi
    if cmp -s "$tmp/$1.got" "$2"; then ok 0 "$3"; else
        ok 1 "$3"
        diff -u "$2" "$tmp/$1.got" 2>&1 | head -40 | sed 's/^/# /'
    fi
}

# ---- golden cases: one behaviour each -------------------------------------
cd "$TOP/tests/golden/check" || exit 1
for f in *.pipe; do
    name=${f%.pipe}
    run "$name" check "$f"
    compare "$name" "$name.out" "golden check/$name"
done

# ---- the examples check clean and their summaries are stable ---------------
cd "$TOP" || exit 1
for f in examples/*.pipe; do
    name=$(basename "$f" .pipe)
    run "ex_$name" check "$f"
    is "$(tail -n 1 "$tmp/ex_$name.got")" "[exit 0]" "examples/$name.pipe checks clean"
    like "$(grep -c 'warning:' "$tmp/ex_$name.got")" '^0$' "examples/$name.pipe has no warnings"
    compare "ex_$name" "tests/golden/check/examples/$name.out" "summary of examples/$name.pipe"
done
like "$(head -n 1 "$tmp/ex_gpt2_small.got")" '124,439,808 parameters' "GPT-2 small has 124,439,808 parameters"

# ---- the command line -------------------------------------------------------
run version --version
is "$(cat "$tmp/version.got")" "pipegen 0.1.0
[exit 0]" "--version prints the version"
run help --help
like "$(cat "$tmp/help.got")" 'check FILE' "--help lists check"
is "$(tail -n 1 "$tmp/help.got")" "[exit 0]" "--help exits 0"
run helpcheck help check
like "$(head -n 1 "$tmp/helpcheck.got")" '^usage: pipegen check FILE$' "help check shows its usage"
for c in check schedule plan gen trace; do
    run "help_$c" "$c" --help
    like "$(head -n 1 "$tmp/help_$c.got")" "^usage: pipegen $c " "pipegen $c --help prints the usage of $c"
    is "$(tail -n 1 "$tmp/help_$c.got")" "[exit 0]" "...and exits 0"
done
run help_gen_args gen examples/mlp.pipe -h
like "$(head -n 1 "$tmp/help_gen_args.got")" "^usage: pipegen gen " "pipegen gen FILE -h is help too"
run nocmd
is "$(tail -n 1 "$tmp/nocmd.got")" "[exit 2]" "no command is a usage error (exit 2)"
run badcmd frobnicate
is "$(cat "$tmp/badcmd.got")" "pipegen: unknown command 'frobnicate' (see pipegen --help)
[exit 2]" "an unknown command is a usage error"
run badopt --frob
is "$(tail -n 1 "$tmp/badopt.got")" "[exit 2]" "an unknown option is a usage error"
run nofile check
is "$(cat "$tmp/nofile.got")" "usage: pipegen check FILE
[exit 2]" "check without FILE is a usage error"
run badguard gen examples/mlp.pipe -o "$tmp/g" --guard-bytes 100
is "$(cat "$tmp/badguard.got")" "pipegen: --guard-bytes 100: want a multiple of 64 from 0 to 1073741824
[exit 2]" "gen --guard-bytes not a multiple of 64 is a usage error"
run badhelp help frobnicate
is "$(tail -n 1 "$tmp/badhelp.got")" "[exit 2]" "help for an unknown command is a usage error"
run missing check "$tmp/missing.pipe"
is "$(cat "$tmp/missing.got")" "$tmp/missing.pipe: error: No such file or directory
[exit 1]" "a missing file is an input error (exit 1)"

mkfifo "$tmp/fifo.pipe"
start=$(date +%s)
run fifo check "$tmp/fifo.pipe"
is "$(cat "$tmp/fifo.got")" "$tmp/fifo.pipe: error: is not a regular file (it is a pipe (FIFO)); give the file itself
[exit 1]" "a FIFO is refused at once, not waited on ($(( $(date +%s) - start )) s)"
mkdir -p "$tmp/fifo_sched"
printf 'model f\ninput x : f32[4]\ntarget y : f32[4]\ntrain { schedule = file("s.csv") }\nl = linear(4 -> 4)\n' >"$tmp/fifo_sched/m.pipe"
mkfifo "$tmp/fifo_sched/s.csv"
run fifosched check "$tmp/fifo_sched/m.pipe"
like "$(cat "$tmp/fifosched.got")" 's\.csv: error: is not a regular file \(it is a pipe \(FIFO\)\)' "a FIFO as a schedule file: refused too"

# ---- pathological inputs, generated: each ends fast with exit 1 and a located error
# timed NAME FILE: `pipegen check FILE` with a 20 s hard limit; the CPU seconds
# (user + system) it used go to $tmp/NAME.secs. CPU time, not wall time: a guard
# against a quadratic path (which costs minutes here), not a speed target (those
# are in make bench), so it must not depend on how busy the machine is.
# (times must run in this shell: in a $(...) subshell it sees no children)
timed() {
    times >"$tmp/times0"
    run "$1" check "$2"
    times >"$tmp/times1"
    awk -v a="$(cpu_of "$tmp/times0")" -v b="$(cpu_of "$tmp/times1")" 'BEGIN { printf "%.2f\n", b - a }' >"$tmp/$1.secs"
}
fast() { awk -v s="$(cat "$tmp/$1.secs")" 'BEGIN { exit !(s < 5) }'; ok $? "$2 takes under 5 CPU-seconds ($(cat "$tmp/$1.secs") s)"; }
hdr() { echo "model big"; echo "input x : f32[16]"; echo "target y : f32[16]"; }

# repeat 1,000,000 of a block holding repeat 1000: refused by counting, before expanding
{ hdr; echo "block inner() { repeat 1000 relu }"; echo "repeat 1000000 inner()"; } >"$tmp/nested_repeat.pipe"
timed nested_repeat "$tmp/nested_repeat.pipe"
is "$(head -n 1 "$tmp/nested_repeat.got")" \
    "$tmp/nested_repeat.pipe:5:1: error: this repeat takes the model past 1,000,000 layers, the most pipegen expands" \
    "repeat 1000000 of a block with repeat 1000: the layer limit, at the outer repeat"
is "$(tail -n 1 "$tmp/nested_repeat.got")" "[exit 1]" "...exit 1"
fast nested_repeat "repeat 1000000 of repeat 1000"

# empty bodies still count: a billion empty instances are refused, not expanded
{ hdr; echo "block e() { }"; echo "repeat 1000000000 { e() }"; } >"$tmp/empty_repeat.pipe"
timed empty_repeat "$tmp/empty_repeat.pipe"
is "$(head -n 1 "$tmp/empty_repeat.got")" \
    "$tmp/empty_repeat.pipe:5:1: error: this repeat takes the model past 1,000,000 layers, the most pipegen expands" \
    "repeat 1000000000 of an empty block: the layer limit"
fast empty_repeat "a billion empty repeat instances"

# block b0 calls b1 calls ... b200: at most 100 levels, then a located error
{ hdr; i=0; while [ $i -lt 200 ]; do echo "block b$i() { b$((i + 1))() }"; i=$((i + 1)); done
  echo "block b200() { relu }"; echo "b0()"; } >"$tmp/deep_calls.pipe"
timed deep_calls "$tmp/deep_calls.pipe"
is "$(head -n 1 "$tmp/deep_calls.got")" \
    "$tmp/deep_calls.pipe:103:15: error: block calls nest too deeply: this call of 'b100' is 101 levels down; at most 100 are supported" \
    "block calls 200 deep: an error at the call one level too deep"
is "$(grep -c 'error:' "$tmp/deep_calls.got")" 1 "...reported once"
is "$(tail -n 1 "$tmp/deep_calls.got")" "[exit 1]" "...exit 1"
fast deep_calls "block calls 200 deep"
{ hdr; i=0; while [ $i -lt 99 ]; do echo "block b$i() { b$((i + 1))() }"; i=$((i + 1)); done
  echo "block b99() { linear(16 -> 16) }"; echo "b0()"; } >"$tmp/deep_ok.pipe"
run deep_ok check "$tmp/deep_ok.pipe"
is "$(tail -n 1 "$tmp/deep_ok.got")" "[exit 0]" "block calls 100 deep are fine"
like "$(cat "$tmp/deep_ok.got")" ' b00\.b10\.b20\.[.b0-9]+\.b990\.linear0 ' "...and named along the whole chain"

# a block with 10,000 parameters, called with every one by name, and one wrong
{ hdr; printf 'block wide('; awk 'BEGIN { for (i = 0; i < 10000; i++) printf "%sp%d", i ? ", " : "", i }'
  echo ') { linear(p0 -> p9999) }'; printf 'wide('
  awk 'BEGIN { for (i = 0; i < 10000; i++) printf "%sp%d = %d", i ? ", " : "", i, i == 0 ? 16 : 8 }'; echo ')'
} >"$tmp/wide.pipe"
timed wide "$tmp/wide.pipe"
like "$(head -n 1 "$tmp/wide.got")" "wide.pipe:4:[0-9]+: error: mse\\(mean\\) needs the model output and the target to have one shape, but the output is f32\\[8\\] and the target is f32\\[16\\]$" \
    "a block with 10,000 parameters binds them by name"
fast wide "a block with 10,000 parameters"

# 100,000 statements, the last one wrong
{ hdr; awk 'BEGIN { for (i = 0; i < 100000; i++) print "c" i " = relu" }'; echo "linear(8 -> 16)"; } >"$tmp/many.pipe"
timed many "$tmp/many.pipe"
is "$(head -n 1 "$tmp/many.got")" "$tmp/many.pipe:100004:1: error: linear(8 -> 16) expects input f32[8] but gets f32[16]" \
    "100,000 statements: the error in the last one, located"
fast many "100,000 statements"

# 100,000 constants (lookups are hashed), the last one unknown
{ hdr; awk 'BEGIN { for (i = 0; i < 100000; i++) print "const c" i " = " i % 16 + 1 }'; echo "linear(16 -> c99999 + nope)"; } >"$tmp/consts.pipe"
timed consts "$tmp/consts.pipe"
is "$(head -n 1 "$tmp/consts.got")" "$tmp/consts.pipe:100004:23: error: unknown name 'nope'" \
    "100,000 constants: an unknown name, located"
fast consts "100,000 constants"

# a 1 MB identifier: refused by the lexer with a short message
{ hdr; printf 'linear(16 -> '; awk 'BEGIN { for (i = 0; i < 16384; i++) printf "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" }'; echo ')'; } >"$tmp/ident.pipe"
timed ident "$tmp/ident.pipe"
is "$(head -n 1 "$tmp/ident.got")" "$tmp/ident.pipe:4:14: error: name 'aaaaaaaaaaaaaaaaaaaaaaaa...' is too long (1048576 bytes; at most 255)" \
    "a 1 MB identifier: a short located error"
is "$(tail -n 1 "$tmp/ident.got")" "[exit 1]" "...exit 1"
fast ident "a 1 MB identifier"

# an error on every one of 100,000 lines: the first 50, then a final note
{ hdr; awk 'BEGIN { for (i = 0; i < 100000; i++) print "lienar(16 -> 16)" }'; } >"$tmp/errors.pipe"
timed errors "$tmp/errors.pipe"
is "$(grep -c ': error: ' "$tmp/errors.got")" 50 "100,000 errors: the checker shows 50"
is "$(sed -n 149p "$tmp/errors.got")" "$tmp/errors.pipe:53:1: error: unknown layer or block 'lienar'; did you mean 'linear'?" \
    "...in source order, each located"
is "$(tail -n 2 "$tmp/errors.got")" "$tmp/errors.pipe: note: too many errors (50), stopping here
[exit 1]" "...then 'too many errors, stopping here' and exit 1"
fast errors "an error on each of 100,000 lines"

# a warning on every one of 30,000 lines: 50 shown, the rest counted
{ hdr; awk 'BEGIN { for (i = 0; i < 30000; i++) print "dropout(0)" }'; echo "linear(16 -> 8)"; } >"$tmp/warnings.pipe"
timed warnings "$tmp/warnings.pipe"
is "$(grep -c ': warning: ' "$tmp/warnings.got")" 50 "30,000 warnings: 50 are shown"
like "$(cat "$tmp/warnings.got")" "warnings.pipe: note: 29950 more warnings not shown" "...and the rest are counted"
is "$(tail -n 1 "$tmp/warnings.got")" "[exit 1]" "...exit 1 for the error after them"
fast warnings "a warning on each of 30,000 lines"

# 100,000 stashes never popped (pairing is sorted, not quadratic)
{ hdr; awk 'BEGIN { for (i = 0; i < 100000; i++) print "stash s" i }'; echo "relu"; } >"$tmp/stashes.pipe"
timed stashes "$tmp/stashes.pipe"
is "$(head -n 1 "$tmp/stashes.got")" "$tmp/stashes.pipe:4:1: error: skip 's0' is stashed but never popped in the model; add \`pop s0 add\` or \`pop s0 concat\` where the skip ends" \
    "100,000 unpopped stashes: the first is reported first"
is "$(grep -c ': error: ' "$tmp/stashes.got")" 50 "...and the checker stops at 50"
fast stashes "100,000 stashes"

# ---- many errors in a large expansion are reported once each, quickly -------
{ echo "model big"; echo "input x : f32[8]"; echo "target y : f32[8]"
  echo "block b(w) { linear(w -> w) linear(9 -> w) }"
  echo "repeat 20000 b(8)"; } >"$tmp/big.pipe"
run big check "$tmp/big.pipe"
is "$(grep -c 'error:' "$tmp/big.got")" 1 "an error inside a repeated block is reported once"
done_testing
