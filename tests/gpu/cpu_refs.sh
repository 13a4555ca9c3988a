#!/bin/sh
# tests/gpu/cpu_refs.sh OUTDIR — the CPU runtime's results that the GPU tests
# compare against (tests/gpu/run_gpu_tests.sh): gpt_tiny on 1 stage, plain
# (cpu1), with a cosine lr (cpu1cos) and as a bf16 model (cpu1bf, which the
# CPU computes in f32), and tests/models/conv_small.pipe on 1 stage (cpuconv),
# STEPS steps each. Writes OUTDIR/NAME.loss (per-step
# losses, then the final loss), NAME.out (the run's output) and NAME.hash (the
# variant's plan hash, so a reference for another model is recognised).
# Needs build/pipegen, build/piperun and build/libpgrt_cpu.a: run
# where the project builds (`make gpu-bundle` does), so a GPU host needs none.
# Exit 0 when every reference was made.
. "$(dirname "$0")/../lib.sh"
OUT=${1:?usage: tests/gpu/cpu_refs.sh OUTDIR}
TOP=$(cd "$(dirname "$0")/../.." && pwd)
PIPEGEN=$TOP/build/pipegen
PIPERUN=$TOP/build/piperun
CPULIB=$TOP/build/libpgrt_cpu.a
CUDALIB=""
CC=${CC:-cc}
STEPS=${STEPS:-20}
GPU_MODEL=$TOP/tests/models/gpt_tiny.pipe
export OPENBLAS_NUM_THREADS=1
. "$TOP/tests/gpu/lib_gpu.sh"
for f in "$PIPEGEN" "$PIPERUN" "$CPULIB"; do
    [ -e "$f" ] || { echo "cpu_refs: $f is missing: run make first" >&2; exit 1; }
done
mkdir -p "$OUT" || exit 1
T=$(mktemp -d /tmp/pg-cpu-refs.XXXXXX)
trap 'rm -rf "$T"' EXIT
rc=0
# ref NAME VARIANT [sed-arg...]: one reference
ref() {
    r_name=$1 r_v=$2
    shift 2
    variant "$r_v" 1 "$@" || { echo "cpu_refs: $r_name: generating or linking failed" >&2; return 1; }
    train "$T/$r_v/cpu" "$T/$r_name" || { echo "cpu_refs: $r_name: the CPU run failed" >&2; return 1; }
    [ "$(grep -c '^[0-9]' "$T/$r_name.loss")" = "$STEPS" ] ||
        { echo "cpu_refs: $r_name: $STEPS losses expected" >&2; return 1; }
    cp "$T/$r_name.loss" "$T/$r_name.out" "$OUT/" && cp "$T/$r_v/hash" "$OUT/$r_name.hash"
}
ref cpu1 g1 || rc=1
ref cpu1cos g1cos -e "$COS" || rc=1
ref cpu1bf g1bf -e "$BF16" || rc=1
GPU_MODEL=$TOP/tests/models/conv_small.pipe VARIANT_DEL='/# K[1-7]$/d'
ref cpuconv c1 || rc=1
unset VARIANT_DEL
[ $rc = 0 ] && echo "cpu_refs: cpu1, cpu1cos, cpu1bf, cpuconv ($STEPS steps) in $OUT"
exit $rc
