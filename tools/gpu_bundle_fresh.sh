#!/bin/sh
# tools/gpu_bundle_fresh.sh BUNDLE.tar.gz — the GPU bundle on a bare host: a
# fresh Debian 12 root (tools/fresh_root.sh: build-essential, git, python3,
# libblas-dev; no re2c, lemon, OpenBLAS or torch) with this machine's CUDA
# toolkit bind-mounted read-only and no NVIDIA driver. Inside it, as root:
#   pipegen-gpu/run.sh OUT all    must stop with exit 3 and "gpu-bundle: no GPU
#                                 found (...)" and a results.json saying so;
#   pipegen-gpu/run.sh OUT check  must find nvcc, the CUDA runtime, cuBLAS and
#                                 NCCL in the toolkit and link every binary.
# Needs root (chroot, mounts) and the cached root tarball (made by
# tools/fresh_check.sh; this script never downloads). Exit 0 when both behave,
# 1 when not, 77 when it cannot run here (not root, no cached root, no toolkit).
# env: CUDA_HOME (default /usr/local/cuda), PIPEGEN_FRESH_CACHE, KEEP=1.
TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$TOP/tools/fresh_root.sh"
TAR=${1:?usage: tools/gpu_bundle_fresh.sh BUNDLE.tar.gz}
skip() { echo "gpu_bundle_fresh: cannot run here: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (chroot and bind mounts)"
[ -s "$FR_TARBALL" ] || skip "no cached Debian 12 root at $FR_TARBALL (tools/fresh_check.sh makes it; it downloads)"
CUDA_DIR=$(readlink -f "${CUDA_HOME:-/usr/local/cuda}" 2>/dev/null)
[ -n "$CUDA_DIR" ] && [ -x "$CUDA_DIR/bin/nvcc" ] || skip "no CUDA toolkit at ${CUDA_HOME:-/usr/local/cuda}"
[ -s "$TAR" ] || { echo "gpu_bundle_fresh: $TAR: no such bundle" >&2; exit 1; }
WORK=$(mktemp -d /tmp/pg-bundle-fresh.XXXXXX)
root=$WORK/root
trap 'fr_cleanup; [ "${KEEP:-0}" = 1 ] || fr_remove_root "$WORK"' EXIT
trap 'exit 130' INT TERM
fr_unpack "$root" || { echo "gpu_bundle_fresh: cannot unpack $FR_TARBALL" >&2; exit 1; }
fr_mount "$root" && fr_bind_cuda "$root" "$CUDA_DIR" || { echo "gpu_bundle_fresh: cannot mount into $root" >&2; exit 1; }
tar -C "$root/root" -xzf "$TAR" || { echo "gpu_bundle_fresh: cannot unpack $TAR" >&2; exit 1; }
st=0
# the root is bare: none of the build's tools
if fr_run "$root" 'command -v re2c || command -v lemon || ls /usr/lib/x86_64-linux-gnu/libopenblas* || python3 -c "import torch"' \
    >"$WORK/bare.log" 2>&1; then
    echo "gpu_bundle_fresh: the root is not bare: $(head -n 1 "$WORK/bare.log")"
    st=1
fi
fr_run "$root" 'cd /root && pipegen-gpu/run.sh /root/out all' >"$WORK/all.log" 2>&1
rc=$?
sed 's/^/  /' "$WORK/all.log"
if [ $rc = 3 ] && grep -q '^gpu-bundle: no GPU found (' "$WORK/all.log" && grep -q '"status": "no GPU"' "$root/root/out/results.json"; then
    echo "gpu_bundle_fresh: run.sh OUT all: exit 3, no GPU found, results.json written: as it should"
else
    echo "gpu_bundle_fresh: run.sh OUT all: exit $rc (expected 3 with 'gpu-bundle: no GPU found (...)')"
    st=1
fi
fr_run "$root" 'cd /root && pipegen-gpu/run.sh /root/out2 check' >"$WORK/check.log" 2>&1
rc=$?
sed 's/^/  /' "$WORK/check.log"
if [ $rc = 0 ] && grep -q '^gpu-bundle: check: everything links' "$WORK/check.log"; then
    echo "gpu_bundle_fresh: run.sh OUT check: exit 0, the toolkit's nvcc, cudart, cuBLAS and NCCL found, everything links"
else
    echo "gpu_bundle_fresh: run.sh OUT check: exit $rc (expected 0, everything linked)"
    st=1
fi
exit $st
