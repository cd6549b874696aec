#!/bin/bash
# scripts/plot-metrics.sh draws a real run's --metrics file, and two runs laid
# over each other (ddp against dp), as PNG pictures; it refuses what it cannot
# draw with one line. Skips (77) without gnuplot.
. "$(dirname "$0")/../lib/setup.sh"

PLOT=$TOP_SRCDIR/scripts/plot-metrics.sh
command -v gnuplot >/dev/null 2>&1 || skip "no gnuplot (apt-get install gnuplot-nox)"

run_mpi 2 --samples=400 --epochs=2 --log-every=5 --quiet --metrics="$TMPD/ddp.jsonl" || fail "ddp run"
"$DDPTRAIN" --mode=dp --replicas=2 --samples=400 --epochs=2 --log-every=5 --quiet --metrics="$TMPD/dp.jsonl" ||
	fail "dp run"
rows=$(grep -c '"type":"step"' "$TMPD/ddp.jsonl") || fail "no step rows in the metrics file"

# is_png FILE: a PNG (signature) of some substance (two panels of lines and text)
is_png() {
	[ -f "$1" ] || fail "$1 was not written"
	[ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "$1 is not a PNG"
	local size
	size=$(wc -c <"$1")
	[ "$size" -gt 10000 ] || fail "$1 has only $size bytes"
	echo "$(basename "$1"): PNG, $size bytes"
}

"$PLOT" "$TMPD/ddp.jsonl" >"$TMPD/out" || fail "plotting one run: $(cat "$TMPD/out")"
is_png "$TMPD/ddp.png"
"$PLOT" "$TMPD/ddp.jsonl" "$TMPD/dp.jsonl" -o "$TMPD/both.png" -t "ddp against dp" || fail "plotting two runs"
is_png "$TMPD/both.png"
grep -q "wrote $TMPD/ddp.png (1 run)" "$TMPD/out" || fail "plot-metrics said: $(cat "$TMPD/out")"

# What it refuses.
"$PLOT" >/dev/null 2>&1 && fail "no file accepted"
"$PLOT" "$TMPD/none.jsonl" 2>"$TMPD/err" && fail "missing file accepted"
grep -q "none.jsonl: cannot read" "$TMPD/err" || fail "missing file: $(cat "$TMPD/err")"
grep -v '"type":"step"' "$TMPD/ddp.jsonl" >"$TMPD/nosteps.jsonl"
"$PLOT" "$TMPD/nosteps.jsonl" -o "$TMPD/x.png" 2>"$TMPD/err" && fail "file without step rows accepted"
grep -q "no step rows" "$TMPD/err" || fail "no step rows: $(cat "$TMPD/err")"
[ ! -e "$TMPD/x.png" ] || fail "a refused plot left a file"
echo "plot-metrics: ok ($rows step rows per run)"
