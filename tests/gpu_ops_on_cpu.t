#!/bin/sh
# tests/gpu_ops_on_cpu.t — the GPU kernel test program (tests/gpu/test_ops_gpu.cu)
# built as plain C++ with -DPG_TEST_ON_CPU and linked with the CPU backend,
# which implements the same pg_ops.h contract: its naive references,
# tolerances and bitwise checks must hold there too, so `make test-gpu` on a
# GPU machine tests the CUDA kernels, not bugs in the test. Its TAP is ours.
TOP=$(cd "$(dirname "$0")/.." && pwd)
OUT=$TOP/build/tests/gpu_on_cpu
mkdir -p "$OUT" || exit 1
rm -f "$OUT"/*.o # objects of files that are gone must not be linked
CXX=${CXX:-c++}
CC=${CC:-cc}
LOG=$OUT/build.log
: >"$LOG"
fail_build() { echo "1..1"; echo "not ok 1 - $1"; sed 's/^/# /' "$LOG" | tail -30; exit 1; }
for f in "$TOP"/runtime/cpu/*.c "$TOP"/runtime/core/ops_common.c "$TOP"/runtime/core/rt_error.c "$TOP"/runtime/core/init.c; do
    [ "$f" = "$TOP/runtime/cpu/net.c" ] && continue # the transport: not an op
    $CC -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Wall -Wextra -Werror -O2 \
        -I"$TOP/runtime/core" -I"$TOP/runtime/cpu" -c -o "$OUT/$(basename "$f" .c).o" "$f" 2>>"$LOG" ||
        fail_build "CPU backend $f compiles"
done
$CXX -std=c++17 -O2 -Wall -Wextra -Werror -DPG_TEST_ON_CPU -I"$TOP/runtime/core" \
    -x c++ "$TOP/tests/gpu/test_ops_gpu.cu" -x none "$OUT"/*.o -lpthread -lm \
    -o "$OUT/test_ops_on_cpu" 2>>"$LOG" || fail_build "tests/gpu/test_ops_gpu.cu builds against the CPU backend"
# The error paths print their messages on stderr; keep them out of the TAP.
exec "$OUT/test_ops_on_cpu" 2>"$OUT/stderr.log"
