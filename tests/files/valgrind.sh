#!/bin/bash
# Memory errors and leaks under valgrind memcheck: one process (no mpirun)
# trains a few steps in each mode, with every file reader and writer, and
# fails on hostile files; two ranks under mpirun, one failing its set-up;
# valgrind must report no error and no definite leak.
# Open MPI's own leaks are suppressed (tests/lib/valgrind.supp names only Open
# MPI's entry points and libraries). Skipped without valgrind, and in a
# --enable-sanitizers build (ASan and valgrind do not mix).
. "$(dirname "$0")/../lib/setup.sh"

command -v valgrind >/dev/null || skip "valgrind is not installed"
! ldd "$DDPTRAIN" 2>/dev/null | grep -q libasan || skip "built with --enable-sanitizers"

C=$TOP_SRCDIR/tests/corpus
runs=0
VG=(valgrind -q --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=99
	--num-callers=40 --suppressions="$TOP_SRCDIR/tests/lib/valgrind.supp")
# vg WANT_EXIT ARGS...: ddptrain under memcheck must exit WANT_EXIT (99 is valgrind's).
vg() {
	local want=$1 rc=0
	shift
	timeout -k 5 300 "${VG[@]}" "$DDPTRAIN" "$@" >"$TMPD/out" 2>"$TMPD/vg" || rc=$?
	[ "$rc" -eq "$want" ] || fail "exit $rc, want $want, under valgrind: $*: $(grep -v '^ddptrain' "$TMPD/vg" | head -60)"
	! grep -q '^==[0-9]*== ' "$TMPD/vg" || fail "valgrind reported: $*: $(head -60 "$TMPD/vg")"
	runs=$((runs + 1))
}

vg 0 --max-steps=5 --quiet
vg 0 --inputs="$C/good-x.npy" --targets="$C/good-y.npy" --init="$C/good.safetensors" --max-steps=5 \
	--save="$TMPD/w.st" --metrics="$TMPD/m.jsonl" --log-every=1
vg 0 --mode=dp --replicas=2 --max-steps=5 --momentum=0.9 --save="$TMPD/w.st"
vg 1 --init="$C/st-trailing-data.safetensors" --quiet
vg 1 --inputs="$C/npy-digits-at-eof.npy" --targets="$C/good-y.npy" --quiet
vg 1 --save="$TMPD/no/such/dir/w.st" --quiet
# Two ranks, rank 1 out of pinned memory in the loader's set-up (the fake GPU fails its
# first host_alloc): rank 0's loader had started and must be freed too (before: its
# sampler, 480 bytes, definitely lost).
if [ -f "$FAKE_GPU" ]; then
	rc=0
	DDPTRAIN_CUDA_MODULE=$FAKE_GPU DDPT_FAKE_HOST_ALLOC_FAIL=1@1 timeout -k 5 300 mpirun --oversubscribe -np 2 \
		"${VG[@]}" --log-file="$TMPD/vg.%q{OMPI_COMM_WORLD_RANK}" "$DDPTRAIN" \
		--samples=80 --batch-size=20 --epochs=1 --quiet --device=cuda --timeout=60 >"$TMPD/out" 2>"$TMPD/err" || rc=$?
	for r in 0 1; do
		[ -f "$TMPD/vg.$r" ] || fail "no valgrind log of rank $r of 2: $(head -5 "$TMPD/err")"
		! grep -q '^==[0-9]*== ' "$TMPD/vg.$r" || fail "valgrind reported on rank $r of 2: $(head -60 "$TMPD/vg.$r")"
	done
	[ "$rc" -eq 1 ] && grep -q "rank 1: loader: out of host memory" "$TMPD/err" ||
		fail "2 ranks, rank 1 out of pinned memory: exit $rc: $(head -5 "$TMPD/err")"
	runs=$((runs + 1))
fi
echo "valgrind: $runs runs, no memory errors and no definite leaks in ddptrain's code"
