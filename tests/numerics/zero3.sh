#!/bin/bash
# --zero=3 (the parameters sharded too, each layer all-gathered before its forward and its
# backward): all-gather is a copy, so its weights, gradients and optimizer state are
# --zero=2's bit for bit -- over every host all-reduce algorithm, at 2 to 4 ranks, with
# SGD, Nesterov, AdamW, clipping, schedules, frozen layers (first, inner, last), validation
# whose shares need different numbers of batches, --grad-accum, row panels, the bf16 wire
# and --precision=bf16; and on the fake GPU and the real CUDA module over the stub, over
# NCCL and staged MPI. Its checkpoint is --zero=2's; stopped and resumed it equals the
# straight run bit for bit, and it resumes at any stage and world size. Each rank keeps
# a quarter of the state at 4 ranks (plus the working set, which the table shows); a
# --max-memory under which --zero=2 is refused, naming --zero=3, lets --zero=3 train. The
# all-gathers are spans of --trace, named for the layer they bring.
. "$(dirname "$0")/../lib/setup.sh"
cd "$TMPD"
ALGS=${ZERO_ALGS:-mpi ring shm}

# same NP ARGS...: --zero=2 and --zero=3 on NP ranks save the same bytes
same() {
	local np=$1
	shift
	run_mpi "$np" "$@" --zero=2 --quiet --save=z2.st || fail "--zero=2, $np ranks: $*"
	run_mpi "$np" "$@" --zero=3 --quiet --save=z3.st || fail "--zero=3, $np ranks: $*"
	cmp -s z2.st z3.st || fail "--zero=3 differs from --zero=2, $np ranks: $* ($("$STCOMPARE" z3.st z2.st 0 || true))"
	nsame=$((nsame + 1))
}
nsame=0
B="--samples=240 --epochs=2 --seed=3 --lr=0.01"
N="--layers=8,16,16,16,4 --batch-size=6 --momentum=0.9"
for np in 2 3; do
	same $np $B --layers=12,40,24,6 --batch-size=16 --momentum=0.9 --nesterov --weight-decay=0.01
	same $np $B --layers=12,40,24,6 --batch-size=16 --optimizer=adamw --clip-grad-norm=0.5
	same $np $B --layers=12,40,24,6 --batch-size=8 --momentum=0.9 --grad-accum=3
	# validation: 50 rows over 3 ranks in batches of 8 take 2 or 3 batches, and every
	# batch all-gathers every layer: the ranks with fewer rows run one that counts nothing
	same $np $B --layers=8,16,16,4 --loss=cross-entropy --val-samples=50 --batch-size=8 \
		--optimizer=adamw --lr-schedule=cosine --warmup-steps=3 --clip-grad-norm=0.5 --freeze=2 \
		--eval-every=7 --grad-accum=2
	same $np $B $N --freeze=1
	same $np $B $N --freeze=1,4
	same $np $B --layers=64,256,128,8 --batch-size=16 --momentum=0.9 --bucket-mb=0.05 # panels
	same $np $B --layers=12,40,24,6 --batch-size=16 --momentum=0.9 --grad-compress=bf16
	same $np $B --layers=12,40,24,6 --batch-size=16 --momentum=0.9 --precision=bf16
done
for alg in $ALGS; do
	DDPTRAIN_ALLREDUCE=$alg same 3 $B $N --freeze=3 --bucket-mb=0.0002
done
same 4 $B --layers=8,16,16,16,4 --batch-size=6 --optimizer=adamw --lr=0.003 --clip-grad-norm=0.5
echo "--zero=3 saves --zero=2's bytes: $nsame runs at 2 to 4 ranks, over $ALGS"

# The GPU doubles: the fake GPU (its rules: pageable reads behind collectives, ...) and the
# real module over the stub libraries, over NCCL and staged MPI.
for lib in fake-gpu cuda-stub; do
	[ -f "$TESTS_BUILDDIR/lib/$lib.so" ] || { echo "no $lib.so (built with the CUDA toolkit): skipped"; continue; }
	for be in nccl mpi; do
		DDPTRAIN_CUDA_MODULE=$TESTS_BUILDDIR/lib/$lib.so same 2 $B $N --freeze=3 --bucket-mb=0.0002 \
			--device=cuda --backend=$be --val-samples=30 --eval-every=9
	done
	echo "$lib: --zero=3 saves --zero=2's bytes over nccl and staged mpi"
done
DDPTRAIN_CUDA_MODULE=$FAKE_GPU run_mpi 2 $B $N --device=cuda --zero=3 --max-steps=2 >out ||
	fail "fake GPU, --zero=3: $(cat out)"
grep -q "^# CUDA graphs off: --zero=3 " out || fail "no note on graphs under --zero=3: $(grep '^# ' out | head -20)"

# Checkpoints: --zero=3's is --zero=2's (the whole state, gathered); stopped at step 5 and
# resumed, the same ranks end where the straight run ends, bit for bit; resumed at another
# stage and world size it ends where a plain resume does (within float rounding: the
# reduce-scatters add in other orders).
C="$B --epochs=4 --layers=8,16,16,16,4 --batch-size=10 --optimizer=adamw --freeze=2 --quiet"
run_mpi 3 $C --zero=3 --save=full.st || fail "straight --zero=3"
for z in 2 3; do run_mpi 3 $C --zero=$z --max-steps=5 --checkpoint=ck$z.st || fail "--zero=$z to step 5"; done
"$STCOMPARE" --exact ck2.st ck3.st >/dev/null || fail "--zero=3's checkpoint is not --zero=2's: $("$STCOMPARE" --exact ck2.st ck3.st || true)"
run_mpi 3 $C --zero=3 --resume=ck3.st --save=res.st || fail "--zero=3 resume"
cmp -s res.st full.st || fail "--zero=3 stopped at step 5 and resumed differs from the straight run"
run_mpi 3 $C --zero=3 --max-steps=8 --checkpoint=e.st || fail "--zero=3 to the epoch's end"
for np in 1 2 4; do
	run_mpi $np $C --resume=e.st --save=plain.st || fail "a --zero=3 checkpoint resumed plain at $np ranks"
	for z in 1 2 3; do
		run_mpi $np $C --zero=$z --resume=e.st --save=r.st || fail "a --zero=3 checkpoint resumed with --zero=$z at $np ranks"
		"$STCOMPARE" r.st plain.st 1e-5 >/dev/null || fail "--zero=$z at $np ranks from a --zero=3 checkpoint: $("$STCOMPARE" r.st plain.st 1e-5 || true)"
	done
done
echo "checkpoints: --zero=3's is --zero=2's, resumes bit for bit, and at stages 0 to 3 and 1, 2, 4 ranks"

# Memory at 4 ranks (the memory table, rank 0, MiB): parameters, gradients and optimizer
# state a quarter of plain DDP's (AdamW: two moments), the working set beside them.
M="--layers=64,256,256,256,8 --optimizer=adamw --max-steps=2 --log-every=0 --bucket-mb=0.05"
mem() { run_mpi 4 $M "$@" | awk '/^# memory per rank/ { t = 1; next } t && $2 == "0" { print $3, $4, $5, $6; exit }'; }
read -r p0 g0 o0 w0 <<<"$(mem)"
read -r p3 g3 o3 w3 <<<"$(mem --zero=3)"
awk -v a="$p0 $g0 $o0" -v b="$p3 $g3 $o3" -v w="$w3" 'BEGIN { split(a, x); split(b, y)
	for (i = 1; i <= 3; i++) { if (y[i] > x[i] / 4 + 0.001) exit 1 }
	exit !(w > 0) }' || fail "--zero=3 at 4 ranks keeps params, grads, optim $p3 $g3 $o3 (work $w3) MiB, plain $p0 $g0 $o0: want a quarter"
echo "memory per rank at 4 ranks, MiB (params grads optim work): plain $p0 $g0 $o0 $w0, --zero=3 $p3 $g3 $o3 $w3"

# --max-memory: the bound between --zero=3's model memory and --zero=2's. --zero=2 is
# refused on every rank with one line that names --zero=3; --zero=3 trains within it.
L="--layers=64,512,512,512,512,512,512,512,512,512,512,512,8 --batch-size=8 --samples=64 --bucket-mb=0.25"
expect_fail 1 "--max-memory=14M: --zero=2 needs" 2 $L --zero=2 --max-memory=14M --max-steps=1
grep -q "use --zero=3" "$TMPD/stderr" || fail "the refusal does not name --zero=3: $(cat "$TMPD/stderr")"
run_mpi 2 $L --zero=3 --max-memory=14M --max-steps=2 --quiet || fail "--zero=3 within --max-memory=14M"
refused=$(cat "$TMPD/stderr")
expect_fail 2 "--max-memory: '12Q' is not a size" alone --max-memory=12Q
echo "$refused; --zero=3 trains within it"

# The trace: each layer's all-gather is a span, named for the layer.
run_mpi 2 $B $N --zero=3 --max-steps=3 --trace=t.json --quiet || fail "--zero=3 --trace"
python3 - t.json <<'EOF' || fail "the trace lacks the all-gathers"
import json, sys
names = {e.get("name") for e in json.load(open(sys.argv[1]))["traceEvents"]}
want = {f"allgather layer {l}" for l in range(1, 5)} | {"reducescatter"}
missing = sorted(n for n in want if not any(x == n or (x or "").startswith(n) for x in names))
sys.exit(f"missing: {missing}" if missing else 0)
EOF
echo "trace: every layer's all-gather is a span"
