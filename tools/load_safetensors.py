"""tools/load_safetensors.py — a tiny reference reader for safetensors files
(pipegen checkpoints and weights) using only json and torch, for the oracle
tests: Debian's torch 1.13 has no safetensors module.

    load(path)     -> dict name -> torch.Tensor (in file order)
    metadata(path) -> dict of the "__metadata__" strings
"""
import json
import struct

import torch

_DTYPES = {
    "F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}


def _read(path):
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8:
        raise ValueError(f"{path}: header length {n} exceeds the file ({len(raw)} bytes)")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    return header, memoryview(raw)[8 + n:]


def metadata(path):
    header, _ = _read(path)
    return dict(header.get("__metadata__", {}))


def load(path):
    header, data = _read(path)
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        dt = _DTYPES[e["dtype"]]
        shape = list(e["shape"])
        numel = 1
        for d in shape:
            numel *= d
        itemsize = torch.empty((), dtype=dt).element_size()
        if end - begin != numel * itemsize or end > len(data):
            raise ValueError(f"{path}: tensor {name!r}: offsets [{begin}, {end}] do not fit its shape or the file")
        buf = bytearray(data[begin:end])  # a private, writable copy
        t = torch.frombuffer(buf, dtype=dt) if numel else torch.empty(0, dtype=dt)
        out[name] = t.reshape(shape).clone()
    return out
