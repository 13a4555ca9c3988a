#!/bin/sh
# bench/gemm.sh — what the CPU runtime's fixed accumulation order costs: its
# GEMM (runtime/cpu/gemm.c) against OpenBLAS's cblas_sgemm, the anchor measured
# in the same run, at the products of the examples' layers, with 1 and 2
# threads, pinned to the benchmark's cores (bench/gemm_vs_openblas.c). A
# ratio above 1 means ours is faster. Part of `make bench` (bench/run.sh).
#
# Knobs: BENCH_REPEAT (5 here: interleaved rounds per product, best kept),
# BENCH_CPUS (0,1), BENCH_DIR (build/bench). Exit status 0 when it ran, 1 when
# the build or a run failed.
set -u
TOP=$(cd "$(dirname "$0")/.." && pwd)
REPEAT=${BENCH_REPEAT:-5}
CPUS=${BENCH_CPUS:-0,1}
DIR=${BENCH_DIR:-$TOP/build/bench}
CC=${CC:-cc}

fail() { echo "bench/gemm: $*" >&2; exit 1; }
. "$TOP/bench/lib.sh"
case $REPEAT in *[!0-9]*|''|0) fail "BENCH_REPEAT must be a number >= 1" ;; esac
bench_need build/libpgrt_cpu.a
bench_pin
mkdir -p "$DIR" || fail "cannot create $DIR"
BLAS_CFLAGS=${BLAS_CFLAGS-$("$TOP/tools/deps.sh" blas-cflags)}
[ "$BLAS_CFLAGS" = none ] && BLAS_CFLAGS=""
# shellcheck disable=SC2086 # BLAS_CFLAGS is a list of flags
$CC -std=c11 -D_POSIX_C_SOURCE=200809L -O2 -Wall -Wextra -Werror -I"$TOP/runtime/core" -I"$TOP/runtime/cpu" \
    $BLAS_CFLAGS -o "$DIR/gemm_vs_openblas" "$TOP/bench/gemm_vs_openblas.c" "$TOP/build/libpgrt_cpu.a" \
    -lopenblas -lpthread -lm || fail "building bench/gemm_vs_openblas.c failed"

echo "# GEMM: runtime/cpu/gemm.c (the same bits for any rows, threads, kernel) against OpenBLAS"
echo "# cblas_sgemm at the examples' products, best of $REPEAT interleaved rounds, cores $CPUS"
bench_load_before
for t in 1 2; do
    # shellcheck disable=SC2086 # PIN and TMO are command prefixes
    OPENBLAS_NUM_THREADS=$t $TMO $PIN "$DIR/gemm_vs_openblas" "$t" "$REPEAT" || fail "gemm_vs_openblas $t failed"
done
bench_load_after
