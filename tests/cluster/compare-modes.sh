#!/bin/bash
# scripts/compare-modes.sh runs both modes and prints the side-by-side table.
. "$(dirname "$0")/../lib/setup.sh"

script=$TOP_SRCDIR/scripts/compare-modes.sh
bash -n "$script" || fail "syntax"
DDPTRAIN=$DDPTRAIN MPIRUN="mpirun --oversubscribe" "$script" --replicas 3 --samples=240 --epochs=2 \
	>"$TMPD/out" 2>"$TMPD/err" || fail "exited $?: $(cat "$TMPD/err")"
cat "$TMPD/out"
for row in "ddp +1 " "ddp +3 " "dp +1 " "dp +3 "; do
	grep -Eq "^  $row+[0-9]+ +[0-9.]+ +[0-9.]+x" "$TMPD/out" || fail "no row '$row'"
done
# The issue-22 table: plain ddp always, each variant where this ddptrain has its flag.
grep -q "^# ddp at 3 ranks and its variants" "$TMPD/out" || fail "no variants table"
grep -Eq "^  ddp +[0-9.]+ +[0-9.]+ .* 1\.00x +[0-9.]+$" "$TMPD/out" || fail "no plain ddp row in the variants table"
for v in zero1:--zero bf16:--grad-compress; do
	if "$DDPTRAIN" --help 2>&1 | grep -q -- "${v#*:}"; then
		grep -Eq "^  ${v%%:*} +[0-9.]+ +[0-9.]+ .*x +[0-9.]+$" "$TMPD/out" || fail "no ${v%%:*} row"
	fi
done
grep -q "^# ddp/dp at 3 replicas: [0-9.]*x the samples/s" "$TMPD/out" || fail "no ratio line"
grep -q "^# dp replica 0: [0-9.]*% of its step in the serial" "$TMPD/out" || fail "no dp breakdown"
"$script" --replicas=x >/dev/null 2>&1 && fail "bad --replicas accepted"
"$script" --mode=dp >/dev/null 2>&1 && fail "--mode accepted"
echo "compare-modes: ok"
