#!/usr/bin/env python3
"""digits.py - the real-data demo: scikit-learn's handwritten digits (UCI optdigits).

    scripts/digits.py convert DIR
        Writes DIR/digits-{train,val}-{x,y}.npy: the 1797 8x8 images of
        sklearn.datasets.load_digits (shipped inside the scikit-learn package:
        Debian python3-sklearn, or pip install scikit-learn; nothing is
        downloaded), split 80/20 in a fixed shuffled order (1438 train, 359
        validation), inputs float32 (N, 64) standardised with the training
        set's mean and standard deviation, labels int64 (N,).

    scripts/digits.py torch DIR [--epochs=N] [--seed=S]
        The same MLP, optimizer, schedule and clipping in plain PyTorch (one
        process, a DataLoader with the global batch of the ddptrain run),
        for comparison; prints the final validation loss and accuracy.

    scripts/digits.py plot METRICS.jsonl OUT.png
        Training loss (the logged steps) and validation loss and accuracy
        (the eval records) of a ddptrain --metrics file, in one PNG.

Exit status: 0 done, 1 a file cannot be read or written, 2 usage, 3 a Python
package is missing (the line says which Debian or pip package brings it).

The ddptrain run the README shows (2 ranks, 32 samples each per step):

    mpirun -np 2 ddptrain --inputs=DIR/digits-train-x.npy --targets=DIR/digits-train-y.npy \\
        --val-inputs=DIR/digits-val-x.npy --val-targets=DIR/digits-val-y.npy \\
        --loss=cross-entropy --layers=64,128,10 --batch-size=32 --epochs=30 \\
        --optimizer=adamw --lr=0.003 --weight-decay=0.01 --lr-schedule=cosine \\
        --warmup-steps=20 --clip-grad-norm=1 --eval-every=100 --log-every=23 \\
        --metrics=digits.jsonl --save-best=digits-best.safetensors
"""
import importlib
import json
import math
import os
import sys

ME = "digits.py"


class Refused(Exception):
    """One line for standard error, and the exit status."""

    def __init__(self, msg, status=1):
        super().__init__(msg)
        self.status = status


def need(module, debian, pip):
    """The module, or Refused (exit 3) saying which package brings it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise Refused(f"needs {module.split('.')[0]} (Debian: apt-get install {debian}; "
                      f"or pip install {pip}): {e}", 3) from None

# The demo's settings, shared by the torch baseline and the README command.
LAYERS = (64, 128, 10)
GLOBAL_BATCH = 64  # 2 ranks x --batch-size=32
EPOCHS = 30
LR, WD, WARMUP, CLIP = 0.003, 0.01, 20, 1.0


def convert(d):
    np = need("numpy", "python3-numpy", "numpy")
    load_digits = need("sklearn.datasets", "python3-sklearn", "scikit-learn").load_digits

    X, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(X))
    X, y = X[order].astype(np.float64), y[order].astype(np.int64)
    ntrain = int(round(0.8 * len(X)))
    mean = X[:ntrain].mean(0)
    std = X[:ntrain].std(0)
    std[std == 0] = 1.0  # the always-blank corner pixels
    X = ((X - mean) / std).astype(np.float32)
    os.makedirs(d, exist_ok=True)
    for part, sl in (("train", slice(0, ntrain)), ("val", slice(ntrain, None))):
        np.save(os.path.join(d, "digits-%s-x.npy" % part), np.ascontiguousarray(X[sl]))
        np.save(os.path.join(d, "digits-%s-y.npy" % part), np.ascontiguousarray(y[sl]))
        print("%s: %d samples, 64 inputs, 10 classes" % (part, len(X[sl])))


def torch_baseline(d, epochs, seed):
    np = need("numpy", "python3-numpy", "numpy")
    torch = need("torch", "python3-torch", "torch")
    nn = torch.nn
    F = torch.nn.functional

    torch.manual_seed(seed)
    torch.set_num_threads(1)

    def load(name):
        path = os.path.join(d, name)
        try:
            return torch.from_numpy(np.load(path))
        except (OSError, ValueError) as e:
            raise Refused(f"{path}: {getattr(e, 'strerror', None) or e} (run: {ME} convert {d})") from None
    X, Y = load("digits-train-x.npy"), load("digits-train-y.npy")
    Xv, Yv = load("digits-val-x.npy"), load("digits-val-y.npy")
    layers = []
    for i in range(len(LAYERS) - 1):
        layers.append(nn.Linear(LAYERS[i], LAYERS[i + 1]))
        if i + 2 < len(LAYERS):
            layers.append(nn.ReLU())
    model = nn.Sequential(*layers)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD)
    steps_per_epoch = math.ceil(len(X) / GLOBAL_BATCH)
    total = steps_per_epoch * epochs

    def mult(k):  # transformers' get_cosine_schedule_with_warmup
        if k < WARMUP:
            return k / max(1, WARMUP)
        p = (k - WARMUP) / max(1, total - WARMUP)
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * p)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, mult)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, Y),
                                         batch_size=GLOBAL_BATCH, shuffle=True)
    for _ in range(epochs):
        for xb, yb in loader:
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            opt.step()
            sched.step()
    with torch.no_grad():
        out = model(Xv)
        loss = F.cross_entropy(out, Yv).item()
        acc = (out.argmax(1) == Yv).double().mean().item()
    print("torch: %d epochs, %d steps: validation loss %.4f, accuracy %.4f (%d of %d)"
          % (epochs, total, loss, acc, round(acc * len(Xv)), len(Xv)))


def plot(metrics, out):
    steps, losses, evals = [], [], []
    try:
        with open(metrics, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                try:
                    r = json.loads(line)
                    if r.get("type") == "step":
                        steps.append(float(r["step"]))
                        losses.append(float(r["loss"]))
                    elif r.get("type") == "eval":
                        evals.append((float(r["step"]), float(r["loss"]), float(r["accuracy"])))
                except (ValueError, TypeError, KeyError, AttributeError):
                    raise Refused(f"{metrics}: line {n}: not a ddptrain --metrics record") from None
    except UnicodeDecodeError:
        raise Refused(f"{metrics}: not UTF-8 text") from None
    except OSError as e:
        raise Refused(f"{metrics}: {e.strerror}") from None
    if not evals:
        raise Refused(f"{metrics}: no eval records (train with --val-inputs and --val-targets)")
    matplotlib = need("matplotlib", "python3-matplotlib", "matplotlib")
    matplotlib.use("Agg")
    plt = need("matplotlib.pyplot", "python3-matplotlib", "matplotlib")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(steps, losses, label="training loss (mean since the last log line)", color="tab:blue")
    ax.plot([e[0] for e in evals], [e[1] for e in evals], "o-", label="validation loss",
            color="tab:orange")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy")
    ax.set_yscale("log")
    ax2 = ax.twinx()
    ax2.plot([e[0] for e in evals], [100 * e[2] for e in evals], "s-", color="tab:green",
             label="validation accuracy")
    ax2.set_ylabel("validation accuracy (%)")
    ax2.set_ylim(0, 100)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="center right")
    last = evals[-1]
    ax.set_title("ddptrain, mpirun -np 2, sklearn digits: final validation accuracy %.1f%%"
                 % (100 * last[2]))
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=90)
    except OSError as e:
        raise Refused(f"{out}: {e.strerror}") from None
    print("wrote %s" % out)


def torch_options(args):
    """--epochs=N and --seed=S of the torch command, or Refused (exit 2)."""
    opts = {"epochs": EPOCHS, "seed": 0}
    for x in args:
        name, eq, value = x.partition("=")
        key = name[2:] if name.startswith("--") else None
        if key not in opts or not eq or not value.isdigit() or (key == "epochs" and int(value) == 0):
            raise Refused(f"torch: {x}: want --epochs=N (N >= 1) or --seed=S (S >= 0)", 2)
        opts[key] = int(value)
    return opts["epochs"], opts["seed"]


def main():
    a = sys.argv[1:]
    try:
        if len(a) == 2 and a[0] == "convert":
            try:
                convert(a[1])
            except OSError as e:
                raise Refused(f"{e.filename or a[1]}: {e.strerror}") from None
        elif len(a) >= 2 and a[0] == "torch":
            torch_baseline(a[1], *torch_options(a[2:]))
        elif len(a) == 3 and a[0] == "plot":
            plot(a[1], a[2])
        elif a in (["-h"], ["--help"]):
            print(__doc__)
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except Refused as e:
        print(f"{ME}: {e}", file=sys.stderr)
        return e.status
    return 0


if __name__ == "__main__":
    sys.exit(main())
