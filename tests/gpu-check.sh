#!/bin/bash
# scripts/gpu-check.sh, the one call on a GPU machine, tried here: its library finding
# and glibc check against a simulated layout -- NCCL only inside a Python environment's
# nvidia package, deeper than a fixed-depth search reaches, none under the CUDA toolkit --
# and a glibc too old for the unpacked Debian packages (defect 12 of issue 12); then the
# whole script, small, against the fake GPU module: every row ok, the table complete.
. "$(dirname "$0")/lib/setup.sh"

GC=$TOP_SRCDIR/scripts/gpu-check.sh
R=$TMPD/root
SP=$R/opt/conda/envs/train/lib/python3.12/site-packages
mkdir -p "$SP/nvidia/nccl/lib" "$SP/nvidia/cublas/lib" "$R/usr/local/cuda/lib64"
touch "$SP/nvidia/nccl/lib/libnccl.so.2" "$SP/nvidia/cublas/lib/libcublas.so.13" \
	"$R/usr/local/cuda/lib64/libcudart.so.13"
[ -z "$(find "$R" -maxdepth 8 -type d -path '*site-packages/nvidia/*/lib')" ] ||
	fail "the layout is not deeper than the old -maxdepth 8 search"
export GPUCHECK_GLIBC=2.36 GPUCHECK_GLIBC_WANT=2.36

# 1. python3 says where its nvidia package is (no search needed).
out=$(GPUCHECK_SEARCH_ROOT=$TMPD/nothing-here PYTHONPATH=$SP "$GC" --find-libs libnccl.so.2 libcublas.so.13) ||
	fail "python3 asked: $out"
echo "$out" | grep -qxF "libnccl.so.2 => $SP/nvidia/nccl/lib (python3's nvidia package)" || fail "python3 asked: $out"
echo "$out" | grep -qxF "libcublas.so.13 => $SP/nvidia/cublas/lib (python3's nvidia package)" || fail "python3 asked: $out"

# 2. A python3 that does not know (another interpreter): the deep search finds it.
out=$(GPUCHECK_SEARCH_ROOT=$R GPUCHECK_PYTHON=false "$GC" --find-libs libnccl.so.2 libcudart.so.13) ||
	fail "tree searched: $out"
echo "$out" | grep -qxF "libnccl.so.2 => $SP/nvidia/nccl/lib (search under $R)" || fail "tree searched: $out"
echo "$out" | grep -qxF "libcudart.so.13 => $R/usr/local/cuda/lib64 (search under $R)" || fail "tree searched: $out"

# 3. Nowhere: "not found", exit 1.
rc=0; out=$(GPUCHECK_SEARCH_ROOT=$R GPUCHECK_PYTHON=false "$GC" --find-libs libnccl.so.3) || rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -qxF "libnccl.so.3 => not found" || fail "missing library ($rc): $out"

# 4. glibc: older than the packages need is refused with the reason; newer is fine.
rc=0; out=$(GPUCHECK_GLIBC=2.31 GPUCHECK_SEARCH_ROOT=$R "$GC" --find-libs) || rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "^glibc 2.31 here, but the unpacked Debian packages need 2.36 or newer" ||
	fail "old glibc ($rc): $out"
out=$(GPUCHECK_GLIBC=2.39 "$GC" --find-libs) && echo "$out" | grep -qx "glibc 2.39 (packages need 2.36)" ||
	fail "newer glibc: $out"

# 5. The whole check against the fake GPU module, at tiny sizes.
FAKE=$FAKE_GPU
[ -f "$FAKE" ] || skip "no $FAKE for the dry run (the library checks passed)"
rc=0
env -u GPUCHECK_GLIBC -u GPUCHECK_GLIBC_WANT GPUCHECK_MODULE=$FAKE GPUCHECK_SMALL=1 GPUCHECK_NGPU=2 \
	GPUCHECK_BUILD=$(cd "$(dirname "$DDPTRAIN")/.." && pwd) timeout 240 "$GC" >"$TMPD/out" 2>&1 || rc=$?
[ $rc -eq 0 ] || fail "dry run exited $rc: $(tail -20 "$TMPD/out")"
for r in "backend ops vs CPU" "1 rank GPU vs CPU" "-np 2 --backend=nccl on one GPU refused" \
	"dp on 2 GPU(s) vs CPU dp" "-np 1 nccl with CUDA graphs vs CPU" "ToyModel, 1 rank, us per step, eager" \
	"ToyModel, 1 rank, us per step, graphs" \
	"64x5 batch 32, 1 rank" "dp 32x4, replica 0" "dp 32x4, replica 1"; do
	grep -q -- "^$r.* ok " "$TMPD/out" || fail "dry run: no ok row '$r': $(tail -20 "$TMPD/out")"
done
grep -q "^# 1[0-9] passed, 0 failed" "$TMPD/out" || fail "dry run: $(tail -3 "$TMPD/out")"
echo "gpu-check: ok (library finding, glibc, dry run with the fake module)"
