#!/bin/bash
# The host collectives of every all-reduce algorithm (DDPTRAIN_ALLREDUCE=mpi,
# ring, shm) at 1-4 ranks in float32, fp16 and bf16 (tests/lib/collcheck.c):
# all-reduces, reduce-scatters with uneven, empty and whole parts, all-gathers,
# wait_first with later collectives in flight, several at once, COMM_LAST; the
# float32 sums exact, the 16-bit ones exactly the algorithm's stated order of
# rounded partial sums (MPI's own at 3-4 ranks: within the roundings' bound).
# The ring runs with 1 KiB pieces and hands buckets under 1 KiB to MPI's
# algorithm, so both paths and their order are exercised. The hierarchical
# algorithm needs two nodes: tests/comm/collectives-hier.sh. Device memory (the fake
# GPU module) at 2 ranks: staged through pinned host memory, and with a
# CUDA-aware MPI (DDPTRAIN_MPI_CUDA_AWARE=1, where a 16-bit collective is staged
# all the same); the all-gathered buffer lies outside the gradients.
. "$(dirname "$0")/../lib/setup.sh"

COLLCHECK=$TESTS_BUILDDIR/lib/collcheck
export DDPTRAIN_RING_MIN_KB=1 DDPTRAIN_RING_CHUNK_KB=1 DDPTRAIN_RING_WINDOW=3
runs=0
for wire in fp32 fp16 bf16; do
	# One rank: every algorithm is MPI's own (nothing to choose).
	out=$(timeout -k 5 60 mpirun --oversubscribe -np 1 "$COLLCHECK" --wire="$wire" 2>&1) ||
		fail "1 rank, $wire: $out"
	runs=$((runs + 1))
	for alg in mpi ring shm; do
		for np in 2 3 4; do
			out=$(DDPTRAIN_ALLREDUCE=$alg timeout -k 5 60 mpirun --oversubscribe -np "$np" \
				"$COLLCHECK" --wire="$wire" 2>&1) || fail "$alg, $np ranks, $wire: $out"
			case $out in
			*"# collcheck: ok: 0 wrong values over $np ranks"*) ;;
			*) fail "$alg, $np ranks, $wire: no verdict: $out" ;;
			esac
			# The algorithm asked for is the one that ran.
			want=$(case $alg in mpi) echo "MPI all-reduce" ;; ring) echo "ring all-reduce" ;;
				shm) echo "shared-memory all-reduce" ;; esac)
			case $out in
			*"mpi, $want, wire $wire"*) ;;
			*) fail "$alg, $np ranks: not the $want: $(head -n 1 <<<"$out")" ;;
			esac
			runs=$((runs + 1))
		done
	done
done
[ -f "$FAKE_GPU" ] || fail "no $FAKE_GPU (make check builds it)"
for aware in 0 1; do
	for wire in fp32 fp16 bf16; do
		out=$(DDPTRAIN_CUDA_MODULE=$FAKE_GPU DDPTRAIN_MPI_CUDA_AWARE=$aware timeout -k 5 60 \
			mpirun --oversubscribe -np 2 "$COLLCHECK" --wire="$wire" --device=fake 2>&1) ||
			fail "device memory, CUDA-aware $aware, $wire: $out"
		case $out in
		*"# collcheck: ok: 0 wrong values over 2 ranks"*) ;;
		*) fail "device memory, CUDA-aware $aware, $wire: no verdict: $out" ;;
		esac
		runs=$((runs + 1))
	done
done
echo "collectives: $runs runs ok (mpi, ring, shm at 2-4 ranks and 1 rank; fp32, fp16, bf16; device memory at 2)"
