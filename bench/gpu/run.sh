#!/bin/sh
# bench/gpu/run.sh — `make bench-gpu`: GPT-2 small (examples/gpt2_small.pipe,
# precision = bf16, batch 8 x 1024 tokens, 4 micro-batches) on one CUDA GPU:
#
#   pipegen-1stage         the model cut to 1 stage, CUDA graphs (default)
#   pipegen-1stage-nograph the same with --no-graph (every op eager)
#   pipegen-4stage         the example's 4 stages as 4 processes sharing the GPU (CUDA IPC)
#   torch-eager            bench/gpu/torch_gpt2.py: the same model in PyTorch, bf16 autocast
#   torch-compile          the same under torch.compile
#   gemm_peak              bench/gpu/gemm_peak.c: the measured bf16 cuBLAS GEMM peak
#
# and prints tokens/s of each, the ratios (pipegen / torch-eager, pipegen /
# torch-compile, 4 stages / 1 stage, graph / no-graph) and MFU = model FLOP/s /
# measured bf16 GEMM peak, with model FLOPs per token = 6 N + 12 L T d (N every
# trained parameter, the tied table included since it is also the logits GEMM;
# recomputation of checkpointed micro-batches not counted, so MFU, not HFU).
#
# A pipegen run's tokens/s is the median over steps after the first WARMUP of
# the last stage's per-step "X samples/s" (timed around pg_run_step) times
# seq. Knobs: BENCH_STEPS (20), BENCH_WARMUP (5), BENCH_DIR (build-cuda/bench).
# Exit 0 when everything ran, 1 when a build or run failed (the log's tail is
# printed). Needs a CUDA GPU and python3-torch with CUDA for the torch rows
# (without them those rows say "n/a" and their ratios are left out).
set -u
TOP=$(cd "$(dirname "$0")/../.." && pwd)
STEPS=${BENCH_STEPS:-20}
WARMUP=${BENCH_WARMUP:-5}
DIR=${BENCH_DIR:-$TOP/build-cuda/bench}
PY=${PYTHON:-/usr/bin/python3}
CC=${CC:-cc}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
LDLIBS_CUDA="-L$CUDA_HOME/lib64 -Wl,-rpath,$CUDA_HOME/lib64 -lcudart -lcublas -lnccl -lstdc++ -lpthread -lm"
CFLAGS_B="-std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -O2 -Wall -Wextra -Werror"
MODEL=$TOP/examples/gpt2_small.pipe

fail() { echo "bench-gpu: $*" >&2; exit 1; }
case $STEPS in *[!0-9]*|'') fail "BENCH_STEPS must be a number" ;; esac
case $WARMUP in *[!0-9]*|'') fail "BENCH_WARMUP must be a number" ;; esac
[ "$STEPS" -gt "$WARMUP" ] || fail "BENCH_STEPS ($STEPS) must exceed BENCH_WARMUP ($WARMUP)"
mkdir -p "$DIR" || fail "cannot make $DIR"
cd "$TOP" || exit 1

make --no-print-directory build/pipegen build/piperun >"$DIR/make.log" 2>&1 &&
    make --no-print-directory CUDA=1 build-cuda/libpgrt_cuda.a build-cuda/bench/gemm_peak >>"$DIR/make.log" 2>&1 ||
    { tail -20 "$DIR/make.log"; fail "build failed"; }

# variant N: gpt2_small on N stages (1: `stages = 1`, any split lines removed), linked for CUDA
variant() {
    d=$DIR/gpt2-$1
    rm -rf "$d" && mkdir -p "$d/bin" || return 1
    if [ "$1" = 1 ]; then sed -e '/^split *$/d' -e 's/stages = [0-9]*/stages = 1/' "$MODEL" >"$d/gpt2_small.pipe"; else cp "$MODEL" "$d/gpt2_small.pipe"; fi
    build/pipegen gen "$d/gpt2_small.pipe" -o "$d/gen" >"$d/gen.log" 2>&1 || { cat "$d/gen.log"; return 1; }
    for f in "$d"/gen/stage*.c; do
        $CC $CFLAGS_B -Iruntime/core -I"$d/gen" -o "$d/bin/$(basename "$f" .c)" "$f" build-cuda/libpgrt_cuda.a \
            $LDLIBS_CUDA || return 1
    done
}
variant 1 || fail "gpt2_small, 1 stage: generate/link failed"
variant 4 || fail "gpt2_small, 4 stages: generate/link failed"
SEQ=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["input"]["shape"][0])' "$DIR/gpt2-1/gen/plan.json")
FLOPS_TOK=$("$PY" -c '
import json, math, sys
p = json.load(open(sys.argv[1]))
n = sum(math.prod(q["shape"]) for q in p["params"] if not q["buffer"])
att = [l for l in p["layers"] if l["kind"] == "attention"]
T = p["input"]["shape"][0]; d = att[0]["in"][-1]
print(6 * n + 12 * len(att) * T * d)' "$DIR/gpt2-1/gen/plan.json")

# pipegen NAME DIR [args]: tokens/s of one run (median of the steps after WARMUP)
pipegen_run() {
    _name=$1 _d=$2
    shift 2
    build/piperun "$_d/bin" -- --steps "$STEPS" --log-every 1 --timeout 120 "$@" >"$DIR/$_name.log" 2>&1 ||
        { tail -20 "$DIR/$_name.log"; return 1; }
    sed -n 's/^.*step \([0-9]*\)\/[0-9]*  *loss [^ ]*  *\([0-9.]*\) samples\/s.*$/\1 \2/p' "$DIR/$_name.log" |
        awk -v w="$WARMUP" -v seq="$SEQ" '$1 > w { v[n++] = $2 * seq }
            END { if (!n) exit 1; for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
                  printf "%.1f\n", n % 2 ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2 }'
}

rc=0
P1=$(pipegen_run pipegen-1stage "$DIR/gpt2-1") || { echo "pipegen-1stage failed"; rc=1; P1=n/a; }
P1N=$(pipegen_run pipegen-1stage-nograph "$DIR/gpt2-1" --no-graph) || { echo "pipegen-1stage-nograph failed"; rc=1; P1N=n/a; }
P4=$(pipegen_run pipegen-4stage "$DIR/gpt2-4") || { echo "pipegen-4stage failed"; rc=1; P4=n/a; }
torch_run() {
    "$PY" bench/gpu/torch_gpt2.py --plan "$DIR/gpt2-1/gen/plan.json" --mode "$1" --steps "$STEPS" \
        --warmup "$WARMUP" >"$DIR/torch-$1.log" 2>&1 || { tail -5 "$DIR/torch-$1.log" | sed 's/^/# /' >&2; echo n/a; return; }
    sed -n 's/^.*tokens_per_s \([0-9.]*\).*$/\1/p' "$DIR/torch-$1.log"
}
TE=$(torch_run eager)
TC=$(torch_run compile)
build-cuda/bench/gemm_peak >"$DIR/gemm_peak.log" 2>&1 || { cat "$DIR/gemm_peak.log"; rc=1; }
PEAK=$(sed -n 's/^peak_tflops \([0-9.]*\)$/\1/p' "$DIR/gemm_peak.log")

echo "GPT-2 small, bf16, batch 8 x $SEQ tokens, $STEPS steps (median after $WARMUP); $(sed -n 's/^device //p' "$DIR/gemm_peak.log")"
printf '%-24s %14s\n' config tokens/s
for row in "pipegen-1stage $P1" "pipegen-1stage-nograph $P1N" "pipegen-4stage $P4" "torch-eager $TE" "torch-compile $TC"; do
    printf '%-24s %14s\n' $row
done
echo "bf16 GEMM peak (cuBLAS, measured): ${PEAK:-n/a} TFLOP/s; model FLOPs per token: $FLOPS_TOK"
# ratio NAME A B: A / B when both are numbers
ratio() {
    awk -v n="$1" -v a="$2" -v b="$3" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%-34s %.3f\n", n, a / b; else printf "%-34s n/a\n", n }'
}
ratio "pipegen-1stage / torch-eager" "$P1" "$TE"
ratio "pipegen-1stage / torch-compile" "$P1" "$TC"
ratio "pipegen-4stage / pipegen-1stage" "$P4" "$P1"
ratio "graph / no-graph (1 stage)" "$P1" "$P1N"
for row in "pipegen-1stage $P1" "pipegen-4stage $P4" "torch-eager $TE" "torch-compile $TC"; do
    set -- $row
    awk -v n="MFU $1" -v t="$2" -v f="$FLOPS_TOK" -v p="${PEAK:-0}" \
        'BEGIN { if (t + 0 > 0 && p + 0 > 0) printf "%-34s %.1f%%\n", n, 100 * t * f / (p * 1e12); else printf "%-34s n/a\n", n }'
done
exit $rc
