#!/bin/sh
# bench/sched.sh — the schedules against 1f1b, and measured against predicted,
# built to hold on a shared, loaded machine.
#
# For each model (examples/mlp.pipe, examples/gpt_char.pipe; checkpoint never)
# and stage count P (2 and 4), every schedule that builds (1f1b, zb1,
# interleaved(2), zbv) is generated with fixed split points (the table in
# `splits` below: layer statements of the example, mlp's `linear relu` lines
# taken apart; the splits pipegen's own balance picks where they fall between
# statements, so that `pipegen trace` and `plan --balance` predict the very
# split that ran) and compiled once; then BENCH_REPEAT rounds (at least 5), each
# running every schedule once, 1f1b first and the others in turn, the order
# reversed every other round (1f1b zb1 zbv ..., then ... zbv zb1 1f1b), every
# run pinned to the same cores with one thread per stage. Each run: its step is
# the median of the loss stage's step times after BENCH_WARMUP steps; its
# --trace and --profile give `pipegen trace`'s measured step (the traced steps'
# mean span) against the step the simulation predicts from that run's own
# profile (the simulation's error alone), and pipegen trace's replay of the
# traced steps splits that error: the simulation run with each step's own
# measured action times (its order, waits and messages), with their means (the
# steps' variation), and the prediction (what per-chunk means miss);
# `pipegen plan --balance` with the round's 1f1b profile (without its stages'
# own send costs, which are the schedule's) predicts every schedule's step
# from the same layer times (the theory: what a schedule gains over 1f1b).
#
# Per schedule and round the ratio to that round's 1f1b run (paired, so load
# that drifts between rounds cancels); printed: the median ratio, its
# interquartile range and its whole range over the rounds, and the predicted
# ratio. Targets (issue 28): a schedule's measured gain at least half the
# predicted gain, and the measured step within 5 % of the predicted one. A
# verdict is given only from 5 rounds or more and when they agree: MET when the interquartile range
# lies on the right side of the target, NOT MET when it lies on the wrong side,
# UNDECIDED (the spread is wider than the effect) otherwise. The machine's load
# before and after, the CPU time stolen by the hypervisor meanwhile and 1f1b's
# own spread over the rounds (the noise floor) are printed; with more stage
# processes than cores every stage shares a core, which the simulation does not
# model: such rows are measured but judged "n/a (oversubscribed)".
#
# Knobs: BENCH_STEPS (30), BENCH_WARMUP (5), BENCH_REPEAT (5), BENCH_CPUS (0,1),
# BENCH_MODELS ("mlp gpt_char"), BENCH_STAGES ("2 4"), BENCH_SCHEDULES ("zb1
# interleaved(2) zbv"), BENCH_DIR (build/bench/sched; each run's log, trace and
# profile there, raw numbers in results.txt). Exit status: 0 when everything
# ran (a missed target is a measurement, not a failure), 1 when a build or run
# failed.
set -u
TOP=$(cd "$(dirname "$0")/.." && pwd)
STEPS=${BENCH_STEPS:-30}
WARMUP=${BENCH_WARMUP:-5}
REPEAT=${BENCH_REPEAT:-5}
CPUS=${BENCH_CPUS:-0,1}
MODELS=${BENCH_MODELS:-mlp gpt_char}
STAGES=${BENCH_STAGES:-2 4}
SCHEDULES=${BENCH_SCHEDULES:-zb1 interleaved(2) zbv}
DIR=${BENCH_DIR:-$TOP/build/bench/sched}
CC=${CC:-cc}
PG=$TOP/build/pipegen
RES=$DIR/results.txt

fail() { echo "bench/sched: $*" >&2; exit 1; }
. "$TOP/bench/lib.sh"
bench_check_knobs
[ "$REPEAT" -ge 5 ] || echo "# note: BENCH_REPEAT=$REPEAT: fewer than 5 rounds give no verdicts (n/a)"
bench_need build/pipegen build/libpgrt_cpu.a build/piperun
bench_pin
mkdir -p "$DIR" || fail "cannot create $DIR"
: >"$RES"
NCPU=$($PIN nproc 2>/dev/null || nproc)

# splits MODEL P CHUNKS_PER_STAGE: after which layer statements of the example
# the splits go (numbered from 1 at top level; mlp's `layerK = linear(...)
# relu` lines count as two), or nothing when there is no such split
splits() {
    case $1-$2-$3 in
        mlp-2-1) echo 2 ;;               # [layer0 relu] [layer1 relu layer2 relu]
        mlp-2-2i) echo 2 3 5 ;;          # interleaved: stage 0 runs layer0 and layer2, stage 1 layer1
        mlp-2-2v) echo 2 3 4 ;;          # zbv (V): stage 0 runs layer0 and layer2, stage 1 layer1
        mlp-4-1) echo 2 3 4 ;;           # [layer0 relu] [layer1] [relu] [layer2 relu]
        gpt_char-2-1) echo 4 ;;          # [tok pos h0 h1] [h2 h3 ln_f head]
        gpt_char-2-2*) echo 3 4 5 ;;     # [tok pos h0] [h1] [h2] [h3 ln_f head]
        gpt_char-4-1) echo 3 4 5 ;;
        *) ;;                            # gpt_char on 4 stages x 2 chunks: 8 chunks only inside blocks
    esac
}

# variant MODEL P SCHEDULE OUT: the example with the splits of `splits`, the
# schedule set, no recompute; 1 when the model has no such split
variant() {
    v_c=1
    case $3 in interleaved*) v_c=2i ;; zbv) v_c=2v ;; esac
    v_at=$(splits "$1" "$2" "$v_c")
    [ -n "$v_at" ] || return 1
    sed -e '/^[[:space:]]*split[[:space:]]*$/d' -e 's/^\(layer[0-9]* = linear([^)]*)\)[[:space:]]*relu[[:space:]]*$/\1\
relu/' -e "s/\([^_]\)schedule = [a-z0-9()]*/\1schedule = $3/" -e 's/checkpoint = [a-z_]*/checkpoint = never/' \
        "$TOP/examples/$1.pipe" |
        awk -v at=" $v_at " '
            { line = $0; sub(/#.*/, "", line) }
            line ~ /\{/ { depth++ }
            { print }
            line ~ /\}/ { depth--; next }
            depth == 0 && line ~ /^[a-z_][a-z_0-9]* *= *[a-z_]/ || depth == 0 && line ~ /^relu *$/ {
                if (index(at, " " ++n " ")) print "split"
            }' >"$4"
}

# build NAME PIPE: generate and compile into DIR/NAME/bin; 0, 1 failed, 3 refused by pipegen
build() {
    b_d=$DIR/$1
    rm -rf "${b_d:?}/gen" "${b_d:?}/bin"
    mkdir -p "$b_d/bin"
    "$PG" gen "$2" -o "$b_d/gen" >"$b_d/gen.log" 2>&1 || return 3
    bench_cc_stages "$b_d/gen" "$b_d/bin" 2>>"$b_d/gen.log"
}

# steal: the CPU time stolen by the hypervisor so far, and all CPU time (/proc/stat, ticks)
steal() { awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print $9, t; exit }' /proc/stat 2>/dev/null || echo "0 0"; }

# one NAME ROUND: one run of variant NAME, pinned, traced and profiled; appends
# "NAME ROUND step_ms measured_ms predicted_own_ms replayed_ms replayed_means_ms"
# to RES (pipegen trace's replay of each traced step with its own measured
# action times, and of their means; 0 when not printed)
one() {
    o_n=$1 o_r=$2 o_d=$DIR/$1
    o_log=$o_d/run$o_r.log o_tr=$o_d/run$o_r.trace.json o_pr=$o_d/run$o_r.profile.json
    if ! OPENBLAS_NUM_THREADS=1 $TMO $PIN "$TOP/build/piperun" "$o_d/bin" -- --steps "$STEPS" --threads 1 \
            --log-every 1 --trace-steps 10 --trace "$o_tr" --profile "$o_pr" >"$o_log" 2>&1; then
        tail -20 "$o_log" >&2
        fail "$o_n (round $o_r) failed; log: $o_log"
    fi
    o_ms=$(median_ms "$o_log") || fail "$o_n (round $o_r): no step lines in $o_log"
    "$PG" trace "$o_tr" "$o_d/$o_n.pipe" --balance "$o_pr" >"$o_d/run$o_r.pred" 2>&1 ||
        fail "$o_n (round $o_r): pipegen trace failed (see $o_d/run$o_r.pred)"
    o_mp=$(awk 'function ms(v, u) { sub(/,$/, "", u); return v * (u == "s" ? 1000 : u == "us" ? 0.001 : 1) }
        /^measured step/ { m = ms($3, $4); for (i = 1; i <= NF; i++) if ($i == "predicted") p = ms($(i + 1), $(i + 2)) }
        /^replayed / { for (i = 1; i <= NF; i++) { if ($i == "predicted):") r = ms($(i + 1), $(i + 2)); if ($i == "instead:") a = ms($(i + 1), $(i + 2)) } }
        END { if (m > 0 && p > 0) printf "%.4f %.4f %.4f %.4f\n", m, p, r, a; else exit 1 }' "$o_d/run$o_r.pred") ||
        fail "$o_n (round $o_r): no measured and predicted step in $o_d/run$o_r.pred"
    echo "$o_n $o_r $o_ms $o_mp" >>"$RES"
}

# predict NAME ROUND BASE: NAME's step predicted with BASE's profile of that round (ms), into RES as
# "NAME ROUND theory ms"
predict() {
    # the base's profile without its stages' own send costs (send_s): which
    # stage's sends wake a waiting receiver, and so cost more, is the
    # schedule's own; the fit over every send stands for all
    sed 's/, "send_s": [-0-9.e+]*//' "$DIR/$3/run$2.profile.json" >"$DIR/$1/theory$2.profile.json" ||
        fail "cannot write $DIR/$1/theory$2.profile.json"
    p_out=$("$PG" plan "$DIR/$1/$1.pipe" --balance "$DIR/$1/theory$2.profile.json" 2>&1) ||
        fail "$1: pipegen plan --balance failed: $(echo "$p_out" | head -3)"
    p_ms=$(echo "$p_out" | awk 'function ms(v, u) { sub(/,$/, "", u); return v * (u == "s" ? 1000 : u == "us" ? 0.001 : 1) }
        /^predicted step/ { for (i = 1; i <= NF; i++) if ($i ~ /\):$/) { print ms($(i + 1), $(i + 2)); exit } }')
    [ -n "$p_ms" ] || fail "$1: no predicted step in pipegen plan's output"
    echo "$1 $2 theory $p_ms" >>"$RES"
}

echo "# bench/sched: each schedule against 1f1b on the same build, $REPEAT rounds, the order reversed every other"
echo "# round; $STEPS steps per run (median of the steps after $WARMUP), 1 thread per stage, cores $CPUS ($NCPU)"
bench_load_before "4-stage runs share cores, "
st0=$(steal)
t_start=$(date +%s)
for model in $MODELS; do
    # shellcheck disable=SC2034 # lib.sh's median_ms reads it
    BATCH=$(sed -n 's/.*batch = \([0-9]*\).*/\1/p' "$TOP/examples/$model.pipe" | head -1)
    for P in $STAGES; do
        names=""
        for sched in 1f1b $SCHEDULES; do
            name=$model-$P-$(echo "$sched" | tr -d '()')
            mkdir -p "$DIR/$name"
            if ! variant "$model" "$P" "$sched" "$DIR/$name/$name.pipe"; then
                echo "$model $P $sched: not measured (no split at the example's layer statements makes $((2 * P)) chunks)" \
                    >>"$DIR/refused.txt"
                continue
            fi
            build "$name" "$DIR/$name/$name.pipe"
            case $? in
                0) names="$names $name" ;;
                3) echo "$model $P $sched refused by pipegen gen: $(grep -m1 error "$DIR/$name/gen.log" | sed 's/^[^ ]* //' | cut -c1-110)" \
                       >>"$DIR/refused.txt"
                   [ "$sched" = 1f1b ] && fail "$name: 1f1b, the anchor, does not build (see $DIR/$name/gen.log)" ;;
                *) fail "$name: the build failed (see $DIR/$name/gen.log)" ;;
            esac
        done
        r=1
        while [ "$r" -le "$REPEAT" ]; do
            order=$names
            [ $((r % 2)) = 0 ] && order=$(echo "$names" | tr ' ' '\n' | sed '/^$/d' | tac | tr '\n' ' ')
            for name in $order; do
                one "$name" "$r"
            done
            for name in $names; do
                predict "$name" "$r" "$model-$P-1f1b"
            done
            echo "$model $P round $r load $(cut -d' ' -f1 /proc/loadavg)" >>"$RES"
            r=$((r + 1))
        done
    done
done
st1=$(steal)
echo "# bench time $(( $(date +%s) - t_start )) s"
bench_load_after
echo "$st0 $st1" | awk '{ d = $4 - $2; printf "# CPU time stolen by the hypervisor meanwhile: %.1f%%\n", (d > 0) ? 100 * ($3 - $1) / d : 0 }'
[ -f "$DIR/refused.txt" ] && sed 's/^/# /' "$DIR/refused.txt" && rm -f "$DIR/refused.txt"

# the tables: per (model, P, schedule) over the rounds
awk -v ncpu="$NCPU" '
    function sort(a, n,   i, j, x) { for (i = 1; i < n; i++) { x = a[i]; for (j = i - 1; j >= 0 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x } }
    function q(a, n, f,   p, i) { p = f * (n - 1); i = int(p); return i + 1 < n ? a[i] + (p - i) * (a[i + 1] - a[i]) : a[i] }
    # verdict: the interquartile range [lo, hi] against a target (want "le": hi <= t; "in": inside [t, t2])
    function verdict(lo, hi, t, kind, t2) {
        if (kind == "le") return hi <= t ? "MET" : lo > t ? "NOT MET" : "UNDECIDED"
        return (lo >= t && hi <= t2) ? "MET" : (hi < t || lo > t2) ? "NOT MET" : "UNDECIDED"
    }
    $3 == "theory" { th[$1, $2] = $4; next }
    $3 == "round" { next }
    { n = $1; split(n, p, "-"); key = n; ms[n, $2] = $3; meas[n, $2] = $4; pred[n, $2] = $5; rep[n, $2] = $6; repm[n, $2] = $7
      if (!(n in seen)) { seen[n] = 1; order[no++] = n }; if ($2 > R) R = $2 }
    END {
        printf "%-9s %2s %-15s %9s  %-36s %9s %9s  %s\n", "model", "P", "schedule", "step_ms", "vs 1f1b: median (iqr; min..max)", "predicted", "target", "verdict (gain >= half the predicted)"
        for (k = 0; k < no; k++) {
            n = order[k]; split(n, p, "-"); base = p[1] "-" p[2] "-1f1b"; P = p[2] + 0
            m = 0; for (r = 1; r <= R; r++) if ((n, r) in ms) { v[m] = ms[n, r]; m++ }; sort(v, m); med = q(v, m, 0.5)
            m = 0; for (r = 1; r <= R; r++) if ((n, r) in ms && (base, r) in ms) { x[m] = ms[n, r] / ms[base, r]; m++ }; sort(x, m)
            m2 = 0; for (r = 1; r <= R; r++) if ((n, r) in th && (base, r) in th) { y[m2] = th[n, r] / th[base, r]; m2++ }; sort(y, m2)
            tp = q(y, m2, 0.5); target = 1 - (1 - tp) / 2
            over = P > ncpu
            if (n == base) {
                spread = 100 * (x[m - 1] - x[0])
                for (r = 1; r <= R; r++) z[r - 1] = ms[n, r]; sort(z, R)
                printf "%-9s %2d %-15s %9.2f  %-36s %9s %9s  %s\n", p[1], P, "1f1b", med, sprintf("(anchor; its own rounds %.2f..%.2f ms: %.0f%%)", z[0], z[R - 1], 100 * (z[R - 1] / z[0] - 1)), "", "", over ? "n/a (oversubscribed: " P " stages on " ncpu " cores)" : ""
                continue
            }
            sched = substr(n, length(p[1] "-" p[2] "-") + 1)
            if (sched == "interleaved2") sched = "interleaved(2)"
            vd = over ? "n/a (oversubscribed: " P " stages on " ncpu " cores)" : tp >= 1 ? "n/a (no gain predicted)" : m < 5 ? "n/a (" m " rounds: a verdict needs 5)" : verdict(q(x, m, 0.25), q(x, m, 0.75), target, "le")
            printf "%-9s %2d %-15s %9.2f  %-36s %9.3f %9.3f  %s\n", p[1], P, sched, med, sprintf("%.3f (%.3f..%.3f; %.3f..%.3f)", q(x, m, 0.5), q(x, m, 0.25), q(x, m, 0.75), x[0], x[m - 1]), tp, target, vd
        }
        printf "\n%-9s %2s %-15s %12s %12s  %-42s  %-22s  %s\n", "model", "P", "schedule", "measured_ms", "predicted_ms", "measured/predicted: median (iqr; min..max)", "verdict (within 5%)", "meas/replayed  variation  means/predicted"
        for (k = 0; k < no; k++) {
            n = order[k]; split(n, p, "-"); P = p[2] + 0
            sched = substr(n, length(p[1] "-" p[2] "-") + 1); if (sched == "interleaved2") sched = "interleaved(2)"
            m = 0; for (r = 1; r <= R; r++) if ((n, r) in meas) { x[m] = meas[n, r] / pred[n, r]; a[m] = meas[n, r]; b[m] = pred[n, r]; m++ }
            sort(x, m); sort(a, m); sort(b, m)
            m3 = 0; for (r = 1; r <= R; r++) if ((n, r) in rep && rep[n, r] > 0 && repm[n, r] > 0) { u[m3] = meas[n, r] / rep[n, r]; w[m3] = rep[n, r] / repm[n, r]; z3[m3] = repm[n, r] / pred[n, r]; m3++ }
            sort(u, m3); sort(w, m3); sort(z3, m3)
            expl = m3 ? sprintf("%5.3f %10.3f %10.3f", q(u, m3, 0.5), q(w, m3, 0.5), q(z3, m3, 0.5)) : "(no replay)"
            vd = P > ncpu ? "n/a (oversubscribed)" : m < 5 ? "n/a (" m " rounds: a verdict needs 5)" : verdict(q(x, m, 0.25), q(x, m, 0.75), 0.95, "in", 1.05)
            printf "%-9s %2d %-15s %12.2f %12.2f  %-42s  %-22s  %s\n", p[1], P, sched, q(a, m, 0.5), q(b, m, 0.5), sprintf("%.3f (%.3f..%.3f; %.3f..%.3f)", q(x, m, 0.5), q(x, m, 0.25), q(x, m, 0.75), x[0], x[m - 1]), vd, expl
        }
    }' "$RES"
echo "(vs 1f1b: each round's step over the same round's 1f1b step (< 1: faster); predicted: the same ratio from the"
echo " round's 1f1b profile; target: 1 - half the predicted gain; verdicts only where the rounds' interquartile range"
echo " lies on one side of the target, else UNDECIDED: the spread is wider than the effect. measured/predicted: the"
echo " traced steps' mean span over the step the simulation predicts from the same run's --profile; medians of its"
echo " parts (pipegen trace's replay): meas/replayed, the simulation run with each traced step's own measured action"
echo " times (near 1: its order, waits and messages are the run's); variation, that over the same with each action's"
echo " mean over the steps (what the steps' variation costs: no mean-based prediction shows it); means/predicted, what"
echo " per-chunk and per-stage means miss of the actions' own means. Runs, traces and profiles: $DIR)"
