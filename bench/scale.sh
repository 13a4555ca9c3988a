#!/bin/sh
# bench/scale.sh — pipegen's paths that must stay near-linear, timed against
# their size: the split search of `stages = 4` on a transformer of N blocks
# (`pipegen plan`), the memory planner over M micro-batches (`pipegen plan` of
# examples/mlp.pipe with batch = microbatches = M) and the schedule CSV
# reader on a file of L repeated lines (`pipegen check`, which stops at 50
# errors: the errors shown are printed too). Each size doubles the last; the sizes are run round-robin,
# BENCH_REPEAT (3) rounds, and each time is the median user+system CPU time
# of its rounds (CPU time, not wall: the machine may be shared). Printed per
# path: the times, the spread (max/min over the rounds), each doubling's
# ratio, and the exponent k of time ~ size^k fitted over all sizes (least
# squares on the logs): 1 is linear, 2 quadratic. A measurement, not a test:
# exit 0 whenever everything ran.
#   BENCH_DIR (build/bench) the work folder; BENCH_SCALE_QUICK=1 two small sizes each
set -u
TOP=$(cd "$(dirname "$0")/.." && pwd)
REPEAT=${BENCH_REPEAT:-3}
DIR=${BENCH_DIR:-$TOP/build/bench}/scale
PG=${BENCH_PIPEGEN:-$TOP/build/pipegen}   # BENCH_PIPEGEN: another build to compare
fail() { echo "bench/scale.sh: $*" >&2; exit 1; }
[ -x "$PG" ] || fail "build/pipegen is missing: run \`make all\` first"
case $REPEAT in *[!0-9]*|''|0) fail "BENCH_REPEAT must be a number >= 1" ;; esac
command -v /usr/bin/time >/dev/null 2>&1 || [ -x /usr/bin/time ] || fail "/usr/bin/time is needed (apt-get install time)"
mkdir -p "$DIR" || exit 1
if [ "${BENCH_SCALE_QUICK:-0}" = 1 ]; then
    BLOCKS="250 500" MBS="2500 5000" LINES="50000 100000"
else
    BLOCKS="625 1250 2500 5000" MBS="5000 10000 20000 40000" LINES="75000 150000 300000 600000"
fi

# the inputs of each size
for n in $BLOCKS; do
    sed -e "s/^h0 = transformer(d, heads)/h = repeat $n transformer(d, heads)/" -e '/^split/d' \
        -e '/^h[123] = transformer/d' -e 's/seed = 42/seed = 42  stages = 4/' "$TOP/examples/gpt_char.pipe" >"$DIR/blocks$n.pipe"
done
for n in $MBS; do
    sed -e "s/batch = 512  microbatches = 8/batch = $n  microbatches = $n/" "$TOP/examples/mlp.pipe" >"$DIR/mb$n.pipe"
done
grep -q "batch = $(echo "$MBS" | cut -d' ' -f1)" "$DIR/mb$(echo "$MBS" | cut -d' ' -f1).pipe" ||
    fail "examples/mlp.pipe no longer has 'batch = 512  microbatches = 8': update bench/scale.sh"
cat >"$DIR/csv0.pipe" <<'EOF'
model csvscale
input  x : f32[8]
target y : f32[8]
train {
  batch = 8  microbatches = 4
  loss = mse(sum)  optimizer = sgd(lr = 1e-3)
}
l0 = linear(8 -> 8)
split
l1 = linear(8 -> 8)
EOF
"$PG" schedule "$DIR/csv0.pipe" --csv >"$DIR/one.csv" || fail "pipegen schedule --csv failed"
for n in $LINES; do
    { head -1 "$DIR/one.csv"; yes "$(sed -n 2p "$DIR/one.csv")" | head -n "$n"; tail -n +2 "$DIR/one.csv"; } >"$DIR/rep$n.csv"
    sed -e "s/microbatches = 4/microbatches = 4  schedule = file(\"rep$n.csv\")/" "$DIR/csv0.pipe" >"$DIR/csv$n.pipe"
done

# cpu PATH SIZE ROUND CMD...: the user+system seconds CMD takes, appended as "PATH SIZE ROUND S"
RES=$DIR/results.txt
: >"$RES"
cpu() {
    c_path=$1 c_size=$2 c_round=$3
    shift 3
    /usr/bin/time -f "%U %S" -o "$DIR/time.out" "$@" >/dev/null 2>"$DIR/err.out"
    c_err=$(grep -c ': error: ' "$DIR/err.out")
    # the last line: time(1) puts "Command exited with non-zero status 1" first (check refuses the CSV)
    tail -n 1 "$DIR/time.out" | awk -v p="$c_path" -v n="$c_size" -v r="$c_round" -v e="$c_err" \
        '{ printf "%s %s %s %.3f %d\n", p, n, r, $1 + $2, e }' >>"$RES"
}
echo "bench/scale.sh: pipegen's near-linear paths, CPU seconds against size ($REPEAT rounds, sizes round-robin)"
r=1
while [ "$r" -le "$REPEAT" ]; do
    for n in $BLOCKS; do cpu split "$n" "$r" "$PG" plan "$DIR/blocks$n.pipe"; done
    for n in $MBS; do cpu memplan "$n" "$r" "$PG" plan "$DIR/mb$n.pipe"; done
    for n in $LINES; do cpu csv "$n" "$r" "$PG" check "$DIR/csv$n.pipe"; done
    r=$((r + 1))
done

# per path: median and spread of each size, the doubling ratios, the fitted exponent
report() {
    awk -v p="$1" -v what="$2" '
        $1 == p { n = $2; t[n, ++k[n]] = $4; errs[n] = $5; if (!(n in seen)) { seen[n] = 1; size[++ns] = n } }
        END {
            printf "%s\n", what
            for (i = 1; i <= ns; i++) {
                n = size[i]; m = k[n]
                for (a = 1; a <= m; a++) v[a] = t[n, a]
                for (a = 2; a <= m; a++) { x = v[a]; for (b = a - 1; b >= 1 && v[b] > x; b--) v[b + 1] = v[b]; v[b + 1] = x }
                med[i] = m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
                printf "  %10d  %8.3f s", n, med[i]
                if (v[1] > 0) printf "  (spread %.2fx)", v[m] / v[1]
                else printf "  (under the 10 ms the clock resolves)"
                if (i > 1 && med[i - 1] > 0) printf "  x%.2f for x%.1f the size", med[i] / med[i - 1], n / size[i - 1]
                if (errs[n] > 0) printf "  %d errors shown", errs[n]
                printf "\n"
            }
            sx = sy = sxx = sxy = 0; c = 0
            for (i = 1; i <= ns; i++) if (med[i] > 0) {
                lx = log(size[i]); ly = log(med[i]); sx += lx; sy += ly; sxx += lx * lx; sxy += lx * ly; c++
            }
            if (c >= 2 && c * sxx - sx * sx > 0)
                printf "  exponent %.2f (time ~ size^k over %d sizes; 1 linear, 2 quadratic)\n", (c * sxy - sx * sy) / (c * sxx - sx * sx), c
            else
                printf "  exponent: not fitted, too little time measured (below the 10 ms the clock resolves)\n"
        }' "$RES"
}
report split "split search, stages = 4, transformer blocks (pipegen plan; every layout included)"
report memplan "memory planner, micro-batches (pipegen plan of examples/mlp.pipe, batch = micro-batches)"
report csv "schedule CSV, repeated lines (pipegen check: it stops at the 50th error, whatever the size)"
echo "(CPU seconds of one process; the machine may be shared: bench/README.md)"
exit 0
