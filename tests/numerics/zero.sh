#!/bin/bash
# ZeRO (--zero=1: optimizer state sharded; --zero=2: the reduced gradient too): the final
# weights equal plain DDP's -- bit for bit where the order of the sums is the same (2
# ranks: the reduce-scatter and the all-reduce add one pair per float), within 1e-6 where
# it is not (3 and 4 ranks, where MPI may add in another order; clipping, whose norm is
# the sum of the shards' norms; --zero=2 with --grad-accum, which adds the micro-batches
# after the reduction) -- for SGD with momentum and Nesterov, AdamW, clipping that
# triggers, frozen layers, a schedule with warmup and --grad-accum, at 1 to 4 ranks, and
# with --zero=2 computing layers larger than the bucket cap in row panels: there bit for
# bit only where the BLAS computes a row panel as it computes those rows of the whole
# product (tests/lib/blasrows; else within 1e-5, the same sums per float in another
# order: setup.sh's blas_panels). A
# --zero checkpoint holds the whole optimizer state: stopped and resumed it is bit-identical
# to an unbroken run; it resumes without --zero and at another world size, and --zero
# resumes a plain one. The per-rank memory table shows the state shard, and with --zero=2
# gradients of the shard and two buffers of at most the bucket cap. What cannot work is
# refused with one line.
#
# ALGS: the all-reduce algorithms (DDPTRAIN_ALLREDUCE) with reduce-scatter and all-gather.
. "$(dirname "$0")/../lib/setup.sh"
cd "$TMPD"
ALGS=${ZERO_ALGS:-mpi ring shm}
blas_panels # PANELS: "exact", or 1e-5 where this BLAS's row panels are not bit for bit

# Small buckets (0.001 MiB = 262 floats: one layer each) so that ZeRO-2 reuses its two
# bucket buffers, and shards that cut through layers and buckets. The first three layers
# (264 and 600 floats) are larger than the cap: --zero=2 computes them in row panels.
base="--samples=240 --epochs=2 --seed=5 --lr=0.05 --layers=10,24,24,24,5 --bucket-mb=0.001 --quiet"

# check NP TOL1 TOL2 ARGS...: plain DDP, --zero=1 and --zero=2 on NP ranks end with the
# same weights: TOL1 for --zero=1, TOL2 for --zero=2 ("exact": bit for bit; else the
# largest relative error allowed), where this BLAS's row panels are not bit for bit
# PANELS for --zero=2 if that is looser.
check() {
	local np=$1 tol1=$2 tol2=$3 z tol out
	shift 3
	run_mpi "$np" $base "$@" --save=plain.st || fail "plain DDP, $np ranks: $*"
	for z in 1 2; do
		tol=$tol1
		[ $z = 2 ] && tol=$(panel_tol "$tol2")
		run_mpi "$np" $base "$@" --zero=$z --save=z$z.st || fail "--zero=$z, $np ranks: $*"
		out=$(stcompare_tol "$tol" z$z.st plain.st) || fail "$alg: --zero=$z against plain DDP at $np ranks, $tol ($*): $out"
		echo "$alg np=$np --zero=$z $*: $out"
	done
}

for alg in $ALGS; do
	export DDPTRAIN_ALLREDUCE=$alg
	check 1 exact exact --optimizer=adamw --weight-decay=0.01
	check 1 exact 1e-6 --momentum=0.9 --grad-accum=3
	check 2 exact exact --momentum=0.9
	check 2 exact exact --momentum=0.9 --nesterov --weight-decay=0.001
	check 2 exact exact --optimizer=adamw --weight-decay=0.01 --lr=0.01
	check 2 exact exact --freeze=2 --momentum=0.9 --lr-schedule=cosine --warmup-steps=4
	check 2 exact 1e-6 --freeze=4 --momentum=0.9 --grad-accum=2
	check 2 1e-6 1e-6 --optimizer=adamw --lr=0.01 --clip-grad-norm=0.05
	check 3 1e-6 1e-6 --momentum=0.9 --nesterov --clip-grad-norm=0.1 --freeze=1
	check 3 1e-6 1e-6 --optimizer=adamw --lr=0.01 --lr-schedule=linear --warmup-steps=3 --grad-accum=2
	check 4 1e-6 1e-6 --optimizer=adamw --lr=0.01 --freeze=3
	check 4 1e-6 1e-6 --momentum=0.9 --clip-grad-norm=0.05 --grad-accum=2
done
export DDPTRAIN_ALLREDUCE=${ALGS%% *}

# Layers larger than the bucket cap go in row panels, here more of them than collectives
# may be in flight (146 reduce-scatters a micro-batch at 0.0001 MiB, so the count restarts
# twice in each backward): plain DDP's weights at 2 ranks, bit for bit where this BLAS
# computes row panels so (bf16 too: the same rounding per float), else within PANELS;
# within 1e-6 at 3 with --grad-accum (or PANELS if looser).
pan="--samples=120 --epochs=2 --seed=3 --lr=0.05 --layers=10,200,30,5 --bucket-mb=0.0001 --momentum=0.9 --quiet"
run_mpi 2 ${pan/--quiet/} --zero=2 --max-steps=1 | grep -q "3 layers larger than the bucket cap .*: 146 reduce-scatters per micro-batch" ||
	fail "--zero=2 did not say it computes 3 layers in 146 row panels"
# A row longer than the cap: the panels are one row each, and the line says so (issue 30:
# it said "of at most the cap").
run_mpi 2 ${pan/--quiet/} --bucket-mb=1e-9 --zero=2 --max-steps=1 |
	grep -q "row panels of one row each (a row of up to 200 floats, 0.000763 MiB, is larger than the 1e-09 MiB cap)" ||
	fail "--zero=2 with a cap below one row: the panel line does not say one row each"
for wire in "" --grad-compress=bf16; do
	run_mpi 2 $pan $wire --save=pp.st || fail "plain $wire, panels"
	run_mpi 2 $pan $wire --zero=2 --save=zp.st || fail "--zero=2 $wire in panels"
	out=$(stcompare_tol "$PANELS" zp.st pp.st) || fail "--zero=2 $wire in 146 row panels against plain DDP, $PANELS: $out"
	echo "--zero=2${wire:+ $wire} in 146 row panels at 2 ranks: $out"
done
run_mpi 3 $pan --grad-accum=2 --save=pp.st || fail "plain, panels, 3 ranks"
run_mpi 3 $pan --grad-accum=2 --zero=2 --save=zp.st || fail "--zero=2 in panels, 3 ranks"
out=$(stcompare_tol "$(panel_tol 1e-6)" zp.st pp.st) || fail "--zero=2 in row panels against plain DDP at 3 ranks with --grad-accum=2: $out"
echo "--zero=2 in row panels at 3 ranks with --grad-accum=2: $out"

# The clipping above triggers: the gradient's norm exceeds it in the first step.
first=$(run_mpi 2 ${base/--quiet/} --momentum=0.9 --clip-grad-norm=0.05 --max-steps=1 --log-every=1 | awk '$2 == "1/1" { print $3 }')
[ -n "$first" ] || fail "no first loss"
run_mpi 2 $base --momentum=0.9 --max-steps=1 --save=noclip.st || fail "unclipped step"
run_mpi 2 $base --momentum=0.9 --clip-grad-norm=0.05 --max-steps=1 --zero=1 --save=clip.st || fail "clipped step"
"$STCOMPARE" clip.st noclip.st 1e-3 >/dev/null && fail "--clip-grad-norm=0.05 did not change the first step"

# Stopped after 5 steps (a checkpoint in the middle of an epoch, after a validation that
# settles ZeRO-2's all-gathers) and resumed: bit-identical to the unbroken run.
ck="$base --optimizer=adamw --lr=0.01 --val-samples=40 --eval-every=3"
for z in 1 2; do
	run_mpi 3 $ck --zero=$z --save=whole.st || fail "--zero=$z unbroken"
	run_mpi 3 $ck --zero=$z --max-steps=5 --checkpoint=c.st || fail "--zero=$z stopped"
	run_mpi 3 $ck --zero=$z --resume=c.st --checkpoint=c.st --save=resumed.st || fail "--zero=$z resumed"
	out=$("$STCOMPARE" --exact resumed.st whole.st) || fail "--zero=$z stopped and resumed: $out"
	echo "--zero=$z stopped after 5 steps and resumed: $out"
done

# Stopped by a signal wherever it lands (SIGTERM to rank 0 of a run of endless epochs):
# the stop's checkpoint, resumed for 3 more steps, gives the unbroken run's weights.
sig="${base/--quiet/} --optimizer=adamw --lr=0.001 --epochs=100000 --log-every=0"
mpirun_bg -np 2 "$DDPTRAIN" $sig --zero=2 --checkpoint=sig.st
started
sleep 0.5
kill -TERM "$(pgrep -P "$bg" -f -- "--checkpoint=sig.st" | head -1)"
finish 3
n=$(sed -n 's/.*stopped by a signal after step \([0-9]*\) of.*/\1/p' bg.out bg.err | head -1)
[ -n "$n" ] || fail "no stop note: $(cat bg.out bg.err | grep -v '^[- ]' | tail -3)"
run_mpi 2 $sig --zero=2 --resume=sig.st --max-steps=$((n + 3)) --quiet --save=sr.st || fail "resuming the stop"
run_mpi 2 $sig --zero=2 --max-steps=$((n + 3)) --quiet --save=su.st || fail "the unbroken run"
out=$("$STCOMPARE" --exact sr.st su.st) || fail "--zero=2 stopped by SIGTERM after step $n and resumed: $out"
echo "--zero=2 stopped by SIGTERM after step $n and resumed: $out"

# The checkpoint holds the whole optimizer state: at 2 ranks a --zero=2 checkpoint and a
# plain one hold the same tensors (weights and AdamW's moments), bit for bit where this
# BLAS computes row panels so (the first layers go in panels), else within PANELS.
am="$base --optimizer=adamw --lr=0.01"
run_mpi 2 $am --max-steps=5 --checkpoint=p2.st || fail "plain checkpoint"
run_mpi 2 $am --max-steps=5 --checkpoint=z2.st --zero=2 || fail "--zero=2 checkpoint"
out=$(stcompare_tol "$PANELS" z2.st p2.st) || fail "a --zero=2 checkpoint against a plain one, $PANELS: $out"
echo "--zero=2 checkpoint against a plain one: $out"

# At an epoch boundary (240 samples, 3 ranks, batch 20: 4 steps an epoch) a --zero
# checkpoint resumes without --zero and at other world sizes, and --zero resumes a plain
# one: from one checkpoint, at 2 ranks, all three ways give the same weights.
run_mpi 3 $am --zero=1 --max-steps=4 --checkpoint=e.st || fail "--zero=1 at an epoch boundary"
run_mpi 3 $am --max-steps=4 --checkpoint=ep.st || fail "plain at an epoch boundary"
run_mpi 2 $am --resume=e.st --save=r_plain.st || fail "a --zero checkpoint resumed without --zero at 2 ranks"
run_mpi 2 $am --resume=e.st --zero=2 --save=r_zero.st || fail "a --zero checkpoint resumed with --zero=2 at 2 ranks"
run_mpi 2 $am --resume=ep.st --zero=1 --save=r_zp.st || fail "a plain checkpoint resumed with --zero=1"
run_mpi 4 $am --resume=e.st --zero=1 --save=r4.st || fail "a --zero checkpoint resumed at 4 ranks"
out=$(stcompare_tol "$PANELS" r_zero.st r_plain.st) || fail "--zero=2 and plain resumes of one checkpoint, $PANELS: $out"
out=$("$STCOMPARE" r_zp.st r_plain.st 1e-6) || fail "a plain checkpoint resumed with --zero against a --zero one resumed plain: $out"
echo "resumed across --zero and world sizes: $out"

# The memory table: with AdamW at 2 ranks each rank keeps half of the two moments.
# optim MiB of rank 0 (the memory table's row), for a model of 84,488 trained floats.
optim() {
	run_mpi 2 --layers=64,256,256,8 --optimizer=adamw --max-steps=2 --log-every=0 "$@" |
		awk '/^# memory per rank/ { t = 1; next } t && $2 == "0" { print $5; exit }'
}
whole=$(optim) half=$(optim --zero=1) half2=$(optim --zero=2)
awk -v w="$whole" -v h="$half" -v h2="$half2" 'BEGIN { exit !(w > 0.6 && h * 2 >= w - 0.002 && h * 2 <= w + 0.002 && h2 == h) }' ||
	fail "optimizer state MiB per rank: plain $whole, --zero=1 $half, --zero=2 $half2 (want half)"
echo "optimizer state MiB per rank: plain $whole, --zero=1 $half, --zero=2 $half2"

# ZeRO-2's gradient memory per rank is its shard (grads) and two bucket buffers of at most the cap (work)
# (0.1 MiB: 26,214 floats), though layer 2 (65,792 floats) is larger: it goes in row
# panels. Whole layers in the buffers would take 84,488 floats, more than plain DDP's
# whole gradient (84,491). Rank 0's shard: 42,244 floats; 4 more for the slots and norm.
grads() {
	run_mpi 2 --layers=64,256,256,8 --bucket-mb=0.1 --max-steps=2 --log-every=0 "$@" |
		awk '/^# memory per rank/ { t = 1; next } t && $2 == "0" { print $4 + $6; exit }'
}
g2=$(grads --zero=2)
awk -v g="$g2" 'BEGIN { f = g * 1048576 / 4; exit !(f > 42244 && f <= 42244 + 4 + 2 * 26214 + 300) }' ||
	fail "--zero=2 gradient MiB per rank: $g2, want the shard (42,244 floats) and at most two buffers of the cap (26,214)"
echo "--zero=2 gradient MiB per rank with a layer larger than the cap: $g2"

# The per-bucket table counts each bucket's own collective once per step: the slots'
# all-reduce (started first), the clipping norm's, the all-gathers and validation's
# all-reduces are no bucket's (before, they were counted into buckets 0 and 1).
counts=$(run_mpi 2 --layers=10,300,300,5 --bucket-mb=0.2 --samples=400 --batch-size=20 --epochs=1 \
	--zero=1 --clip-grad-norm=0.1 --val-samples=40 |
	awk '/^# bucket +layers/ { t = 1; next } t && /^# +[0-9]+ / { printf "%s:%s ", $3, $5; next } { t = 0 }')
[ "$counts" = "3-2:10 1-1:10 slots:10 " ] || fail "per-bucket counts over 10 steps with --zero=1: $counts"
echo "per-bucket counts: $counts"

# Refused, with one line, on every rank.
expect_fail 2 "ddptrain: --zero applies to --mode=ddp (DataParallel is one process: no ranks to shard over, no all-reduce to compress)" alone --mode=dp --zero=1
expect_fail 2 "ddptrain: --grad-compress applies to --mode=ddp (DataParallel is one process: no ranks to shard over, no all-reduce to compress)" alone --mode=dp --grad-compress=bf16
expect_fail 2 "ddptrain: --zero=2 reduce-scatters each bucket as backward finishes it, into two reused buffers: it cannot wait for the whole backward (--no-overlap); use --zero=1" 2 --zero=2 --no-overlap
expect_fail 2 "ddptrain: --zero: 4 is out of range [0, 3]" 2 --zero=4
expect_fail 2 "ddptrain: --grad-compress: 'fp32' is not one of none|fp16|bf16" alone --grad-compress=fp32
echo "zero: ok"
