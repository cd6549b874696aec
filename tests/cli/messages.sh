#!/bin/bash
# What ddptrain prints. File names are escaped (a newline or a terminal escape in a name
# cannot forge a log line or drive the terminal). The redrawn progress line (\r and
# \033[K) goes only to a real terminal: not to a file when a wrapper (timeout) sits
# between mpirun and ddptrain, not with TERM=dumb. Files are created with the umask's
# mode. Resuming a finished checkpoint says there is nothing to do.
. "$(dirname "$0")/../lib/setup.sh"
cd "$TMPD"

# Escaped names, in messages and in the '#' header.
expect_fail 1 '--save: no/a\nddptrain: forged: cannot create a file beside it' 2 --save=$'no/a\nddptrain: forged'
expect_fail 1 '--inputs: \x1b[31mred.npy: No such file or directory' 1 --inputs=$'\e[31mred.npy' --targets=y.npy
! grep -q $'\e' "$TMPD/stderr" || fail "an escape reached standard error"
"$MKNPY" $'x\n.npy' 100 10 f4 1
"$MKNPY" y.npy 100 5 f4 2
run_mpi 1 --inputs=$'x\n.npy' --targets=y.npy --max-steps=1 >out || fail "training on x\\n.npy"
grep -qF '(x\n.npy)' out || grep -qF 'data x\n.npy' out || fail "the name is not escaped in the header: $(cat out)"
! grep -q '^.npy' out || fail "a name broke a header line: $(cat out)"

# The progress line: redrawn only for a terminal.
R="--max-steps=3 --log-every=1"
timeout -k 5 60 mpirun -np 1 timeout 60 "$DDPTRAIN" $R >out 2>&1 || fail "mpirun timeout ddptrain"
[ "$(tr -dc '\r\033' <out | wc -c)" -eq 0 ] || fail "\\r or an escape in a file written through a wrapper: $(od -c out | head)"
if command -v script >/dev/null; then
	TERM=xterm timeout -k 5 60 script -qec "mpirun -np 1 '$DDPTRAIN' $R" /dev/null >out </dev/null ||
		fail "under script"
	[ "$(tr -dc '\033' <out | wc -c)" -gt 0 ] || fail "no redrawn line on a terminal (the check below would prove nothing)"
	TERM=dumb timeout -k 5 60 script -qec "mpirun -np 1 '$DDPTRAIN' $R" /dev/null >out </dev/null ||
		fail "under script, TERM=dumb"
	[ "$(tr -dc '\033' <out | wc -c)" -eq 0 ] || fail "escapes with TERM=dumb: $(od -c out | head)"
else
	echo "messages: no script(1): terminal cases not run"
fi

# The umask's mode for every file written.
for mask in 022 077; do
	rm -f w.st m.jsonl c.st
	(umask $mask && run_mpi 1 --max-steps=2 --save=w.st --metrics=m.jsonl --checkpoint=c.st --quiet) || fail "umask $mask run"
	want=$(printf '%o' $((0666 & ~0$mask)))
	for f in w.st m.jsonl c.st; do
		[ "$(stat -c %a $f)" = "$want" ] || fail "$f has mode $(stat -c %a $f) under umask $mask, want $want"
	done
done

# A finished checkpoint: nothing to train, said so, exit 0; --save gets its weights.
run_mpi 1 --samples=100 --epochs=2 --checkpoint=f.st --quiet || fail "finished run"
run_mpi 1 --samples=100 --epochs=2 --resume=f.st --save=w2.st >out || fail "resuming a finished checkpoint exited $?"
[ "$(cat out)" = "# --resume: f.st is complete (step 10, all --epochs done): nothing to do; --save written from it" ] ||
	fail "finished checkpoint: $(cat out)"
run_mpi 1 --samples=100 --epochs=2 --save=w1.st --quiet || fail "straight run"
"$STCOMPARE" --exact w2.st w1.st >/dev/null || fail "--save from a finished checkpoint differs from the straight run's"
echo "messages: names escaped, no escapes in files or for TERM=dumb, umask modes, nothing to do"
