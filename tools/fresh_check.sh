#!/bin/sh
# tools/fresh_check.sh — `make test-fresh`: the two README commands on a fresh
# Debian 12 machine, tried for real in a chroot.
#
# Builds once, with debootstrap, a minimal Debian 12 (bookworm) root that looks
# like the machine image this project is developed on: minbase + build-essential,
# git, python3, ca-certificates and libblas-dev (the reference BLAS, whose
# cblas.h once fooled the dependency check) — no OpenBLAS, re2c, lemon or torch.
# The root is cached as a tarball; every run unpacks a new copy, clones HEAD of
# this repository into it (committed work only) and runs, as root inside the
# chroot, `make run` and then `make test`: once with the host's CUDA toolkit
# bind-mounted read-only at the same path, once without it. Each command's time
# and status is printed; logs stay in the work directory.
#
# usage: tools/fresh_check.sh [cuda|nocuda|both]   (default both)
# env:   PIPEGEN_FRESH_CACHE  cache directory (default $HOME/.cache/pipegen)
#        PIPEGEN_FRESH_WORK   work directory (default a new /tmp/pg-fresh.XXXXXX)
#        DEBIAN_MIRROR        mirror for debootstrap (default: the host's, else deb.debian.org)
#        CUDA_HOME            the toolkit to bind-mount (default /usr/local/cuda)
#        KEEP=1               keep the unpacked roots (they are removed after a pass)
# Needs root (chroot, mount) and network access to a Debian mirror. Not part of
# `make test`: it downloads. Exit status: 0 when every command passed.
set -u
TOP=$(cd "$(dirname "$0")/.." && pwd)
modes=${1:-both}
case "$modes" in
both) modes="cuda nocuda" ;;
cuda|nocuda) ;;
-h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
*) echo "fresh_check: unknown mode '$modes' (cuda, nocuda or both)" >&2; exit 2 ;;
esac
die() { echo "fresh_check: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot and bind mounts); run: sudo make test-fresh"
command -v git >/dev/null 2>&1 || die "git not found"

if ! command -v debootstrap >/dev/null 2>&1; then
    echo "fresh_check: installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null ||
        die "cannot install debootstrap (apt-get install -y --no-install-recommends debootstrap)"
fi

host_mirror() {
    for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
        [ -f "$f" ] || continue
        u=$(sed -n 's/^URIs: *\([^ ]*\/debian\/\{0,1\}\)$/\1/p; s/^deb  *\(http[^ ]*\/debian\/\{0,1\}\)  *bookworm .*/\1/p' "$f" | head -n 1)
        [ -n "$u" ] && { echo "$u"; return; }
    done
    echo http://deb.debian.org/debian
}
MIRROR=${DEBIAN_MIRROR:-$(host_mirror)}
. "$TOP/tools/fresh_root.sh"
CACHE=$FR_CACHE
TARBALL=$FR_TARBALL
PKGS=build-essential,git,python3,ca-certificates,libblas-dev
mkdir -p "$CACHE" || die "cannot create the cache directory $CACHE"

WORK=${PIPEGEN_FRESH_WORK:-$(mktemp -d /tmp/pg-fresh.XXXXXX)}
mkdir -p "$WORK" || die "cannot create $WORK"
trap fr_cleanup EXIT
trap 'fr_cleanup; exit 130' INT TERM

if [ ! -s "$TARBALL" ]; then
    echo "fresh_check: building the Debian 12 root once ($PKGS) from $MIRROR"
    t0=$(date +%s)
    base=$WORK/base
    rm -rf "$base"
    debootstrap --variant=minbase --include="$PKGS" bookworm "$base" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
        die "debootstrap failed; see $WORK/debootstrap.log"
    # the image's package sources: the same suites (updates, security) as the host
    if [ -f /etc/apt/sources.list.d/debian.sources ]; then
        cp /etc/apt/sources.list.d/debian.sources "$base/etc/apt/sources.list.d/" && : >"$base/etc/apt/sources.list"
    fi
    rm -rf "$base/var/cache/apt/archives/"*.deb "$base/var/lib/apt/lists/"* 2>/dev/null
    tar -C "$base" -czf "$TARBALL.tmp" . && mv "$TARBALL.tmp" "$TARBALL" || die "cannot write $TARBALL"
    rm -rf "$base"
    echo "fresh_check: root cached in $TARBALL ($(($(date +%s) - t0)) s)"
fi

CUDA_DIR=$(readlink -f "${CUDA_HOME:-/usr/local/cuda}" 2>/dev/null)
status=0
summary=""
for mode in $modes; do
    root=$WORK/root-$mode
    fr_unpack "$root" || die "cannot unpack $TARBALL into $root"
    cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null
    # what Debian's installer (and every cloud image) writes and debootstrap
    # does not: without it `localhost` does not resolve in the root
    [ -f "$root/etc/hosts" ] || printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' \
        >"$root/etc/hosts"
    git clone -q --no-hardlinks "$TOP" "$root/root/pipegen" || die "cannot clone $TOP"
    fr_mount "$root" || die "cannot mount proc, sys and dev in $root"
    if [ "$mode" = cuda ]; then
        [ -n "$CUDA_DIR" ] && [ -x "$CUDA_DIR/bin/nvcc" ] || die "mode cuda: no toolkit at ${CUDA_HOME:-/usr/local/cuda}"
        fr_bind_cuda "$root" "$CUDA_DIR" || die "cannot bind-mount $CUDA_DIR read-only"
        label="with the CUDA toolkit ($CUDA_DIR, read-only)"
    else
        label="without a CUDA toolkit"
    fi
    for cmd in run test; do
        log=$WORK/$mode-$cmd.log
        echo "fresh_check: [$mode] make $cmd $label ..."
        t0=$(date +%s)
        # a login-like environment: PATH as on Debian, no host variables
        fr_run "$root" "cd /root/pipegen && make $cmd" >"$log" 2>&1
        rc=$?
        dt=$(($(date +%s) - t0))
        line="[$mode] make $cmd: exit $rc in ${dt} s ($(tail -n 1 "$log" | cut -c1-100))"
        echo "fresh_check: $line"
        summary="$summary$line
"
        if [ $rc != 0 ]; then
            status=1
            echo "fresh_check: [$mode] make $cmd failed; the end of $log:" >&2
            tail -n 40 "$log" >&2
            break
        fi
    done
    fr_cleanup
    [ "${KEEP:-0}" = 1 ] || [ $status != 0 ] || fr_remove_root "$root"
done
echo "fresh_check: summary (logs in $WORK)"
printf '%s' "$summary"
exit $status
