#!/bin/bash
# The GPU path's logic without a GPU: ddptrain drives the fake GPU module
# (tests/lib/fake_gpu.c), which runs the CUDA module's ABI on the CPU and enforces
# CUDA's and NCCL's rules (a broken rule is an error "fake-gpu: rule: ..."), at 1,
# 2 and 4 ranks: CUDA graphs, gradient accumulation, resume, dp, the MPI paths
# for device memory, the trainer's features against the CPU path, every injected
# fault, the teardown, and each rule broken on purpose (tests/lib/gpurules.c). The
# defects of issues 12 and 21 each name the check that guards them.
. "$(dirname "$0")/../lib/setup.sh"

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

# 1. ddp with CUDA graphs (steps 2, 3 and 4 captured, one per loader buffer, the rest replayed) equals the CPU path;
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

# 1b. No host wait inside a step (issue 29): an ordinary step's slots are read at the end
#     of the next step, and the loader asks whether its copies ran before it waits, so a
#     long run waits (DDPT_FAKE_STATS's host_waits: every synchronisation, blocking copy
#     and event wait) no more than a short one: the set-up, the last step and the end, each
#     counted. Evaluation and checkpoint steps read at once: each costs its waits.
waits() { host_waits "clean_run 2" "$@"; } # STEPS ARGS...: eager, then with graphs
short=$(waits 20 --device=cuda)
long=$(waits 60 --device=cuda)
[ "$short" = "$long" ] || fail "host waits grow with the steps: 20 steps (eager, graphs): $short; 60 steps: $long"
ckpt=$(waits 60 --device=cuda --checkpoint=hw.st --checkpoint-every=10)
for i in 1 2; do
	[ "$(echo $ckpt | cut -d' ' -f$i)" -ge $(($(echo $long | cut -d' ' -f$i) + 6)) ] ||
		fail "6 checkpoint steps did not read at once: $ckpt host waits against $long without"
done
echo "no host wait in an ordinary step: $long host waits in 20 and in 60 steps (eager, graphs); with 6 checkpoints $ckpt"

# 1c. Speed accounting (issue 29): the per-rank table and --metrics give the TFLOP/s of the
#     products and a GPU's peak device memory; 64 -> 256 -> 64 on 64 rows does
#     2 x 64 x (64 x 256 + 256 x 64) FLOP forward, as many for the weight gradients and
#     2 x 64 x 256 x 64 for layer 2's input gradient: 10,485,760 a step. The CPU has no
#     device column.
SA="--layers=64,256,64 --batch-size=64 --max-steps=3"
run_mpi 1 $SA --device=cuda --metrics=sa.jsonl >sa.out || fail "speed accounting run"
/usr/bin/python3 - sa.jsonl <<'PYEOF' || fail "speed accounting: --metrics"
import json, sys
s = [json.loads(l) for l in open(sys.argv[1]) if '"summary"' in l][0]
r = s["per_replica"][0]
assert r["flops_per_step"] == 10485760, r
assert r["tflops"] > 0 and s["tflops_per_rank"] > 0, (r, s["tflops_per_rank"])
assert r["device_peak_bytes"] > 0, r
PYEOF
awk '/^# +rank +compute / { for (i = 2; i <= NF; i++) { if ($i == "TFLOP/s") t = i; if ($i == "dev_MiB") m = i }; next }
	t && /^# +0 / { ok = $t > 0 && $m > 0; t = 0 } END { exit !ok }' sa.out || fail "speed accounting: the per-rank table: $(grep -A2 '^# ddp per rank:' sa.out)"
run_mpi 1 $SA --device=cpu >sa.out || fail "speed accounting on the CPU"
grep -A2 '^# ddp per rank:' sa.out | tail -1 | grep -Eq ' [0-9.]+ +-$' || fail "CPU: no '-' for device memory: $(grep -A2 '^# ddp per rank:' sa.out)"
echo "speed accounting: TFLOP/s and peak device MiB in the table and --metrics (10,485,760 FLOP a step of 64,256,64 on 64 rows)"

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
# (pinned copies per rank: each step's sample indices for the synth op, and its stop
# flag: the 9th is step 5's indices)
DDPT_FAKE_COPY_ERROR=9 expect_fail 1 "cudaMemcpyAsync failed: an illegal memory access" 4 $C --device=cuda $K
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
# The replica's own error, with its name (defect 6 of issue 12): before issue 21 the
# fake's host_wait drained every queue, so the loader's wait found the error first and
# printed it without "replica 1:"; a dp that checked replica 0 only still passed.
[ $rc -eq 1 ] && [ "$(wc -l <err)" -eq 1 ] && grep -q "^ddptrain: replica 1: GPU 1: cudaMemcpyAsync failed" err ||
	fail "dp replica 1 error: exit $rc: $(cat err)"
[ "$(last_ckpt)" = 1 ] || fail "dp error in step 2: last checkpoint at step $(last_ckpt)"
# Out of device memory (cudaMalloc) on one rank, at the model's first allocation: every
# rank exits 1 at once with that rank's line.
DDPT_FAKE_ALLOC_FAIL=1@1 expect_fail 1 "rank 1: model: out of cuda memory" 2 $C --device=cuda --timeout=30
# A kernel launch that fails (every rank's 36th, in step 3, counted below): exit 1
# naming the kernel, no checkpoint of that step; in dp on replica 1 only, named with the
# replica.
rm -f f.st*
# (9 launches per step, the synth op's first, and before each step's checkpoint the
# replica check's 8, one per tensor: the 36th is step 3's first after its data)
DDPTRAIN_CUDA_GRAPHS=0 DDPT_FAKE_LAUNCH_FAIL=36 expect_fail 1 "failed: too many resources requested for launch (fake-gpu fault" 2 $C --device=cuda $K
[ "$(last_ckpt)" = 2 ] || fail "launch failure in step 3: last checkpoint at step $(last_ckpt)"
rc=0
DDPT_FAKE_LAUNCH_FAIL=30@1 timeout 60 "$DDPTRAIN" --mode=dp --replicas=2 $C --device=cuda 2>err || rc=$?
[ $rc -eq 1 ] && [ "$(wc -l <err)" -eq 1 ] && grep -q "^ddptrain: replica 1: GPU 1: .* failed: too many resources" err ||
	fail "dp replica 1 launch failure: exit $rc: $(cat err)"
echo "faults: async comm error, copy error, launch failure, out of device memory, NCCL init on one rank, dp replica 1: exit 1, one line"

# 8. The trainer's features on the GPU path against the CPU path, in one run each: AdamW
#    with a cosine schedule and warm-up, cross-entropy, clipping, a frozen layer and
#    validation every 7 steps, at 1, 2 and 4 ranks and in dp: the weights, every step's
#    loss, accuracy and rate, and every eval record agree. AdamW's scalars and a
#    scheduled rate change every step, so such steps must not be graphs: a graph would
#    replay the captured step's values. SGD with a schedule likewise; SGD at a constant
#    rate with the same features runs as graphs, and agrees too.
F="--layers=8,16,16,4 --loss=cross-entropy --samples=240 --val-samples=50 --epochs=2 --seed=5
   --batch-size=6 --clip-grad-norm=0.5 --freeze=2 --eval-every=7 --log-every=1 --quiet"
ADAMW="$F --optimizer=adamw --lr=0.01 --betas=0.8,0.99 --weight-decay=0.05 --lr-schedule=cosine --warmup-steps=4"
SCHED="$F --lr=0.05 --momentum=0.9 --lr-schedule=linear --warmup-steps=3"
CONST="$F --lr=0.05 --momentum=0.9"
# agree NAME NP|dp ARGS...: the fake GPU run equals the CPU run; prints the graph launches.
agree() {
	local name=$1 np=$2
	shift 2
	rm -f stats.* ref.jsonl
	if [ "$np" = dp ]; then
		"$DDPTRAIN" --mode=dp --replicas=2 "$@" --device=cpu --save=fc.st --metrics=fc.jsonl || fail "$name: CPU"
		"$DDPTRAIN" --mode=dp --replicas=2 "$@" --device=cuda --save=fg.st --metrics=fg.jsonl 2>err ||
			fail "$name: $(cat err)"
		[ ! -s err ] || fail "$name: stderr: $(cat err)"
	else
		run_mpi "$np" "$@" --device=cpu --save=fc.st --metrics=fc.jsonl || fail "$name: CPU"
		clean_run "$np" "$@" --device=cuda --save=fg.st --metrics=fg.jsonl
	fi
	close fg.st fc.st "$name: weights"
	grep -E '"type":"(step|eval)"' fc.jsonl >ref.jsonl
	grep -q '"type":"eval"' ref.jsonl || fail "$name: no eval records"
	"$METCOMPARE" fg.jsonl ref.jsonl 1e-6 >mc || fail "$name: $(cat mc)"
}
for np in 1 2 4 dp; do
	agree "AdamW + cosine, np=$np" $np $ADAMW
	[ "$(replays)" -eq 0 ] || fail "AdamW np=$np: $(replays) graph launches, want none"
done
agree "SGD + linear schedule, np=2" 2 $SCHED
[ "$(replays)" -eq 0 ] || fail "SGD with a schedule: $(replays) graph launches, want none"
agree "SGD constant, graphs, np=2" 2 $CONST
[ "$(replays)" -gt 0 ] || fail "SGD at a constant rate: no graph launches"
agree "SGD constant, dp" dp $CONST
echo "AdamW, cosine and linear schedules, cross-entropy, clipping, frozen layer, validation: = CPU at 1, 2, 4 ranks and dp; graphs only where a step is fixed"

# 9. Each rule, broken on purpose through the module's ABI (tests/lib/gpurules.c): named,
#    exit status not 0; the scenario that keeps them all is clean.
rules() { expect_rule "$1" "$2" "fake-gpu: rule: .*$3"; }
expect_clean 1 clean
expect_clean 2 clean
rules 1 alloc-in-capture "cudaMalloc on device 0 inside a stream capture"
rules 1 free-in-capture "cudaFree on device 0 inside a stream capture"
rules 1 host-alloc-in-capture "cudaHostAlloc on device 0 inside a stream capture"
rules 1 host-free-in-capture "cudaFreeHost on device 0 inside a stream capture"
rules 1 sync-in-capture "cudaStreamSynchronize on device 0 inside a stream capture"
rules 1 legacy-stream-in-capture "legacy default stream) while a stream capture is in progress"
rules 1 unjoined-capture "cudaErrorStreamCaptureUnjoined"
rules 1 mark-before-copy "was rewritten while its copy to device 0 was still queued"
rules 2 count-mismatch "has 6[45] floats here, and between 64 and 65 across ranks"
rules 2 order-mismatch "matches collectives by their order"
rules 2 graph-eager-mix "replayed from a CUDA graph on some ranks and issued eagerly on others"
rules 1 comm-after-destroy "ncclAllReduce on a communicator that was destroyed"
rules 1 destroy-in-flight "ncclCommDestroy with work in flight"
rules 1 graph-outlives-comm "ncclCommDestroy while a CUDA graph holding its all-reduce still exists"
rules 1 backend-before-comm "destroyed while its communicator still uses it"
echo "rules: each broken on purpose is named (15 scenarios); the clean one passes at 1 and 2 ranks"

# 9b. The sharded and compressed collectives (issue 22) through the module's ABI, against
#     closed forms: reduce-scatter and all-gather over equal parts, uneven parts and an
#     empty part, and wait_first, at 1, 2, 3 and 4 ranks; the 16-bit wire at 2 ranks
#     (every element round16(round16(a) + round16(b))); reading a collective that
#     wait_first did not cover gives stale data (the fake runs only what was waited for);
#     a 16-bit reduce-scatter, all-gather and wait_first captured into a graph give the
#     eager results on each replay.
for np in 1 2 3 4; do
	expect_clean $np collectives
done
expect_clean 2 wire-fp16
expect_clean 2 wire-bf16
expect_clean 1 sharded-graph
expect_clean 2 sharded-graph
expect_rule 2 wait-first-short "all-gather read after wait_first(1), before wait_all: element [0-9]* is -7"
echo "reduce-scatter, all-gather (equal, uneven, empty parts), wait_first at 1-4 ranks, fp16 and bf16 wire: exact, eager and replayed from a graph"

# 10. The backend operations at sizes that take every launch path (tests/lib/opcheck.c)
#     run on the fake as on a GPU, and agree with the CPU.
"$OPCHECK" >out || fail "opcheck on the fake: $(grep -E 'FAIL|opcheck' out | head -3)"
echo "opcheck: $(tail -1 out)"

# 11. ZeRO and the 16-bit wire on the fake GPUs: NCCL's reduce-scatter and all-gather and
#     MPI's staged ones end with the CPU's weights bit for bit (the same sums in the same
#     order at 2 ranks), and the wire is used (bf16 is not the float32 run). --zero=2
#     computes the first two layers (264 and 600 floats, over the 262 of the cap) in row
#     panels: bit for bit where this BLAS computes a row panel as it computes those rows
#     of the whole product, else within PANELS (setup.sh's blas_panels).
blas_panels
Z="${C/--momentum=0.9/--optimizer=adamw} --layers=10,24,24,5 --bucket-mb=0.001"
run_mpi 2 $Z --device=cpu --save=z-cpu.st || fail "cpu adamw"
run_mpi 2 $Z --device=cpu --grad-compress=bf16 --save=zb-cpu.st || fail "cpu bf16"
for be in nccl mpi; do
	for z in 1 2; do
		tol=exact
		[ $z = 2 ] && tol=$PANELS
		clean_run 2 $Z --device=cuda --backend=$be --zero=$z --save=z.st
		out=$(stcompare_tol $tol z.st z-cpu.st) || fail "$be --zero=$z vs CPU, $tol: $out"
		echo "$be --zero=$z vs CPU: $out"
		clean_run 2 $Z --device=cuda --backend=$be --zero=$z --grad-compress=bf16 --save=zb.st
		out=$(stcompare_tol $tol zb.st zb-cpu.st) || fail "$be --zero=$z bf16 vs CPU, $tol: $out"
		echo "$be --zero=$z bf16 vs CPU: $out"
	done
done
! "$STCOMPARE" --exact zb-cpu.st z-cpu.st >/dev/null || fail "--grad-compress=bf16 changed nothing"
echo "--zero=1/2 with and without bf16 on nccl and staged mpi = CPU: --zero=1 bit for bit, --zero=2 $([ "$PANELS" = exact ] && echo bit for bit || echo within "$PANELS")"
# ... and --zero=2 with layers in more row panels (146 a micro-batch) than collectives may
#     be in flight, its gradient memory (shard and two buffers) smaller than the parameters
#     that staged MPI all-gathers: the backend's row panels (linear_grad_rows) on the fake.
P="--samples=120 --epochs=2 --seed=3 --lr=0.05 --layers=10,200,30,5 --bucket-mb=0.0001 --optimizer=adamw --quiet"
run_mpi 2 $P --device=cpu --save=p-cpu.st || fail "cpu, row panels"
for be in nccl mpi; do
	clean_run 2 $P --device=cuda --backend=$be --zero=2 --save=p.st
	out=$(stcompare_tol "$PANELS" p.st p-cpu.st) || fail "$be --zero=2 in row panels vs CPU, $PANELS: $out"
	echo "$be --zero=2 in 146 row panels vs CPU: $out"
done
echo "fake-gpu: ok"
