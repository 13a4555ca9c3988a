#!/bin/sh
# tests/dp_sum_emu.t — the NCCL path's sum over the replicas
# (runtime/cuda/dp_sum.cuh) run on the CPU: tests/gpu/dp_sum_emu.cc with the
# CUDA built-ins emulated by tests/gpu/cuda_emu.h, against the CPU's
# arithmetic (kernel_ref.h's pg_ref_dp_sum). No GPU and no CUDA toolkit
# needed. Its TAP is ours.
TOP=$(cd "$(dirname "$0")/.." && pwd)
OUT=$TOP/build/tests/dp_sum_emu
mkdir -p "$OUT" || exit 1
CXX=${CXX:-c++}
# kernels contracted (FMA) as nvcc does, where the CPU has it (tests/gpu/cuda_emu.h)
FMA=$(grep -qw fma /proc/cpuinfo 2>/dev/null && echo -mfma)
if ! $CXX -std=c++20 -ffp-contract=off $FMA -Wall -Wextra -Werror -Wno-unknown-pragmas -O2 -pthread \
    -I"$TOP/runtime/core" -o "$OUT/dp_sum_emu" "$TOP/tests/gpu/dp_sum_emu.cc" 2>"$OUT/build.log"; then
    echo "1..1"
    echo "not ok 1 - tests/gpu/dp_sum_emu.cc builds (C++20)"
    sed 's/^/# /' "$OUT/build.log" | tail -30
    exit 1
fi
exec "$OUT/dp_sum_emu"
