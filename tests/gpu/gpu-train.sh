#!/bin/bash
# Training on GPUs against the CPU (needs an NVIDIA GPU; SKIP otherwise):
# every backend operation, 1 rank GPU vs CPU, 2 ranks sharing a GPU over MPI,
# NCCL, and dp on every visible GPU, each within 1e-5 of the CPU run; NCCL's
# reduce-scatter, all-gather and 16-bit wire against closed forms.
. "$(dirname "$0")/../lib/setup.sh"

MODULE=$(dirname "$DDPTRAIN")/ddptrain-cuda.so
[ -f "$MODULE" ] || skip "built without CUDA"
n=$(ls /proc/driver/nvidia/gpus 2>/dev/null | wc -l)
[ "$n" -gt 0 ] || skip "no NVIDIA GPU on this machine (scripts/gpu-check.sh runs these checks on one)"
DDPTRAIN_CUDA_MODULE=$MODULE "$OPCHECK" || fail "backend operations differ"
common="--samples=1000 --batch-size=20 --max-steps=50 --seed=7 --lr=0.01 --momentum=0.9 --quiet"
run_mpi 1 $common --device=cpu --save="$TMPD/cpu1.st" || fail "cpu 1 rank"
run_mpi 1 $common --device=cuda --save="$TMPD/gpu1.st" || fail "gpu 1 rank"
"$STCOMPARE" "$TMPD/gpu1.st" "$TMPD/cpu1.st" 1e-5 || fail "1 rank GPU vs CPU"
run_mpi 1 $common --device=cuda --backend=nccl --save="$TMPD/nccl1.st" || fail "nccl 1 rank"
"$STCOMPARE" "$TMPD/nccl1.st" "$TMPD/cpu1.st" 1e-5 || fail "nccl vs CPU"
run_mpi 2 $common --device=cpu --save="$TMPD/cpu2.st" || fail "cpu 2 ranks"
CUDA_VISIBLE_DEVICES=0 run_mpi 2 $common --device=cuda --backend=mpi --save="$TMPD/mpi2.st" || fail "2 ranks on one GPU"
"$STCOMPARE" "$TMPD/mpi2.st" "$TMPD/cpu2.st" 1e-5 || fail "2 ranks sharing a GPU (mpi) vs CPU"
CUDA_VISIBLE_DEVICES=0 run_mpi 2 $common --device=cuda --backend=nccl 2>"$TMPD/err" && fail "NCCL on a shared GPU accepted"
grep -q "use --backend=mpi" "$TMPD/err" || fail "shared-GPU message: $(cat "$TMPD/err")"
"$DDPTRAIN" --mode=dp --replicas="$n" --device=cuda $common --save="$TMPD/dp.st" || fail "dp on $n GPUs"
"$DDPTRAIN" --mode=dp --replicas="$n" --device=cpu $common --save="$TMPD/dpcpu.st" || fail "dp on the CPU"
"$STCOMPARE" "$TMPD/dp.st" "$TMPD/dpcpu.st" 1e-5 || fail "dp GPU vs CPU"
# The sharded and compressed collectives of the real module on the GPU (issue 22), against
# closed forms (tests/lib/gpurules.c): reduce-scatter, all-gather, wait_first, and the
# fp16 and bf16 wire (wire.cu's kernels, NCCL's 16-bit sums), eager and from a CUDA graph,
# on one rank, and on two when
# there are two GPUs (NCCL refuses two ranks on one GPU).
for s in collectives wire-fp16 wire-bf16 sharded-graph; do
	DDPTRAIN_CUDA_MODULE=$MODULE expect_clean 1 $s
	[ "$n" -lt 2 ] || DDPTRAIN_CUDA_MODULE=$MODULE expect_clean 2 $s
done
echo "gpu-train: ok"
