#!/usr/bin/python3
"""tests/ckpt_edit.py — edit a pipegen checkpoint the way a bug or an older
writer would, keeping its checksums consistent, for tests/relayout.t:

  ckpt_edit.py poke STAGEFILE TENSOR    add 1 to element 0 of TENSOR and record
                                        the new checksum in the file's
                                        metadata; prints that checksum
  ckpt_edit.py swap STAGEFILE A B       swap the names of tensors A and B (a
                                        writer that mixed them up), the
                                        checksums left as they were
  ckpt_edit.py rehash STAGEFILE         record the checksum of the file as it is
                                        now (after an edit); prints it
  ckpt_edit.py legacy STAGEFILE         make it as an older pipegen wrote it: no
                                        "checksum_covers", the checksum over the
                                        data alone; prints that checksum
  ckpt_edit.py meta STAGEFILE KEY VALUE set a metadata value
  ckpt_edit.py manifest MANIFEST EDIT.. each EDIT is 'KEY=VALUE' (the line
                                        'KEY ...' becomes 'KEY VALUE') or '-KEY'
                                        (the line goes); manifest_hash is
                                        recomputed

The checksums are FNV-1a 64, as runtime/core/checkpoint.c computes them: over
the tensor table (a line per tensor in data order, as pg_st_table_hash writes
it) then the data, or the data alone for a file without "checksum_covers"."""
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


def table(header):
    """The tensor table as runtime/core/safetensors.c hashes it."""
    t = [(v["data_offsets"], k, v) for k, v in header.items() if k != "__metadata__"]
    out = b""
    for (b, e), k, v in sorted(t, key=lambda x: x[0][0]):
        out += ("%s\t%s\t%s\t%d,%d\n" % (k, v["dtype"], ",".join(str(d) for d in v["shape"]), b, e)).encode()
    return out


def checksum(header, data):
    if "checksum_covers" in header.get("__metadata__", {}):
        return fnv(data, fnv(table(header)))
    return fnv(data)


def store_rehashed(path, header, data):
    """Store with the checksum of what is stored; prints it."""
    s = "%016x" % checksum(header, data)
    header["__metadata__"]["checksum"] = s
    store(path, header, data)
    print(s)


def poke(path, tensor):
    header, data = load(path)
    begin = header[tensor]["data_offsets"][0]
    v = struct.unpack_from("<f", data, begin)[0]
    struct.pack_into("<f", data, begin, v + 1.0)
    store_rehashed(path, header, data)


def swap(path, a, b):
    header, data = load(path)
    header[a], header[b] = header[b], header[a]
    store(path, header, data)


def rehash(path):
    store_rehashed(path, *load(path))


def legacy(path):
    header, data = load(path)
    header["__metadata__"].pop("checksum_covers", None)
    store_rehashed(path, header, data)


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
    elif cmd == "swap":
        swap(sys.argv[2], sys.argv[3], sys.argv[4])
    elif cmd == "rehash":
        rehash(sys.argv[2])
    elif cmd == "legacy":
        legacy(sys.argv[2])
    elif cmd == "meta":
        meta(sys.argv[2], sys.argv[3], sys.argv[4])
    elif cmd == "manifest":
        manifest(sys.argv[2], sys.argv[3:])
    else:
        sys.exit("usage: ckpt_edit.py poke|swap|rehash|legacy|meta|manifest ...")
