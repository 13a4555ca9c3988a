#!/bin/sh
# bench/run.sh — `make bench`: the quickstart MLP (examples/mlp.pipe, batch 512,
# 8 micro-batches, checkpoint never) trained by pipegen on 1, 2 and 3 stages,
# against PyTorch's torch.distributed.pipeline.sync.Pipe (same chunks,
# checkpoint='never') and plain PyTorch training of the same model, all in one
# go on the same 2 cores. Prints step times, samples/s and the ratios, then one
# verdict line per target (see bench/README.md). Then bench/gpt_char.sh: the
# gpt_char example on 1 stage against PyTorch eager, and on 2 stages against 1;
# bench/resnet.sh: examples/resnet.pipe against PyTorch eager, its convolutions
# against the GEMM's peak; bench/sched.sh: each schedule against 1f1b and measured
# against predicted steps; bench/profile.sh: gpt_char's FLOP/s against the GEMM's
# peak and its time by kernel family; bench/pippy.sh: pipegen's
# 1f1b, interleaved(2), zb1 and zbv against torch.distributed.pipelining's;
# bench/gemm.sh: the runtime's GEMM against OpenBLAS; bench/dp.sh: the data-parallel
# replicas' gradient reduction against raw TCP on the same loopback path, and the
# step with its early buckets against without; bench/zero.sh: the replicas' step
# with the optimizer state sharded (--zero 1) against without; bench/scale.sh:
# pipegen's split search, memory planner and schedule CSV reader against their
# size (the exponent of time ~ size^k).
#
# Knobs (environment): BENCH_STEPS (30) steps per run, BENCH_WARMUP (3) first
# steps left out of the median, BENCH_REPEAT (3) rounds (each config is run once
# per round; the table shows the best round and the spread), BENCH_CPUS (0,1)
# the cores everything is pinned to, BENCH_DIR (build/bench) the work folder.
# Exit status: 0 when everything ran (whether or not a target is met: this is a
# measurement), 1 when a build or run failed.
set -u
TOP=$(cd "$(dirname "$0")/.." && pwd)
STEPS=${BENCH_STEPS:-30}
WARMUP=${BENCH_WARMUP:-3}
REPEAT=${BENCH_REPEAT:-3}
CPUS=${BENCH_CPUS:-0,1}
DIR=${BENCH_DIR:-$TOP/build/bench}
PY=${PYTHON:-/usr/bin/python3}
CORES=2          # threads in all, per config
TARGET_PIPE=2.0  # at least 2x faster than torch Pipe
TARGET_PLAIN=0.9 # at least 0.9x plain PyTorch's speed

# pipegen configs: name stages threads-per-stage
CONFIGS="pipegen-1stage 1 2
pipegen-2stage 2 1
pipegen-2stage-2t 2 2
pipegen-3stage 3 1"

fail() { echo "bench: $*" >&2; exit 1; }
. "$TOP/bench/lib.sh"

bench_check_knobs
bench_need build/pipegen build/libpgrt_cpu.a build/piperun
[ -x "$PY" ] || fail "no python at $PY (set PYTHON)"

# The example's batch, micro-batches and SGD settings, for the torch anchors too.
SRC=$TOP/examples/mlp.pipe
pipe_num() { sed -n "s/.*[( ]$1 *= *\([0-9.eE+-]*\).*/\1/p" "$SRC" | head -1; }
BATCH=$(pipe_num batch)
CHUNKS=$(pipe_num microbatches)
LR=$(pipe_num lr)
MOMENTUM=$(pipe_num momentum)
[ -n "$BATCH" ] && [ -n "$CHUNKS" ] && [ -n "$LR" ] && [ -n "$MOMENTUM" ] ||
    fail "cannot read batch, microbatches, lr and momentum from $SRC"
grep -q 'optimizer *= *sgd' "$SRC" || fail "$SRC no longer uses sgd: bench/torch_mlp.py needs updating"

# Pin everything to the same cores when we can (children inherit the mask).
bench_pin

mkdir -p "$DIR/logs" || fail "cannot create $DIR"
RES=$DIR/results.txt
: >"$RES" || fail "cannot write $RES"

# ---- build the 1-, 2- and 3-stage programs ------------------------------------
for n in 1 2 3; do
    "$TOP/bench/mlp_stages.sh" "$n" "$DIR/mlp-$n" || fail "building mlp on $n stages failed"
done

# run_pipegen NAME STAGES THREADS ROUND
run_pipegen() {
    bench_pipegen "$1" "$4" "$DIR/logs/$1-r$4.log" "$3" "$DIR/mlp-$2/bin"
}

# run_torch ROUND: both anchors, one python process
run_torch() {
    log=$DIR/logs/torch-r$1.log
    if ! OMP_NUM_THREADS=$CORES $TMO $PIN "$PY" "$TOP/bench/torch_mlp.py" --threads "$CORES" \
            --batch "$BATCH" --chunks "$CHUNKS" --steps "$STEPS" --warmup "$WARMUP" \
            --lr "$LR" --momentum "$MOMENTUM" >"$log" 2>&1; then
        tail -20 "$log" >&2
        fail "torch anchors (round $1) failed; log: $log"
    fi
    for a in torch-plain torch-pipe; do
        ms=$(awk -v a="$a" '$1 == a && $2 == "step_ms" { print $3 }' "$log")
        [ -n "$ms" ] || fail "torch anchors (round $1): no '$a step_ms' line in $log"
        echo "$a $1 $ms" >>"$RES"
    done
}

echo "# pipegen bench: examples/mlp.pipe, batch $BATCH, $CHUNKS micro-batches, checkpoint never, sgd lr $LR momentum $MOMENTUM,"
echo "# $STEPS steps per run (median of steps $((WARMUP + 1))..$STEPS), best of $REPEAT rounds, $CORES threads in all, cores $CPUS"
bench_load_before "multi-threaded configs suffer most, "
run_anchors() { run_torch "$1"; }
bench_rounds
bench_load_after

# ---- the table and the verdicts ---------------------------------------------
{
    echo "$CONFIGS" | awk '{ print "cfg", $1, $2, $3 }'
    cat "$RES"
} | awk -v batch="$BATCH" -v tpipe="$TARGET_PIPE" -v tplain="$TARGET_PLAIN" -v cores="$CORES" -v rounds="$REPEAT" '
    $1 == "cfg" { order[++nc] = $2; stages[$2] = $3; thr[$2] = $4; next }
    {
        ms = $3 + 0
        if (!($1 in best) || ms < best[$1]) best[$1] = ms
        if (!($1 in worst) || ms > worst[$1]) worst[$1] = ms
    }
    function row(name, st, th,    ms) {
        ms = best[name]
        printf "%-20s %6s %9s %9.2f %10.0f %9.2fx %9.2fx   %6.1f%% (%.2f..%.2f)\n", name, st, th, ms, batch / ms * 1000,
               plain / ms, pipe / ms, (worst[name] - ms) / ms * 100, ms, worst[name]
    }
    END {
        plain = best["torch-plain"]; pipe = best["torch-pipe"]
        printf "%-20s %6s %9s %9s %10s %10s %10s   %s\n", "config", "stages", "threads", "step_ms", "samples/s",
               "vs_plain", "vs_pipe", "spread over " rounds " rounds (min..max ms)"
        row("torch-plain", 1, cores)
        row("torch-pipe", 3, cores)
        bname = ""
        for (i = 1; i <= nc; i++) {
            c = order[i]
            row(c, stages[c], thr[c] == 1 ? "1/stage" : thr[c] "/stage")
            if (bname == "" || best[c] < best[bname]) bname = c
        }
        printf "(vs_plain, vs_pipe: speed relative to the anchor = anchor step_ms / step_ms; higher is faster)\n"
        b = best[bname]
        printf "best pipegen config: %s (%d stage(s), %d thread(s) per stage), %.2f ms/step\n", bname, stages[bname], thr[bname], b
        printf "target >= %.1fx torch Pipe:     %s  (%s %.2f ms vs torch-pipe %.2f ms: %.2fx)\n", tpipe,
               (pipe / b >= tpipe) ? "MET" : "NOT MET", bname, b, pipe, pipe / b
        printf "target >= %.1fx plain PyTorch: %s  (%s %.2f ms vs torch-plain %.2f ms: %.2fx)\n", tplain,
               (plain / b >= tplain) ? "MET" : "NOT MET", bname, b, plain, plain / b
    }'

# ---- gpt_char: 1 stage vs PyTorch eager, 2 stages vs 1 (bench/gpt_char.sh) ----
echo
BENCH_STEPS=$STEPS BENCH_WARMUP=$WARMUP BENCH_REPEAT=$REPEAT BENCH_CPUS=${BENCH_CPUS:-0,1} BENCH_DIR=$DIR PYTHON=$PY \
    "$TOP/bench/gpt_char.sh" || exit 1

# examples/resnet.pipe: 1 stage against PyTorch eager, 2 stages against 1, the convolutions'
# GFLOP/s against the GEMM's peak (bench/resnet.sh)
echo
BENCH_REPEAT=$REPEAT BENCH_CPUS=${BENCH_CPUS:-0,1} BENCH_DIR=$DIR PYTHON=$PY "$TOP/bench/resnet.sh" || exit 1

# each schedule against 1f1b in alternating rounds, measured against predicted (bench/sched.sh)
"$TOP/bench/sched.sh" || exit 1

# gpt_char on 1 stage, 1 thread: FLOP/s against the GEMM's peak, time by kernel family (bench/profile.sh)
echo
BENCH_CPUS=${BENCH_CPUS:-0,1} BENCH_DIR=$DIR/profile "$TOP/bench/profile.sh" || exit 1

# against torch.distributed.pipelining, schedule for schedule (bench/pippy.sh; skips itself without torch >= 2.6)
echo
BENCH_STEPS=$STEPS BENCH_REPEAT=$REPEAT BENCH_CPUS=${BENCH_CPUS:-0,1} BENCH_DIR=$DIR "$TOP/bench/pippy.sh" || exit 1

# generation with the KV cache: 2N tokens against N, tokens/s against transformers' generate (bench/gen.sh;
# skips itself without the Python of tools/deps.sh hf)
echo
BENCH_REPEAT=$REPEAT BENCH_CPUS=${BENCH_CPUS:-0,1} BENCH_DIR=$DIR "$TOP/bench/gen.sh" || exit 1

# fine-tuning the imported Llama against PyTorch eager (bench/llama_ft.sh; skips itself likewise)
echo
BENCH_STEPS=$STEPS BENCH_WARMUP=$WARMUP BENCH_REPEAT=$REPEAT BENCH_CPUS=${BENCH_CPUS:-0,1} BENCH_DIR=$DIR \
    "$TOP/bench/llama_ft.sh" || exit 1

# the CPU runtime's GEMM against OpenBLAS at the examples' products (bench/gemm.sh)
echo
BENCH_CPUS=${BENCH_CPUS:-0,1} BENCH_DIR=$DIR "$TOP/bench/gemm.sh" || exit 1

# the replicas' gradient reduction against raw TCP on the same loopback path, and the
# step with early buckets against without (bench/dp.sh)
echo
BENCH_STEPS=$STEPS BENCH_WARMUP=$WARMUP BENCH_REPEAT=$REPEAT BENCH_CPUS=${BENCH_CPUS:-0,1} BENCH_DIR=$DIR "$TOP/bench/dp.sh" || exit 1

# the optimizer state sharded over the replicas (--zero 1) against without (bench/zero.sh)
echo
BENCH_STEPS=$STEPS BENCH_WARMUP=$WARMUP BENCH_REPEAT=$REPEAT BENCH_CPUS=${BENCH_CPUS:-0,1} BENCH_DIR=$DIR "$TOP/bench/zero.sh" || exit 1
echo
# pipegen's own near-linear paths: CPU time against size, the exponent fitted (bench/scale.sh)
BENCH_REPEAT=$REPEAT BENCH_DIR=$DIR "$TOP/bench/scale.sh" || exit 1
