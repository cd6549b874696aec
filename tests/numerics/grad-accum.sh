#!/bin/bash
# --grad-accum=K with batch B equals batch K*B, on 1 and 2 ranks: the same weights, and
# the same loss reported for every step (--metrics records, progress lines, summary);
# and the last, shorter group of an epoch averages over the micro-batches it has.
. "$(dirname "$0")/../lib/setup.sh"

common="--samples=240 --epochs=2 --seed=5 --lr=0.05 --momentum=0.5 --log-every=1"
for W in 1 2; do
	run_mpi "$W" $common --batch-size=12 --save="$TMPD/big.st" --metrics="$TMPD/big.jsonl" >"$TMPD/big.out" ||
		fail "batch 12"
	run_mpi "$W" $common --batch-size=4 --grad-accum=3 --save="$TMPD/acc.st" --metrics="$TMPD/acc.jsonl" \
		>"$TMPD/acc.out" || fail "accum 3"
	out=$("$STCOMPARE" "$TMPD/acc.st" "$TMPD/big.st" 1e-5) || fail "W=$W: $out"
	echo "W=$W batch 4 x accum 3 vs batch 12: $out"
	out=$("$METCOMPARE" --progress "$TMPD/acc.out" "$TMPD/acc.jsonl" "$TMPD/big.jsonl" 1e-5) ||
		fail "W=$W: batch 4 x accum 3 reports other losses than batch 12: $out"
	echo "W=$W reported losses: $out"
done

# 1 rank, 100 samples, batch 10, accum 4: 10 micro-batches per epoch in groups 4, 4, 2.
# The last group (2 micro-batches) is one step of batch 20 over the same samples only if
# it averages over 2, not 4: compare with --no-shuffle batch 40/40/20 (100 = 40 + 40 + 20).
short="--samples=100 --epochs=2 --no-shuffle --lr=0.05 --log-every=1"
run_mpi 1 $short --batch-size=10 --grad-accum=4 --save="$TMPD/acc-short.st" --metrics="$TMPD/acc-short.jsonl" \
	>"$TMPD/acc-short.out" || fail "short group"
run_mpi 1 $short --batch-size=40 --save="$TMPD/big-short.st" --metrics="$TMPD/big-short.jsonl" >/dev/null ||
	fail "batch 40"
out=$("$STCOMPARE" "$TMPD/acc-short.st" "$TMPD/big-short.st" 1e-5) || fail "short last group: $out"
echo "short last group (10 x 4,4,2 vs 40,40,20): $out"
out=$("$METCOMPARE" --progress "$TMPD/acc-short.out" "$TMPD/acc-short.jsonl" "$TMPD/big-short.jsonl" 1e-5) ||
	fail "short last group reports other losses than batch 40/40/20: $out"
echo "short last group, reported losses: $out"
