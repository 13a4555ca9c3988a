#!/bin/sh
# tests/gpu_bundle.t — the GPU bundle (tools/gpu_bundle.sh, `make gpu-bundle`)
# without a GPU: it packs to at most 20 MiB; its pipegen and piperun are
# static and run; run.sh refuses a bad command line (2); on this machine (no
# NVIDIA driver) and under a fake driver that reports no device, no devices
# or only a PROHIBITED GPU it stops first with "gpu-bundle: no GPU found
# (CAUSE)", exit 3 and a results.json saying so, having run nothing else; so
# does device_check.sh, in under a second, leaving its 4 files in OUT and no
# other; with a fake driver that reports a GPU, device_check.sh runs every
# phase (each fails: the fake runs no kernel) and leaves exactly its 8 files in
# OUT, its working files (the probe, the library links, the memcheck program)
# in a temporary folder it removes; `run.sh OUT check` finds the toolkit,
# cuBLAS and NCCL and links every
# CUDA binary; with PG_REBUILD_CUDA=1 it first compiles the bundle's own CUDA
# sources with nvcc (what a GPU older than sm_90, or an older driver, needs);
# a driver older than both the bundle's CUDA and this toolkit is named, and
# so is a GPU in compute mode EXCLUSIVE_PROCESS; it finds cuBLAS and NCCL as
# the NVIDIA Python wheels lay them out (versioned names only, a Python's
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
mkdir -p "$T/tmp"
# listing DIR: every name in DIR, dot files too, on one line
listing() { (cd "$1" 2>/dev/null && ls -A | tr '\n' ' '); }
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
[ -x "$B/run.sh" ] && [ -x "$B/device_check.sh" ] && [ -x "$B/device_rerun.sh" ] && [ -f "$B/tools/gpu_bundle/device_lib.sh" ] &&
    [ -f "$B/build-cuda/libpgrt_cuda.a" ] && [ -f "$B/build/cuda-tests/test_ops_gpu.o" ] &&
    [ -s "$B/tests/gpu/ref/cpu1.loss" ] && [ -s "$B/tests/gpu/ref/cpu1bf.hash" ] && [ -s "$B/tests/gpu/ref/cpu1drop.loss" ] &&
    [ -s "$B/tests/gpu/ref/cpul1.loss" ] && [ -s "$B/tests/gpu/ref/cpu_ops.rec" ] && [ -f "$B/tests/models/gpt_tiny.pipe" ] &&
    [ -f "$B/tests/models/bn_small.pipe" ] && [ -f "$B/tests/models/oracle_llama.pipe" ] &&
    [ -x "$B/bench/gpu/run.sh" ] && [ -f "$B/examples/gpt2_small.pipe" ] && [ -f "$B/runtime/core/pg_stage.h" ] &&
    [ -f "$B/runtime/cuda/flash_attn.cuh" ] && [ -f "$B/runtime/cuda/dp_sum.cuh" ] && [ -f "$B/tests/gpu/flash_refs.h" ] &&
    grep -q '^BUILT_CUDA_MAJOR=[0-9]' "$B/BUNDLE"
ok $? "it holds run.sh, device_check.sh, device_rerun.sh, the runtime, the op tests and the CPU's results, the CPU references, the models, the scripts, the headers and every CUDA source"
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
    t0=$(date +%s%N)
    out=$("$B/device_check.sh" "$T/d1" 2>&1); rc=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
    [ $rc = 3 ] && [ $ms -lt 1000 ] && printf '%s\n' "$out" | grep -q 'device check: no GPU found (no NVIDIA driver: libcuda.so.1 not found' &&
        [ "$(json_ok "$T/d1/results.json")" = "no GPU" ] && grep -q 'facts: no GPU' "$T/d1/summary.txt"
    ok $? "device_check.sh without a driver: exit 3 in $ms ms (under a second) with the reason, in summary.txt and results.json"
    [ $rc = 3 ] || printf '%s\n' "$out" | tail -5 | sed 's/^/# /'
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

out=$(FAKE_CUDA=nodevice LD_LIBRARY_PATH=$T/drv TMPDIR=$T/tmp "$B/device_check.sh" "$T/d2" 2>&1); rc=$?
[ $rc = 3 ] && printf '%s\n' "$out" | grep -q 'device check: no GPU found (cuInit failed: CUDA_ERROR_NO_DEVICE' &&
    tar -xzOf "$T/d2/logs.tgz" logs/probe.log 2>/dev/null | grep -q '^cuInit failed: CUDA_ERROR_NO_DEVICE'
ok $? "device_check.sh with a driver that finds no device: exit 3 naming cuInit's error, the probe's log in logs.tgz ($rc)"
is "$(listing "$T/d2")|$(listing "$T/tmp")" "facts.txt logs.tgz results.json summary.txt |" \
    "no usable GPU: OUT holds summary.txt, facts.txt, results.json and logs.tgz, nothing else (the probe in a temporary folder, removed)"

# a fake GPU: device_check.sh goes through every phase, each failing fast, and
# leaves its 8 files in OUT and nothing else
t0=$(date +%s)
out=$(FAKE_CUDA=h100 LD_LIBRARY_PATH=$T/drv TMPDIR=$T/tmp DEVICE_SECTIONS=3 DEVICE_BUDGET_S=150 DEVICE_OPS_S=20 \
    DEVICE_TRAIN_S=20 DEVICE_BENCH_S=20 DEVICE_MEMCHECK_GROUPS=setup "$B/device_check.sh" "$T/d3" 2>&1); rc=$?
[ $rc = 1 ] && grep -q 'facts: pass' "$T/d3/summary.txt" && grep -q 'memcheck: ' "$T/d3/summary.txt" &&
    grep -q '^device: Fake H100$' "$T/d3/facts.txt"
ok $? "a (fake) H100: device_check.sh passes the facts (the GPU named), then runs every phase, which fail (exit $rc, $(($(date +%s) - t0)) s)"
[ $rc = 1 ] || printf '%s\n' "$out" | tail -8 | sed 's/^/# /'
is "$(listing "$T/d3")|$(listing "$T/tmp")" "bench.json facts.txt logs.tgz memcheck.log ops.tap results.json summary.txt train.tap |" \
    "it leaves exactly its 8 files in OUT (the device tool brings back 8): the probe, the library links and the memcheck program in a temporary folder, removed"

# a fake GPU: check mode finds everything and links
out=$(FAKE_CUDA=h100 LD_LIBRARY_PATH=$T/drv "$B/run.sh" "$T/o-h100" check 2>&1); rc=$?
[ $rc = 0 ] && printf '%s\n' "$out" | grep -q 'gpu-bundle: gpu 0: Fake H100, sm_90, 80.0 GiB, compute mode DEFAULT' &&
    printf '%s\n' "$out" | grep -q 'gpu-bundle: found NCCL: /' && printf '%s\n' "$out" | grep -q 'gpu-bundle: found cuBLAS: /' &&
    printf '%s\n' "$out" | grep -q 'gpu-bundle: check: everything links'
ok $? "a (fake) H100: run.sh check names the GPU, finds cuBLAS and NCCL, links every binary (exit $rc)"
[ $rc = 0 ] || printf '%s\n' "$out" | tail -12 | sed 's/^/# /'
[ "$(json_ok "$T/o-h100/results.json")" = checked ]; ok $? "results.json says checked"

# the bundle compiles its own CUDA sources (what an older GPU or driver needs)
out=$(FAKE_CUDA=h100 PG_REBUILD_CUDA=1 PG_REBUILD_JOBS=2 LD_LIBRARY_PATH=$T/drv "$B/run.sh" "$T/o-rb" check 2>&1); rc=$?
[ $rc = 0 ] && printf '%s\n' "$out" | grep -q 'gpu-bundle: rebuilt the CUDA files (PG_REBUILD_CUDA=1)' &&
    printf '%s\n' "$out" | grep -q 'gpu-bundle: check: everything links' && [ -s "$T/o-rb/.rebuild/libpgrt_cuda.a" ]
ok $? "PG_REBUILD_CUDA=1: nvcc compiles the bundle's own sources (runtime/cuda, the op tests) and everything links (exit $rc)"
[ $rc = 0 ] || { printf '%s\n' "$out" | tail -8; tail -20 "$T/o-rb/.rebuild/nvcc.log" 2>/dev/null; } | sed 's/^/# /'
out=$(FAKE_CUDA=olddriver LD_LIBRARY_PATH=$T/drv "$B/run.sh" "$T/o-old" check 2>&1); rc=$?
[ $rc = 1 ] && printf '%s\n' "$out" | grep -q 'the driver supports CUDA 12.2, this host.s nvcc is CUDA [0-9]*: update the driver'
ok $? "a driver of CUDA 12.2, older than the bundle's and this toolkit's CUDA: named, exit 1 ($rc)"
[ $rc = 1 ] || printf '%s\n' "$out" | tail -5 | sed 's/^/# /'
out=$(FAKE_CUDA=exclusive LD_LIBRARY_PATH=$T/drv "$B/run.sh" "$T/o-ex" check 2>&1); rc=$?
[ $rc = 0 ] && printf '%s\n' "$out" | grep -q 'GPU 0 is in compute mode EXCLUSIVE_PROCESS: one process at a time'
ok $? "a GPU in compute mode EXCLUSIVE_PROCESS: said at once, before any multi-process run fails without a reason ($rc)"

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
