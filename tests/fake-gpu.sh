#!/bin/bash
# The GPU path's logic without a GPU: ddptrain drives the fake GPU module
# (tests/lib/fake_gpu.c), which runs the CUDA module's ABI on the CPU and enforces
# CUDA's and NCCL's rules (a broken rule is an error "fake-gpu: rule: ..."), at 1,
# 2 and 4 ranks: CUDA graphs, gradient accumulation, resume, dp, the MPI paths
# for device memory, every injected fault, and the teardown. The defects of issue
# 12 each name the check that guards them.
. "$(dirname "$0")/lib/setup.sh"

FAKE=$FAKE_GPU
[ -f "$FAKE" ] || skip "no $FAKE (make check builds it)"
export DDPTRAIN_CUDA_MODULE=$FAKE DDPT_FAKE_STATS=$TMPD
cd "$TMPD"

C="--samples=240 --batch-size=20 --epochs=2 --seed=7 --lr=0.01 --momentum=0.9 --quiet"
close() { "$STCOMPARE" "$1" "$2" 1e-6 >/dev/null || fail "$3: $("$STCOMPARE" "$1" "$2" 1e-6)"; }
clean_run() { # NP ARGS...: exit 0 with nothing on stderr (a broken rule prints there)
	local np=$1
	shift
	run_mpi "$np" "$@" 2>err || fail "np=$np $*: $(cat err)"
	[ ! -s err ] || fail "np=$np $*: stderr: $(cat err)"
}
replays() { cat stats.* | awk '$1 == "replays" { s += $2 } END { print s + 0 }'; }

# 1. ddp with CUDA graphs (steps 2 and 3 captured, the rest replayed) equals the CPU path;
#    exiting with graphs that hold collectives does not trip the teardown rule (defect 1);
#    the step's read behind its all-reduces lands in pinned memory (issue 21).
for np in 1 2 4; do
	run_mpi $np $C --device=cpu --save=cpu$np.st || fail "cpu np=$np"
	rm -f stats.*
	clean_run $np $C --device=cuda --save=fake$np.st
	# 24 steps / np per rank: the first eager, every other one a graph launch
	[ "$(replays)" -eq $((24 - np)) ] || fail "np=$np: $(replays) graph launches, want $((24 - np))"
	close fake$np.st cpu$np.st "np=$np graphs vs CPU"
done
rm -f stats.*
DDPTRAIN_CUDA_GRAPHS=0 clean_run 1 $C --device=cuda --save=eager1.st
[ "$(replays)" -eq 0 ] || fail "DDPTRAIN_CUDA_GRAPHS=0 replayed $(replays) graphs"
close eager1.st cpu1.st "eager (DDPTRAIN_CUDA_GRAPHS=0) vs CPU"
echo "ddp with graphs at 1, 2, 4 ranks = CPU within 1e-6, clean teardown"

# 2. --grad-accum=3: a pinned batch buffer is refilled only after its copy ran (defect 5).
run_mpi 2 $C --grad-accum=3 --device=cpu --save=acc-cpu.st || fail "cpu grad-accum"
clean_run 2 $C --grad-accum=3 --device=cuda --save=acc.st
close acc.st acc-cpu.st "--grad-accum=3 vs CPU"
echo "--grad-accum=3 = CPU"

# 3. A resumed run warms up eagerly before it captures (defect 9), and ends where an
#    uninterrupted run does.
clean_run 2 $C --device=cuda --max-steps=5 --checkpoint=ck.st
clean_run 2 $C --device=cuda --resume=ck.st --save=resumed.st
close resumed.st fake2.st "resumed vs straight"
echo "resume with graphs = straight run"

# 4. dp with 2 replicas on two fake GPUs equals dp on the CPU.
"$DDPTRAIN" --mode=dp --replicas=2 $C --device=cpu --save=dp-cpu.st || fail "dp cpu"
"$DDPTRAIN" --mode=dp --replicas=2 ${C/--quiet/--log-every=0} --device=cuda --save=dp.st >out 2>err ||
	fail "dp fake: $(cat err)"
[ ! -s err ] || fail "dp fake: stderr: $(cat err)"
close dp.st dp-cpu.st "dp on 2 fake GPUs vs CPU"
# Phase times come from timer marks on each replica's stream: forward and backward of
# both replicas are measured (fields 5 and 8 of the "#replica" table), as numbers: awk
# compares "nan" or "inf" with 0 as strings, and "nan" > 0 holds.
awk '/^#replica/ { t = 1; next }
	t && /^# +[01] / { if (!($5 ~ /^[0-9]+\.[0-9]+$/ && $8 ~ /^[0-9]+\.[0-9]+$/ && $5 > 0 && $8 > 0)) bad = 1; n++ }
	END { exit !(n == 2 && !bad) }' out || fail "dp phase times: $(grep -A2 '^#replica' out)"
echo "dp, 2 replicas = CPU; phase times from timer marks"

# 5. Device memory over MPI: staged through pinned memory, or (a CUDA-aware MPI) the last
#    bucket's blocking all-reduce on device memory, the others staged (defect 8).
clean_run 2 $C --device=cuda --backend=mpi --bucket-mb=0.0001 --save=mpi-staged.st
DDPTRAIN_MPI_CUDA_AWARE=1 clean_run 2 $C --device=cuda --backend=mpi --bucket-mb=0.0001 --save=mpi-aware.st
close mpi-staged.st cpu2.st "--backend=mpi staged vs CPU"
close mpi-aware.st cpu2.st "--backend=mpi CUDA-aware vs CPU"
echo "--backend=mpi on device memory, staged and CUDA-aware = CPU"

# 6. A capture that fails on one rank only: every rank drops its graphs (defect 2).
rm -f stats.*
DDPT_FAKE_CAPTURE_FAIL=1 run_mpi 2 ${C/--quiet/} --device=cuda --save=nocap.st >out 2>err || fail "capture failure on rank 1: $(cat err)"
[ ! -s err ] || fail "capture failure on rank 1: stderr: $(cat err)"
grep -q "^# CUDA graphs off from step 2: a capture failed on another rank" out || fail "no notice: $(grep graph out)"
[ "$(replays)" -eq 0 ] || fail "graphs replayed after a failed capture ($(replays))"
close nocap.st cpu2.st "eager after a failed capture vs CPU"
echo "capture failed on rank 1: all ranks eager, = CPU"

# 7. Faults: exit 1 on every rank with one line, promptly, and no checkpoint from the
#    failed step or after it (defect 3); a rank failing before the NCCL init (defect 4);
#    an error on dp's replica 1 (defect 6).
K="--checkpoint=f.st --checkpoint-every=1 --keep-checkpoints=100 --timeout=10"
last_ckpt() { ls f.st.step-* 2>/dev/null | tail -1 | sed 's/.*step-0*//'; }
rm -f f.st*
DDPT_FAKE_COMM_ERROR=5 expect_fail 1 "NCCL all-reduce failed: unhandled system error" 2 $C --device=cuda $K
[ "$(last_ckpt)" = 4 ] || fail "comm error at step 5: last checkpoint at step $(last_ckpt)"
rm -f f.st*
DDPT_FAKE_COPY_ERROR=13 expect_fail 1 "cudaMemcpyAsync failed: an illegal memory access" 4 $C --device=cuda $K
[ "$(last_ckpt)" = 4 ] || fail "copy error in step 5: last checkpoint at step $(last_ckpt)"
DDPT_FAKE_INIT_FAIL=1 expect_fail 1 "rank 1: nccl: stream and event set-up failed" 2 $C --device=cuda --timeout=10
# A device error on one rank only: the others wait in the all-reduce for it, and the
# failing rank's own reason is printed, not only a timeout.
rc=0
DDPT_FAKE_COPY_ERROR=7@1 timeout 60 mpirun --oversubscribe -np 2 "$DDPTRAIN" $C --device=cuda --timeout=3 2>err || rc=$?
[ $rc -ne 0 ] && grep -q "rank 1: .*GPU 1: cudaMemcpyAsync failed: an illegal memory access" err ||
	fail "device error on rank 1 only: exit $rc, its reason not printed: $(cat err)"
# One rank out of pinned memory while the other is fine: in the trainer's set-up (its first
# host_alloc) and in the last evaluation (its batches are the run's last two host_allocs,
# counted by a clean run): every rank ends at once with that rank's message, none waits
# for --timeout (expect_fail allows 20 s; the timeout is 30).
V="--samples=80 --batch-size=20 --epochs=1 --val-samples=40 --quiet --device=cuda --timeout=30"
rm -f stats.*
clean_run 2 $V
n=$(awk '$1 == "host_allocs" { print $2 }' stats.1)
DDPT_FAKE_HOST_ALLOC_FAIL=1@1 expect_fail 1 "rank 1: loader: out of host memory" 2 $V
DDPT_FAKE_HOST_ALLOC_FAIL=$((n - 1))@1 expect_fail 1 "rank 1: evaluation: out of host memory" 2 $V
rm -f f.st*
rc=0
DDPT_FAKE_COPY_ERROR=2@1 timeout 60 "$DDPTRAIN" --mode=dp --replicas=2 $C --device=cuda $K 2>err || rc=$?
[ $rc -eq 1 ] && [ "$(wc -l <err)" -eq 1 ] && grep -q "GPU 1: cudaMemcpyAsync failed" err ||
	fail "dp replica 1 error: exit $rc: $(cat err)"
[ "$(last_ckpt)" = 1 ] || fail "dp error in step 2: last checkpoint at step $(last_ckpt)"
echo "faults: async comm error, copy error, NCCL init on one rank, dp replica 1: exit 1, one line"
echo "fake-gpu: ok"
