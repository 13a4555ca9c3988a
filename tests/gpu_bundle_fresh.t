#!/bin/sh
# tests/gpu_bundle_fresh.t — the GPU bundle on a bare host (tools/
# gpu_bundle_fresh.sh): in a fresh Debian 12 root without re2c, lemon,
# OpenBLAS, torch or an NVIDIA driver, with the CUDA toolkit bind-mounted
# read-only, `run.sh OUT all` stops with exit 3 and "gpu-bundle: no GPU found
# (...)", and `run.sh OUT check` finds the toolkit's libraries and links every
# binary. Needs root and the cached root tarball (tools/fresh_check.sh makes
# it, downloading); skipped, saying which, without them or without nvcc.
. "$(dirname "$0")/lib.sh"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$CUDA_HOME/bin/nvcc}
[ -x "$NVCC" ] || { echo "1..0 # SKIP nvcc not found at $NVCC: there is no bundle to make"; exit 0; }
[ "$(id -u)" = 0 ] || { echo "1..0 # SKIP needs root (chroot and bind mounts): run make test as root"; exit 0; }
. "$TOP/tools/fresh_root.sh"
[ -s "$FR_TARBALL" ] || { echo "1..0 # SKIP no cached Debian 12 root at $FR_TARBALL (make test-fresh makes it; it downloads)"; exit 0; }
cd "$TOP" || exit 1
T=$(mktemp -d /tmp/pg-bfresh.XXXXXX)
trap 'rm -rf "$T"' EXIT
tools/gpu_bundle.sh "$T/b" "$T/b.tar.gz" >"$T/make.log" 2>&1
st=$?
ok $st "the bundle is made"
[ $st = 0 ] || sed 's/^/# /' "$T/make.log"
tools/gpu_bundle_fresh.sh "$T/b.tar.gz" >"$T/fresh.log" 2>&1
st=$?
grep '^gpu_bundle_fresh: ' "$T/fresh.log" | sed 's/^/# /'
[ $st = 0 ] && grep -q 'run.sh OUT all: exit 3, no GPU found, results.json written' "$T/fresh.log"
ok $? "in a fresh Debian root without a driver: run.sh OUT all stops with exit 3, 'gpu-bundle: no GPU found (...)'"
[ $st = 0 ] && grep -q 'run.sh OUT check: exit 0' "$T/fresh.log"
ok $? "in the same root, run.sh OUT check finds nvcc, cudart, cuBLAS and NCCL and links every binary"
[ $st = 0 ] || tail -30 "$T/fresh.log" | sed 's/^/# /'
done_testing
