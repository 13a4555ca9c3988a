#!/bin/sh
# tests/cuda_compile.t — every CUDA file (runtime/cuda/*.cu and the GPU test
# program tests/gpu/*.cu) compiles with nvcc for sm_90 under -Wall -Wextra
# -Werror and the static gates of the Makefile's NVCCFLAGS (ptxas:
# -warn-spills, -warn-lmem-usage, -Werror: no kernel spills registers or uses
# local memory), GPU or not. Runs `make -k cuda` (incremental: `make test` has
# just built the objects, so this is quick) and reports one line per file;
# then shows the gate bites: a kernel that indexes a local array at run time
# does not compile under those flags.
. "$(dirname "$0")/lib.sh"
NVCC=${NVCC:-${CUDA_HOME:-/usr/local/cuda}/bin/nvcc}
if [ ! -x "$NVCC" ]; then
    echo "1..0 # SKIP nvcc not found at $NVCC"
    exit 0
fi
cd "$TOP" || exit 1
log=$(make --no-print-directory -k NVCC="$NVCC" cuda 2>&1)
rc=$?
for f in runtime/cuda/*.cu tests/gpu/*.cu; do
    [ -f "$f" ] || continue
    case $f in
    runtime/cuda/*) o=build-cuda/cuda/$(basename "$f" .cu).o ;;
    *) o=build-cuda/cuda-tests/$(basename "$f" .cu).o ;;
    esac
    if [ -f "$o" ] && ! printf '%s\n' "$log" | grep -q "\[.*$o\] Error"; then
        ok 0 "$f compiles"
    else
        ok 1 "$f compiles"
        printf '%s\n' "$log" | grep -F "$f" | head -20 | sed 's/^/# /'
    fi
done
ok $rc "make cuda succeeds"
[ $rc = 0 ] || printf '%s\n' "$log" | tail -20 | sed 's/^/# /'
T=$(mktemp -d /tmp/pg-cuda-gate.XXXXXX)
trap 'rm -rf "$T"' EXIT
cat >"$T/lmem.cu" <<'EOT'
__global__ void lmem_kernel(float *o, int i)
{
    float a[256]; /* too big for registers, and indexed at run time: local memory */
    for (int j = 0; j < 256; j++)
        a[j] = o[j] * (float)j;
    for (int k = 0; k < 8; k++)
        a[(i + k * 37) & 255] += o[k];
    float s = 0.0f;
    for (int j = 0; j < 256; j++)
        s += a[j] * a[255 - j];
    o[0] = s;
}
EOT
flags=$(make -s --no-print-directory nvccflags)
# shellcheck disable=SC2086
"$NVCC" $flags -c -o "$T/lmem.o" "$T/lmem.cu" >"$T/lmem.log" 2>&1
st=$?
[ $st != 0 ] && grep -qi 'local memory' "$T/lmem.log"
ok $? "the static gate bites: a kernel using local memory does not compile under NVCCFLAGS (exit $st: $(grep -im1 'local memory' "$T/lmem.log" | cut -c1-120))"
done_testing
