#!/bin/bash
# DDP equivalence: W ranks with batch B end with the same weights (relative error
# at most 1e-5) as one rank with batch W*B, with shuffle on and off, for W = 2, 3, 4,
# and whatever the bucketing (one bucket, many, overlap off).
. "$(dirname "$0")/../lib/setup.sh"

common="--samples=600 --epochs=3 --seed=3 --lr=0.05 --quiet"
B=5
for shuffle in --shuffle --no-shuffle; do
	for W in 2 3 4; do
		run_mpi 1 $common $shuffle --batch-size=$((W * B)) --save="$TMPD/one.st" || fail "1 rank run"
		run_mpi "$W" $common $shuffle --batch-size=$B --save="$TMPD/w.st" || fail "$W rank run"
		out=$("$STCOMPARE" "$TMPD/w.st" "$TMPD/one.st" 1e-5) || fail "W=$W $shuffle: $out"
		echo "W=$W B=$B $shuffle vs 1 rank B=$((W * B)): $out"
	done
done

# A deeper model, several buckets (cap 0.002 MiB = 524 floats), with and without overlap.
deep="--layers=10,32,32,32,5 --samples=480 --epochs=2 --seed=4 --lr=0.02 --momentum=0.9 --weight-decay=0.001 --quiet"
run_mpi 1 $deep --batch-size=24 --save="$TMPD/deep1.st" || fail "deep 1 rank"
for extra in "" "--bucket-mb=0.002" "--bucket-mb=0.002 --no-overlap"; do
	run_mpi 3 $deep --batch-size=8 $extra --save="$TMPD/deep3.st" || fail "deep 3 ranks $extra"
	out=$("$STCOMPARE" "$TMPD/deep3.st" "$TMPD/deep1.st" 1e-5) || fail "deep $extra: $out"
	echo "deep W=3 B=8 momentum $extra vs 1 rank B=24: $out"
done
run_mpi 3 $deep --batch-size=8 --bucket-mb=0.002 >/dev/null 2>&1 || fail "deep run"
nb=$(run_mpi 3 ${deep/--quiet/} --batch-size=8 --bucket-mb=0.002 --max-steps=1 | sed -n 's/^# buckets: \([0-9]*\).*/\1/p')
[ "$nb" -ge 3 ] || fail "expected several buckets with --bucket-mb=0.002, got $nb"
echo "equivalence: ok ($nb buckets in the deep case)"
