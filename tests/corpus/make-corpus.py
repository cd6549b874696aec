#!/usr/bin/env python3
"""make-corpus.py - write the hostile-file corpus of tests/files/hostile-files.sh.

    python3 tests/corpus/make-corpus.py [DIR]     (default: this script's directory)

Standard library only, deterministic: running it again rewrites the committed
files byte for byte. Five good files (good-x.npy 40x10, the same stored big-endian and in
Fortran order, good-y.npy 40x5 and good.safetensors, the 10,10,5 ToyModel) and one malformed file per case, each
broken in exactly one way. The same files seed the fuzzers (scripts/fuzz.sh).
"""
import json
import os
import struct
import sys

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
os.makedirs(OUT, exist_ok=True)


def write(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


# ---- .npy ------------------------------------------------------------------

def npy_header(dict_text, version=1, hlen=None):
    """Magic, version, header length and the dict padded as np.save pads it."""
    pre = 10 if version == 1 else 12
    body = dict_text.encode("latin1")
    body += b" " * ((64 - (pre + len(body) + 1) % 64) % 64) + b"\n"
    n = len(body) if hlen is None else hlen
    size = struct.pack("<H", n) if version == 1 else struct.pack("<I", n)
    return b"\x93NUMPY" + bytes([version, 0]) + size + body


def npy_dict(descr="<f4", order="False", shape="(40, 10)"):
    return "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, order, shape)


def f32(values):
    return struct.pack("<%df" % len(values), *values)


def npy(rows, cols, seed, **kw):
    vals = [((i * 37 + seed * 11) % 97) / 48.5 - 1.0 for i in range(rows * cols)]
    return npy_header(npy_dict(shape="(%d, %d)" % (rows, cols), **kw)) + f32(vals)


write("good-x.npy", npy(40, 10, 1))
write("good-y.npy", npy(40, 5, 2))

good = npy(40, 10, 1)
write("npy-bad-magic.npy", b"\x93NUMPX" + good[6:])
write("npy-zip-file.npy", b"PK\x03\x04\x14\x00\x00\x00\x08\x00" + bytes(54))
write("npy-too-short.npy", b"\x93NUMPY\x01")
write("npy-version-4.npy", good[:6] + b"\x04\x00" + good[8:])
write("npy-version-1-1.npy", good[:6] + b"\x01\x01" + good[8:])
write("npy-header-past-end.npy", good[:8] + struct.pack("<H", 65535) + good[10:200])
write("npy-header-past-end-v2.npy", b"\x93NUMPY\x02\x00" + struct.pack("<I", 0xFFFFFFFF) + good[10:200])
# A header that ends in digits exactly at a page boundary, with no data after it:
# a reader that parses numbers with strtoull runs off the end of the mapping.
tail = "{'descr': '<f4', 'fortran_order': False, 'shape': (40, "
hdr = (tail + "0" * (4096 - 10 - len(tail))).encode()
write("npy-digits-at-eof.npy", b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr)
write("npy-truncated-data.npy", good[:-4])
write("npy-trailing-data.npy", good + b"garbage!")
write("npy-shape-overflow.npy", npy_header(npy_dict(shape="(1099511627776, 16777216)")))
write("npy-dim-too-large.npy", npy_header(npy_dict(shape="(99999999999999999999999999, 10)")))
write("npy-shape-negative.npy", npy_header(npy_dict(shape="(-40, 10)")) + good[128:])
write("npy-shape-nan.npy", npy_header(npy_dict(shape="(nan, 10)")) + good[128:])
write("npy-dtype-int.npy", npy_header(npy_dict(descr="<i4")) + good[128:])
# Big-endian and Fortran order are good: NumPy and PyTorch read them, and so does ddptrain
# (the same 40x10 floats as good-x.npy, stored another way).
gvals = [((i * 37 + 1 * 11) % 97) / 48.5 - 1.0 for i in range(400)]
write("good-x-big-endian.npy", npy_header(npy_dict(descr=">f4")) + struct.pack(">400f", *gvals))
write("good-x-fortran.npy", npy_header(npy_dict(order="True")) +
      f32([gvals[r * 10 + c] for c in range(10) for r in range(40)]))
write("npy-dtype-object.npy", npy_header(npy_dict(descr="|O")) + good[128:])
write("npy-dtype-control-char.npy", npy_header(npy_dict(descr="<f\n4")) + good[128:])
write("npy-dtype-nul.npy", npy_header(npy_dict(descr="<f4\0junk")) + good[128:])
write("npy-1d.npy", npy_header(npy_dict(shape="(400,)")) + good[128:])
write("npy-duplicate-key.npy",
      npy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (40, 10), 'shape': (40, 10), }") + good[128:])
write("npy-missing-shape.npy", npy_header("{'descr': '<f4', 'fortran_order': False, }") + good[128:])
write("npy-unknown-key.npy",
      npy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (40, 10), 'offset': 64, }") + good[128:])
write("npy-text-after-dict.npy",
      npy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (40, 10), } or True") + good[128:])
write("npy-unterminated-dict.npy",
      npy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (40, 10), ") + good[128:])
write("npy-empty.npy", npy_header(npy_dict(shape="(0, 10)")))

# ---- safetensors ------------------------------------------------------------

TOY = [("net1.weight", [10, 10]), ("net1.bias", [10]), ("net2.weight", [5, 10]), ("net2.bias", [5])]


def count(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def st_file(header_text, data=b"", hlen=None):
    """8-byte length, header padded with spaces to 8 bytes, data."""
    h = header_text.encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h) if hlen is None else hlen) + h + data


def st_tensors(tensors, metadata={"format": "pt"}, extra=b""):
    """tensors: (name, dtype, shape, data bytes) in file order; offsets follow the data."""
    header, off, blob = {}, 0, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
        blob += data
    return st_file(json.dumps(header, separators=(",", ":")), blob + extra)


def toy(seed=3):
    out = []
    for name, shape in TOY:
        n = count(shape)
        out.append((name, "F32", shape, f32([((i * 13 + seed) % 29) / 29.0 - 0.5 for i in range(n)])))
    return out


def entry(dtype="F32", shape=(2,), offsets=(0, 8)):
    return '{"dtype":"%s","shape":%s,"data_offsets":[%d,%d]}' % (dtype, json.dumps(list(shape)), *offsets)


def one(e, data=8):
    """A header with one tensor 'net1.weight' given as raw JSON text, and `data` zero bytes."""
    return st_file('{"net1.weight":%s}' % e, bytes(data))


write("good.safetensors", st_tensors(toy()))
write("st-too-short.safetensors", b"\x10\x00\x00\x00")
write("st-npy-file.safetensors", good)
write("st-header-past-end.safetensors", st_file('{"net1.weight":%s}' % entry(), bytes(8), hlen=4096))
write("st-header-length-200mib.safetensors", st_file("{}", b"", hlen=200 << 20))
write("st-header-length-zero.safetensors", st_file("{}", b"", hlen=0))
write("st-not-json.safetensors", st_file("this is not JSON", bytes(8)))
write("st-not-object.safetensors", st_file("[1, 2, 3]"))
write("st-deep-nesting.safetensors", st_file('{"a":' + "[" * 3000 + "]" * 3000 + "}"))
write("st-entry-malformed.safetensors", st_file('{"net1.weight":{"dtype":"F32","shape":[2]}}', bytes(8)))
write("st-dtype-unknown.safetensors", one(entry(dtype="Q7")))
int_toy = toy()
int_toy[0] = ("net1.weight", "I32", [10, 10], struct.pack("<100i", *range(100)))
write("st-dtype-int.safetensors", st_tensors(int_toy))
write("st-shape-negative.safetensors", one(entry(shape=(-2,))))
write("st-shape-fraction.safetensors", one(entry(shape=(2.5,))))
write("st-shape-overflow.safetensors", one(entry(shape=(1 << 40, 1 << 40), offsets=(0, 0)), 0))
write("st-shape-mismatch.safetensors", one(entry(shape=(3,))))
write("st-too-many-dims.safetensors", one(entry(shape=(1,) * 9 + (2,))))
write("st-offsets-out-of-range.safetensors", one(entry(offsets=(0, 4096))))
write("st-offsets-huge.safetensors", one(entry(offsets=(18446744073709551608, 18446744073709551615))))
write("st-offsets-reversed.safetensors", one(entry(offsets=(8, 0))))
write("st-offsets-negative.safetensors", one(entry(offsets=(-8, 0))))
write("st-overlap.safetensors",
      st_file('{"net1.weight":%s,"net1.bias":%s}' % (entry(offsets=(0, 8)), entry(offsets=(4, 12))), bytes(12)))
write("st-gap.safetensors",
      st_file('{"net1.weight":%s,"net1.bias":%s}' % (entry(offsets=(0, 8)), entry(offsets=(12, 20))), bytes(20)))
write("st-trailing-data.safetensors", st_tensors(toy(), extra=b"garbage!"))
write("st-duplicate-name.safetensors",
      st_file('{"net1.bias":%s,"net1.bias":%s}' % (entry(shape=(1,), offsets=(0, 4)), entry(shape=(1,), offsets=(4, 8))),
              bytes(8)))
write("st-missing-name.safetensors", st_tensors(toy()[:3]))
wrong = toy()
wrong[0] = ("net1.weight", "F32", [10, 5], f32([0.0] * 50))
write("st-wrong-shape.safetensors", st_tensors(wrong))
write("st-name-control-char.safetensors", st_file('{"net1.weight\\n":%s}' % entry()))
write("st-name-too-long.safetensors", st_file('{"%s":%s}' % ("n" * 200, entry()), bytes(8)))
write("st-metadata-not-object.safetensors", st_file('{"__metadata__":["format","pt"]}'))
write("st-metadata-number.safetensors", st_tensors(toy(), metadata={"format": "pt", "lr": 0.001}))
write("st-metadata-nan.safetensors", st_file('{"__metadata__":{"lr":NaN}}'))
nan = toy()
nan[1] = ("net1.bias", "F32", [10], f32([0.0] * 9) + struct.pack("<I", 0x7FC00000))
write("st-nan-weights.safetensors", st_tensors(nan))
