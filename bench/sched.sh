#!/bin/sh
# bench/sched.sh — measured against predicted step time, and the schedules
# against each other: examples/mlp.pipe and examples/gpt_char.pipe cut into 2
# stages, on the same cores (1 OpenBLAS thread per stage).
#
# For each model: a profile run (1f1b, --profile) measures every layer's F, B
# and W time and the message latency; then each schedule (1f1b, zb1 and, where
# the model has 2 chunks per stage, interleaved(2) and zbv) is generated with the same
# splits, run with --trace, and `pipegen trace RUN MODEL --balance PROFILE`
# prints its measured step (mean span of the traced steps) against the step
# the verifier's simulation predicts from the 1f1b profile, and (column
# `self`) against the prediction from that run's own --profile: the first
# also carries how a schedule changes the compute itself (cache, memory
# contention between the stages), the second only the simulation's error. A
# schedule that `pipegen gen` refuses is reported as such and skipped.
#
#   mlp:      [layer0] | [layer1 layer2]           (the second split dropped)
#   gpt_char: [tok pos h0 h1] | [h2 h3 ln_f head]  (the first and third dropped;
#             interleaved(2) and zbv keep all three: chunks h0 | h1 | h2 | h3+head,
#             stage 0 holding chunks 0 and 2, under zbv 0 and 3)
#
# Knobs: BENCH_STEPS (30) steps per timed run, BENCH_CPUS (0,1), BENCH_DIR
# (build/bench/sched). Exit status: 0 when everything ran (a missed target is
# a measurement, not a failure), 1 when a build or run failed.
set -u
TOP=$(cd "$(dirname "$0")/.." && pwd)
STEPS=${BENCH_STEPS:-30}
CPUS=${BENCH_CPUS:-0,1}
DIR=${BENCH_DIR:-$TOP/build/bench/sched}
CC=${CC:-cc}
PG=$TOP/build/pipegen
TARGET=0.10 # |measured / predicted - 1| within 10%

fail() { echo "bench/sched: $*" >&2; exit 1; }
. "$TOP/bench/lib.sh"
case $STEPS in *[!0-9]*|'') fail "BENCH_STEPS must be a number" ;; esac
[ "$STEPS" -ge 4 ] || fail "BENCH_STEPS must be at least 4"
bench_need build/pipegen build/libpgrt_cpu.a build/piperun
PIN=""
if command -v taskset >/dev/null 2>&1 && taskset -c "$CPUS" true 2>/dev/null; then
    PIN="taskset -c $CPUS"
fi
mkdir -p "$DIR" || fail "cannot create $DIR"

# pipe MODEL SCHEDULE KEEP OUT: the example with only the splits numbered in
# KEEP (e.g. "2" or "1 2 3") and the schedule set
pipe() {
    sed -e "s/\([^_]\)schedule = [a-z0-9()]*/\1schedule = $2/" "$TOP/examples/$1.pipe" |
        awk -v keep=" $3 " '/^[[:space:]]*split[[:space:]]*$/ { n++; if (index(keep, " " n " ") == 0) next } { print }' >"$4"
}

# build NAME PIPE: generate and compile into DIR/NAME/bin; 0, 1 failed, 3 refused by pipegen gen
build() {
    d=$DIR/$1
    rm -rf "$d/gen" "$d/bin"
    mkdir -p "$d/bin"
    if ! "$PG" gen "$2" -o "$d/gen" >"$d/gen.log" 2>&1; then
        return 3
    fi
    bench_cc_stages "$d/gen" "$d/bin" 2>>"$d/gen.log"
}

# run NAME OPTIONS...: train on 2 stages, 1 thread each
run() {
    n=$1
    shift
    OPENBLAS_NUM_THREADS=1 $PIN "$TOP/build/piperun" "$DIR/$n/bin" -- --threads 1 --log-every 1000 "$@" \
        >"$DIR/$n/run.log" 2>&1 || { tail -20 "$DIR/$n/run.log" >&2; fail "$n: the run failed (log $DIR/$n/run.log)"; }
}

echo "# bench/sched: measured (mean span of the traced steps, --trace) against predicted (the schedule's"
echo "# simulation with the layer and message times of one 1f1b --profile run) on 2 stages, 1 thread each,"
echo "# cores $CPUS, $STEPS steps per run (the last 10 traced)"
printf "%-10s %-15s %12s %12s %9s %9s %9s  %s\n" model schedule measured_ms predicted_ms ratio self vs_1f1b bubble_measured/predicted
for model in mlp gpt_char; do
    case $model in
        mlp) keep="1"; ikeep="" ;;
        gpt_char) keep="2"; ikeep="1 2 3" ;;
    esac
    pipe "$model" 1f1b "$keep" "$DIR/$model-1f1b.pipe"
    build "$model-prof" "$DIR/$model-1f1b.pipe" || fail "$model: building the profile run failed (see $DIR/$model-prof/gen.log)"
    run "$model-prof" --steps "$STEPS" --profile "$DIR/$model.profile.json"
    base=""
    for sched in 1f1b zb1 "interleaved(2)" zbv; do
        name=$model-$(echo "$sched" | tr -d '()')
        k=$keep
        if [ "$sched" = "interleaved(2)" ] || [ "$sched" = zbv ]; then
            if [ -z "$ikeep" ]; then
                printf "%-10s %-15s %s\n" "$model" "$sched" "(skipped: 3 linear layers cannot make 2 chunks per stage)"
                continue
            fi
            k=$ikeep
        fi
        pipe "$model" "$sched" "$k" "$DIR/$name.pipe"
        build "$name" "$DIR/$name.pipe"
        st=$?
        if [ $st = 3 ]; then
            printf "%-10s %-15s %s\n" "$model" "$sched" "(pipegen gen refused it: $(grep -m1 error "$DIR/$name/gen.log" | cut -c1-100))"
            continue
        fi
        [ $st = 0 ] || fail "$name: the build failed (see $DIR/$name/gen.log)"
        run "$name" --steps "$STEPS" --trace "$DIR/$name.trace.json" --profile "$DIR/$name.self.json"
        # a layer profile from other splits (interleaved) is still per layer: --balance applies
        "$PG" trace "$DIR/$name.trace.json" "$DIR/$name.pipe" --balance "$DIR/$model.profile.json" \
            --svg "$DIR/$name.svg" >"$DIR/$name.pred" 2>"$DIR/$name.pred.err" ||
            { cat "$DIR/$name.pred.err" >&2; fail "$name: pipegen trace failed"; }
        # the same run predicted from its own profile: what is left is the simulation's error
        "$PG" trace "$DIR/$name.trace.json" "$DIR/$name.pipe" --balance "$DIR/$name.self.json" \
            >"$DIR/$name.self.pred" 2>>"$DIR/$name.pred.err" ||
            { cat "$DIR/$name.pred.err" >&2; fail "$name: pipegen trace (own profile) failed"; }
        awk -v model="$model" -v sched="$sched" -v base="$base" '
            function ms(v, u) { return v * (u == "s" ? 1000 : u == "us" ? 0.001 : 1) }
            FNR == 1 { f++ }
            /^measured step/ {
                if (f == 1) m = ms($3, $4)
                for (i = 1; i <= NF; i++) if ($i == "predicted") { if (f == 1) p = ms($(i + 1), $(i + 2)); else q = ms($(i + 1), $(i + 2)) }
            }
            f == 1 && /^stage [0-9]+: bubble measured/ { b = b sprintf("%s%s/%s", b == "" ? "" : " ", $5, $7) }
            END {
                gsub(/[,%]/, "", b)
                printf "%-10s %-15s %12.2f %12.2f %9.3f %9.3f %9s  %s\n", model, sched, m, p, m / p, (q > 0 ? m / q : 0),
                       base == "" ? "1.000" : sprintf("%.3f", m / base), b
                print m > "/dev/stderr"
            }' "$DIR/$name.pred" "$DIR/$name.self.pred" 2>"$DIR/$name.ms"
        [ -n "$base" ] || base=$(cat "$DIR/$name.ms")
    done
done
echo "(ratio: measured / predicted step; target within 10%: |ratio - 1| <= $TARGET; self: measured / predicted from"
echo " the same run's own --profile (the simulation's error alone, without the 1f1b profile's); vs_1f1b: measured step / 1f1b's;"
echo " bubble: per stage, measured/predicted %; timelines: $DIR/*.svg, traces: $DIR/*.trace.json)"
