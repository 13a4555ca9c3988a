#!/bin/sh
# tests/parse.t — the lexer, parser and diagnostics through `pipegen parse FILE`.
# Every tests/golden/parse/NAME.pipe is run in that folder and its whole output
# (stdout, stderr, then `[exit N]`) must equal NAME.out. PIPEGEN_UPDATE_GOLDEN=1
# rewrites the .out files instead. Then the inputs too big or odd to commit are
# generated here: a 1 MB line, 10,000 nested blocks and parentheses, random
# bytes, a directory, a missing file. Each run must end in time, without a signal.
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

case $PIPEGEN in /*) ;; *) PIPEGEN=$(pwd)/$PIPEGEN ;; esac # we cd below
if [ ! -x "$PIPEGEN" ]; then
    echo "1..0 # SKIP no pipegen binary (make build/pipegen)"
    exit 0
fi

# run NAME ARGS...: output and `[exit N]` into $tmp/NAME.got, 10 s at most
run() {
    name=$1; shift
    timeout 10 "$PIPEGEN" "$@" >"$tmp/$name.got" 2>&1
    echo "[exit $?]" >>"$tmp/$name.got"
}

# ---- golden cases --------------------------------------------------------
cd "$TOP/tests/golden/parse" || exit 1
for f in *.pipe; do
    name=${f%.pipe}
    run "$name" parse "$f"
    if [ "${PIPEGEN_UPDATE_GOLDEN:-0}" = 1 ]; then
        cp "$tmp/$name.got" "$name.out"
    fi
    if cmp -s "$tmp/$name.got" "$name.out"; then
        ok 0 "golden parse/$name"
    else
        ok 1 "golden parse/$name"
        diff -u "$name.out" "$tmp/$name.got" 2>&1 | head -40 | sed 's/^/# /'
    fi
done

# status: the `[exit N]` line of $tmp/NAME.got; first: its first line
status() { tail -n 1 "$tmp/$1.got"; }
first() { head -n 1 "$tmp/$1.got"; }

# ---- usage and files that cannot be read --------------------------------
run usage parse
is "$(cat "$tmp/usage.got")" "usage: pipegen parse FILE
[exit 2]" "no FILE is a usage error (exit 2)"

run usage2 parse a.pipe b.pipe
is "$(status usage2)" "[exit 2]" "two FILEs are a usage error (exit 2)"

mkdir "$tmp/dir.pipe"
run dir parse "$tmp/dir.pipe"
is "$(cat "$tmp/dir.got")" "$tmp/dir.pipe: error: is a directory
[exit 1]" "a directory is refused with its name"

run missing parse "$tmp/missing.pipe"
is "$(cat "$tmp/missing.got")" "$tmp/missing.pipe: error: No such file or directory
[exit 1]" "a missing file is refused with strerror"

# ---- a 1 MB line: 200,000 layers then a stray ')' ------------------------
awk 'BEGIN { for (i = 0; i < 200000; i++) printf "relu "; printf ") gelu\n" }' >"$tmp/long.pipe"
run long parse "$tmp/long.pipe"
is "$(first long)" "$tmp/long.pipe:1:1000001: error: unexpected ')', expected a statement" \
    "a 1 MB line: the error is located at its column"
is "$(sed -n 2p "$tmp/long.got" | wc -c)" "204" "a 1 MB line is quoted as ... and its last 200 bytes"
is "$(sed -n 3p "$tmp/long.got" | sed 's/ //g')" "^" "the caret line of a 1 MB line is spaces and a caret"
is "$(status long)" "[exit 1]" "a 1 MB line exits 1"

awk 'BEGIN { for (i = 0; i < 200000; i++) printf "relu "; printf "\n" }' >"$tmp/longok.pipe"
run longok parse "$tmp/longok.pipe"
is "$(status longok)" "[exit 0]" "200,000 layers on one line parse"
is "$(grep -c ' layer relu@1:' "$tmp/longok.got")" "200000" "...and all 200,000 are in the tree"

# ---- deep nesting ----------------------------------------------------------
awk 'BEGIN { for (i = 0; i < 10000; i++) printf "repeat 2 { "; printf "relu";
             for (i = 0; i < 10000; i++) printf " }"; printf "\n" }' >"$tmp/deep.pipe"
run deep parse "$tmp/deep.pipe"
like "$(first deep)" "^$tmp/deep.pipe:1:[0-9]+: error: nesting too deep" "10,000 nested repeat blocks: a located error"
is "$(status deep)" "[exit 1]" "10,000 nested repeat blocks exit 1"

awk 'BEGIN { printf "const a = "; for (i = 0; i < 10000; i++) printf "(";
             printf "1"; for (i = 0; i < 10000; i++) printf ")"; printf "\n" }' >"$tmp/parens.pipe"
run parens parse "$tmp/parens.pipe"
like "$(first parens)" "^$tmp/parens.pipe:1:[0-9]+: error: nesting too deep" "10,000 nested parentheses: a located error"
is "$(status parens)" "[exit 1]" "10,000 nested parentheses exit 1"

awk 'BEGIN { printf "const a = 1"; for (i = 0; i < 100000; i++) printf " + 1"; printf "\n" }' >"$tmp/chain.pipe"
run chain parse "$tmp/chain.pipe"
like "$(first chain)" "^$tmp/chain.pipe:1:11: error: expression nested too deeply" "a 100,000-term sum: a located error, not a deep tree"
is "$(status chain)" "[exit 1]" "a 100,000-term sum exits 1"

awk 'BEGIN { printf "repeat 2 {"; for (i = 0; i < 200; i++) printf " repeat 2 {"; printf " relu";
             for (i = 0; i < 201; i++) printf " }"; printf "\n" }' >"$tmp/ok_deep.pipe"
run ok_deep parse "$tmp/ok_deep.pipe"
is "$(status ok_deep)" "[exit 0]" "200 nested repeat blocks are fine"

# ---- a 1 MB identifier: one short error, the name cut in the message ------------
awk 'BEGIN { printf "model "; for (i = 0; i < 16384; i++) printf "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"; printf "\n" }' >"$tmp/ident.pipe"
run ident parse "$tmp/ident.pipe"
is "$(first ident)" "$tmp/ident.pipe:1:7: error: name 'xxxxxxxxxxxxxxxxxxxxxxxx...' is too long (1048576 bytes; at most 255)" \
    "a 1 MB identifier: a located error that does not quote it whole"
is "$(status ident)" "[exit 1]" "a 1 MB identifier exits 1"
awk 'BEGIN { printf "model "; for (i = 0; i < 255; i++) printf "x"; printf "\n" }' >"$tmp/ident255.pipe"
run ident255 parse "$tmp/ident255.pipe"
is "$(status ident255)" "[exit 0]" "a 255-byte name is fine"

# ---- a syntax error on each of 100,000 lines: 20 shown, then a note, quickly ----
# (lemon reports again once three tokens have been taken after an error)
awk 'BEGIN { for (i = 0; i < 100000; i++) print "relu ) relu relu relu" }' >"$tmp/errlines.pipe"
start=$(date +%s)
run errlines parse "$tmp/errlines.pipe"
secs=$(( $(date +%s) - start ))
is "$(grep -c ': error: ' "$tmp/errlines.got")" 20 "100,000 syntax errors: 20 are shown"
is "$(sed -n 58p "$tmp/errlines.got")" "$tmp/errlines.pipe:20:6: error: unexpected ')', expected a statement" \
    "...each at its own line"
is "$(tail -n 2 "$tmp/errlines.got")" "$tmp/errlines.pipe: note: too many errors (20), stopping here
[exit 1]" "...then a note and exit 1"
ok "$([ "$secs" -le 2 ]; echo $?)" "...in at most 2 s ($secs s)"

# ---- random bytes from a fixed seed (Park-Miller, exact in awk's doubles) ------
for seed in 1 7 12345; do
    printf '%b' "$(awk -v s=$seed 'BEGIN { x = s; for (i = 0; i < 4096; i++) {
        x = (x * 16807) % 2147483647; printf "\\0%03o", x % 256 } }')" >"$tmp/rnd$seed.pipe"
    run rnd$seed parse "$tmp/rnd$seed.pipe"
    like "$(first rnd$seed)" "^$tmp/rnd$seed.pipe:[0-9]+:[0-9]+: error: " "random bytes (seed $seed): a located error"
    is "$(status rnd$seed)" "[exit 1]" "random bytes (seed $seed) exit 1"
done
is "$(wc -c <"$tmp/rnd1.pipe" | tr -d ' ')" "4096" "the random input is 4096 bytes"

done_testing
