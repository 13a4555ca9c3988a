#!/bin/sh
# bench/gemm.sh — what the CPU runtime's fixed accumulation order costs: its
# GEMM (runtime/cpu/gemm.c) against OpenBLAS's cblas_sgemm, the anchor measured
# in the same run, at the products of the examples' layers, with 1 and 2
# threads, pinned to the benchmark's cores (bench/gemm_vs_openblas.c). A
# ratio above 1 means ours is faster. Part of `make bench` (bench/run.sh).
#
# Knobs: BENCH_REPEAT (5 here: rounds, best kept),
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
echo "# cblas_sgemm at the examples' products, best of $REPEAT rounds (one process per side, alternating), cores $CPUS"
bench_load_before
RES=$DIR/gemm-results.txt
: >"$RES" || fail "cannot write $RES"
r=1
while [ "$r" -le "$REPEAT" ]; do
    for t in 1 2; do
        for side in openblas ours; do
            # shellcheck disable=SC2086 # PIN and TMO are command prefixes
            OPENBLAS_NUM_THREADS=$t $TMO $PIN "$DIR/gemm_vs_openblas" $side $t >"$DIR/gemm-$side-$t.out" ||
                fail "gemm_vs_openblas $side $t failed"
            [ "$r" = 1 ] && grep '^#' "$DIR/gemm-$side-$t.out"
            grep -v '^#' "$DIR/gemm-$side-$t.out" | sed "s/^/$t|$side|/" >>"$RES"
        done
    done
    r=$((r + 1))
done
bench_load_after
awk -F'|' '
    { k = $1 "|" $3 "|" $4; if (!(k in seen)) { seen[k] = 1; order[++n] = k }
      if ($5 + 0 > best[k "|" $2]) best[k "|" $2] = $5 + 0 }
    END {
        t = ""
        for (i = 1; i <= n; i++) {
            split(order[i], f, "|")
            if (f[1] != t) {
                t = f[1]
                printf "%s thread(s)\n%-22s %16s %10s %10s %8s\n", t, "product", "M N K", "ours GF/s", "OpenBLAS", "ratio"
            }
            o = best[order[i] "|ours"]; b = best[order[i] "|openblas"]
            printf "%-22s %16s %10.1f %10.1f %7.2fx\n", f[2], f[3], o, b, o / b
        }
        print "(ratio: ours / OpenBLAS GFLOP/s; higher is faster)"
    }' "$RES"
