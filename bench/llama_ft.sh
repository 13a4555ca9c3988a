#!/bin/sh
# bench/llama_ft.sh — fine-tuning an imported Llama (issue 25 §5): the random
# Llama of bench/hf_gen.py (d 256, 4 blocks, 8 heads, 4 kv heads, vocab 2048)
# imported with `pipegen import hf --seq 64`, trained on random windows of a
# random token stream (batch 8, AdamW as imported, grad clip 1, cross entropy,
# checkpoint = never as the torch anchor) by:
#   torch-eager      transformers' LlamaForCausalLM in PyTorch eager, the whole
#                    batch, torch.set_num_threads(2) (bench/hf_gen.py train)
#   pipegen-1stage   1 stage, the whole batch in 1 micro-batch, --threads 2
#   pipegen-2stage   2 stage processes [tok h0 h1] [h2 h3 norm head], 4
#                    micro-batches (1f1b), --threads 1 each
# all pinned to the same 2 cores, BENCH_REPEAT interleaved rounds, the best
# round of each; a step is the median of steps WARMUP+1..STEPS (pipegen: batch /
# samples_per_s of the last stage's step line; torch: perf_counter around
# zero_grad + forward + loss + backward + clip + step). Target: pipegen 1
# stage >= 1.5x torch eager. The issue's second target, 2 stages >= 2x
# torch.distributed.pipelining (torch >= 2.6, not the Debian torch 1.13 that
# transformers 4.44 runs on here), is measured by bench/pippy.sh's llama rows:
# this very model, imported in chunks at block boundaries, against the same
# chunks in torch's pipelining schedules; here the 2-stage row is against 1
# stage and eager only.
#
# Knobs: BENCH_STEPS (30), BENCH_WARMUP (3), BENCH_REPEAT (3), BENCH_CPUS (0,1),
# BENCH_DIR (build/bench). Skips itself without the Python of tools/deps.sh hf.
set -u
TOP=$(cd "$(dirname "$0")/.." && pwd)
STEPS=${BENCH_STEPS:-30}
WARMUP=${BENCH_WARMUP:-3}
REPEAT=${BENCH_REPEAT:-3}
CPUS=${BENCH_CPUS:-0,1}
DIR=${BENCH_DIR:-$TOP/build/bench}
VENV=${PIPEGEN_VENV:-${HOME:-/root}/.cache/pipegen/venv}
PY=${PIPEGEN_PYTHON:-$VENV/bin/python3}
CC=${CC:-cc}
BATCH=8
SEQ=64
TARGET_TORCH=1.5

fail() { echo "bench/llama_ft: $*" >&2; exit 1; }
. "$TOP/bench/lib.sh"

bench_check_knobs
bench_need build/pipegen build/libpgrt_cpu.a build/piperun
bench_hf_start llama_ft
"$PY" "$TOP/bench/hf_gen.py" stream "$M/hf" "$M/stream.pgd" --tokens 65536 || fail "bench/hf_gen.py stream failed"

build_variant() { # STAGES MICROBATCHES
    d=$DIR/llama_ft-$1
    rm -rf "$d" && mkdir -p "$d/bin" || return 1
    "$TOP/build/pipegen" import hf "$M/hf" -o "$d/imp" --stages "$1" --seq $SEQ --name m >"$d/imp.log" 2>&1 ||
        { cat "$d/imp.log" >&2; return 1; }
    sed -i -e "s/batch = 8  microbatches = 4/batch = $BATCH  microbatches = $2/" \
        -e 's/checkpoint = except_last/checkpoint = never/' "$d/imp/m.pipe" || return 1
    grep -q "microbatches = $2 .*checkpoint = never" "$d/imp/m.pipe" ||
        { echo "the imported train block is not the one this script edits" >&2; return 1; }
    "$TOP/build/pipegen" gen "$d/imp/m.pipe" -o "$d/gen" >"$d/gen.log" 2>&1 || { cat "$d/gen.log" >&2; return 1; }
    bench_cc_stages "$d/gen" "$d/bin"
}
build_variant 1 1 || fail "building the 1-stage variant failed"
build_variant 2 4 || fail "building the 2-stage variant failed"

run_torch() { # ROUND
    log=$DIR/logs/llama_ft-torch-eager-r$1.log
    if ! OMP_NUM_THREADS=2 $TMO $PIN "$PY" "$TOP/bench/hf_gen.py" train "$M/hf" "$M/stream.pgd" --batch $BATCH \
            --seq $SEQ --steps "$STEPS" --warmup "$WARMUP" --threads 2 >"$log" 2>&1; then
        tail -20 "$log" >&2
        fail "torch-eager (round $1) failed; log: $log"
    fi
    ms=$(awk '$1 == "torch-eager" { print $3 }' "$log")
    [ -n "$ms" ] || fail "torch-eager (round $1): no step_ms line in $log"
    echo "torch-eager $1 $ms" >>"$RES"
}

echo "# llama_ft bench: a random Llama (d 256, 4 blocks, 8 heads, 4 kv heads, vocab 2048) imported from transformers,"
echo "# batch $BATCH x seq $SEQ, AdamW, grad clip 1; $STEPS steps per run (median of steps $((WARMUP + 1))..$STEPS),"
echo "# best of $REPEAT interleaved rounds, cores $CPUS; pipegen checkpoint = never"
r=1
while [ $r -le "$REPEAT" ]; do
    run_torch $r
    bench_pipegen pipegen-1stage $r "$DIR/logs/llama_ft-pipegen-1stage-r$r.log" 2 "$DIR/llama_ft-1/bin" \
        --load "$DIR/llama_ft-1/imp/m.safetensors" --data "$M/stream.pgd"
    bench_pipegen pipegen-2stage $r "$DIR/logs/llama_ft-pipegen-2stage-r$r.log" 1 "$DIR/llama_ft-2/bin" \
        --load "$DIR/llama_ft-2/imp/m.safetensors" --data "$M/stream.pgd"
    r=$((r + 1))
done

awk -v tt="$TARGET_TORCH" '
    { t = $3 + 0; if (!($1 in best) || t < best[$1]) best[$1] = t; if (!($1 in worst) || t > worst[$1]) worst[$1] = t }
    END {
        printf "%-16s %10s %8s %10s\n", "config", "best ms", "spread", "vs_eager"
        n = split("torch-eager pipegen-1stage pipegen-2stage", order, " ")
        for (i = 1; i <= n; i++) {
            c = order[i]
            printf "%-16s %10.2f %7.0f%% %9.2fx\n", c, best[c], 100 * (worst[c] - best[c]) / best[c],
                   best["torch-eager"] / best[c]
        }
        e = best["torch-eager"]; p = best["pipegen-1stage"]
        printf "target >= %.1fx torch eager at 1 stage:  %s  (%.2f ms vs %.2f ms: %.2fx)\n", tt,
               (e / p >= tt) ? "MET" : "NOT MET", p, e, e / p
        printf "2 stages vs 1 stage: %.2fx (against torch.distributed.pipelining: bench/pippy.sh, llama)\n",
               p / best["pipegen-2stage"]
    }' "$RES"
