#!/bin/bash
# The ring all-reduce (src/comm/ring.c) and streaming (gradient regions started as
# backward's panels finish them): forced onto one node (DDPTRAIN_ALLREDUCE=ring;
# by default only jobs across nodes use it) and onto small buffers with tiny
# pieces (DDPTRAIN_RING_MIN_KB=0, DDPTRAIN_RING_CHUNK_KB=1) on a model whose products
# split into panels (DDPTRAIN_PANEL_MFLOP=1), at 2 ranks (with and without overlap) and 3, it trains what MPI_Iallreduce trains
# (relative error at most 1e-6) and what one rank trains on the whole batch
# (1e-5), bit-identically from run to run, with overlap and without; a bad
# setting is refused with exit 2 and one line naming the variable.
. "$(dirname "$0")/../lib/setup.sh"

args="--layers=64,512,512,4 --samples=384 --epochs=1 --batch-size=96 --momentum=0.9 --quiet"
run_mpi 1 $args --save="$TMPD/one.st" || fail "1 rank"
for case in "2 " "2 --no-overlap" "3 "; do
	read -r W extra <<<"$case"
	b=$((96 / W))
	{
		DDPTRAIN_ALLREDUCE=mpi run_mpi "$W" $args --batch-size=$b $extra --save="$TMPD/mpi.st" || fail "W=$W mpi $extra"
		export DDPTRAIN_ALLREDUCE=ring DDPTRAIN_RING_MIN_KB=0 DDPTRAIN_RING_CHUNK_KB=1 DDPTRAIN_RING_WINDOW=3 \
			DDPTRAIN_PANEL_MFLOP=1
		run_mpi "$W" $args --batch-size=$b $extra --save="$TMPD/a.st" || fail "W=$W ring $extra"
		run_mpi "$W" $args --batch-size=$b $extra --save="$TMPD/b.st" || fail "W=$W ring again $extra"
		unset DDPTRAIN_ALLREDUCE DDPTRAIN_RING_MIN_KB DDPTRAIN_RING_CHUNK_KB DDPTRAIN_RING_WINDOW DDPTRAIN_PANEL_MFLOP
		"$STCOMPARE" --exact "$TMPD/a.st" "$TMPD/b.st" >/dev/null || fail "W=$W $extra: ring runs differ"
		out=$("$STCOMPARE" "$TMPD/a.st" "$TMPD/mpi.st" 1e-6) || fail "W=$W $extra ring vs mpi: $out"
		echo "W=$W $extra ring vs MPI_Iallreduce: $out"
		out=$("$STCOMPARE" "$TMPD/a.st" "$TMPD/one.st" 1e-5) || fail "W=$W $extra ring vs 1 rank: $out"
		echo "W=$W $extra ring vs 1 rank, batch 96: $out"
	}
done
# The streamed run reports it; a bad setting is a usage error on every rank.
# On one node the default (auto) keeps MPI's all-reduce and whole buckets; ring streams.
n=$(DDPTRAIN_ALLREDUCE=ring run_mpi 2 ${args/--quiet/} --batch-size=48 --max-steps=1 | grep -c "^# buckets: .*streamed") || true
[ "$n" = 1 ] || fail "no streamed buckets line at 2 ranks with DDPTRAIN_ALLREDUCE=ring"
n=$(run_mpi 2 ${args/--quiet/} --batch-size=48 --max-steps=1 | grep -c "^# buckets: .*streamed") || true
[ "$n" = 0 ] || fail "streamed on one node without DDPTRAIN_ALLREDUCE=ring"
DDPTRAIN_RING_WINDOW=99 expect_fail 2 DDPTRAIN_RING_WINDOW 2 $args
DDPTRAIN_ALLREDUCE=fast expect_fail 2 DDPTRAIN_ALLREDUCE 2 $args
DDPTRAIN_PANEL_MFLOP=-1 expect_fail 2 DDPTRAIN_PANEL_MFLOP 2 $args
echo "ring: ok"
