#!/usr/bin/env python3
"""torch_interop.py - PyTorch and NumPy on either side of ddptrain, for tests/numerics/torch-interop.sh.

    torch_interop.py gen DIR
        Writes DIR/init.safetensors (a fresh ToyModel, saved with
        safetensors.torch.save_file), DIR/x64.npy and DIR/y64.npy (np.save of
        float64 arrays, NumPy's default dtype), DIR/x32.npy and DIR/y32.npy
        (the same data as float32), and DIR/expect.safetensors: the ToyModel
        after STEPS full-batch SGD steps in PyTorch on the float32 data, which
        is what ddptrain must end with when it converts the float64 files.

    torch_interop.py check DIR FILE...
        Loads each FILE with safetensors.torch.load_file into the ToyModel
        (load_state_dict, strict), checks that every tensor equals the file's
        bytes read independently, and compares the weights and the forward
        output on the data with expect.safetensors: relative error
        max|a-b| / max|b| at most 1e-5. Exit 1 on any failure.

ToyModel is the class of PyTorch's DDP tutorial, as it stands there.
safetensors.torch is the real package when installed; otherwise
tests/numerics/torch-interop.sh puts a stand-in with the same two functions first
on PYTHONPATH.
"""
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
from safetensors.torch import load_file, save_file

TOL = 1e-5
N, STEPS, LR = 64, 3, 0.1


class ToyModel(nn.Module):
    def __init__(self):
        super(ToyModel, self).__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def data(d):
    """The float32 rounding of the float64 data, as ddptrain converts it."""
    x = np.load(os.path.join(d, "x64.npy")).astype(np.float32)
    y = np.load(os.path.join(d, "y64.npy")).astype(np.float32)
    return torch.from_numpy(x), torch.from_numpy(y)


def gen(d):
    torch.manual_seed(7)
    torch.set_num_threads(1)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((N, 10))  # float64
    y = np.tanh(x @ rng.standard_normal((10, 5)))
    assert x.dtype == np.float64 and y.dtype == np.float64
    np.save(os.path.join(d, "x64.npy"), x)
    np.save(os.path.join(d, "y64.npy"), y)
    np.save(os.path.join(d, "x32.npy"), x.astype(np.float32))
    np.save(os.path.join(d, "y32.npy"), y.astype(np.float32))

    model = ToyModel()
    save_file(model.state_dict(), os.path.join(d, "init.safetensors"))
    X, Y = data(d)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for _ in range(STEPS):
        opt.zero_grad()
        nn.MSELoss()(model(X), Y).backward()
        opt.step()
    save_file(model.state_dict(), os.path.join(d, "expect.safetensors"))
    print("torch: ToyModel, %d full-batch SGD steps on %d float64 rows written by np.save" % (STEPS, N))


def raw_tensors(path):
    """name -> float32 array, straight from the file's bytes (8-byte length, JSON header, data)."""
    with open(path, "rb") as f:
        raw = f.read()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen])
    out = {}
    for name, v in header.items():
        if name == "__metadata__":
            continue
        assert v["dtype"] == "F32", "%s: dtype %s" % (name, v["dtype"])
        b, e = v["data_offsets"]
        out[name] = np.frombuffer(raw[8 + hlen + b:8 + hlen + e], dtype="<f4").reshape(v["shape"])
    return out


def rel(a, b):
    """max|a-b| / max|b|, or inf when either holds a NaN or an infinity (a NaN would
    otherwise drop out of the max() over tensors and of the <= TOL test)."""
    a, b = a.detach().double(), b.detach().double()
    if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
        return float("inf")
    scale = b.abs().max().item()
    diff = (a - b).abs().max().item()
    return diff / scale if scale > 0 else diff


def check(d, files):
    X, _ = data(d)
    ref = ToyModel()
    ref.load_state_dict(load_file(os.path.join(d, "expect.safetensors")))
    bad = 0
    for path in files:
        model = ToyModel()
        sd = load_file(path)
        model.load_state_dict(sd, strict=True)  # every name and shape of ToyModel, nothing else
        raw = raw_tensors(path)
        if set(raw) != set(model.state_dict()):
            print("%s: tensors %s, ToyModel has %s" % (path, sorted(raw), sorted(model.state_dict())))
            bad += 1
            continue
        for name, t in model.state_dict().items():
            if not np.array_equal(t.numpy(), raw[name]):
                print("%s: %s differs from the file's bytes" % (path, name))
                bad += 1
        worst = max((rel(t, ref.state_dict()[n]), n) for n, t in model.state_dict().items())
        with torch.no_grad():
            out = rel(model(X), ref(X))
        ok = worst[0] <= TOL and out <= TOL
        bad += not ok
        print("%-16s loaded into ToyModel; against PyTorch: weights %.3g (%s), forward %.3g  %s"
              % (os.path.basename(path), worst[0], worst[1], out, "ok" if ok else "FAIL"))
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "gen":
        gen(sys.argv[2])
    elif len(sys.argv) >= 4 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2], sys.argv[3:]))
    else:
        sys.exit(__doc__)
