#!/bin/bash
# The real CUDA module's own rules and numbers without a GPU: src/cuda's objects, as the
# module is built from them, linked against the stub CUDA runtime, cuBLAS and NCCL of
# tests/lib/cuda_stub.h (tests/lib/cuda-stub.so). They check how the module uses them --
# the ordering of every operation across its streams (a race is named), what it does
# inside a capture, its teardown order, its collectives, an access past the end of an
# allocation -- and compute what it asks: its own kernels compiled for the host and run
# over their grids, cuBLAS's SGEMM through the CPU's BLAS, NCCL's sums. So training runs
# must keep every rule and end with the CPU's weights within 1e-6, every backend
# operation must agree with the CPU's (opcheck), each rule broken on purpose through the
# module's ABI (tests/lib/gpurules.c) must be named, and a failing CUDA, cuBLAS or NCCL
# call must end the run with exit 1 and one line naming it. One and two ranks, and dp on
# two stub GPUs; tests/gpu/cuda-stub-fixed.sh keeps the defects it found fixed.
. "$(dirname "$0")/../lib/setup.sh"

STUB=$TESTS_BUILDDIR/lib/cuda-stub.so
[ -f "$STUB" ] || skip "no $STUB (it is built with the CUDA toolkit: ./configure found none)"
export DDPTRAIN_CUDA_MODULE=$STUB
cd "$TMPD"

clean() { # ARGS...: one rank (or "dp" first: --mode=dp, one process; or "np=N" first: N
	   # ranks), exit 0, nothing on stderr
	local rc=0 np=1
	case $1 in np=*) np=${1#np=}; shift ;; esac
	if [ "$1" = dp ]; then
		shift
		timeout -k 5 120 "$DDPTRAIN" --mode=dp --replicas=2 "$@" --device=cuda >out 2>err || rc=$?
	else
		run_mpi $np "$@" --device=cuda >out 2>err || rc=$?
	fi
	[ $rc -eq 0 ] && [ ! -s err ] || fail "$* (exit $rc): $(head -3 err)"
}
close() { "$STCOMPARE" "$1" "$2" 1e-6 >/dev/null || fail "$3: $("$STCOMPARE" "$1" "$2" 1e-6)"; }
same() { # 1|2|dp ARGS...: clean under the stub, and its weights = the CPU's within 1e-6
	local how=$1
	shift
	if [ "$how" = dp ]; then
		"$DDPTRAIN" --mode=dp --replicas=2 "$@" --device=cpu --save=cpu.st >/dev/null || fail "cpu dp $*"
		clean dp "$@" --save=stub.st
	else
		run_mpi "$how" "$@" --device=cpu --save=cpu.st >/dev/null || fail "cpu np=$how $*"
		clean np="$how" "$@" --save=stub.st
	fi
	close stub.st cpu.st "$how $* under the stub vs CPU"
	echo "$how $*: $("$STCOMPARE" stub.st cpu.st 1e-6)"
	nsame=$((nsame + 1))
}
nsame=0

# 0. Every backend operation, at small sizes and at the large ones of every launch path,
#    agrees with the CPU backend within 1e-6 (tests/lib/opcheck.c: the kernels' grid-
#    stride loops over 4096 blocks, the reductions' two passes, the products' three
#    shapes, clipping, AdamW).
"$TESTS_BUILDDIR/lib/opcheck" >oc 2>&1 || fail "opcheck under the stub: $(grep -vE ' ok$' oc | head -5)"
echo "opcheck: $(tail -1 oc)"
#    And --precision=bf16's kernels (the bf16 roundings, the weight gradients' scale after
#    them), within one bf16 unit of the CPU's.
"$TESTS_BUILDDIR/lib/opcheck" --bf16 >oc 2>&1 || fail "opcheck --bf16 under the stub: $(grep -vE ' ok$' oc | head -5)"
echo "opcheck --bf16: $(tail -1 oc)"

# 1. Training that keeps every rule and computes what the CPU does: ddp with graphs
#    (captured on steps 2 and 3, then replayed with their data; the teardown with graphs
#    that hold a collective) at 1 and 2 ranks, eagerly, with every trainer feature,
#    gradient accumulation, a checkpoint and --resume with graphs, --trace (the module's
#    device clock), ZeRO-1/2 and the 16-bit wire, and dp on two GPUs (copies between
#    devices): each ends with the CPU's weights within 1e-6.
C="--samples=240 --batch-size=20 --epochs=2 --seed=7 --lr=0.01 --momentum=0.9 --quiet"
F="--layers=8,16,16,4 --loss=cross-entropy --samples=240 --val-samples=50 --epochs=2 --seed=5
   --batch-size=6 --clip-grad-norm=0.5 --freeze=2 --eval-every=7 --quiet"
same 1 $C
grep -q "CUDA graphs off" out && fail "graphs were turned off: $(grep 'graphs off' out)"
cp cpu.st cpu-C.st
same 2 $C
DDPTRAIN_CUDA_GRAPHS=0 same 1 $C
same 1 $F --optimizer=adamw --lr=0.01 --lr-schedule=cosine --warmup-steps=4
same 2 $F --lr=0.05 --momentum=0.9
same 2 $C --grad-accum=3
clean $C --max-steps=5 --checkpoint=ck.st
clean $C --resume=ck.st --save=resumed.st
close resumed.st cpu-C.st "resumed under the stub vs the CPU's straight run"
clean $C --trace=trace.json --max-steps=4
# --zero=2 with layers in row panels (linear_grad_rows into two reused buffers, each
# reused only after its reduce-scatter: a race otherwise), over NCCL and staged MPI, and
# --zero=1, with and without the bf16 wire (the module's narrowing and widening kernels)
Z="$C --layers=10,200,30,5 --bucket-mb=0.0001"
same 2 $Z --zero=2
same 2 $Z --zero=2 --grad-compress=bf16 --backend=mpi
same 2 $Z --zero=1 --grad-compress=bf16
same 2 $C --grad-compress=fp16
same dp $C
same dp $F --lr=0.05 --momentum=0.9
# --precision=bf16: cublasGemmEx on bf16 operand scratch, grown in the eager first step
# (never inside a capture), with graphs, validation, grad-accum, row panels and dp: the
# module's conversion kernels and the stub's GemmEx against the CPU's bf16 arithmetic
same 2 $F --lr=0.05 --momentum=0.9 --grad-accum=2 --precision=bf16
same 2 $Z --zero=2 --precision=bf16
same dp $C --precision=bf16
echo "training keeps every rule and equals the CPU within 1e-6 ($nsame runs): ddp with graphs at 1 and 2 ranks and eager, AdamW, schedules, cross-entropy, clipping, frozen layer, validation, grad-accum, resume, trace, --zero=1/2 in row panels, bf16 and fp16 wire, dp on 2 GPUs, --precision=bf16"

# 1b. No host wait inside a step on the real module (issue 29), its NCCL observer (the
#     bucket table, --trace) included: a long eager run waits (DDPT_STUB_STATS's
#     host_waits: every synchronisation, blocking copy or memset, free) no more than a
#     short one. The observer read each step's timing events waiting for them, and for
#     the communication stream: 2 waits per eager step.
stub_waits() { DDPT_STUB_STATS=$PWD host_waits "clean np=2" "$@"; } # STEPS ARGS...: eager, then graphs
W="--layers=10,40,40,5 --bucket-mb=0.001 --clip-grad-norm=1"
short=$(stub_waits 10 $W)
long=$(stub_waits 30 $W)
[ "$short" = "$long" ] || fail "host waits grow with the steps under the stub: 10 steps (eager, graphs): $short; 30 steps: $long"
echo "no host wait in an ordinary step on the real module: $long host waits in 10 and in 30 steps (eager, graphs; 2 buckets and the clipping norm, observed)"
# The same with the device behind the host (DDPT_STUB_LAG: a query of work the host does
# not know is done answers "not ready" once): the observer tells each span a step or more
# late, its time through the chain of references, and waits no more; every step's
# all-reduce of each bucket reaches the bucket table: the bucket travels with the span
# (struct comm_tag; found by the span's index among the collectives since the last wait,
# a span told after the clipping norm's all-reduce had begun lost it: 28 of 30 counted).
lag=$(DDPT_STUB_LAG=1 stub_waits 30 $W)
[ "$lag" = "$long" ] || fail "host waits with the device behind: $lag in 30 steps, against $long"
DDPT_STUB_LAG=1 DDPTRAIN_CUDA_GRAPHS=0 clean np=2 --samples=4000 --batch-size=20 --max-steps=30 $W
counts=$(sed -n '/^# bucket  layers/,/^# step time/p' out | awk '$1 == "#" && $2 ~ /^[0-9]+$/ { print $5 }' | tr '\n' ' ')
[ "$counts" = "30 30 " ] || fail "bucket all-reduces counted with the device behind: $counts, not 30 30: $(cat out)"
echo "with the device behind the host: $lag host waits in 30 steps; each bucket's 30 all-reduces counted"

# 2. Each rule, broken on purpose through the module's ABI: named (the stub's line or the
#    module's error), exit status not 0. (Section 1's runs check the teardown of an
#    ordinary run: a stream destroyed under a live communicator, or anything left
#    undestroyed at exit after the module tore down, is a rule there.) The module keeps its own teardown in order --
#    graphs destroyed before the communicator, the communicator's stream waited for
#    before destroy -- so a caller that leaves a graph or an all-reduce behind is no
#    breach (graph-outlives-comm, destroy-in-flight).
for s in clean graph-outlives-comm destroy-in-flight; do
	expect_clean 1 $s
done
expect_rule 1 alloc-in-capture "cuda-stub: rule: cudaMalloc while this thread captures"
expect_rule 1 free-in-capture "cuda-stub: rule: cudaFree while this thread captures"
expect_rule 1 host-alloc-in-capture "cuda-stub: rule: cudaHostAlloc while this thread captures"
expect_rule 1 host-free-in-capture "cuda-stub: rule: cudaFreeHost while this thread captures"
expect_rule 1 sync-in-capture "cuda-stub: rule: cudaStreamQuery on stream 0 while it captures"
expect_rule 1 legacy-stream-in-capture "cuda-stub: rule: cudaMalloc while this thread captures"
expect_rule 1 unjoined-capture "cuda-stub: rule: cudaStreamEndCapture on stream 0: stream 1 joined the capture"
expect_rule 2 count-mismatch "cuda-stub: rule: collective 3 (an all-reduce) has 6[45] elements here, and between 64 and 65"
expect_rule 2 order-mismatch "cuda-stub: rule: collective 3 is .* here and another kind on another rank"
expect_rule 2 graph-eager-mix "cuda-stub: rule: collective 3: replayed from a CUDA graph on some ranks and issued eagerly"
# The pinned-buffer rule (the fake's, on the stub's clocks): the loader refills a batch
# buffer after waiting on a mark recorded before the buffer's copy.
expect_rule 1 mark-before-copy "cuda-stub: rule: pinned host buffer .* was rewritten before the host waited for an event or synchronisation covering that copy"
# A 16-bit collective larger in a capture than in the eager step before it: its wire
# buffer would grow (cudaMalloc) inside the capture; the module refuses it by name (and
# without that check the stub names the allocation in the capture).
expect_rule 2 wire-regrow-in-capture "wire buffer (32 values) must grow to 64 inside a CUDA graph capture\|cuda-stub: rule: cudaMalloc while this thread captures"
# Bounds: a kernel one element past its allocation's end (the guard page after every
# block), named with the kernel, its thread and the index; an SGEMM whose operand runs
# past its allocation, named with the operand.
expect_rule 1 kernel-past-end "cuda-stub: rule: k_relu, block (0,0,0) thread (32,0,0): an access past the end of its 128-byte device block: byte 128 from its start (float index 32, valid 0 to 31)"
expect_rule 1 sgemm-past-end "cuda-stub: rule: cublasSgemm: B (8 x 5 stored, leading dimension 8: 160 bytes from .*) runs past the end of its device allocation"
echo "rules: each broken on purpose is named (14 scenarios); clean, and the module's own teardown, pass"

# 2b. The sharded and compressed collectives (issue 22) of the real comm_nccl.c: the stub
#     NCCL moves and sums eagerly issued collectives' data (in the collective's type) and
#     the stub runtime runs the 16-bit wire's conversion kernels, so gpurules checks them
#     against closed forms -- reduce-scatter and all-gather over equal parts
#     (ncclReduceScatter, ncclAllGather in place), uneven and empty parts (grouped
#     ncclReduce, ncclBroadcast), wait_first, at 1, 2 and 4 ranks; the fp16 and bf16
#     all-reduce and reduce-scatter at 2 ranks, exactly round16(round16(a) + round16(b)).
#     A read that wait_first did not order is a race the stub names; a reduce-scatter
#     whose recvbuff is not NCCL's in-place offset is named (ncclReduceScatter called
#     directly through the stub's own symbol). sharded-graph captures a 16-bit
#     reduce-scatter, an uneven all-gather and wait_first into a graph and replays it
#     (the capture's rules; a replay moves no data in the stub).
for np in 1 2; do
	expect_clean $np collectives
done
DDPT_STUB_GPUS=4 expect_clean 4 collectives
expect_clean 2 wire-fp16
expect_clean 2 wire-bf16
expect_clean 2 sharded-graph
expect_rule 2 wait-first-short "cuda-stub: rule: cudaMemcpyAsync(device to host) on stream [0-9]* (device [0-9]*) and ncclBroadcast on stream [0-9]* touch the same memory"
expect_rule 2 nccl-inplace-offset "cuda-stub: rule: ncclReduceScatter on rank 1: .* not NCCL's in-place placement (in place is recvbuff == sendbuff + rank \* recvcount, an offset of 12 bytes; here 20)"
# A collective call that fails (each rank's same call): the module returns NCCL's error,
# with the call as written, for the equal parts' own collectives and the grouped uneven ones.
for f in "ncclReduceScatter:ncclReduceScatter(.*) failed" "ncclReduce:ncclReduce(.*) failed" \
	"ncclAllGather:ncclAllGather(.*) failed" "ncclBroadcast:2:ncclBroadcast(.*) failed"; do
	DDPT_STUB_FAIL=${f%:*} expect_rule 2 collectives "gpurules: collectives: ${f##*:}: unhandled cuda error"
done
echo "collectives: reduce-scatter, all-gather (equal, uneven, empty parts) and wait_first at 1, 2, 4 ranks, fp16 and bf16 wire: exact; captured and replayed clean; a short wait_first, a wrong in-place offset and 4 failing calls are named"

# 3. Error returns: a call that fails ends the run with exit 1 and one line naming it
#    (DDPT_STUB_FAIL=CALL:N fails CALL's N-th call), or, inside a capture, turns graphs off
#    with the reason and the run goes on eagerly.
K="$C --checkpoint=f.st --checkpoint-every=1 --keep-checkpoints=100 --timeout=10 --device=cuda"
last_ckpt() { ls f.st.step-* 2>/dev/null | tail -1 | sed 's/.*step-0*//'; }
fails() { # CALL[:N] WANT ARGS...
	local f=$1 want=$2
	shift 2
	rm -f f.st*
	echo "DDPT_STUB_FAIL=$f"
	DDPT_STUB_FAIL=$f expect_fail 1 "$want" 1 "$@"
}
fails cudaMalloc:1 "GPU 0: cudaMalloc(" $K
fails cudaMalloc:4 "model: out of cuda memory" $K
fails cudaMemsetAsync:3 "model: out of cuda memory" $K
fails cudaStreamCreate:1 "GPU 0: cudaStreamCreateWithFlags(" $K
fails cudaHostAlloc:1 "loader: out of host memory" $K
fails ncclCommInitRank "ncclCommInitRank(&c->comm, size, u, rank) failed: unhandled system error" $K
fails cublasSgemm:2 "GPU 0: cublasSgemm(forward) failed: execution failed" $K
fails launch:3 "too many resources requested for launch" $K
fails ncclAllReduce:1 "ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, c->comm, c->stream) failed: unhandled cuda error" $K
fails ncclAsyncError:1 "NCCL all-reduce failed: unhandled system error" $K
# A copy that fails (the device is lost: a sticky error; the 20th copy, counting the
# checkpoints' reads, is in step 4): exit 1, and no checkpoint of that step. (The
# messages are matched without the module's file and line, which move with its code.)
fails cudaMemcpyAsync:20 "an illegal memory access was encountered" $K
grep -q "cudaMemcpyAsync" "$TMPD/stderr" || fail "copy failure: the call is not named: $(cat "$TMPD/stderr")"
[ "$(last_ckpt)" = 3 ] || fail "copy failure: last checkpoint at step $(last_ckpt), want 3"
# A graph launch that fails (step 4, the first replay after the two captures): the run
# ends there; before, cuda_graph_launch could drop the error and train on.
fails cudaGraphLaunch:3 "GPU 0: cudaGraphLaunch(" $K
[ "$(last_ckpt)" = 3 ] || fail "graph launch failure: last checkpoint at step $(last_ckpt), want 3"
# A capture that cannot be instantiated: graphs off with the reason, eager to the end.
rc=0
DDPT_STUB_FAIL=cudaGraphInstantiate:1 run_mpi 1 ${C/--quiet/} --device=cuda >out 2>err || rc=$?
[ $rc -eq 0 ] && [ ! -s err ] || fail "failed instantiation (exit $rc): $(head -3 err)"
grep -q "^# CUDA graphs off from step 2: a capture failed: CUDA graph capture: invalid argument" out ||
	fail "no notice of the failed capture: $(grep -i graph out)"
echo "error returns: 13 failing calls each end the run with exit 1 and its line; a failed instantiation turns graphs off"
# A rank whose device fails on its own while another waits on its device for a collective
# that will never complete (rank 0's second all-reduce never does, as with a peer gone;
# rank 1's 8th copy fails, in step 3): the failed rank tells the others as it goes to
# agree, rank 0's wait hears it, aborts its communicator and agrees, and every rank ends
# at once with rank 1's line alone. Before: rank 0 waited out --timeout, then printed a
# second line saying it had been computing.
t0=$SECONDS
DDPT_STUB_HANG=2@0 DDPT_STUB_FAIL=cudaMemcpyAsync:8@1 expect_fail 1 "rank 1: " 2 $C --device=cuda --timeout=30
grep -q "an illegal memory access was encountered" "$TMPD/stderr" ||
	fail "a device error on rank 1 alone: not its line: $(cat "$TMPD/stderr")"
echo "a device error on rank 1 while rank 0 waits for a collective: one line, every rank exit 1 in $((SECONDS - t0)) s (--timeout=30)"
echo "cuda-stub: ok"
