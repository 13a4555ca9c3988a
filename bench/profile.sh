#!/bin/sh
# bench/profile.sh — how close the CPU kernels come to the machine: gpt_char on
# 1 stage with 1 thread (the example without its splits, its tie or its
# recompute), its step's FLOP/s against the GEMM's own single-thread peak
# measured in the same run, and where the step goes by kernel family.
#
#  - the step: the median of the loss stage's step times after BENCH_WARMUP
#    steps, BENCH_REPEAT runs, the median run kept;
#  - the model's work: the cost model's flops per step (`pipegen plan` on one
#    stage: the step in model units is every layer's F, B and W), so FLOP/s =
#    that / the step;
#  - the GEMM's peak: bench/gemm_vs_openblas.c's `ours 1` (runtime/cpu/gemm.c
#    on one thread at the examples' products), the best product's GF/s; target
#    (issue 28): the step's FLOP/s >= 60 % of it;
#  - the families: `perf record` (cpu-clock, DWARF call chains) of one more
#    run; a sample inside pg_run_step is charged to the runtime op the
#    generated code called (the outermost pg_* frame: pg_attention_fwd, not the
#    pg_linear_fwd it calls for its projections), by the op's source file
#    (runtime/cpu/<family>.c: one file per layer family), a sample in the GEMM
#    (runtime/cpu/gemm.c) to "GEMM" of that op's family, a sample in an op
#    that a GEMM's store runs (an epilogue, *_epi_strip: the activation of
#    pg_linear_act_fwd) to that op's family; libc's memcpy/memset
#    and the like to "libc", the kernel to "kernel". Target (issue 28): the
#    largest non-GEMM family below the smallest GEMM family.
# Without perf (or where it may not sample) the families are left out, said so.
#
# Knobs: BENCH_STEPS (30), BENCH_WARMUP (3), BENCH_REPEAT (3), BENCH_CPUS (0,1:
# the first is used), BENCH_DIR (build/bench/profile). Exit status 0 when it
# ran (a missed target is a measurement), 1 when a build or run failed.
set -u
TOP=$(cd "$(dirname "$0")/.." && pwd)
STEPS=${BENCH_STEPS:-30}
WARMUP=${BENCH_WARMUP:-3}
REPEAT=${BENCH_REPEAT:-3}
CPUS=${BENCH_CPUS:-0,1}
DIR=${BENCH_DIR:-$TOP/build/bench/profile}
CC=${CC:-cc}
# shellcheck disable=SC2034 # lib.sh's median_ms reads it
BATCH=32 # the example's batch

fail() { echo "bench/profile: $*" >&2; exit 1; }
. "$TOP/bench/lib.sh"
bench_check_knobs
bench_need build/pipegen build/libpgrt_cpu.a build/piperun
CPUS=${CPUS%%,*} # one core: one thread
bench_pin
mkdir -p "$DIR" || fail "cannot create $DIR"
bench_gpt_char_1stage "$DIR"
# the GEMM's own speed: bench/gemm_vs_openblas.c's `ours` side, without OpenBLAS
$CC -std=c11 -D_POSIX_C_SOURCE=200809L -DPG_NO_OPENBLAS -O2 -Wall -Wextra -Werror -I"$TOP/runtime/core" \
    -I"$TOP/runtime/cpu" -o "$DIR/gemm_ours" "$TOP/bench/gemm_vs_openblas.c" "$TOP/build/libpgrt_cpu.a" -lpthread -lm ||
    fail "building bench/gemm_vs_openblas.c failed"

run() { # run LOG [PREFIX...]: one run of STEPS steps on one thread
    r_log=$1
    shift
    # shellcheck disable=SC2086 # PIN and TMO are command prefixes
    $TMO $PIN "$@" "$TOP/build/piperun" "$DIR/bin" -- --steps "$STEPS" --threads 1 --log-every 1 >"$r_log" 2>&1 ||
        { tail -5 "$r_log" >&2; fail "the run failed (log $r_log)"; }
}

echo "# bench/profile: gpt_char on 1 stage, 1 thread, core $CPUS; $STEPS steps a run (median of the steps after"
echo "# $WARMUP), $REPEAT runs and the GEMM's peak alternating"
bench_load_before
: >"$DIR/steps.txt"
: >"$DIR/peak.txt"
r=1
while [ "$r" -le "$REPEAT" ]; do
    run "$DIR/run$r.log"
    median_ms "$DIR/run$r.log" >>"$DIR/steps.txt" || fail "no step lines in $DIR/run$r.log"
    # shellcheck disable=SC2086
    $TMO $PIN "$DIR/gemm_ours" ours 1 >"$DIR/gemm$r.out" || fail "gemm_vs_openblas ours 1 failed"
    awk -F'|' '!/^#/ { if ($3 + 0 > b) b = $3 + 0 } END { print b }' "$DIR/gemm$r.out" >>"$DIR/peak.txt"
    r=$((r + 1))
done
step=$(sort -g "$DIR/steps.txt" | awk '{ v[n++] = $1 } END { print v[int((n - 1) / 2)] }')
peak=$(sort -g "$DIR/peak.txt" | awk '{ v[n++] = $1 } END { print v[int((n - 1) / 2)] }')
gflop=$("$TOP/build/pipegen" plan "$DIR/gpt_char.pipe" 2>&1 | awk '
    /^predicted step/ { for (i = 1; i <= NF; i++) if ($i ~ /\):$/) { v = $(i + 1); u = $(i + 2) } }
    END { sub(/,$/, "", u); f = u == "Tflop" ? 1e3 : u == "Gflop" ? 1 : u == "Mflop" ? 1e-3 : 0; if (f) printf "%.4f\n", v * f; else exit 1 }') ||
    fail "no flop count in pipegen plan's output"
echo "step: $step ms (median of $REPEAT runs: $(tr '\n' ' ' <"$DIR/steps.txt")ms)"
echo "$gflop $step $peak" | awk '{ r = $1 / ($2 / 1000); printf "the model: %.3f Gflop a step (the cost model) -> %.1f GFLOP/s\n", $1, r
    printf "the GEMM alone, one thread: %.1f GFLOP/s (the best of bench/gemm_vs_openblas.c'"'"'s products, median of the runs)\n", $3
    printf "the step at %.0f%% of the GEMM'"'"'s peak: target >= 60%%: %s\n", 100 * r / $3, (r / $3 >= 0.6) ? "MET" : "NOT MET" }'

# the families, from perf
if ! command -v perf >/dev/null 2>&1 || ! perf record -o "$DIR/probe.data" -q -- true >/dev/null 2>&1; then
    echo "(no families: perf is missing or may not sample here)"
    bench_load_after
    exit 0
fi
rm -f "$DIR/probe.data"
run "$DIR/perf.log" perf record -q -F 999 --call-graph dwarf,16384 -o "$DIR/perf.data" --
for f in "$TOP"/build/obj/runtime/core/*.o "$TOP"/build/obj/runtime/cpu/*.o; do
    nm -f posix "$f" 2>/dev/null | awk -v file="$(basename "$f" .o)" '$2 ~ /^[tTwW]$/ { print $1, file }'
done >"$DIR/symfile.txt"
perf script -i "$DIR/perf.data" -F ip,sym --no-inline 2>/dev/null |
    awk -v step="$step" -v hz=999 -v steps="$STEPS" -v gflop="$gflop" -v peak="$peak" '
    BEGIN { name["linear"] = "linear (bias, column sums)"; name["activation"] = "gelu, relu"; name["optim"] = "optimizer, grad norm"
            name["ops_common"] = "logits"; name["skip"] = "skips and adds"; name["backend"] = "copies, zeroing"
            name["layernorm"] = "layernorm"; name["attention"] = "attention (softmax, masks)"; name["loss"] = "loss"
            name["embed"] = "embed, pos_embed"; name["guard"] = "verdict (sums of squares)"; name["step"] = "step loop"
            gemm_name["linear"] = "linear layers"; gemm_name["attention"] = "attention (qkv, scores, proj)"; gemm_name["ops_common"] = "logits" }
    FNR == NR { file[$1] = $2; next }
    function family(f) { return f in name ? name[f] : f }
    function flush(   i, op, gemm, f, s, inner, epi) {
        if (!n) return
        for (i = 0; i < n; i++) if (sym[i] == "pg_run_step") break
        if (i == n) { n = 0; return } # outside the steps: start-up, the end
        for (i = 0; i < n && sym[i] != "pg_run_step"; i++) {
            s = sym[i]
            if (s ~ /_epi_strip$/) epi = 1 # the op below it runs in the store of a GEMM
            else if (s ~ /^pg_cpu_gemm/ || s ~ /^(tile|pack)_/) gemm = 1 # the GEMM; pg_cpu_parallel runs any task
            else if (s ~ /^pg_/ && file[s] != "" && file[s] != "gemm") { op = s; if (inner == "") inner = s } # the outermost runtime op below pg_run_step
        }
        if (epi && inner != "") f = family(file[inner])
        else if (gemm) f = "GEMM: " (op != "" && file[op] in gemm_name ? gemm_name[file[op]] : op != "" ? file[op] : "other")
        else if (op != "") f = family(file[op])
        else if (sym[0] in file) f = family(file[sym[0]])
        else if (sym[0] ~ /^(__)?mem|^__memset|^__memcpy/) f = "libc (memcpy, memset)"
        else if (sym[0] ~ /^\[|kallsyms|^[a-z_]*_(page|fault|irq)/) f = "kernel"
        else f = "stage code and the rest"
        t[f]++; total++; n = 0
    }
    NF == 0 { flush(); next }
    { sym[n++] = $2 }
    END {
        flush()
        if (!total) { print "(no perf samples inside the steps)"; exit }
        cpu = total / hz / steps # seconds of CPU a step: one sample per 1/hz s of the stage'"'"'s CPU time
        printf "CPU time a step: %.2f ms (perf'"'"'s samples), so %.1f GFLOP/s of CPU time: %.0f%% of the GEMM'"'"'s peak (what the wall-clock figure above would be on an idle core)\n",
               1000 * cpu, gflop / cpu, 100 * gflop / cpu / peak
        printf "time per step by kernel family (perf: %d samples inside the steps, each family'"'"'s share of the %.2f ms step):\n", total, step
        k = 0; for (f in t) fam[k++] = f
        for (i = 1; i < k; i++) { x = fam[i]; for (j = i - 1; j >= 0 && t[fam[j]] < t[x]; j--) fam[j + 1] = fam[j]; fam[j + 1] = x }
        gmin = -1; nmax = -1
        for (i = 0; i < k; i++) {
            f = fam[i]; ms = step * t[f] / total
            printf "  %-34s %9.2f ms %6.1f%%\n", f, ms, 100 * t[f] / total
            if (f ~ /^GEMM/) { if (gmin < 0 || ms < gmin) { gmin = ms; gname = f } }
            else if (ms > nmax) { nmax = ms; nname = f }
        }
        if (gmin >= 0 && nmax >= 0)
            printf "largest non-GEMM family %s (%.2f ms) against the smallest GEMM family %s (%.2f ms): target smaller: %s\n",
                   nname, nmax, gname, gmin, (nmax < gmin) ? "MET" : "NOT MET"
    }' "$DIR/symfile.txt" -
bench_load_after
