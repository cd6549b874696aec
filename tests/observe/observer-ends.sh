#!/bin/bash
# What the observers leave when a run does not finish: a graceful stop (exit 3) writes
# the --trace, with the stop and its checkpoint on every rank; a stop or a failure
# (exit 1, in training or in the set-up) leaves the --prometheus file final: running 0,
# the exit status, the last step.
. "$(dirname "$0")/../lib/setup.sh"
PY=${PYTHON:-/usr/bin/python3}
command -v "$PY" >/dev/null || skip "python3 ($PY) is needed to read the trace"
cd "$TMPD"

# prom_final FILE CODE STEP PLANNED: the file says the run has ended, with CODE at STEP of PLANNED.
prom_final() {
	local labels='{mode="ddp",replicas="2"}'
	grep -qx "ddptrain_running$labels 0" "$1" || fail "$1: not final: $(grep -v '^#' "$1")"
	grep -qx "ddptrain_exit_code$labels $2" "$1" || fail "$1: want exit code $2: $(grep -v '^#' "$1")"
	grep -qx "ddptrain_step$labels $3" "$1" || fail "$1: want step $3: $(grep -v '^#' "$1")"
	grep -qx "ddptrain_steps_planned$labels $4" "$1" || fail "$1: want $4 steps planned: $(grep -v '^#' "$1")"
}

# A stop on 2 ranks. Steps of about a millisecond, so the trace's buffers (2^20 events a
# rank) hold the whole run up to the stop. --prometheus-every is long: the file's only
# write before the end is the first step's.
mpirun_bg -np 2 "$DDPTRAIN" --layers=64,512,512,8 --batch-size=64 --epochs=100000 --log-every=0 \
	--checkpoint=ck.st --trace=stop.json --prometheus=stop.prom --prometheus-every=3600
started
kill -USR1 "$(pgrep -P "$bg" -f -- "--trace=stop.json" | head -1)"
finish 3
n=$(sed -n 's/^# stopped by a signal after step \([0-9]*\) of.*/\1/p' bg.out)
[ -n "$n" ] || fail "no stop line: $(tail -n 3 bg.out)"
[ -f stop.json ] || fail "a stop wrote no --trace"
"$PY" - stop.json "$n" <<'PYEOF' || fail "the stop's trace"
import json, sys
t = json.load(open(sys.argv[1]))
step = int(sys.argv[2])
ev = t["traceEvents"]
assert t["otherData"]["events_dropped_rank0"] == "0", t["otherData"]
for rank in (0, 1):
    stops = [e for e in ev if e["pid"] == rank and e["name"] == "stop"]
    assert [e["args"]["step"] for e in stops] == [step], (rank, stops)
    ck = [e for e in ev if e["pid"] == rank and e["name"] == "checkpoint" and e["ph"] == "X"]
    assert [e["args"]["step"] for e in ck] == [step], (rank, ck)
    steps = {e["args"]["step"] for e in ev if e["pid"] == rank and e["name"] == "optimizer"}
    assert steps == set(range(1, step + 1)), (rank, min(steps), max(steps), len(steps))
PYEOF
planned=$(sed -n 's/^# buckets: .*, \([0-9]*\) steps in all$/\1/p' bg.out)
prom_final stop.prom 3 "$n" "$planned"
echo "stop after step $n: --trace holds the stop and its checkpoint on both ranks; --prometheus says exit 3 at step $n"

# A failure: training diverges at step 3 (the loss of step 3 is not finite, 2 were taken).
expect_fail 1 "training diverged" 2 --max-steps=100 --lr=1e6 --momentum=0.9 --quiet \
	--prometheus=fail.prom --prometheus-every=3600
prom_final fail.prom 1 2 100
echo "failure at step 3: --prometheus says exit 1 at step 2"

# A failure in the set-up, once the outputs were checked: the file says exit 1 too, at the
# step it would have started from. A refused run (exit 2, here a --resume written with
# other settings) leaves a previous file as it was, like its other outputs.
expect_fail 1 "--inputs: missing.npy" 2 --inputs=missing.npy --targets=missing.npy --prometheus=early.prom
prom_final early.prom 1 0 0
cp stop.prom keep.prom
cp stop.prom keep.prom.orig
expect_fail 2 "--resume" 2 --layers=64,512,8 --batch-size=64 --resume=ck.st --prometheus=keep.prom
cmp -s keep.prom keep.prom.orig || fail "a refused run rewrote --prometheus: $(grep -v '^#' keep.prom)"
echo "failure in the set-up: --prometheus says exit 1; a refused run leaves it alone"
