#!/bin/bash
# Files in and out: .npy training (float32 and float64 alike, v1 and v2 headers),
# --save/--init round trip, the safetensors header, and the --metrics JSON Lines.
. "$(dirname "$0")/../lib/setup.sh"

D=$TMPD
"$MKNPY" "$D/x4.npy" 120 10 f4 7 1
"$MKNPY" "$D/x8.npy" 120 10 f8 7 2
"$MKNPY" "$D/y4.npy" 120 5 f4 8 1
"$MKNPY" "$D/y8.npy" 120 5 f8 8 2

# float32 and float64 files hold the same values, so training is bit-identical.
run_mpi 2 --inputs="$D/x4.npy" --targets="$D/y4.npy" --batch-size=6 --epochs=3 --lr=0.05 --quiet --save="$D/a.st" ||
	fail "f4 run"
run_mpi 2 --inputs="$D/x8.npy" --targets="$D/y8.npy" --batch-size=6 --epochs=3 --lr=0.05 --quiet --save="$D/b.st" ||
	fail "f8 run"
"$STCOMPARE" --exact "$D/a.st" "$D/b.st" || fail "float32 and float64 inputs trained differently"

# --init continues exactly where --save left off: with one batch per epoch and no shuffle,
# 2 epochs equal 1 epoch, save, then 1 epoch from the saved weights.
one="--inputs=$D/x4.npy --targets=$D/y4.npy --batch-size=60 --no-shuffle --lr=0.1 --quiet"
run_mpi 2 $one --epochs=2 --save="$D/two.st" || fail "2 epochs"
run_mpi 2 $one --epochs=1 --save="$D/first.st" || fail "1 epoch"
run_mpi 2 $one --epochs=1 --init="$D/first.st" --save="$D/second.st" || fail "--init run"
"$STCOMPARE" --exact "$D/two.st" "$D/second.st" || fail "--init did not continue from the saved weights"
! "$STCOMPARE" --exact "$D/first.st" "$D/second.st" >/dev/null || fail "--init run did not train"

# The header is what PyTorch's ToyModel().state_dict() holds: names, shapes, F32, offsets.
if command -v python3 >/dev/null; then
	python3 - "$D/two.st" <<'PY' || fail "safetensors header check"
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
want = {"net1.weight": [10, 10], "net1.bias": [10], "net2.weight": [5, 10], "net2.bias": [5]}
got = {k: v["shape"] for k, v in h.items() if k != "__metadata__"}
assert got == want, got
assert all(v["dtype"] == "F32" for k, v in h.items() if k != "__metadata__")
assert (8 + n) % 8 == 0 and len(raw) == 8 + n + 165 * 4
assert h["__metadata__"]["format"] == "pt"
PY
fi

# --metrics: one JSON object per logged step, then a summary; nothing left beside it.
run_mpi 2 --samples=400 --epochs=2 --log-every=5 --quiet --metrics="$D/m.jsonl" || fail "metrics run"
[ "$(ls "$D" | grep -c 'm.jsonl')" -eq 1 ] || fail "temporary metrics file left: $(ls "$D")"
if command -v python3 >/dev/null; then
	python3 - "$D/m.jsonl" <<'PY' || fail "metrics content"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in rows if r["type"] == "step"]
assert rows[-1]["type"] == "summary", rows[-1]
assert [r["step"] for r in steps] == list(range(5, 21, 5)), [r["step"] for r in steps]
assert all(set(r) >= {"step", "epoch", "loss", "samples_per_s"} for r in steps)
assert rows[-1]["steps"] == 20 and rows[-1]["final_loss"] > 0
PY
fi
echo "files: npy f4/f8, --init/--save round trip, safetensors header and metrics ok"
