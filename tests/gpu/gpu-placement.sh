#!/bin/bash
# Two ranks on one GPU (a one-GPU workstation, mpirun -np 2): with --backend=auto they
# train over MPI on the shared GPU, say so in one notice, and end with the CPU run's
# weights; an explicit --backend=nccl is refused there (exit 2 on every rank, one
# line); with a GPU each, auto stays NCCL. Through the fake GPU module; --device=auto
# also sees a simulated NVIDIA driver entry in a mount namespace (SKIP without one).
. "$(dirname "$0")/../lib/setup.sh"

[ -f "$FAKE_GPU" ] || skip "no $FAKE_GPU (make check builds it)"
export DDPTRAIN_CUDA_MODULE=$FAKE_GPU
cd "$TMPD"
C="--samples=240 --batch-size=20 --epochs=2 --seed=7 --lr=0.01 --momentum=0.9 --log-every=0"
NOTICE="# backend auto: mpi, not nccl (node-local ranks 0 and 1 share GPU 0, Fake GPU 0, which NCCL cannot do)"

run_mpi 2 $C --device=cpu --quiet --save=cpu.st || fail "cpu run"
# shared DEVICE: 2 ranks on 1 GPU, backend auto: MPI with the notice, the CPU's weights.
shared() {
	DDPT_FAKE_GPUS=1 run_mpi 2 $C --device="$1" --save="$1.st" >out 2>err || fail "--device=$1, 1 GPU, 2 ranks: $(cat err)"
	[ ! -s err ] || fail "--device=$1: stderr: $(cat err)"
	grep -qxF "$NOTICE" out || fail "--device=$1: no notice: $(head -3 out)"
	[ "$(grep -c 'device GPU 0 of 1 (Fake GPU 0), backend mpi' out)" -eq 2 ] ||
		fail "--device=$1: want both ranks on GPU 0 over MPI: $(grep 'rank   [01]:' out)"
	"$STCOMPARE" "$1.st" cpu.st 1e-6 >/dev/null || fail "--device=$1 on a shared GPU vs CPU: $("$STCOMPARE" "$1.st" cpu.st 1e-6)"
}
shared cuda
echo "--device=cuda, 2 ranks on 1 GPU: backend mpi with a notice, = CPU"

DDPT_FAKE_GPUS=1 expect_fail 2 "--backend=nccl: node-local ranks 0 and 1 would share GPU 0 (Fake GPU 0), which NCCL cannot do; use --backend=mpi (or auto), or start at most 1 rank per node" \
	2 $C --device=cuda --backend=nccl
echo "--backend=nccl on a shared GPU: exit 2 on every rank"

DDPT_FAKE_GPUS=2 run_mpi 2 $C --device=cuda >out 2>err || fail "2 GPUs: $(cat err)"
! grep -q "backend auto" out || fail "2 GPUs: $(grep 'backend auto' out)"
grep -q "rank   1: .*device GPU 1 of 2 (Fake GPU 1), backend nccl" out || fail "2 GPUs: $(grep 'rank   1:' out)"
echo "a GPU per rank: auto is nccl"

# --device=auto finds GPUs in /proc/driver/nvidia/gpus: one entry, in a private mount.
unshare -m sh -c 'mount -t tmpfs none /proc/driver' 2>/dev/null ||
	skip "no mount namespace here to show --device=auto a GPU (the --device=cuda checks passed)"
run_mpi() { # as setup.sh's, inside a namespace whose driver lists one GPU
	local np=$1
	shift
	unshare -m sh -c 'mount -t tmpfs none /proc/driver && mkdir -p /proc/driver/nvidia/gpus/0000:01:00.0 && exec "$@"' \
		sh timeout -k 5 120 mpirun --oversubscribe -np "$np" "$DDPTRAIN" "$@"
}
shared auto
echo "--device=auto, 2 ranks on 1 GPU: backend mpi with a notice, = CPU"
echo "gpu-placement: ok"
