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
CACHE=${PIPEGEN_FRESH_CACHE:-${HOME:-/root}/.cache/pipegen}
TARBALL=$CACHE/bookworm-fresh-v1.tar.gz
PKGS=build-essential,git,python3,ca-certificates,libblas-dev
mkdir -p "$CACHE" || die "cannot create the cache directory $CACHE"

WORK=${PIPEGEN_FRESH_WORK:-$(mktemp -d /tmp/pg-fresh.XXXXXX)}
mkdir -p "$WORK" || die "cannot create $WORK"
MOUNTS=""
# mounts_under DIR: every mount point at or below DIR, deepest first
mounts_under() {
    awk -v r="$1" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/mounts | sort -r
}
# cleanup: unmount everything below each root we mounted into (what the tests
# inside mounted too, e.g. ip netns), one mount point at a time, deepest first
cleanup() {
    for r in $MOUNTS; do
        # processes left inside the root (a test's stray stage) keep mounts busy
        for p in /proc/[0-9]*; do
            [ "$(readlink "$p/root" 2>/dev/null)" = "$r" ] && kill -9 "${p#/proc/}" 2>/dev/null
        done
        for m in $(mounts_under "$r"); do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
    done
    MOUNTS=""
}
# remove a root only when nothing is mounted below it: never delete through a
# mount (the host's files would go with it)
remove_root() {
    [ -e "$1" ] || return 0
    if [ -n "$(mounts_under "$1")" ]; then
        echo "fresh_check: something is still mounted under $1; not removing it:" >&2
        mounts_under "$1" | sed 's/^/    /' >&2
        return 1
    fi
    rm -rf "$1"
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM

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
    remove_root "$root" && mkdir -p "$root" || die "cannot create $root"
    tar -C "$root" -xzf "$TARBALL" || die "cannot unpack $TARBALL"
    cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null
    git clone -q --no-hardlinks "$TOP" "$root/root/pipegen" || die "cannot clone $TOP"
    for d in proc sys dev/pts dev/shm; do mkdir -p "$root/$d"; done
    # the root a mount point of its own, as / is on a machine (`ip netns` needs
    # it); its own /dev nodes come from debootstrap: the host's /dev is never
    # bound in, so nothing done inside (or to the tree afterwards) reaches it
    mount --bind "$root" "$root" && MOUNTS="$root" || die "cannot bind-mount $root onto itself"
    mount -t proc proc "$root/proc" || die "cannot mount proc in $root"
    mount -t sysfs sysfs "$root/sys" || die "cannot mount sysfs in $root"
    mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm" || die "cannot mount a tmpfs on $root/dev/shm"
    mount -t devpts -o newinstance,ptmxmode=0666 devpts "$root/dev/pts" 2>/dev/null ||
        echo "fresh_check: no devpts in the root (pseudo-terminals unavailable there)"
    mkdir -p "$root/tmp" && chmod 1777 "$root/tmp"
    if [ "$mode" = cuda ]; then
        [ -n "$CUDA_DIR" ] && [ -x "$CUDA_DIR/bin/nvcc" ] || die "mode cuda: no toolkit at ${CUDA_HOME:-/usr/local/cuda}"
        mkdir -p "$root$CUDA_DIR"
        mount --bind "$CUDA_DIR" "$root$CUDA_DIR" && mount -o remount,bind,ro "$root$CUDA_DIR" ||
            die "cannot bind-mount $CUDA_DIR read-only"
        [ "$CUDA_DIR" = /usr/local/cuda ] || ln -sfn "$CUDA_DIR" "$root/usr/local/cuda"
        label="with the CUDA toolkit ($CUDA_DIR, read-only)"
    else
        label="without a CUDA toolkit"
    fi
    for cmd in run test; do
        log=$WORK/$mode-$cmd.log
        echo "fresh_check: [$mode] make $cmd $label ..."
        t0=$(date +%s)
        # a login-like environment: PATH as on Debian, no host variables
        env -i HOME=/root TERM=dumb LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
            chroot "$root" /bin/sh -c "cd /root/pipegen && make $cmd" >"$log" 2>&1
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
    cleanup
    [ "${KEEP:-0}" = 1 ] || [ $status != 0 ] || remove_root "$root"
done
echo "fresh_check: summary (logs in $WORK)"
printf '%s' "$summary"
exit $status
