#!/bin/bash
# Checkpoint integrity and rotation. The SHA-256 covers the header as well as the data: an
# edited position is refused, and every integer in the header is range-checked even when
# the checksum is recomputed, the position against the epoch's length and itself.
# --keep-checkpoints prunes only this run's lineage, by the parsed step whatever its digit
# count, and never replaces or removes another run's files or a non-checkpoint: a run that
# could write one's name is refused before step 1 (issue 34, item 2).
. "$(dirname "$0")/../lib/setup.sh"
EDIT="perl $TOP_SRCDIR/tests/lib/ckpt-edit.pl"
cd "$TMPD"

# A checkpoint in the middle of epoch 1 (200 samples, batch 20: 10 micro-batches).
run_mpi 1 --samples=200 --max-steps=4 --checkpoint=c.st --quiet || fail "making a checkpoint"
R="--samples=200 --max-steps=6 --quiet"
run_mpi 1 $R --resume=c.st || fail "the unedited checkpoint does not resume"
$EDIT c.st e1.st 's/"next_micro_batch":"4"/"next_micro_batch":"7"/'
expect_fail 1 "--resume: e1.st: checksum mismatch: the header or the tensor data is corrupt or was edited" 1 $R --resume=e1.st
for edit in 's/"epoch":"0"/"epoch":"9223372036854775807"/' 's/"world_size":"1"/"world_size":"4294967298"/' \
	's/"next_micro_batch":"4"/"next_micro_batch":"-1"/' 's/"step":"4"/"step":"99999999999999999999"/' \
	's/"lineage":"[0-9a-f]*"/"lineage":"x"/'; do
	$EDIT c.st e2.st "$edit" resign
	expect_fail 1 "--resume: e2.st: checkpoint metadata is incomplete, malformed or out of range" 2 $R --resume=e2.st
done

# The position is checked against the epoch's length and itself, the checksum recomputed
# (it proves integrity, not validity): 10 micro-batches an epoch, so a next micro-batch of
# 2^31-1 (before: accepted, the rest of the epoch silently skipped), and a step that no
# run could have taken to reach epoch 0, micro-batch 4 (exactly 4 steps) or epoch 3,
# micro-batch 4 (34 steps at one rank; at least 7 at any world size).
# forge IN OUT EXPR...: IN with each edit made, the checksum recomputed.
forge() {
	local in=$1 out=$2
	shift 2
	cp "$in" "$out"
	for e in "$@"; do
		$EDIT "$out" "$out.edit" "$e" resign && mv "$out.edit" "$out"
	done
}
S4='s/"step":"4"/"step":' E0='s/"epoch":"0"/"epoch":"3"/'
forge c.st e3.st 's/"next_micro_batch":"4"/"next_micro_batch":"2147483647"/'
expect_fail 1 "--resume: e3.st: next_micro_batch 2147483647 is past the end of an epoch of 10 micro-batches (world size 1)" 1 $R --resume=e3.st
forge c.st e3.st "$S4\"3\"/"
expect_fail 1 "--resume: e3.st: step 3 contradicts epoch 0 and next_micro_batch 4: those take 4 steps (an epoch takes 1 to 10 steps, by world size)" 1 $R --resume=e3.st
forge c.st e3.st "$E0"
expect_fail 1 "--resume: e3.st: step 4 contradicts epoch 3 and next_micro_batch 4: those take 7 to 34 steps" 1 $R --resume=e3.st
forge c.st e3.st "$S4\"35\"/" "$E0"
expect_fail 1 "--resume: e3.st: step 35 contradicts epoch 3 and next_micro_batch 4: those take 7 to 34 steps" 2 $R --resume=e3.st
# With --grad-accum=2 a checkpoint follows a whole step: micro-batch 4 after 2 steps, never 3.
run_mpi 1 --samples=200 --grad-accum=2 --max-steps=2 --checkpoint=g.st --quiet || fail "a --grad-accum=2 checkpoint"
forge g.st e3.st 's/"next_micro_batch":"4"/"next_micro_batch":"3"/'
expect_fail 1 "--resume: e3.st: next_micro_batch 3 does not begin a step of --grad-accum=2 micro-batches" 1 \
	--samples=200 --grad-accum=2 --max-steps=4 --resume=e3.st
# Consistent forgeries are accepted: epoch 3, micro-batch 4 after 34 steps (one rank
# throughout) or after 7 (earlier epochs at a world size that makes each one step).
for s in 34 7; do
	forge c.st e3.st "$S4\"$s\"/" "$E0"
	run_mpi 1 --samples=200 --max-steps=40 --quiet --resume=e3.st || fail "a consistent position refused: step $s"
done

# Rotation. Run A (an earlier run) leaves k.st.step-4..16 and a file that is no checkpoint.
K="--checkpoint=k.st --quiet"
run_mpi 1 --max-steps=16 --checkpoint-every=4 --keep-checkpoints=10 $K || fail "run A"
echo "not a checkpoint" >k.st.step-99
# Run B, a new run of the same name to step 6, would write A's k.st.step-00000004 (any
# step can be a stop's) and the user's k.st.step-00000002: refused before step 1, on
# every rank, naming the lowest (before: both overwritten, then removed as B's own).
echo "the user's notes" >k.st.step-00000002
sums() { sha256sum k.st k.st.step-* | tr '\n' ' '; }
before=$(sums)
expect_fail 2 "--keep-checkpoints: k.st.step-00000002 (and 1 more such files) is not this run's (not a ddptrain checkpoint): this run's checkpoint of step 2 would replace it, and the rotation remove it; move it away or give --checkpoint another name" \
	2 --max-steps=6 --checkpoint-every=2 --keep-checkpoints=2 $K --metrics=b.jsonl
rm k.st.step-00000002
expect_fail 2 "--keep-checkpoints: k.st.step-00000004 is not this run's (another run's checkpoint): this run's checkpoint of step 4 would replace it, and the rotation remove it; move it away or give --checkpoint another name, or --resume that run" \
	1 --max-steps=6 --checkpoint-every=2 --keep-checkpoints=2 $K
[ "$(sums)" = "$(echo "$before" | sed 's/[^ ]*  k.st.step-00000002 //')" ] && [ ! -e b.jsonl ] ||
	fail "a refused run changed the files: $before -> $(sums)"
# Without --keep-checkpoints nothing is refused: the numbered names are not written.
run_mpi 1 --max-steps=6 --checkpoint=n.st --quiet || fail "the same names without rotation"
# Once A's step 4 is moved away, run B keeps its own newest 2 and leaves A's alone.
mv k.st.step-00000004 a4.st
run_mpi 2 --max-steps=6 --checkpoint-every=2 --keep-checkpoints=2 $K || fail "run B"
have=$(LC_ALL=C ls k.st.step-* | tr '\n' ' ')
[ "$have" = "k.st.step-00000004 k.st.step-00000006 k.st.step-00000008 k.st.step-00000012 k.st.step-00000016 k.st.step-99 " ] ||
	fail "after run B: $have"
cmp -s k.st k.st.step-00000006 || fail "k.st.step-00000006 is not run B's last checkpoint"
# Resumed to step 8, B would replace A's step 8: refused as well; a copy of B's own is not.
expect_fail 2 "--keep-checkpoints: k.st.step-00000008 is not this run's (another run's checkpoint)" \
	2 --max-steps=8 --checkpoint-every=2 --keep-checkpoints=2 --resume=k.st $K
mv k.st.step-00000008 a8.st
# Steps past 99,999,999 (more digits) are parsed and pruned like the others: B's lineage,
# resumed, with two copies of its checkpoint named as steps 123456789 and 1000000000.
cp k.st k.st.step-123456789
cp k.st k.st.step-1000000000
run_mpi 2 --max-steps=8 --checkpoint-every=2 --keep-checkpoints=2 --resume=k.st $K || fail "run B resumed"
have=$(LC_ALL=C ls k.st.step-* | tr '\n' ' ')
[ "$have" = "k.st.step-00000012 k.st.step-00000016 k.st.step-1000000000 k.st.step-123456789 k.st.step-99 " ] ||
	fail "after run B resumed: $have"
[ "$(sha256sum <a4.st | cut -d' ' -f1)" = "$(grep -o '[0-9a-f]*  k.st.step-00000004' <<<"$before" | cut -d' ' -f1)" ] ||
	fail "run A's step 4 changed"
echo "--keep-checkpoints: a run refuses another run's or a user's file under a name it may write (exit 2, before step 1); rotates only its own"

# Through a symbolic link the kept checkpoints are names of the file it names, beside it:
# each its own step (link(2) on the link itself made every one the link, so all read the
# newest), and --save is refused one of their names.
mkdir real
ln -s real/l.st l.st
run_mpi 1 --max-steps=6 --checkpoint-every=2 --keep-checkpoints=2 --checkpoint=l.st --quiet || fail "rotation through a link"
have=$(cd real && LC_ALL=C ls | tr '\n' ' ')
[ -L l.st ] && [ "$have" = "l.st l.st.step-00000004 l.st.step-00000006 " ] && ! ls l.st.step-* >/dev/null 2>&1 ||
	fail "rotation through a link: $(ls -l . real)"
cmp -s real/l.st real/l.st.step-00000006 && ! cmp -s real/l.st real/l.st.step-00000004 ||
	fail "the kept checkpoints are not each their own step"
expect_fail 2 "--save: real/l.st.step-00000002 is one of --checkpoint's rotation names" 1 \
	--checkpoint=l.st --keep-checkpoints=2 --save=real/l.st.step-00000002
# A name whose rotation names (.step-NNNNNNNN, 14 more characters) exceed the file system's
# 255 is refused at start-up, before any training (before: it ran to the first kept
# checkpoint and failed there, exit 1, "File name too long").
long=$(printf 'c%.0s' $(seq 243))
expect_fail 1 "--checkpoint: $long: the name is too long for --keep-checkpoints, whose names add .step-NNNNNNNN (257 characters; its file system allows 255)" \
	2 --max-steps=4 --checkpoint="$long" --checkpoint-every=2 --keep-checkpoints=2
[ ! -e "$long" ] || fail "a refused --checkpoint name was written"
run_mpi 2 --max-steps=4 --checkpoint="$long" --checkpoint-every=2 --quiet || fail "the same name without rotation"
rm -f "$long"

# Data identity: a fingerprint of each .npy file (size, dtype, shape and a SHA-256 of the
# header and the data, or of a fixed sample of a big file) is in the checkpoint and in the
# cross-rank configuration check. Same shape, other numbers: refused.
"$MKNPY" a.npy 100 10 f4 1
"$MKNPY" b.npy 100 10 f4 7
"$MKNPY" t.npy 100 5 f4 2
run_mpi 1 --inputs=a.npy --targets=t.npy --max-steps=2 --checkpoint=d.st --quiet || fail "data checkpoint"
expect_fail 2 "--resume: d.st was written with inputs=f4 (100, 10), 4128 bytes, sha256 " 2 \
	--inputs=b.npy --targets=t.npy --max-steps=4 --resume=d.st
run_mpi 1 --inputs=a.npy --targets=t.npy --max-steps=4 --resume=d.st --quiet || fail "the same data does not resume"
# A changed --loss is named as such, before the data line it changes (the targets' width;
# before: "was written with data=synthetic 40 x (10, 5); this run has data=synthetic 40 x (10, 1)").
run_mpi 1 --layers=10,16,5 --samples=40 --max-steps=2 --checkpoint=loss.st --quiet || fail "mse checkpoint"
expect_fail 2 "--resume: loss.st was written with --loss=mse, data=synthetic 40 x (10, 5); this run has --loss=cross-entropy, data=synthetic 40 x (10, 1)" \
	2 --layers=10,16,5 --samples=40 --max-steps=4 --resume=loss.st --loss=cross-entropy
rm -f rc.*
RCDIR=$TMPD timeout -k 5 60 mpirun --oversubscribe \
	-np 1 bash -c '"$0" "$@"; echo $? >"$RCDIR/rc.$OMPI_COMM_WORLD_RANK"' "$DDPTRAIN" --inputs=a.npy --targets=t.npy --quiet : \
	-np 1 bash -c '"$0" "$@"; echo $? >"$RCDIR/rc.$OMPI_COMM_WORLD_RANK"' "$DDPTRAIN" --inputs=b.npy --targets=t.npy --quiet \
	>out 2>err || fail "mpirun failed ($?)"
[ "$(cat rc.0 rc.1)" = "$(printf '2\n2')" ] && grep -q "configuration differs between ranks: inputs=f4 (100, 10)" err ||
	fail "MPMD ranks with different --inputs: $(cat rc.* err)"
# Forged optimizer state, re-signed (issue 30): NaN or Inf in exp_avg (before: "the
# checkpoint holds non-finite weights", no tensor named, and it is no weight) and a negative
# exp_avg_sq, which AdamW never writes (before: accepted; step 5's loss was -nan, "lower
# --lr"). Each names the tensor and the element; the unedited checkpoint resumes.
A="--samples=200 --optimizer=adamw --layers=4,3,2 --quiet"
run_mpi 1 $A --max-steps=3 --checkpoint=ad.st || fail "making an AdamW checkpoint"
forge ad.st f1.st 'set exp_avg_sq.net1.weight[5]=-0.5'
expect_fail 1 "--resume: f1.st: tensor 'exp_avg_sq.net1.weight' element (1, 1) (counting from 0) is -0.5, negative, where exp_avg_sq is AdamW's running mean of squared gradients: training never writes that (the file was altered or corrupted)" \
	2 $A --max-steps=5 --resume=f1.st
forge ad.st f2.st 'set exp_avg.net2.bias[1]=nan'
expect_fail 1 "--resume: f2.st: tensor 'exp_avg.net2.bias' element (1) (counting from 0) is nan, not a finite number" 1 $A --max-steps=5 --resume=f2.st
forge ad.st f3.st 'set exp_avg_sq.net2.weight[0]=inf'
expect_fail 1 "--resume: f3.st: tensor 'exp_avg_sq.net2.weight' element (0, 0) (counting from 0) is inf, not a finite number" 1 $A --max-steps=5 --resume=f3.st
run_mpi 1 $A --max-steps=5 --resume=ad.st || fail "the unedited AdamW checkpoint does not resume"
echo "checkpoints: 12 edited headers refused (6 of them positions), 3 forged optimizer states refused, 2 consistent ones resumed, rotation kept the right files (through a link too), other data refused"
