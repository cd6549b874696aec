"""tensorfiles.py - the small float32 input files the script tests write: a .npy matrix
and a safetensors file of named tensors (tests/numerics/grad-compress.sh, precision.sh).
Import it with the folder on sys.path: "$PY" - "$TOP_SRCDIR/tests/lib" <<'PYEOF'."""
import json
import struct


def npy(path, rows):
    """rows (a list of equal-length lists) as a little-endian float32 .npy matrix."""
    hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % (len(rows), len(rows[0]))
    hdr += " " * (63 - (10 + len(hdr)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode())
        for r in rows:
            f.write(struct.pack("<%df" % len(r), *r))


def safetensors(path, tensors):
    """tensors: name -> (shape, flat float values), written as F32 in that order."""
    meta, blob = {}, b""
    for k, (shape, flat) in tensors.items():
        meta[k] = {"dtype": "F32", "shape": list(shape), "data_offsets": [len(blob), len(blob) + 4 * len(flat)]}
        blob += struct.pack("<%df" % len(flat), *flat)
    h = json.dumps(meta).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + blob)
