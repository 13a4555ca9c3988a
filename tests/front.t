#!/bin/sh
# tests/front.t — unit tests of the front end (tests/unit/test_front.c):
# diagnostics text, source reading, suggestions, tokens, arena, error cap.
# Generates the lexer and parser itself (re2c, lemon) and builds with
# ASan/UBSan (plain where the sanitizer runtime is missing); its TAP is this test's.
TOP=$(cd "$(dirname "$0")/.." && pwd)
OUT=$TOP/build/tests/front
GEN=$OUT/gen
mkdir -p "$GEN" || exit 1
fail() { echo "1..1"; echo "not ok 1 - $1"; sed 's/^/# /' "$OUT/build.log"; exit 1; }
: >"$OUT/build.log"
cp "$TOP/dsl/pipe.y" "$GEN/pipe.y" &&
    (cd "$GEN" && lemon -s -T/usr/share/lemon/lempar.c pipe.y) >>"$OUT/build.log" 2>&1 &&
    re2c --no-generation-date --no-version -W --input-encoding ascii -o "$GEN/lexer.c" "$TOP/dsl/lexer.re" \
        >>"$OUT/build.log" 2>&1 || fail "lexer and parser generate"
CFLAGS="-std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Wall -Wextra -Werror -O1 -g"
GENFLAGS="-Wno-unused-parameter -Wno-unused-variable -Wno-sign-compare"
SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
INC="-I$TOP/dsl -I$GEN"
SRC="$TOP/tests/unit/test_front.c $TOP/dsl/diag.c $TOP/dsl/ast.c $TOP/dsl/parse.c $GEN/lexer.c $GEN/pipe.c"
BIN=$OUT/test_front
# shellcheck disable=SC2086
cc $CFLAGS $GENFLAGS $SAN $INC -o "$BIN" $SRC -lm >>"$OUT/build.log" 2>&1 ||
    cc $CFLAGS $GENFLAGS $INC -o "$BIN" $SRC -lm >>"$OUT/build.log" 2>&1 || fail "test_front compiles"
exec "$BIN"
