# tools/fresh_root.sh — a fresh Debian 12 root to try things in (POSIX sh;
# sourced by tools/fresh_check.sh and tools/gpu_bundle_fresh.sh; needs root).
# The root is a copy of the cached tarball tools/fresh_check.sh builds with
# debootstrap (minbase + build-essential, git, python3, ca-certificates,
# libblas-dev: no OpenBLAS, re2c, lemon or torch).
#
#   FR_TARBALL                 the cached root: $PIPEGEN_FRESH_CACHE (default
#                              $HOME/.cache/pipegen)/bookworm-fresh-v1.tar.gz
#   fr_unpack ROOT             a new copy of it in ROOT (1 when it cannot)
#   fr_mount ROOT              proc, sys, dev (and dev/pts) mounted, tmp made
#   fr_bind_cuda ROOT DIR      the toolkit DIR bind-mounted read-only at the same
#                              path (and /usr/local/cuda pointing at it)
#   fr_run ROOT CMD            CMD as root in the chroot, with a login-like
#                              environment (Debian's PATH, nothing from here)
#   fr_cleanup                 unmount everything mounted so far
#   fr_remove_root ROOT        remove ROOT, only when nothing is mounted below it
FR_CACHE=${PIPEGEN_FRESH_CACHE:-${HOME:-/root}/.cache/pipegen}
FR_TARBALL=$FR_CACHE/bookworm-fresh-v1.tar.gz
FR_MOUNTS=""

fr_unpack() {
    fr_remove_root "$1" && mkdir -p "$1" && tar -C "$1" -xzf "$FR_TARBALL"
}

fr_mount() {
    for fr_d in proc sys dev dev/pts tmp; do mkdir -p "$1/$fr_d"; done
    chmod 1777 "$1/tmp"
    mount -t proc proc "$1/proc" && FR_MOUNTS="$1/proc $FR_MOUNTS" || return 1
    mount -t sysfs sysfs "$1/sys" && FR_MOUNTS="$1/sys $FR_MOUNTS" || return 1
    mount --rbind /dev "$1/dev" && mount --make-rslave "$1/dev" && FR_MOUNTS="$1/dev $FR_MOUNTS"
}

fr_bind_cuda() {
    mkdir -p "$1$2" || return 1
    mount --bind "$2" "$1$2" && mount -o remount,bind,ro "$1$2" && FR_MOUNTS="$1$2 $FR_MOUNTS" || return 1
    [ "$2" = /usr/local/cuda ] || ln -sfn "$2" "$1/usr/local/cuda"
}

fr_run() {
    env -i HOME=/root TERM=dumb LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        chroot "$1" /bin/sh -c "$2"
}

fr_cleanup() {
    for fr_m in $FR_MOUNTS; do umount -R "$fr_m" 2>/dev/null || umount -R -l "$fr_m" 2>/dev/null; done
    FR_MOUNTS=""
}

# a bind of /dev must never be deleted through
fr_remove_root() {
    [ -e "$1" ] || return 0
    if awk -v r="$1/" 'index($2 "/", r) == 1 { found = 1 } END { exit !found }' /proc/mounts; then
        echo "fresh root: something is still mounted under $1; not removing it" >&2
        return 1
    fi
    rm -rf "$1"
}
