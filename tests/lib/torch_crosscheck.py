#!/usr/bin/env python3
"""torch_crosscheck.py - reference training runs in real PyTorch for tests/numerics/torch-crosscheck.sh.

    torch_crosscheck.py gen DIR [CASE...]
        Writes the data sets (DIR/*.npy), one initial model per case
        (DIR/CASE.init.safetensors), the weights PyTorch ends with
        (DIR/CASE.torch.safetensors), the validation results PyTorch saw
        (DIR/CASE.torch.eval.json) and DIR/cases.txt, one line per case:
        "CASE NP ddptrain-args...".  ddptrain is to write DIR/CASE.ddp.safetensors
        and, for cases with a validation set, DIR/CASE.metrics.jsonl.
        With CASE names, only those cases.

    torch_crosscheck.py compare DIR [CASE...]
        Compares every DIR/CASE.ddp.safetensors with DIR/CASE.torch.safetensors
        and every eval record of DIR/CASE.metrics.jsonl with PyTorch's, prints
        one line per case and exits 1 if a relative error max|a-b| / max|b|
        (worst tensor) or |loss_a - loss_b| / |loss_b| (worst evaluation)
        exceeds 1e-5, or an accuracy differs by more than rounding (1e-6).

    torch_crosscheck.py same NEW OLD
        Exits 1 naming each file of what gen wrote in NEW that OLD does not hold
        as well: the case list, the data sets and the initial weights byte for
        byte, the weights (CASE.torch, CASE.fp32) and the records (CASE.ref.jsonl)
        within SAME (float32's roundings depend on the CPU's BLAS kernels).

PyTorch runs in one process and emulates DistributedDataParallel: each step
it computes every rank's mean-loss gradient on that rank's batch (the
rank's DistributedSampler index list, cut into consecutive batches), averages
them over the ranks as DDP's all-reduce does, and with gradient accumulation
averages over the micro-batches of the group (a short last group averages
over what it has).  Then, as a training script would: clip_grad_norm_ over the
trainable parameters, optimizer.step(), LambdaLR.step() with the multipliers of
transformers' get_{constant,linear,cosine}_schedule_with_warmup.  Frozen layers
have requires_grad=False and are not given to the optimizer.  DataParallel
(--mode=dp with G replicas) trains exactly as one process on batches of B*G:
its loss is the mean over the whole gathered batch.

The cases with --zero (in float32) or --grad-compress run real DistributedDataParallel instead:
one process per rank (spawned), gloo over a rendezvous file, the same batches;
with grad-accum the group's first micro-batches under no_sync() and each
micro-batch's loss divided by the group size.  --zero=1, --zero=2 and --zero=3 train
with torch.distributed.optim.ZeroRedundancyOptimizer wrapping the same optimizer
(ZeRO does not change the arithmetic, so one reference serves every stage: --zero=3's
all-gathers of the parameters are copies);
clip_grad_norm_ runs on the DDP-reduced gradients before its step.
--grad-compress=fp16 registers PyTorch's fp16_compress_hook (gloo sums float16);
--grad-compress=bf16, which gloo refuses in torch 1.13, registers
torch_ddp_bench.bf16_gather_hook, the bf16_compress_hook arithmetic over an
all-gather.  The hooks cast, then divide by the world size in 16 bits, where
ddptrain divides in float32 first (its loss seed is scaled): at 2 ranks the
division is exact except for float16 subnormals (an error of 2^-25 absolute),
so both round the same numbers.  gen prints, for each compressed case, how
far the emulation with ddptrain's order and with per-rank gradients taken
in float64 (another float32 rounding of the same gradient) ends from the
reference: the size of the disagreement an honest implementation can show.

The --precision=bf16 cases are torch.autocast("cpu", dtype=torch.bfloat16) training: each
Linear's operands and output in bfloat16 with float32 sums, the ReLU on bfloat16, the
loss in float32, float32 weights, gradients and optimizer; the mean over the ranks and
the micro-batches taken on the float32 gradients after the backward, as DDP takes 1/W
and as this emulation takes 1/K (a script that divides its loss by K before backward
rounds its bf16 gradients otherwise where K is not a power of two).  The float32 sums are autocast's on GPUs, in oneDNN and in torch 2's CPU kernels, but not
in torch 1.13's CPU kernels, which round the backward's products and partial sums to
bfloat16 (at every size on a CPU without AVX-512, at m n k <= 4096 on one with it).
So the reference is that arithmetic with every sum taken exactly (float64), rounded to
float32 and then to bfloat16 (Bf16Linear; the rest is torch's own autograd, loss,
optimizer and schedule): the same on every machine, and bit for bit what torch 2.15's
autocast ends with on these cases.  gen trains four more runs and prints how far each
ends from it: this torch's own autocast (which gen requires to be within TOL of that
arithmetic or, emulated alike, of torch 1.13's bf16 sums in the backward; it is, bit for
bit, on 2.15 and on 1.13), the float32 sums taken in a plain loop's order instead
(another order of the same sums: TOL holds for bf16 as for float32 only if that ends
within TOL/2), every sum moved within its float32 error bound (information), and float32
training (CASE.fp32.safetensors: tests/numerics/torch-ref.sh
checks that ddptrain's bf16 run is at least 4x nearer the reference than that).

Validation (--val-inputs/--val-targets) is evaluated after every --eval-every
steps, at the end of every epoch and at the end of training: the mean loss
over the whole validation set and, for cross-entropy, the accuracy.

Only torch and numpy are used; safetensors files are read and written
directly (8-byte little-endian header length, JSON header, raw little-endian
data).
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data.distributed import DistributedSampler

# Also for the --precision=bf16 cases: an implementation with autocast's operands and
# roundings may sum in another order, which flips a bf16 rounding where a sum lies within
# its float32 error of a rounding boundary (2^-8 relative, carried through training). At
# these sizes that does not happen: the products of bf16 values are exact in float32 and
# their short sums nearly so; gen shows it for each case with the sums in another order
# (a plain loop's), and fails if that run ends beyond TOL/2 from the reference.
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
# net1, relu, net2, relu, ..., netL: ToyModel's state_dict names for any depth; the same
# class scripts/torch_ddp_bench.py times.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir,
                                "scripts"))
from torch_ddp_bench import MLP as ToyModel  # noqa: E402
from torch_ddp_bench import bf16_gather_hook  # noqa: E402


# ---- learning-rate schedules: transformers' multipliers ----------------------
def schedule_lambda(kind, warmup, total):
    """get_{constant,linear,cosine}_schedule_with_warmup's lr_lambda (num_cycles 0.5)."""
    def f(step):
        if step < warmup:
            return float(step) / float(max(1, warmup))
        if kind == "constant":
            return 1.0
        if kind == "linear":
            return max(0.0, float(total - step) / float(max(1, total - warmup)))
        progress = float(step - warmup) / float(max(1, total - warmup))
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 * progress)))
    return f


def rank_indices(n, world, rank, shuffle, seed, drop_last, epoch):
    s = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=shuffle,
                           seed=seed, drop_last=drop_last)
    s.set_epoch(epoch)
    return list(s)


def autocast(c, enabled=True):
    """torch.autocast's bfloat16 on the CPU for a --precision=bf16 case, else nothing."""
    return torch.autocast("cpu", dtype=torch.bfloat16,
                          enabled=enabled and c.get("precision") == "bf16")


def to_bf16(t):
    """t rounded to bfloat16 (nearest even), in float64."""
    return t.to(torch.bfloat16).double()


def sum_exact(a, b):
    """a @ b (float32 operands of bf16 values, whose products are exact in float32) summed
    exactly (float64), then rounded to float32 and to bfloat16, as float32."""
    return to_bf16((a.double() @ b.double()).float()).float()


def sum_loop(a, b):
    """a @ b with each float32 sum taken in a plain loop's order (k = 0, 1, ...), rounded
    to bfloat16, as float32: another order of the sums sum_exact takes."""
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float32)
    for k in range(a.shape[1]):
        acc = acc + a[:, k:k + 1] * b[k:k + 1, :]
    return to_bf16(acc).float()


def sum_bf16(a, b):
    """a @ b as torch 1.13's CPU kernels compute the backward's bfloat16 products: each
    product rounded to bfloat16 and added in a loop (k = 0, 1, ...) to a bfloat16 sum,
    rounded after every addition."""
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float32)
    for k in range(a.shape[1]):
        acc = to_bf16(acc + to_bf16(a[:, k:k + 1] * b[k:k + 1, :]).float()).float()
    return acc


def sum_moved(gen):
    """sum_exact with each sum of K terms moved by a relative error drawn uniformly from
    +-K 2^-24 by the torch.Generator gen (before its roundings): any order's float32 sum is
    within that of the exact one (Higham's gamma_K), so this is what a bf16 run with its
    float32 sums in an order far from torch's may come to (scripts/gpu-check.sh holds a
    GPU's bf16 run to the CPU's by it; gen prints it, information only)."""
    def sums(a, b):
        t = a.double() @ b.double()
        u = torch.rand(t.shape, generator=gen, dtype=torch.float64)
        return to_bf16((t * (1 + (2 * u - 1) * a.shape[1] * 2.0 ** -24)).float()).float()
    return sums


class Bf16Linear(torch.autograd.Function):
    """autocast's Linear: operands rounded to bfloat16, each product summed by `sums`
    (sum_exact, sum_loop; the backward's weight and input gradients by `bsums`, the same
    unless given), its result rounded to bfloat16; the weight and bias gradients are
    bfloat16 values in float32, as autocast's cast backward gives them."""
    @staticmethod
    def forward(ctx, x, w, b, sums, bsums):
        xb, wb = to_bf16(x).float(), to_bf16(w).float()
        ctx.save_for_backward(xb, wb)
        ctx.sums, ctx.bsums = sums, bsums or sums
        ones = torch.ones(xb.shape[0], 1)
        return sums(torch.cat([xb, ones], 1), torch.cat([wb.T, to_bf16(b).float()[None, :]], 0))

    @staticmethod
    def backward(ctx, gy):
        xb, wb = ctx.saved_tensors
        g = to_bf16(gy).float()
        ones = torch.ones(1, g.shape[0])
        return ctx.bsums(g, wb), ctx.bsums(g.T, xb), ctx.sums(ones, g)[0], None, None


def forward_bf16(model, sums=sum_exact, bsums=None):
    """model's forward through Bf16Linear (ReLU between the layers, on bf16 values)."""
    layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]

    def fwd(x):
        x = x.float()
        for i, lin in enumerate(layers):
            x = Bf16Linear.apply(x, lin.weight, lin.bias, sums, bsums)
            if i + 1 < len(layers):
                x = torch.relu(x)
        return x
    return fwd


def loss_of(kind, out, y):
    return F.cross_entropy(out, y) if kind == "cross-entropy" else F.mse_loss(out, y)


def evaluate(model, kind, Xv, Yv, c=None, fwd=None):
    """Mean loss over the whole validation set and (cross-entropy) the accuracy; fwd, if
    given, is the forward to use instead of model's (without autocast)."""
    with torch.no_grad(), autocast(c or {}, fwd is None):
        out = (fwd or model)(Xv).float()
        if kind == "cross-entropy":
            loss = F.cross_entropy(out.double(), Yv, reduction="sum").item() / Xv.shape[0]
            acc = (out.argmax(1) == Yv).double().mean().item()
            return loss, acc
        return F.mse_loss(out.double(), Yv.double(), reduction="sum").item() / Yv.numel(), None


def steps_per_epoch(c, n):
    world, batch = (1, c["batch"] * c["replicas"]) if c["mode"] == "dp" else (c["np"], c["batch"])
    per_rank = len(rank_indices(n, world, 0, False, 0, c["drop_last"], 0))
    nmicro = (per_rank + batch - 1) // batch
    return (nmicro + c["accum"] - 1) // c["accum"]


def batch_accuracy(kind, out, y):
    """The fraction of rows whose largest output is the label (cross-entropy), else None."""
    if kind != "cross-entropy":
        return None
    return (out.argmax(1) == y).double().mean().item()


def train(model, c, X, Y, Xv, Yv, norms=None, fwd=None):
    """Single-process emulation of DDP over c["np"] ranks (or DP over c["replicas"]).
    Returns (records, evals): records a list of (step, epoch, loss, accuracy, lr), one per
    optimizer step, where loss (and accuracy) is what the step reports: the mean over the
    ranks of each rank's mean over the group's micro-batches of the micro-batch's mean loss
    (fraction right); evals a list of (step, epoch, loss, accuracy).  With clipping, norms
    gets each step's gradient norm before clipping.  fwd, if given, is the forward to train
    through instead of model's (without autocast)."""
    if c["mode"] == "dp":
        world, batch = 1, c["batch"] * c["replicas"]
    else:
        world, batch = c["np"], c["batch"]
    frozen = set(c["freeze"])
    for li in frozen:
        for p in getattr(model, "net%d" % li).parameters():
            p.requires_grad_(False)
    params = [p for p in model.parameters() if p.requires_grad]
    if c["optimizer"] == "adamw":
        opt = torch.optim.AdamW(params, lr=c["lr"], betas=c["betas"], eps=c["eps"],
                                weight_decay=c["wd"])
    else:
        opt = torch.optim.SGD(params, lr=c["lr"], momentum=c["momentum"], weight_decay=c["wd"],
                              nesterov=c["nesterov"])
    n = X.shape[0]
    total = steps_per_epoch(c, n) * c["epochs"]
    if c["max_steps"]:
        total = min(total, c["max_steps"])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule_lambda(c["schedule"], c["warmup"], total))
    evals, records = [], []

    def do_eval(step, epoch):
        if Xv is not None and (not evals or evals[-1][0] != step):
            evals.append((step, epoch) + evaluate(model, c["loss"], Xv, Yv, c, fwd))

    steps = 0
    for epoch in range(c["epochs"]):
        per_rank = [rank_indices(n, world, r, c["shuffle"], c["seed"], c["drop_last"], epoch)
                    for r in range(world)]
        batches = [[idx[i:i + batch] for i in range(0, len(idx), batch)] for idx in per_rank]
        nmicro = len(batches[0])
        assert all(len(b) == nmicro for b in batches)
        for g0 in range(0, nmicro, c["accum"]):
            group = range(g0, min(g0 + c["accum"], nmicro))
            rank_grads, step_loss, step_acc = [], 0.0, 0.0
            for r in range(world):
                acc = [torch.zeros_like(p) for p in params]
                for mb in group:
                    idx = torch.tensor(batches[r][mb], dtype=torch.long)
                    model.zero_grad(set_to_none=True)
                    with autocast(c, fwd is None):
                        out = (fwd or model)(X[idx])
                        loss = loss_of(c["loss"], out, Y[idx])
                    loss.backward()
                    step_loss += loss.item() / (len(group) * world)
                    a_mb = batch_accuracy(c["loss"], out, Y[idx])
                    step_acc = None if a_mb is None else step_acc + a_mb / (len(group) * world)
                    for a, p in zip(acc, params):
                        a += p.grad
                rank_grads.append([a / len(group) for a in acc])
            lr = opt.param_groups[0]["lr"]
            # DDP all-reduce: mean over ranks.
            for i, p in enumerate(params):
                p.grad = torch.stack([g[i] for g in rank_grads]).sum(0) / world
            if c["clip"]:
                norm = torch.nn.utils.clip_grad_norm_(params, c["clip"])
                if norms is not None:
                    norms.append(norm.item())
            opt.step()
            sched.step()
            steps += 1
            records.append((steps, epoch, step_loss, step_acc, lr))
            if c["eval_every"] and steps % c["eval_every"] == 0:
                do_eval(steps, epoch)
            if steps >= total:
                do_eval(steps, epoch)
                return records, evals
        do_eval(steps, epoch)
    return records, evals


def make_optimizer(c, params):
    """The optimizer of case c over params: ZeroRedundancyOptimizer wrapping it for --zero."""
    if c["optimizer"] == "adamw":
        cls, kw = torch.optim.AdamW, dict(lr=c["lr"], betas=c["betas"], eps=c["eps"],
                                          weight_decay=c["wd"])
    else:
        cls, kw = torch.optim.SGD, dict(lr=c["lr"], momentum=c["momentum"], weight_decay=c["wd"],
                                        nesterov=c["nesterov"])
    if c["zero"]:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        return ZeroRedundancyOptimizer(params, optimizer_class=cls, **kw)
    return cls(params, **kw)


def dist_rank(rank, c, init, X, Y, Xv, Yv, rdv, result):
    """One rank of the real DistributedDataParallel run of case c (gloo); rank 0 writes
    (records, evals, norms, state_dict) to result."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    import faulthandler
    faulthandler.dump_traceback_later(60, exit=True)  # a hung rank says where, then fails
    torch.set_num_threads(1)
    world, batch = c["np"], c["batch"]
    dist.init_process_group("gloo", init_method="file://" + rdv, rank=rank, world_size=world)
    model = ToyModel([int(w) for w in c["layers"].split(",")])
    model.load_state_dict(init)
    for li in c["freeze"]:
        for p in getattr(model, "net%d" % li).parameters():
            p.requires_grad_(False)
    params = [p for p in model.parameters() if p.requires_grad]
    ddp = DDP(model)
    if c["compress"] == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif c["compress"] == "bf16":
        ddp.register_comm_hook(None, bf16_gather_hook)
    opt = make_optimizer(c, params)
    n = X.shape[0]
    total = steps_per_epoch(c, n) * c["epochs"]
    if c["max_steps"]:
        total = min(total, c["max_steps"])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule_lambda(c["schedule"], c["warmup"], total))
    evals, records, norms = [], [], []

    def do_eval(step, epoch):
        if rank == 0 and Xv is not None and (not evals or evals[-1][0] != step):
            evals.append((step, epoch) + evaluate(model, c["loss"], Xv, Yv))

    steps, done = 0, False
    for epoch in range(c["epochs"]):
        idx_all = rank_indices(n, world, rank, c["shuffle"], c["seed"], c["drop_last"], epoch)
        batches = [idx_all[i:i + batch] for i in range(0, len(idx_all), batch)]
        nmicro = len(batches)
        for g0 in range(0, nmicro, c["accum"]):
            group = range(g0, min(g0 + c["accum"], nmicro))
            mine = []
            ddp.zero_grad(set_to_none=True)
            for k, mb in enumerate(group):
                idx = torch.tensor(batches[mb], dtype=torch.long)
                out = ddp(X[idx])
                loss = loss_of(c["loss"], out, Y[idx])
                mine.append((loss.item(), batch_accuracy(c["loss"], out, Y[idx])))
                if k + 1 < len(group):
                    with ddp.no_sync():
                        (loss / len(group)).backward()
                else:
                    (loss / len(group)).backward()
            # What the step reports, summed in the emulation's order (rank, micro-batch).
            every = [None] * world
            dist.all_gather_object(every, mine)
            step_loss, step_acc = 0.0, 0.0
            for r in range(world):
                for lv, av in every[r]:
                    step_loss += lv / (len(group) * world)
                    step_acc = None if av is None else step_acc + av / (len(group) * world)
            lr = opt.param_groups[0]["lr"]
            if c["clip"]:
                norms.append(torch.nn.utils.clip_grad_norm_(params, c["clip"]).item())
            opt.step()
            sched.step()
            steps += 1
            records.append((steps, epoch, step_loss, step_acc, lr))
            if c["eval_every"] and steps % c["eval_every"] == 0:
                do_eval(steps, epoch)
            if steps >= total:
                done = True
                break
        do_eval(steps, epoch)
        if done:
            break
    if rank == 0:
        torch.save((records, evals, norms, model.state_dict()), result)
    dist.barrier()
    # Out without tearing down: gloo's destructors (the process group, the DDP reducer with
    # a hook's future) hung one rank now and then in torch 1.13 after everything was done.
    sys.stdout.flush()
    os._exit(0)


def train_dist(model, c, X, Y, Xv, Yv, norms):
    """Case c trained by c["np"] processes with DistributedDataParallel from model's
    weights, which it then holds; returns (records, evals) as train does."""
    import tempfile
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as tmp:
        rdv, result = os.path.join(tmp, "rendezvous"), os.path.join(tmp, "result.pt")
        init = {k: v.clone() for k, v in model.state_dict().items()}
        mp.start_processes(dist_rank, args=(c, init, X, Y, Xv, Yv, rdv, result), nprocs=c["np"],
                           join=True, start_method="spawn")
        records, evals, got, state = torch.load(result)
    model.load_state_dict(state)
    norms.extend(got)
    return records, evals


def emulate_compressed(model, c, X, Y):
    """The single-process emulation of a compressed case in ddptrain's order: each rank's
    gradient taken in float64 and rounded to float32 (another rounding of the same
    gradient than PyTorch's), divided by the world size in float32, rounded to 16 bits,
    summed in rank order with each partial sum rounded, widened.  Returns the final
    state_dict (the model is left as it was)."""
    import copy
    m = copy.deepcopy(model).double()
    dt = torch.float16 if c["compress"] == "fp16" else torch.bfloat16
    world, batch = c["np"], c["batch"]
    assert c["accum"] == 1 and not c["clip"] and c["mode"] == "ddp"  # ZeRO: the same arithmetic
    params = [p for p in m.parameters() if p.requires_grad]
    shadow = [p.detach().float().clone().requires_grad_(True) for p in params]
    if c["optimizer"] == "adamw":
        opt = torch.optim.AdamW(shadow, lr=c["lr"], betas=c["betas"], eps=c["eps"], weight_decay=c["wd"])
    else:
        opt = torch.optim.SGD(shadow, lr=c["lr"], momentum=c["momentum"], weight_decay=c["wd"],
                              nesterov=c["nesterov"])
    n = X.shape[0]
    total = steps_per_epoch(c, n) * c["epochs"]
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule_lambda(c["schedule"], c["warmup"], total))
    steps = 0
    for epoch in range(c["epochs"]):
        per_rank = [rank_indices(n, world, r, c["shuffle"], c["seed"], c["drop_last"], epoch)
                    for r in range(world)]
        batches = [[idx[i:i + batch] for i in range(0, len(idx), batch)] for idx in per_rank]
        for mb in range(len(batches[0])):
            with torch.no_grad():
                for p, s_ in zip(params, shadow):
                    p.copy_(s_.double())
            parts = []
            for r in range(world):
                idx = torch.tensor(batches[r][mb], dtype=torch.long)
                m.zero_grad(set_to_none=True)
                yt = Y[idx] if c["loss"] == "cross-entropy" else Y[idx].double()
                loss_of(c["loss"], m(X[idx].double()), yt).backward()
                parts.append([(p.grad.float() / world).to(dt) for p in params])
            for i, s_ in enumerate(shadow):
                acc = parts[0][i].clone()
                for q in parts[1:]:
                    acc += q[i]
                s_.grad = acc.float()
            opt.step()
            sched.step()
            steps += 1
            if steps >= total:
                break
    with torch.no_grad():
        for p, s_ in zip(params, shadow):
            p.copy_(s_.double())
    return {k: v.float() for k, v in m.state_dict().items()}


def worst_rel(a, b):
    """max over tensors of max|a-b| / max|b| (the test's measure)."""
    return max((a[k] - b[k]).abs().max().item() / max(b[k].abs().max().item(), 1e-30) for k in b)


def save_npy(path, a, dtype="<f4"):
    np.save(path, np.ascontiguousarray(a, dtype=dtype))


# ---- the cases ---------------------------------------------------------------
DEFAULTS = dict(np=1, mode="ddp", replicas=1, batch=8, epochs=2, lr=0.05, momentum=0.0, wd=0.0,
                accum=1, shuffle=True, seed=0, drop_last=False, max_steps=0, loss="mse",
                optimizer="sgd", betas=(0.9, 0.999), eps=1e-8, nesterov=False,
                schedule="constant", warmup=0, clip=0.0, freeze=(), val=None, eval_every=0,
                env=(), zero=0, compress=None, precision="fp32")


def case(name, ds, layers, **kw):
    c = dict(DEFAULTS, name=name, ds=ds, layers=layers)
    for k in kw:
        assert k in DEFAULTS, k
    c.update(kw)
    return c


# The full combination of issue 16: cross-entropy + AdamW + cosine warmup + clipping +
# a frozen layer + grad-accum, with a validation set evaluated every 3 steps.
COMBO = dict(loss="cross-entropy", optimizer="adamw", lr=0.01, betas=(0.8, 0.99), eps=1e-7,
             wd=0.05, schedule="cosine", warmup=3, clip=0.3, accum=2, val="cls40", eval_every=3,
             epochs=3)

# Clipping limits between the smallest and the largest gradient norm of the run, so that
# some steps are clipped and others not (gen prints how many).
CLIP_SGD, CLIP_NESTEROV, CLIP_ADAMW, CLIP_ADAMW_DP, CLIP_DP_EMPTY = 0.25, 0.25, 0.3, 0.3, 0.4
CLIP_ZERO = 0.3

# The ring all-reduce forced on one node, on every bucket however small, in 1 KiB chunks;
# the shared-memory one forced. The model 6,17,12,3 has 374 parameters + 3 slots = 377
# floats: odd, and not a multiple of 3, so neither slices nor ring pieces divide evenly.
RING = ("DDPTRAIN_ALLREDUCE=ring", "DDPTRAIN_RING_MIN_KB=0", "DDPTRAIN_RING_CHUNK_KB=1")
SHM = ("DDPTRAIN_ALLREDUCE=shm",)

CASES = [
    case("toy-np1-shuffle", "toy96", "10,10,5", np=1, batch=16),
    case("toy-np2-mom-wd", "toy96", "10,10,5", np=2, momentum=0.9, wd=0.01, seed=3),
    case("toy-np3-pad", "toy95", "10,10,5", np=3, batch=7, seed=1),
    case("toy-np2-accum2", "toy96", "10,10,5", np=2, batch=7, accum=2, seed=2),
    case("deep-np3-pad-mom", "deep95", "6,16,16,3", np=3, momentum=0.9, wd=0.01, seed=4),
    case("deep-np3-droplast", "deep95", "6,16,16,3", np=3, momentum=0.9, accum=2, seed=5,
         drop_last=True),
    case("deep-np2-noshuffle-accum3", "deep95", "6,16,16,3", np=2, batch=6, momentum=0.5,
         wd=0.01, accum=3, shuffle=False),
    # cross-entropy, each new optimizer and schedule on its own
    case("ce-np1-adamw", "cls96", "8,16,4", loss="cross-entropy", optimizer="adamw", lr=0.01,
         val="cls40"),
    case("ce-np2-nesterov-linear", "cls96", "8,16,4", np=2, loss="cross-entropy", momentum=0.9,
         nesterov=True, wd=0.01, schedule="linear", warmup=2, seed=6),
    case("mse-np2-adamw-constwarm-clip", "deep95", "6,16,16,3", np=2, optimizer="adamw",
         lr=0.01, wd=0.1, schedule="constant", warmup=4, clip=0.05, val="deep30", seed=7),
    case("mse-np2-freeze-last", "deep95", "6,16,16,3", np=2, momentum=0.9, freeze=(3,),
         val="deep30", eval_every=4, seed=8),
    case("mse-np1-freeze-first-cosine-max", "deep95", "6,16,16,3", np=1, optimizer="adamw",
         lr=0.01, freeze=(1,), schedule="cosine", warmup=2, max_steps=9, seed=9),
    # the whole combination over 1, 2 and 3 ranks (uneven, padded) and in dp mode
    case("combo-np1", "cls96", "8,16,16,4", np=1, freeze=(2,), seed=10, **COMBO),
    case("combo-np2", "cls96", "8,16,16,4", np=2, freeze=(2,), seed=11, **COMBO),
    case("combo-np3-pad", "cls95", "8,16,16,4", np=3, batch=5, freeze=(1,), seed=12, **COMBO),
    case("combo-dp3", "cls95", "8,16,16,4", mode="dp", replicas=3, batch=4, freeze=(2,),
         seed=13, **COMBO),
    # Clipping that triggers on some steps and not on others, over several trainable runs
    # (frozen layers between them), with SGD and AdamW, at 1 to 3 ranks and in dp.
    case("clip-sgd-np1-3runs", "deep95", "6,16,16,16,16,3", np=1, momentum=0.9,
         freeze=(2, 4), clip=CLIP_SGD, seed=14),
    case("clip-nesterov-np2-3runs", "deep95", "6,16,16,16,16,3", np=2, momentum=0.9,
         nesterov=True, wd=0.01, freeze=(2, 4), clip=CLIP_NESTEROV, seed=15),
    case("clip-adamw-np3-pad-linear", "deep95", "6,16,16,16,3", np=3, batch=7, optimizer="adamw",
         lr=0.01, wd=0.1, schedule="linear", warmup=2, freeze=(2,), clip=CLIP_ADAMW, seed=16),
    case("clip-adamw-dp2", "deep95", "6,16,16,16,3", mode="dp", replicas=2, batch=5,
         optimizer="adamw", lr=0.01, freeze=(3,), clip=CLIP_ADAMW_DP, seed=17),
    # dp over 3 replicas, 100 rows in steps of 12: each epoch's last step has 4 rows, which
    # torch.chunk cuts into 2 + 2, so replica 3 gets no rows and must add nothing.
    case("dp3-empty-replica-clip", "deep100", "6,16,16,3", mode="dp", replicas=3, batch=4,
         momentum=0.9, freeze=(2,), clip=CLIP_DP_EMPTY, epochs=3, seed=18),
    # slices and ring pieces that do not divide evenly
    case("shm-np3-uneven", "deep95", "6,17,12,3", np=3, batch=7, momentum=0.9, seed=19, env=SHM),
    case("ring-np2-uneven", "deep95", "6,17,12,3", np=2, momentum=0.9, accum=2, seed=20, env=RING),
    case("ring-np3-uneven", "cls95", "8,17,12,4", np=3, batch=5, loss="cross-entropy",
         momentum=0.9, seed=21, env=RING),
    # Issue 22: real DDP (gloo) with ZeroRedundancyOptimizer; --zero=1 and --zero=2 share
    # the reference. The 3-rank models have 6 parameter tensors of uneven sizes, so
    # ZeRO's greedy partition and ddptrain's contiguous shards are both uneven.
    case("zero1-np2-momentum", "deep95", "6,16,16,3", np=2, momentum=0.9, wd=0.01, seed=22,
         zero=1),
    case("zero2-np3-adamw-clip", "deep95", "6,17,12,3", np=3, batch=7, optimizer="adamw",
         lr=0.01, wd=0.1, clip=CLIP_ZERO, seed=23, zero=2),
    case("zero1-np3-nesterov-freeze", "cls95", "8,17,12,4", np=3, batch=5, loss="cross-entropy",
         momentum=0.9, nesterov=True, wd=0.01, freeze=(2,), seed=24, zero=1),
    case("zero2-np2-adamw-accum2-warmup", "cls96", "8,16,16,4", np=2, batch=6,
         loss="cross-entropy", optimizer="adamw", lr=0.01, wd=0.05, accum=2, schedule="cosine",
         warmup=3, val="cls40", eval_every=3, seed=25, zero=2),
    # Gradients compressed to 16 bits, 2 ranks only: one rounding of the sum, the same in
    # the hook and in ddptrain (see the top).
    case("fp16-np2-mse", "deep95", "6,16,16,3", np=2, lr=0.05, seed=26, compress="fp16"),
    case("fp16-np2-ce-momentum", "cls96", "8,16,4", np=2, loss="cross-entropy", momentum=0.9,
         seed=27, compress="fp16"),
    case("bf16-np2-mse-momentum", "deep95", "6,16,16,3", np=2, momentum=0.9, seed=28,
         compress="bf16"),
    case("bf16-np2-ce", "cls96", "8,16,4", np=2, loss="cross-entropy", seed=29, compress="bf16"),
    case("zero1-bf16-np2-adamw", "deep95", "6,16,16,3", np=2, optimizer="adamw", lr=0.01,
         seed=30, zero=1, compress="bf16"),
    # --precision=bf16: torch.autocast's bfloat16 with float32 sums (see the top).
    case("autocast-np1-sgd", "deep95", "6,16,16,3", np=1, momentum=0.9, seed=31,
         precision="bf16"),
    case("autocast-np2-adamw", "deep95", "6,16,16,3", np=2, optimizer="adamw", lr=0.01,
         val="deep30", eval_every=4, seed=32, precision="bf16"),
    case("autocast-np2-ce-accum2", "cls96", "8,16,16,4", np=2, batch=6, loss="cross-entropy",
         momentum=0.9, lr=0.1, accum=2, epochs=4, seed=33, precision="bf16"),
    # Issue 34: means over ranks times micro-batches that are not powers of two (3, 3, 12,
    # 6, 3), taken after the bf16 backward; ZeRO-1, ZeRO-2 and dp too.
    case("autocast-np3-sgd", "deep95", "6,16,16,3", np=3, momentum=0.9, seed=34,
         precision="bf16"),
    case("autocast-np1-accum3-adamw", "deep95", "6,16,16,3", np=1, batch=6, optimizer="adamw",
         lr=0.01, accum=3, seed=35, precision="bf16"),
    case("autocast-np3-zero1-ce-accum4", "cls96", "8,16,16,4", np=3, batch=6,
         loss="cross-entropy", momentum=0.9, lr=0.1, accum=4, epochs=4, seed=36, zero=1,
         precision="bf16"),
    case("autocast-np2-zero2-accum3", "deep95", "6,16,16,3", np=2, batch=5, momentum=0.9,
         accum=3, val="deep30", eval_every=3, seed=37, zero=2, precision="bf16"),
    case("autocast-dp1-accum3", "deep95", "6,16,16,3", mode="dp", replicas=1, batch=7,
         momentum=0.9, accum=3, seed=38, precision="bf16"),
    # Issue 35 (last: a case's initial weights follow its place in this list): --zero=3
    # keeps the parameters sharded and all-gathers each layer before its forward and
    # backward; all-gather is a copy, so the arithmetic is ZeRO's and the reference too:
    # real DDP with ZeroRedundancyOptimizer. A frozen inner layer (its window goes whole
    # to one rank), clipping over the shards, validation whose shares need different
    # numbers of batches (each batch gathers every layer on every rank).
    case("zero3-np2-momentum-freeze-val", "deep95", "6,16,16,16,3", np=2, batch=6, momentum=0.9,
         wd=0.01, freeze=(2,), val="deep30", eval_every=4, seed=39, zero=3),
    case("zero3-np3-adamw-clip-accum2", "cls96", "8,17,12,4", np=3, batch=5, loss="cross-entropy",
         optimizer="adamw", lr=0.01, wd=0.05, clip=CLIP_ZERO, accum=2, schedule="linear",
         warmup=2, seed=40, zero=3),
]

# name: rows, inputs, outputs (classes for "cls")
DATA = {"toy96": (96, 10, 5), "toy95": (95, 10, 5), "deep95": (95, 6, 3), "deep30": (30, 6, 3),
        "cls96": (96, 8, 4), "cls95": (95, 8, 4), "cls40": (40, 8, 4), "deep100": (100, 6, 3)}


def make_data(d):
    rng = np.random.default_rng(20240607)
    data = {}
    for name, (n, win, wout) in DATA.items():
        X = rng.standard_normal((n, win)).astype(np.float32)
        W = rng.standard_normal((win, wout)).astype(np.float32)
        save_npy(os.path.join(d, name + ".x.npy"), X)
        if name.startswith("cls"):
            # Labels from a random linear teacher, with some noise so it is not separable.
            Y = np.argmax(X @ W + 0.5 * rng.standard_normal((n, wout)), axis=1)
            # int64 for two of the sets, uint8 for the other: both dtypes are read.
            dt = "<u1" if name == "cls95" else "<i8"
            np.save(os.path.join(d, name + ".y.npy"), Y.astype(dt))
            data[name] = (torch.from_numpy(X), torch.from_numpy(Y.astype(np.int64)))
        else:
            Y = (np.tanh(X @ W) + 0.1 * rng.standard_normal((n, wout))).astype(np.float32)
            save_npy(os.path.join(d, name + ".y.npy"), Y)
            data[name] = (torch.from_numpy(X), torch.from_numpy(Y))
    return data


def ddptrain_args(c):
    """ddptrain's arguments for case c: its inputs under @REF@/, its outputs under @OUT@/
    (the test puts the directories in)."""
    def fmt(v):
        return "%r" % v
    ref, out = "@REF@/", "@OUT@/"
    a = ["--layers=" + c["layers"], "--batch-size=%d" % c["batch"], "--epochs=%d" % c["epochs"],
         "--lr=" + fmt(c["lr"]), "--weight-decay=" + fmt(c["wd"]),
         "--grad-accum=%d" % c["accum"], "--seed=%d" % c["seed"],
         "--inputs=" + ref + c["ds"] + ".x.npy",
         "--targets=" + ref + c["ds"] + ".y.npy",
         "--shuffle" if c["shuffle"] else "--no-shuffle",
         "--init=" + ref + c["name"] + ".init.safetensors",
         "--save=" + out + c["name"] + ".ddp.safetensors",
         # Every step's loss, in the progress lines (standard output) and in --metrics.
         "--log-every=1", "--metrics=" + out + c["name"] + ".metrics.jsonl"]
    # The flags of the features added after the first cases only when they differ from
    # the defaults, so the old cases run with the command lines they always had.
    if c["optimizer"] == "sgd":
        a.append("--momentum=" + fmt(c["momentum"]))
    if c["drop_last"]:
        a.append("--drop-last")
    if c["mode"] == "dp":
        a += ["--mode=dp", "--replicas=%d" % c["replicas"]]
    if c["max_steps"]:
        a.append("--max-steps=%d" % c["max_steps"])
    if c["loss"] != "mse":
        a.append("--loss=" + c["loss"])
    if c["optimizer"] != "sgd":
        a += ["--optimizer=" + c["optimizer"], "--betas=%r,%r" % c["betas"], "--eps=" + fmt(c["eps"])]
    if c["nesterov"]:
        a.append("--nesterov")
    if c["schedule"] != "constant" or c["warmup"]:
        a += ["--lr-schedule=" + c["schedule"], "--warmup-steps=%d" % c["warmup"]]
    if c["clip"]:
        a.append("--clip-grad-norm=" + fmt(c["clip"]))
    if c["freeze"]:
        a.append("--freeze=" + ",".join(str(x) for x in c["freeze"]))
    if c["val"]:
        a += ["--val-inputs=" + ref + c["val"] + ".x.npy",
              "--val-targets=" + ref + c["val"] + ".y.npy"]
        if c["eval_every"]:
            a.append("--eval-every=%d" % c["eval_every"])
    if c["zero"]:
        a.append("--zero=%d" % c["zero"])
    if c["compress"]:
        a.append("--grad-compress=" + c["compress"])
    if c["precision"] != "fp32":
        a.append("--precision=" + c["precision"])
    return a


def selected(names):
    return [c for c in CASES if not names or c["name"] in names]


def ref_records(records, evals):
    """The reference a test compares ddptrain's --metrics with: JSON lines shaped like
    ddptrain's own step and eval records (epochs 1-based)."""
    lines = []
    for step, epoch, loss, acc, lr in records:
        r = {"type": "step", "step": step, "epoch": epoch + 1, "loss": loss, "lr": lr}
        if acc is not None:
            r["accuracy"] = acc
        lines.append(json.dumps(r))
    for step, epoch, loss, acc in evals:
        r = {"type": "eval", "step": step, "epoch": epoch + 1, "loss": loss}
        if acc is not None:
            r["accuracy"] = acc
        lines.append(json.dumps(r))
    return "\n".join(lines) + "\n"


def gen(d, names):
    torch.set_num_threads(1)
    data = make_data(d)
    lines = []
    for ci, c in enumerate(CASES):
        if c not in selected(names):
            continue
        torch.manual_seed(1000 + ci)
        model = ToyModel([int(w) for w in c["layers"].split(",")])
        st_write(os.path.join(d, c["name"] + ".init.safetensors"), model.state_dict())
        shadow, plain, bf16 = None, None, c["precision"] == "bf16"
        # The real DistributedDataParallel run; ZeRO under bf16 trains the emulation (ZeRO
        # does not change the arithmetic, and the emulation is where Bf16Linear is).
        dist = c["compress"] or (c["zero"] and not bf16)
        X, Y = data[c["ds"]]
        Xv, Yv = data[c["val"]] if c["val"] else (None, None)
        if c["compress"]:
            shadow = emulate_compressed(model, c, X, Y)
        if bf16:
            import copy
            model_init, loop_m, moved_m, auto_m, plain_m = (copy.deepcopy(model) for _ in range(5))
            train(loop_m, c, X, Y, Xv, Yv, fwd=forward_bf16(loop_m, sum_loop))
            train(moved_m, c, X, Y, Xv, Yv, fwd=forward_bf16(moved_m, sum_moved(torch.Generator().manual_seed(ci))))
            train(auto_m, c, X, Y, Xv, Yv)
            train(plain_m, dict(c, precision="fp32"), X, Y, Xv, Yv)
            plain = plain_m.state_dict()
            st_write(os.path.join(d, c["name"] + ".fp32.safetensors"), plain)
        if dist:
            # The emulation in float32 without ZeRO: ZeRO changes nothing but rounding; the
            # compression must change more than the test's tolerance, or it tests nothing.
            import copy
            plain = copy.deepcopy(model)
            train(plain, c, X, Y, Xv, Yv)
            plain = plain.state_dict()
        norms = []
        if dist:
            records, evals = train_dist(model, c, X, Y, Xv, Yv, norms)
        else:
            records, evals = train(model, c, X, Y, Xv, Yv, norms, fwd=forward_bf16(model) if bf16 else None)
        ref = model.state_dict()
        st_write(os.path.join(d, c["name"] + ".torch.safetensors"), ref)
        with open(os.path.join(d, c["name"] + ".ref.jsonl"), "w") as f:
            f.write(ref_records(records, evals))
        np_ = 1 if c["mode"] == "dp" else c["np"]
        lines.append(" ".join([c["name"], str(np_), ",".join(c["env"]) or "-"] + ddptrain_args(c)))
        if bf16:
            loop, moved, auto, fp32 = (worst_rel(m.state_dict(), ref) for m in (loop_m, moved_m, auto_m, plain_m))
            kind = "float32 sums"
            if auto > TOL:  # torch 1.13's CPU kernels? Their arithmetic, emulated:
                old_m = copy.deepcopy(model_init)
                train(old_m, c, X, Y, Xv, Yv, fwd=forward_bf16(old_m, sum_exact, sum_bf16))
                old = worst_rel(old_m.state_dict(), auto_m.state_dict())
                kind = "bf16 sums in its backward (as emulated: %.2e)" % old
                if old > TOL:
                    sys.exit("gen: %s: this torch's autocast ends %.2e from autocast with float32 sums"
                             " and %.2e from torch 1.13's bf16 sums in the backward: its arithmetic is"
                             " neither; teach torch_crosscheck.py what it is" % (c["name"], auto, old))
        print("torch: %-32s %d ranks, %d steps, %d evaluations%s"
              % (c["name"], np_, len(records), len(evals),
                 ", clipped %d of %d steps (norms %.3g to %.3g)"
                 % (sum(x > c["clip"] for x in norms), len(norms), min(norms), max(norms))
                 if c["clip"] else "")
              + (", ddptrain's order in float64 ends %.2e from it" % worst_rel(shadow, ref)
                 if shadow is not None else "")
              + (", this torch's autocast (%s) ends %.2e from it, its sums in a loop's order %.2e,"
                 " moved within their error bound %.2e" % (kind, auto, loop, moved) if bf16 else "")
              + (", float32 DDP ends %.2e from it" % worst_rel(plain, ref)
                 if plain is not None else ""))
        if bf16 and not 2 * loop <= TOL:
            sys.exit("gen: %s: autocast's arithmetic with its float32 sums in another order ends %.2e"
                     " from the reference: TOL %g holds only for an implementation with the"
                     " reference's order of sums; choose a smaller case" % (c["name"], loop, TOL))
    with open(os.path.join(d, "cases.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def read_jsonl(path, kind):
    with open(path) as f:
        return [r for r in (json.loads(line) for line in f if line.strip()) if r.get("type") == kind]


def bad_number(x):
    return not isinstance(x, (int, float)) or not math.isfinite(x)


def compare_evals(d, c):
    """Worst relative error of the validation losses and worst accuracy difference, or a
    string saying what is wrong."""
    ref = read_jsonl(os.path.join(d, c["name"] + ".ref.jsonl"), "eval")
    path = os.path.join(d, c["name"] + ".metrics.jsonl")
    if not os.path.exists(path):
        return "no --metrics file from ddptrain"
    got = read_jsonl(path, "eval")
    if [r["step"] for r in got] != [e["step"] for e in ref]:
        return "eval records at steps %s, want %s" % ([r["step"] for r in got], [e["step"] for e in ref])
    lerr, aerr = 0.0, 0.0
    for r, e in zip(got, ref):
        if r["epoch"] != e["epoch"]:
            return "eval at step %d says epoch %s, want %d" % (e["step"], r["epoch"], e["epoch"])
        if bad_number(r["loss"]) or bad_number(e["loss"]):
            return "eval at step %d has loss %r, want %r" % (e["step"], r["loss"], e["loss"])
        lerr = max(lerr, abs(r["loss"] - e["loss"]) / max(abs(e["loss"]), 1e-30))
        if "accuracy" in e:
            if "accuracy" not in r or bad_number(r["accuracy"]) or bad_number(e["accuracy"]):
                return "eval at step %d has accuracy %r" % (e["step"], r.get("accuracy"))
            aerr = max(aerr, abs(r["accuracy"] - e["accuracy"]))
    return lerr, aerr, len(ref)


def compare(d, names):
    bad = 0
    for c in selected(names):
        name = c["name"]
        ref = st_read(os.path.join(d, name + ".torch.safetensors"))
        init = st_read(os.path.join(d, name + ".init.safetensors"))
        path = os.path.join(d, name + ".ddp.safetensors")
        if not os.path.exists(path):
            print("%-32s no output from ddptrain" % name)
            bad += 1
            continue
        got = st_read(path)
        if sorted(got) != sorted(ref):
            print("%-32s tensors %s, want %s" % (name, sorted(got), sorted(ref)))
            bad += 1
            continue
        worst, wname, dworst = 0.0, "", 0.0
        for tname in sorted(ref):
            a, b = got[tname], ref[tname]
            if a.shape != b.shape:
                print("%-32s %s has shape %s, want %s" % (name, tname, a.shape, b.shape))
                bad += 1
                break
            if not np.all(np.isfinite(a)) or not np.all(np.isfinite(b)):
                print("%-32s %s holds non-finite values" % (name, tname))
                bad += 1
                break
            rel = np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30)
            # The same error relative to how far training moved the tensor (informational).
            upd = np.max(np.abs(b - init[tname]))
            drel = np.max(np.abs(a - b)) / max(upd, 1e-30) if upd > 0 else 0.0
            if upd == 0 and np.any(a != b):
                print("%-32s %s is frozen in PyTorch but ddptrain changed it" % (name, tname))
                bad += 1
            if rel > worst or not wname:
                worst, wname = rel, tname
            dworst = max(dworst, drel)
        else:
            tol = TOL
            ok = worst <= tol
            ev = ""
            if c["val"]:
                e = compare_evals(d, c)
                if isinstance(e, str):
                    ev, ok = "  eval: " + e, False
                else:
                    ev = "  val loss rel err %.3e, acc diff %.3g (%d evals)" % e
                    # The accuracy is a count over V rows, carried as a float: equal counts
                    # differ by rounding only (well under 1/V).
                    ok = ok and e[0] <= tol and e[1] <= 1e-6
            print("%-32s max rel err %.3e (%s)  err/update %.3e%s  %s"
                  % (name, worst, wname, dworst, ev, "ok" if ok else "FAIL (> %g)" % tol))
            bad += not ok
    return 1 if bad else 0


# `same`: how far a reference may be from what gen makes of its case on another machine.
# torch's float32 products run on the CPU's BLAS kernels (OpenBLAS picks them by CPU), whose
# sums round in other orders: the references made on one x86-64 CPU end up to 2.2e-7 from
# those made on another (torch 1.13, all cases); 2.15's references for the first three
# autocast cases end 8.7e-8 from 1.13's. A changed case differs by far more, and its
# command line (cases.txt), data and initial weights are compared byte for byte.
SAME = TOL / 4


def same_records(a, b):
    """The worst relative difference of two ref.jsonl files' numbers, or a string saying
    how their records differ otherwise."""
    ra, rb = (read_jsonl(p, "step") + read_jsonl(p, "eval") for p in (a, b))
    worst = 0.0
    for x, y in zip(ra, rb):
        if sorted(x) != sorted(y) or any(x[k] != y[k] for k in x if not isinstance(x[k], float)):
            return "record %s, want %s" % (json.dumps(x), json.dumps(y))
        for k in x:
            if isinstance(x[k], float):
                worst = max(worst, abs(x[k] - y[k]) / max(abs(y[k]), 1e-30))
    return "%d records, want %d" % (len(ra), len(rb)) if len(ra) != len(rb) else worst


def same(new, old):
    bad = []
    for f in sorted(os.listdir(new)):
        a, b = os.path.join(new, f), os.path.join(old, f)
        if not (f == "cases.txt" or f.endswith((".npy", ".init.safetensors", ".torch.safetensors",
                                                ".fp32.safetensors", ".ref.jsonl"))):
            continue
        if not os.path.exists(b):
            bad.append("%s (missing)" % f)
        elif f.endswith((".torch.safetensors", ".fp32.safetensors")):
            ta, tb = st_read(a), st_read(b)
            if sorted(ta) != sorted(tb) or any(ta[k].shape != tb[k].shape for k in ta):
                bad.append("%s (other tensors)" % f)
                continue
            rel = max(np.max(np.abs(ta[k] - tb[k])) / max(np.max(np.abs(tb[k])), 1e-30) for k in tb)
            if not rel <= SAME:
                bad.append("%s (%.2e)" % (f, rel))
        elif f.endswith(".ref.jsonl"):
            r = same_records(a, b)
            if isinstance(r, str) or r > SAME:
                bad.append("%s (%s)" % (f, r if isinstance(r, str) else "%.2e" % r))
        else:
            with open(a, "rb") as fa, open(b, "rb") as fb:
                if fa.read() != fb.read():
                    bad.append(f)
    for f in bad:
        print("%s is not what gen makes of its case today: %s" % (old, f))
    return 1 if bad else 0


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("gen", "compare", "same"):
        print("usage: torch_crosscheck.py gen|compare DIR [CASE...] | same NEW OLD", file=sys.stderr)
        return 2
    names = sys.argv[3:]
    if sys.argv[1] == "gen":
        gen(sys.argv[2], names)
        return 0
    if sys.argv[1] == "same":
        return same(sys.argv[2], sys.argv[3]) if len(sys.argv) == 4 else 2
    return compare(sys.argv[2], names)


if __name__ == "__main__":
    sys.exit(main())
