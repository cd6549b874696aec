#!/bin/bash
# --prometheus files pass Prometheus' own check (promtool check metrics: names in
# snake case with their unit, "_total" only on counters, HELP and TYPE for each):
# ddp with several buckets while running and at its end, and dp. promtool comes
# with Debian's prometheus package; without it this test skips.
. "$(dirname "$0")/../lib/setup.sh"
command -v promtool >/dev/null 2>&1 || skip "no promtool (Debian package prometheus)"
cd "$TMPD"

# check FILE WHAT: promtool has nothing to say about FILE.
check() {
	promtool check metrics <"$1" >"$1.lint" 2>&1 || fail "promtool check metrics: $2: $(cat "$1.lint")"
	[ ! -s "$1.lint" ] || fail "promtool check metrics: $2: $(cat "$1.lint")"
}

# ddp, 2 ranks, 2 buckets: a copy taken while it runs, and the file at its end.
mpirun_bg -np 2 "$DDPTRAIN" --layers=32,160,160,4 --bucket-mb=0.05 --epochs=100000 --log-every=0 \
	--prometheus=ddp.prom --prometheus-every=0.01
started
for _ in $(seq 1 100); do [ -s ddp.prom ] && break; sleep 0.1; done
cp ddp.prom running.prom
kill -TERM "$(pgrep -P "$bg" -f -- "--prometheus=ddp.prom" | head -1)"
finish 3
check running.prom "ddp, running"
check ddp.prom "ddp, stopped"
grep -q '^ddptrain_running{.*} 1$' running.prom || fail "the copy is not of a running run: $(cat running.prom)"
grep -q '^ddptrain_bucket_busbw_bytes_per_second{.*bucket="1"}' running.prom ||
	fail "want 2 buckets: $(grep bucket running.prom)"

"$DDPTRAIN" --mode=dp --replicas=2 --max-steps=3 --quiet --prometheus=dp.prom || fail "dp run failed"
check dp.prom "dp, finished"
echo "promtool: ddp (running and stopped) and dp files pass promtool check metrics"
