#!/usr/bin/env python3
"""torch_crosscheck.py - reference training runs in real PyTorch for tests/torch-crosscheck.sh.

    torch_crosscheck.py gen DIR
        Writes the data sets (DIR/*.npy), one initial model per case
        (DIR/CASE.init.safetensors), the weights PyTorch ends with
        (DIR/CASE.torch.safetensors) and DIR/cases.txt, one line per case:
        "CASE NP ddptrain-args...".  ddptrain is to write DIR/CASE.ddp.safetensors.

    torch_crosscheck.py compare DIR
        Compares every DIR/CASE.ddp.safetensors with DIR/CASE.torch.safetensors,
        prints one line per case and exits 1 if a relative error
        max|a-b| / max|b| (worst tensor) exceeds 1e-5.

PyTorch runs in one process and emulates DistributedDataParallel: each step
it computes every rank's mean-loss gradient on that rank's batch (the
rank's DistributedSampler index list, cut into consecutive batches), averages
them over the ranks as DDP's all-reduce does, and with gradient accumulation
averages over the micro-batches of the group (a short last group averages
over what it has).  Only torch and numpy are used; safetensors files are read
and written directly (8-byte little-endian header length, JSON header, raw
little-endian data).
"""
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data.distributed import DistributedSampler

TOL = 1e-5


# ---- safetensors, F32 only -------------------------------------------------
def st_write(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        a = np.ascontiguousarray(t.detach().cpu().numpy().astype("<f4"))
        b = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def st_read(path):
    with open(path, "rb") as f:
        raw = f.read()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen])
    data = raw[8 + hlen:]
    out = {}
    for name, v in header.items():
        if name == "__metadata__":
            continue
        dt = {"F32": "<f4", "F64": "<f8"}[v["dtype"]]
        b, e = v["data_offsets"]
        out[name] = np.frombuffer(data[b:e], dtype=dt).astype(np.float64).reshape(v["shape"])
    return out


# ---- the model ddptrain trains ---------------------------------------------
class ToyModel(nn.Module):
    """net1, relu, net2, relu, ..., netL: ToyModel's state_dict names for any depth."""

    def __init__(self, widths):
        super().__init__()
        self.nlin = len(widths) - 1
        for i in range(self.nlin):
            setattr(self, "net%d" % (i + 1), nn.Linear(widths[i], widths[i + 1]))
        self.relu = nn.ReLU()

    def forward(self, x):
        for i in range(self.nlin):
            x = getattr(self, "net%d" % (i + 1))(x)
            if i + 1 < self.nlin:
                x = self.relu(x)
        return x


def rank_indices(n, world, rank, shuffle, seed, drop_last, epoch):
    s = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=shuffle,
                           seed=seed, drop_last=drop_last)
    s.set_epoch(epoch)
    return list(s)


def train_ddp(model, X, Y, world, batch, epochs, lr, momentum, wd, accum, shuffle, seed,
              drop_last, max_steps=0):
    """Single-process emulation of DDP over `world` ranks; returns the step count."""
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=wd)
    loss_fn = nn.MSELoss()
    n = X.shape[0]
    steps = 0
    for epoch in range(epochs):
        per_rank = [rank_indices(n, world, r, shuffle, seed, drop_last, epoch) for r in range(world)]
        batches = [[idx[i:i + batch] for i in range(0, len(idx), batch)] for idx in per_rank]
        nmicro = len(batches[0])
        assert all(len(b) == nmicro for b in batches)
        for g0 in range(0, nmicro, accum):
            group = range(g0, min(g0 + accum, nmicro))
            rank_grads = []
            for r in range(world):
                acc = [torch.zeros_like(p) for p in params]
                for mb in group:
                    idx = torch.tensor(batches[r][mb], dtype=torch.long)
                    model.zero_grad(set_to_none=True)
                    loss = loss_fn(model(X[idx]), Y[idx])
                    loss.backward()
                    for a, p in zip(acc, params):
                        a += p.grad
                rank_grads.append([a / len(group) for a in acc])
            # DDP all-reduce: mean over ranks.
            for i, p in enumerate(params):
                p.grad = torch.stack([g[i] for g in rank_grads]).sum(0) / world
            opt.step()
            steps += 1
            if max_steps and steps >= max_steps:
                return steps
    return steps


def save_npy(path, a):
    np.save(path, np.ascontiguousarray(a, dtype="<f4"))


# ---- the cases ---------------------------------------------------------------
# name, data set, layers, ranks, batch, epochs, lr, momentum, wd, accum, shuffle, seed, drop_last
CASES = [
    ("toy-np1-shuffle", "toy96", "10,10,5", 1, 16, 2, 0.05, 0.0, 0.0, 1, True, 0, False),
    ("toy-np2-mom-wd", "toy96", "10,10,5", 2, 8, 2, 0.05, 0.9, 0.01, 1, True, 3, False),
    ("toy-np3-pad", "toy95", "10,10,5", 3, 7, 2, 0.05, 0.0, 0.0, 1, True, 1, False),
    ("toy-np2-accum2", "toy96", "10,10,5", 2, 7, 2, 0.05, 0.0, 0.0, 2, True, 2, False),
    ("deep-np3-pad-mom", "deep95", "6,16,16,3", 3, 8, 2, 0.05, 0.9, 0.01, 1, True, 4, False),
    ("deep-np3-droplast", "deep95", "6,16,16,3", 3, 8, 2, 0.05, 0.9, 0.0, 2, True, 5, True),
    ("deep-np2-noshuffle-accum3", "deep95", "6,16,16,3", 2, 6, 2, 0.05, 0.5, 0.01, 3, False, 0, False),
]

DATA = {"toy96": (96, 10, 5), "toy95": (95, 10, 5), "deep95": (95, 6, 3)}


def gen(d):
    torch.set_num_threads(1)
    rng = np.random.default_rng(20240607)
    data = {}
    for name, (n, win, wout) in DATA.items():
        X = rng.standard_normal((n, win)).astype(np.float32)
        W = rng.standard_normal((win, wout)).astype(np.float32)
        Y = (np.tanh(X @ W) + 0.1 * rng.standard_normal((n, wout))).astype(np.float32)
        save_npy(os.path.join(d, name + ".x.npy"), X)
        save_npy(os.path.join(d, name + ".y.npy"), Y)
        data[name] = (torch.from_numpy(X), torch.from_numpy(Y))
    lines = []
    for ci, (case, ds, layers, world, batch, epochs, lr, mom, wd, accum, shuffle, seed,
             drop_last) in enumerate(CASES):
        torch.manual_seed(1000 + ci)
        model = ToyModel([int(w) for w in layers.split(",")])
        st_write(os.path.join(d, case + ".init.safetensors"), model.state_dict())
        X, Y = data[ds]
        steps = train_ddp(model, X, Y, world, batch, epochs, lr, mom, wd, accum, shuffle, seed,
                          drop_last)
        st_write(os.path.join(d, case + ".torch.safetensors"), model.state_dict())
        args = ["--layers=" + layers, "--batch-size=%d" % batch, "--epochs=%d" % epochs,
                "--lr=%r" % lr, "--momentum=%r" % mom, "--weight-decay=%r" % wd,
                "--grad-accum=%d" % accum, "--seed=%d" % seed,
                "--inputs=" + os.path.join(d, ds + ".x.npy"),
                "--targets=" + os.path.join(d, ds + ".y.npy"),
                "--shuffle" if shuffle else "--no-shuffle",
                "--init=" + os.path.join(d, case + ".init.safetensors"),
                "--save=" + os.path.join(d, case + ".ddp.safetensors"), "--quiet"]
        if drop_last:
            args.append("--drop-last")
        lines.append(" ".join([case, str(world)] + args))
        print("torch: %-26s %d ranks, %d steps" % (case, world, steps))
    with open(os.path.join(d, "cases.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def compare(d):
    bad = 0
    for c in CASES:
        case = c[0]
        ref = st_read(os.path.join(d, case + ".torch.safetensors"))
        init = st_read(os.path.join(d, case + ".init.safetensors"))
        path = os.path.join(d, case + ".ddp.safetensors")
        if not os.path.exists(path):
            print("%-26s no output from ddptrain" % case)
            bad += 1
            continue
        got = st_read(path)
        if sorted(got) != sorted(ref):
            print("%-26s tensors %s, want %s" % (case, sorted(got), sorted(ref)))
            bad += 1
            continue
        worst, wname, dworst = 0.0, "", 0.0
        for name in sorted(ref):
            a, b = got[name], ref[name]
            if a.shape != b.shape:
                print("%-26s %s has shape %s, want %s" % (case, name, a.shape, b.shape))
                bad += 1
                break
            rel = np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30)
            # The same error relative to how far training moved the tensor (informational).
            upd = np.max(np.abs(b - init[name]))
            drel = np.max(np.abs(a - b)) / max(upd, 1e-30)
            if rel > worst or not wname:
                worst, wname = rel, name
            dworst = max(dworst, drel)
        else:
            ok = worst <= TOL
            print("%-26s max rel err %.3e (%s)  err/update %.3e  %s"
                  % (case, worst, wname, dworst, "ok" if ok else "FAIL (> %g)" % TOL))
            bad += not ok
    return 1 if bad else 0


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("gen", "compare"):
        print("usage: torch_crosscheck.py gen|compare DIR", file=sys.stderr)
        return 2
    if sys.argv[1] == "gen":
        gen(sys.argv[2])
        return 0
    return compare(sys.argv[2])


if __name__ == "__main__":
    sys.exit(main())
