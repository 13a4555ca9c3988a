#!/bin/sh
# tools/gpu_bundle.sh DIR [TARBALL] — assemble the GPU bundle (`make
# gpu-bundle`, docs/gpu.md "Build here, run on a GPU host") in DIR/pipegen-gpu/
# and, with TARBALL, pack it there (at most 20 MiB). Everything a bare GPU host
# needs beyond the NVIDIA driver, the CUDA toolkit, cuBLAS, NCCL and a C
# compiler:
#   device_check.sh OUT              the one command a GPU session runs (6 minutes)
#   device_rerun.sh OUT SECTION      one targeted rerun after it
#   run.sh, BUNDLE, README.md        the longer entry point, what it was built from
#   build/pipegen, build/piperun     static executables (any x86-64 Linux)
#   build-cuda/libpgrt_cuda.a        the CUDA stage runtime (nvcc -arch=sm_90:
#                                    sm_90 code and compute_90 PTX for newer GPUs)
#   build-cuda/rt-c/*.o              its C objects (to relink after a rebuild)
#   build-cuda/cuda-tests/test_ops_gpu.o  the op tests; build-cuda/bench/gemm_peak.o
#   runtime/, tests/gpu, bench/gpu   headers, CUDA sources (.cu, .cuh, and the
#                                    test sources they include: for
#                                    PG_REBUILD_CUDA), the test and benchmark
#                                    scripts and models
#   tests/gpu/ref/                   the CPU references, computed here
#                                    (tests/gpu/cpu_refs.sh: the host needs no
#                                    OpenBLAS), the op tests' CPU results among them
# Needs what `make gpu-bundle` builds first: build/ (pipegen objects, the CPU
# runtime), build-cuda/ (CUDA=1), build-cuda/cuda-tests/test_ops_gpu.o. Exit 0 or 1.
TOP=$(cd "$(dirname "$0")/.." && pwd)
die() { echo "gpu-bundle: $*" >&2; exit 1; }
[ $# -ge 1 ] && [ $# -le 2 ] || die "usage: tools/gpu_bundle.sh DIR [TARBALL]"
DIR=$1
TAR=${2:-}
MAX_BYTES=$((20 * 1024 * 1024))
CC=${CC:-cc}
NVCC=${NVCC:-${CUDA_HOME:-/usr/local/cuda}/bin/nvcc}
cd "$TOP" || exit 1
for f in build/obj/codegen/cli/main.o build/libpgfront.a build/obj/cmd/piperun.o build/libpgrt_cpu.a \
    build-cuda/libpgrt_cuda.a build-cuda/cuda-tests/test_ops_gpu.o build-cuda/bench/gemm_peak.o; do
    [ -f "$f" ] || die "$f is missing: run make gpu-bundle (it builds everything first)"
done
D=$DIR/pipegen-gpu
rm -rf "$D" && mkdir -p "$D" || die "cannot create $D"
mkdir -p "$D/build/cuda-tests" "$D/build-cuda/rt-c" "$D/build-cuda/bench" "$D/runtime/core" "$D/runtime/cuda" \
    "$D/runtime/cpu" "$D/tests/gpu" "$D/tests/models" "$D/bench/gpu" "$D/examples" "$D/tools/gpu_bundle" || die "cannot fill $D"

# static executables: no shared library at all, so any x86-64 Linux runs them
$CC -static -O2 -o "$D/build/pipegen" build/obj/codegen/cli/main.o build/libpgfront.a -lm &&
    $CC -static -O2 -o "$D/build/piperun" build/obj/cmd/piperun.o || die "static linking failed"
for b in pipegen piperun; do
    readelf -d "$D/build/$b" 2>/dev/null | grep -q NEEDED && die "build/$b is not static"
done

# the CUDA runtime and its parts
cp build-cuda/libpgrt_cuda.a "$D/build-cuda/" || die "copy failed"
for f in runtime/core/*.c; do # the objects of today's sources (not a stale one of a removed file)
    cp "build-cuda/obj/${f%.c}.o" "$D/build-cuda/rt-c/" || die "copy failed: build-cuda/obj/${f%.c}.o"
done
cp build-cuda/cuda-tests/test_ops_gpu.o "$D/build/cuda-tests/" &&
    cp build-cuda/bench/gemm_peak.o "$D/build-cuda/bench/" || die "copy failed"

# headers, CUDA sources, scripts, models
cp runtime/core/*.h "$D/runtime/core/" && cp runtime/cuda/*.h runtime/cuda/*.cuh runtime/cuda/*.cu "$D/runtime/cuda/" &&
    cp runtime/cpu/cpu_kernels.h "$D/runtime/cpu/" &&
    cp tests/lib.sh tests/tap.h "$D/tests/" &&
    cp tests/gpu/run_gpu_tests.sh tests/gpu/lib_gpu.sh tests/gpu/graph_smoke.c tests/gpu/test_ops_gpu.cu \
        tests/gpu/flash_refs.h tests/gpu/test_conv_ops.h "$D/tests/gpu/" &&
    cp tests/models/gpt_tiny.pipe tests/models/bn_small.pipe tests/models/oracle_llama.pipe tests/models/conv_small.pipe \
        "$D/tests/models/" &&
    cp bench/gpu/run.sh bench/gpu/torch_gpt2.py bench/gpu/gemm_peak.c "$D/bench/gpu/" &&
    cp examples/gpt2_small.pipe examples/resnet.pipe "$D/examples/" &&
    cp tools/gpu_env.sh tools/gpu_probe.c "$D/tools/" &&
    cp tools/gpu_bundle/prepare.sh tools/gpu_bundle/device_lib.sh "$D/tools/gpu_bundle/" &&
    cp tools/gpu_bundle/run.sh tools/gpu_bundle/device_check.sh tools/gpu_bundle/device_rerun.sh "$D/" &&
    cp tools/gpu_bundle/README.md "$D/README.md" || die "copy failed"

# the CPU references the GPU runs are compared with
tests/gpu/cpu_refs.sh "$D/tests/gpu/ref" >"$DIR/cpu_refs.log" 2>&1 || { cat "$DIR/cpu_refs.log" >&2; die "CPU references failed"; }

major=$("$NVCC" --version 2>/dev/null | sed -n 's/.*release \([0-9]*\)\..*/\1/p' | head -n 1)
[ -n "$major" ] || die "cannot tell the CUDA version of $NVCC"
{
    echo "# the pipegen GPU bundle: what it was built from (sourced by run.sh)"
    echo "BUILT_CUDA_MAJOR=$major"
    echo "BUILT_ARCH=sm_90"
    echo "BUILT_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo +changes)"
    echo "BUILT_NVCC='$("$NVCC" --version 2>/dev/null | tail -n 1)'"
} >"$D/BUNDLE"
chmod +x "$D/run.sh" "$D/device_check.sh" "$D/device_rerun.sh" "$D/tests/gpu/run_gpu_tests.sh" "$D/bench/gpu/run.sh"

if [ -n "$TAR" ]; then
    tar -C "$DIR" -czf "$TAR.tmp" pipegen-gpu && mv "$TAR.tmp" "$TAR" || die "cannot write $TAR"
    size=$(wc -c <"$TAR")
    [ "$size" -le $MAX_BYTES ] || die "$TAR is $size bytes, more than the 20 MiB a bundle may be"
    echo "gpu-bundle: $TAR ($size bytes): unpack it on the GPU host and run pipegen-gpu/run.sh OUTDIR"
else
    echo "gpu-bundle: $D"
fi
