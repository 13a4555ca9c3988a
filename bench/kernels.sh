#!/bin/sh
# bench/kernels.sh — the CPU runtime's elementwise and row kernels alone
# (bench/kernels.c: gelu, silu, sigmoid, tanh, swiglu, the linear bias and
# column sums, layernorm, at gpt_char's micro-batch shapes, one thread, one
# core), this tree's build/libpgrt_cpu.a against another tree's when
# BENCH_BASE names one: the two alternate, base then new, BENCH_REPEAT rounds,
# each the best of 7 batches of 20 calls; per kernel the median and range of
# the rounds in microseconds a call, and the ratio of the medians.
#
# Knobs: BENCH_BASE (a libpgrt_cpu.a, e.g. a checkout of main's build/),
# BENCH_REPEAT (3), BENCH_CPUS (0,1: the first is used), BENCH_CLOCK (wall, or
# cpu: the thread's CPU time, which a loaded machine disturbs less), BENCH_DIR
# (build/bench/kernels). Exit status 0 when it ran, 1 when a build or run failed.
set -u
TOP=$(cd "$(dirname "$0")/.." && pwd)
REPEAT=${BENCH_REPEAT:-3}
CPUS=${BENCH_CPUS:-0,1}
DIR=${BENCH_DIR:-$TOP/build/bench/kernels}
BASE=${BENCH_BASE:-}
CLOCK=${BENCH_CLOCK:-wall}
CC=${CC:-cc}
# shellcheck disable=SC2034 # bench_check_knobs reads them
STEPS=2 WARMUP=1

fail() { echo "bench/kernels: $*" >&2; exit 1; }
. "$TOP/bench/lib.sh"
bench_check_knobs
bench_need build/libpgrt_cpu.a
[ -z "$BASE" ] || [ -f "$BASE" ] || fail "BENCH_BASE: no such library: $BASE"
case $CLOCK in wall) CLOCK_ARG="" ;; cpu) CLOCK_ARG=cpu ;; *) fail "BENCH_CLOCK must be wall or cpu, not '$CLOCK'" ;; esac
CPUS=${CPUS%%,*}
bench_pin
mkdir -p "$DIR" || fail "cannot create $DIR"
build() { # build LIB OUT
    $CC -std=c11 -D_POSIX_C_SOURCE=200809L -O2 -Wall -Wextra -Werror -I"$TOP/runtime/core" -o "$2" \
        "$TOP/bench/kernels.c" "$1" -lpthread -lm || fail "building bench/kernels.c against $1 failed"
}
build "$TOP/build/libpgrt_cpu.a" "$DIR/new"
sides="new"
[ -z "$BASE" ] || { build "$BASE" "$DIR/base" && sides="base new"; }

echo "# bench/kernels: one thread on core $CPUS, $REPEAT rounds (${sides% *} first), us a call ($CLOCK clock), best of 7 x 20 calls"
[ -z "$BASE" ] || echo "# base: $BASE"
bench_load_before
rm -f "$DIR"/*.out
r=1
while [ "$r" -le "$REPEAT" ]; do
    for s in $sides; do
        # shellcheck disable=SC2086 # PIN and TMO are command prefixes
        $TMO $PIN "$DIR/$s" 7 $CLOCK_ARG >>"$DIR/$s.out" || fail "the $s run failed"
    done
    r=$((r + 1))
done
bench_load_after
# kernel|elements|us lines of every round -> one line a kernel
awk -F'|' -v sides="$sides" '
    function med(a, n,   i, j, t) { for (i = 1; i < n; i++) for (j = i; j > 0 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
        return n % 2 ? a[(n - 1) / 2] : (a[n / 2 - 1] + a[n / 2]) / 2 }
    FNR == 1 { side = FILENAME; sub(/.*\//, "", side); sub(/\.out$/, "", side) }
    { if (!($1 in el)) { order[nk++] = $1; el[$1] = $2 } v[side, $1, cnt[side, $1]++] = $3 }
    END {
        ns = split(sides, S, " ")
        printf "%-18s %9s", "kernel", "elements"
        for (k = 1; k <= ns; k++) printf "  %-24s", S[k] ": median (min..max)"
        if (ns == 2) printf "  new/base"
        printf "\n"
        for (i = 0; i < nk; i++) {
            name = order[i]; printf "%-18s %9d", name, el[name]
            for (k = 1; k <= ns; k++) {
                n = cnt[S[k], name]; lo = 1e30; hi = 0
                for (j = 0; j < n; j++) { a[j] = v[S[k], name, j] + 0; if (a[j] < lo) lo = a[j]; if (a[j] > hi) hi = a[j] }
                m[k] = med(a, n); printf "  %-24s", sprintf("%.1f (%.1f..%.1f)", m[k], lo, hi)
            }
            if (ns == 2) printf "  %.2f", m[2] / m[1]
            printf "\n"
        }
    }' "$DIR/new.out" ${BASE:+"$DIR/base.out"}
