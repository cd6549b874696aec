#!/bin/bash
# Memory errors and leaks under valgrind memcheck: one process (no mpirun)
# trains a few steps in each mode, with every file reader and writer, and
# fails on hostile files; valgrind must report no error and no definite leak.
# Open MPI's own leaks are suppressed (tests/lib/valgrind.supp names only Open
# MPI's entry points and libraries). Skipped without valgrind, and in a
# --enable-sanitizers build (ASan and valgrind do not mix).
. "$(dirname "$0")/../lib/setup.sh"

command -v valgrind >/dev/null || skip "valgrind is not installed"
! ldd "$DDPTRAIN" 2>/dev/null | grep -q libasan || skip "built with --enable-sanitizers"

C=$TOP_SRCDIR/tests/corpus
runs=0
# vg WANT_EXIT ARGS...: ddptrain under memcheck must exit WANT_EXIT (99 is valgrind's).
vg() {
	local want=$1 rc=0
	shift
	timeout -k 5 300 valgrind -q --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=99 \
		--num-callers=40 --suppressions="$TOP_SRCDIR/tests/lib/valgrind.supp" \
		"$DDPTRAIN" "$@" >"$TMPD/out" 2>"$TMPD/vg" || rc=$?
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
echo "valgrind: $runs runs, no memory errors and no definite leaks in ddptrain's code"
