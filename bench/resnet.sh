#!/bin/sh
# bench/resnet.sh — the ResNet of examples/resnet.pipe (32 x 32 images, batch 32
# in 4 micro-batches, SGD) trained by:
#   torch-eager        bench/torch_resnet.py, the same model in PyTorch eager
#                      (Debian's torch), the whole batch, 2 threads, NCHW
#   torch-eager-cl     the same in channels_last (NHWC)
#   pipegen-1stage     pipegen, 1 stage process, --threads 2
#   pipegen-2stage     pipegen, 2 stage processes ([stem .. d2] [b2 .. fc]), --threads 1 each
# all with checkpoint = never, pinned to the same 2 cores, in BENCH_REPEAT
# interleaved rounds; each config's best-round ms/step and spread, then pipegen
# 1 stage against the faster torch layout (target >= 1.0x, the issue's). Then
# bench/conv_gflops.c: each of the ResNet's convolutions (a micro-batch of 8),
# forward, input gradient and weight gradient, in GFLOP/s against the same
# GEMMs on a ready column matrix and against the GEMM's own peak. 2 stages
# against torch.distributed.pipelining, schedule for schedule, is bench/pippy.sh's.
#
# A step: pipegen's is `batch / samples_per_s` of the last stage's per-step line,
# torch's perf_counter around zero_grad + forward + loss + backward + SGD; a
# run's number is the median of steps WARMUP+1..STEPS.
# Knobs: BENCH_STEPS (12), BENCH_WARMUP (2), BENCH_REPEAT (3), BENCH_CPUS (0,1),
# BENCH_DIR (build/bench; this in resnet-*/, logs/resnet-*), PYTHON
# (/usr/bin/python3). Exit status 0 when everything ran (met or not), 1 when a
# build or run failed.
set -u
TOP=$(cd "$(dirname "$0")/.." && pwd)
STEPS=${BENCH_STEPS:-12}
WARMUP=${BENCH_WARMUP:-2}
REPEAT=${BENCH_REPEAT:-3}
CPUS=${BENCH_CPUS:-0,1}
DIR=${BENCH_DIR:-$TOP/build/bench}
PY=${PYTHON:-/usr/bin/python3}
CC=${CC:-cc}
SRC=$TOP/examples/resnet.pipe
TARGET_TORCH=1.0

CONFIGS="pipegen-1stage 1 2
pipegen-2stage 2 1"

fail() { echo "bench/resnet: $*" >&2; exit 1; }
. "$TOP/bench/lib.sh"
bench_check_knobs
bench_need build/pipegen build/libpgrt_cpu.a build/piperun
[ -x "$PY" ] || fail "no python at $PY (set PYTHON)"
BATCH=$(sed -n 's/.*[( ]batch *= *\([0-9]*\).*/\1/p' "$SRC" | head -1)
[ -n "$BATCH" ] || fail "cannot read batch from $SRC"
grep -q '^d2 = down' "$SRC" && grep -q '^b2 = basic' "$SRC" || fail "$SRC no longer has d2 and b2: update the 2-stage split here"
bench_pin
mkdir -p "$DIR/logs" || fail "cannot create $DIR"
RES=$DIR/resnet-results.txt
: >"$RES" || fail "cannot write $RES"

# the variants: N stages, checkpoint never; 2 stages split before b2
for n in 1 2; do
    d=$DIR/resnet-$n
    rm -rf "$d" && mkdir -p "$d/bin" || fail "cannot create $d"
    sed -e '/^split$/d' -e 's/checkpoint = [a-z_]*/checkpoint = never/' "$SRC" |
        awk -v n="$n" '/^b2 = basic/ && n == 2 { print "split" } { print }' >"$d/resnet.pipe"
    "$TOP/build/pipegen" gen "$d/resnet.pipe" -o "$d/gen" >"$d/gen.log" 2>&1 && bench_cc_stages "$d/gen" "$d/bin" ||
        fail "building resnet on $n stage(s) failed (see $d/gen.log)"
done

run_pipegen() {
    bench_pipegen "$1" "$4" "$DIR/logs/resnet-$1-r$4.log" "$3" "$DIR/resnet-$2/bin"
}

run_anchors() {
    for layout in nchw cl; do
        log=$DIR/logs/resnet-torch-$layout-r$1.log
        flag=""
        [ $layout = cl ] && flag=--channels-last
        # shellcheck disable=SC2086 # flag is empty or one option
        OMP_NUM_THREADS=2 $TMO $PIN "$PY" "$TOP/bench/torch_resnet.py" --plan "$DIR/resnet-1/gen/plan.json" \
            --threads 2 --steps "$STEPS" --warmup "$WARMUP" $flag >"$log" 2>&1 ||
            { tail -20 "$log" >&2; fail "torch eager ($layout, round $1) failed; log: $log"; }
        ms=$(awk '$1 == "torch-eager" { print $7 }' "$log")
        [ -n "$ms" ] || fail "torch eager ($layout, round $1): no step line in $log"
        name=torch-eager
        [ $layout = cl ] && name=torch-eager-cl
        echo "$name $1 $ms" >>"$RES"
    done
}

TV=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)
echo "# bench/resnet: examples/resnet.pipe (batch $BATCH), checkpoint never, $STEPS steps per run (median of steps"
echo "# $((WARMUP + 1))..$STEPS), best of $REPEAT rounds, 2 threads in all, cores $CPUS; torch $TV"
bench_load_before "multi-threaded configs suffer most, "
bench_rounds
bench_load_after
{
    echo "$CONFIGS" | awk '{ print "cfg", $1, $2, $3 }'
    cat "$RES"
} | awk -v batch="$BATCH" -v target="$TARGET_TORCH" -v rounds="$REPEAT" '
    $1 == "cfg" { order[++nc] = $2; st[$2] = $3; th[$2] = $4; next }
    { ms = $3 + 0
      if (!($1 in best) || ms < best[$1]) best[$1] = ms
      if (!($1 in worst) || ms > worst[$1]) worst[$1] = ms }
    function row(n, s, t) {
        printf "%-16s %6s %8s %10.1f %10.1f %9.2fx   %5.1f%% (%.1f..%.1f)\n", n, s, t, best[n], batch / best[n] * 1000,
               anchor / best[n], (worst[n] - best[n]) / best[n] * 100, best[n], worst[n] }
    END {
        anchor = best["torch-eager"]; aname = "torch-eager"
        if (best["torch-eager-cl"] < anchor) { anchor = best["torch-eager-cl"]; aname = "torch-eager-cl" }
        printf "%-16s %6s %8s %10s %10s %10s   %s\n", "config", "stages", "threads", "step_ms", "samples/s", "vs_torch",
               "spread over " rounds " rounds (min..max ms)"
        row("torch-eager", 1, 2); row("torch-eager-cl", 1, 2)
        for (i = 1; i <= nc; i++) row(order[i], st[order[i]], th[order[i]] == 1 ? "1/stage" : th[order[i]])
        printf "(vs_torch: %s step_ms / step_ms, the faster layout; higher is faster)\n", aname
        p = best["pipegen-1stage"]
        printf "target >= %.1fx PyTorch eager: %s  (pipegen-1stage %.1f ms vs %s %.1f ms: %.2fx)\n", target,
               (anchor / p >= target ? "MET" : "NOT MET"), p, aname, anchor, anchor / p
        printf "2 stages against 1: %.2fx\n", p / best["pipegen-2stage"]
    }'

# the convolutions against the GEMM's own peak (bench/conv_gflops.c)
echo
$CC -std=c11 -D_POSIX_C_SOURCE=200809L -O2 -Wall -Wextra -Werror -I"$TOP/runtime/core" -I"$TOP/runtime/cpu" \
    -o "$DIR/conv_gflops" "$TOP/bench/conv_gflops.c" "$TOP/build/libpgrt_cpu.a" -lpthread -lm ||
    fail "building bench/conv_gflops.c failed"
echo "# bench/conv_gflops: examples/resnet.pipe's convolutions, 8 samples a call, 1 thread, in GFLOP per second of"
echo "# the process's CPU time (what the other work on these cores cannot inflate), best of 3 batches; win_share:"
echo "# the op's time beyond the same GEMMs on a stored matrix (packing the window from the image, im2col, col2im)"
bench_load_before ""
$TMO $PIN "$DIR/conv_gflops" 1 || fail "bench/conv_gflops failed"
bench_load_after
