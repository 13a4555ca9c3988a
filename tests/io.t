#!/bin/sh
# tests/io.t — data files, data sets of shards and their shuffle, synthetic samples, pg_hash64, safetensors
# (tests/unit/test_io.c, ASan+UBSan), then PyTorch reads the checkpoint it wrote.
TOP=$(cd "$(dirname "$0")/.." && pwd)
cd "$TOP" || exit 1
out=$(mktemp -d /tmp/pg_io_t.XXXXXX) || exit 1
trap 'rm -rf "$out"' EXIT
CFLAGS_T="-std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Wall -Wextra -Werror -g -O1 -Iruntime/core"
SANF="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
if ! ${CC:-cc} $CFLAGS_T $SANF -o "$out/test_io" tests/unit/test_io.c runtime/core/data.c runtime/core/dataset.c \
        runtime/core/safetensors.c runtime/core/json.c runtime/core/io_atomic.c runtime/core/errcap.c -lm 2>"$out/cc.log"; then
    echo "1..1"; echo "not ok 1 - test_io.c compiles"; sed 's/^/# /' "$out/cc.log"; exit 1
fi
mkdir "$out/d"
# the C tests print their own TAP lines; we renumber nothing, so add ours after
timeout 60 "$out/test_io" "$out/d" > "$out/tap"
rc=$?
n=$(grep -c '^ok\|^not ok' "$out/tap")
grep -v '^1\.\.' "$out/tap"
k=$((n + 1))
py=$(timeout 60 "${PYTHON:-/usr/bin/python3}" - "$out/d/interop.safetensors" <<'PY' 2>&1
import json, struct, sys
sys.path.insert(0, "tools")
import torch
from load_safetensors import load, metadata
p = sys.argv[1]
raw = open(p, "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
h = json.loads(raw[8:8 + n])            # the header is valid JSON
assert n % 8 == 0, n
assert list(h) == ["layer1.w", "ids", "scale", 'odd "name"\\x', "__metadata__"], list(h)
assert h["layer1.w"] == {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, h["layer1.w"]
t = load(p)
assert torch.equal(t["layer1.w"], torch.tensor([[-1.0, -0.5, 0.0], [0.5, 1.0, 1.5]])), t["layer1.w"]
assert t["ids"].dtype == torch.int32 and t["ids"].tolist() == [3, -1, 7, 100000], t["ids"]
assert t["scale"].shape == () and t["scale"].item() == 42.0
assert t['odd "name"\\x'].tolist() == [1.0, 2.0]
assert metadata(p) == {"step": "12", "model": 'mlp "v1"'}, metadata(p)
print("fine")
PY
)
if [ "$py" = fine ]; then echo "ok $k - PyTorch (json + torch.frombuffer) loads the checkpoint pg_st_write wrote"
else echo "not ok $k - PyTorch (json + torch.frombuffer) loads the checkpoint pg_st_write wrote"
     printf '%s\n' "$py" | sed 's/^/# /'; rc=1; fi
echo "1..$k"
exit $rc
