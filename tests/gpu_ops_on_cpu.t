#!/bin/sh
# tests/gpu_ops_on_cpu.t — the GPU kernel test program (tests/gpu/test_ops_gpu.cu)
# built as plain C++ with -DPG_TEST_ON_CPU and linked with the CPU backend,
# which implements the same pg_ops.h contract (tests/gpu/ops_on_cpu.sh): its
# naive references, tolerances and bitwise checks must hold there too, so
# `make test-gpu` on a GPU machine tests the CUDA kernels, not bugs in the
# test. Its TAP is ours.
TOP=$(cd "$(dirname "$0")/.." && pwd)
OUT=$TOP/build/tests/gpu_on_cpu
if ! "$TOP/tests/gpu/ops_on_cpu.sh" "$OUT"; then
    echo "1..1"
    echo "not ok 1 - tests/gpu/test_ops_gpu.cu builds against the CPU backend"
    sed 's/^/# /' "$OUT/build.log" | tail -30
    exit 1
fi
# The error paths print their messages on stderr; keep them out of the TAP.
exec "$OUT/test_ops_on_cpu" 2>"$OUT/stderr.log"
