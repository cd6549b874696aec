#!/bin/bash
# The end-of-run all-reduce table (busbw = algbw x 2(n-1)/n, as nccl-tests) and its metrics;
# a rank made slow on purpose is warned about during the run and named in the summary;
# --prometheus leaves a complete textfile.
. "$(dirname "$0")/../lib/setup.sh"
PY=${PYTHON:-/usr/bin/python3}
command -v "$PY" >/dev/null || skip "python3 ($PY) is needed to read the metrics"

# 3 ranks, 3 buckets: busbw is 4/3 of algbw.
run_mpi 3 --layers=32,160,160,160,4 --bucket-mb=0.05 --batch-size=8 --max-steps=5 --log-every=0 \
	--metrics="$TMPD/m.jsonl" >"$TMPD/out" || fail "3-rank run failed"
awk '/^# all-reduce per bucket/ { t = 1; next } t && /^# *bucket/ { next }
     t && /^# +[0-9]/ { print; n++; next } t { exit } END { if (n != 3) exit 1 }' "$TMPD/out" >"$TMPD/rows" ||
	fail "want 3 bucket rows: $(cat "$TMPD/out")"
# bucket layers bytes count time_ms best_ms algbw busbw best_busbw. Every figure a number
# first: with a NaN, "x - want > tol" is false and the row would pass.
awk '{ for (i = 4; i <= 10; i++) if ($i !~ /^[0-9]+(\.[0-9]+)?$/) { print "not a number: " $i; exit 1 }
       bytes = $4; t = $6; best = $7; alg = $8; bus = $9; bbus = $10
       if ($5 != 5) { print "count " $5 " for bucket " $2; exit 1 }
       # A time column is printed to 0.0001 ms, so a rate computed from it may be any rate of
       # a time within half of that: each rate must agree with one of them, within the same
       # tolerances as before (a fast machine prints times of 0.02 ms, 0.25% apart).
       if (t > 0 && !near(alg, bytes, t, 1, 0.0006)) { print "algbw " alg " want " gbs(bytes, t); exit 1 }
       want = alg * 2 * 2 / 3
       if (bus - want > 0.0011 || want - bus > 0.0011) { print "busbw " bus " want " want; exit 1 }
       if (best > 0 && !near(bbus, bytes, best, 4 / 3, 0.001)) { print "best busbw " bbus " want " gbs(bytes, best) * 4 / 3; exit 1 } }
     function gbs(b, ms) { return b / (ms / 1e3) / 1e9 }
     # rate x (GB/s) is f x bytes over a time within 0.00005 ms of ms, give or take abs + 0.1%
     function near(x, b, ms, f, abs,    lo, hi) {
       lo = f * gbs(b, ms + 0.00005); hi = ms > 0.00005 ? f * gbs(b, ms - 0.00005) : x
       return x >= lo - (abs + 1e-3 * lo) && x <= hi + (abs + 1e-3 * hi) }' \
	"$TMPD/rows" || fail "the all-reduce table disagrees with busbw = algbw x 2(n-1)/n: $(cat "$TMPD/rows")"
# The layers column counts from 1, as --freeze does: backward fills layers 4 and 3 first.
[ "$(awk '{ printf "%s ", $3 }' "$TMPD/rows")" = "4-3 2-2 1-1 " ] ||
	fail "the table's layers, want 4-3 2-2 1-1 (from 1, as --freeze counts): $(cat "$TMPD/rows")"
# Where no bucket's all-reduce is timed, one line says why instead of a table of zeros:
# --zero=2 reduce-scatters parts of layers; the ring streams regions of layers.
not_timed() { # WHY ARGS...: a 2-rank run's summary says WHY and has no bucket table
	local why=$1
	shift
	run_mpi 2 --layers=32,160,4 --max-steps=3 --log-every=0 "$@" >"$TMPD/nt" || fail "$*: the run failed"
	grep -q "^# all-reduce per bucket: not timed: .*$why" "$TMPD/nt" && ! grep -q '^# bucket  layers' "$TMPD/nt" ||
		fail "$* ${DDPTRAIN_ALLREDUCE:-}: want the line saying the buckets are not timed: $(grep -A3 'all-reduce per bucket' "$TMPD/nt")"
}
not_timed "--zero=2 reduce-scatters" --zero=2
DDPTRAIN_ALLREDUCE=ring not_timed "stream in regions of layers"
"$PY" - "$TMPD/m.jsonl" <<'PYEOF' || fail "metrics: allreduce_buckets or step_times wrong"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
start, s = recs[0], recs[-1]
assert start["type"] == "start" and start["build"]["license"] == "MIT" and "mpi" in start["build"], start
b = s["allreduce_buckets"]
assert len(b) == 3, b
assert [(x["first_layer"], x["last_layer"]) for x in b] == [(3, 4), (2, 2), (1, 1)], b
for x in b:
    assert x["count"] == 5 and x["mean_s"] > 0, x
    assert abs(x["algbw_bytes_per_s"] - x["bytes"] / x["mean_s"]) <= 1e-9 * x["algbw_bytes_per_s"], x
    assert abs(x["busbw_bytes_per_s"] - x["algbw_bytes_per_s"] * 4 / 3) <= 1e-9 * x["busbw_bytes_per_s"], x
assert [r["rank"] for r in s["step_times"]] == [0, 1, 2]
for r in s["step_times"]:
    assert 0 < r["step_p50_s"] <= r["step_p99_s"] <= r["step_max_s"], r
PYEOF

# Rank 1 sleeps 20 ms after every step: its compute time is far above rank 0's. 60 steps
# are three 20-step windows; the warning comes after two slow ones.
host=$(hostname)
host=${host:0:63}
DDPTRAIN_TEST_SLOW_RANK=1:0.02 run_mpi 2 --max-steps=60 --log-every=0 \
	--straggler-warn=1.5 --prometheus="$TMPD/p.prom" --prometheus-every=0.2 >"$TMPD/slow" ||
	fail "straggler run failed"
warn=$(grep "^# warning: straggler: rank 1 on $host computes " "$TMPD/slow") || fail "no straggler warning for rank 1: $(cat "$TMPD/slow")"
[ "$(grep -c 'warning: straggler' "$TMPD/slow")" -eq 1 ] || fail "want one warning: $(grep warning "$TMPD/slow")"
echo "$warn"
grep -q "^# slowest rank: 1 on $host," "$TMPD/slow" || fail "summary does not name rank 1 on $host: $(grep slowest "$TMPD/slow")"
grep '^# slowest rank' "$TMPD/slow"

# Without --straggler-warn: no warning, still the summary line.
DDPTRAIN_TEST_SLOW_RANK=1:0.02 run_mpi 2 --max-steps=45 --log-every=0 >"$TMPD/quiet" ||
	fail "run without --straggler-warn failed"
! grep -q 'warning: straggler' "$TMPD/quiet" || fail "warned without --straggler-warn"
grep -q "^# slowest rank: 1 on $host," "$TMPD/quiet" || fail "summary does not name rank 1 (no --straggler-warn)"

# The Prometheus file: complete, final (running 0, step 60), with the bucket's busbw.
grep -qx 'ddptrain_running{mode="ddp",replicas="2"} 0' "$TMPD/p.prom" || fail "prometheus: not final: $(cat "$TMPD/p.prom")"
grep -qx 'ddptrain_step{mode="ddp",replicas="2"} 60' "$TMPD/p.prom" || fail "prometheus: step is not 60"
grep -q '^ddptrain_bucket_busbw_bytes_per_second{mode="ddp",replicas="2",bucket="0"} [0-9]' "$TMPD/p.prom" ||
	fail "prometheus: no busbw for the bucket: $(grep busbw "$TMPD/p.prom")"
[ "$(grep -c '^# TYPE' "$TMPD/p.prom")" -eq "$(grep -c '^# HELP' "$TMPD/p.prom")" ] || fail "prometheus: HELP/TYPE mismatch"
grep -q '^ddptrain_bucket_size_bytes{mode="ddp",replicas="2",bucket="0"} [1-9][0-9]*$' "$TMPD/p.prom" ||
	fail "prometheus: no size for the bucket: $(grep size "$TMPD/p.prom")"
# Prometheus' naming rules (tests/observe/promtool.sh checks them all where promtool is): "_total"
# only on a counter, and every series' name has its TYPE.
awk '/^# TYPE / && $4 != "counter" && $3 ~ /_total$/ { print "gauge named like a counter: " $3; bad = 1 }
     /^# TYPE / { type[$3] = 1 } /^ddptrain_/ { n = $0; sub(/[{ ].*/, "", n); if (!(n in type)) { print "no TYPE: " n; bad = 1 } }
     END { exit bad }' "$TMPD/p.prom" || fail "prometheus: naming rules broken"
ls "$TMPD" | grep -q 'p.prom.tmp' && fail "prometheus: a temporary file was left behind"
expect_fail 2 "--straggler-warn" 1 --straggler-warn=0.5
echo "stragglers: busbw table and metrics agree with the formula; warning and summary name rank 1"
