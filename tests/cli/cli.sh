#!/bin/bash
# --help and --version: exit 0, printed once even under mpirun; the help lists every flag.
# Alone (no launcher), --help, --version and usage errors are answered before MPI starts;
# under mpirun every rank takes part in the decision, so one rank's --version or bad flag
# ends all of them (an MPMD launch where only one rank has it must not hang).
. "$(dirname "$0")/../lib/setup.sh"

"$DDPTRAIN" --help >"$TMPD/help" || fail "--help exited $?"
grep -q -- "--layers=W0,W1,..." "$TMPD/help" || fail "--help lacks --layers"
grep -q "Exit status: 0 success, 1 runtime failure, 2 usage error, 3 stopped by a signal" "$TMPD/help" ||
	fail "--help lacks the exit statuses: $(grep -A1 'Exit status' "$TMPD/help")"
grep -q "abbreviated to a unique prefix" "$TMPD/help" || fail "--help does not say abbreviations are taken"
"$DDPTRAIN" --version >"$TMPD/version" || fail "--version exited $?"
grep -Eq '^ddptrain [0-9]+\.[0-9]+\.[0-9]+$' "$TMPD/version" || fail "--version printed: $(cat "$TMPD/version")"

# Before MPI: with MPI unable to start (no such point-to-point layer), the answers
# still come, so MPI_Init was never called for them.
export OMPI_MCA_pml=no-such-pml
"$DDPTRAIN" --help >"$TMPD/help-nompi" 2>"$TMPD/err" || fail "--help started MPI: exit $?: $(head -n 3 "$TMPD/err")"
cmp -s "$TMPD/help" "$TMPD/help-nompi" || fail "--help differs without MPI"
"$DDPTRAIN" --version >"$TMPD/v" 2>"$TMPD/err" || fail "--version started MPI: exit $?: $(head -n 3 "$TMPD/err")"
rc=0
"$DDPTRAIN" --epochs=x >"$TMPD/out" 2>"$TMPD/err" || rc=$?
[ "$rc" -eq 2 ] || fail "a usage error exited $rc, want 2 (started MPI?): $(head -n 3 "$TMPD/err")"
[ "$(cat "$TMPD/err")" = "ddptrain: --epochs: 'x' is not an integer" ] || fail "usage error said: $(cat "$TMPD/err")"
rc=0
"$DDPTRAIN" --che=x 2>"$TMPD/err" || rc=$?
[ "$rc" -eq 2 ] && [ "$(cat "$TMPD/err")" = "ddptrain: option '--che' is ambiguous: it abbreviates --checkpoint, --checkpoint-every, --check-replicas (spell it out)" ] ||
	fail "ambiguous prefix: exit $rc: $(cat "$TMPD/err")"
# ... and a run that needs MPI does start it (so the check above can fail).
"$DDPTRAIN" --max-steps=1 --quiet >/dev/null 2>&1 && fail "ddptrain trained without MPI: the check proves nothing"
unset OMPI_MCA_pml

run_mpi 3 --help >"$TMPD/help3" || fail "mpirun -np 3 ddptrain --help exited $?"
[ "$(grep -c -- '--layers=' "$TMPD/help3")" -eq 1 ] || fail "--help printed more than once under mpirun"
cmp -s "$TMPD/help" "$TMPD/help3" || fail "--help differs under mpirun"

# MPMD: the ranks' command lines differ; all end together with one answer.
# mpmd WANT_RC ARGS0 -- ARGS1: rank 0 gets ARGS0, rank 1 ARGS1 (each may be empty).
mpmd() {
	local want=$1 a0=() rc=0
	shift
	while [ "$1" != -- ]; do a0+=("$1"); shift; done
	shift
	timeout -k 5 60 mpirun --oversubscribe -np 1 "$DDPTRAIN" ${a0[@]+"${a0[@]}"} : -np 1 "$DDPTRAIN" "$@" \
		>"$TMPD/out" 2>"$TMPD/err" || rc=$?
	[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "mpirun -np 1 ddptrain ${a0[*]} : -np 1 ddptrain $*: hung"
	[ "$rc" -eq "$want" ] || fail "mpirun -np 1 ddptrain ${a0[*]} : -np 1 ddptrain $*: exit $rc, want $want: $(head -n 3 "$TMPD/err")"
}
mpmd 0 --version -- --max-steps=1
[ "$(cat "$TMPD/out")" = "$(cat "$TMPD/version")" ] || fail "--version on rank 0 only printed: $(cat "$TMPD/out")"
mpmd 0 --max-steps=1 -- --help
cmp -s "$TMPD/help" "$TMPD/out" || fail "--help on rank 1 only: $(head -n 3 "$TMPD/out")"
mpmd 2 --che=x -- --help
[ "$(grep -c '^ddptrain' "$TMPD/err")" -eq 1 ] && grep -q "^ddptrain: option '--che' is ambiguous" "$TMPD/err" ||
	fail "usage error on rank 0, --help on rank 1: $(cat "$TMPD/err")"
[ ! -s "$TMPD/out" ] || fail "printed help beside the usage error: $(head -n 2 "$TMPD/out")"
echo "cli: ok (help, version and usage errors before MPI alone; agreed by all ranks under mpirun)"
