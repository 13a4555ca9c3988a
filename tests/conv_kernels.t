#!/bin/sh
# tests/conv_kernels.t — the CPU ops of convolutional networks (runtime/cpu/
# conv.c, pool.c, dims.c, batchnorm2d.c, sigmoid/tanh/silu) against pg_ops.h:
# definitions, adjoints, the bits (threads, a sample alone, weight gradients
# sample by sample), error texts (tests/unit/test_conv_kernels.c). Built from
# the sources with ASan/UBSan (a plain build where the sanitizer runtime is
# missing). Then, as tests/kernels.t does, the program again under every GEMM
# kernel this CPU runs, each `test_conv_kernels digest` (a hash of the
# convolutions' bytes) the same: an AVX2-only or older host computes them alike.
TOP=$(cd "$(dirname "$0")/.." && pwd)
OUT=$TOP/build/tests
mkdir -p "$OUT" || exit 1
BIN=$OUT/test_conv_kernels
CFLAGS="-std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Wall -Wextra -Werror -O1 -g"
INC="-I$TOP/runtime/core -I$TOP/runtime/cpu"
SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
SRC="$TOP/tests/unit/test_conv_kernels.c $(ls "$TOP"/runtime/cpu/*.c | grep -v /net.c$) $TOP/runtime/core/ops_common.c $TOP/runtime/core/rt_error.c $TOP/runtime/core/init.c"
# shellcheck disable=SC2086
if ! cc $CFLAGS $SAN $INC -o "$BIN" $SRC -lpthread -lm 2>"$OUT/test_conv_kernels.log"; then
    # shellcheck disable=SC2086
    if ! cc $CFLAGS $INC -o "$BIN" $SRC -lpthread -lm 2>>"$OUT/test_conv_kernels.log"; then
        echo "1..1"; echo "not ok 1 - test_conv_kernels compiles"; sed 's/^/# /' "$OUT/test_conv_kernels.log"; exit 1
    fi
fi

"$BIN" >"$OUT/test_conv_kernels.tap"
st=$?
grep -v '^1\.\.' "$OUT/test_conv_kernels.tap"
n=$(grep -c '^\(not \)\{0,1\}ok ' "$OUT/test_conv_kernels.tap")
fail=0
[ "$st" = 0 ] || fail=1

ok() {
    n=$((n + 1))
    if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fail=1; fi
}

flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
has() { for f; do case $flags in *" $f "*) ;; *) return 1 ;; esac; done; }
kernels="portable"
has avx2 fma && kernels="$kernels avx2"
has avx512f && kernels="$kernels avx512"
ref=$("$BIN" digest 2>&1)
ok $? "test_conv_kernels digest runs ($ref)"
for k in $kernels; do
    got=$(PIPE_CPU_GEMM=$k "$BIN" digest 2>&1)
    ok $([ "${got%% *}" = "${ref%% *}" ]; echo $?) "PIPE_CPU_GEMM=$k: the convolutions' bytes are the same ($got)"
done
echo "1..$n"
exit $fail
