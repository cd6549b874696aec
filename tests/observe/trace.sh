#!/bin/bash
# --trace: the Chrome trace parses, holds every rank's spans for each layer and bucket,
# shows all-reduces under backward (and none with --no-overlap), honours --trace-steps;
# dp's trace has the gather and reduce on replica 0; plot-trace draws it.
. "$(dirname "$0")/../lib/setup.sh"
PY=${PYTHON:-/usr/bin/python3}
command -v "$PY" >/dev/null || skip "python3 ($PY) is needed to read the trace"
CHECK="$PY $TOP_SRCDIR/tests/lib/trace_check.py"
# 4 layers, 0.05 MiB buckets: 3 (layers 4-3, layer 2, layer 1).
NET=(--layers=32,160,160,160,4 --bucket-mb=0.05 --batch-size=8 --log-every=0)

run_mpi 2 "${NET[@]}" --max-steps=4 --checkpoint="$TMPD/ck.st" --checkpoint-every=2 --trace="$TMPD/ddp.json" \
	>"$TMPD/out" || fail "ddp --trace run failed"
grep -q '^# buckets: 3 ' "$TMPD/out" || fail "want 3 buckets: $(grep buckets "$TMPD/out")"
$CHECK "$TMPD/ddp.json" ddp 2 4 3 1 4 yes || fail "ddp trace"
# The checkpoints after steps 2 and 4, on both ranks (every rank takes part in one).
[ "$(grep -o '"name":"checkpoint","cat":"io","ph":"X"' "$TMPD/ddp.json" | wc -l)" -eq 4 ] ||
	fail "want 4 checkpoint spans: $(grep -o '"name":"checkpoint"[^}]*' "$TMPD/ddp.json")"

run_mpi 2 "${NET[@]}" --max-steps=3 --no-overlap --trace="$TMPD/seq.json" >/dev/null || fail "--no-overlap run failed"
$CHECK "$TMPD/seq.json" ddp 2 4 3 1 3 no || fail "--no-overlap trace"

run_mpi 2 "${NET[@]}" --max-steps=5 --trace-steps=2:3 --trace="$TMPD/win.json" >/dev/null || fail "--trace-steps run failed"
$CHECK "$TMPD/win.json" ddp 2 4 3 2 3 yes || fail "--trace-steps=2:3 trace"

"$DDPTRAIN" --mode=dp --replicas=2 "${NET[@]}" --max-steps=2 --trace="$TMPD/dp.json" >/dev/null || fail "dp --trace run failed"
$CHECK "$TMPD/dp.json" dp 2 4 1 2 || fail "dp trace"

expect_fail 2 "--trace-steps" 1 --trace-steps=5:2 --trace="$TMPD/bad.json"
[ ! -e "$TMPD/bad.json" ] || fail "a refused run left $TMPD/bad.json"
expect_fail 1 "--trace" 1 --max-steps=1 --trace="$TMPD/no/such/dir/t.json"

# The real CUDA module against the stub libraries: NCCL's observer reads its events one
# step late, so each step's all-reduce spans come in while the next step runs; they carry
# their own step (issue 29: they were labelled with the next one, and step 1 had none).
# The stub's events time nothing real, so no overlap is expected.
STUB=$TESTS_BUILDDIR/lib/cuda-stub.so
if [ -f "$STUB" ]; then
	DDPTRAIN_CUDA_MODULE=$STUB run_mpi 1 "${NET[@]}" --max-steps=4 --device=cuda --backend=nccl \
		--trace="$TMPD/nccl.json" >/dev/null || fail "--trace on the stub CUDA module failed"
	$CHECK "$TMPD/nccl.json" ddp 1 4 3 1 4 any || fail "nccl trace: the spans' steps"
	# The device behind the host (the stub's DDPT_STUB_LAG), eager at 2 ranks: spans
	# told a step or more late, their times through the chain of reference events; the
	# traced steps' spans still carry their own step.
	DDPT_STUB_LAG=1 DDPTRAIN_CUDA_GRAPHS=0 DDPTRAIN_CUDA_MODULE=$STUB run_mpi 2 "${NET[@]}" --max-steps=8 \
		--device=cuda --backend=nccl --trace="$TMPD/lag.json" --trace-steps=3:6 >/dev/null ||
		fail "--trace on the stub CUDA module, the device behind, failed"
	$CHECK "$TMPD/lag.json" ddp 2 4 3 3 6 any || fail "nccl trace, the device behind: the spans' steps"
else
	echo "trace: no $STUB (built with the CUDA toolkit): NCCL's late spans not checked"
fi

if "$PY" -c 'import matplotlib' 2>/dev/null; then
	"$PY" "$TOP_SRCDIR/scripts/plot-trace" "$TMPD/t.png" "$TMPD/ddp.json" "$TMPD/dp.json" >/dev/null ||
		fail "plot-trace failed"
	[ "$(head -c 4 "$TMPD/t.png" | od -An -c | tr -d ' ')" = '211PNG' ] || fail "plot-trace wrote no PNG"
else
	echo "trace: matplotlib not importable: plot-trace not run"
fi
echo "trace: ddp, --no-overlap, --trace-steps and dp traces as expected"
