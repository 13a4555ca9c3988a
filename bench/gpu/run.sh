#!/bin/sh
# bench/gpu/run.sh — the GPU benchmark (the GPU bundle's `run.sh OUT bench`,
# `make bench-gpu` in a checkout): GPT-2 small (examples/gpt2_small.pipe,
# precision = bf16, batch 8 x 1024 tokens, 4 micro-batches) on one CUDA GPU:
#
#   pipegen-1stage          the model cut to 1 stage, CUDA graphs (default)
#   pipegen-1stage-nograph  the same with --no-graph (every op eager)
#   pipegen-4stage          the example's 4 stages as 4 processes sharing the GPU (CUDA IPC)
#   pipegen-4stage-traced   the same with --trace and --profile: measured step
#                           against `pipegen trace`'s prediction from that profile
#   torch-eager             bench/gpu/torch_gpt2.py: the same model in PyTorch, bf16 autocast
#   torch-compile           the same under torch.compile
#   gemm_peak               bench/gpu/gemm_peak.c: the measured bf16 cuBLAS GEMM peak
#   conv-1stage             a convolutional network (BENCH_CONV_MODEL, default
#                           examples/resnet.pipe, f32) on 1 stage: cuDNN's
#                           convolutions and the own pooling / batch-norm kernels
#   conv-1stage-nograph     the same with --no-graph
#
# It prints tokens/s of each and the figures of the issue's table, and writes
# them to BENCH_DIR/bench.json:
#   tokens_per_s.{pipegen_1stage, pipegen_1stage_nograph, pipegen_4stage, torch_eager, torch_compile}
#   ratio_vs_torch_eager, ratio_vs_torch_compile (target >= 1.2), gemm_peak_tflops,
#   mfu.{pipegen_1stage, pipegen_4stage, torch_eager, torch_compile} (target >= 0.40),
#   step_4stage_over_1stage (target <= 1.05), graph_speedup (> 1) and
#   graph_same_bits (the per-step and final losses of graph and --no-graph
#   runs identical), trace_measured_ms / trace_predicted_ms / trace_ratio
#   (target within 0.9..1.1), arena_bytes / peak_bytes / memory_ratio (the
#   1-stage arena from the plan against the device memory the process used at
#   its peak, cudaMemGetInfo; target within 1.02), runtime_own_bytes /
#   libraries_bytes (of the peak beyond the arena: the runtime's own named
#   allocations, and the rest: the CUDA libraries' and the driver's), conv.{model,
#   samples_per_s_1stage, samples_per_s_1stage_nograph, same_bits} (no PyTorch
#   row for it yet).
# Model FLOPs per token = 6 N + 12 L T d (N every trained parameter, the tied
# table included since it is also the logits GEMM; recomputation of
# checkpointed micro-batches not counted, so MFU, not HFU).
#
# A pipegen run's tokens/s is the median over the steps after the first
# WARMUP of the last stage's per-step "X tokens/s" (timed around
# pg_run_step; "X samples/s" times seq for a model whose input is not tokens). Knobs: BENCH_STEPS (15), BENCH_WARMUP (5),
# BENCH_DIR (build-cuda/bench), BENCH_CHECKPOINT (never, as PyTorch's anchors; or always,
# except_last, model: the model file's own), BENCH_RUN_S (a pipegen run's time limit, 180),
# BENCH_COMPILE_S (torch.compile's, 300), BENCH_DEADLINE (seconds since the
# epoch: no run goes past it; those that cannot start are n/a),
# BENCH_COMPILE_MIN_S (torch.compile runs only when this many seconds, 90,
# are left before BENCH_DEADLINE: else it is left out, n/a and no failure),
# BENCH_ROWS (the rows to run, of peak p1 p1n p4 p4t conv convn eager compile,
# always in that order: the GEMM peak and pipegen's rows first, torch.compile,
# the slowest to start, last; default all: the others are n/a, not failures),
# BENCH_DEVICE (the GPU's name for bench.json, as the caller's facts have it;
# else gemm_peak's, else nvidia-smi's), BENCH_MODEL (another .pipe GPT with
# `split` lines and `const seq`), PG_GPU_FAKE=cpu (the CPU runtime stands in,
# gemm_peak and the torch rows are left out: tests/gpu_scripts.t checks the
# script so) or emu (the emulated CUDA runtime, build/emu, likewise:
# tools/gpu_bundle/device_check.sh's test). Uses what is built (build/pipegen,
# build/piperun, build-cuda/libpgrt_cuda.a, build-cuda/bench/gemm_peak.o),
# never make; links with tools/gpu_env.sh's libraries (or LDLIBS_CUDA).
# Each row's seconds go to stderr ("bench-gpu: row p1: 9 s"). Exit 0 when
# every row chosen ran (or was left out, saying why, as torch.compile without
# its time), 1 when one failed (its log's tail is printed; the torch rows are
# "n/a" without a Python that has torch with CUDA) or BENCH_ROWS names a row
# that does not exist.
set -u
TOP=$(cd "$(dirname "$0")/../.." && pwd)
. "$TOP/tools/gpu_env.sh"
STEPS=${BENCH_STEPS:-15}
WARMUP=${BENCH_WARMUP:-5}
DIR=${BENCH_DIR:-$TOP/build-cuda/bench}
CC=${CC:-cc}
CFLAGS_B="-std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -O2 -Wall -Wextra"
MODEL=${BENCH_MODEL:-$TOP/examples/gpt2_small.pipe}
CONV_MODEL=${BENCH_CONV_MODEL:-$TOP/examples/resnet.pipe}
FAKE=${PG_GPU_FAKE:-}
PIPEGEN=$TOP/build/pipegen
PIPERUN=$TOP/build/piperun
CUDALIB=${CUDALIB:-$TOP/build-cuda/libpgrt_cuda.a}
GEMM_OBJ=${GEMM_OBJ:-$TOP/build-cuda/bench/gemm_peak.o}
# tmo LIMIT: "timeout -k 5 N" with N = LIMIT, or the seconds left before
# BENCH_DEADLINE (seconds since the epoch) when fewer; "none" when under 5
# are left (the caller does not run then: GNU timeout reads 0 as no limit at
# all); "env" (no limit) only where the system has no timeout
tmo() {
    t_n=$1
    if [ -n "${BENCH_DEADLINE:-}" ]; then
        t_left=$((BENCH_DEADLINE - $(date +%s)))
        [ $t_left -lt "$t_n" ] && t_n=$t_left
    fi
    if [ "$t_n" -lt 5 ]; then echo none; elif command -v timeout >/dev/null 2>&1; then echo "timeout -k 5 $t_n"; else echo env; fi
}

fail() { echo "bench-gpu: $*" >&2; exit 1; }
case $STEPS in *[!0-9]*|'') fail "BENCH_STEPS must be a number" ;; esac
case $WARMUP in *[!0-9]*|'') fail "BENCH_WARMUP must be a number" ;; esac
[ "$STEPS" -gt "$WARMUP" ] || fail "BENCH_STEPS ($STEPS) must exceed BENCH_WARMUP ($WARMUP)"
ROWS_ALL="peak p1 p1n p4 p4t conv convn eager compile"
for r in ${BENCH_ROWS:-}; do
    case " $ROWS_ALL " in *" $r "*) ;; *) fail "BENCH_ROWS: no row '$r' (the rows: $ROWS_ALL)" ;; esac
done
CKPT=${BENCH_CHECKPOINT:-never}
case $CKPT in always | never | except_last | model) ;; *) fail "BENCH_CHECKPOINT: no mode '$CKPT' (always, never, except_last, or model: the model file's own)" ;; esac
mkdir -p "$DIR" || fail "cannot make $DIR"
case $FAKE in
cpu)
    CUDALIB=$TOP/build/libpgrt_cpu.a GEMM_OBJ=$CUDALIB LDLIBS_CUDA="-lpthread -lm"
    echo "# PG_GPU_FAKE=cpu: the CPU runtime stands in for the CUDA one (this checks the script, not a GPU)" ;;
emu)
    CUDALIB=$TOP/build/emu/libpgrt_cuemu.a GEMM_OBJ=$CUDALIB LDLIBS_CUDA=${LDLIBS_EMU:--lstdc++ -lblas -lpthread -lm}
    echo "# PG_GPU_FAKE=emu: the emulated CUDA runtime (tests/gpu/emu): this checks the script, its speed means nothing" ;;
esac
for f in "$PIPEGEN" "$PIPERUN" "$CUDALIB" "$GEMM_OBJ" "$MODEL" "$CONV_MODEL"; do
    [ -e "$f" ] || fail "$f is missing (in a checkout: make CUDA=1 build-cuda/libpgrt_cuda.a build-cuda/bench/gemm_peak.o; or use the GPU bundle)"
done
if [ -z "${LDLIBS_CUDA:-}" ]; then
    gpu_env_find "$DIR/lib" "${BUILT_CUDA_MAJOR:-}"
    printf '%s\n' "$GPU_ENV_REPORT" | sed 's/^/# /'
    [ -z "$GPU_ENV_MISSING" ] || fail "not found:$GPU_ENV_MISSING"
fi
PY=${PY_TORCH:-}
if [ -z "$PY" ]; then
    for p in $(ge_pythons); do "$p" -c 'import torch' 2>/dev/null && { PY=$p; break; }; done
fi
PY_ANY=$PY
[ -n "$PY_ANY" ] || PY_ANY=$(ge_pythons | head -n 1)

# row NAME: is the row NAME among BENCH_ROWS (default: every row)? A row left
# out is n/a and no failure, its log says so
row() {
    case " ${BENCH_ROWS:-$ROWS_ALL} " in *" $1 "*) return 0 ;; esac
    return 1
}
left_out() { echo "$1: left out (BENCH_ROWS=${BENCH_ROWS:-})" >"$DIR/$1.log"; echo n/a; }
# row_took NAME T0: a line on stderr with the row's seconds (what sizes a GPU
# session's bench phase)
row_took() { echo "bench-gpu: row $1: $(($(date +%s) - $2)) s" >&2; }

# The checkpoint mode of every pipegen row (BENCH_CHECKPOINT, default never):
# PyTorch's anchors keep every activation, so the pipegen rows do too unless
# asked otherwise: the same work on both sides (checkpointing changes no result
# bit, only time and memory; the example's except_last trades a recomputed
# forward for memory, which one GPU of 80 GB or more does not need here).
# (checked with the other knobs, above)

# variant N [MODEL NAME]: the model (MODEL, default the GPT) on N stages (1: `stages = 1`,
# any split lines removed), with checkpoint = CKPT (model: the model's own),
# linked for CUDA into $DIR/NAME-N (NAME: gpt2)
variant() {
    v_m=${2:-$MODEL}
    d=$DIR/${3:-gpt2}-$1
    rm -rf "$d" && mkdir -p "$d/bin" || return 1
    v_ck='s/checkpoint = [a-z_]*/checkpoint = '"$CKPT"'/'
    [ "$CKPT" = model ] && v_ck='s/^//'
    if [ "$1" = 1 ]; then sed -e '/^split *\(#.*\)*$/d' -e 's/stages = [0-9]*/stages = 1/' -e "$v_ck" "$v_m" >"$d/model.pipe"
    else sed -e "$v_ck" "$v_m" >"$d/model.pipe"; fi
    "$PIPEGEN" gen "$d/model.pipe" -o "$d/gen" >"$d/gen.log" 2>&1 || { cat "$d/gen.log"; return 1; }
    for f in "$d"/gen/stage*.c; do
        # shellcheck disable=SC2086
        $CC $CFLAGS_B -I"$TOP/runtime/core" -I"$d/gen" -o "$d/bin/$(basename "$f" .c)" "$f" "$CUDALIB" $LDLIBS_CUDA ||
            return 1
    done
}
variant 1 || fail "$(basename "$MODEL"), 1 stage: generate/link failed"
variant 4 || fail "$(basename "$MODEL"), 4 stages: generate/link failed"
# the convolutional rows: cuDNN's convolutions, which the emulator does not have
CONV_WHY=""
[ "$FAKE" = emu ] && CONV_WHY="left out (PG_GPU_FAKE=emu: the emulator's speed means nothing; conv_small trains emulated in tests/cuda_emu_train.t)"
if [ -z "$CONV_WHY" ] && { row conv || row convn; }; then
    variant 1 "$CONV_MODEL" conv || fail "$(basename "$CONV_MODEL"), 1 stage: generate/link failed"
fi
if [ -z "$FAKE" ]; then
    # shellcheck disable=SC2086
    $CC -o "$DIR/gemm_peak" "$GEMM_OBJ" $LDLIBS_CUDA || fail "gemm_peak does not link"
fi
SEQ=$(sed -n 's/^const seq = \([0-9]*\).*/\1/p' "$MODEL")
FLOPS_TOK=""
[ -n "$PY_ANY" ] && FLOPS_TOK=$("$PY_ANY" -c '
import json, math, sys
p = json.load(open(sys.argv[1]))
n = sum(math.prod(q["shape"]) for q in p["params"] if not q["buffer"])
att = [l for l in p["layers"] if l["kind"] == "attention"]
T = p["input"]["shape"][0]; d = att[0]["in"][-1]
print(6 * n + 12 * len(att) * T * d)' "$DIR/gpt2-1/gen/plan.json")
ARENA=$(sed -n 's/^#define STAGE0_ARENA_BYTES INT64_C(\([0-9]*\)).*/\1/p' "$DIR/gpt2-1/gen/"*.h)

# pipegen NAME DIR [args]: tokens/s of one run (median of the steps after
# WARMUP; samples/s with PER = 1 in the environment); NAME.log is its output,
# NAME.loss its losses (per step, then final)
pipegen_run() {
    p_name=$1 p_d=$2
    shift 2
    p_tmo=$(tmo "${BENCH_RUN_S:-180}")
    [ "$p_tmo" != none ] || { echo "$p_name: not run, out of time (BENCH_DEADLINE)" | tee "$DIR/$p_name.log" >&2; return 1; }
    $p_tmo "$PIPERUN" "$p_d/bin" -- --steps "$STEPS" --log-every 1 --timeout 60 "$@" >"$DIR/$p_name.log" 2>&1 ||
        { echo "$p_name failed (status $?; 124: over its time limit):" >&2; tail -20 "$DIR/$p_name.log" >&2; return 1; }
    sed -n 's/^.*step \([0-9]*\)\/[0-9]*  *loss \([^ ]*\) .*$/\1 \2/p; s/^.*\(final loss .*\)$/\1/p' "$DIR/$p_name.log" \
        >"$DIR/$p_name.loss"
    sed -n 's/^.*step \([0-9]*\)\/[0-9]*  *loss .*  \([0-9.]*\) \(samples\|tokens\)\/s  .*$/\1 \2 \3/p' "$DIR/$p_name.log" |
        awk -v w="$WARMUP" -v seq="${PER:-$SEQ}" '$1 > w { v[n++] = $3 == "tokens" ? $2 : $2 * seq }
            END { if (!n) exit 1; for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
                  printf "%.1f\n", n % 2 ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2 }'
}

torch_run() {
    [ -n "$PY" ] || { echo "torch-$1: no Python with torch found" >"$DIR/torch-$1.log"; echo n/a; return; }
    [ -z "$FAKE" ] || { echo "torch-$1: left out (PG_GPU_FAKE=$FAKE)" >"$DIR/torch-$1.log"; echo n/a; return; }
    t_tmo=$(tmo "${BENCH_RUN_S:-180}")
    [ "$1" = compile ] && t_tmo=$(tmo "${BENCH_COMPILE_S:-300}")
    [ "$t_tmo" != none ] || { echo "torch-$1: not run, out of time (BENCH_DEADLINE)" >"$DIR/torch-$1.log"; echo n/a; return 1; }
    $t_tmo "$PY" "$TOP/bench/gpu/torch_gpt2.py" --plan "$DIR/gpt2-1/gen/plan.json" --mode "$1" --steps "$STEPS" \
        --warmup "$WARMUP" >"$DIR/torch-$1.log" 2>&1 || { tail -5 "$DIR/torch-$1.log" | sed 's/^/# /' >&2; echo n/a; return 1; }
    sed -n 's/^.*tokens_per_s \([0-9.]*\).*$/\1/p' "$DIR/torch-$1.log"
}
# compile_time_left: is there time for torch.compile (BENCH_COMPILE_MIN_S
# before BENCH_DEADLINE)? Else its log says why, and it is no failure: it
# comes last so that it never takes the other rows' time
compile_time_left() {
    [ -n "${BENCH_DEADLINE:-}" ] || return 0
    c_left=$((BENCH_DEADLINE - $(date +%s)))
    [ $c_left -ge "${BENCH_COMPILE_MIN_S:-90}" ] && return 0
    echo "torch-compile: left out, $c_left s left before BENCH_DEADLINE, under BENCH_COMPILE_MIN_S (${BENCH_COMPILE_MIN_S:-90})" \
        >"$DIR/torch-compile.log"
    return 1
}

# the rows, in the order of ROWS_ALL
rc=0
P1=n/a P1N=n/a P4=n/a P4T=n/a CV1=n/a CV1N=n/a TE=n/a TC=n/a
t_r=$(date +%s)
if [ -n "$FAKE" ]; then
    echo "gemm_peak: left out (PG_GPU_FAKE=$FAKE)" >"$DIR/gemm_peak.log"
elif ! row peak; then
    left_out gemm_peak >/dev/null
else
    g_tmo=$(tmo 60)
    if [ "$g_tmo" = none ]; then
        echo "gemm_peak: not run, out of time (BENCH_DEADLINE)" | tee "$DIR/gemm_peak.log" >&2
        rc=1
    else
        $g_tmo "$DIR/gemm_peak" >"$DIR/gemm_peak.log" 2>&1 || { cat "$DIR/gemm_peak.log" >&2; rc=1; }
    fi
    row_took peak "$t_r"
fi
t_r=$(date +%s)
if row p1; then P1=$(pipegen_run pipegen-1stage "$DIR/gpt2-1") || { rc=1; P1=n/a; }; row_took p1 "$t_r"
else left_out pipegen-1stage >/dev/null; fi
t_r=$(date +%s)
if row p1n; then P1N=$(pipegen_run pipegen-1stage-nograph "$DIR/gpt2-1" --no-graph) || { rc=1; P1N=n/a; }; row_took p1n "$t_r"
else left_out pipegen-1stage-nograph >/dev/null; fi
t_r=$(date +%s)
if row p4; then P4=$(pipegen_run pipegen-4stage "$DIR/gpt2-4") || { rc=1; P4=n/a; }; row_took p4 "$t_r"
else left_out pipegen-4stage >/dev/null; fi
TR_STEPS=$((STEPS - WARMUP))
t_r=$(date +%s)
if row p4t; then
    P4T=$(pipegen_run pipegen-4stage-traced "$DIR/gpt2-4" --trace "$DIR/p4.trace.json" --profile "$DIR/p4.profile.json" \
        --trace-steps "$TR_STEPS") || { rc=1; P4T=n/a; }
    row_took p4t "$t_r"
else
    left_out pipegen-4stage-traced >/dev/null
fi
if [ -n "$CONV_WHY" ]; then
    echo "conv-1stage: $CONV_WHY" >"$DIR/conv-1stage.log"; echo "conv-1stage-nograph: $CONV_WHY" >"$DIR/conv-1stage-nograph.log"
else
    t_r=$(date +%s)
    if row conv; then CV1=$(PER=1 pipegen_run conv-1stage "$DIR/conv-1") || { rc=1; CV1=n/a; }; row_took conv "$t_r"
    else left_out conv-1stage >/dev/null; fi
    t_r=$(date +%s)
    if row convn; then CV1N=$(PER=1 pipegen_run conv-1stage-nograph "$DIR/conv-1" --no-graph) || { rc=1; CV1N=n/a; }
        row_took convn "$t_r"
    else left_out conv-1stage-nograph >/dev/null; fi
fi
CSAME=false
[ -s "$DIR/conv-1stage.loss" ] && cmp -s "$DIR/conv-1stage.loss" "$DIR/conv-1stage-nograph.loss" && CSAME=true
# a torch row that fails counts (no Python with torch at all: n/a, noted)
t_r=$(date +%s)
if row eager; then TE=$(torch_run eager) || rc=1; row_took eager "$t_r"; else left_out torch-eager >/dev/null; fi
t_r=$(date +%s)
if ! row compile; then
    left_out torch-compile >/dev/null
elif compile_time_left; then
    TC=$(torch_run compile) || rc=1
    row_took compile "$t_r"
fi
PEAK=$(sed -n 's/^peak_tflops \([0-9.]*\)$/\1/p' "$DIR/gemm_peak.log")
# the GPU's name: the caller's facts, else gemm_peak's, else nvidia-smi's
DEVICE=${BENCH_DEVICE:-$(sed -n 's/^device //p' "$DIR/gemm_peak.log")}
if [ -z "$DEVICE" ] && [ -z "$FAKE" ] && command -v nvidia-smi >/dev/null 2>&1; then
    DEVICE=$(timeout 10 nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null | head -n 1)
fi

# the prediction of the traced run from its own profile
TRACE_M=""; TRACE_P=""
if [ "$P4T" != n/a ] && "$PIPEGEN" trace "$DIR/p4.trace.json" "$DIR/gpt2-4/model.pipe" --balance "$DIR/p4.profile.json" \
    --svg "$DIR/p4.svg" >"$DIR/p4.pred" 2>"$DIR/p4.pred.err"; then
    set -- $(awk 'function ms(v, u) { return v * (u == "s" ? 1000 : u == "us" ? 0.001 : 1) }
        /^measured step/ { m = ms($3, $4); for (i = 1; i <= NF; i++) if ($i == "predicted") p = ms($(i + 1), $(i + 2)) }
        END { if (m > 0 && p > 0) print m, p }' "$DIR/p4.pred")
    TRACE_M=${1:-}; TRACE_P=${2:-}
elif [ "$P4T" != n/a ]; then
    echo "pipegen trace failed: $(head -3 "$DIR/p4.pred.err" 2>/dev/null)" >&2
fi
# graph vs --no-graph: the same losses, bit for bit (every step's and the final %.17g)
SAME=false
[ -s "$DIR/pipegen-1stage.loss" ] && cmp -s "$DIR/pipegen-1stage.loss" "$DIR/pipegen-1stage-nograph.loss" && SAME=true
# memory: the 1-stage run's report line (pg_backend_report)
PEAKB=$(sed -n 's/^.*GPU memory: arena [0-9]* bytes (the plan), \([0-9]*\) bytes in use.*$/\1/p' "$DIR/pipegen-1stage.log" | head -n 1)
# ... and what of the rest is the runtime's own (named) and the libraries' and the driver's
OWNB=$(sed -n 's/^.*GPU memory beside the arena at that peak: \([0-9]*\) bytes of the runtime.s own.*$/\1/p' "$DIR/pipegen-1stage.log" | head -n 1)
LIBB=$(sed -n 's/^.*GPU memory beside the arena at that peak: .*; the rest, \(-*[0-9]*\) bytes, the CUDA libraries.*$/\1/p' "$DIR/pipegen-1stage.log" | head -n 1)

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.4f", a / b; else printf "n/a" }'; }
mfu() { awk -v t="$1" -v f="${FLOPS_TOK:-0}" -v p="${PEAK:-0}" 'BEGIN { if (t + 0 > 0 && f + 0 > 0 && p + 0 > 0) printf "%.4f", t * f / (p * 1e12); else printf "n/a" }'; }
R_E=$(ratio "$P1" "$TE"); R_C=$(ratio "$P1" "$TC"); R_4=$(ratio "$P1" "$P4"); R_G=$(ratio "$P1" "$P1N")
R_T=$(ratio "$TRACE_M" "$TRACE_P"); R_M=$(ratio "$PEAKB" "$ARENA")

echo "$(basename "$MODEL"), seq $SEQ, $STEPS steps (median after $WARMUP); ${DEVICE:-unknown device}"
printf '%-26s %14s\n' config tokens/s
for row in "pipegen-1stage $P1" "pipegen-1stage-nograph $P1N" "pipegen-4stage $P4" "pipegen-4stage-traced $P4T" \
    "torch-eager ${TE:-n/a}" "torch-compile ${TC:-n/a}"; do
    printf '%-26s %14s\n' $row
done
printf '%-26s %14s  %s\n' conv-1stage "$CV1" "samples/s, $(basename "$CONV_MODEL")" \
    conv-1stage-nograph "$CV1N" "samples/s, same bits: $CSAME"
echo "bf16 GEMM peak (cuBLAS, measured): ${PEAK:-n/a} TFLOP/s; model FLOPs per token: ${FLOPS_TOK:-n/a}"
printf '%-44s %10s  %s\n' measure value target \
    "pipegen-1stage / torch-eager" "$R_E" "" \
    "pipegen-1stage / torch-compile" "$R_C" ">= 1.2" \
    "MFU pipegen-1stage (of the measured peak)" "$(mfu "$P1")" ">= 0.40" \
    "MFU torch-compile" "$(mfu "$TC")" "" \
    "step 4 stages / 1 stage (one GPU, CUDA IPC)" "$(ratio "$P1" "$P4")" "<= 1.05" \
    "graphs speed-up (graph / --no-graph)" "$R_G" "> 1, same bits: $SAME" \
    "measured / predicted step (4 stages, trace)" "$R_T" "0.9 .. 1.1 (${TRACE_M:-?} / ${TRACE_P:-?} ms)" \
    "peak device memory / plan arena (1 stage)" "$R_M" "<= 1.02 (${PEAKB:-?} / ${ARENA:-?} bytes)" \
    "... beside the arena: the runtime's own" "${OWNB:-n/a}" "bytes (cuBLAS workspace, scratch, ...)" \
    "... beside the arena: the libraries' and the driver's" "${LIBB:-n/a}" "bytes"
echo "note: CUDA stage traces and profiles are device time (CUDA events; runtime/cuda/README.md, \"Device time\")"

{
    echo "{"
    printf '%s\n' "  \"device\": $(json_str "${DEVICE:-}"),"
    printf '%s\n' "  \"model\": $(json_str "$(basename "$MODEL") on 1 and 4 stages, seq $SEQ"), \"steps\": $STEPS, \"warmup\": $WARMUP,"
    printf '%s\n' "  \"tokens_per_s\": {\"pipegen_1stage\": $(json_num "$P1"), \"pipegen_1stage_nograph\": $(json_num "$P1N"),"
    printf '%s\n' "    \"pipegen_4stage\": $(json_num "$P4"), \"pipegen_4stage_traced\": $(json_num "$P4T"),"
    printf '%s\n' "    \"torch_eager\": $(json_num "${TE:-}"), \"torch_compile\": $(json_num "${TC:-}")},"
    printf '%s\n' "  \"ratio_vs_torch_eager\": $(json_num "$R_E"), \"ratio_vs_torch_compile\": $(json_num "$R_C"),"
    printf '%s\n' "  \"gemm_peak_tflops\": $(json_num "${PEAK:-}"), \"model_flops_per_token\": $(json_num "${FLOPS_TOK:-}"),"
    printf '%s\n' "  \"mfu\": {\"pipegen_1stage\": $(json_num "$(mfu "$P1")"), \"pipegen_4stage\": $(json_num "$(mfu "$P4")"),"
    printf '%s\n' "    \"torch_eager\": $(json_num "$(mfu "${TE:-}")"), \"torch_compile\": $(json_num "$(mfu "${TC:-}")")},"
    printf '%s\n' "  \"step_4stage_over_1stage\": $(json_num "$R_4"),"
    printf '%s\n' "  \"graph_speedup\": $(json_num "$R_G"), \"graph_same_bits\": $SAME,"
    printf '%s\n' "  \"trace_measured_ms\": $(json_num "$TRACE_M"), \"trace_predicted_ms\": $(json_num "$TRACE_P"), \"trace_ratio\": $(json_num "$R_T"),"
    printf '%s\n' "  \"arena_bytes\": $(json_num "${ARENA:-}"), \"peak_bytes\": $(json_num "${PEAKB:-}"), \"memory_ratio\": $(json_num "$R_M"),"
    printf '%s\n' "  \"runtime_own_bytes\": $(json_num "${OWNB:-}"), \"libraries_bytes\": $(json_num "${LIBB:-}"),"
    printf '%s\n' "  \"conv\": {\"model\": $(json_str "$(basename "$CONV_MODEL") on 1 stage"), \"samples_per_s_1stage\": $(json_num "$CV1"),"
    printf '%s\n' "    \"samples_per_s_1stage_nograph\": $(json_num "$CV1N"), \"same_bits\": $CSAME},"
    printf '%s\n' "  \"targets\": {\"ratio_vs_torch_compile\": \">= 1.2\", \"mfu_pipegen_1stage\": \">= 0.40\","
    printf '%s\n' "    \"step_4stage_over_1stage\": \"<= 1.05\", \"graph_speedup\": \"> 1 with same bits\","
    printf '%s\n' "    \"trace_ratio\": \"0.9 .. 1.1\", \"memory_ratio\": \"<= 1.02\"},"
    printf '%s\n' "  \"complete\": $([ $rc = 0 ] && echo true || echo false)"
    echo "}"
} >"$DIR/bench.json"
echo "bench-gpu: figures in $DIR/bench.json"
exit $rc
