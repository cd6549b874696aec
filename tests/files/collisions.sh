#!/bin/bash
# Paths that name the same file are refused with exit 2 before anything runs: any two
# of --save, --metrics, --checkpoint (and its --keep-checkpoints rotation names),
# --inputs, --targets, --init and --resume where one is an output, compared by device and
# inode for files that exist (hard links, symbolic links, other spellings) and by resolved
# path for new ones (through a dangling link, the file it would create); an output named
# as another output's lock file (FILE.lock), in the same run or an earlier one: whatever
# sits at FILE.lock that is not a lock of ours (a hard link, a file with other bytes, a
# link, a directory, a FIFO) is refused, never written or removed. --resume=F
# --checkpoint=F (a run continuing) is allowed.
. "$(dirname "$0")/../lib/setup.sh"
cd "$TMPD"
"$MKNPY" x.npy 100 10 f4 1
"$MKNPY" y.npy 100 5 f4 2
cp x.npy x.orig
ln x.npy hard.npy
ln -s y.npy soft.npy
ln -s c.st dangling.st
ln -s c.st sv
mkdir d
D="--inputs=x.npy --targets=y.npy"
expect_fail 2 "--save and --metrics name the same file (o): give each output its own name" 2 --save=o --metrics=o
expect_fail 2 "--save and --metrics name the same file (d/../o)" 1 --save=./o --metrics=d/../o
expect_fail 2 "--save and --inputs name the same file (x.npy): an output would overwrite an input" 2 $D --save=x.npy
expect_fail 2 "--save and --inputs name the same file (x.npy)" 1 $D --save=hard.npy
expect_fail 2 "--metrics and --targets name the same file (y.npy)" 2 $D --metrics=soft.npy
expect_fail 2 "--save and --checkpoint name the same file (c.st)" 1 --checkpoint=c.st --save=c.st
# A dangling link names the file a write through it would create (before: both written to c.st).
expect_fail 2 "--save and --checkpoint name the same file (c.st)" 1 --save=dangling.st --checkpoint=c.st
# Issue 20's reproducer as it was given: two ranks, a whole epoch (before: exit 0, and the
# --save weights in c.st made --resume=c.st fail).
expect_fail 2 "--save and --checkpoint name the same file (c.st)" 2 --epochs 1 --save=sv --checkpoint=c.st
expect_fail 2 "--save: c.st.step-00000010 is one of --checkpoint's rotation names" 1 \
	--checkpoint=c.st --keep-checkpoints=2 --save=c.st.step-00000010
expect_fail 2 "--save and --save-best name the same file (o)" 1 --val-samples=20 --save-best=o --save=o
# An output's lock file (c.st.lock, held while a run writes c.st) is no other output's name.
expect_fail 2 "--save: c.st.lock is the lock file of --checkpoint (c.st.lock); give it another name" 1 \
	--checkpoint=c.st --save=c.st.lock
expect_fail 2 "--checkpoint: d/../m.lock is the lock file of --metrics (m.lock)" 1 --metrics=m --checkpoint=d/../m.lock
cp x.npy v.npy
expect_fail 2 "--save-best and --val-inputs name the same file (v.npy)" 1 $D --val-inputs=v.npy --val-targets=y.npy --save-best=v.npy
run_mpi 1 --max-steps=2 --checkpoint=c.st --quiet || fail "making a checkpoint"
expect_fail 2 "--save and --resume name the same file (c.st)" 1 --resume=c.st --save=c.st
expect_fail 2 "--metrics and --init name the same file (c.st)" 1 --init=c.st --metrics=c.st
run_mpi 1 --max-steps=4 --checkpoint=c.st --resume=c.st --quiet || fail "--resume=F --checkpoint=F refused"
cmp -s x.npy x.orig && [ ! -e o ] || fail "a refused run wrote something"
# Issue 30: the name of an output's lock, taken by something that is not a lock. A hard link
# to the checkpoint itself (before: c.st cut to "host pid", exit 1 "bad safetensors
# header length"), one to another file (before: exit 0, victim.txt overwritten), the
# weights an earlier --save=w.st.lock wrote (before: exit 0, overwritten and deleted), a
# FIFO (before: exit 0, deleted), a dangling link (before: exit 1, "c.st: cannot create a
# file beside it: Too many levels of symbolic links"). Each is bad input on every rank,
# named, and left as it was.
cp c.st c.orig
ln c.st c.st.lock
expect_fail 2 "--checkpoint: c.st.lock is a hard link to another file, and ddptrain needs that name for the lock it holds while writing c.st: remove it or give --checkpoint another name" 2 \
	--max-steps=6 --checkpoint=c.st --resume=c.st
cmp -s c.st c.orig && [ -e c.st.lock ] || fail "a hard link at c.st.lock was written through"
rm c.st.lock
echo precious >victim.txt
ln victim.txt h.st.lock
expect_fail 2 "--checkpoint: h.st.lock is a hard link to another file" 2 --max-steps=2 --checkpoint=h.st
run_mpi 1 --max-steps=2 --save=w.st.lock --quiet || fail "--save=w.st.lock"
cp w.st.lock w.orig
expect_fail 2 "--checkpoint: w.st.lock is not a ddptrain lock file (it holds other data)" 2 --max-steps=2 --checkpoint=w.st
cmp -s w.st.lock w.orig || fail "the weights in w.st.lock were overwritten or removed"
mkfifo f.st.lock
expect_fail 2 "--checkpoint: f.st.lock is not a regular file" 1 --max-steps=2 --checkpoint=f.st
ln -s nowhere l.st.lock
expect_fail 2 "--checkpoint: l.st.lock is a dangling symbolic link" 1 --max-steps=2 --checkpoint=l.st
[ "$(cat victim.txt)" = precious ] && [ -p f.st.lock ] && [ -L l.st.lock ] &&
	[ ! -e h.st ] && [ ! -e w.st ] && [ ! -e f.st ] && [ ! -e nowhere ] || fail "a refused lock name was changed: $(ls)"
echo "collisions: 20 refused, the resume pair allowed"
