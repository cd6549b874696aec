#!/usr/bin/env python3
"""torch_ddp_bench.py - the PyTorch DDP side of scripts/bench.sh.

    mpirun -np N python3 torch_ddp_bench.py [--layers=10,10,5] [--batch-size=20]
                                            [--steps=N] [--warmup=W] [--seed=S]

Trains the MLP ddptrain trains (Linear layers with ReLU between them, named
net1, net2, ... like the DDP tutorial's ToyModel) with
DistributedDataParallel over the gloo backend, MSELoss and SGD lr 0.001,
one thread per process, the default bucket size. Each rank cycles through
a few batches generated before the clock starts, so the timing is the
training step alone: no DataLoader, no sampler.

The ranks come from Open MPI's launcher (OMPI_COMM_WORLD_RANK and _SIZE;
without them, one rank), the rendezvous from MASTER_ADDR (default
127.0.0.1) and MASTER_PORT (default 29500). After W warm-up steps and a
barrier, rank 0 times N steps with time.perf_counter and prints one line
in ddptrain's format, which bench.sh parses the same way:

    # summary: mode=torch-ddp replicas=2 steps=N seconds=S samples_per_s=X ms_per_step=Y state_mib=Z

(samples_per_s counts every rank's samples, as ddptrain's does.)

--warmup=0 --steps=1 is the whole one-step job: import, rendezvous, one
step, shut down.
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

NBATCHES = 8  # distinct pre-generated batches per rank, used in turn


class MLP(nn.Module):
    """net1, relu, net2, relu, ..., netL: ToyModel for widths 10,10,5."""

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


def parse_args(argv):
    p = argparse.ArgumentParser(prog="torch_ddp_bench.py")
    p.add_argument("--layers", default="10,10,5")
    p.add_argument("--batch-size", type=int, default=20)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    try:
        a.widths = [int(w) for w in a.layers.split(",")]
    except ValueError:
        p.error("--layers: '%s' is not a comma-separated list of widths" % a.layers)
    if len(a.widths) < 2 or min(a.widths) < 1:
        p.error("--layers: need at least two positive widths")
    if a.batch_size < 1 or a.steps < 1 or a.warmup < 0:
        p.error("--batch-size and --steps must be positive, --warmup not negative")
    return a


def main(argv):
    a = parse_args(argv)
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=size)

    torch.manual_seed(a.seed)  # the same initial weights everywhere; DDP broadcasts rank 0's anyway
    model = DDP(MLP(a.widths))
    loss_fn = nn.MSELoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    gen = torch.Generator().manual_seed(a.seed * 1000 + rank)
    xs = [torch.randn(a.batch_size, a.widths[0], generator=gen) for _ in range(NBATCHES)]
    ys = [torch.randn(a.batch_size, a.widths[-1], generator=gen) for _ in range(NBATCHES)]

    def step(i):
        opt.zero_grad()
        loss = loss_fn(model(xs[i % NBATCHES]), ys[i % NBATCHES])
        loss.backward()
        opt.step()
        return loss

    for i in range(a.warmup):
        step(i)
    dist.barrier()
    t0 = time.perf_counter()
    for i in range(a.steps):
        loss = step(a.warmup + i)
    loss.item()
    seconds = time.perf_counter() - t0

    if rank == 0:
        nparams = sum(p.numel() for p in model.parameters())
        # parameters, gradients and DDP's bucket copies of the gradients (not activations)
        state_mib = 3 * nparams * 4 / 1048576.0
        print("# torch %s, gloo, %d ranks, %d thread(s) per rank, model %s, batch %d per rank"
              % (torch.__version__, size, torch.get_num_threads(), a.layers, a.batch_size))
        print("# summary: mode=torch-ddp replicas=%d steps=%d seconds=%.6f samples_per_s=%.1f "
              "ms_per_step=%.6f state_mib=%.3f"
              % (size, a.steps, seconds, a.steps * a.batch_size * size / seconds,
                 1e3 * seconds / a.steps, state_mib))
        sys.stdout.flush()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
