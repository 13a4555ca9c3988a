#!/bin/sh
# tests/kernels.t — the CPU kernels (runtime/cpu/*.c) against pg_ops.h:
# gradient checks, references, determinism, optimizers, init, error paths.
# Built straight from the sources with ASan/UBSan (falls back to a plain build
# where the sanitizer runtime is missing), then run; its TAP is this test's.
#
# Then the same bits on other hosts: the program runs again under every GEMM
# kernel of runtime/cpu/gemm.c this CPU can execute (PIPE_CPU_GEMM: what an
# AVX2-only or a pre-AVX2 host picks; OpenBLAS, which the runtime used before,
# gave other bits on AVX2 hosts), each run must pass, and `test_kernels digest`
# (a hash of the bytes of linear and attention forward and backward products,
# 2 threads) must be the same in every one.
TOP=$(cd "$(dirname "$0")/.." && pwd)
OUT=$TOP/build/tests
mkdir -p "$OUT" || exit 1
BIN=$OUT/test_kernels
CFLAGS="-std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Wall -Wextra -Werror -O1 -g"
INC="-I$TOP/runtime/core -I$TOP/runtime/cpu"
SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
SRC="$TOP/tests/unit/test_kernels.c $(ls "$TOP"/runtime/cpu/*.c | grep -v /net.c$) $TOP/runtime/core/ops_common.c $TOP/runtime/core/rt_error.c $TOP/runtime/core/init.c"
# shellcheck disable=SC2086
if ! cc $CFLAGS $SAN $INC -o "$BIN" $SRC -lpthread -lm 2>"$OUT/test_kernels.log"; then
    # shellcheck disable=SC2086
    if ! cc $CFLAGS $INC -o "$BIN" $SRC -lpthread -lm 2>>"$OUT/test_kernels.log"; then
        echo "1..1"; echo "not ok 1 - test_kernels compiles"; sed 's/^/# /' "$OUT/test_kernels.log"; exit 1
    fi
fi
# The arena test asks for an impossible size: ASan must return NULL, not abort.
ASAN_OPTIONS=${ASAN_OPTIONS:-allocator_may_return_null=1:detect_leaks=1}
export ASAN_OPTIONS

"$BIN" >"$OUT/test_kernels.tap"
st=$?
grep -v '^1\.\.' "$OUT/test_kernels.tap"
n=$(grep -c '^\(not \)\{0,1\}ok ' "$OUT/test_kernels.tap")
fail=0
[ "$st" = 0 ] || fail=1

# ok COND NAME: one more TAP line after the program's
ok() {
    n=$((n + 1))
    if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fail=1; fi
}

flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
has() { # has FLAG...: this CPU has every one
    for f; do case $flags in *" $f "*) ;; *) return 1 ;; esac; done
}
# GEMM kernels with the cpuinfo flags each needs
gemm_kernels="portable"
has avx2 fma && gemm_kernels="$gemm_kernels avx2"
has avx512f && gemm_kernels="$gemm_kernels avx512"
echo "# GEMM kernels this CPU runs:$(echo " $gemm_kernels" | sed 's/ /, /g; s/^,//')"

ref=$("$BIN" digest 2>&1)
ok $? "test_kernels digest runs ($ref)"
ref=${ref%% *}
# under VAR=VALUE: the whole program and its digest with that setting
under() {
    env "$1" "$BIN" >"$OUT/test_kernels.${1#*=}.tap" 2>&1
    st=$?
    ok $st "the kernel tests pass with $1"
    [ $st = 0 ] || grep '^not ok' "$OUT/test_kernels.${1#*=}.tap" | sed 's/^/# /'
    got=$(env "$1" "$BIN" digest 2>&1)
    ok $([ "${got%% *}" = "$ref" ]; echo $?) "$1 gives the same bytes ($got)"
}
for k in $gemm_kernels; do under "PIPE_CPU_GEMM=$k"; done
echo "1..$n"
exit $fail
