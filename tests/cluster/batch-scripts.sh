#!/bin/bash
# The cluster scripts (Slurm, PBS, run-local) parse, print under DRY_RUN=1 the
# launch command the scheduler's allocation calls for (with --resume only when
# the checkpoint exists), and, run for real against stand-in launchers and
# scheduler commands, pass the stop signal to the ranks and requeue on exit 3.
. "$(dirname "$0")/../lib/setup.sh"

S=$TOP_SRCDIR/scripts
SBATCH=$S/slurm/ddptrain.sbatch
PBS=$S/pbs/ddptrain.pbs
LOCAL=$S/run-local.sh

for f in "$SBATCH" "$PBS" "$LOCAL"; do
	bash -n "$f" || fail "bash -n $f"
done

# Scheduler directives count only above the first command line.
directives_on_top() {
	awk -v want="$2" '
		/^[ \t]*$/ || /^#/ { if (index($0, want) == 1) n++; next }
		{ exit }
		END { print n + 0 }' "$1"
}
[ "$(directives_on_top "$SBATCH" "#SBATCH")" -eq "$(grep -c '^#SBATCH' "$SBATCH")" ] ||
	fail "an #SBATCH line comes after the first command"
[ "$(directives_on_top "$PBS" "#PBS")" -eq "$(grep -c '^#PBS' "$PBS")" ] ||
	fail "a #PBS line comes after the first command"
for d in '--ntasks-per-node=' '--gres=gpu:' '--signal=B:USR1@' '--requeue'; do
	grep -q "^#SBATCH $d" "$SBATCH" || fail "ddptrain.sbatch lacks #SBATCH $d"
done
for d in '-r y' '-l walltime=' '-l select='; do
	grep -q "^#PBS $d" "$PBS" || fail "ddptrain.pbs lacks #PBS $d"
done

# Stand-ins for the launchers and the scheduler's commands: each logs its
# command line to $FAKE_LOG. A launcher starts as mpirun does: for FAKE_STARTUP
# seconds (default 0) a signal ends it by its default action, as it ends mpirun
# before its handlers exist. Then it exits FAKE_RC at once, or with FAKE_RC=wait
# says "ready" and waits for its --stop-file, as ddptrain does: once the file is
# there it writes its --checkpoint and exits 3 (ddptrain's graceful stop). Any
# signal that reaches it after its start is logged ("got SIG"): the scripts tell
# a stop through the file, never by signalling the launcher.
# The hook: the command named FAKE_HOOK (the launcher, mkdir, qstat, nvidia-smi or
# a scheduler command) first sends FAKE_SIG (USR1) to the script, FAKE_TARGET (the
# pid the script runs as, from run_hooked), so the stop lands at that moment.
B=$TMPD/bin
mkdir -p "$B"
cat >"$B/hook" <<'EOF'
# sourced: signal the script when this command is the hooked one
if [ "${FAKE_HOOK:-}" = "$(basename "$0")" ]; then
	echo "hook: SIG${FAKE_SIG:-USR1} at $(basename "$0")" >>"$FAKE_LOG"
	kill -"${FAKE_SIG:-USR1}" "$FAKE_TARGET"
fi
EOF
cat >"$B/launcher" <<'EOF'
#!/bin/bash
. "$(dirname "$0")/hook"
echo "$(basename "$0") $*" >>"$FAKE_LOG"
read -r -a st </proc/$$/stat
echo "pgid ${st[4]}" >>"$FAKE_LOG"
sleep "${FAKE_STARTUP:-0}"
for s in USR1 INT TERM HUP; do
	# shellcheck disable=SC2064
	trap "echo 'got $s' >>\"\$FAKE_LOG\"; exit 1" $s
done
if [ "${FAKE_RC:-0}" != wait ]; then exit "${FAKE_RC:-0}"; fi
sf= ck=
for a in "$@"; do
	case $a in --stop-file=*) sf=${a#*=} ;; --checkpoint=*) ck=${a#*=} ;; esac
done
echo ready >>"$FAKE_LOG"
for _ in $(seq 300); do
	if [ -n "$sf" ] && [ -e "$sf" ]; then
		echo "stop file seen" >>"$FAKE_LOG"
		[ -z "$ck" ] || echo checkpoint >"$ck"
		exit 3
	fi
	sleep 0.1
done
echo "not stopped" >>"$FAKE_LOG"
exit 1
EOF
cat >"$B/sched" <<'EOF'
#!/bin/bash
. "$(dirname "$0")/hook"
echo "$(basename "$0") $*" >>"$FAKE_LOG"
exit "${FAKE_SCHED_RC:-0}"
EOF
# mkdir: the last command the batch scripts run before the launcher.
cat >"$B/mkdir" <<'EOF'
#!/bin/bash
. "$(dirname "$0")/hook"
PATH=${PATH#"$(dirname "$0"):"} exec mkdir "$@"
EOF
cat >"$B/gpus" <<'EOF'
#!/bin/sh
# nvidia-smi -L with FAKE_GPUS GPUs; none: fail as nvidia-smi does without a driver.
. "$(dirname "$0")/hook"
[ "${FAKE_GPUS:-0}" -gt 0 ] || { echo "NVIDIA-SMI has failed" >&2; exit 9; }
for i in $(seq 0 $((FAKE_GPUS - 1))); do echo "GPU $i: NVIDIA H100 (UUID: GPU-$i)"; done
EOF
chmod +x "$B/launcher" "$B/sched" "$B/gpus" "$B/mkdir"
for n in srun mpirun; do ln -s launcher "$B/$n"; done
for n in scontrol qrerun qsub qstat; do ln -s sched "$B/$n"; done
ln -s gpus "$B/nvidia-smi"
export PATH=$B:$PATH FAKE_LOG=$TMPD/log

# has OUT WORD...: every WORD is in OUT
has() {
	local out=$1 w
	shift
	for w in "$@"; do
		case " $out " in *" $w "*) ;; *) fail "'$w' not in: $out" ;; esac
	done
}
lacks() {
	case " $1 " in *"$2"*) fail "'$2' in: $1" ;; esac
}
# run_hooked COMMAND...: run it with FAKE_TARGET set to its own pid (exec keeps the pid)
run_hooked() {
	bash -c 'export FAKE_TARGET=$$; exec "$@"' run_hooked "$@"
}
# no_signal: no signal reached the launcher
no_signal() {
	! grep -q "^got " "$FAKE_LOG" || fail "a signal reached the launcher: $(cat "$FAKE_LOG")"
}
# wait_for TEXT: until the fake log holds TEXT (5 s at most)
wait_for() {
	for _ in $(seq 50); do
		grep -q "$1" "$FAKE_LOG" 2>/dev/null && return 0
		sleep 0.1
	done
	fail "no '$1' in the log: $(cat "$FAKE_LOG" 2>/dev/null)"
}
checks=0

# ---- Slurm ----
R=$TMPD/slurm
mkdir -p "$R"
# What Slurm sets for sbatch --nodes=2 --ntasks-per-node=4, as env arguments
# (env, not a shell function, so that $! of a background run is the script's pid).
slurm_env=(env SLURM_JOB_ID=4242 SLURM_NNODES=2 SLURM_JOB_NUM_NODES=2 SLURM_NTASKS_PER_NODE=4 SLURM_NTASKS=8
	SLURM_SUBMIT_DIR="$R" DDPTRAIN=/opt/ddptrain/bin/ddptrain DDPTRAIN_ARGS="--layers=10,64,5 --epochs=9")
out=$("${slurm_env[@]}" DRY_RUN=1 SLURM_CPUS_PER_TASK=8 "$SBATCH" --lr=0.01) || fail "sbatch dry run exited $?"
has "$out" srun --mpi=pmix --nodes=2 --ntasks=8 --ntasks-per-node=4 --cpus-per-task=8 /opt/ddptrain/bin/ddptrain \
	--layers=10,64,5 --epochs=9 --checkpoint="$R/ddptrain-4242/checkpoint.safetensors" --checkpoint-every=1000 \
	--save="$R/ddptrain-4242/model.safetensors" --metrics="$R/ddptrain-4242/metrics.0.jsonl" --lr=0.01
lacks "$out" --resume
[ "${out##* }" = --lr=0.01 ] || fail "the script's arguments do not come last: $out"
[ ! -e "$R/ddptrain-4242" ] || fail "a dry run made the run directory"
echo "slurm dry run: $out"
checks=$((checks + 1))

mkdir -p "$R/ddptrain-4242"
: >"$R/ddptrain-4242/checkpoint.safetensors"
out=$("${slurm_env[@]}" DRY_RUN=1 SLURM_RESTART_COUNT=1 LAUNCHER=mpirun MPIRUN_ARGS="--mca btl self,tcp" "$SBATCH") ||
	fail "sbatch dry run (mpirun) exited $?"
has "$out" mpirun -np 8 --map-by ppr:4:node --bind-to none --mca btl self,tcp /opt/ddptrain/bin/ddptrain \
	--resume="$R/ddptrain-4242/checkpoint.safetensors" --metrics="$R/ddptrain-4242/metrics.1.jsonl"
lacks "$out" srun
echo "slurm dry run, resuming: $out"
checks=$((checks + 1))

"${slurm_env[@]}" DRY_RUN=1 LAUNCHER=aprun "$SBATCH" >/dev/null 2>"$TMPD/err" && fail "LAUNCHER=aprun accepted"
grep -q "LAUNCHER='aprun' is not one of srun|mpirun" "$TMPD/err" || fail "LAUNCHER message: $(cat "$TMPD/err")"

# The warning signal reaches ddptrain through its stop file and exit 3 requeues the job.
: >"$FAKE_LOG"
"${slurm_env[@]}" FAKE_RC=wait "$SBATCH" >"$TMPD/out" 2>&1 &
pid=$!
wait_for ready
kill -USR1 "$pid"
rc=0
wait "$pid" || rc=$?
[ "$rc" -eq 0 ] || fail "sbatch script exited $rc after a graceful stop: $(cat "$TMPD/out")"
grep -qx "stop file seen" "$FAKE_LOG" || fail "the launcher never saw the stop file: $(cat "$FAKE_LOG")"
no_signal
grep -qx "scontrol requeue 4242" "$FAKE_LOG" || fail "no scontrol requeue: $(cat "$FAKE_LOG")"
grep -q "^srun .*--resume=$R/ddptrain-4242/checkpoint.safetensors" "$FAKE_LOG" || fail "no --resume: $(cat "$FAKE_LOG")"
grep -q "^srun .*--stop-file=$R/ddptrain-4242/stop" "$FAKE_LOG" || fail "no --stop-file: $(cat "$FAKE_LOG")"
[ ! -e "$R/ddptrain-4242/stop" ] || fail "the stop file outlived the launcher"
echo "slurm: SIGUSR1 -> stop file -> exit 3 -> $(grep "^scontrol" "$FAKE_LOG")"
checks=$((checks + 1))
# Slurm's own SIGTERM is a stop too, told the same way (mpirun kills the ranks on SIGTERM).
: >"$FAKE_LOG"
"${slurm_env[@]}" FAKE_RC=wait LAUNCHER=mpirun "$SBATCH" >"$TMPD/out" 2>&1 &
pid=$!
wait_for ready
kill -TERM "$pid"
wait "$pid" || fail "sbatch script exited $? after SIGTERM: $(cat "$TMPD/out")"
grep -qx "stop file seen" "$FAKE_LOG" && no_signal || fail "SIGTERM was not told through the stop file: $(cat "$FAKE_LOG")"
checks=$((checks + 1))

# A stop at any moment of the script (issue 34): as it starts (mkdir, the last command
# before the launcher: nothing is started, the job is requeued), while the launcher
# starts (FAKE_STARTUP: a signal then would kill mpirun; the stop must wait in the file
# until ddptrain looks, which then saves and exits 3), and after ddptrain ended (exit 3
# of its own, then the stop during the requeue: nothing changes). Before, the first two ended the script or the launcher
# by the signal's default action: exit 138 or 143, nothing saved, no requeue.
for c in "mkdir USR1" "mkdir TERM" "srun USR1" "srun TERM" "scontrol USR1"; do
	read -r at sig <<<"$c"
	: >"$FAKE_LOG"
	rm -rf "$R/ddptrain-4242"
	frc="wait"
	[ "$at" != scontrol ] || frc=3
	rc=0
	run_hooked "${slurm_env[@]}" FAKE_HOOK="$at" FAKE_SIG="$sig" FAKE_STARTUP=0.5 FAKE_RC=$frc "$SBATCH" \
		>"$TMPD/out" 2>&1 || rc=$?
	[ "$rc" -eq 0 ] || fail "SIG$sig at $at: sbatch script exited $rc, want 0 (requeued): $(cat "$TMPD/out" "$FAKE_LOG")"
	grep -qx "scontrol requeue 4242" "$FAKE_LOG" || fail "SIG$sig at $at: no requeue: $(cat "$FAKE_LOG")"
	no_signal
	case $at in
	mkdir)
		! grep -q "^srun " "$FAKE_LOG" || fail "SIG$sig at mkdir: the launcher was started: $(cat "$FAKE_LOG")"
		grep -q "SIG$sig before attempt 0 started: not starting it" "$TMPD/out" &&
			grep -q "requeued job 4242, it starts from the beginning (no checkpoint yet)" "$TMPD/out" ||
			fail "SIG$sig at mkdir: $(cat "$TMPD/out")"
		;;
	srun)
		grep -qx "stop file seen" "$FAKE_LOG" && [ -s "$R/ddptrain-4242/checkpoint.safetensors" ] ||
			fail "SIG$sig as the launcher starts: no stop, no checkpoint: $(cat "$FAKE_LOG" "$TMPD/out")"
		grep -q "requeued job 4242, it resumes from $R/ddptrain-4242/checkpoint.safetensors" "$TMPD/out" ||
			fail "SIG$sig as the launcher starts: $(cat "$TMPD/out")"
		;;
	scontrol)
		[ "$(grep -c '^srun ' "$FAKE_LOG")" -eq 1 ] || fail "SIG$sig during the requeue: $(cat "$FAKE_LOG")"
		;;
	esac
	echo "slurm: SIG$sig at $at -> exit $rc, $(grep -c '^srun ' "$FAKE_LOG") launches, $(grep "^scontrol" "$FAKE_LOG")"
	checks=$((checks + 1))
done
# No requeue after a normal end, a failure, a finished run that lost an observer's output
# (exit 4), or MAX_RESTARTS restarts; a refused requeue keeps exit 3.
for c in "0 0 0" "1 1 0" "4 4 0" "3 3 20" "3 3 0 refused"; do
	read -r frc want restarts refused <<<"$c"
	: >"$FAKE_LOG"
	rc=0
	"${slurm_env[@]}" FAKE_RC="$frc" SLURM_RESTART_COUNT="$restarts" FAKE_SCHED_RC="${refused:+1}" \
		"$SBATCH" >"$TMPD/out" 2>&1 || rc=$?
	[ "$rc" -eq "$want" ] || fail "launcher exit $frc, $restarts restarts: script exited $rc, want $want"
	if [ "$frc" = 3 ] && [ "$restarts" = 0 ]; then
		grep -q "scontrol requeue" "$FAKE_LOG" || fail "no requeue attempt: $(cat "$FAKE_LOG")"
		grep -q "requeue refused: resubmit with RUN_DIR=" "$TMPD/out" || fail "refusal: $(cat "$TMPD/out")"
	else
		grep -q "scontrol" "$FAKE_LOG" && fail "requeued after launcher exit $frc, $restarts restarts"
	fi
	checks=$((checks + 1))
done

# A crash is retried MAX_RESTARTS times (default 3, or --max-restarts=N), each attempt
# numbered in the log and in its metrics file; exit 2 (bad options) is not retried, nor
# exit 4 (finished and saved, an observer's output incomplete).
for c in "1 3 4" "137 1 2" "2 3 1" "4 3 1"; do
	read -r frc max launches <<<"$c"
	: >"$FAKE_LOG"
	rm -rf "$R/ddptrain-4242"
	rc=0
	"${slurm_env[@]}" FAKE_RC="$frc" "$SBATCH" --max-restarts="$max" >"$TMPD/out" 2>&1 || rc=$?
	[ "$rc" -eq "$frc" ] || fail "launcher exit $frc: script exited $rc: $(cat "$TMPD/out")"
	[ "$(grep -c '^srun ' "$FAKE_LOG")" -eq "$launches" ] || fail "launcher exit $frc, --max-restarts=$max: $(grep -c '^srun ' "$FAKE_LOG") launches, want $launches"
	grep -q -- "--max-restarts" "$FAKE_LOG" && fail "--max-restarts reached ddptrain"
	last=$((launches - 1))
	grep -q "^srun .*--metrics=$R/ddptrain-4242/metrics.$last.jsonl" "$FAKE_LOG" &&
		grep -q "attempt $last (requeue 0, restart $last of $max)" "$TMPD/out" || fail "attempt $last not numbered: $(cat "$TMPD/out")"
	# Each restart says where it starts (no checkpoint was written), and the end says why.
	if [ "$frc" = 2 ]; then
		grep -q "refused its options (exit 2); not restarted" "$TMPD/out" || fail "exit 2: $(cat "$TMPD/out")"
	elif [ "$frc" = 4 ]; then
		grep -q "incomplete (exit 4; see the log); not run again" "$TMPD/out" || fail "exit 4: $(cat "$TMPD/out")"
	else
		grep -q "restart 1 of $max from the start (no checkpoint written yet)" "$TMPD/out" &&
			! grep -q "from the last checkpoint" "$TMPD/out" || fail "restart from a checkpoint that is not there: $(cat "$TMPD/out")"
		[ "$(tail -n 1 "$TMPD/out")" = "ddptrain.sbatch: gave up: ddptrain failed (exit $frc) in attempt $last, after $max of $max restarts" ] ||
			fail "no 'gave up' line: $(cat "$TMPD/out")"
	fi
	checks=$((checks + 1))
done

# ---- PBS ----
R=$TMPD/pbs
mkdir -p "$R"
printf 'n01\nn01\nn01\nn02\nn02\nn02\n' >"$R/nodes"
pbs_env=(env PBS_JOBID=777.pbs-server PBS_NODEFILE="$R/nodes" PBS_O_WORKDIR="$R"
	DDPTRAIN=/opt/ddptrain/bin/ddptrain DDPTRAIN_ARGS="--epochs=9")
out=$("${pbs_env[@]}" DRY_RUN=1 WALLTIME=01:00:00 "$PBS" --lr=0.01 2>"$TMPD/err") || fail "pbs dry run exited $?"
has "$out" mpirun -np 6 --hostfile "$R/nodes" --map-by ppr:3:node /opt/ddptrain/bin/ddptrain --epochs=9 \
	--checkpoint="$R/ddptrain-777/checkpoint.safetensors" --save="$R/ddptrain-777/model.safetensors" \
	--metrics="$R/ddptrain-777/metrics.0.jsonl" --lr=0.01
lacks "$out" --resume
grep -q "SIGUSR1 after 3480 s" "$TMPD/err" || fail "pbs stop timer: $(cat "$TMPD/err")"
echo "pbs dry run: $out"
checks=$((checks + 1))
mkdir -p "$R/ddptrain-777"
: >"$R/ddptrain-777/checkpoint.safetensors"
out=$("${pbs_env[@]}" DRY_RUN=1 GPUS_PER_NODE=2 "$PBS" 2>/dev/null) || fail "pbs dry run exited $?"
has "$out" -np 4 --map-by ppr:2:node --resume="$R/ddptrain-777/checkpoint.safetensors"
echo "pbs dry run, resuming: $out"
checks=$((checks + 1))
"${pbs_env[@]}" DRY_RUN=1 PBS_NODEFILE= "$PBS" >/dev/null 2>&1 && fail "pbs script ran without a node file"
"${pbs_env[@]}" DRY_RUN=1 WALLTIME=1:xx "$PBS" >/dev/null 2>&1 && fail "pbs script took WALLTIME=1:xx"
# WALLTIME is PBS's [[HH:]MM:]SS[.mmm], minutes and seconds below 60 after a first field,
# at most 8760 hours; anything else exit 2 naming the value (issue 30; before: 2^63 and
# 1:0:0:0:0:0:0:0:0:0:0:0 gave "SIGUSR1 after 0 s", 10^20 wrapped to 7766279631452241799 s,
# 1:2:3:4 and 10:99:99 were taken).
for w in 9223372036854775808 99999999999999999999 1:0:0:0:0:0:0:0:0:0:0:0 1:2:3:4 10:99:99 \
	10:00:99 8761:00:00 1.2345 : 1::2 ' 10' '$(id)'; do
	rc=0
	"${pbs_env[@]}" DRY_RUN=1 WALLTIME="$w" "$PBS" >/dev/null 2>"$TMPD/err" || rc=$?
	[ $rc -eq 2 ] && [ "$(wc -l <"$TMPD/err")" -eq 1 ] && grep -qF "ddptrain.pbs: WALLTIME='$w'" "$TMPD/err" ||
		fail "WALLTIME='$w': exit $rc, want 2 and one line naming it: $(cat "$TMPD/err")"
done
for w in 3600:3480 90:00:5280 100:00:00:359880 8760:00:00:31535880 04:00:00.5:14280 00:02:01:1; do
	"${pbs_env[@]}" DRY_RUN=1 WALLTIME="${w%:*}" "$PBS" >/dev/null 2>"$TMPD/err" || fail "WALLTIME=${w%:*} refused: $(cat "$TMPD/err")"
	grep -q "would send SIGUSR1 after ${w##*:} s (walltime ${w%:*} less 120 s)" "$TMPD/err" ||
		fail "WALLTIME=${w%:*}: want ${w##*:} s: $(cat "$TMPD/err")"
done
echo "pbs: 12 malformed or out-of-range walltimes refused (exit 2), 6 forms of PBS's accepted"
checks=$((checks + 2))

# Its own timer stops ddptrain STOP_BEFORE s before the walltime; exit 3 reruns the job.
: >"$FAKE_LOG"
t0=$SECONDS
"${pbs_env[@]}" FAKE_RC=wait WALLTIME=00:00:03 STOP_BEFORE=2 "$PBS" >"$TMPD/out" 2>&1 ||
	fail "pbs script exited $? after its timer: $(cat "$TMPD/out")"
grep -qx "stop file seen" "$FAKE_LOG" || fail "the timer did not stop ddptrain: $(cat "$FAKE_LOG")"
no_signal
grep -qx "qrerun 777.pbs-server" "$FAKE_LOG" || fail "no qrerun: $(cat "$FAKE_LOG")"
[ "$(cat "$R/ddptrain-777/attempts")" = 1 ] || fail "attempt count: $(cat "$R/ddptrain-777/attempts")"
echo "pbs: timer after $((SECONDS - t0)) s -> stop file -> exit 3 -> $(grep "^qrerun" "$FAKE_LOG")"
checks=$((checks + 1))
# A walltime not longer than STOP_BEFORE is refused with one line (exit 2): the timer
# would stop ddptrain as it starts (before: SIGUSR1 at once, mpirun killed, exit 138).
for w in 120 60 00:02:00 1:30; do
	rc=0
	"${pbs_env[@]}" WALLTIME="$w" FAKE_RC=wait "$PBS" >"$TMPD/out" 2>"$TMPD/err" || rc=$?
	[ $rc -eq 2 ] && [ "$(wc -l <"$TMPD/err")" -eq 1 ] &&
		grep -q "walltime $w (.* s) is not longer than STOP_BEFORE=120 s" "$TMPD/err" ||
		fail "WALLTIME=$w, STOP_BEFORE 120: exit $rc, want 2 and one line: $(cat "$TMPD/out" "$TMPD/err")"
done
echo "pbs: $(cat "$TMPD/err")"
checks=$((checks + 1))
# A stop as the script starts (qstat, its first command), before the launcher (mkdir),
# as the launcher starts and during the rerun request.
for c in "qstat USR1" "mkdir TERM" "mpirun USR1" "qrerun USR1"; do
	read -r at sig <<<"$c"
	: >"$FAKE_LOG"
	rm -rf "$R/ddptrain-777"
	wall=(WALLTIME=600)
	[ "$at" != qstat ] || wall=(WALLTIME=)
	frc="wait"
	[ "$at" != qrerun ] || frc=3
	rc=0
	run_hooked "${pbs_env[@]}" "${wall[@]}" FAKE_HOOK="$at" FAKE_SIG="$sig" FAKE_STARTUP=0.5 FAKE_RC=$frc "$PBS" \
		>"$TMPD/out" 2>&1 || rc=$?
	[ "$rc" -eq 0 ] || fail "SIG$sig at $at: pbs script exited $rc, want 0 (rerun): $(cat "$TMPD/out" "$FAKE_LOG")"
	grep -qx "qrerun 777.pbs-server" "$FAKE_LOG" || fail "SIG$sig at $at: no qrerun: $(cat "$FAKE_LOG")"
	no_signal
	case $at in
	qstat | mkdir)
		! grep -q "^mpirun " "$FAKE_LOG" || fail "SIG$sig at $at: the launcher was started: $(cat "$FAKE_LOG")"
		grep -q "SIG$sig before attempt 0 started: not starting it" "$TMPD/out" || fail "SIG$sig at $at: $(cat "$TMPD/out")" ;;
	qrerun)
		[ "$(grep -c '^mpirun ' "$FAKE_LOG")" -eq 1 ] || fail "SIG$sig during the rerun request: $(cat "$FAKE_LOG")" ;;
	*)
		grep -qx "stop file seen" "$FAKE_LOG" && [ -s "$R/ddptrain-777/checkpoint.safetensors" ] ||
			fail "SIG$sig at $at: no stop, no checkpoint: $(cat "$FAKE_LOG" "$TMPD/out")" ;;
	esac
	echo "pbs: SIG$sig at $at -> exit $rc, $(grep -c '^mpirun ' "$FAKE_LOG") launches, $(grep "^qrerun" "$FAKE_LOG")"
	checks=$((checks + 1))
done
# A node file without hosts (empty, or blank lines only) is said so, naming it (exit 2;
# before: exit 1 and no message, grep -c under set -e).
for content in '' '\n  \n\t\n'; do
	printf "$content" >"$R/empty-nodes"
	rc=0
	"${pbs_env[@]}" PBS_NODEFILE="$R/empty-nodes" DRY_RUN=1 WALLTIME=600 "$PBS" >"$TMPD/out" 2>"$TMPD/err" || rc=$?
	[ $rc -eq 2 ] && [ "$(cat "$TMPD/err")" = "ddptrain.pbs: the node file $R/empty-nodes lists no hosts" ] ||
		fail "node file '$content': exit $rc: $(cat "$TMPD/out" "$TMPD/err")"
done
echo "pbs: $(cat "$TMPD/err")"
checks=$((checks + 1))
# qrerun refused: RESUBMIT submits the script again with the same RUN_DIR.
: >"$FAKE_LOG"
"${pbs_env[@]}" FAKE_RC=3 FAKE_SCHED_RC=0 RESUBMIT="$PBS" bash -c '
	qrerun() { echo "qrerun $*" >>"$FAKE_LOG"; return 1; }
	export -f qrerun
	exec "$0"' "$PBS" >"$TMPD/out" 2>&1 || fail "pbs resubmit exited $?: $(cat "$TMPD/out")"
grep -q "^qsub -V -v RUN_DIR=$R/ddptrain-777,CHECKPOINT=$R/ddptrain-777/checkpoint.safetensors $PBS\$" "$FAKE_LOG" ||
	fail "no resubmission: $(cat "$FAKE_LOG")"
checks=$((checks + 1))

# A crash loop without a checkpoint restarts from the start, then gives up.
rc=0
"${pbs_env[@]}" FAKE_RC=1 WALLTIME=600 RUN_DIR="$R/crash" "$PBS" --max-restarts=1 >"$TMPD/out" 2>&1 || rc=$?
[ $rc -eq 1 ] && grep -q "restart 1 of 1 from the start (no checkpoint written yet)$" "$TMPD/out" &&
	[ "$(tail -n 1 "$TMPD/out")" = "ddptrain.pbs: gave up: ddptrain failed (exit 1) in attempt 1, after 1 of 1 restarts" ] ||
	fail "pbs crash loop: exit $rc: $(cat "$TMPD/out")"
checks=$((checks + 1))

# ---- Values that reach arithmetic ----
# Bash evaluates a variable's text inside $((...)), and an array subscript there runs
# its $(...). The attempts file and every number taken from the environment must be a
# plain count: anything else stops the script with one line naming it (exit 1 for the
# file, 2 for a setting) before anything is launched or run.
H=$TMPD/hostile
mkdir -p "$H"
# shellcheck disable=SC2016 # the $(...) must reach the scripts unexpanded
evil='restarts[$(touch '"$TMPD"'/pwned)]'
# refused WANT NAME ENV...: the script run under ENV exits WANT, naming NAME
refused() {
	local want=$1 name=$2 rc=0
	shift 2
	: >"$FAKE_LOG"
	"$@" >"$TMPD/out" 2>"$TMPD/err" || rc=$?
	[ ! -e "$TMPD/pwned" ] || fail "the \$(...) in $name was run: ${*: -1}"
	[ "$rc" -eq "$want" ] || fail "bad $name: exit $rc, want $want: $(cat "$TMPD/out" "$TMPD/err")"
	[ "$(wc -l <"$TMPD/err")" -eq 1 ] && grep -qF -- "$name: '" "$TMPD/err" ||
		fail "bad $name: want one line naming it: $(cat "$TMPD/err")"
	! grep -qE '^(srun|mpirun) ' "$FAKE_LOG" || fail "launched despite a bad $name: $(cat "$FAKE_LOG")"
}
slurm_h=(env SLURM_JOB_ID=9 RUN_DIR="$H" DDPTRAIN_ARGS=--epochs=1)
pbs_h=(env PBS_JOBID=9.server PBS_NODEFILE="$R/nodes" WALLTIME=600 RUN_DIR="$H" DDPTRAIN_ARGS=--epochs=1)
for bad in "$evil" abc '' 1e3 -1 1234567890; do
	printf '%s\n' "$bad" >"$H/attempts"
	refused 1 "$H/attempts" "${slurm_h[@]}" "$SBATCH"
	refused 1 "$H/attempts" "${pbs_h[@]}" "$PBS"
done
rm "$H/attempts"
for v in SLURM_RESTART_COUNT SLURM_JOB_NUM_NODES SLURM_NTASKS_PER_NODE SLURM_NTASKS MAX_RESTARTS MAX_REQUEUES; do
	refused 2 "$v" "${slurm_h[@]}" "$v=$evil" "$SBATCH"
done
for v in GPUS_PER_NODE STOP_BEFORE MAX_RESTARTS MAX_REQUEUES; do
	refused 2 "$v" "${pbs_h[@]}" "$v=$evil" "$PBS"
done
refused 2 -n "$LOCAL" -n "$evil"
refused 2 MAX_RESTARTS env MAX_RESTARTS="$evil" "$LOCAL"
refused 2 --max-restarts "$LOCAL" --max-restarts="$evil"
# A count with leading zeros is decimal (bash would read 010 as octal 8).
echo 010 >"$H/attempts"
out=$("${slurm_h[@]}" DRY_RUN=1 "$SBATCH") || fail "sbatch with attempts 010 exited $?"
has "$out" --metrics="$H/metrics.10.jsonl"
echo "hostile counts: the attempts file and the numeric settings are refused unless plain counts"
checks=$((checks + 1))

# ---- run-local ----
cd "$TMPD" || fail "cd $TMPD"
ncpu=$(nproc)
out=$(FAKE_GPUS=3 DRY_RUN=1 "$LOCAL" --epochs=2 "--save=my model.st") || fail "run-local dry run exited $?"
has "$out" mpirun -np 3 --checkpoint=ddptrain.checkpoint.safetensors --epochs=2 "'--save=my model.st'"
lacks "$out" --resume
echo "run-local dry run, 3 GPUs: $out"
out=$(FAKE_GPUS=0 DRY_RUN=1 "$LOCAL") || fail "run-local dry run exited $?"
has "$out" -np "$ncpu"
lacks "$out" --oversubscribe
: >ddptrain.checkpoint.safetensors
out=$(FAKE_GPUS=2 DRY_RUN=1 "$LOCAL" -n $((ncpu + 1)) --quiet) || fail "run-local dry run exited $?"
has "$out" -np $((ncpu + 1)) --oversubscribe --resume=ddptrain.checkpoint.safetensors --quiet
echo "run-local dry run, -n $((ncpu + 1)), resuming: $out"
out=$(CHECKPOINT='' DRY_RUN=1 "$LOCAL" -n 2) || fail "run-local dry run exited $?"
lacks "$out" --checkpoint
"$LOCAL" -n 0 >/dev/null 2>&1 && fail "run-local took -n 0"
checks=$((checks + 4))
# A crash is retried; exit 4 (finished and saved, an observer's output incomplete) is not.
for c in "1 4" "4 1"; do
	read -r frc launches <<<"$c"
	: >"$FAKE_LOG"
	rc=0
	FAKE_RC=$frc "$LOCAL" -n 2 >"$TMPD/out" 2>&1 || rc=$?
	[ "$rc" -eq "$frc" ] || fail "run-local: launcher exit $frc: script exited $rc: $(cat "$TMPD/out")"
	[ "$(grep -c '^mpirun ' "$FAKE_LOG")" -eq "$launches" ] ||
		fail "run-local: launcher exit $frc: $(grep -c '^mpirun ' "$FAKE_LOG") launches, want $launches"
	checks=$((checks + 1))
done
# A crash loop: each restart says whether it starts from a checkpoint, and the last line
# says the script gave up.
for ck in absent present; do
	rm -f crash-ck.st
	[ $ck = absent ] || : >crash-ck.st
	: >"$FAKE_LOG"
	rc=0
	FAKE_RC=1 CHECKPOINT=crash-ck.st "$LOCAL" -n 2 --max-restarts=2 >"$TMPD/out" 2>&1 || rc=$?
	[ $rc -eq 1 ] && [ "$(grep -c '^mpirun ' "$FAKE_LOG")" -eq 3 ] || fail "run-local crash loop: exit $rc: $(cat "$TMPD/out")"
	if [ $ck = absent ]; then from="from the start (no checkpoint written yet)"; else from="from the last checkpoint"; fi
	[ "$(grep -c "restart [12] of 2 $from\$" "$TMPD/out")" -eq 2 ] || fail "run-local, checkpoint $ck: $(cat "$TMPD/out")"
	[ "$(tail -n 1 "$TMPD/out")" = "run-local.sh: gave up: ddptrain failed (exit 1) in attempt 2, after 2 of 2 restarts" ] ||
		fail "run-local: no 'gave up' line: $(cat "$TMPD/out")"
done
rm -f crash-ck.st
echo "run-local: a crash loop restarts from the checkpoint only when there is one, and ends with 'gave up'"
checks=$((checks + 1))

# Ctrl-C reaches the script only; it asks for a graceful stop through the stop file.
# Bash cannot trap a signal that was ignored when it started, and make check may
# start so (under nohup, as a background job, on some CI runners): env
# --default-signal=INT (coreutils 8.31) gives the script a default SIGINT back.
# Where SIGINT is ignored and env cannot do that, this check is skipped.
default_int=(env --default-signal=INT)
env --default-signal=INT true 2>/dev/null || default_int=()
sigint_ignored=0
case $(trap -p INT) in *"''"*) sigint_ignored=1 ;; esac
if [ "$sigint_ignored" = 1 ] && [ ${#default_int[@]} -eq 0 ]; then
	echo "SKIP (this check only): Ctrl-C to run-local.sh: SIGINT was ignored when the test started and env --default-signal is missing, so bash cannot trap it"
else
	: >"$FAKE_LOG"
	# Job control: the script gets its own process group, as in a terminal, and
	# SIGINT is not ignored as it is for a background job without it.
	set -m
	mkdir -p "$TMPD/tmp"
	TMPDIR=$TMPD/tmp FAKE_RC=wait ${default_int[@]+"${default_int[@]}"} "$LOCAL" -n 2 >"$TMPD/out" 2>&1 &
	pid=$!
	set +m
	wait_for ready
	kill -INT -- "-$pid"
	rc=0
	wait "$pid" || rc=$?
	[ "$rc" -eq 3 ] || fail "run-local exited $rc after Ctrl-C, want 3: $(cat "$TMPD/out")"
	grep -qx "stop file seen" "$FAKE_LOG" || fail "ddptrain was not told to stop: $(cat "$FAKE_LOG")"
	# (A background job ignores SIGINT, so its absence here proves little: mpirun
	# must be outside the script's process group, which the terminal signals.)
	no_signal
	[ -z "$(ls "$TMPD/tmp")" ] || fail "run-local.sh left its stop file's folder: $(ls "$TMPD/tmp")"
	grep -qx "pgid $pid" "$FAKE_LOG" && fail "mpirun is in the script's process group"
	grep -q "run the same command again to resume" "$TMPD/out" || fail "no resume hint: $(cat "$TMPD/out")"
	echo "run-local: Ctrl-C -> stop file -> exit 3$([ "$sigint_ignored" = 0 ] || echo " (SIGINT was ignored at start: reset by env --default-signal)")"
	checks=$((checks + 1))
fi

# A stop as the script starts (nvidia-smi, its first command: nothing is started, exit
# 3) and as mpirun starts (a signal would kill it then: the stop waits in the file until
# ddptrain looks, which saves and exits 3). Before: exit 143 and 138, nothing saved.
for at in nvidia-smi mpirun; do
	: >"$FAKE_LOG"
	rm -f "$TMPD/rl-ck.st"
	np=(-n 2)
	[ $at != nvidia-smi ] || np=()
	rc=0
	run_hooked env FAKE_HOOK=$at FAKE_SIG=TERM FAKE_STARTUP=0.5 FAKE_RC=wait CHECKPOINT="$TMPD/rl-ck.st" \
		"$LOCAL" ${np[@]+"${np[@]}"} >"$TMPD/out" 2>&1 || rc=$?
	[ $rc -eq 3 ] || fail "run-local, SIGTERM at $at: exit $rc, want 3: $(cat "$TMPD/out" "$FAKE_LOG")"
	no_signal
	if [ $at = nvidia-smi ]; then
		! grep -q "^mpirun " "$FAKE_LOG" && grep -q "SIGTERM before ddptrain started (attempt 0): not starting it" "$TMPD/out" ||
			fail "run-local, SIGTERM at its start: $(cat "$TMPD/out" "$FAKE_LOG")"
	else
		grep -qx "stop file seen" "$FAKE_LOG" && [ -s "$TMPD/rl-ck.st" ] ||
			fail "run-local, SIGTERM as mpirun starts: no stop, no checkpoint: $(cat "$TMPD/out" "$FAKE_LOG")"
	fi
	echo "run-local: SIGTERM at $at -> exit $rc, $(grep -c '^mpirun ' "$FAKE_LOG") launches"
	checks=$((checks + 1))
done

# And it really trains (without checkpoint options, which this ddptrain may not have yet).
export PATH=${PATH#"$B:"}
CHECKPOINT='' DDPTRAIN=$DDPTRAIN timeout -k 5 120 "$LOCAL" -n 2 --samples=200 --epochs=1 \
	--save="$TMPD/local.st" --quiet || fail "run-local training exited $?"
[ -s "$TMPD/local.st" ] || fail "run-local training saved nothing"
checks=$((checks + 1))
echo "batch-scripts: $checks checks passed"

# run-local.sh for real: stopped by SIGTERM it exits 3 with a checkpoint, and the same
# command again resumes to the weights of an uninterrupted run.
cd "$TMPD"
L="--samples=20000 --epochs=2000 --max-steps=300000 --batch-size=20 --log-every=0"
export MPIRUN_ARGS=--oversubscribe CHECKPOINT_EVERY=100000
CHECKPOINT=$TMPD/straight-ck.st DDPTRAIN=$DDPTRAIN "$TOP_SRCDIR/scripts/run-local.sh" -n 2 $L --save=straight.st \
	>/dev/null || fail "run-local.sh straight run"
# (SIGTERM: a background job of a script starts with SIGINT ignored, which bash cannot trap.)
CHECKPOINT=$TMPD/ck.st DDPTRAIN=$DDPTRAIN "$TOP_SRCDIR/scripts/run-local.sh" -n 2 $L --save=resumed.st \
	>rl.out 2>&1 &
rl=$!
for _ in $(seq 1 300); do grep -q "^# buckets:" rl.out && break; sleep 0.1; done # training has begun
kill -TERM "$rl"
rc=0; wait "$rl" || rc=$?
[ $rc -eq 3 ] && [ -f ck.st ] || fail "run-local.sh after SIGTERM: exit $rc: $(cat rl.out)"
CHECKPOINT=$TMPD/ck.st DDPTRAIN=$DDPTRAIN "$TOP_SRCDIR/scripts/run-local.sh" -n 2 $L --save=resumed.st >rl2.out 2>&1 ||
	fail "run-local.sh resume: $(cat rl2.out)"
grep -q "resuming from $TMPD/ck.st" rl2.out || fail "run-local.sh did not resume: $(cat rl2.out)"
"$STCOMPARE" --exact resumed.st straight.st || fail "stop with SIGTERM and resume through run-local.sh changed the weights"
echo "run-local.sh: SIGTERM -> exit 3 with a checkpoint -> resumed to bit-identical weights"
# A rank killed with kill -9 after a periodic checkpoint: the script retries from it, and
# the run ends with the weights of the uninterrupted run.
# (100000 steps: about 2.5 s on a quiet machine, so the run is still going when the first
# periodic checkpoint appears and the rank is killed; at 30000 it could finish first.)
L="--samples=2000 --epochs=2000 --max-steps=100000 --batch-size=20 --log-every=0"
rm -f ck.st
CHECKPOINT='' DDPTRAIN=$DDPTRAIN "$TOP_SRCDIR/scripts/run-local.sh" -n 2 $L --save=straight2.st >/dev/null ||
	fail "run-local.sh straight run 2"
# A stop as the real mpirun starts: the launcher is a wrapper that has SIGTERM sent to
# the script after DELAY s and execs mpirun at once, so the stop lands in mpirun's and
# the ranks' start-up (before: passed on as SIGUSR1, it killed mpirun before its handler
# existed, exit 138, or mpirun passed it to ranks not yet started and it was lost). The
# run has no end of its own (a million epochs), so only the stop ends it, however fast
# the machine: every delay ends in exit 3 with a checkpoint (a lost stop is the 120 s
# SIGKILL, exit 137), and the first one resumes to the weights of a straight run.
cat >"$TMPD/mpirun-hooked" <<'EOF'
#!/bin/bash
(sleep "$DELAY"; kill -TERM "$FAKE_TARGET") &
exec mpirun "$@"
EOF
chmod +x "$TMPD/mpirun-hooked"
E="--samples=2000 --epochs=1000000 --batch-size=20 --log-every=0"
for d in 0 0.02 0.1 0.3; do
	rm -f ck.st hooked.st
	rc=0
	timeout -s KILL 120 bash -c 'export FAKE_TARGET=$$; exec "$@"' run_hooked \
		env DELAY=$d MPIRUN="$TMPD/mpirun-hooked" CHECKPOINT=$TMPD/ck.st DDPTRAIN=$DDPTRAIN \
		"$TOP_SRCDIR/scripts/run-local.sh" -n 2 $E --save=hooked.st >rl4.out 2>&1 || rc=$?
	[ $rc -eq 3 ] && [ -f ck.st ] && [ ! -e hooked.st ] ||
		fail "run-local.sh, SIGTERM $d s after mpirun starts: exit $rc, want 3 and a checkpoint: $(cat rl4.out)"
	step=$(grep -ao '"step":"[0-9]*"' ck.st | head -1 | tr -dc 0-9)
	echo "run-local.sh: SIGTERM $d s after the real mpirun starts -> exit 3, checkpoint of step $step"
	if [ $d = 0 ]; then
		k=$((step + 500))
		CHECKPOINT='' DDPTRAIN=$DDPTRAIN "$TOP_SRCDIR/scripts/run-local.sh" -n 2 $E --max-steps=$k \
			--save=straight3.st >/dev/null || fail "run-local.sh straight run of $k steps"
		CHECKPOINT=$TMPD/ck.st DDPTRAIN=$DDPTRAIN "$TOP_SRCDIR/scripts/run-local.sh" -n 2 $E --max-steps=$k \
			--save=hooked.st >rl4.out 2>&1 || fail "run-local.sh resume after a stop at mpirun's start: $(cat rl4.out)"
		"$STCOMPARE" --exact hooked.st straight3.st || fail "stopped as mpirun started and resumed: the weights differ"
	fi
done
rm -f ck.st
CHECKPOINT=$TMPD/ck.st CHECKPOINT_EVERY=3000 DDPTRAIN=$DDPTRAIN "$TOP_SRCDIR/scripts/run-local.sh" -n 2 $L \
	--save=crashed.st >rl3.out 2>&1 &
rl=$!
for _ in $(seq 1 300); do [ -f ck.st ] && break; sleep 0.1; done
[ -f ck.st ] || fail "no periodic checkpoint: $(cat rl3.out)"
killed=0
for p in $(pgrep -x ddptrain); do
	if grep -q crashed.st "/proc/$p/cmdline" 2>/dev/null; then kill -9 "$p" && killed=1; break; fi
done
[ $killed = 1 ] || fail "no rank of the crash run to kill (it ended before its first checkpoint was seen): $(cat rl3.out)"
rc=0; wait "$rl" || rc=$?
[ $rc -eq 0 ] && grep -q "restart 1 of 3 from the last checkpoint" rl3.out && grep -q "attempt 1 (restart 1 of 3)" rl3.out ||
	fail "run-local.sh after kill -9 of a rank: exit $rc: $(cat rl3.out)"
"$STCOMPARE" --exact crashed.st straight2.st || fail "the retry from the periodic checkpoint changed the weights"
echo "run-local.sh: kill -9 of a rank -> retried from the periodic checkpoint -> bit-identical weights"
