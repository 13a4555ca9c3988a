#!/bin/sh
# tests/generated.t — generated/ is what pipegen makes today: every example
# with a generated/<model>/ directory is regenerated into a temp dir and must
# be byte-equal (no timestamps, no absolute paths, stable order).
. "$(dirname "$0")/lib.sh"
T=$(mktemp -d /tmp/pg-gen.XXXXXX)
trap 'rm -rf "$T"' EXIT
n=0
for dir in "$TOP"/generated/*/; do
    m=$(basename "$dir")
    [ -f "$TOP/examples/$m.pipe" ] || continue
    n=$((n + 1))
    # run from the top so the source path is the same relative one
    (cd "$TOP" && "$PIPEGEN" gen "examples/$m.pipe" -o "$T/$m") >"$T/$m.err" 2>&1
    ok $? "pipegen gen examples/$m.pipe"
    diff -r "$TOP/generated/$m" "$T/$m" >"$T/$m.diff" 2>&1
    st=$?
    [ $st = 0 ] || head -40 "$T/$m.diff" | sed 's/^/# /'
    ok $st "generated/$m is up to date (regenerate with: pipegen gen examples/$m.pipe -o generated/$m)"
    (cd "$TOP" && "$PIPEGEN" gen "examples/$m.pipe" -o "$T/$m.again") >/dev/null 2>&1
    diff -r "$T/$m" "$T/$m.again" >/dev/null 2>&1
    ok $? "generating $m twice gives the same bytes"
done
[ "$n" -ge 2 ]
ok $? "at least mlp and resmlp are generated ($n models)"
grep -q 'STAGE0_ARENA_BYTES' "$TOP/generated/mlp/mlp.h"
ok $? "the header exports STAGE<k>_ARENA_BYTES"
grep -rq '/work\|/home\|/tmp' "$TOP/generated" && st=1 || st=0
ok $st "no absolute paths in generated files"
done_testing
