#!/bin/bash
# scripts/gpu-check.sh, the one call on a GPU machine, tried here: its library finding
# and glibc check against a simulated layout -- NCCL only inside a Python environment's
# nvidia package, deeper than a fixed-depth search reaches, none under the CUDA toolkit --
# and a glibc too old for the unpacked Debian packages (defect 12 of issue 12); the trace
# row's NVTX check on good and broken logs; scripts/torch_ddp_bench.py's arguments (issue
# 29's --batches, --precision and the one-rank --graphs), and what it says without torch;
# then the whole script, small, against the fake GPU module and a stand-in
# compute-sanitizer: every feature row ok against the CPU, the table complete (issue 21),
# issue 29's rows each there with ok or skip and the reason, targets said met or missed.
. "$(dirname "$0")/../lib/setup.sh"

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

# 6. torch_ddp_bench.py's arguments are checked before it needs torch: a bad combination is
#    a usage error (exit 2) naming the flag; a good one without torch says so (exit 1).
TB=$TOP_SRCDIR/scripts/torch_ddp_bench.py
PYT=${PYTHON:-python3}
if command -v "$PYT" >/dev/null; then
	bad() { # WANT ARGS...: exit 2 and WANT in the message
		local want=$1 rc=0
		shift
		out=$("$PYT" "$TB" "$@" 2>&1) || rc=$?
		[ $rc -eq 2 ] && echo "$out" | grep -qF -- "$want" || fail "torch_ddp_bench.py $* ($rc): $out"
	}
	bad "--graphs needs --device=cuda" --graphs
	bad "--batches=pinned needs --device=cuda" --batches=pinned
	bad "--precision=tf32 needs --device=cuda" --precision=tf32
	bad "invalid choice: 'fp8'" --device=cuda --precision=fp8
	bad "invalid choice: 'paged'" --device=cuda --batches=paged
	bad "no communication hook: drop --hook=bf16" --device=cuda --graphs --hook=bf16
	OMPI_COMM_WORLD_SIZE=2 bad "--graphs times one rank" --device=cuda --graphs
	"$PYT" "$TB" --help | grep -q -- "--precision {fp32,tf32,bf16}" || fail "torch_ddp_bench.py --help: no --precision"
	if ! "$PYT" -c 'import torch' 2>/dev/null; then
		for args in "--device=cuda --graphs --precision=bf16 --batches=pinned" "--precision=bf16" ""; do
			rc=0
			# shellcheck disable=SC2086 # $args is a list of flags
			out=$("$PYT" "$TB" $args 2>&1) || rc=$?
			[ $rc -eq 1 ] && [ "$(echo "$out" | wc -l)" -eq 1 ] && echo "$out" | grep -q "^torch_ddp_bench.py: no PyTorch for .*: install torch" ||
				fail "torch_ddp_bench.py $args without torch ($rc): $out"
		done
		echo "torch_ddp_bench.py: arguments checked; without torch: '$out'"
	fi
fi

# 7. The whole check against the fake GPU module, at tiny sizes: every feature row ok
#    against the CPU, the timing rows ok, PyTorch's skipped with the reason where this
#    machine has no torch with CUDA (it has none), the trace row skipped with the reason
#    (the fake has no device clock and no NVTX). A stand-in compute-sanitizer checks its
#    command line and runs ddptrain under it: it finds a race in racecheck's run, so that
#    row, and only it, fails, naming the race.
FAKE=$FAKE_GPU
[ -f "$FAKE" ] || skip "no $FAKE for the dry run (the library and NVTX checks passed)"
cat >"$TMPD/compute-sanitizer" <<'EOF'
#!/bin/bash
tool="" api="" code=""
while [ $# -gt 0 ]; do
	case $1 in
	--tool) tool=$2 ;;
	--report-api-errors) api=$2 ;;
	--error-exitcode) code=$2 ;;
	*) break ;;
	esac
	shift 2
done
[ "$api" = no ] && [ -n "$code" ] && [ -n "$tool" ] || { echo "stand-in: want --tool, --error-exitcode and --report-api-errors no"; exit 3; }
echo "========= COMPUTE-SANITIZER"
"$@" >"$SANLOG.$tool" 2>&1 || exit $?
if [ "$tool" = racecheck ]; then
	echo "========= Error: Race reported between Write access at block_sum+0x90 and Read access at block_sum+0x120"
	echo "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)"
	echo "========= ERROR SUMMARY: 1 error"
	exit "$code"
fi
echo "========= ERROR SUMMARY: 0 errors"
EOF
chmod +x "$TMPD/compute-sanitizer"
rc=0
env -u GPUCHECK_GLIBC -u GPUCHECK_GLIBC_WANT GPUCHECK_MODULE=$FAKE GPUCHECK_SMALL=1 GPUCHECK_NGPU=2 \
	GPUCHECK_SANITIZER="$TMPD/compute-sanitizer" SANLOG="$TMPD/san" \
	GPUCHECK_BUILD=$(cd "$(dirname "$DDPTRAIN")/.." && pwd) timeout 400 "$GC" >"$TMPD/out" 2>&1 || rc=$?
[ $rc -eq 1 ] || fail "dry run exited $rc, not 1 (the planted race): $(tail -40 "$TMPD/out")"
[ "$(grep -c '^[^#].* FAIL ' "$TMPD/out")" -eq 1 ] ||
	fail "dry run: want the racecheck row alone to fail: $(grep ' FAIL ' "$TMPD/out")"
grep -q "^compute-sanitizer racecheck, NCCL run with graphs *FAIL *exit 9, ERROR SUMMARY: 1 error: ========= Error: Race reported between" \
	"$TMPD/out" || fail "dry run: racecheck row: $(grep -- '^compute-sanitizer racecheck' "$TMPD/out")"
for t in memcheck synccheck initcheck; do
	grep -q "^compute-sanitizer $t, NCCL run with graphs *ok *0 errors over 6 steps$" "$TMPD/out" ||
		fail "dry run: $t row: $(grep -- "^compute-sanitizer $t" "$TMPD/out")"
	grep -q "^# summary: mode=ddp replicas=1 steps=6 " "$TMPD/san.$t" || fail "dry run: ddptrain under the stand-in $t: $(tail -3 "$TMPD/san.$t")"
done
if "$DDPTRAIN" --help | grep -q -- --precision=; then prec=1; else prec=""; fi
for r in "backend ops vs CPU, small and large" "ddp SGD, constant lr, validation (graphs)" \
	"ddp AdamW, cosine, clip, xent, frozen, validation" "ddp SGD Nesterov, linear warm-up, clipping, MSE" \
	"ddp --grad-accum=3, AdamW set" "ddp 2 ranks on GPU 0 (auto: mpi), AdamW, accum 3" \
	"-np 2 on one GPU: auto takes mpi, with a notice" "-np 2 --backend=nccl on one GPU refused" \
	"ddp 2 ranks on 2 GPUs (auto: nccl), AdamW set" "dp on 2 GPU(s), AdamW set" \
	"dp on 2 GPU(s), Nesterov set, --grad-accum=3" \
	"ddp --zero=1, 1 rank (NCCL), AdamW set" "ddp --zero=2, 1 rank (NCCL), AdamW set" \
	"ddp --zero=2, 2 ranks on GPU 0 (MPI, staged), AdamW" "ddp --zero=2, 2 ranks on 2 GPUs (NCCL), AdamW set" \
	"ddp --grad-compress=bf16, 1 rank (NCCL), SGD clip 1" "ddp --grad-compress=bf16, 2 ranks on GPU 0 (MPI)" \
	"ddp --grad-compress=fp16, 1 rank (NCCL), SGD clip 1" \
	"checkpoints written on the GPU vs CPU's" \
	"stop at step 20, --resume with graphs = straight" "dp stop at step 20, --resume (AdamW set) = straight" \
	"cuBLAS SGEMM, the 64x5 step's shapes" \
	"ToyModel 10,10,5 b20, eager: ddptrain, synthetic" "ToyModel 10,10,5 b20, graphs: ddptrain, synthetic" \
	"64x5 b32, fp32, eager: ddptrain, .npy files" "64x5 b32, fp32, eager: ddptrain, synthetic" \
	"64x5 b32, fp32, graphs: ddptrain, .npy files" "64x5 b32, fp32, graphs: ddptrain, synthetic" \
	"64x5 b32, tf32, eager: ddptrain, synthetic" "64x5 b32, tf32, graphs: ddptrain, synthetic" \
	${prec:+"ddp --precision=bf16, 1 rank (NCCL), SGD set (graphs)"} \
	${prec:+"64x5 b32, bf16, eager: ddptrain, synthetic"} ${prec:+"64x5 b32, bf16, graphs: ddptrain, synthetic"} \
	"dp 32x4, replica 0" "dp 32x4, replica 1"; do
	grep -q -- "^$r.* ok " "$TMPD/out" || fail "dry run: no ok row '$r': $(tail -40 "$TMPD/out")"
done
# Every feature row compared the metrics records too, eval records where there was validation.
[ "$(grep -c ' ok .*tolerance 1e-05; [0-9]* steps (worst loss error [^)]*), [0-9]* evals' "$TMPD/out")" -eq 12 ] ||
	fail "dry run: want 12 rows comparing weights and metrics at 1e-5: $(grep tolerance "$TMPD/out")"
# The 16-bit wire at its 1e-3, each run shown to have used the wire (the fake's wire is
# the CPU's: 0 from it, 1.6e-4 and more from float32).
[ "$(grep -c '^ddp --grad-compress=.* ok .*tolerance 0.001; [0-9]* steps .*; the wire used: [0-9.e-]* from the CPU.s float32 run$' "$TMPD/out")" -eq 3 ] ||
	fail "dry run: want 3 wire rows at 1e-3 with the wire used: $(grep -- --grad-compress "$TMPD/out")"
if [ -n "$prec" ]; then
	grep -q '^ddp --precision=bf16, .* ok .*tolerance 0.002; 60 steps' "$TMPD/out" || fail "dry run: bf16 row: $(grep -- --precision=bf16 "$TMPD/out")"
else
	[ "$(grep -c '^\(ddp --precision=bf16\|64x5 b32, bf16, [a-z]*: ddptrain\).* skip *no --precision in this build$' "$TMPD/out")" -eq 3 ] ||
		fail "dry run: want the 3 bf16 rows skipped for want of --precision: $(grep bf16 "$TMPD/out")"
	[ "$(grep -c '^64x5 b32, tf32, .* ok .*(as --tf32: no --precision in this build)$' "$TMPD/out")" -eq 2 ] ||
		fail "dry run: want the 2 tf32 rows run as --tf32: $(grep tf32 "$TMPD/out")"
fi
# The targets said beside the figures: the relative ones at any size, the ms ones only at
# the issue's (4096x5, batch 1024), none on a PyTorch row.
grep -q '^ToyModel 10,10,5 b20, graphs: ddptrain, synthetic .* ok .* us per step (median); target <= 30 us: \(met\|missed\)$' "$TMPD/out" ||
	fail "dry run: ToyModel graphs target: $(grep '^ToyModel.*graphs: ddptrain' "$TMPD/out")"
[ "$(grep -c '^64x5 b32, fp32, [a-z]*: ddptrain, synthetic .* ok .*; target within 3% of .npy [0-9.]* ms: \(met\|missed\)$' "$TMPD/out")" -eq 2 ] ||
	fail "dry run: want 2 synthetic rows with the .npy target: $(grep 'fp32.*synthetic' "$TMPD/out")"
[ "$(grep -c '^64x5 b32, fp32, graphs: ddptrain, .* = [0-9]*% of SGEMM [0-9.]*; target >= 95% of SGEMM: \(met\|missed\)' "$TMPD/out")" -eq 2 ] ||
	fail "dry run: want 2 graphs rows with the SGEMM target: $(grep 'fp32, graphs: ddptrain' "$TMPD/out")"
! grep -q 'target <= [0-9.]* ms' "$TMPD/out" || fail "dry run: a ms target at 64x5: $(grep 'target <= [0-9.]* ms' "$TMPD/out")"
! grep -q 'PyTorch.*target' "$TMPD/out" || fail "dry run: a target on a PyTorch row"
grep -q "^--trace: CUDA-event spans, NVTX ranges nested *skip *the stand-in module fake-gpu.so has no device clock" "$TMPD/out" ||
	fail "dry run: trace row: $(grep -- '^--trace' "$TMPD/out")"
if python3 -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
	echo "torch with CUDA here: its rows are not checked"
else
	# ToyModel: eager and graphs, pinned and resident; 64x5: the same in fp32, tf32, bf16
	[ "$(grep -c '^.*: PyTorch, \(pinned host\|resident\)  *skip  *\(no torch\|torch does not import\|torch .*is_available() is False\)' "$TMPD/out")" -eq 16 ] ||
		fail "dry run: want 16 PyTorch rows skipped with the reason: $(grep PyTorch "$TMPD/out")"
fi
want=$([ -n "$prec" ] && echo "41 passed, 1 failed, 17 skipped" || echo "37 passed, 1 failed, 20 skipped")
grep -q "^# $want" "$TMPD/out" || fail "dry run: want '$want': $(tail -3 "$TMPD/out")"
echo "gpu-check: ok (library finding, glibc, the NVTX check, torch_ddp_bench.py's arguments, dry run with the fake module: $(tail -1 "$TMPD/out" | cut -c3-), the one failure the planted race)"
