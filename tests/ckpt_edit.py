#!/usr/bin/python3
"""tests/ckpt_edit.py — edit a pipegen checkpoint the way a bug or an older
writer would, keeping its checksums consistent, for tests/relayout.t:

  ckpt_edit.py poke STAGEFILE TENSOR    add 1 to element 0 of TENSOR and record
                                        the new data checksum in the file's
                                        metadata; prints that checksum
  ckpt_edit.py meta STAGEFILE KEY VALUE set a metadata value
  ckpt_edit.py manifest MANIFEST EDIT.. each EDIT is 'KEY=VALUE' (the line
                                        'KEY ...' becomes 'KEY VALUE') or '-KEY'
                                        (the line goes); manifest_hash is
                                        recomputed

The checksums are FNV-1a 64, as runtime/core/checkpoint.c computes them."""
import json
import struct
import sys


def fnv(data, h=0xcbf29ce484222325):
    for b in data:
        h ^= b
        h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), bytearray(raw[8 + n:])


def store(path, header, data):
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + bytes(data))


def poke(path, tensor):
    header, data = load(path)
    begin = header[tensor]["data_offsets"][0]
    v = struct.unpack_from("<f", data, begin)[0]
    struct.pack_into("<f", data, begin, v + 1.0)
    s = "%016x" % fnv(data)
    header["__metadata__"]["checksum"] = s
    store(path, header, data)
    print(s)


def meta(path, key, value):
    header, data = load(path)
    header["__metadata__"][key] = value
    store(path, header, data)


def manifest(path, edits):
    lines = open(path).read().split("\n")
    lines = [l for l in lines if l and not l.startswith("manifest_hash ")]
    for e in edits:
        if e.startswith("-"):
            lines = [l for l in lines if l.split(" ")[0] != e[1:]]
            continue
        key, value = e.split("=", 1)
        lines = [key + " " + value if l.startswith(key + " ") else l for l in lines]
    text = "\n".join(lines) + "\n"
    text += "manifest_hash %016x\n" % fnv(text.encode())
    open(path, "w").write(text)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "poke":
        poke(sys.argv[2], sys.argv[3])
    elif cmd == "meta":
        meta(sys.argv[2], sys.argv[3], sys.argv[4])
    elif cmd == "manifest":
        manifest(sys.argv[2], sys.argv[3:])
    else:
        sys.exit("usage: ckpt_edit.py poke|meta|manifest ...")
