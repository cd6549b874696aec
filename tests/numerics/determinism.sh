#!/bin/bash
# The same command twice gives bit-identical weights, at 1 to 4 ranks, and all
# replicas hold the same weights as rank 0.
. "$(dirname "$0")/../lib/setup.sh"

for W in 1 2 3 4; do
	args="--samples=500 --epochs=2 --batch-size=7 --momentum=0.9 --layers=10,16,5 --quiet"
	run_mpi "$W" $args --save="$TMPD/a.st" || fail "first run, $W ranks"
	run_mpi "$W" $args --save="$TMPD/b.st" || fail "second run, $W ranks"
	out=$("$STCOMPARE" --exact "$TMPD/a.st" "$TMPD/b.st") || fail "W=$W: $out"
	echo "W=$W: $out"
done
