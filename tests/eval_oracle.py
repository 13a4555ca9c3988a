#!/usr/bin/env python3
"""tests/eval_oracle.py — what tests/eval.t checks evaluation and --predict
against, computed here in float64 from the saved weights alone: the
forward of tests/models/eval_cls.pipe in inference (batch norm by its running
statistics, no dropout), the mean cross entropy and the rows whose arg max is
the class, and the outputs a --predict file must hold.

    eval_oracle.py eval W.safetensors X.pgd Y.pgd [IGNORE]   -> "LOSS CORRECT ROWS"
        (with IGNORE, rows of that class count nowhere: cross_entropy(ignore = id))
    eval_oracle.py predict W.safetensors X.pgd OUT.pgd
        -> exit 0 when OUT holds the model's f32 outputs of every row of X, in
           order, within 1e-5 of the largest magnitude (prints the error)
"""
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import load_safetensors  # noqa: E402  (torch only: Debian's torch has no safetensors module)


def read_pgd(path):
    b = open(path, "rb").read()
    assert b[:4] == b"PGD1", path
    _, dt, rank = struct.unpack("<III", b[4:16])
    dims = struct.unpack("<%dQ" % rank, b[16:16 + 8 * rank])
    a = np.frombuffer(b[16 + 8 * rank:], "<f4" if dt == 0 else "<i4")
    return a.reshape(dims)


def forward(w, x):
    p = {k: v.double().numpy() for k, v in load_safetensors.load(w).items()}
    h = np.maximum(x.astype(np.float64) @ p["fc1.weight"].T + p["fc1.bias"], 0)
    h = (h - p["bn.running_mean"]) / np.sqrt(p["bn.running_var"] + 1e-5) * p["bn.weight"] + p["bn.bias"]
    h = np.maximum(h @ p["fc2.weight"].T + p["fc2.bias"], 0)
    return h @ p["head.weight"].T + p["head.bias"]


def main(argv):
    cmd, w, xp = argv[1], argv[2], argv[3]
    z = forward(w, read_pgd(xp))
    if cmd == "eval":
        y = read_pgd(argv[4]).astype(np.int64)
        if len(argv) > 5:
            keep = y != int(argv[5])
            z, y = z[keep], y[keep]
        m = z.max(1, keepdims=True)
        lse = m[:, 0] + np.log(np.exp(z - m).sum(1))
        loss = float(np.mean(lse - z[np.arange(len(y)), y]))
        print("%.17g %d %d" % (loss, int((z.argmax(1) == y).sum()), len(y)))
        return 0
    out = read_pgd(argv[4]).astype(np.float64)
    if out.shape != z.shape:
        print("shape %s, expected %s" % (out.shape, z.shape))
        return 1
    err = float(np.abs(out - z).max() / max(np.abs(z).max(), 1e-30))
    print("%.3g" % err)
    return 0 if err <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
