#!/bin/bash
# scripts/gpu-check.sh, the one call on a GPU machine, tried here: its library finding
# and glibc check against a simulated layout -- NCCL only inside a Python environment's
# nvidia package, deeper than a fixed-depth search reaches, none under the CUDA toolkit --
# and a glibc too old for the unpacked Debian packages (defect 12 of issue 12); the trace
# row's NVTX check on good and broken logs; then the whole script, small, against the fake
# GPU module: every feature row ok against the CPU, the table complete (issue 21).
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

# 5. The trace row's NVTX check (tests/lib/nvtx-record.so's logs against the trace file):
#    balanced and nested ranges, one forward range per forward span; each way of being
#    wrong named.
printf '{"name":"forward layer 0","ph":"X"},{"name":"forward layer 1","ph":"X"}\n' >"$TMPD/t.json"
good="7 push load|7 pop|7 push forward|7 pop|7 push forward|7 pop|7 push allreduce bucket 0|7 pop|7 push wait|7 push allreduce bucket 1|7 pop|7 pop"
nvtx() { # NAME WANT(ok|SUBSTRING) EVENTS ('|' between them)
	echo "$3" | tr '|' '\n' >"$TMPD/nvtx.1"
	if out=$("$GC" --check-nvtx "$TMPD/t.json" "$TMPD/nvtx.1"); then
		[ "$2" = ok ] || fail "--check-nvtx $1: passed: $out"
	else
		[ "$2" != ok ] && echo "$out" | grep -qF -- "$2" || fail "--check-nvtx $1: $out"
	fi
}
nvtx "good log" ok "$good"
out=$(echo "$good" | tr '|' '\n' >"$TMPD/nvtx.1"; "$GC" --check-nvtx "$TMPD/t.json" "$TMPD/nvtx.1")
[ "$out" = "6 ranges balanced, depth 2, 2 forward = the trace's spans, 2 all-reduces" ] || fail "--check-nvtx figures: $out"
nvtx "a pop too many" "thread 7: a pop without its push" "$good|7 pop"
nvtx "a range left open" "thread 7: 1 range(s) never closed" "7 push load|$good"
nvtx "a forward span without its range" "1 forward ranges, 2 forward spans in the trace" "${good/7 push forward|7 pop|/}"
nvtx "no all-reduce" "no all-reduce range" "7 push forward|7 pop|7 push forward|7 pop"
nvtx "the all-reduce not in the wait" "no all-reduce range nested in the wait: [backward > allreduce bucket N]" "7 push forward|7 pop|7 push forward|7 pop|7 push backward|7 push allreduce bucket 0|7 pop|7 pop"
nvtx "nothing recorded" "no NVTX range recorded" ""

# 6. The whole check against the fake GPU module, at tiny sizes: every feature row ok
#    against the CPU, the timing rows ok, PyTorch's skipped with the reason where this
#    machine has no torch with CUDA (it has none), the trace row skipped with the reason
#    (the fake has no device clock and no NVTX).
FAKE=$FAKE_GPU
[ -f "$FAKE" ] || skip "no $FAKE for the dry run (the library and NVTX checks passed)"
rc=0
env -u GPUCHECK_GLIBC -u GPUCHECK_GLIBC_WANT GPUCHECK_MODULE=$FAKE GPUCHECK_SMALL=1 GPUCHECK_NGPU=2 \
	GPUCHECK_BUILD=$(cd "$(dirname "$DDPTRAIN")/.." && pwd) timeout 400 "$GC" >"$TMPD/out" 2>&1 || rc=$?
[ $rc -eq 0 ] || fail "dry run exited $rc: $(tail -40 "$TMPD/out")"
for r in "backend ops vs CPU, small and large" "ddp SGD, constant lr, validation (graphs)" \
	"ddp AdamW, cosine, clip, xent, frozen, validation" "ddp SGD Nesterov, linear warm-up, clipping, MSE" \
	"ddp --grad-accum=3, AdamW set" "ddp 2 ranks on GPU 0 (auto: mpi), AdamW, accum 3" \
	"-np 2 on one GPU: auto takes mpi, with a notice" "-np 2 --backend=nccl on one GPU refused" \
	"ddp 2 ranks on 2 GPUs (auto: nccl), AdamW set" "dp on 2 GPU(s), AdamW set" \
	"dp on 2 GPU(s), Nesterov set, --grad-accum=3" "checkpoints written on the GPU vs CPU's" \
	"stop at step 20, --resume with graphs = straight" "dp stop at step 20, --resume (AdamW set) = straight" \
	"cuBLAS SGEMM, the 64x5 step's shapes" \
	"ToyModel 10,10,5 batch 20, 1 rank, eager: ddptrain" "ToyModel 10,10,5 batch 20, 1 rank, graphs: ddptrain" \
	"64x5 batch 32, 1 rank, eager: ddptrain" "64x5 batch 32, 1 rank, graphs: ddptrain" \
	"dp 32x4, replica 0" "dp 32x4, replica 1"; do
	grep -q -- "^$r.* ok " "$TMPD/out" || fail "dry run: no ok row '$r': $(tail -40 "$TMPD/out")"
done
# Every feature row compared the metrics records too, eval records where there was validation.
[ "$(grep -c ' ok .*tolerance 1e-05; [0-9]* steps (worst loss error [^)]*), [0-9]* evals' "$TMPD/out")" -eq 8 ] ||
	fail "dry run: want 8 rows comparing weights and metrics: $(grep tolerance "$TMPD/out")"
grep -q "^--trace: CUDA-event spans, NVTX ranges nested *skip *the stand-in module fake-gpu.so has no device clock" "$TMPD/out" ||
	fail "dry run: trace row: $(grep -- '^--trace' "$TMPD/out")"
if python3 -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
	echo "torch with CUDA here: its rows are not checked"
else
	[ "$(grep -c '^.*: PyTorch  *skip  *no torch\|^.*: PyTorch  *skip  *torch .*is_available() is False' "$TMPD/out")" -eq 4 ] ||
		fail "dry run: want 4 PyTorch rows skipped with the reason: $(grep PyTorch "$TMPD/out")"
fi
grep -q "^# 23 passed, 0 failed, 5 skipped" "$TMPD/out" || fail "dry run: $(tail -3 "$TMPD/out")"
echo "gpu-check: ok (library finding, glibc, the NVTX check, dry run with the fake module: $(tail -1 "$TMPD/out" | cut -c3-))"
