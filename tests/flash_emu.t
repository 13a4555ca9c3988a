#!/bin/sh
# tests/flash_emu.t — the fused attention kernels (runtime/cuda/flash_attn.cuh)
# run on the CPU: tests/gpu/flash_emu.cc with the CUDA built-ins emulated by
# tests/gpu/cuda_emu.h (block threads, barriers, shuffles, the m16n8k16
# tensor-core product from the PTX fragment layout), against the host
# reference of their arithmetic (runtime/cuda/kernel_ref.h). No GPU and no
# CUDA toolkit needed. Its TAP is ours.
TOP=$(cd "$(dirname "$0")/.." && pwd)
OUT=$TOP/build/tests/flash_emu
mkdir -p "$OUT" || exit 1
CXX=${CXX:-c++}
# kernels contracted (FMA) as nvcc does, where the CPU has it (tests/gpu/cuda_emu.h)
FMA=$(grep -qw fma /proc/cpuinfo 2>/dev/null && echo -mfma)
if ! $CXX -std=c++20 -ffp-contract=off $FMA -Wall -Wextra -Werror -Wno-unknown-pragmas -fno-strict-aliasing -O2 -pthread \
    -I"$TOP/runtime/core" -o "$OUT/flash_emu" "$TOP/tests/gpu/flash_emu.cc" 2>"$OUT/build.log"; then
    echo "1..1"
    echo "not ok 1 - tests/gpu/flash_emu.cc builds (C++20)"
    sed 's/^/# /' "$OUT/build.log" | tail -30
    exit 1
fi
exec "$OUT/flash_emu"
