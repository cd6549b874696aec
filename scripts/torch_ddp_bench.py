#!/usr/bin/env python3
"""torch_ddp_bench.py - the PyTorch DDP side of scripts/bench.sh and scripts/gpu-check.sh.

    mpirun -np N python3 torch_ddp_bench.py [--layers=10,10,5] [--batch-size=20]
                                            [--steps=N] [--warmup=W] [--seed=S]
                                            [--device=cpu|cuda] [--graphs]
                                            [--hook=none|fp16|bf16|bf16-gather]

Trains the MLP ddptrain trains (Linear layers with ReLU between them, named
net1, net2, ... like the DDP tutorial's ToyModel) with
DistributedDataParallel, MSELoss and SGD lr 0.001, the default bucket size:
on the CPU over gloo, one thread per process; with --device=cuda over NCCL,
each rank on GPU (node-local rank) modulo (GPUs), in float32 with TF32 off
(PyTorch's default for matrix products), and with --graphs the whole step
(forward, backward with DDP's all-reduces, the optimizer) captured once as a
CUDA graph and replayed, as PyTorch's documentation captures DDP (its
asynchronous error handling off, 11 eager steps on a side stream first).
Each rank cycles through a few batches generated on the device before the
clock starts, so the timing is the training step alone: no DataLoader, no
sampler, no copy from the host.

The ranks come from Open MPI's launcher (OMPI_COMM_WORLD_RANK and _SIZE;
without them, one rank), the rendezvous from MASTER_ADDR (default
127.0.0.1) and MASTER_PORT (default 29500). After W warm-up steps and a
barrier, rank 0 times N steps with time.perf_counter and prints one line
in ddptrain's format, which bench.sh parses the same way:

    # summary: mode=torch-ddp replicas=2 steps=N seconds=S samples_per_s=X ms_per_step=Y state_mib=Z

(samples_per_s counts every rank's samples, as ddptrain's does.)

--warmup=0 --steps=1 is the whole one-step job: import, rendezvous, one
step, shut down.

--hook registers a DDP communication hook: fp16 and bf16 are PyTorch's own
fp16_compress_hook and bf16_compress_hook (torch 1.13's gloo refuses the
bfloat16 all-reduce of the latter; NCCL takes both); bf16-gather is
bf16_gather_hook below, the bf16 hook's arithmetic over an all-gather, which
gloo carries.  The summary line then says mode=torch-ddp-HOOK.
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


def bf16_gather_hook(process_group, bucket):
    """bf16_compress_hook's arithmetic where the all-reduce cannot carry bfloat16 (gloo in
    torch 1.13): cast the bucket to bfloat16 and divide by the world size in bfloat16, then
    all-gather the 16-bit tensors (as bytes: gloo has no 16-bit integer type) and sum them in bfloat16
    in rank order, each partial sum rounded to bfloat16 (at 2 ranks one rounding), and cast
    the sum back into the float32 bucket."""
    group = process_group if process_group is not None else dist.group.WORLD
    world = group.size()
    buf = bucket.buffer()
    mine = buf.to(torch.bfloat16).div_(world)
    parts = [torch.empty_like(mine) for _ in range(world)]
    fut = dist.all_gather([q.view(torch.uint8) for q in parts], mine.view(torch.uint8),
                          group=group, async_op=True).get_future()

    def decompress(_):
        acc = parts[0].clone()
        for q in parts[1:]:
            acc += q  # bfloat16 + bfloat16, rounded to bfloat16 (nearest even)
        buf.copy_(acc)
        return buf

    return fut.then(decompress)


def register_hook(model, name):
    """Registers the communication hook --hook names on the DDP model (none: nothing)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    hooks = {"fp16": default_hooks.fp16_compress_hook, "bf16": default_hooks.bf16_compress_hook,
             "bf16-gather": bf16_gather_hook}
    if name != "none":
        model.register_comm_hook(None, hooks[name])


def parse_args(argv):
    p = argparse.ArgumentParser(prog="torch_ddp_bench.py")
    p.add_argument("--layers", default="10,10,5")
    p.add_argument("--batch-size", type=int, default=20)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--graphs", action="store_true")
    p.add_argument("--hook", choices=("none", "fp16", "bf16", "bf16-gather"), default="none")
    a = p.parse_args(argv)
    try:
        a.widths = [int(w) for w in a.layers.split(",")]
    except ValueError:
        p.error("--layers: '%s' is not a comma-separated list of widths" % a.layers)
    if len(a.widths) < 2 or min(a.widths) < 1:
        p.error("--layers: need at least two positive widths")
    if a.batch_size < 1 or a.steps < 1 or a.warmup < 0:
        p.error("--batch-size and --steps must be positive, --warmup not negative")
    if a.graphs and a.device != "cuda":
        p.error("--graphs needs --device=cuda")
    return a


def capture(model, loss_fn, opt, x, y, warmup):
    """The whole step as one CUDA graph over the static batch x, y: returns (graph, loss)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(max(warmup, 11)):  # DDP needs 11 eager steps before a capture
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)  # backward inside the graph then writes fresh .grad
    with torch.cuda.graph(graph):
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    return graph, loss


def main(argv):
    a = parse_args(argv)
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    torch.set_num_threads(1)
    cuda = a.device == "cuda"
    if cuda:
        if not torch.cuda.is_available():
            print("torch_ddp_bench.py: --device=cuda: torch %s sees no GPU (torch.cuda.is_available() is False)"
                  % torch.__version__, file=sys.stderr)
            return 1
        torch.cuda.set_device(int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")) % torch.cuda.device_count())
        torch.backends.cuda.matmul.allow_tf32 = False  # the default, said: float32 products
        if a.graphs:  # its watchdog cannot watch a captured collective
            os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "0"
    dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=size)

    torch.manual_seed(a.seed)  # the same initial weights everywhere; DDP broadcasts rank 0's anyway
    model = DDP(MLP(a.widths).to(dev), device_ids=[dev.index] if cuda else None)
    register_hook(model, a.hook)
    loss_fn = nn.MSELoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    gen = torch.Generator().manual_seed(a.seed * 1000 + rank)
    xs = [torch.randn(a.batch_size, a.widths[0], generator=gen).to(dev) for _ in range(NBATCHES)]
    ys = [torch.randn(a.batch_size, a.widths[-1], generator=gen).to(dev) for _ in range(NBATCHES)]

    if a.graphs:
        x, y = xs[0].clone(), ys[0].clone()
        graph, static_loss = capture(model, loss_fn, opt, x, y, a.warmup)

        def step(i):
            x.copy_(xs[i % NBATCHES])
            y.copy_(ys[i % NBATCHES])
            graph.replay()
            return static_loss
    else:
        def step(i):
            opt.zero_grad()
            loss = loss_fn(model(xs[i % NBATCHES]), ys[i % NBATCHES])
            loss.backward()
            opt.step()
            return loss

        for i in range(a.warmup):
            step(i)
    dist.barrier()
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(a.steps):
        loss = step(a.warmup + i)
    loss.item()  # waits for the device
    seconds = time.perf_counter() - t0

    if rank == 0:
        nparams = sum(p.numel() for p in model.parameters())
        # parameters, gradients and DDP's bucket copies of the gradients (not activations)
        state_mib = 3 * nparams * 4 / 1048576.0
        where = ("%s, nccl, %s" % (torch.cuda.get_device_name(dev), "graphs" if a.graphs else "eager")
                 if cuda else "gloo, %d thread(s) per rank" % torch.get_num_threads())
        print("# torch %s, %s, %d ranks, model %s, batch %d per rank"
              % (torch.__version__, where, size, a.layers, a.batch_size))
        print("# summary: mode=torch-ddp%s replicas=%d steps=%d seconds=%.6f samples_per_s=%.1f "
              "ms_per_step=%.6f state_mib=%.3f"
              % ("" if a.hook == "none" else "-" + a.hook, size, a.steps, seconds,
                 a.steps * a.batch_size * size / seconds,
                 1e3 * seconds / a.steps, state_mib))
        sys.stdout.flush()
    if a.hook != "none":
        # Out without tearing down: with a hook's future in DDP's reducer, gloo's destructors
        # in torch 1.13 now and then leave one rank hanging after all the work is done.
        dist.barrier()
        sys.stderr.flush()
        os._exit(0)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
