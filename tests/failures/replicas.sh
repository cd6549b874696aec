#!/bin/bash
# --check-replicas (issue 35): a rank computing wrong values is named. tests/lib/faultshim.so
# flips the lowest bit of one weight on the last rank (DDPT_SHIM_FLIP_WEIGHT=K: the first
# element of the weight its K-th layer forward reads, in place), as a bad memory cell or
# a wrong product would. The next check stops the run with exit 1 on every rank and one
# line naming that rank, its host and the first tensor that differs (at 2 ranks no majority
# tells which is wrong: both are named); nothing is written from that state, and the
# checkpoint before it resumes to the straight run's weights. On the CPU, on the fake GPU
# and on the real CUDA module over the stub libraries (its own hash kernels). A clean run
# with a check every step reports nothing and trains the same weights bit for bit as one
# without; ZeRO compares the all-gathered parameters only; --mode=dp refuses an N.
. "$(dirname "$0")/../lib/setup.sh"
cd "$TMPD"

STUB=$TESTS_BUILDDIR/lib/cuda-stub.so
# 2 layers: each step runs 2 layer forwards, so K=5 is step 3's first (net1), K=6 its second
A="--layers=8,16,4 --samples=400 --max-steps=12 --momentum=0.9 --log-every=0"
HOST=$(hostname)

# flip NP K ARGS...: NP ranks, the last (FLIP_FIRST=1: rank 0) with its K-th layer forward's
# weight flipped; every rank must exit 1 (each writes its status into rc.RANK, as
# expect_fail's ranks do) and one line (rank 0's) must say why: in $why.
flip() {
	local np=$1 k=$2 each='"$0" "$@"; echo $? >"rc.$OMPI_COMM_WORLD_RANK"'
	shift 2
	local clean=(-np $((np - 1)) bash -c "$each" "$DDPTRAIN" "$@")
	local bad=(-np 1 bash -c "$each" env LD_PRELOAD="$FAULTSHIM" DDPT_SHIM_FLIP_WEIGHT="$k" "$DDPTRAIN" "$@")
	rm -f rc.*
	if [ "${FLIP_FIRST:-0}" = 1 ]; then
		timeout -k 5 120 mpirun --oversubscribe "${bad[@]}" : "${clean[@]}" >out 2>err || true
	else
		timeout -k 5 120 mpirun --oversubscribe "${clean[@]}" : "${bad[@]}" >out 2>err || true
	fi
	for r in $(seq 0 $((np - 1))); do
		[ "$(cat rc.$r 2>/dev/null)" = 1 ] || fail "flip at $np ranks, K=$k, $*: rank $r exited $(cat rc.$r 2>/dev/null || echo '(none)'), not 1: $(cat err)"
	done
	[ "$(grep -c '^ddptrain' err)" -eq 1 ] || fail "flip at $np ranks, K=$k: not one line: $(grep '^ddptrain' err)"
	why=$(grep '^ddptrain' err)
}
# named WHERE TEXT: the line has TEXT
named() { grep -qF -- "$2" <<<"$why" || fail "$1: want '$2' in: $why"; }

# 1. A clean run checked every step: no mismatch, the same weights bit for bit as without
#    checks; the header says the check is on (not at 1 rank: nothing to compare).
run_mpi 2 $A --check-replicas=1 --save=on.st >on.out || fail "clean run checked every step"
run_mpi 2 $A --check-replicas=0 --save=off.st >off.out || fail "clean run unchecked"
cmp on.st off.st || fail "the check changed the weights"
grep -q "^# replica check: every step and before any weights are written: the parameters and the optimizer state (8 tensors) hashed where they live and compared bit for bit across the 2 ranks$" on.out ||
	fail "header: $(grep 'replica' on.out)"
! grep -q "replica check" off.out || fail "--check-replicas=0 still says: $(grep replica off.out)"
run_mpi 1 $A --check-replicas=1 >one.out || fail "one rank"
! grep -q "replica check" one.out || fail "one rank says: $(grep replica one.out)"
echo "clean: 12 checks, weights identical to an unchecked run's (cmp)"

# 2. The CPU: at 3 ranks the flipped rank alone is named; at 2, both, and the tensor the
#    flip was in (net1 at K=5, net2 at K=6) is the first that differs. No --save is left.
flip 3 5 $A --check-replicas=4 --save=bad.st
named "3 ranks" "replica check after step 4: rank 2 (host $HOST) holds other values than the 2 of 3 ranks that agree, first in net1.weight"
[ ! -e bad.st ] || fail "a --save file was written from replicas that differ"
echo "cpu, 3 ranks: $why"
flip 2 6 $A --check-replicas=4
named "2 ranks" "no majority of the 2 ranks agrees, so which is wrong cannot be told: rank 0 (host $HOST) against rank 1 (host $HOST), first in net2.weight"
echo "cpu, 2 ranks: both named, net2.weight"

# 3. The check comes before each checkpoint: a flip in step 3 of rank 0 (whose weights a
#    checkpoint holds) with checkpoints every 2 steps (and checks every 100) stops at step
#    4 with step 2's checkpoint in place, and resuming it cleanly ends with the straight
#    run's weights (step 4's, written before the check, would hold the flipped bit).
FLIP_FIRST=1 flip 2 5 $A --check-replicas=100 --checkpoint=ck.st --checkpoint-every=2
named "before the checkpoint" "replica check after step 4:"
run_mpi 2 $A --resume=ck.st --save=resumed.st >/dev/null || fail "resuming the checkpoint kept"
cmp resumed.st off.st || fail "the checkpoint kept is not step 2's of the clean run: $("$STCOMPARE" resumed.st off.st)"
echo "checkpoint: the check before step 4's stopped it; step 2's checkpoint resumes to the straight run's weights"

# 4. ZeRO-1 and -2: the all-gathered parameters compared (the optimizer state is each
#    rank's shard), after the all-gathers settle: clean, checked every step.
for z in 1 2; do
	run_mpi 2 $A --zero=$z --check-replicas=1 >z.out || fail "--zero=$z checked every step"
	grep -q "^# replica check: every step and before any weights are written: the parameters (4 tensors) .* 2 ranks; the optimizer state is sharded (each rank's own): not compared$" z.out ||
		fail "--zero=$z header: $(grep replica z.out)"
done
echo "zero 1, 2: parameters compared, optimizer state sharded"
# ZeRO-3 keeps nothing whole: each layer's all-gathered copy is compared (gathered for the
# check), clean at 3 ranks checked every step, and the weights those of an unchecked run.
run_mpi 3 $A --zero=3 --check-replicas=1 --save=z3.st >z.out || fail "--zero=3 checked every step"
grep -q "^# replica check: every step and before any weights are written: each layer's all-gathered parameters (4 tensors) .* 3 ranks; each rank's window of the parameters, gradient shard and optimizer state are its own: not compared$" z.out ||
	fail "--zero=3 header: $(grep replica z.out)"
run_mpi 3 $A --zero=3 --check-replicas=0 --save=z3off.st >/dev/null || fail "--zero=3 unchecked"
cmp z3.st z3off.st || fail "--zero=3 checked every step trains other weights than unchecked"
echo "zero 3: each layer's gathered copy compared, the weights unchanged by the check"

# 5. On devices: the fake GPU module and the real module over the stub libraries, with
#    steps as CUDA graphs; clean with ZeRO-2, and the flipped rank named at 3 ranks.
devices=$FAKE_GPU
[ -f "$STUB" ] && devices="$devices $STUB" || echo "no $STUB (built with the CUDA toolkit): the stub's case not run"
for mod in $devices; do
	export DDPTRAIN_CUDA_MODULE=$mod
	run_mpi 2 $A --device=cuda --zero=2 --check-replicas=1 >dev.out 2>dev.err || fail "$mod: clean --zero=2: $(cat dev.err)"
	[ ! -s dev.err ] || fail "$mod: clean run's stderr: $(cat dev.err)"
	flip 3 5 $A --device=cuda --check-replicas=4
	named "$mod" "replica check after step 4: rank 2 (host $HOST) holds other values than the 2 of 3 ranks that agree, first in net1.weight"
	echo "$(basename "$mod"): clean with --zero=2; 3 ranks: rank 2 named"
done
# A digest one rank cannot make (the fake GPU's 10th launch on device 1: the first of step
# 1's check, after its 9): that rank's error, the other rank waiting for nobody, no
# checkpoint written.
rm -f lf.st
DDPTRAIN_CUDA_MODULE=$FAKE_GPU DDPTRAIN_CUDA_GRAPHS=0 DDPT_FAKE_LAUNCH_FAIL=10@1 \
	expect_fail 1 "rank 1: GPU 1: k_hash64 failed: too many resources requested for launch" 2 \
	$A --device=cuda --check-replicas=1 --checkpoint=lf.st --timeout=30
[ ! -e lf.st ] || fail "a checkpoint was written after a check that failed"
echo "fake-gpu.so: a digest that fails on rank 1: its line, exit 1 everywhere, no checkpoint"
unset DDPTRAIN_CUDA_MODULE

# 6. --mode=dp: its default is left alone, an N refused (one line, exit 2).
expect_fail 2 "--check-replicas applies to --mode=ddp" 1 --mode=dp --check-replicas=5
"$DDPTRAIN" --mode=dp --max-steps=2 --quiet || fail "--mode=dp with the default"
echo "dp: --check-replicas=5 refused, the default runs"
