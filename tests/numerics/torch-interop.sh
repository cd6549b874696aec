#!/bin/bash
# torch-interop.sh - optional: PyTorch and NumPy on either side of ddptrain.
# Runs the README's "PyTorch and NumPy" section as written (NumPy data in,
# weights out into the ToyModel with safetensors.torch.load_file and back in
# with --init), then checks it closely: ddptrain trained on np.save'd float64
# and float32 files from a PyTorch-saved ToyModel ends where PyTorch does
# (relative error <= 1e-5, weights and forward output), and what it saves
# loads into ToyModel (load_state_dict, strict) equal to the file's bytes.
# Skips (77) when /usr/bin/python3 cannot import torch and numpy. Without the
# safetensors package, a stand-in with its load_file and save_file is used.
. "$(dirname "$0")/../lib/setup.sh"

PY=${PYTHON:-/usr/bin/python3}
HELPER=$(dirname "$0")/../lib/torch_interop.py
README=$TOP_SRCDIR/README.md

command -v "$PY" >/dev/null 2>&1 || skip "no python3 ($PY)"
"$PY" -c 'import torch, numpy' >/dev/null 2>&1 ||
	skip "python3 cannot import torch and numpy (apt-get install python3-torch python3-numpy)"
export OMP_NUM_THREADS=1

if v=$("$PY" -c 'import safetensors, safetensors.torch; print(safetensors.__version__)' 2>/dev/null); then
	echo "safetensors.torch: the safetensors package $v"
else
	# Debian 12 has no python3-safetensors: the two functions used here, F32/F64 only.
	mkdir -p "$TMPD/shim/safetensors"
	: >"$TMPD/shim/safetensors/__init__.py"
	cat >"$TMPD/shim/safetensors/torch.py" <<'EOF'
"""Stand-in for safetensors.torch: load_file and save_file, F32 and F64."""
import json
import struct

import torch

_DT = {"F32": torch.float32, "F64": torch.float64}


def save_file(tensors, filename, metadata=None):
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        b = t.numpy().tobytes()
        dt = {v: k for k, v in _DT.items()}[t.dtype]
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(filename, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def load_file(filename, device="cpu"):
    with open(filename, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    out = {}
    for name, v in json.loads(raw[8:8 + n]).items():
        if name == "__metadata__":
            continue
        b, e = v["data_offsets"]
        t = torch.frombuffer(bytearray(raw[8 + n + b:8 + n + e]), dtype=_DT[v["dtype"]])
        out[name] = t.reshape(v["shape"]).to(device)
    return out
EOF
	export PYTHONPATH=$TMPD/shim${PYTHONPATH:+:$PYTHONPATH}
	echo "safetensors.torch: a stand-in (no safetensors package; pip install safetensors for the real one)"
fi

# ---- The README section, as written ----
# Its python blocks, in order: 1 writes x.npy and y.npy, 2 loads model.safetensors
# and writes init.safetensors; between and after them, the shell lines it shows.
R=$TMPD/readme
mkdir -p "$R"
awk -v dir="$R" '
	/^## / { in_sec = ($0 == "## PyTorch and NumPy") }
	in_sec && /^```python$/ { n++; out = dir "/block" n ".py"; next }
	in_sec && out != "" && /^```$/ { close(out); out = ""; next }
	out != "" { print > out }' "$README"
[ -s "$R/block1.py" ] && [ -s "$R/block2.py" ] && [ ! -e "$R/block3.py" ] ||
	fail "README.md: want two python blocks under '## PyTorch and NumPy'"
grep -q "np.save" "$R/block1.py" || fail "README block 1 does not np.save"
grep -q "load_file" "$R/block2.py" || fail "README block 2 does not load_file"
grep -q "mpirun -np 2 ddptrain --inputs=x.npy --targets=y.npy --save=model.safetensors" "$README" ||
	fail "README.md lacks the training line this test runs"
grep -q "ddptrain --init=init.safetensors" "$README" || fail "README.md lacks the --init line this test runs"
(cd "$R" && "$PY" block1.py) || fail "README block 1 (NumPy data) failed"
(cd "$R" && run_mpi 2 --inputs=x.npy --targets=y.npy --save=model.safetensors --quiet) ||
	fail "ddptrain on the README's NumPy files"
(cd "$R" && "$PY" block2.py >out.txt) || fail "README block 2 (load into ToyModel) failed"
(cd "$R" && run_mpi 1 --init=init.safetensors --inputs=x.npy --targets=y.npy --max-steps=1 --quiet) ||
	fail "ddptrain --init from PyTorch's save_file"
echo "README section: np.save -> ddptrain -> load_file/load_state_dict -> save_file -> ddptrain --init: ok"

# ---- Closely ----
D=$TMPD/close
mkdir -p "$D"
"$PY" "$HELPER" gen "$D" || fail "torch_interop.py gen"
common="--init=$D/init.safetensors --no-shuffle --epochs=3 --lr=0.1 --quiet"
# shellcheck disable=SC2086 # word list
run_mpi 1 $common --inputs="$D/x64.npy" --targets="$D/y64.npy" --batch-size=64 --save="$D/f64-np1.safetensors" ||
	fail "ddptrain on float64 .npy files"
# shellcheck disable=SC2086
run_mpi 1 $common --inputs="$D/x32.npy" --targets="$D/y32.npy" --batch-size=64 --save="$D/f32-np1.safetensors" ||
	fail "ddptrain on float32 .npy files"
# shellcheck disable=SC2086
run_mpi 2 $common --inputs="$D/x64.npy" --targets="$D/y64.npy" --batch-size=32 --save="$D/f64-np2.safetensors" ||
	fail "ddptrain on float64 .npy files, 2 ranks"
"$PY" "$HELPER" check "$D" "$D/f64-np1.safetensors" "$D/f32-np1.safetensors" "$D/f64-np2.safetensors" ||
	fail "ddptrain's weights and PyTorch's disagree (above)"
echo "torch-interop: ok"
