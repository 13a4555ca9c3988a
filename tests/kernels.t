#!/bin/sh
# tests/kernels.t — the CPU kernels (runtime/cpu/*.c) against pg_ops.h:
# gradient checks, references, determinism, optimizers, init, error paths.
# Built straight from the sources with ASan/UBSan (falls back to a plain build
# where the sanitizer runtime is missing), then run; its TAP is this test's.
TOP=$(cd "$(dirname "$0")/.." && pwd)
OUT=$TOP/build/tests
mkdir -p "$OUT" || exit 1
BIN=$OUT/test_kernels
CFLAGS="-std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Wall -Wextra -Werror -O1 -g"
BLAS_CFLAGS=${BLAS_CFLAGS-$("$TOP/tools/deps.sh" blas-cflags)}
[ "$BLAS_CFLAGS" = none ] && BLAS_CFLAGS=""
INC="-I$TOP/runtime/core -I$TOP/runtime/cpu $BLAS_CFLAGS"
SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
SRC="$TOP/tests/unit/test_kernels.c $TOP/runtime/cpu/*.c"
# shellcheck disable=SC2086
if ! cc $CFLAGS $SAN $INC -o "$BIN" $SRC -lopenblas -lm 2>"$OUT/test_kernels.log"; then
    # shellcheck disable=SC2086
    if ! cc $CFLAGS $INC -o "$BIN" $SRC -lopenblas -lm 2>>"$OUT/test_kernels.log"; then
        echo "1..1"; echo "not ok 1 - test_kernels compiles"; sed 's/^/# /' "$OUT/test_kernels.log"; exit 1
    fi
fi
# The arena test asks for an impossible size: ASan must return NULL, not abort.
ASAN_OPTIONS=${ASAN_OPTIONS:-allocator_may_return_null=1:detect_leaks=1} exec "$BIN"
