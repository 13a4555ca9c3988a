#!/bin/sh
# bench/dp.sh — the data-parallel replicas' gradient reduction against raw TCP
# on the same loopback path, in one go on the same cores: the quickstart MLP
# (examples/mlp.pipe, 1 stage, checkpoint never) as 2 replicas (`piperun --dp 2`,
# --threads 1 each), whose stage reports the reduction's bytes sent per step
# and its time per step (median over steps 2..N: the reduce-scatter, the
# sums and the all-gather), against bench/tcp_pair.c: two processes sending
# each other one shard's bytes at once over plain sockets. Prints both rates
# (MiB/s one process sends) and the ratio, then the verdict against the
# target (>= 80 %).
#
# Knobs: BENCH_STEPS (30), BENCH_REPEAT (3) rounds (best of each), BENCH_CPUS
# (0,1), BENCH_DIR (build/bench). Exit 0 when everything ran (met or not), 1
# when a build or run failed.
set -u
TOP=$(cd "$(dirname "$0")/.." && pwd)
STEPS=${BENCH_STEPS:-30}
WARMUP=0
REPEAT=${BENCH_REPEAT:-3}
CPUS=${BENCH_CPUS:-0,1}
DIR=${BENCH_DIR:-$TOP/build/bench}
CC=${CC:-cc}
TARGET=0.80

fail() { echo "bench/dp: $*" >&2; exit 1; }
. "$TOP/bench/lib.sh"
bench_check_knobs
bench_need build/pipegen build/libpgrt_cpu.a build/piperun
bench_pin
mkdir -p "$DIR/logs" || fail "cannot create $DIR"
"$TOP/bench/mlp_stages.sh" 1 "$DIR/mlp-1" || fail "building mlp on 1 stage failed"
$CC -std=c11 -D_DEFAULT_SOURCE -O2 -Wall -Wextra -Werror -o "$DIR/tcp_pair" "$TOP/bench/tcp_pair.c" -lpthread ||
    fail "building bench/tcp_pair.c failed"

best_red=0 best_raw=0 bytes=0
for round in $(seq 1 "$REPEAT"); do
    log=$DIR/logs/dp-r$round.log
    # shellcheck disable=SC2086 # PIN and TMO are command prefixes
    $TMO $PIN "$TOP/build/piperun" --dp 2 "$DIR/mlp-1/bin" -- --steps "$STEPS" --threads 1 >"$log" 2>&1 ||
        { tail -20 "$log" >&2; fail "piperun --dp 2 (round $round) failed; log: $log"; }
    # "gradient reduction over 2 replicas: B bytes sent per step in T ms (X MiB/s, ...)"
    line=$(grep 'gradient reduction over' "$log" | head -1)
    bytes=$(echo "$line" | sed -n 's/.*: \([0-9]*\) bytes sent per step.*/\1/p')
    red=$(echo "$line" | sed -n 's/.*ms (\([0-9.]*\) MiB\/s.*/\1/p')
    [ -n "$bytes" ] && [ -n "$red" ] || fail "no reduction figure in $log"
    # one phase of the reduction sends half of that (one shard each way)
    # shellcheck disable=SC2086
    raw=$($TMO $PIN "$DIR/tcp_pair" $((bytes / 2)) 21 | sed -n 's/.*: \([0-9.]*\) MiB\/s/\1/p')
    [ -n "$raw" ] || fail "bench/tcp_pair failed"
    echo "round $round: reduction $red MiB/s, raw TCP $raw MiB/s ($((bytes / 2)) bytes each way)"
    best_red=$(awk -v a="$best_red" -v b="$red" 'BEGIN { print (b > a) ? b : a }')
    best_raw=$(awk -v a="$best_raw" -v b="$raw" 'BEGIN { print (b > a) ? b : a }')
done
awk -v r="$best_red" -v t="$best_raw" -v g="$TARGET" -v b="$bytes" 'BEGIN {
    printf "gradient reduction (mlp, 2 replicas, %d bytes sent per step): %.1f MiB/s; raw TCP on loopback: %.1f MiB/s: %.0f%%\n", b, r, t, 100 * r / t
    printf "target >= %.0f%% of raw TCP: %s\n", 100 * g, (r / t >= g) ? "MET" : "NOT MET"
}'
