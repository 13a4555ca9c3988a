#!/bin/sh
# tests/cuda_host.t — the CUDA runtime's host-side logic without a GPU
# (tests/unit/test_cuda_host.c): the pinned staging ring of the step's copies
# (runtime/cuda/hstage.h) against a fake device, the causes named for an
# unusable GPU, the message slots of a device link, and the replicas' choice
# of NCCL or the host path for their gradient sum (runtime/cuda/cuda_caps.h).
# Plain C, ASan+UBSan; no CUDA needed.
TOP=$(cd "$(dirname "$0")/.." && pwd)
OUT=$(mktemp -d /tmp/pg-cuda-host.XXXXXX) || exit 1
trap 'rm -rf "$OUT"' EXIT
CFLAGS="-std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Wall -Wextra -Werror -O1 -g"
SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
# shellcheck disable=SC2086
if ! ${CC:-cc} $CFLAGS $SAN -I"$TOP/runtime/cuda" -I"$TOP/runtime/core" -o "$OUT/t" "$TOP/tests/unit/test_cuda_host.c" 2>"$OUT/cc.log"; then
    echo "1..1"; echo "not ok 1 - test_cuda_host.c compiles"; sed 's/^/# /' "$OUT/cc.log"; exit 1
fi
"$OUT/t"
