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
run badhelp help frobnicate
is "$(tail -n 1 "$tmp/badhelp.got")" "[exit 2]" "help for an unknown command is a usage error"
run missing check "$tmp/missing.pipe"
is "$(cat "$tmp/missing.got")" "$tmp/missing.pipe: error: No such file or directory
[exit 1]" "a missing file is an input error (exit 1)"

# ---- many errors in a large expansion are reported once each, quickly -------
{ echo "model big"; echo "input x : f32[8]"; echo "target y : f32[8]"
  echo "block b(w) { linear(w -> w) linear(9 -> w) }"
  echo "repeat 20000 b(8)"; } >"$tmp/big.pipe"
run big check "$tmp/big.pipe"
is "$(grep -c 'error:' "$tmp/big.got")" 1 "an error inside a repeated block is reported once"
done_testing
