#!/bin/sh
# bench/mlp_stages.sh — the quickstart MLP (examples/mlp.pipe) cut into N stages
# for the benchmark: writes DIR/mlp.pipe, generates DIR/gen/stage<k>.c with
# build/pipegen and compiles them into DIR/bin/stage<k> (-O2, like the runtime).
#
#   bench/mlp_stages.sh N DIR        N = 1, 2 or 3
#
# The .pipe is the example's with `checkpoint = never` (as the torch Pipe anchor)
# and its `split` lines rewritten; batch, micro-batches, schedule, loss and
# optimizer stay the example's:
#   1 stage:  both splits dropped              [layer0 layer1 layer2]
#   2 stages: the second split dropped         [layer0] [layer1 layer2]
#             (either cut leaves a 1:3 FLOP split; this one sends 512 floats
#             per sample between the stages instead of 1024)
#   3 stages: both splits kept                 [layer0] [layer1] [layer2]
# Exit status: 0 built, 1 a step failed (its output is printed), 2 usage.
set -u
TOP=$(cd "$(dirname "$0")/.." && pwd)
CC=${CC:-cc}
. "$TOP/bench/lib.sh"

if [ $# -ne 2 ]; then
    echo "usage: $0 N DIR   (N = 1, 2 or 3 stages)" >&2
    exit 2
fi
n=$1
d=$2
case $n in
    1) keep=0 ;;   # keep no split
    2) keep=1 ;;   # keep the first split only
    3) keep=2 ;;   # keep both
    *) echo "$0: N must be 1, 2 or 3, not '$n'" >&2; exit 2 ;;
esac

mkdir -p "$d" || exit 1
sed -e 's/^\([[:space:]]*\)checkpoint = [a-z_]*/\1checkpoint = never/' "$TOP/examples/mlp.pipe" |
    awk -v keep="$keep" '/^[[:space:]]*split[[:space:]]*$/ { if (++seen > keep) next } { print }' >"$d/mlp.pipe" || exit 1

rm -rf "$d/gen" "$d/bin"
if ! "$TOP/build/pipegen" gen "$d/mlp.pipe" -o "$d/gen" >"$d/gen.log" 2>&1; then
    cat "$d/gen.log" >&2
    exit 1
fi
got=$(ls "$d/gen"/stage*.c 2>/dev/null | wc -l)
if [ "$got" -ne "$n" ]; then
    echo "$0: pipegen wrote $got stage programs for $d/mlp.pipe, expected $n" >&2
    exit 1
fi
mkdir -p "$d/bin" || exit 1
bench_cc_stages "$d/gen" "$d/bin" || exit 1
exit 0
