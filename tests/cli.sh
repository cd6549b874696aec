#!/bin/bash
# --help and --version: exit 0, printed once even under mpirun; the help lists every flag.
. "$(dirname "$0")/setup.sh"

"$DDPTRAIN" --help >"$TMPD/help" || fail "--help exited $?"
grep -q -- "--layers=W0,W1,..." "$TMPD/help" || fail "--help lacks --layers"
grep -q "Exit status" "$TMPD/help" || fail "--help lacks the exit status"
"$DDPTRAIN" --version >"$TMPD/version" || fail "--version exited $?"
grep -Eq '^ddptrain [0-9]+\.[0-9]+\.[0-9]+$' "$TMPD/version" || fail "--version printed: $(cat "$TMPD/version")"

run_mpi 3 --help >"$TMPD/help3" || fail "mpirun -np 3 ddptrain --help exited $?"
[ "$(grep -c -- '--layers=' "$TMPD/help3")" -eq 1 ] || fail "--help printed more than once under mpirun"
cmp -s "$TMPD/help" "$TMPD/help3" || fail "--help differs under mpirun"
echo "cli: ok"
