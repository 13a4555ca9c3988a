#!/usr/bin/python3
"""tools/digits_to_pgd.py — scikit-learn's 8 x 8 handwritten digits as pipegen
data files: a real data set with no download (the 1,797 images ship inside
Debian's python3-sklearn, sklearn.datasets.load_digits).

    digits_to_pgd.py OUTDIR [--val N] [--seed S]

writes OUTDIR/train_x.pgd (f32[n, 1, 8, 8]: the grey levels 0..16 divided by
16), OUTDIR/train_y.pgd (i32[n]: the digits), and val_x.pgd, val_y.pgd. The
split is fixed by the seed: numpy's RandomState(S) (default 0) permutes the
images and the first N (default 360, a fifth) are the validation set, the
rest (in that order) the training set. Files are written beside their name
and renamed, so a failed run leaves none half written.
"""
import argparse
import os
import struct
import sys


def write_pgd(path, dtype, dims, payload):
    """A .pgd file (runtime/core/pg_io.h): PGD1, version 1, dtype (0 f32, 2 i32),
    rank, the dims as u64, then the values little-endian."""
    hdr = b"PGD1" + struct.pack("<III", 1, dtype, len(dims)) + struct.pack("<%dQ" % len(dims), *dims)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(hdr)
        f.write(payload)
    os.replace(tmp, path)


def main(argv):
    ap = argparse.ArgumentParser(prog="digits_to_pgd.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--val", type=int, default=360, help="validation images (default 360)")
    ap.add_argument("--seed", type=int, default=0, help="the split's seed (default 0)")
    a = ap.parse_args(argv)
    try:
        import numpy as np
        from sklearn.datasets import load_digits
    except ImportError as e:
        print(f"digits_to_pgd.py: cannot import scikit-learn ({e}); Debian: apt-get install python3-sklearn",
              file=sys.stderr)
        return 1
    d = load_digits()
    n = len(d.target)
    if not 1 <= a.val < n:
        print(f"digits_to_pgd.py: --val {a.val} is out of range: the data set has {n} images, "
              f"so 1 .. {n - 1} can be held out", file=sys.stderr)
        return 2
    order = np.random.RandomState(a.seed).permutation(n)
    x = (d.images.astype(np.float32) / np.float32(16.0)).reshape(n, 1, 8, 8)
    y = d.target.astype(np.int32)
    parts = {"val": order[:a.val], "train": order[a.val:]}
    try:
        os.makedirs(a.outdir, exist_ok=True)
        for name, idx in parts.items():
            write_pgd(os.path.join(a.outdir, name + "_x.pgd"), 0, [len(idx), 1, 8, 8],
                      x[idx].astype("<f4").tobytes())
            write_pgd(os.path.join(a.outdir, name + "_y.pgd"), 2, [len(idx)], y[idx].astype("<i4").tobytes())
    except OSError as e:
        print(f"digits_to_pgd.py: cannot write {e.filename or a.outdir}: {e.strerror}", file=sys.stderr)
        return 1
    print(f"digits: {len(parts['train'])} training and {len(parts['val'])} validation images "
          f"(seed {a.seed}) in {a.outdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
