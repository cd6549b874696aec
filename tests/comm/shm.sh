#!/bin/bash
# The shared-memory all-reduce (src/comm/shm.c), the default for ranks on one node: at 2
# ranks it trains exactly what MPI's all-reduce trains (a + b either way), at 3 within
# 1e-6 of it (another summation order) and within 1e-5 of one rank on the whole batch;
# bit-identically from run to run; with overlap, without, with gradient accumulation
# and with the trace observing it. The per-rank table names it, DDPTRAIN_ALLREDUCE=mpi
# turns it off, a rank set without the window falls back with the others, and a bad
# value is refused on every rank.
. "$(dirname "$0")/../lib/setup.sh"

args="--layers=64,512,512,4 --samples=384 --epochs=1 --batch-size=96 --momentum=0.9 --quiet"
run_mpi 1 $args --save="$TMPD/one.st" || fail "1 rank"
for case in "2 " "2 --no-overlap" "2 --grad-accum=2" "3 "; do
	read -r W extra <<<"$case"
	b=$((96 / W))
	[ "$extra" != --grad-accum=2 ] || b=$((b / 2))
	DDPTRAIN_ALLREDUCE=mpi run_mpi "$W" $args --batch-size=$b $extra --save="$TMPD/mpi.st" || fail "W=$W mpi $extra"
	DDPTRAIN_ALLREDUCE=shm run_mpi "$W" $args --batch-size=$b $extra --save="$TMPD/a.st" || fail "W=$W shm $extra"
	run_mpi "$W" $args --batch-size=$b $extra --save="$TMPD/b.st" --trace="$TMPD/t.json" || fail "W=$W default $extra"
	"$STCOMPARE" --exact "$TMPD/a.st" "$TMPD/b.st" >/dev/null || fail "W=$W $extra: shm runs differ"
	if [ "$W" = 2 ]; then
		"$STCOMPARE" --exact "$TMPD/a.st" "$TMPD/mpi.st" >/dev/null || fail "W=2 $extra: shm and MPI differ"
		echo "W=2 $extra shm vs MPI all-reduce: identical"
	else
		out=$("$STCOMPARE" "$TMPD/a.st" "$TMPD/mpi.st" 1e-6) || fail "W=$W $extra shm vs mpi: $out"
		echo "W=$W $extra shm vs MPI all-reduce: $out"
	fi
	out=$("$STCOMPARE" "$TMPD/a.st" "$TMPD/one.st" 1e-5) || fail "W=$W $extra shm vs 1 rank: $out"
	echo "W=$W $extra shm vs 1 rank, batch 96: $out"
	# The trace shows the all-reduces (the observer is told of each as it completes).
	n=$(grep -o '"allreduce bucket [0-9]*"' "$TMPD/t.json" | wc -l)
	[ "$n" -gt 0 ] || fail "W=$W $extra: no all-reduce spans in the trace"
done
out=$(run_mpi 2 ${args/--quiet/} --batch-size=48 --max-steps=1) || fail "2 ranks, table"
n=$(grep -c "backend mpi, shared-memory all-reduce" <<<"$out") || true
[ "$n" = 2 ] || fail "the per-rank table does not name the shared-memory all-reduce on both ranks: $out"
out=$(DDPTRAIN_ALLREDUCE=mpi run_mpi 2 ${args/--quiet/} --batch-size=48 --max-steps=1) || fail "2 ranks, mpi"
n=$(grep -c "backend mpi, MPI all-reduce" <<<"$out") || true
[ "$n" = 2 ] || fail "DDPTRAIN_ALLREDUCE=mpi does not turn it off: $out"
# Where the window cannot be had (tests/lib/faultshim.so fails MPI_Win_allocate_shared on every
# rank, as a small /dev/shm does): auto falls back to MPI's all-reduce on every rank and
# trains the same weights; asked for by name, every rank exits 1 with the reason.
SHIM=$FAULTSHIM
if [ -f "$SHIM" ]; then
	real=$DDPTRAIN
	out=$(timeout -k 5 120 mpirun --oversubscribe -np 2 env LD_PRELOAD="$SHIM" DDPT_SHIM_NO_SHARED_WINDOW=1 \
		"$real" ${args/--quiet/} --batch-size=48 --save="$TMPD/fb.st") || fail "no window: the fallback failed"
	n=$(grep -c "backend mpi, MPI all-reduce" <<<"$out") || true
	[ "$n" = 2 ] || fail "no window: not MPI's all-reduce on both ranks: $out"
	DDPTRAIN_ALLREDUCE=mpi run_mpi 2 $args --batch-size=48 --save="$TMPD/mpi.st" || fail "mpi, batch 48"
	"$STCOMPARE" --exact "$TMPD/fb.st" "$TMPD/mpi.st" >/dev/null || fail "no window: the fallback trains other weights"
	DDPTRAIN=env expect_fail 1 "MPI_Win_allocate_shared(gradients)" 2 LD_PRELOAD="$SHIM" \
		DDPT_SHIM_NO_SHARED_WINDOW=1 DDPTRAIN_ALLREDUCE=shm "$real" $args
	echo "no shared window: auto fell back to MPI's all-reduce on both ranks; DDPTRAIN_ALLREDUCE=shm: $(cat "$TMPD/stderr")"
fi
DDPTRAIN_ALLREDUCE=sharedmem expect_fail 2 "DDPTRAIN_ALLREDUCE: want auto, ring, shm or mpi" 2 $args
echo "shm: ok"
