# tools/fresh_root.sh — a fresh Debian 12 root to try things in (POSIX sh;
# sourced by tools/fresh_check.sh and tools/gpu_bundle_fresh.sh; needs root).
# The root is a copy of the cached tarball tools/fresh_check.sh builds with
# debootstrap (minbase + build-essential, git, python3, ca-certificates,
# libblas-dev: no OpenBLAS, re2c, lemon or torch).
#
#   FR_TARBALL                 the cached root: $PIPEGEN_FRESH_CACHE (default
#                              $HOME/.cache/pipegen)/bookworm-fresh-v1.tar.gz
#   fr_unpack ROOT             a new copy of it in ROOT (1 when it cannot)
#   fr_mount ROOT              ROOT a mount point of its own (as / is on a
#                              machine; `ip netns` needs it), proc, sys, a private
#                              tmpfs on dev/shm and devpts on dev/pts, tmp made
#   fr_bind_cuda ROOT DIR      the toolkit DIR bind-mounted read-only at the same
#                              path (and /usr/local/cuda pointing at it)
#   fr_run ROOT CMD            CMD as root in the chroot, with a login-like
#                              environment (Debian's PATH, nothing from here)
#   fr_cleanup                 kill what still runs in the roots, then unmount
#                              everything below them, deepest first
#   fr_remove_root ROOT        remove ROOT, only when nothing is mounted below it
#
# The host's /dev is never bound in: the root has its own device nodes (made by
# debootstrap), so nothing done inside the root, or to its tree afterwards, can
# reach the host's devices.
FR_CACHE=${PIPEGEN_FRESH_CACHE:-${HOME:-/root}/.cache/pipegen}
FR_TARBALL=$FR_CACHE/bookworm-fresh-v1.tar.gz
FR_ROOTS=""

# fr_mounts_under DIR: every mount point at or below DIR, deepest first
fr_mounts_under() {
    awk -v r="$1" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/mounts | sort -r
}

fr_unpack() {
    fr_remove_root "$1" && mkdir -p "$1" && tar -C "$1" -xzf "$FR_TARBALL"
}

fr_mount() {
    for fr_d in proc sys dev/pts dev/shm tmp; do mkdir -p "$1/$fr_d"; done
    chmod 1777 "$1/tmp"
    mount --bind "$1" "$1" || return 1
    FR_ROOTS="$1 $FR_ROOTS"
    mount -t proc proc "$1/proc" && mount -t sysfs sysfs "$1/sys" &&
        mount -t tmpfs -o mode=1777 tmpfs "$1/dev/shm" || return 1
    mount -t devpts -o newinstance,ptmxmode=0666 devpts "$1/dev/pts" 2>/dev/null ||
        echo "fresh root: no devpts in $1 (pseudo-terminals unavailable there)" >&2
    return 0
}

fr_bind_cuda() {
    mkdir -p "$1$2" || return 1
    mount --bind "$2" "$1$2" && mount -o remount,bind,ro "$1$2" || return 1
    [ "$2" = /usr/local/cuda ] || ln -sfn "$2" "$1/usr/local/cuda"
}

fr_run() {
    env -i HOME=/root TERM=dumb LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        chroot "$1" /bin/sh -c "$2"
}

fr_cleanup() {
    for fr_r in $FR_ROOTS; do
        # processes left inside the root (a test's stray stage) keep mounts busy
        for fr_p in /proc/[0-9]*; do
            [ "$(readlink "$fr_p/root" 2>/dev/null)" = "$fr_r" ] && kill -9 "${fr_p#/proc/}" 2>/dev/null
        done
        for fr_m in $(fr_mounts_under "$fr_r"); do
            umount "$fr_m" 2>/dev/null || umount -l "$fr_m" 2>/dev/null
        done
    done
    FR_ROOTS=""
}

# never delete through a mount: the mounted files would go with it
fr_remove_root() {
    [ -e "$1" ] || return 0
    if [ -n "$(fr_mounts_under "$1")" ]; then
        echo "fresh root: something is still mounted under $1; not removing it:" >&2
        fr_mounts_under "$1" | sed 's/^/    /' >&2
        return 1
    fi
    rm -rf "$1"
}
