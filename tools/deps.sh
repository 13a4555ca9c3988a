#!/bin/sh
# tools/deps.sh — make sure the Debian packages pipegen needs are here.
# As root: installs what is missing (apt-get, --no-install-recommends).
# Otherwise: prints the one command to run and fails.
#   usage: tools/deps.sh [build|test]   (test also needs python3-torch)
set -u
want="${1:-build}"
missing=""
command -v re2c >/dev/null 2>&1 || missing="$missing re2c"
command -v lemon >/dev/null 2>&1 || missing="$missing lemon"
[ -f /usr/share/lemon/lempar.c ] || case "$missing" in *lemon*) ;; *) missing="$missing lemon";; esac
[ -f /usr/include/x86_64-linux-gnu/cblas.h ] || [ -f /usr/include/cblas.h ] || \
    [ -n "$(ls /usr/include/*/cblas.h 2>/dev/null)" ] || missing="$missing libopenblas-dev"
if [ "$want" = test ]; then
    /usr/bin/python3 -c 'import torch' >/dev/null 2>&1 || missing="$missing python3-torch"
fi
[ -z "$missing" ] && exit 0
cmd="apt-get install -y --no-install-recommends$missing"
if [ "$(id -u)" = 0 ]; then
    echo "pipegen: installing missing Debian packages:$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null && $cmd >/dev/null || {
        echo "pipegen: '$cmd' failed; run it by hand and look at its output" >&2; exit 1; }
    exit 0
fi
echo "pipegen: missing Debian packages:$missing" >&2
echo "pipegen: run this once as root, then try again:" >&2
echo "    sudo apt-get update && sudo $cmd" >&2
exit 1
