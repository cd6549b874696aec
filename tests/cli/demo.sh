#!/bin/bash
# The default demo (no flags, 2 ranks) trains the ToyModel and its loss falls.
. "$(dirname "$0")/../lib/setup.sh"

run_mpi 2 >"$TMPD/out" 2>"$TMPD/err" || fail "demo exited $?: $(cat "$TMPD/err")"
grep -q "^# ddptrain .*2 ranks" "$TMPD/out" || fail "no header"
grep -q "model 10,10,5 (165 parameters)" "$TMPD/out" || fail "not the ToyModel"
grep -q "batch 20 per rank" "$TMPD/out" || fail "not 20 samples per rank"
first=$(awk '$1 ~ /^[0-9]+$/ { print $3; exit }' "$TMPD/out")
last=$(awk '$1 ~ /^[0-9]+$/ { l = $3 } END { print l }' "$TMPD/out")
[ -n "$first" ] && [ -n "$last" ] || fail "no progress lines"
# Both finite numbers: an infinite first loss would pass b < 0.8 * a.
awk -v a="$first" -v b="$last" 'BEGIN { n = "^[0-9]+(\\.[0-9]+)?$"; exit !(a ~ n && b ~ n && b < 0.8 * a) }' ||
	fail "loss did not fall: first logged $first, last $last"
grep -q "^# done: 5000 steps" "$TMPD/out" || fail "expected 5000 steps"
echo "demo: loss $first -> $last"
