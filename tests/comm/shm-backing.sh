#!/bin/bash
# Where the directory that backs the shared-memory window (Open MPI's
# osc_sm_backing_directory, else /dev/shm) cannot take the window's file -- no free
# inode, read-only, missing, or a file -- the ranks agree so before asking MPI for the
# window: by default every rank falls back to MPI's all-reduce with one note naming the
# directory and what is wrong, and trains what DDPTRAIN_ALLREDUCE=mpi trains;
# DDPTRAIN_ALLREDUCE=shm exits 1 on every rank with that line. Before (issue 34 item 3)
# the pre-check counted free bytes only: the node's first rank failed to create the
# file while rank 1 stayed inside MPI_Win_allocate_shared until --timeout. Runs in a
# private mount namespace (SKIP where not root or unshare is refused).
. "$(dirname "$0")/../lib/setup.sh"
private_shm 64m

args="--layers=4,8,2 --samples=16 --batch-size=4 --epochs=1 --log-every=0 --timeout=10"
mkdir "$TMPD/noinode" "$TMPD/ro" "$TMPD/sess"
# The mounts go before $TMPD does, however the test ends.
trap 'umount -q "$TMPD/noinode" "$TMPD/ro" "$TMPD/sess" 2>/dev/null || true; rm -rf "$TMPD"' EXIT
# tmpfs counts its root directory as an inode: nr_inodes=1 leaves none free.
mount -t tmpfs -o size=8m,nr_inodes=1 tmpfs "$TMPD/noinode" || fail "cannot mount a tmpfs on $TMPD/noinode"
mount -t tmpfs -o size=8m,ro tmpfs "$TMPD/ro" || fail "cannot mount a read-only tmpfs on $TMPD/ro"
touch "$TMPD/afile"

DDPTRAIN_ALLREDUCE=mpi run_mpi 2 $args --quiet --save="$TMPD/mpi.st" || fail "DDPTRAIN_ALLREDUCE=mpi"

# case DIR WHAT: auto falls back with the note, =shm exits 1 naming DIR and WHAT.
case_dir() {
	local dir=$1 what=$2 out rc=0
	export OMPI_MCA_osc_sm_backing_directory=$dir
	out=$(run_mpi 2 $args --save="$TMPD/auto.st") || rc=$?
	[ $rc = 0 ] || fail "$what: auto exited $rc, want 0 (a fallback): $(grep ddptrain <<<"$out")"
	grep -qxF "# all-reduce auto: mpi (the shared-memory window's backing file cannot be made in $dir: $what)" <<<"$out" ||
		fail "$what: no note naming $dir: $(grep 'all-reduce' <<<"$out")"
	[ "$(grep -c "backend mpi, MPI all-reduce" <<<"$out")" = 2 ] || fail "$what: not MPI's all-reduce on both ranks"
	"$STCOMPARE" --exact "$TMPD/auto.st" "$TMPD/mpi.st" >/dev/null || fail "$what: the fallback trains other weights than MPI's all-reduce"
	DDPTRAIN_ALLREDUCE=shm expect_fail 1 \
		"ddptrain: DDPTRAIN_ALLREDUCE=shm: the shared-memory window's backing file cannot be made in $dir: $what" 2 $args
	echo "$what: auto falls back to mpi, =shm: $(cat "$TMPD/stderr")"
	unset OMPI_MCA_osc_sm_backing_directory
}
case_dir "$TMPD/noinode" "it has no free inodes (df -i)"
case_dir "$TMPD/ro" "it is read-only"
case_dir "$TMPD/missing" "it does not exist"
case_dir "$TMPD/afile" "it is not a directory"


# A read-only /dev/shm: Open MPI puts the window (and its own files) in its session
# directory instead, here on a 16 MiB tmpfs (orte_tmpdir_base), too small for a 32 MiB
# window; the check names that directory (before, it named none: rank 1 waited until
# --timeout, as above).
mount -o remount,ro /dev/shm || fail "cannot make the private /dev/shm read-only"
mount -t tmpfs -o size=16m tmpfs "$TMPD/sess" || fail "cannot mount a tmpfs on $TMPD/sess"
big="--layers=10,2000,2000,5 --samples=8 --batch-size=4 --max-steps=1 --log-every=0 --timeout=10"
want="the shared-memory window needs [0-9.]+ MiB in $TMPD/sess/ompi\.[^ ]+, which has [0-9.]+ MiB free of 16\.0 MiB"
out=$(timeout -k 5 120 mpirun --oversubscribe --mca orte_tmpdir_base "$TMPD/sess" -np 2 "$DDPTRAIN" $big) ||
	fail "a read-only /dev/shm: auto exited $?: $(grep ddptrain <<<"$out")"
grep -qE "^# all-reduce auto: mpi \($want\)$" <<<"$out" ||
	fail "a read-only /dev/shm: no note naming the session directory: $(grep 'all-reduce' <<<"$out")"
rc=0
DDPTRAIN_ALLREDUCE=shm timeout -k 5 120 mpirun --oversubscribe --mca orte_tmpdir_base "$TMPD/sess" -np 2 \
	"$DDPTRAIN" $big >"$TMPD/out" 2>"$TMPD/err" || rc=$?
[ $rc = 1 ] && grep -qE "^ddptrain: DDPTRAIN_ALLREDUCE=shm: $want$" "$TMPD/err" ||
	fail "a read-only /dev/shm, =shm: exit $rc: $(grep -v '^[- ]' "$TMPD/err" | head -3)"
echo "a read-only /dev/shm: the session directory is checked: $(grep '^ddptrain' "$TMPD/err")"
echo "shm-backing: ok"
