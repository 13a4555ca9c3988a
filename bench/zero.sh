#!/bin/sh
# bench/zero.sh — `--zero 1` (the optimizer state sharded over the replicas,
# ZeRO-1) against the same run without it: the quickstart MLP (SGD with
# momentum, 1 stage) and gpt_char (AdamW, 1 stage, checkpoint never), each as
# 2 replicas (`piperun --dp 2`, --threads 1 each, pinned to BENCH_CPUS), in
# BENCH_REPEAT interleaved rounds of one run without and one with: the median
# step (replica 0's stage, steps BENCH_WARMUP+1..N) of each round, then the
# median over the rounds and the spread (min..max); and the optimizer-state
# bytes per process and the bytes sent per step, from the runtime's end-of-run
# lines. The results are bitwise the same either way (tests/ppdp_zero.t).
#
# Knobs: BENCH_STEPS (30; mlp runs 2x as many), BENCH_WARMUP (3), BENCH_REPEAT
# (5), BENCH_CPUS (0,1), BENCH_DIR (build/bench). Exit 0 when everything ran,
# 1 when a build or run failed.
set -u
TOP=$(cd "$(dirname "$0")/.." && pwd)
STEPS=${BENCH_STEPS:-30}
WARMUP=${BENCH_WARMUP:-3}
REPEAT=${BENCH_REPEAT:-5}
CPUS=${BENCH_CPUS:-0,1}
DIR=${BENCH_DIR:-$TOP/build/bench}
CC=${CC:-cc}

fail() { echo "bench/zero: $*" >&2; exit 1; }
. "$TOP/bench/lib.sh"
bench_check_knobs
bench_need build/pipegen build/libpgrt_cpu.a build/piperun
bench_pin
mkdir -p "$DIR/logs" || fail "cannot create $DIR"
"$TOP/bench/mlp_stages.sh" 1 "$DIR/mlp-1" || fail "building mlp on 1 stage failed"
bench_gpt_char_1stage "$DIR/gpt_char-dp"

echo "step time, 1 stage x 2 replicas, --threads 1 each, $REPEAT interleaved rounds: median (min..max) over the rounds"
for cfg in "mlp:mlp-1:512:$((2 * STEPS))" "gpt_char:gpt_char-dp:32:$STEPS"; do
    name=${cfg%%:*} rest=${cfg#*:}
    dir=${rest%%:*} rest=${rest#*:}
    BATCH=${rest%%:*} n=${rest#*:}
    off="" on="" zline="" sent=""
    for round in $(seq 1 "$REPEAT"); do
        for z in 0 1; do
            log=$DIR/logs/zero-$dir-$z-r$round.log
            # shellcheck disable=SC2086 # PIN and TMO are command prefixes
            $TMO $PIN "$TOP/build/piperun" --dp 2 "$DIR/$dir/bin" -- --steps "$n" --threads 1 --zero $z \
                >"$log" 2>&1 || { tail -20 "$log" >&2; fail "$name, --zero $z (round $round) failed; log: $log"; }
            ms=$(median_ms "$log") || fail "no step times in $log"
            if [ $z = 0 ]; then off="$off $ms"; else on="$on $ms"
                zline=$(sed -n 's/.*--zero 1: \(optimizer state [0-9]* bytes on this process of [0-9]*\).*all-gathered: \([0-9]*\) bytes sent.*/\1; weights sent \2 bytes per step/p' "$log")
                sent=$(sed -n 's/.*gradient reduction over 2 replicas: \([0-9]*\) bytes sent per step.*/\1/p' "$log")
            fi
        done
    done
    # shellcheck disable=SC2086 # lists of numbers
    echo "$name: step $(bench_stat $off) ms without --zero, $(bench_stat $on) ms with; $zline, gradients $sent"
done
