#!/bin/bash
# Progress by time as well as by steps. In a log, a line every --log-every steps or
# once --log-seconds have passed without one, whichever comes first; on a terminal the
# line is redrawn at least every 0.5 s (with the percentage). The --metrics "step"
# records stay one per --log-every steps. No timing is judged: the test hook
# DDPTRAIN_TEST_SLOW_RANK=0:S makes rank 0 sleep S seconds after every step, so from
# the second step on each step ends at least S after the one before, on any machine.
. "$(dirname "$0")/../lib/setup.sh"
cd "$TMPD" || fail "cd $TMPD"
R="--max-steps=6 --log-every=1000"

# lines FILE: the steps that have a progress line in a log ("2 3 4 5 6").
lines() {
	awk '/^ +[0-9]+ +[0-9]+\/[0-9]+ / { split($2, s, "/"); printf "%s%s", n++ ? " " : "", s[1] } END { print "" }' "$1"
}

# A log, one process: steps 2 to 6 come at least 50 ms apart, 5 times --log-seconds.
DDPTRAIN_TEST_SLOW_RANK=0:0.05 "$DDPTRAIN" $R --log-seconds=0.01 --metrics=m.jsonl >out ||
	fail "slowed run failed: $(cat out)"
got=$(lines out)
case $got in "2 3 4 5 6" | "1 2 3 4 5 6") ;; *) fail "want lines for steps 2 to 6 (--log-seconds=0.01), got '$got': $(cat out)" ;; esac
echo "log, --log-seconds=0.01, a step every >= 50 ms: lines for steps $got"
[ "$(grep -c '"type":"step"' m.jsonl)" -eq 1 ] && grep -q '"type":"step","step":6,' m.jsonl ||
	fail "want one metrics step record (step 6, the last of --log-every=1000): $(grep step m.jsonl)"

# Under mpirun, 2 ranks: rank 0 decides (it alone prints), rank 1 never blocks on it.
DDPTRAIN_TEST_SLOW_RANK=0:0.05 run_mpi 2 $R --log-seconds=0.01 >out2 || fail "2-rank slowed run failed"
got=$(lines out2)
case $got in "2 3 4 5 6" | "1 2 3 4 5 6") ;; *) fail "2 ranks: want lines for steps 2 to 6, got '$got': $(cat out2)" ;; esac
echo "log, 2 ranks: lines for steps $got"

# --log-seconds=0: by steps only, the last step's line alone.
DDPTRAIN_TEST_SLOW_RANK=0:0.05 "$DDPTRAIN" $R --log-seconds=0 >out0 || fail "--log-seconds=0 run failed"
[ "$(lines out0)" = 6 ] || fail "--log-seconds=0: want the line of step 6 alone, got '$(lines out0)'"

# --quiet: nothing, whatever is due.
DDPTRAIN_TEST_SLOW_RANK=0:0.05 "$DDPTRAIN" $R --log-seconds=0.01 --quiet >outq || fail "--quiet run failed"
[ ! -s outq ] || fail "--quiet printed: $(cat outq)"

expect_fail 2 "--log-seconds: 'soon' is not a finite number" alone --log-seconds=soon
expect_fail 2 "--log-seconds: -1 is out of range" alone --log-seconds=-1

# A terminal: the line is redrawn (\r) between --log-every steps, with the percentage.
# At the default --log-seconds the redraw comes every 0.5 s: steps 500 ms apart.
if command -v script >/dev/null; then
	DDPTRAIN_TEST_SLOW_RANK=0:0.5 TERM=xterm timeout -k 5 60 \
		script -qec "'$DDPTRAIN' --max-steps=3 --log-every=1000" /dev/null >tty </dev/null ||
		fail "under script"
	grep -aq $'\r epoch 1/50  step 2/3 (66%)  loss ' tty ||
		fail "terminal: no redraw at step 2 of 3 (steps 0.5 s apart, --log-every=1000): $(od -c tty | head -20)"
	echo "terminal, steps 0.5 s apart: $(tr '\r' '\n' <tty | grep -ac '^ epoch') redraws, step 2/3 among them"
else
	echo "progress: no script(1): the terminal case not run"
fi
echo "progress: a line by time between --log-every steps, in a log and on a terminal; metrics by steps"
