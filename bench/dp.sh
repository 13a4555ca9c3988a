#!/bin/sh
# bench/dp.sh — the data-parallel replicas' gradient reduction, in two parts.
#
# 1. Against raw TCP on the same loopback path, in one go on the same cores:
# the quickstart MLP (examples/mlp.pipe, 1 stage, checkpoint never) as 2
# replicas (`piperun --dp 2`, --threads 1 each, PIPE_DP_BUCKET_BYTES=0: the
# whole reduction in one bucket after the backward, so its time is the
# reduction's alone), whose stage reports the reduction's bytes sent per step
# and its time per step (median over steps 2..N: the reduce-scatter, the sums
# and the all-gather), against bench/tcp_pair.c: two processes sending each
# other one shard's bytes at once over plain sockets. Prints both rates (MiB/s
# one process sends) and the ratio, then the verdict against the target
# (>= 80 %).
#
# 2. The overlap: the step time with the early buckets (PIPE_DP_BUCKET_BYTES=
# 1048576, the size the runtime takes when the host has a core to spare: a
# layer's gradients are summed over the replicas while the rest of the
# backward runs) against PIPE_DP_BUCKET_BYTES=0 (the default where no core is
# spare, as with 2 single-threaded replicas on 2 cores), in interleaved
# rounds, for mlp on 1 stage and on 2 stages ([layer0] [layer1 layer2]) and
# gpt_char on 1 stage (checkpoint never), each x 2 replicas: the median step
# (replica 0's last stage, steps BENCH_WARMUP+1..N) of each round, and each
# stage's time from the end of its backward to every gradient summed (the
# runtime's "after the backward the step waited" line, median over the steps);
# prints the median over the rounds and the spread (min..max).
#
# Knobs: BENCH_STEPS (30; part 2 runs 2x as many for mlp), BENCH_WARMUP (3),
# BENCH_REPEAT (3) rounds (part 1: the best of each), BENCH_CPUS (0,1),
# BENCH_DIR (build/bench). Exit 0 when everything ran (met or not), 1 when a
# build or run failed.
set -u
TOP=$(cd "$(dirname "$0")/.." && pwd)
STEPS=${BENCH_STEPS:-30}
WARMUP=${BENCH_WARMUP:-3}
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
"$TOP/bench/mlp_stages.sh" 2 "$DIR/mlp-2" || fail "building mlp on 2 stages failed"
bench_gpt_char_1stage "$DIR/gpt_char-dp"
$CC -std=c11 -D_DEFAULT_SOURCE -O2 -Wall -Wextra -Werror -o "$DIR/tcp_pair" "$TOP/bench/tcp_pair.c" -lpthread ||
    fail "building bench/tcp_pair.c failed"

best_red=0 best_raw=0 bytes=0
for round in $(seq 1 "$REPEAT"); do
    log=$DIR/logs/dp-r$round.log
    # shellcheck disable=SC2086 # PIN and TMO are command prefixes
    PIPE_DP_BUCKET_BYTES=0 $TMO $PIN "$TOP/build/piperun" --dp 2 "$DIR/mlp-1/bin" -- --steps "$STEPS" --threads 1 >"$log" 2>&1 ||
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

# ---- 2. the step with early buckets of 1 MiB and without (PIPE_DP_BUCKET_BYTES=0)
echo "step time, 2 replicas, --threads 1 each, $REPEAT interleaved rounds: median (min..max) over the rounds"
for cfg in "mlp 1 stage:mlp-1:512:$((2 * STEPS))" "mlp 2 stages:mlp-2:512:$((2 * STEPS))" \
    "gpt_char 1 stage:gpt_char-dp:32:$STEPS"; do
    name=${cfg%%:*} rest=${cfg#*:}
    dir=${rest%%:*} rest=${rest#*:}
    BATCH=${rest%%:*} n=${rest#*:}
    off="" on="" woff="" won="" early=""
    for round in $(seq 1 "$REPEAT"); do
        for mode in off on; do
            log=$DIR/logs/dp-$dir-$mode-r$round.log
            [ $mode = off ] && bb=0 || bb=1048576
            # shellcheck disable=SC2086 # PIN and TMO are command prefixes
            PIPE_DP_BUCKET_BYTES=$bb $TMO $PIN "$TOP/build/piperun" --dp 2 "$DIR/$dir/bin" -- --steps "$n" --threads 1 \
                >"$log" 2>&1 || { tail -20 "$log" >&2; fail "$name, $mode (round $round) failed; log: $log"; }
            ms=$(median_ms "$log") || fail "no step times in $log"
            # the slowest stage's wait after its backward
            w=$(sed -n 's/.*after the backward the step waited \([0-9.]*\) ms.*/\1/p' "$log" | sort -g | tail -1)
            [ -n "$w" ] || fail "no 'waited' line in $log"
            if [ $mode = off ]; then off="$off $ms" woff="$woff $w"; else on="$on $ms" won="$won $w"
                early=$(sed -n 's/.*after the backward the step waited.*; \([0-9]*\) early bucket.*/\1/p' "$log" |
                    tr '\n' '+' | sed 's/+$//'); fi
        done
    done
    # shellcheck disable=SC2086 # lists of numbers
    echo "$name: step $(bench_stat $off) ms without early buckets, $(bench_stat $on) ms with ($early per stage);" \
        "waited after the backward $(bench_stat $woff) ms vs $(bench_stat $won) ms"
done
