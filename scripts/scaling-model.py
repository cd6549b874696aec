#!/usr/bin/env python3
"""scaling-model.py - issue #15's scaling model: fit to the network bench, predict for clusters.

    scripts/scaling-model.py BENCH_OUTPUT [--no-predict]

BENCH_OUTPUT is what scripts/bench-network.sh printed (its "# every run" lines are read:
"#   LINK MODEL NAME KEY: v1 v2 ..."). Medians of those runs are the measured points.

The model of one training step on P ranks (weak scaling: a fixed batch per rank):

    allreduce(S) = 2 (P-1)/P * S / (eta * B)  +  2 (P-1) * alpha     (ring: every rank sends
                                                                     and receives 2 (P-1)/P S)
    measured here: max(link, S / beta) + 2 (P-1) alpha, the link term less the bytes tbf lets
    through at once after an idle spell (its 4 MB burst); beta: the CPU's own work per byte
    (the kernel's TCP over veth, the copies and additions), which goes on while bytes are
    on the wire, so the slower of the two decides
    step         = compute * (1 + kappa * allreduce / compute)        (communication's own CPU
                   + max(tail * allreduce, allreduce - h * backward)  work slows compute; the
                                                                     part not hidden behind
                                                                     backward is exposed)
    backward     = 2/3 compute (two of the three products per layer)

eta (the share of the link the all-reduce achieves), beta and alpha are fitted to the
--no-overlap all-reduce times (the unlimited link included); kappa and h (the share of backward that hides communication) to the
overlapped steps; tail is the share of the gradient finished only when backward ends (the
first layer's, streamed whole by default; 1/16 of it with 16 MFLOP panels). The fit's error is printed per point
and as the mean and largest relative error.

Predictions: 8-GPU nodes, NVLink-class inside a node (B_intra), 400 Gbit/s per node
between nodes; flat ring (every byte crosses the node's one NIC 2 (P-1)/P times) and
hierarchical (reduce-scatter inside the node over NVLink, ring over nodes on 1/8 of the
gradient per GPU, all 8 GPUs' shares through the one NIC, all-gather inside the node),
for the ToyModel, the wide MLP and a 1-billion-parameter MLP, with GPU compute times from
a roofline (peak FLOP/s times an efficiency, plus a launch floor per kernel) stated below.

Issue 22's cases, at 64 and 512 GPUs on the hierarchical all-reduce, against today's
figure (fp32 DDP, the same formula as the predictions), each with AdamW's pass over its
state at memory speed added (HBM, 28 bytes per parameter it updates: read parameter,
gradient and two moments, write three):
    bf16      --grad-compress=bf16: half the bytes on the wire, plus the two conversions
              at memory speed (read 4 + write 2 bytes per gradient, and back: 12 bytes)
    zero1     --zero=1: reduce-scatter + all-gather = all-reduce's bytes; the reduce-scatter
              hides behind backward as the all-reduce did, the all-gather of the updated
              parameters comes after the optimizer, exposed; the optimizer updates 1/P
    zero2     --zero=2: the same, the all-gather hidden behind the next forward (1/3 of
              compute) layer by layer, one layer's parameters exposed
    zero1+bf16  the reduce-scatter in bf16 (conversions as bf16), the all-gather in fp32
and AdamW's state per GPU: parameters 4, gradients 4, moments 8 bytes per parameter;
zero1 divides the moments by P, zero2 the gradients too (its bucket buffers left out).
"""
import math
import re
import sys
from statistics import median

GRAD = {"wide": 4198400 + 2, "deep": 15 * (512 * 512 + 512) + 2}  # floats, with the 2 slots


def read_points(path):
    runs = {}
    pat = re.compile(r"^#\s+(\d+) (\w+) ([\w.]+) (\w+):((?: [-0-9.e]+)*)\s*$")
    with open(path) as f:
        for line in f:
            m = pat.match(line)
            if m and m.group(5).strip():
                runs[(int(m.group(1)), m.group(2), m.group(3), m.group(4))] = [
                    float(v) for v in m.group(5).split()]
    pts = []
    for (link, model, name, key), v in runs.items():
        if name != "compute" or key != "step":
            continue
        get = lambda n, k: median(runs[(link, model, n, k)]) if (link, model, n, k) in runs else None
        p = {"link": link, "model": model, "compute": median(v), "step": get("overlap", "step"),
             "noov": get("noov", "step"), "ar": get("noov", "wait")}
        if None not in p.values():
            pts.append(p)
    return sorted(pts, key=lambda p: (p["model"], -p["link"] if p["link"] else -1e9))


def ar_time(S_bytes, P, B_bits, eta, alpha):
    """Ring all-reduce of S bytes over P ranks at B bit/s (ms)."""
    if P < 2:
        return 0.0
    return 1e3 * (2 * (P - 1) / P * S_bytes * 8 / (eta * B_bits)) + 2 * (P - 1) * alpha


def step_time(compute, ar, kappa, h, tail):
    backward = 2.0 / 3.0 * compute
    return compute + kappa * ar + max(tail * ar, ar - h * backward)


H_GPU = 1.0      # on GPUs backward hides the all-reduce up to its own length (see predict)
TBF_BURST = 4e6  # bytes: scripts/bench-network.sh's "tbf ... burst 4mb" (megabytes)


def tail_share(model, panels=1):
    # the first layer's gradient goes when backward ends (DDPTRAIN_PANEL_MFLOP=0, the
    # default); with panels, only its last panel and bias do
    first = {"wide": 1024 * 1024 + 1024, "deep": 512 * 512 + 512}[model]
    return (first / panels) / GRAD[model]


def ar_measured_model(p, eta, beta, alpha):
    """The 2-host all-reduce on this machine: the slower of the link (less tbf's burst) and
    the CPU's own work on every byte at beta bytes/s, plus the ring's latency."""
    S = GRAD[p["model"]] * 4
    link = 0.0
    if p["link"] > 0:
        link = 1e3 * max(0.0, S - TBF_BURST) * 8 / (eta * p["link"] * 1e9)
    return max(link, 1e3 * S / beta) + 2 * alpha


def fit(pts):
    """Grid search (the model is small and the points few): eta, beta, alpha on the
    all-reduce alone (every link, the unlimited one included); kappa, h on the steps."""
    best = None
    for eta in [x / 100.0 for x in range(30, 101, 2)]:
        for beta in [1e7 * 1.1 ** k for k in range(0, 70)]:
            for alpha in (0.0, 0.05, 0.2, 0.5, 1.0, 2.0):
                err = sum(((ar_measured_model(p, eta, beta, alpha) - p["ar"]) / p["ar"]) ** 2 for p in pts)
                if best is None or err < best[0]:
                    best = (err, eta, beta, alpha)
    _, eta, beta, alpha = best
    best = None
    for kappa in [x / 100.0 for x in range(0, 101, 2)]:
        for h in [x / 100.0 for x in range(0, 101, 2)]:
            err = sum(((step_time(p["compute"], p["ar"], kappa, h, tail_share(p["model"])) - p["step"])
                       / p["step"]) ** 2 for p in pts)
            if best is None or err < best[0]:
                best = (err, kappa, h)
    _, kappa, h = best
    return eta, beta, alpha, kappa, h


def report_fit(pts, eta, beta, alpha, kappa, h):
    print("# fit: eta %.2f (share of the link), beta %.0f MB/s (CPU work per gradient byte), alpha %.2f ms "
          "(per ring step), kappa %.2f (compute slowed per ms of all-reduce), h %.2f (share of backward "
          "that hides it)" % (eta, beta / 1e6, alpha, kappa, h))
    print("# %-5s %-5s %9s %9s %9s %6s %9s %9s %6s" % ("Gbit", "model", "compute", "ar", "ar_model", "err",
                                                      "step", "model", "err"))
    errs = []
    for p in pts:
        a = ar_measured_model(p, eta, beta, alpha)
        ea = (a - p["ar"]) / p["ar"]
        errs.append(abs(ea))
        s = step_time(p["compute"], p["ar"], kappa, h, tail_share(p["model"]))
        es = (s - p["step"]) / p["step"]
        errs.append(abs(es))
        print("  %-5s %-5s %9.2f %9.2f %9s %6s %9.2f %9.2f %+5.0f%%" % (
            p["link"] or "none", p["model"], p["compute"], p["ar"], "-" if a is None else "%.2f" % a,
            "-" if ea is None else "%+.0f%%" % (100 * ea), p["step"], s, 100 * es))
    print("# fit error: mean %.1f%%, largest %.1f%% over %d figures" % (
        100 * sum(errs) / len(errs), 100 * max(errs), len(errs)))


# ---- predictions -------------------------------------------------------------------------
# GPU compute: FLOPs / (peak * efficiency), at least a launch floor per kernel. H100-class
# float32 without tensor cores ~60 TFLOP/s, TF32 tensor cores ~400 dense; we take 100 TFLOP/s
# effective for the big products and 5 us per kernel launch (3 products + 2 element-wise
# kernels per layer, forward and backward).
PEAK = 100e12
LAUNCH = 5e-6
MODELS = {
    # name: (widths, batch per GPU)
    "ToyModel": ([10, 10, 5], 20),
    "wide MLP": ([1024] * 5, 128),
    "1B MLP": ([8192] * 16, 512),  # 15 layers of 8192 x 8192 = 1.007e9 parameters
}


def params(widths):
    return sum(widths[i] * widths[i + 1] + widths[i + 1] for i in range(len(widths) - 1))


def gpu_compute_ms(widths, batch):
    flops = 6.0 * batch * sum(widths[i] * widths[i + 1] for i in range(len(widths) - 1))
    kernels = 5 * (len(widths) - 1)
    return 1e3 * max(flops / PEAK, kernels * LAUNCH)


def predict(eta, h):
    B_intra = 900e9 * 8   # NVLink 4: 900 GB/s per GPU (both directions together), in bit/s
    B_inter = 400e9       # one 400 Gbit/s NIC per node
    alpha_intra, alpha_inter = 0.005, 0.010  # ms per ring step (NCCL-class latencies)
    g = 8
    print("\n# predictions: 8 GPUs per node, NVLink %.0f GB/s, %.0f Gbit/s per node between nodes; "
          "link efficiency eta %.2f from the fit; hidden share h %.2f (NCCL runs on its own streams "
          "beside backward's kernels; here the fit gives %.2f, the all-reduce being CPU work on the "
          "cores that compute); one layer's gradient left when backward ends"
          % (B_intra / 8e9, B_inter / 1e9, eta, H_GPU, h))
    print("# %-9s %10s %6s %9s %10s %10s %9s %9s %7s %7s" % (
        "model", "params", "GPUs", "compute", "ring", "hier", "step", "step_h", "eff", "eff_h"))
    for name, (widths, batch) in MODELS.items():
        n = params(widths)
        S = 4.0 * n
        c = gpu_compute_ms(widths, batch)
        for P in (8, 64, 512, 4096):
            nodes = P // g
            if nodes <= 1:
                ring = ar_time(S, P, B_intra, eta, alpha_intra)
                hier = ring
            else:
                # flat ring: the node's NIC carries 2 (P-1)/P S; the latency term counts P steps
                ring = ar_time(S, P, B_inter, eta, alpha_inter)
                # hierarchical: NVLink reduce-scatter + all-gather on S, ring over the nodes
                # on S/g per GPU with the g GPUs sharing the NIC (so S per node)
                hier = (ar_time(S, g, B_intra, eta, alpha_intra)
                        + ar_time(S, nodes, B_inter, eta, alpha_inter))
            tail = 1.0 / (len(widths) - 1)
            s = step_time(c, ring, 0.0, H_GPU, tail)
            sh = step_time(c, hier, 0.0, H_GPU, tail)
            print("  %-9s %10.3g %6d %9.3f %10.3f %10.3f %9.3f %9.3f %6.0f%% %6.0f%%" % (
                name, n, P, c, ring, hier, s, sh, 100 * c / s, 100 * c / sh))


HBM = 3.35e12  # bytes/s: H100-class memory, for the conversions and the optimizer's pass


def variants(eta):
    """Issue 22's compressed and sharded cases against today's fp32 DDP, at 64 and 512 GPUs."""
    B_intra, B_inter, alpha_intra, alpha_inter, g = 900e9 * 8, 400e9, 0.005, 0.010, 8
    print("\n# issue 22: compressed and sharded, hierarchical all-reduce, %.0f GB/s memory; step ms "
          "(efficiency = compute / step); today = fp32 DDP as in the predictions, the others with "
          "AdamW's pass over the state it updates; state = AdamW's per GPU" % (HBM / 1e9))
    print("# %-9s %5s %9s %14s %14s %14s %14s %14s %14s   %s" % (
        "model", "GPUs", "compute", "today", "ddp+adamw", "bf16", "zero1", "zero2", "zero1+bf16",
        "state GB: ddp / zero1 / zero2"))
    for name, (widths, batch) in MODELS.items():
        n = params(widths)
        c = gpu_compute_ms(widths, batch)
        tail = 1.0 / (len(widths) - 1)

        def hier(S, P):
            nodes = P // g
            return ar_time(S, g, B_intra, eta, alpha_intra) + ar_time(S, nodes, B_inter, eta, alpha_inter)

        for P in (64, 512):
            opt = 1e3 * 28.0 * n / HBM
            conv = 1e3 * 12.0 * n / HBM
            ar32, ar16 = hier(4.0 * n, P), hier(2.0 * n, P) + conv
            today = step_time(c, ar32, 0.0, H_GPU, tail)
            ddp = today + opt
            bf16 = step_time(c, ar16, 0.0, H_GPU, tail) + opt
            rs32, rs16, ag = ar32 / 2, hier(2.0 * n, P) / 2 + conv, ar32 / 2
            z1 = step_time(c, rs32, 0.0, H_GPU, tail) + opt / P + ag
            fwd = c / 3.0
            z2 = step_time(c, rs32, 0.0, H_GPU, tail) + opt / P + max(tail * ag, ag - H_GPU * fwd)
            z1b = step_time(c, rs16, 0.0, H_GPU, tail) + opt / P + ag
            cell = lambda x: "%7.3f (%3.0f%%)" % (x, 100 * c / x)
            st = (16.0 * n, 8.0 * n + 8.0 * n / P, 4.0 * n + 12.0 * n / P)
            print("  %-9s %5d %9.3f %14s %14s %14s %14s %14s %14s   %.3g / %.3g / %.3g" % (
                name, P, c, cell(today), cell(ddp), cell(bf16), cell(z1), cell(z2), cell(z1b),
                st[0] / 1e9, st[1] / 1e9, st[2] / 1e9))


def fixes(eta, h):
    """What would restore scaling, one change at a time on top of the hierarchical all-reduce."""
    B_intra, alpha_intra, alpha_inter, g = 900e9 * 8, 0.005, 0.010, 8
    print("\n# fixes, added one after another to the hierarchical all-reduce (efficiency = compute / step)")
    print("# %-9s %6s %-52s %9s %9s %7s" % ("model", "GPUs", "change", "allreduce", "step", "eff"))
    for name, (widths, batch) in MODELS.items():
        n = params(widths)
        c0 = gpu_compute_ms(widths, batch)
        for P in (512, 4096):
            nodes = P // g
            for label, S, B_inter, accum, tree in (
                    ("none (as above)", 4.0 * n, 400e9, 1, False),
                    ("tree/recursive-doubling latency between nodes", 4.0 * n, 400e9, 1, True),
                    ("+ 8 x 400 Gbit/s NICs per node (one per GPU)", 4.0 * n, 3200e9, 1, True),
                    ("+ bf16 gradients (half the bytes)", 2.0 * n, 3200e9, 1, True),
                    ("+ 8 micro-batches per all-reduce (grad-accum)", 2.0 * n, 3200e9, 8, True)):
                inter = ar_time(S, nodes, B_inter, eta, alpha_inter)
                if tree:  # bandwidth as the ring, latency 2 log2(nodes) steps
                    inter += 2 * math.log2(nodes) * alpha_inter - 2 * (nodes - 1) * alpha_inter
                ar = ar_time(S, g, B_intra, eta, alpha_intra) + inter
                c = c0 * accum
                s = step_time(c, ar, 0.0, H_GPU, 1.0 / (len(widths) - 1))
                print("  %-9s %6d %-52s %9.3f %9.3f %6.0f%%" % (name, P, label, ar, s, 100 * c / s))


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    pts = read_points(argv[0])
    if not pts:
        print("scaling-model.py: no measured points in %s" % argv[0], file=sys.stderr)
        return 1
    eta, beta, alpha, kappa, h = fit(pts)
    report_fit(pts, eta, beta, alpha, kappa, h)
    if "--no-predict" not in argv:
        predict(eta, h)
        fixes(eta, h)
        variants(eta)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
