#!/bin/bash
# scripts/metrics-to-tensorboard turns a --metrics file into TensorBoard events that
# TensorBoard's own reader loads: one loss scalar per logged step, the summary's
# bus bandwidth per bucket. Skips (77) where the tensorboard package does not import.
. "$(dirname "$0")/lib/setup.sh"
PY=${PYTHON:-/usr/bin/python3}
command -v "$PY" >/dev/null || skip "no python3 ($PY)"
"$PY" -c 'import tensorboard' 2>/dev/null || skip "$PY cannot import tensorboard (pip install tensorboard)"
CONV="$PY $TOP_SRCDIR/scripts/metrics-to-tensorboard"

run_mpi 2 --layers=16,64,64,4 --bucket-mb=0.01 --max-steps=12 --log-every=3 \
	--metrics="$TMPD/m.jsonl" >/dev/null || fail "training run failed"
$CONV "$TMPD/m.jsonl" "$TMPD/tb" || fail "converter failed"
"$PY" - "$TMPD/tb" "$TMPD/m.jsonl" <<'PYEOF' || fail "the event file does not hold the metrics"
import json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1])
acc.Reload()
tags = acc.Tags()["scalars"]
recs = [json.loads(l) for l in open(sys.argv[2])]
steps = [r for r in recs if r.get("type") == "step"]
loss = acc.Scalars("train/loss")
assert [e.step for e in loss] == [r["step"] for r in steps], (loss, steps)
assert all(abs(e.value - r["loss"]) < 1e-6 * max(1, abs(r["loss"])) for e, r in zip(loss, steps))
bus = [t for t in tags if t.startswith("summary/allreduce_buckets/") and t.endswith("/busbw_bytes_per_s")]
assert len(bus) >= 2, tags
print(f"metrics-to-tensorboard: {len(loss)} loss points, {len(bus)} bucket busbw scalars, {len(tags)} tags")
PYEOF
# Bad input: a file that is not JSON Lines is refused with exit 1.
echo 'not json' >"$TMPD/bad.jsonl"
rc=0; $CONV "$TMPD/bad.jsonl" "$TMPD/tb2" 2>"$TMPD/err" || rc=$?
[ "$rc" -eq 1 ] && grep -q 'line 1' "$TMPD/err" || fail "bad input: exit $rc, $(cat "$TMPD/err")"
