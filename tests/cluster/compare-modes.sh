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
# The variants table: dp and plain ddp always, each variant where this ddptrain has its
# flag (and stage), each with a number of KiB sent and a state.
grep -q "^# dp, ddp and its variants at 3 replicas" "$TMPD/out" || fail "no variants table"
grep -Eq "^  ddp +[0-9.]+ +[0-9.]+ +[0-9.]+ .* 1\.00x +[0-9.]+$" "$TMPD/out" || fail "no plain ddp row in the variants table"
grep -Eq "^  dp +[0-9.]+ +- +[0-9.]+ .*x +[0-9.]+$" "$TMPD/out" || fail "no dp row in the variants table"
for v in zero1:--zero=1 zero2:--zero=2 zero3:--zero=3 bf16:--grad-compress=bf16; do
	flag=${v#*:}
	if "$DDPTRAIN" --help 2>&1 | grep -q -- "${flag%%=*}=[^ ]*${flag#*=}"; then
		grep -Eq "^  ${v%%:*} +[0-9.]+ +[0-9.]+ +[0-9.]+ .*x +[0-9.]+$" "$TMPD/out" || fail "no ${v%%:*} row"
	fi
done
# ZeRO-3's row: a working set, and less kept per rank than plain ddp's parameters
if "$DDPTRAIN" --help 2>&1 | grep -q -- "--zero=[^ ]*3"; then
	awk '$1 == "ddp" && NF == 11 { p = $5 } $1 == "zero3" && NF == 11 { z = $5; w = $8 }
	     END { exit !(p > 0 && z < p && w > 0) }' "$TMPD/out" || fail "zero3 row: params not sharded, or no working set"
fi
grep -q "^# ddp/dp at 3 replicas: [0-9.]*x the samples/s" "$TMPD/out" || fail "no ratio line"
grep -q "^# dp replica 0: [0-9.]*% of its step in the serial" "$TMPD/out" || fail "no dp breakdown"
"$script" --replicas=x >/dev/null 2>&1 && fail "bad --replicas accepted"
"$script" --mode=dp >/dev/null 2>&1 && fail "--mode accepted"
echo "compare-modes: ok"
