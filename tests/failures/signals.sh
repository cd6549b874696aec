#!/bin/bash
# Stop signals: SIGHUP is a stop like SIGTERM, and so is a signal during MPI's
# start-up; a second signal removes the temporary file being written; a closed
# standard output stops the printing, not the run. The slow file system is
# tests/lib/faultshim.so (LD_PRELOAD).
. "$(dirname "$0")/../lib/setup.sh"
cd "$TMPD"
SHIM=$FAULTSHIM
[ -f "$SHIM" ] || skip "no $SHIM"
L="--epochs=100000 --log-every=0"

# 15. SIGHUP is a graceful stop.
mpirun_bg -np 2 "$DDPTRAIN" $L --checkpoint=hup.st
started
kill -HUP "$(pgrep -P "$bg" -f -- "--checkpoint=hup.st" | head -1)"
finish 3
[ -f hup.st ] || fail "SIGHUP: no checkpoint"

# 16. SIGTERM during MPI's start-up (made 2 s longer): a graceful stop (before: the
#     handlers came after MPI_Init, and the signal killed it, exit 143).
LD_PRELOAD=$SHIM DDPT_SHIM_SLOW_INIT=2 "$DDPTRAIN" $L --checkpoint=early.st >early.out 2>early.err &
p=$!
sleep 1
kill -TERM $p
rc=0; wait $p || rc=$?
[ $rc -eq 3 ] && [ -f early.st ] || fail "SIGTERM during start-up: exit $rc: $(cat early.err)"
echo "SIGHUP, and SIGTERM during MPI start-up: exit 3 with a checkpoint"

# 12. A second signal while --save is being written (slow fsync) removes the temporary.
LD_PRELOAD=$SHIM DDPT_SHIM_SLOW_FSYNC=30 "$DDPTRAIN" --max-steps=2 --quiet --save=two.st 2>two.err &
p=$!
for _ in $(seq 1 100); do ls two.st.tmp.* >/dev/null 2>&1 && break; sleep 0.1; done
ls two.st.tmp.* >/dev/null 2>&1 || fail "no temporary file appeared"
kill -TERM $p
sleep 0.2
kill -TERM $p
rc=0; wait $p || rc=$?
[ $rc -eq 143 ] || fail "second signal: exit $rc: $(cat two.err)"
! ls two.st* >/dev/null 2>&1 || fail "second signal left: $(ls two.st*)"
echo "second signal while writing --save: exit 143, no file left"

# A second signal after the stop's checkpoint is written (here while MPI_Finalize stalls,
# as mpirun's SIGTERM reaches the other ranks once one has exited 3): still a resumable
# stop, exit 3, and it says the checkpoint is written (before: 143).
LD_PRELOAD=$SHIM DDPT_SHIM_STALL=finalize "$DDPTRAIN" $L --checkpoint=late.st >late.out 2>late.err &
p=$!
for _ in $(seq 1 300); do grep -q "^# buckets:" late.out 2>/dev/null && break; sleep 0.1; done
kill -TERM $p
for _ in $(seq 1 100); do [ -f late.st ] && break; sleep 0.1; done
[ -f late.st ] || fail "no stop checkpoint: $(cat late.err)"
sleep 0.5
kill -TERM $p
rc=0; wait $p || rc=$?
[ $rc -eq 3 ] && grep -q "second signal: stopping now; the checkpoint is written" late.err ||
	fail "second signal after the stop's checkpoint: exit $rc: $(cat late.err)"
echo "second signal after the stop's checkpoint: exit 3"

# A stop signal once the run is over (trained, --save written, the outcome agreed) while
# MPI_Finalize is slow (here it stalls; a singleton's under load took over 2 s in
# stops.sh): after the stop's grace the process ends with the run's status, 0, not 1
# (before: "asked to stop, but MPI_Finalize has waited 2 s for another rank: stopping
# without a checkpoint", exit 1, for a run whose files were all written).
LD_PRELOAD=$SHIM DDPT_SHIM_STALL=finalize "$DDPTRAIN" --max-steps=3 --save=over.st >over.out 2>over.err &
p=$!
for _ in $(seq 1 300); do grep -q "^# summary:" over.out 2>/dev/null && break; sleep 0.1; done
grep -q "^# summary:" over.out || fail "the run did not finish: $(cat over.err)"
sleep 0.5
kill -TERM $p
rc=0; wait $p || rc=$?
[ $rc -eq 0 ] && [ -f over.st ] &&
	grep -q "asked to stop, but MPI_Finalize has waited [0-9]* s: ending now with the run's exit status 0 (the run was over and its files written)" over.err ||
	fail "a stop while MPI_Finalize stalls after the run: exit $rc: $(cat over.err)"
echo "a stop after the run, MPI_Finalize stalled: exit 0, the run's status"

# --stop-file: a stop as SIGUSR1 is, once the file exists (issue 34, item 4: the batch
# scripts' way, since a signal to mpirun as it starts kills it or is lost). There from
# the start: every rank stops after step 1 with its checkpoint, which resumes to the
# straight run; made while a dp run trains: it stops within about a second.
: >stop-now
run_mpi 2 --max-steps=4 --quiet --save=straight4.st || fail "straight run"
rc=0
run_mpi 2 --max-steps=4 --checkpoint=sf.st --stop-file=stop-now >sf.out 2>&1 || rc=$?
[ $rc -eq 3 ] && grep -q "stopped by a signal after step 1 of 4: checkpoint written" sf.out ||
	fail "--stop-file there from the start: exit $rc: $(cat sf.out)"
run_mpi 2 --max-steps=4 --quiet --resume=sf.st --save=resumed4.st || fail "resume after --stop-file"
"$STCOMPARE" --exact resumed4.st straight4.st || fail "stopped by --stop-file and resumed: the weights differ"
"$DDPTRAIN" --mode=dp $L --quiet --checkpoint=dpsf.st --stop-file=stop-later 2>dpsf.err &
p=$!
sleep 0.5
mkdir stop-later # any kind of file
rc=0; wait $p || rc=$?
[ $rc -eq 3 ] && [ -f dpsf.st ] || fail "--mode=dp, --stop-file made while training: exit $rc: $(cat dpsf.err)"
rc=0
"$DDPTRAIN" --stop-file= 2>sf.err || rc=$?
[ $rc -eq 2 ] && [ "$(cat sf.err)" = "ddptrain: --stop-file: empty file name" ] || fail "--stop-file=: exit $rc: $(cat sf.err)"
echo "--stop-file: there at start, stop after step 1 and a bit-identical resume; made during a dp run, exit 3"

# 15. A closed standard output (| head -1) stops the printing, not the run (before: SIGPIPE, 141).
"$DDPTRAIN" --epochs=200 --log-every=1 --save=pipe.st 2>pipe.err | head -1 >/dev/null
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] && [ -f pipe.st ] || fail "stdout closed: exit $rc: $(cat pipe.err)"
grep -q "standard output was closed: training goes on" pipe.err || fail "no note: $(cat pipe.err)"
echo "signals: ok"
