#!/bin/sh
# tests/gpu_bundle.t — the GPU bundle (tools/gpu_bundle.sh, `make gpu-bundle`)
# without a GPU: it packs to at most 20 MiB; its pipegen and piperun are
# static and run; run.sh refuses a bad command line (2); on this machine (no
# NVIDIA driver) and under a fake driver that reports no device, no devices
# or only a PROHIBITED GPU it stops first with "gpu-bundle: no GPU found
# (CAUSE)", exit 3 and a results.json saying so, having run nothing else; with
# a fake driver that reports a GPU, `run.sh OUT check` finds the toolkit,
# cuBLAS and NCCL and links every CUDA binary; it finds cuBLAS and NCCL as the
# NVIDIA Python wheels lay them out (versioned names only, a Python's
# site-packages/nvidia/*/lib) when the toolkit lacks them, and names what is
# missing (exit 1) when NCCL is nowhere. tests/gpu_bundle_fresh.t runs the
# bundle in a fresh Debian root.
. "$(dirname "$0")/lib.sh"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$CUDA_HOME/bin/nvcc}
if [ ! -x "$NVCC" ]; then
    echo "1..0 # SKIP nvcc not found at $NVCC: the bundle carries nvcc-built objects"
    exit 0
fi
cd "$TOP" || exit 1
for f in build-cuda/libpgrt_cuda.a build-cuda/cuda-tests/test_ops_gpu.o build-cuda/bench/gemm_peak.o; do
    [ -f "$f" ] || make --no-print-directory CUDA=1 build-cuda/libpgrt_cuda.a build-cuda/bench/gemm_peak.o >/dev/null 2>&1
    [ -f "$f" ] || make --no-print-directory cuda >/dev/null 2>&1
done
T=$(mktemp -d /tmp/pg-bundle.XXXXXX)
trap 'rm -rf "$T"' EXIT
json_ok() { "${PYTHON:-/usr/bin/python3}" -c 'import json, sys; d = json.load(open(sys.argv[1])); print(d["status"])' "$1" 2>&1; }

tools/gpu_bundle.sh "$T/b" "$T/b.tar.gz" >"$T/make.log" 2>&1
st=$?
ok $st "tools/gpu_bundle.sh assembles and packs the bundle"
[ $st = 0 ] || sed 's/^/# /' "$T/make.log"
size=$(wc -c <"$T/b.tar.gz" 2>/dev/null || echo 0)
[ "$size" -gt 100000 ] && [ "$size" -le $((20 * 1024 * 1024)) ]
ok $? "the bundle is at most 20 MiB ($size bytes)"
mkdir -p "$T/u" && tar -C "$T/u" -xzf "$T/b.tar.gz"
B=$T/u/pipegen-gpu
[ -x "$B/run.sh" ] && [ -f "$B/build-cuda/libpgrt_cuda.a" ] && [ -f "$B/build/cuda-tests/test_ops_gpu.o" ] &&
    [ -s "$B/tests/gpu/ref/cpu1.loss" ] && [ -s "$B/tests/gpu/ref/cpu1bf.hash" ] && [ -f "$B/tests/models/gpt_tiny.pipe" ] && [ -f "$B/tests/models/bn_small.pipe" ] &&
    [ -x "$B/bench/gpu/run.sh" ] && [ -f "$B/examples/gpt2_small.pipe" ] && [ -f "$B/runtime/core/pg_stage.h" ] &&
    grep -q '^BUILT_CUDA_MAJOR=[0-9]' "$B/BUNDLE"
ok $? "it holds run.sh, the runtime, the op tests, the CPU references, the models, the scripts, the headers"
n_needed=$(readelf -d "$B/build/pipegen" "$B/build/piperun" 2>&1 | grep -c NEEDED)
out=$("$B/build/pipegen" check "$B/examples/gpt2_small.pipe" 2>&1)
[ "$n_needed" = 0 ] && printf '%s\n' "$out" | grep -q 'stage 3'
ok $? "pipegen and piperun are static (no shared library needed) and pipegen runs ($n_needed NEEDED)"

"$B/run.sh" >/dev/null 2>&1; a=$?
"$B/run.sh" "$T/o0" fly >/dev/null 2>&1; b=$?
[ $a = 2 ] && [ $b = 2 ]; ok $? "run.sh without OUTDIR or with an unknown mode: usage, exit 2 ($a, $b)"

# no driver on this machine
if [ -e /dev/nvidiactl ] || ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; then
    skip "this machine has an NVIDIA driver: the no-driver path is checked in the fresh root (tests/gpu_bundle_fresh.t)"
    skip "this machine has an NVIDIA driver"
else
    out=$("$B/run.sh" "$T/o1" all 2>&1); rc=$?
    [ $rc = 3 ] && printf '%s\n' "$out" | grep -q '^gpu-bundle: no GPU found (no NVIDIA driver: libcuda.so.1 not found'
    ok $? "no NVIDIA driver: exit 3 with 'gpu-bundle: no GPU found (no NVIDIA driver ...)' (exit $rc)"
    [ $rc = 3 ] || printf '%s\n' "$out" | sed 's/^/# /'
    [ "$(json_ok "$T/o1/results.json")" = "no GPU" ] && [ ! -e "$T/o1/tests.tap" ] && [ ! -e "$T/o1/.lib" ]
    ok $? "it wrote results.json (status no GPU) and did nothing else"
fi

# a fake driver (tests/unit/fake_libcuda.c) in front of the loader
mkdir -p "$T/drv"
cc -shared -fPIC -O1 -o "$T/drv/libcuda.so.1" tests/unit/fake_libcuda.c 2>"$T/drv.log"
ok $? "the fake driver builds"
for m in "nodevice:cuInit failed: CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)" \
    "zero:0 CUDA devices (driver CUDA 13.0)" \
    "prohibited:every GPU is in compute mode PROHIBITED"; do
    mode=${m%%:*} want=${m#*:}
    out=$(FAKE_CUDA=$mode LD_LIBRARY_PATH=$T/drv "$B/run.sh" "$T/o-$mode" test 2>&1); rc=$?
    [ $rc = 3 ] && printf '%s\n' "$out" | grep -qF "gpu-bundle: no GPU found ($want"
    ok $? "fake driver '$mode': exit 3, 'no GPU found ($want...)' (exit $rc)"
    [ $rc = 3 ] || printf '%s\n' "$out" | tail -5 | sed 's/^/# /'
done

# a fake GPU: check mode finds everything and links
out=$(FAKE_CUDA=h100 LD_LIBRARY_PATH=$T/drv "$B/run.sh" "$T/o-h100" check 2>&1); rc=$?
[ $rc = 0 ] && printf '%s\n' "$out" | grep -q 'gpu-bundle: gpu 0: Fake H100, sm_90, 80.0 GiB, compute mode DEFAULT' &&
    printf '%s\n' "$out" | grep -q 'gpu-bundle: found NCCL: /' && printf '%s\n' "$out" | grep -q 'gpu-bundle: found cuBLAS: /' &&
    printf '%s\n' "$out" | grep -q 'gpu-bundle: check: everything links'
ok $? "a (fake) H100: run.sh check names the GPU, finds cuBLAS and NCCL, links every binary (exit $rc)"
[ $rc = 0 ] || printf '%s\n' "$out" | tail -12 | sed 's/^/# /'
[ "$(json_ok "$T/o-h100/results.json")" = checked ]; ok $? "results.json says checked"

# cuBLAS, cuDNN and NCCL only as NVIDIA wheels lay them out: a user site-packages
# with nvidia/cublas/lib/libcublas.so.13, nvidia/cudnn/lib/libcudnn.so.9 and
# nvidia/nccl/lib/libnccl.so.2 (no unversioned names), a toolkit without them,
# no system directories
real_lib() { readlink -f "$(tools/gpu_ldlibs.sh "$T/l0" >/dev/null 2>&1; ls "$T/l0/lib$1.so")"; }
cublas=$(real_lib cublas) cublaslt=$(real_lib cublasLt) nccl=$(real_lib nccl) cudart=$(real_lib cudart)
cudnn=$(real_lib cudnn)
PYB=$T/userbase
site=$(PYTHONUSERBASE=$PYB "${PYTHON:-/usr/bin/python3}" -c 'import site; print(site.getusersitepackages())')
mkdir -p "$site/nvidia/cublas/lib" "$site/nvidia/cudnn/lib" "$site/nvidia/nccl/lib" "$T/tk/bin" "$T/tk/lib64"
ln -s "$cublas" "$site/nvidia/cublas/lib/libcublas.so.13" && ln -s "$cublaslt" "$site/nvidia/cublas/lib/libcublasLt.so.13" &&
    ln -s "$cudnn" "$site/nvidia/cudnn/lib/libcudnn.so.9" &&
    ln -s "$nccl" "$site/nvidia/nccl/lib/libnccl.so.2" && ln -s "$cudart" "$T/tk/lib64/libcudart.so.13" &&
    ln -s "$(readlink -f "$NVCC")" "$T/tk/bin/nvcc" && ln -s "$CUDA_HOME/include" "$T/tk/include"
out=$(FAKE_CUDA=h100 LD_LIBRARY_PATH=$T/drv PYTHONUSERBASE=$PYB PYTHON="${PYTHON:-/usr/bin/python3}" CUDA_HOME=$T/tk \
    GPU_ENV_SYSTEM_DIRS= "$B/run.sh" "$T/o-wheel" check 2>&1); rc=$?
[ $rc = 0 ] && printf '%s\n' "$out" | grep -qF "found cuBLAS: $site/nvidia/cublas/lib/libcublas.so.13" &&
    printf '%s\n' "$out" | grep -qF "found NCCL: $site/nvidia/nccl/lib/libnccl.so.2" &&
    printf '%s\n' "$out" | grep -qF "found cuDNN: $site/nvidia/cudnn/lib/libcudnn.so.9" &&
    ldd "$T/o-wheel/check/stage0" | grep -qF "libnccl.so.2 => $site/nvidia/nccl/lib/libnccl.so.2"
ok $? "cuBLAS, cuDNN and NCCL as Python wheels (versioned names only): found, linked, and the stage loads them from there (exit $rc)"
[ $rc = 0 ] || printf '%s\n' "$out" | tail -12 | sed 's/^/# /'
rm "$site/nvidia/nccl/lib/libnccl.so.2"
out=$(FAKE_CUDA=h100 LD_LIBRARY_PATH=$T/drv PYTHONUSERBASE=$PYB PYTHON="${PYTHON:-/usr/bin/python3}" CUDA_HOME=$T/tk \
    GPU_ENV_SYSTEM_DIRS= "$B/run.sh" "$T/o-nonccl" check 2>&1); rc=$?
[ $rc = 1 ] && printf '%s\n' "$out" | grep -q 'gpu-bundle: not found: libnccl.so.2'
ok $? "no NCCL anywhere: exit 1 naming it (exit $rc)"
[ "$(json_ok "$T/o-nonccl/results.json")" = missing ]; ok $? "results.json says missing"
done_testing
