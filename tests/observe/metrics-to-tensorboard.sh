#!/bin/bash
# scripts/metrics-to-tensorboard turns a --metrics file into TensorBoard events: one loss
# scalar per logged step at its record's own wall-clock time, the summary's bus
# bandwidth per bucket; bad input, a used or unusable LOGDIR, a missing tensorboard
# package and a failed write are each one line, no traceback and no event file left.
# Those checks run against tests/lib/fake_tensorboard (a stand-in that writes the events
# as JSON Lines); the round trip through TensorBoard's own reader skips (77) where the
# tensorboard package does not import.
. "$(dirname "$0")/../lib/setup.sh"
PY=${PYTHON:-/usr/bin/python3}
command -v "$PY" >/dev/null || skip "no python3 ($PY)"
CONV="$PY $TOP_SRCDIR/scripts/metrics-to-tensorboard"
FAKE_TB=$TOP_SRCDIR/tests/lib/fake_tensorboard
export PYTHONDONTWRITEBYTECODE=1 # nothing written into the source tree

run_mpi 2 --layers=16,64,64,4 --bucket-mb=0.01 --max-steps=12 --log-every=3 \
	--metrics="$TMPD/m.jsonl" >/dev/null || fail "training run failed"
# The run's records 97 s apart from a day in 2024 (a toy run's fit in one millisecond),
# the second step record without a time (it takes the time of the record before it).
"$PY" - "$TMPD/m.jsonl" "$TMPD/spread.jsonl" <<'PYEOF' || fail "spreading the times"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
with open(sys.argv[2], "w") as f:
    for i, r in enumerate(recs):
        r["time"] = "2024-03-01T12:%02d:%02d.250Z" % divmod(97 * i, 60)
        if i == 2:
            del r["time"]
        f.write(json.dumps(r) + "\n")
PYEOF

# The events keep the records' times.
PYTHONPATH=$FAKE_TB $CONV "$TMPD/spread.jsonl" "$TMPD/fake" >"$TMPD/out" || fail "converter failed: $(cat "$TMPD/out")"
"$PY" - "$TMPD/fake/events.out.tfevents.fake" "$TMPD/spread.jsonl" <<'PYEOF' || fail "the events' wall times are not the records'"
import datetime, json, sys
evs = [json.loads(l) for l in open(sys.argv[1])]
recs = [json.loads(l) for l in open(sys.argv[2])]
t0 = datetime.datetime(2024, 3, 1, 12, 0, 0, 250000, tzinfo=datetime.timezone.utc).timestamp()
steps = [(i, r) for i, r in enumerate(recs) if r["type"] == "step"]
loss = [e for e in evs if any(v["tag"] == "train/loss" for v in e["values"])]
assert [e["step"] for e in loss] == [r["step"] for _, r in steps], (loss, steps)
want = [t0 + 97 * (i - 1 if i == 2 else i) for i, _ in steps]
got = [e["wall_time"] for e in loss]
assert all(abs(g - w) < 1e-3 for g, w in zip(got, want)), (got, want)
assert evs[0]["values"][0]["tag"] == "run/config" and abs(evs[0]["wall_time"] - t0) < 1e-3, evs[0]
print(f"metrics-to-tensorboard: {len(loss)} steps at their records' times, {got[-1] - got[0]:.0f} s apart")
PYEOF

# refused WANT-EXIT TEXT METRICS LOGDIR [ENV...]: one line holding TEXT, no traceback
refused() {
	local want=$1 text=$2 in=$3 out=$4 rc=0
	shift 4
	env PYTHONPATH="$FAKE_TB" "$@" $CONV "$in" "$out" >"$TMPD/out" 2>"$TMPD/err" || rc=$?
	[ "$rc" -eq "$want" ] || fail "$in -> $out: exit $rc, want $want: $(cat "$TMPD/err")"
	[ "$(wc -l <"$TMPD/err")" -eq 1 ] && grep -qF -- "$text" "$TMPD/err" ||
		fail "$in -> $out: want one line with '$text': $(cat "$TMPD/err")"
}
B=$TMPD/bad
mkdir "$B"
echo 'not json' >"$B/notjson"
printf '{"type":"step","step":1,"loss":1}\n\xff\xfe\n' >"$B/binary"
echo '{"type":"step","step":"abc","loss":1}' >"$B/step"
echo '{"type":"step","step":1e400,"loss":1}' >"$B/huge"
echo '{"type":"step","step":1,"loss":1,"time":"yesterday"}' >"$B/time"
echo '[1, 2]' >"$B/array"
echo '{"type":"summary"}' >"$B/nosteps"
refused 1 "notjson: line 1: not JSON" "$B/notjson" "$B/tb"
refused 1 "binary: line 2: not UTF-8 text" "$B/binary" "$B/tb"
refused 1 'step: line 1: step "abc" is not a step number' "$B/step" "$B/tb"
refused 1 "huge: line 1: step Infinity is not a step number" "$B/huge" "$B/tb"
refused 1 'time: line 1: time "yesterday" is not an ISO 8601 time' "$B/time" "$B/tb"
refused 1 "array: line 1: not a JSON object" "$B/array" "$B/tb"
refused 1 "nosteps: no step records" "$B/nosteps" "$B/tb"
refused 1 "$B: Is a directory" "$B" "$B/tb"
refused 1 "$B/missing: No such file or directory" "$B/missing" "$B/tb"
[ ! -e "$B/tb" ] || fail "bad input left $B/tb"
# LOGDIR: a file, one that already holds events, one that cannot be made.
: >"$B/file"
refused 1 "$B/file: exists and is not a directory" "$TMPD/m.jsonl" "$B/file"
refused 1 "$TMPD/fake: already holds TensorBoard event files" "$TMPD/m.jsonl" "$TMPD/fake"
[ "$(ls "$TMPD/fake")" = events.out.tfevents.fake ] || fail "a refused LOGDIR changed: $(ls "$TMPD/fake")"
refused 1 "$B/file/tb: cannot create it" "$TMPD/m.jsonl" "$B/file/tb"
# A write that fails half way (a full disk) leaves no event file, and no LOGDIR it made.
refused 1 "$B/tb: cannot write the event file: No space left on device" "$TMPD/m.jsonl" "$B/tb" FAKE_TENSORBOARD_FAIL_AFTER=2
[ ! -e "$B/tb" ] || fail "a failed write left $B/tb: $(ls -R "$B/tb")"
mkdir "$B/kept"
refused 1 "$B/kept: cannot write the event file" "$TMPD/m.jsonl" "$B/kept" FAKE_TENSORBOARD_FAIL_AFTER=2
[ -d "$B/kept" ] && [ -z "$(ls "$B/kept")" ] || fail "a failed write left $(ls "$B/kept") in a LOGDIR it did not make"
# No tensorboard package: exit 3, saying what to install.
mkdir -p "$TMPD/hide/tensorboard"
echo 'raise ImportError("No module named tensorboard (hidden by the test)")' >"$TMPD/hide/tensorboard/__init__.py"
rc=0
PYTHONPATH=$TMPD/hide $CONV "$TMPD/m.jsonl" "$B/tb" 2>"$TMPD/err" || rc=$?
[ "$rc" -eq 3 ] && [ "$(wc -l <"$TMPD/err")" -eq 1 ] && grep -q "pip install tensorboard" "$TMPD/err" ||
	fail "without tensorboard: exit $rc: $(cat "$TMPD/err")"
[ ! -e "$B/tb" ] || fail "without tensorboard, $B/tb was left"
echo "metrics-to-tensorboard: bad input, LOGDIR, a failed write and a missing package: one line each, nothing left"

# The round trip through TensorBoard's own reader.
"$PY" -c 'import tensorboard' 2>/dev/null ||
	skip "the round trip through TensorBoard's reader: $PY cannot import tensorboard (pip install tensorboard); the checks above passed"
$CONV "$TMPD/spread.jsonl" "$TMPD/tb" || fail "converter failed"
"$PY" - "$TMPD/tb" "$TMPD/spread.jsonl" <<'PYEOF' || fail "the event file does not hold the metrics"
import datetime, json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1])
acc.Reload()
tags = acc.Tags()["scalars"]
recs = [json.loads(l) for l in open(sys.argv[2])]
steps = [r for r in recs if r.get("type") == "step"]
loss = acc.Scalars("train/loss")
assert [e.step for e in loss] == [r["step"] for r in steps], (loss, steps)
assert all(abs(e.value - r["loss"]) < 1e-6 * max(1, abs(r["loss"])) for e, r in zip(loss, steps))
iso = lambda s: datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
assert all("time" not in r or abs(e.wall_time - iso(r["time"])) < 1e-3 for e, r in zip(loss, steps)), \
    [(e.wall_time, r.get("time")) for e, r in zip(loss, steps)]
bus = [t for t in tags if t.startswith("summary/allreduce_buckets/") and t.endswith("/busbw_bytes_per_s")]
assert len(bus) >= 2, tags
print(f"metrics-to-tensorboard: {len(loss)} loss points over {loss[-1].wall_time - loss[0].wall_time:.0f} s, "
      f"{len(bus)} bucket busbw scalars, {len(tags)} tags")
PYEOF
