#!/bin/sh
# tests/json.t — the one JSON reader (runtime/core/json.c) that the safetensors
# header, the layer-time profile and the trace are read with:
# tests/unit/test_json.c, built with ASan and UBSan.
TOP=$(cd "$(dirname "$0")/.." && pwd)
cd "$TOP" || exit 1
OUT=$(mktemp -d /tmp/pg-test-json.XXXXXX) || exit 1
trap 'rm -rf "$OUT"' EXIT
SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
# shellcheck disable=SC2086
if ! ${CC:-cc} -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror -O1 -g $SAN -Iruntime/core -Itests \
        -o "$OUT/test_json" tests/unit/test_json.c runtime/core/json.c -lm 2>"$OUT/cc.log"; then
    echo "1..1"; echo "not ok 1 - test_json compiles"; sed 's/^/# /' "$OUT/cc.log"; exit 1
fi
ASAN_OPTIONS=detect_leaks=1 "$OUT/test_json"
