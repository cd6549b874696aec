#!/usr/bin/env python3
"""torch_ddp_bench.py - the PyTorch DDP side of scripts/bench.sh and scripts/gpu-check.sh.

    mpirun -np N python3 torch_ddp_bench.py [--layers=10,10,5] [--batch-size=20]
                                            [--steps=N] [--warmup=W] [--seed=S]
                                            [--device=cpu|cuda] [--graphs]
                                            [--batches=resident|pinned]
                                            [--precision=fp32|tf32|bf16]
                                            [--hook=none|fp16|bf16|bf16-gather]

Trains the MLP ddptrain trains (Linear layers with ReLU between them, named
net1, net2, ... like the DDP tutorial's ToyModel) with
DistributedDataParallel, MSELoss and SGD lr 0.001, the default bucket size:
on the CPU over gloo, one thread per process; with --device=cuda over NCCL,
each rank on GPU (node-local rank) modulo (GPUs). Each rank cycles through
a few batches generated before the clock starts: no DataLoader, no sampler.

--precision: fp32 (the default: float32 products, TF32 off, PyTorch's own
default), tf32 (torch.backends.cuda.matmul.allow_tf32; a GPU only) or bf16
(the forward and the loss inside torch.autocast(dtype=torch.bfloat16), as
people train: bf16 products, float32 weights, loss, gradients and SGD).

--batches: resident (the default: the batches live on the device, so the
timing is the training step alone) or pinned (a GPU only: they live in
pinned host memory and each step copies its batch to the device with
non_blocking=True, which is what a DataLoader with pin_memory=True feeds).

--graphs (a GPU and 1 rank only): the whole step of the plain model --
forward, backward, the optimizer -- captured once as a CUDA graph after 11
eager steps on a side stream, and replayed; each step first copies its
batch into the graph's static input (from the device, or from pinned host
memory). There is no DDP in it: under torch 2.x the capture of a DDP
model's step fails at capture_end (cudaErrorStreamCaptureInvalidated, torch
2.11 on an H200, 2026-12-04), and at one rank DDP's all-reduce sums nothing,
so the plain model's step is the fastest step PyTorch offers there. The
summary then says mode=torch-graph.

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

try:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP
except ImportError as e:  # the arguments are still checked; main() then says what is missing
    torch = None
    TORCH_MISSING = str(e)

NBATCHES = 8  # distinct pre-generated batches per rank, used in turn


class MLP(nn.Module if torch is not None else object):
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
    p.add_argument("--batches", choices=("resident", "pinned"), default="resident")
    p.add_argument("--precision", choices=("fp32", "tf32", "bf16"), default="fp32")
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
    if a.device != "cuda":
        for flag, given in (("--graphs", a.graphs), ("--batches=pinned", a.batches == "pinned"),
                            ("--precision=tf32", a.precision == "tf32")):
            if given:
                p.error("%s needs --device=cuda" % flag)
    if a.graphs:
        if world_size() != 1:
            p.error("--graphs times one rank (the plain model's whole step in one CUDA graph: DDP's "
                    "capture fails under torch 2.x); this is rank %d of %d" % (world_rank(), world_size()))
        if a.hook != "none":
            p.error("--graphs has no DDP, so no communication hook: drop --hook=%s" % a.hook)
    return a


def world_rank():
    """This process's rank, from Open MPI's launcher (0 without it)."""
    return int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))


def world_size():
    """The number of ranks, from Open MPI's launcher (1 without it)."""
    return int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))


def forward_loss(model, loss_fn, x, y, precision, cache=True):
    """The loss of one batch: under bf16 autocast's forward (cache: autocast's cast
    weights kept for the region; off inside a graph capture, as PyTorch's CUDA graph
    notes require)."""
    if precision == "bf16":
        with torch.autocast(x.device.type, dtype=torch.bfloat16, cache_enabled=cache):
            return loss_fn(model(x), y)
    return loss_fn(model(x), y)


def capture(model, loss_fn, opt, x, y, warmup, precision):
    """The whole step of the plain model as one CUDA graph over the static batch x, y:
    returns (graph, loss). The eager warm-up runs on a side stream, as PyTorch's
    documentation warms up a whole-network capture."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(max(warmup, 11)):
            opt.zero_grad(set_to_none=True)
            forward_loss(model, loss_fn, x, y, precision, cache=False).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)  # backward inside the graph then writes fresh .grad
    with torch.cuda.graph(graph):
        loss = forward_loss(model, loss_fn, x, y, precision, cache=False)
        loss.backward()
        opt.step()
    return graph, loss


def main(argv):
    a = parse_args(argv)
    if torch is None:
        print("torch_ddp_bench.py: no PyTorch for %s (%s): install torch for it (pip install torch)"
              % (sys.executable, TORCH_MISSING), file=sys.stderr)
        return 1
    rank, size = world_rank(), world_size()
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
        # fp32: the default, said; tf32: TF32 tensor cores for float32 products
        torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
    dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=size)

    torch.manual_seed(a.seed)  # the same initial weights everywhere; DDP broadcasts rank 0's anyway
    model = MLP(a.widths).to(dev)
    if not a.graphs:
        model = DDP(model, device_ids=[dev.index] if cuda else None)
        register_hook(model, a.hook)
    loss_fn = nn.MSELoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    gen = torch.Generator().manual_seed(a.seed * 1000 + rank)
    pinned = a.batches == "pinned"
    where_batches = torch.device("cpu") if pinned else dev

    def batch(width):
        t = torch.randn(a.batch_size, width, generator=gen).to(where_batches)
        return t.pin_memory() if pinned else t

    xs = [batch(a.widths[0]) for _ in range(NBATCHES)]
    ys = [batch(a.widths[-1]) for _ in range(NBATCHES)]

    if a.graphs:
        # the graph's own input buffers (never views of the batches they are refilled from)
        x = torch.empty(a.batch_size, a.widths[0], device=dev).copy_(xs[0])
        y = torch.empty(a.batch_size, a.widths[-1], device=dev).copy_(ys[0])
        graph, static_loss = capture(model, loss_fn, opt, x, y, a.warmup, a.precision)

        def step(i):
            x.copy_(xs[i % NBATCHES], non_blocking=True)
            y.copy_(ys[i % NBATCHES], non_blocking=True)
            graph.replay()
            return static_loss
    else:
        def step(i):
            opt.zero_grad()
            x = xs[i % NBATCHES].to(dev, non_blocking=True)
            y = ys[i % NBATCHES].to(dev, non_blocking=True)
            loss = forward_loss(model, loss_fn, x, y, a.precision)
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
        # parameters, gradients and DDP's bucket copies of the gradients (not activations;
        # the graph has no DDP, so no bucket copies)
        state_mib = (2 if a.graphs else 3) * nparams * 4 / 1048576.0
        where = ("%s, nccl, %s, batches %s" % (torch.cuda.get_device_name(dev),
                                                 "one CUDA graph, no DDP" if a.graphs else "DDP eager", a.batches)
                 if cuda else "gloo, %d thread(s) per rank" % torch.get_num_threads())
        print("# torch %s, %s, %s, %d ranks, model %s, batch %d per rank"
              % (torch.__version__, where, a.precision, size, a.layers, a.batch_size))
        mode = "torch-graph" if a.graphs else "torch-ddp" + ("" if a.hook == "none" else "-" + a.hook)
        print("# summary: mode=%s replicas=%d steps=%d seconds=%.6f samples_per_s=%.1f "
              "ms_per_step=%.6f state_mib=%.3f"
              % (mode, size, a.steps, seconds,
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
