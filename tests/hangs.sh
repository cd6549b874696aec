#!/bin/bash
# Hangs: the watchdog covers every collective from MPI's start-up to
# MPI_Finalize, and a graceful stop waits for a slow checkpoint write instead
# of taking it for a stall. The sick rank and the slow file system are made by
# tests/faultshim.so (LD_PRELOAD).
. "$(dirname "$0")/setup.sh"
cd "$TMPD"
SHIM=$TESTS_BUILDDIR/faultshim.so
[ -f "$SHIM" ] || skip "no $SHIM"
L="--epochs=100000 --log-every=0"

# hang_ends WANT ARGS...: an MPMD mpirun line (ARGS) must end within 20 s, not 0,
# with WANT on standard error. Open MPI 4.1's mpirun itself sometimes segfaults or hangs
# once its ranks have _exit()ed inside MPI_Finalize (about 1 run in 6 here, with any
# all-reduce): a hang counts when both ranks gave up in time and none is left.
hang_ends() {
	local want=$1 t0=$SECONDS rc=0 t1
	shift
	timeout -k 5 40 mpirun --oversubscribe "$@" >out 2>err &
	local pid=$!
	while kill -0 "$pid" 2>/dev/null && ! { grep -q -- "$want" err && ! pgrep -f "$DDPTRAIN --timeout" >/dev/null; }; do
		sleep 0.2
	done
	t1=$SECONDS
	wait "$pid" || rc=$?
	if [ $rc -eq 124 ] && grep -q -- "$want" err && ! pgrep -f "$DDPTRAIN --timeout" >/dev/null; then
		echo "(mpirun itself hung after its ranks had ended; its ranks ended after $((t1 - t0)) s)"
		rc=1
	fi
	[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "exit $rc (124: hung): $*: $(head -3 err)"
	[ $((t1 - t0)) -le 20 ] || fail "took $((t1 - t0)) s: $*"
	grep -q -- "$want" err || fail "no '$want' in: $(cat err)"
}
P="env LD_PRELOAD=$SHIM"
# 1. A rank that never starts MPI, one stalled in the first agreement, one stalled in MPI_Finalize.
hang_ends "MPI start-up did not complete within --timeout=3 s" \
	-np 1 "$DDPTRAIN" --timeout=3 : -np 1 sleep 60
# (5 s: the healthy start-up must fit in it on a busy machine)
hang_ends "agreement on the outcome did not complete within --timeout=5 s" \
	-np 1 "$DDPTRAIN" --timeout=5 : -np 1 $P DDPT_SHIM_STALL=first-collective "$DDPTRAIN" --timeout=5
hang_ends "step 2: MPI_Finalize did not complete within --timeout=5 s" \
	-np 1 "$DDPTRAIN" --timeout=5 --max-steps=2 --quiet : \
	-np 1 $P DDPT_SHIM_STALL=finalize "$DDPTRAIN" --timeout=5 --max-steps=2 --quiet
echo "start-up, first agreement and MPI_Finalize stalls: each job ended after --timeout"

# 4. A graceful stop while rank 0 writes a slow checkpoint (each fsync takes 3 s): the
#    others wait for it (before: the second rank gave up after 2 s, exit 1, a temporary left).
mpirun_bg -x LD_PRELOAD="$SHIM" -x DDPT_SHIM_SLOW_FSYNC=3 -np 2 "$DDPTRAIN" $L --checkpoint=slow.st
started
kill -USR1 "$bg"
finish 3
[ -f slow.st ] && ! ls slow.st.tmp.* >/dev/null 2>&1 || fail "slow checkpoint: $(ls)"
echo "stop during a 3 s checkpoint write: exit 3, checkpoint written"

echo "hangs: ok"
