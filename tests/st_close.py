#!/usr/bin/env python3
"""tests/st_close.py A B TOL: every f32 tensor of safetensors file A equals B's
within TOL, relative to the largest magnitude of the tensor (exit 0), else names
the first that differs (exit 1). For tests/ppdp.t: D replicas vs one."""
import array
import json
import struct
import sys


def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    head = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in head.items():
        if name == "__metadata__" or t["dtype"] != "F32":
            continue
        a, b = t["data_offsets"]
        v = array.array("f")
        v.frombytes(raw[base + a:base + b])
        out[name] = v
    return out


def main():
    a, b, tol = load(sys.argv[1]), load(sys.argv[2]), float(sys.argv[3])
    if sorted(a) != sorted(b):
        print("the files hold different tensors")
        return 1
    worst = 0.0
    for name in sorted(a):
        x, y = a[name], b[name]
        scale = max([abs(v) for v in x] + [1e-30])
        d = max([abs(p - q) for p, q in zip(x, y)] + [0.0]) / scale
        worst = max(worst, d)
        if d > tol:
            print("%s differs by %g of its largest magnitude (tolerance %g)" % (name, d, tol))
            return 1
    print("largest relative difference %g" % worst)
    return 0


sys.exit(main())
