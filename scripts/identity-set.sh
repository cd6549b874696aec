#!/bin/bash
# identity-set.sh - a fixed set of short runs, each saving its fp32 weights, plus --help:
# the proof that a restructuring changed nothing. Run it on the commit before the change
# and after it, then compare the two folders byte for byte.
#
#   scripts/identity-set.sh OUT            run the set with the build tree's src/ddptrain
#   scripts/identity-set.sh --compare A B  cmp every file of A with B's; exit 1 if any differ
#
# The set covers ddp at 1 to 4 ranks; the mpi, ring and shared-memory all-reduces at 2 and
# 3 ranks with small buckets; ZeRO-1 and ZeRO-2 (SGD and AdamW, clipping, grad-accum), ZeRO-2
# in row panels; the fp16 and bf16 wires with and without ZeRO-1; the trainer's features
# with and without --no-overlap; Nesterov; the fake GPU (graphs, ZeRO-2, the bf16 wire,
# staged MPI) and the stub CUDA module where they were built; dp on the CPU and the fake
# GPU; a CPU resume and a fake-GPU resume with graphs. DDPTRAIN overrides the binary.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)

if [ "${1:-}" = --compare ]; then
	[ $# -eq 3 ] || { echo "usage: $0 --compare A B" >&2; exit 2; }
	bad=0 n=0
	for f in "$2"/*; do
		n=$((n + 1))
		cmp -s "$f" "$3/$(basename "$f")" || { echo "differs: $(basename "$f")"; bad=$((bad + 1)); }
	done
	for f in "$3"/*; do
		[ -e "$2/$(basename "$f")" ] || { echo "only in $3: $(basename "$f")"; bad=$((bad + 1)); }
	done
	echo "identity-set: $((n - bad)) of $n files identical"
	[ "$bad" -eq 0 ]
	exit
fi
[ $# -eq 1 ] || { echo "usage: $0 OUT | --compare A B" >&2; exit 2; }
mkdir -p "$1"
out=$(cd "$1" && pwd)
D=${DDPTRAIN:-$top/src/ddptrain}
FAKE=$top/tests/lib/fake-gpu.so
STUB=$top/tests/lib/cuda-stub.so
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 OMPI_MCA_plm_rsh_agent=/bin/false
export OMPI_MCA_btl_vader_single_copy_mechanism=none
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

# one NAME NP ARGS...: NP ranks (dp: one process) save $out/NAME.st
one() {
	local name=$1 np=$2
	shift 2
	if [ "$np" = dp ]; then
		"$D" --mode=dp "$@" --quiet --save="$out/$name.st"
	else
		mpirun --oversubscribe -np "$np" "$D" "$@" --quiet --save="$out/$name.st"
	fi
}

"$D" --help >"$out/help.txt"
T0="--samples=240 --epochs=2 --batch-size=16 --seed=3 --lr=0.01"
T="$T0 --momentum=0.9"
W="--layers=12,40,24,6 $T"
WA="--layers=12,40,24,6 $T0 --optimizer=adamw"
for np in 1 2 3 4; do one ddp$np $np $T; done
for alg in mpi ring shm; do
	for np in 2 3; do DDPTRAIN_ALLREDUCE=$alg one $alg$np $np $W --bucket-mb=0.001; done
done
for z in 1 2; do
	for np in 2 3; do
		one zero$z-sgd$np $np $W --zero=$z --clip-grad-norm=0.5 --grad-accum=2
		one zero$z-adamw$np $np $WA --zero=$z --lr=0.003 --clip-grad-norm=0.5
	done
done
one zero2-panels 2 --layers=64,256,128,8 $T --zero=2 --bucket-mb=0.05
for wire in bf16 fp16; do
	one wire-$wire 3 $W --grad-compress=$wire
	one wire-$wire-zero1 3 $W --grad-compress=$wire --zero=1
done
F="--layers=8,16,16,4 --loss=cross-entropy --samples=240 --val-samples=50 --epochs=2 --seed=5
   --batch-size=6 --optimizer=adamw --lr=0.01 --lr-schedule=cosine --warmup-steps=3
   --clip-grad-norm=0.5 --freeze=2 --eval-every=7 --grad-accum=2"
# shellcheck disable=SC2086
one features 2 $F
# shellcheck disable=SC2086
one features-nooverlap 2 $F --no-overlap
one nesterov 2 $W --nesterov
one dp-cpu dp $W --replicas=3 --device=cpu
one resume-cpu-a 2 $W --max-steps=5 --checkpoint="$work/ck.st"
one resume-cpu 2 $W --resume="$work/ck.st"
if [ -f "$FAKE" ]; then
	export DDPTRAIN_CUDA_MODULE=$FAKE
	one fake1 1 $W --device=cuda
	one fake2 2 $W --device=cuda
	one fake-zero2 2 $W --device=cuda --zero=2 --bucket-mb=0.001
	one fake-bf16 2 $W --device=cuda --grad-compress=bf16
	one fake-staged 2 $W --device=cuda --backend=mpi
	one fake-dp dp $W --replicas=2 --device=cuda
	one fake-resume-a 2 $W --device=cuda --max-steps=6 --checkpoint="$work/fk.st"
	one fake-resume 2 $W --device=cuda --resume="$work/fk.st"
	unset DDPTRAIN_CUDA_MODULE
fi
if [ -f "$STUB" ]; then
	DDPTRAIN_CUDA_MODULE=$STUB one stub2 2 $W --device=cuda
fi
echo "identity-set: $(find "$out" -type f | wc -l) files in $out"
