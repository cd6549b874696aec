#!/bin/bash
# The CUDA module, checked without a GPU: ddptrain itself links no CUDA library,
# a CPU run never loads one, the module loads and maps CUDA's errors into one
# clear line, and --device=cuda without a usable GPU fails with exit 1.
. "$(dirname "$0")/../lib/setup.sh"

MODULE=$(dirname "$DDPTRAIN")/ddptrain-cuda.so
! ldd "$DDPTRAIN" | grep -Eq 'libcudart|libcublas|libnccl' || fail "ddptrain links CUDA libraries"
[ -f "$MODULE" ] || skip "built without CUDA (no $MODULE)"
ldd "$MODULE" | grep -q 'libcublas' || fail "the module does not link cuBLAS"
ldd "$MODULE" | grep -q 'libnccl' || fail "the module does not link NCCL"
! ldd "$MODULE" | grep -q 'libcuda\.so' || fail "the module links the driver library (-lcuda)"
! ldd "$MODULE" | grep -q 'not found' || fail "the module's libraries are not found: $(ldd "$MODULE" | grep 'not found')"
# The C++ runtime that nvcc's objects use is linked by name, not found by luck through
# cuBLAS or NCCL (defect 11 of issue 12).
if nm -D --undefined-only "$MODULE" | grep -Eq '__gxx_personality|__cxa_'; then
	readelf -d "$MODULE" | grep -q 'NEEDED.*libstdc++' || fail "the module uses the C++ runtime but does not link libstdc++"
fi

# A CPU run loads none of them (LD_DEBUG lists every library the loader opens).
LD_DEBUG=libs run_mpi 1 --device=cpu --max-steps=2 --quiet 2>"$TMPD/ld" || fail "CPU run"
! grep -Eq 'libcudart|libcublas|libnccl' "$TMPD/ld" || fail "a --device=cpu run loaded CUDA libraries"
CUDA_VISIBLE_DEVICES= LD_DEBUG=libs run_mpi 1 --max-steps=2 >"$TMPD/out" 2>"$TMPD/ld" || fail "auto run"
! grep -Eq 'libcudart|libcublas|libnccl' "$TMPD/ld" || fail "--device=auto with no GPU loaded CUDA libraries"
grep -q "^# device auto: CPU (no GPU visible)" "$TMPD/out" || fail "no fallback notice: $(head -3 "$TMPD/out")"

if gpus=$(ls /proc/driver/nvidia/gpus 2>/dev/null) && [ -n "$gpus" ]; then
	echo "GPU present: the GPU tests are tests/gpu/gpu-train.sh and scripts/gpu-check.sh"
else
	# Without a driver the module loads, and the runtime's answer becomes one line, exit 1.
	for np in 1 2; do
		run_mpi $np --device=cuda >"$TMPD/out" 2>"$TMPD/err" && fail "--device=cuda ran without a GPU"
		[ "$(grep -c '^ddptrain' "$TMPD/err")" -eq 1 ] || fail "np=$np: $(cat "$TMPD/err")"
		grep -q "^ddptrain: --device=cuda: no usable GPU: .*cudaGetDeviceCount: " "$TMPD/err" ||
			fail "np=$np message: $(cat "$TMPD/err")"
	done
	msg=$(grep '^ddptrain' "$TMPD/err")
	DDPTRAIN_CUDA_MODULE=/nonexistent.so run_mpi 1 --device=cuda 2>"$TMPD/err" && fail "missing module accepted"
	grep -q "cannot load the CUDA module (DDPTRAIN_CUDA_MODULE): /nonexistent.so" "$TMPD/err" ||
		fail "missing module message: $(cat "$TMPD/err")"
	rc=0
	DDPTRAIN_CUDA_MODULE=$MODULE "$OPCHECK" >"$TMPD/op" || rc=$?
	[ $rc -eq 77 ] || fail "opcheck without a GPU exited $rc"
	echo "no GPU here: $msg"
fi
echo "gpu-module: ok"
