#!/bin/bash
# Synthetic data made where it is used (issue 29): on a device the backend's synth op
# makes each batch in device memory from its sample indices, and only the indices cross;
# the weights are bit-identical to the CPU path's, whose loader threads make the same
# bytes on the host. Checked on the fake GPU (tests/lib/fake_gpu.c: the op queued and run
# as the CUDA module's is, its indices' pinned buffer guarded like a copy's), which
# counts the floats copied to the device and the rows the op made.
. "$(dirname "$0")/../lib/setup.sh"

[ -f "$FAKE_GPU" ] || skip "no $FAKE_GPU (make check builds it)"
cd "$TMPD"
W="--layers=12,40,30,6 --samples=96 --batch-size=8 --epochs=2 --seed=3 --quiet"
stat() { cat stats.* | awk -v k="$1" '$1 == k { s += $2 } END { print s + 0 }'; }
fake() { DDPTRAIN_CUDA_MODULE=$FAKE_GPU DDPT_FAKE_STATS=$TMPD "$@"; }

# 1. The same weights, CPU and device, ddp at 1 and 2 ranks (with graphs), labels, dp.
for np in 1 2; do
	run_mpi $np $W --device=cpu --save=cpu$np.st || fail "cpu np=$np"
	rm -f stats.*
	fake run_mpi $np $W --device=cuda --save=dev$np.st 2>err || fail "device np=$np: $(cat err)"
	[ ! -s err ] || fail "device np=$np: stderr: $(cat err)"
	"$STCOMPARE" --exact cpu$np.st dev$np.st || fail "np=$np: device-made data trained differently"
	# 24 micro-batches of 8 over np ranks: every row made on the device
	[ "$(stat synth_rows)" -eq $((96 * 2)) ] || fail "np=$np: the synth op made $(stat synth_rows) rows, want 192"
	[ $np = 1 ] && synth_h2d=$(stat h2d_floats) # the weights and the stop flags, no data
done
X="$W --loss=cross-entropy --optimizer=adamw"
run_mpi 2 $X --device=cpu --save=cpux.st || fail "cpu labels"
fake run_mpi 2 $X --device=cuda --save=devx.st || fail "device labels"
"$STCOMPARE" --exact cpux.st devx.st || fail "labels made on the device trained differently"
"$DDPTRAIN" --mode=dp --replicas=2 $W --device=cpu --save=dpc.st || fail "dp cpu"
rm -f stats.*
fake "$DDPTRAIN" --mode=dp --replicas=2 $W --device=cuda --save=dpd.st || fail "dp device"
"$STCOMPARE" --exact dpc.st dpd.st || fail "dp: device-made data trained differently"
[ "$(stat synth_rows)" -ge 192 ] || fail "dp: the synth op made $(stat synth_rows) rows"

# 2. No synthetic row crossed: the same run fed from files copies exactly its 2 epochs of
#    96 rows of 12 inputs and 6 targets more than the synthetic one (all else is the same).
"$MKNPY" x.npy 96 12 f4 5 1
"$MKNPY" y.npy 96 6 f4 6 1
rm -f stats.*
fake run_mpi 1 $W --inputs=x.npy --targets=y.npy --device=cuda --save=devf.st || fail "device files"
[ "$(stat synth_rows)" -eq 0 ] || fail "files: the synth op ran"
[ $(($(stat h2d_floats) - synth_h2d)) -eq $((2 * 96 * 18)) ] ||
	fail "files copied $(stat h2d_floats) floats, synthetic $synth_h2d: want a difference of $((2 * 96 * 18))"

# 3. The op itself, the device's against the CPU's, bit for bit (opcheck's synth rows).
DDPTRAIN_CUDA_MODULE=$FAKE_GPU "$OPCHECK" >out || true
[ "$(grep -c '^synth .* identical ok$' out)" -eq 3 ] || fail "opcheck synth rows: $(grep '^synth' out)"
echo "synth-device: CPU and device data identical (ddp 1, 2 ranks, labels, dp); $(grep -c '^synth' out) opcheck rows identical"
