#!/bin/sh
# bench/gpt_char.sh — the character-level GPT of examples/gpt_char.pipe (4 pre-LN
# blocks, d 128, 4 heads, seq 64, vocab 256, wte tied, AdamW, batch 32 in 8
# micro-batches) trained on data/tiny_text.txt by:
#   torch-eager        bench/torch_gpt_char.py, the same model in PyTorch eager,
#                      whole batch, torch.set_num_threads(2)
#   torch-eager-1t     the same with 1 thread (for reference)
#   pipegen-1stage     pipegen, 1 stage process, --threads 2 (GEMM threads)
#   pipegen-1stage-1t  the same with --threads 1 (for reference)
#   pipegen-2stage     pipegen, 2 stage processes [tok pos h0 h1] [h2 h3 ln_f head],
#                      --threads 1 each
#   pipegen-2stage-ckpt the same with the example's checkpoint = except_last
#                      (stage 0 recomputes its forward in the backward)
# all pinned to the same 2 cores, run in BENCH_REPEAT interleaved rounds. Prints
# each config's best-round ms/step and spread, then the two ratios of the issue
# with their targets: pipegen 1 stage vs torch eager (same 2 threads; >= 1.5x)
# and pipegen 2 stages vs 1 stage (the 2 cores; >= 1.6x, against the 1 stage
# with 2 threads and, for reference, with 1), where the 2-stage step goes (each
# stage's compute and idle time from its own "bubble" line, and what the 1f1b
# bubble leaves reachable), and the commands.
#
# The pipegen variants are the example with `checkpoint = never` (as the torch
# anchor: no recompute) unless named -ckpt, and its split lines rewritten: all
# three dropped (1 stage) or the middle one kept (2 stages: 2 blocks each, the
# last stage also has ln_f, the logits and the loss); batch, micro-batches,
# schedule (1f1b), optimizer and the rest stay the example's. They read
# data/tiny_text.txt as a token stream (build/pipedata); torch cuts random
# windows of the same bytes. A step is `batch / samples_per_s` of the last
# stage's per-step line (timed around pg_run_step) for pipegen, perf_counter
# around zero_grad + forward + loss + backward + clip + AdamW for torch; a run's
# number is the median of steps WARMUP+1..STEPS; the table shows the best round.
#
# Knobs: BENCH_STEPS (30), BENCH_WARMUP (3), BENCH_REPEAT (3), BENCH_CPUS (0,1),
# BENCH_DIR (build/bench; builds in gpt_char-*/, logs in logs/gpt_char-*),
# PYTHON (/usr/bin/python3). Exit status 0 when everything ran (met or not), 1
# when a build or run failed.
set -u
TOP=$(cd "$(dirname "$0")/.." && pwd)
STEPS=${BENCH_STEPS:-30}
WARMUP=${BENCH_WARMUP:-3}
REPEAT=${BENCH_REPEAT:-3}
CPUS=${BENCH_CPUS:-0,1}
DIR=${BENCH_DIR:-$TOP/build/bench}
PY=${PYTHON:-/usr/bin/python3}
CC=${CC:-cc}
SRC=$TOP/examples/gpt_char.pipe
TEXT=$TOP/data/tiny_text.txt
TARGET_TORCH=1.5  # 1 stage at least 1.5x faster than torch eager, same threads
TARGET_STAGES=1.6 # 2 stage processes at least 1.6x faster than 1 on the 2 cores

# name variant threads (variant: STAGES-CHECKPOINT, a folder under $DIR/gpt_char-*)
CONFIGS="pipegen-1stage 1-never 2
pipegen-1stage-1t 1-never 1
pipegen-2stage 2-never 1
pipegen-2stage-ckpt 2-except_last 1"

fail() { echo "bench/gpt_char: $*" >&2; exit 1; }
. "$TOP/bench/lib.sh"

bench_check_knobs
bench_need build/pipegen build/libpgrt_cpu.a build/piperun build/pipedata
[ -x "$PY" ] || fail "no python at $PY (set PYTHON)"
BATCH=$(sed -n 's/.*[( ]batch *= *\([0-9]*\).*/\1/p' "$SRC" | head -1)
CHUNKS=$(sed -n 's/.*[( ]microbatches *= *\([0-9]*\).*/\1/p' "$SRC" | head -1)
[ -n "$BATCH" ] && [ -n "$CHUNKS" ] || fail "cannot read batch and microbatches from $SRC"
[ "$(grep -c '^[[:space:]]*split[[:space:]]*$' "$SRC")" = 3 ] ||
    fail "$SRC no longer has 3 split lines: update the stage variants here"

bench_pin
mkdir -p "$DIR/logs" || fail "cannot create $DIR"
RES=$DIR/gpt_char-results.txt
: >"$RES" || fail "cannot write $RES"

# ---- the variants: STAGES-CHECKPOINT -> $DIR/gpt_char-V/{gpt_char.pipe,gen,bin}
build_variant() {
    n=${1%%-*}
    ck=${1#*-}
    d=$DIR/gpt_char-$1
    rm -rf "$d" && mkdir -p "$d/bin" || return 1
    # 1 stage: no split and no tie (one stage holds both uses of wte)
    sed -e "s/checkpoint *= *[a-z_]*/checkpoint = $ck/" "$SRC" |
        awk -v n="$n" '/^[[:space:]]*split[[:space:]]*$/ { if (n == 1 || ++s != 2) next }
                       n == 1 && /^[[:space:]]*tie[[:space:]]/ { next } { print }' >"$d/gpt_char.pipe" || return 1
    "$TOP/build/pipegen" gen "$d/gpt_char.pipe" -o "$d/gen" >"$d/gen.log" 2>&1 || { cat "$d/gen.log" >&2; return 1; }
    [ "$(ls "$d/gen"/stage*.c | wc -l)" = "$n" ] || { echo "expected $n stage programs in $d/gen" >&2; return 1; }
    bench_cc_stages "$d/gen" "$d/bin"
}
for v in $(echo "$CONFIGS" | awk '{ print $2 }' | sort -u); do
    build_variant "$v" || fail "building gpt_char variant $v failed"
done
"$TOP/build/pipedata" text "$TEXT" -o "$DIR/tiny_text.pgd" >/dev/null || fail "pipedata text $TEXT failed"

pipegen_cmd() { # VARIANT THREADS
    echo "OPENBLAS_NUM_THREADS=$2 $PIN build/piperun $DIR/gpt_char-$1/bin -- --steps $STEPS --threads $2 --data $DIR/tiny_text.pgd" |
        sed "s|$TOP/||g"
}
torch_cmd() { # THREADS
    echo "OMP_NUM_THREADS=$1 $PIN $PY bench/torch_gpt_char.py --plan $DIR/gpt_char-1-never/gen/plan.json --text $TEXT --threads $1 --steps $STEPS --warmup $WARMUP" |
        sed "s|$TOP/||g"
}

run_pipegen() { # NAME VARIANT THREADS ROUND
    bench_pipegen "$1" "$4" "$DIR/logs/gpt_char-$1-r$4.log" "$3" "$DIR/gpt_char-$2/bin" --data "$DIR/tiny_text.pgd"
}

run_torch() { # NAME THREADS ROUND
    log=$DIR/logs/gpt_char-$1-r$3.log
    if ! OMP_NUM_THREADS=$2 $TMO $PIN "$PY" "$TOP/bench/torch_gpt_char.py" --plan "$DIR/gpt_char-1-never/gen/plan.json" \
            --text "$TEXT" --threads "$2" --steps "$STEPS" --warmup "$WARMUP" >"$log" 2>&1; then
        tail -20 "$log" >&2
        fail "$1 (round $3) failed; log: $log"
    fi
    ms=$(awk '$1 == "torch-eager" { for (i = 1; i < NF; i++) if ($i == "step_ms") print $(i + 1) }' "$log")
    [ -n "$ms" ] || fail "$1 (round $3): no step_ms line in $log"
    echo "$1 $3 $ms" >>"$RES"
}

echo "# gpt_char bench: examples/gpt_char.pipe (4 blocks, d 128, 4 heads, seq 64, vocab 256, tied wte, adamw),"
echo "# batch $BATCH in $CHUNKS micro-batches (1f1b), data/tiny_text.txt; $STEPS steps per run (median of steps $((WARMUP + 1))..$STEPS),"
echo "# best of $REPEAT interleaved rounds, cores $CPUS; pipegen checkpoint = never unless -ckpt (except_last)"
bench_load_before
run_anchors() { # ROUND
    run_torch torch-eager 2 "$1"
    run_torch torch-eager-1t 1 "$1"
}
bench_rounds
bench_load_after

{
    echo "$CONFIGS" | awk '{ split($2, v, "-"); print "cfg", $1, v[1], $3 }'
    cat "$RES"
} | awk -v batch="$BATCH" -v chunks="$CHUNKS" -v rounds="$REPEAT" -v tt="$TARGET_TORCH" -v ts="$TARGET_STAGES" '
    $1 == "cfg" { order[++nc] = $2; stages[$2] = $3; thr[$2] = $4; next }
    {
        ms = $3 + 0
        if (!($1 in best) || ms < best[$1]) best[$1] = ms
        if (!($1 in worst) || ms > worst[$1]) worst[$1] = ms
        all[$1] = all[$1] (all[$1] == "" ? "" : " / ") sprintf("%.1f", ms)
    }
    function row(name, st, th,    ms) {
        ms = best[name]
        printf "%-20s %6s %9s %9.2f %10.1f %9.2fx   %6.1f%% (%s)\n", name, st, th, ms, batch / ms * 1000,
               best["torch-eager"] / ms, (worst[name] - ms) / ms * 100, all[name]
    }
    END {
        printf "%-20s %6s %9s %9s %10s %10s   %s\n", "config", "stages", "threads", "step_ms", "samples/s",
               "vs_torch", "spread over " rounds " rounds (each round, ms)"
        row("torch-eager", 1, 2)
        row("torch-eager-1t", 1, 1)
        for (i = 1; i <= nc; i++) {
            c = order[i]
            row(c, stages[c], (thr[c] == 1 && stages[c] > 1) ? "1/stage" : thr[c])
        }
        one = best["pipegen-1stage"]; one1 = best["pipegen-1stage-1t"]; two = best["pipegen-2stage"]
        t = best["torch-eager"]
        printf "(vs_torch = torch-eager (2 threads) ms / ms: higher is faster)\n"
        printf "pipegen 1 stage vs torch eager, 2 threads each: %.2fx  target >= %.1fx: %s  (%.2f ms vs %.2f ms)\n",
               t / one, tt, (t / one >= tt) ? "MET" : "NOT MET", one, t
        printf "pipegen 2 stages (1 thread each) vs 1 stage (2 threads): %.2fx  target >= %.1fx: %s  (%.2f ms vs %.2f ms)\n",
               one / two, ts, (one / two >= ts) ? "MET" : "NOT MET", two, one
        printf "pipegen 2 stages (1 thread each) vs 1 stage (1 thread):  %.2fx  target >= %.1fx: %s  (%.2f ms vs %.2f ms)\n",
               one1 / two, ts, (one1 / two >= ts) ? "MET" : "NOT MET", two, one1
    }'
# Where the 2-stage step goes, from the best 2-stage round's own lines
# "[stage k] bubble X% (compute A s of B s over steps 2..N)" (piperun's prefix): with no idle time the
# step would be the busier stage's compute; 1f1b over m micro-batches on p = 2
# stages idles each stage (p-1)/(m+p-1) of the step at best.
best2=$(awk '$1 == "pipegen-2stage" && (b == "" || $3 + 0 < b) { b = $3 + 0; r = $2 } END { print r }' "$RES")
one=$(awk '$1 == "pipegen-1stage" && (b == "" || $3 + 0 < b) { b = $3 + 0 } END { print b }' "$RES")
awk -v one="$one" -v m="$CHUNKS" -v ts="$TARGET_STAGES" '
    /stage [0-9]+(:|\]) bubble / {
        for (i = 1; i <= NF; i++) {
            if ($i == "bubble") { k = $(i - 1); sub(/[:\]]/, "", k); bub[k] = $(i + 1) }
            if ($i == "(compute") comp[k] = $(i + 1)
            if ($i == "steps") { split($(i + 1), p, "\\.\\."); n = p[2] - p[1] + 1 }
        }
    }
    END {
        if (n < 1) exit
        line = "  2-stage run:"; mx = 0
        for (k = 0; k in comp; k++) {
            ms = comp[k] * 1000 / n; if (ms > mx) mx = ms
            line = line sprintf(" stage %d computes %.1f ms/step (bubble %s)", k, ms, bub[k])
        }
        print line
        ideal = (m) / (m + 1)
        printf "  with no idle time the step would be the busier stage'"'"'s compute, %.1f ms: %.2fx the 1-stage 2-thread step;\n", mx, one / mx
        printf "  1f1b with m = %d on 2 stages idles each stage 1/(m+1) = %.1f%% of the pipelined part: ~%.1f ms, ~%.2fx;\n",
               m, 100 / (m + 1), mx / ideal, one / mx * ideal
        printf "  %.1fx would need the idle time under %.1f%% of the step\n", ts, (1 - mx * ts / one) * 100
    }' "$DIR/logs/gpt_char-pipegen-2stage-r$best2.log"
echo "# commands (round 1):"
echo "#   $(torch_cmd 2)"
echo "#   $(torch_cmd 1)"
echo "$CONFIGS" | while read -r name v t; do echo "#   $name: $(pipegen_cmd "$v" "$t")"; done
exit 0
