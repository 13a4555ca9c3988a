#!/bin/sh
# tests/cuda_compile.t — every CUDA file (runtime/cuda/*.cu and the GPU test
# program tests/gpu/*.cu) compiles with nvcc for sm_90 under -Wall -Wextra
# -Werror, GPU or not. Runs `make -k cuda` (incremental: `make test` has just
# built the objects, so this is quick) and reports one line per file.
. "$(dirname "$0")/lib.sh"
NVCC=${NVCC:-${CUDA_HOME:-/usr/local/cuda}/bin/nvcc}
if [ ! -x "$NVCC" ]; then
    echo "1..0 # SKIP nvcc not found at $NVCC"
    exit 0
fi
cd "$TOP" || exit 1
log=$(make --no-print-directory -k NVCC="$NVCC" cuda 2>&1)
rc=$?
for f in runtime/cuda/*.cu tests/gpu/*.cu; do
    [ -f "$f" ] || continue
    case $f in
    runtime/cuda/*) o=build-cuda/cuda/$(basename "$f" .cu).o ;;
    *) o=build-cuda/cuda-tests/$(basename "$f" .cu).o ;;
    esac
    if [ -f "$o" ] && ! printf '%s\n' "$log" | grep -q "\[.*$o\] Error"; then
        ok 0 "$f compiles"
    else
        ok 1 "$f compiles"
        printf '%s\n' "$log" | grep -F "$f" | head -20 | sed 's/^/# /'
    fi
done
ok $rc "make cuda succeeds"
[ $rc = 0 ] || printf '%s\n' "$log" | tail -20 | sed 's/^/# /'
done_testing
