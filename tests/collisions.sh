#!/bin/bash
# Paths that name the same file are refused with exit 2 before anything runs: any two
# of --save, --metrics, --checkpoint (and its --keep-checkpoints rotation names),
# --inputs, --targets, --init and --resume where one is an output, compared by device and
# inode for files that exist (hard links, symbolic links, other spellings) and by resolved
# path for new ones (through a dangling link, the file it would create); an output named
# as another output's lock file (FILE.lock). --resume=F --checkpoint=F (a run continuing)
# is allowed.
. "$(dirname "$0")/lib/setup.sh"
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
echo "collisions: 15 refused, the resume pair allowed"
