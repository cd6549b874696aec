#!/bin/bash
# scripts/slurm/ddptrain.sbatch against a real single-node Slurm (slurmctld, slurmd and
# munged started here on private ports, sockets and directories; recipe in the README's
# "Slurm" section). One job, three attempts: the first is preempted with
# `scancel --signal=USR1 --batch` (ddptrain writes its checkpoint, exits 3, the script
# requeues the job); the second resumes and loses a rank to kill -9 after a periodic
# checkpoint (the script retries from it); the third finishes. The final weights equal a
# straight run's bit for bit, and every attempt's metrics file survives. Then two jobs
# whose stop comes as the script starts (before mpirun: nothing is started, the job is
# requeued) and as mpirun starts (ddptrain stops with its checkpoint, the job is requeued).
# Needs root and the Debian packages slurmctld, slurmd, slurm-client and munge; SKIP
# otherwise. About a minute: run by .ci/run, not by make check.
. "$(dirname "$0")/../lib/setup.sh"

[ "$(id -u)" -eq 0 ] || skip "starting slurmctld, slurmd and munged needs root"
export PATH=$PATH:/usr/sbin:/sbin
for c in slurmctld slurmd munged munge sbatch scontrol scancel squeue; do
	command -v "$c" >/dev/null || skip "$c not installed (apt-get install slurmctld slurmd slurm-client munge)"
done

S=$TMPD/slurm
chmod 711 "$TMPD" # munged wants its socket's directories searchable by all
mkdir -p "$S/state" "$S/spool" "$S/log"
# Stop the job, then the daemons this test started (by the pids they wrote), then remove all.
cleanup() {
	scancel --full "${job:-0}" "${early:-0}" 2>/dev/null || true
	for _ in $(seq 20); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.5; done
	for f in "$S/log/ctld.pid" "$S/log/d.pid" "$S/munged.pid"; do
		[ -s "$f" ] || continue
		p=$(cat "$f")
		kill "$p" 2>/dev/null || continue
		for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
	done
	rm -rf "$TMPD"
}
trap cleanup EXIT

dd if=/dev/urandom bs=1024 count=1 of="$S/munge.key" 2>/dev/null
chmod 400 "$S/munge.key"
munged --socket="$S/munge.sock" --key-file="$S/munge.key" --pid-file="$S/munged.pid" \
	--log-file="$S/munged.log" --seed-file="$S/munged.seed" || skip "munged does not start: $(tail -2 "$S/munged.log")"
host=$(hostname -s)
port=$((20000 + RANDOM % 20000))
export SLURM_CONF=$S/slurm.conf
cat >"$SLURM_CONF" <<CONF
ClusterName=ddpt$port
SlurmctldHost=$host
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$S/munge.sock
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldLogFile=$S/log/ctld.log
SlurmdLogFile=$S/log/d.log
SlurmctldPidFile=$S/log/ctld.pid
SlurmdPidFile=$S/log/d.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobRequeue=1
# Schedule every 2 s (default 60): a requeued job let go by "StartTime=now" starts at once.
SchedulerParameters=sched_interval=2
NodeName=$host CPUs=2 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
slurmctld && slurmd || fail "the Slurm daemons do not start: $(tail -3 "$S"/log/*.log)"
for _ in $(seq 60); do sinfo -h -o %t 2>/dev/null | grep -q idle && break; sleep 0.5; done
sinfo -h -o %t | grep -q idle || fail "the node never became idle: $(sinfo 2>&1; tail -3 "$S"/log/*.log)"

# until SECONDS COMMAND...: poll COMMAND every 0.3 s for SECONDS s at most
until_ok() {
	local n=$(($1 * 10 / 3))
	shift
	for _ in $(seq "$n"); do "$@" && return 0; sleep 0.3; done
	return 1
}
step_of() { grep -ao '"step":"[0-9]*"' "$1" 2>/dev/null | head -1 | tr -dc 0-9; }

# 300000 steps (50 per epoch at 2 ranks x 20, so 6000 epochs; about 8 s quiet): long
# enough that the USR1 and the kill -9 land while training runs. (With 2000 epochs the
# run was 100000 steps; the USR1 took effect around step 65000, and the resumed attempt
# sometimes ended before its rank could be killed.)
L="--samples=2000 --epochs=6000 --max-steps=300000 --batch-size=20 --log-every=0 --quiet"
run_mpi 2 --epochs=50 $L --save="$TMPD/straight.st" || fail "straight run"

R=$TMPD/run
job=$(sbatch --parsable --gres=none --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 --output="$TMPD/job.out" \
	--export=ALL,LAUNCHER=mpirun,DDPTRAIN="$DDPTRAIN",RUN_DIR="$R",CHECKPOINT_EVERY=3000,MPIRUN_ARGS=--oversubscribe \
	"$TOP_SRCDIR/scripts/slurm/ddptrain.sbatch" $L) || fail "sbatch refused the script"
log() { cat "$TMPD/job.out" 2>/dev/null; }

# Attempt 0: preempted once training has written its first periodic checkpoint.
until_ok 120 test -f "$R/checkpoint.safetensors" || fail "attempt 0 wrote no checkpoint: $(log)"
scancel --signal=USR1 --batch "$job"
until_ok 60 grep -q "requeued job $job" "$TMPD/job.out" || fail "no requeue after USR1: $(log)"
grep -q "Exit code: *3" "$TMPD/job.out" || fail "attempt 0 did not exit 3: $(log)"
# A requeued job waits about 2 minutes (BeginTime); let it start now.
waiting_job() { squeue -h -j "$1" -o %t:%r | grep -q '^PD:BeginTime'; }
waiting() { waiting_job "$job"; }
until_ok 30 waiting || fail "the requeued job is not pending: $(squeue -j "$job" 2>&1)"
# Let it start only once the old attempt is gone from the node, and 2 s later: slurmd
# refuses to launch a job whose previous batch step is still exiting ("already running,
# do not launch second copy": the job ends FAILED), a late terminate of the old attempt
# kills the new one's ranks, and slurmd revoked the old attempt's credential when it
# ended it and refuses a new one created in the same second (slurm_cred_revoked compares
# whole seconds: "Job credential revoked", the job ends and leaves the queue). Slurm's own
# BeginTime delay (about 2 minutes) is what prevents all three on a real cluster.
old_gone() {
	local p
	for p in $(pgrep -f "slurmstepd: \[$job\."); do # this cluster's (SLURM_CONF in its environment)
		tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qxF "SLURM_CONF=$SLURM_CONF" && return 1
	done
	sinfo -h -o %t | grep -qx idle
}
until_ok 120 old_gone || fail "the preempted attempt never left the node: $(pgrep -af slurmstepd; sinfo 2>&1)"
sleep 2
scontrol update jobid="$job" StartTime=now || fail "scontrol update StartTime"

# Attempt 1: resumes; a rank is killed after its first periodic checkpoint.
# Slurm may set the requeued job's BeginTime again after the update: repeat it while it waits.
stepped() {
	! waiting || ! old_gone || scontrol update jobid="$job" StartTime=now >/dev/null 2>&1
	[ "$(cat "$R/attempts" 2>/dev/null)" = 2 ] && [ "$(step_of "$R/checkpoint.safetensors")" -gt "$first" ]
}
first=$(step_of "$R/checkpoint.safetensors")
until_ok 120 stepped || fail "attempt 1 never checkpointed past step $first: $(log) $(scontrol show job "$job" | grep -E "JobState|Reason|StartTime"; sinfo -N -o "%N %T %E")"
killed=0
for p in $(pgrep -x ddptrain); do
	if grep -q "$R/" "/proc/$p/cmdline" 2>/dev/null; then kill -9 "$p" && killed=1; break; fi
done
[ $killed = 1 ] || fail "attempt 1 ended before a rank could be killed (checkpoint at step $first, then $(step_of "$R/checkpoint.safetensors"); attempts $(cat "$R/attempts"); ranks: $(pgrep -a ddptrain | cut -c1-150)): $(log)"

# Attempt 2: the script's retry, from the periodic checkpoint, to the end.
ended_job() { [ -z "$(squeue -h -j "$1" 2>/dev/null)" ]; }
ended() { ended_job "$job"; }
until_ok 180 ended || fail "the job did not end: $(log)"
grep -q "ddptrain failed (exit 137) in attempt 1; restart 1 of 3 from the last checkpoint" "$TMPD/job.out" &&
	grep -q "attempt 2 (requeue 1, restart 1 of 3)" "$TMPD/job.out" && grep -q "finished" "$TMPD/job.out" ||
	fail "no retry after the rank was killed: $(log)"
"$STCOMPARE" --exact "$R/model.safetensors" "$TMPD/straight.st" ||
	fail "preempted, requeued, crashed and retried: the weights differ from a straight run"
for a in 0 1 2; do
	[ -s "$R/metrics.$a.jsonl" ] && [ "$(tail -c 1 "$R/metrics.$a.jsonl" | od -An -c | tr -d ' ')" = '\n' ] ||
		fail "attempt $a's metrics did not survive: $(ls "$R"): $(log)"
done
echo "slurm: job $job: USR1 -> exit 3 -> requeue -> resume -> kill -9 -> retry -> weights of a straight run"

# A stop at the script's start and at mpirun's (issue 34: before, the first ended the batch
# shell by SIGUSR1's default action, exit 138, the job FAILED without a requeue; the second
# killed mpirun before its handler existed, or reached no rank). A hook on PATH has Slurm
# signal the batch shell (scancel --signal=USR1 --batch, as the time limit's warning does)
# from inside mkdir, the script's last command before the launcher, or from mpirun's
# wrapper just before it becomes mpirun.
Hk=$TMPD/hooks
mkdir -p "$Hk"
for c in mkdir mpirun; do
	cat >"$Hk/$c" <<EOF
#!/bin/bash
if [ "\$HOOK" = $c ]; then
	scancel --signal=USR1 --batch "\$SLURM_JOB_ID"
	[ $c != mkdir ] || sleep 2 # the signal lands while the script waits here
fi
PATH=\${PATH#"$Hk:"} exec $c "\$@"
EOF
	chmod +x "$Hk/$c"
done
# A run with no end of its own (a million epochs): only the stop ends it, however fast the
# machine is (ddptrain looks for the stop file at its first step, then once a second).
E="--samples=2000 --epochs=1000000 --batch-size=20 --log-every=0 --quiet"
for at in mkdir mpirun; do
	R=$TMPD/early-$at
	early=$(sbatch --parsable --gres=none --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 --output="$TMPD/$at.out" \
		--export=ALL,PATH="$Hk:$PATH",HOOK=$at,LAUNCHER=mpirun,DDPTRAIN="$DDPTRAIN",RUN_DIR="$R",MPIRUN_ARGS=--oversubscribe \
		"$TOP_SRCDIR/scripts/slurm/ddptrain.sbatch" $E) || fail "sbatch refused the script"
	until_ok 120 grep -qs "requeued job $early" "$TMPD/$at.out" ||
		fail "USR1 at $at: no requeue: $(cat "$TMPD/$at.out"; scontrol show job "$early" | grep -E "JobState|Reason")"
	if [ $at = mkdir ]; then
		grep -q "SIGUSR1 before attempt 0 started: not starting it" "$TMPD/$at.out" && ! grep -q "^ddptrain.sbatch: mpirun " "$TMPD/$at.out" ||
			fail "USR1 at the script's start: $(cat "$TMPD/$at.out")"
	else
		grep -q "Exit code: *3" "$TMPD/$at.out" && [ -f "$R/checkpoint.safetensors" ] ||
			fail "USR1 as mpirun starts: no exit 3 with a checkpoint: $(cat "$TMPD/$at.out")"
	fi
	until_ok 30 waiting_job "$early" || fail "USR1 at $at: the requeued job is not pending: $(squeue -j "$early" 2>&1)"
	echo "slurm: job $early: USR1 at $at -> $(grep -o 'requeued job.*' "$TMPD/$at.out")$([ $at = mkdir ] || echo ", checkpoint of step $(step_of "$R/checkpoint.safetensors")")"
	scancel --full "$early"
	until_ok 30 ended_job "$early" || fail "job $early does not end"
done
