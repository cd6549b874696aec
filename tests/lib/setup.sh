# tests/lib/setup.sh - sourced by every script test (jq's tests/setup shape),
# as . "$(dirname "$0")/../lib/setup.sh": $0 is then the test, in tests/.
#
# Gives: $DDPTRAIN (the binary under test), $TMPD (a private directory removed
# on exit), run_mpi NP ARGS... (mpirun with what this machine needs), skip,
# fail, expect_fail, expect_rule and expect_clean, private_shm (a /dev/shm of the
# test's own), blas_panels, panel_tol and stcompare_tol (how closely a run in row panels
# can match one without), the
# Open MPI settings a root CI machine with 2 cores needs, and the paths of the helpers
# make check builds in tests/lib/.
set -eu

: "${DDPTRAIN:=$(cd "$(dirname "$0")/../.." && pwd)/src/ddptrain}"
: "${TESTS_BUILDDIR:=$(cd "$(dirname "$0")/.." && pwd)}"
: "${TOP_SRCDIR:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${MANPAGE:=$TOP_SRCDIR/man/ddptrain.1}"
# The tools and test doubles built from tests/lib/ (check_PROGRAMS).
STCOMPARE=$TESTS_BUILDDIR/lib/stcompare
METCOMPARE=$TESTS_BUILDDIR/lib/metcompare
MKNPY=$TESTS_BUILDDIR/lib/mknpy
OPCHECK=$TESTS_BUILDDIR/lib/opcheck
GPURULES=$TESTS_BUILDDIR/lib/gpurules
FAULTSHIM=$TESTS_BUILDDIR/lib/faultshim.so
FAKE_GPU=$TESTS_BUILDDIR/lib/fake-gpu.so
BAD_GPU=$TESTS_BUILDDIR/lib/bad-gpu.so
BAD_GPU_DATA=$TESTS_BUILDDIR/lib/bad-gpu-data.so
BLASROWS=$TESTS_BUILDDIR/lib/blasrows

# CI runs as root; Open MPI refuses root without these.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Shared memory and loopback only; no fabric probing, no ssh.
export OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 OMPI_MCA_plm_rsh_agent=/bin/false
export OMPI_MCA_btl_vader_single_copy_mechanism=none

TMPD=$(mktemp -d "${TMPDIR:-/tmp}/ddptrain-test.XXXXXX")
trap 'rm -rf "$TMPD"' EXIT

# private_shm SIZE: go on in a private mount namespace with a tmpfs of SIZE on /dev/shm,
# where Open MPI's shared-memory files are this test's alone (the test starts again there,
# with a new $TMPD); SKIP where that cannot be had (not root, unshare or mount refused).
private_shm() {
	if [ "${DDPT_PRIVATE_SHM:-}" != 1 ]; then
		[ "$(id -u)" -eq 0 ] || skip "a private /dev/shm needs root (unshare -m)"
		unshare -m --propagation private true 2>/dev/null || skip "unshare -m is refused here"
		rm -rf "$TMPD"
		DDPT_PRIVATE_SHM=1 exec unshare -m --propagation private bash "$0"
	fi
	mount -t tmpfs -o size="$1" tmpfs /dev/shm 2>/dev/null || skip "cannot mount a tmpfs on /dev/shm"
}

# mpirun with --oversubscribe (2 cores here, tests use up to 4 ranks) and a timeout,
# so a hang fails the test instead of stalling make check.
run_mpi() {
	local np=$1
	shift
	timeout -k 5 120 mpirun --oversubscribe -np "$np" "$DDPTRAIN" "$@"
}

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

# blas_panels: PANELS is "exact" where this process's BLAS computes a row panel of a
# product bit for bit as it computes those rows of the whole product ($BLASROWS asks it),
# else 1e-5, with a line saying why. A run whose backward goes in row panels (--zero=2
# with layers larger than the bucket cap) then gets each gradient float as the same dot
# product summed in another order, within tests/lib/blasrows.h's bound (a few units in
# the last place of the sum of |terms|). Training carries that on: SGD shrinks it by the
# learning rate, but AdamW divides each gradient by its own RMS, so a gradient near zero
# keeps its rounding at full size. Measured on OpenBLAS's Haswell kernels over
# tests/numerics/zero.sh's 24-step runs: at most 5.8e-7 of a tensor's largest weight with SGD or
# AdamW, 4.5e-6 with AdamW and clipping; 1e-5 is ring.sh's bound for sums over the
# batch in another order.
blas_panels() {
	local out rc=0
	out=$("$BLASROWS") || rc=$?
	case $rc in
	0) PANELS=exact ;;
	1)
		PANELS=1e-5
		echo "row panels compared within $PANELS, not bit for bit: $(tail -n 1 <<<"$out")"
		;;
	*) fail "blasrows (exit $rc): $(tail -n 1 <<<"$out")" ;;
	esac
}

# panel_tol TOL: the tolerance for a comparison with a run that computes row panels, for
# one that would be TOL without them: TOL where PANELS is exact, else the looser of TOL
# ("exact" or a number) and PANELS.
panel_tol() {
	if [ "$PANELS" = exact ] || { [ "$1" != exact ] && awk -v t="$1" -v p="$PANELS" 'BEGIN { exit !(t >= p) }'; }; then
		echo "$1"
	else
		echo "$PANELS"
	fi
}

# stcompare_tol TOL A B: $STCOMPARE --exact A B where TOL is "exact", else $STCOMPARE A B TOL.
stcompare_tol() {
	if [ "$1" = exact ]; then
		"$STCOMPARE" --exact "$2" "$3"
	else
		"$STCOMPARE" "$2" "$3" "$1"
	fi
}

skip() {
	echo "SKIP: $*"
	exit 77
}

# expect_fail CODE SUBSTRING NP ARGS...: run ddptrain on NP ranks, each through a shell that
# records its exit code, so mpirun itself succeeds; every rank must exit CODE within 20 s
# and standard error must be one line holding SUBSTRING. Leaves $TMPD/stdout, $TMPD/stderr.
# NP "alone": one process without mpirun, as a user types it (usage errors are then
# decided before MPI starts, and cost nothing).
expect_fail() {
	local code=$1 want=$2 np=$3 t0=$SECONDS el
	shift 3
	rm -f "$TMPD"/rc.*
	if [ "$np" = alone ]; then
		np=1
		timeout -k 5 60 "$DDPTRAIN" "$@" >"$TMPD/stdout" 2>"$TMPD/stderr" && echo 0 >"$TMPD/rc.0" ||
			echo $? >"$TMPD/rc.0"
	else
		RCDIR=$TMPD timeout -k 5 60 mpirun --oversubscribe -np "$np" \
			bash -c '"$0" "$@"; echo $? >"$RCDIR/rc.$OMPI_COMM_WORLD_RANK"' "$DDPTRAIN" "$@" \
			>"$TMPD/stdout" 2>"$TMPD/stderr" || fail "mpirun itself failed ($?) for: $*: $(tail -n 5 "$TMPD/stderr")"
	fi
	el=$((SECONDS - t0))
	[ "$el" -le 20 ] || fail "took ${el}s: $*"
	for r in $(seq 0 $((np - 1))); do
		[ -f "$TMPD/rc.$r" ] || fail "rank $r left no exit code: $*"
		[ "$(cat "$TMPD/rc.$r")" = "$code" ] ||
			fail "rank $r exited $(cat "$TMPD/rc.$r"), want $code: $* ($(cat "$TMPD/stderr"))"
	done
	[ "$(wc -l <"$TMPD/stderr")" -eq 1 ] || fail "want one line on stderr: $*: $(cat "$TMPD/stderr")"
	grep -qF -- "$want" "$TMPD/stderr" || fail "message lacks '$want': $(cat "$TMPD/stderr")"
}

# expect_rule NP SCENARIO WANT: $GPURULES breaks the rule SCENARIO names on NP ranks
# against the module in DDPTRAIN_CUDA_MODULE (the fake GPU, or the real one linked
# against the stub CUDA libraries): its exit status is not 0 and its output matches WANT
# (a grep pattern). expect_clean NP SCENARIO: it exits 0. Both leave the output in out.
expect_rule() {
	local rc=0
	timeout -k 5 60 mpirun --oversubscribe -np "$1" "$GPURULES" "$2" >out 2>&1 || rc=$?
	[ $rc -ne 0 ] && grep -q -- "$3" out || fail "gpurules $2 (exit $rc): $(grep -v '^[- ]' out | head -3)"
}
expect_clean() {
	timeout -k 5 60 mpirun --oversubscribe -np "$1" "$GPURULES" "$2" >out 2>&1 ||
		fail "gpurules $2 on $1 ranks: $(grep -v '^[- ]' out | head -3)"
}

# host_waits RUN STEPS ARGS...: rank 0's host waits (host_waits in stats.0 here, which the
# fake GPU or the stub CUDA runtime writes at exit where its stats variable says) in a
# 2-rank run of STEPS steps, eager and then with graphs; RUN runs the ranks, given the
# ddptrain arguments (a word: "clean_run 2", "clean np=2").
host_waits() {
	local run=$1 n=$2 g w=
	shift 2
	for g in 0 1; do
		rm -f stats.*
		DDPTRAIN_CUDA_GRAPHS=$g $run --samples=4000 --batch-size=20 --max-steps="$n" --log-every=0 --quiet "$@"
		w="$w $(awk '$1 == "host_waits" { print $2 }' stats.0)"
	done
	echo $w
}

# mpirun_bg ARGS...: mpirun in the background; $bg is mpirun's pid. started: training began.
mpirun_bg() {
	mpirun --oversubscribe "$@" >bg.out 2>bg.err &
	bg=$!
}
started() {
	for _ in $(seq 1 300); do grep -q "^# buckets:" bg.out 2>/dev/null && return 0; sleep 0.1; done
	fail "the background run did not start: $(cat bg.err)"
}
finish() { # WANT: mpirun's exit code
	local rc=0
	wait "$bg" || rc=$?
	[ $rc -eq "$1" ] || fail "exit $rc, want $1: $(grep -v '^[- ]*$' bg.err | head -5)"
}
