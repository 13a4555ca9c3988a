#!/bin/sh
# tests/cuda_geom.t — the launch geometry of runtime/cuda (launch_geom.h, plain
# C) over the shapes of every example model's plan (generated/*/plan.json,
# GPT-2 small among them): each layer's kernels at the largest micro-batch
# within CUDA's grid and block limits, never an empty grid, every column,
# query tile, head and sample reached by the kernels without a stride loop;
# and the edges (tests/unit/test_launch_geom.c). No GPU, no CUDA.
TOP=$(cd "$(dirname "$0")/.." && pwd)
OUT=$(mktemp -d /tmp/pg-cuda-geom.XXXXXX) || exit 1
trap 'rm -rf "$OUT"' EXIT
CFLAGS="-std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Wall -Wextra -Werror -O1 -g"
SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
# shellcheck disable=SC2086
if ! ${CC:-cc} $CFLAGS $SAN -I"$TOP/runtime/cuda" -I"$TOP/runtime/core" -o "$OUT/t" "$TOP/tests/unit/test_launch_geom.c" \
    "$TOP/runtime/core/json.c" -lm 2>"$OUT/cc.log"; then
    echo "1..1"; echo "not ok 1 - test_launch_geom.c compiles"; sed 's/^/# /' "$OUT/cc.log"; exit 1
fi
cd "$TOP" || exit 1
exec "$OUT/t" generated/*/plan.json
