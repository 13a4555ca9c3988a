#!/bin/sh
# tests/gpu/ops_on_cpu.sh OUTDIR — builds OUTDIR/test_ops_on_cpu: the GPU op
# test program (tests/gpu/test_ops_gpu.cu) as plain C++ with -DPG_TEST_ON_CPU,
# linked with the CPU backend, which implements the same pg_ops.h contract
# (tests/gpu_ops_on_cpu.t runs it; with PG_OPS_RECORD=FILE it records the CPU
# backend's results that the CUDA builds compare with: tests/cuda_emu_ops.t,
# the GPU bundle). Compiler errors go to OUTDIR/build.log. Exit 0 or 1.
TOP=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:?usage: tests/gpu/ops_on_cpu.sh OUTDIR}
mkdir -p "$OUT/obj" || exit 1
rm -f "$OUT"/obj/*.o # objects of files that are gone must not be linked
CXX=${CXX:-c++}
CC=${CC:-cc}
LOG=$OUT/build.log
: >"$LOG"
for f in "$TOP"/runtime/cpu/*.c "$TOP"/runtime/core/ops_common.c "$TOP"/runtime/core/rt_error.c "$TOP"/runtime/core/init.c; do
    [ "$f" = "$TOP/runtime/cpu/net.c" ] && continue # the transport: not an op
    $CC -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Wall -Wextra -Werror -O2 \
        -I"$TOP/runtime/core" -I"$TOP/runtime/cpu" -c -o "$OUT/obj/$(basename "$f" .c).o" "$f" 2>>"$LOG" ||
        { echo "CPU backend $f does not compile" >>"$LOG"; exit 1; }
done
$CXX -std=c++17 -O2 -Wall -Wextra -Werror -DPG_TEST_ON_CPU -I"$TOP/runtime/core" \
    -x c++ "$TOP/tests/gpu/test_ops_gpu.cu" -x none "$OUT"/obj/*.o -lpthread -lm \
    -o "$OUT/test_ops_on_cpu" 2>>"$LOG"
