#!/bin/sh
# tests/net.t — pg_net over loopback (tests/unit/test_net.c), built with ASan+UBSan.
TOP=$(cd "$(dirname "$0")/.." && pwd)
cd "$TOP" || exit 1
out=$(mktemp -d /tmp/pg_net_t.XXXXXX) || exit 1
trap 'rm -rf "$out"' EXIT
CFLAGS_T="-std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Wall -Wextra -Werror -g -O1 -Iruntime/core"
SANF="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
if ! ${CC:-cc} $CFLAGS_T $SANF -o "$out/test_net" tests/unit/test_net.c runtime/core/tcp.c runtime/core/sha256.c runtime/cpu/net.c \
        runtime/core/launch_env.c -lpthread 2>"$out/cc.log"; then
    echo "1..1"; echo "not ok 1 - test_net.c compiles"; sed 's/^/# /' "$out/cc.log"; exit 1
fi
timeout 60 "$out/test_net"
