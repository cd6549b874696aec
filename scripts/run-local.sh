#!/bin/bash
# run-local.sh - ddptrain on one workstation: one rank per GPU, else one per core.
#
#   scripts/run-local.sh [-n N] [DDPTRAIN OPTION]...
#   DRY_RUN=1 scripts/run-local.sh ...     print the command, run nothing
#
# Ranks: -n N if given; else one per GPU that `nvidia-smi -L` lists; else one per
# CPU core. Every other argument goes to ddptrain, after the checkpoint options.
# Ctrl-C (or SIGTERM, SIGUSR1, SIGHUP) asks ddptrain to write its checkpoint and stop
# (exit 3); the same command again resumes from it. A second Ctrl-C stops at once.
# A stop before ddptrain starts starts nothing (exit 3).
# A crash (a rank killed, exit 1) is retried from the last periodic checkpoint up to
# --max-restarts=N times (default MAX_RESTARTS, 3; torchrun's --max-restarts); exit 2
# is not retried, nor exit 4 (finished and saved, but an observer's output is
# incomplete: see ddptrain(1)). "attempt N" (from 0) is logged, and @ATTEMPT@ in an argument becomes
# N (--metrics=m.@ATTEMPT@.jsonl keeps one metrics file per attempt).

# A stop may come before anything below has run: remember it from here on (bash's
# default for these signals ends the script); stop(), below, acts on it.
stop_sig=
for s in INT TERM USR1 HUP; do
	# shellcheck disable=SC2064 # $s now, on purpose
	trap "stop_sig=\${stop_sig:-$s}" "$s"
done
set -euo pipefail

# ---- Settings. Each can also come from the environment. ----
# The binary: default, the build tree's next to this script, else ddptrain on PATH.
DDPTRAIN=${DDPTRAIN:-}
# The launcher and extra options for it, separated by spaces.
MPIRUN=${MPIRUN:-mpirun}
MPIRUN_ARGS=${MPIRUN_ARGS:-}
# Checkpoint: written every CHECKPOINT_EVERY steps and on a graceful stop; --resume
# is added when it exists. CHECKPOINT= (empty) runs without checkpoints.
CHECKPOINT=${CHECKPOINT-ddptrain.checkpoint.safetensors}
CHECKPOINT_EVERY=${CHECKPOINT_EVERY:-1000}
# Retry a crashed ddptrain this many times (--max-restarts=N too).
MAX_RESTARTS=${MAX_RESTARTS:-3}
# 1: print the command that would run, run nothing.
DRY_RUN=${DRY_RUN:-0}

me=run-local.sh
usage() {
	sed -n '2,14s/^# \{0,1\}//p' "$0"
	exit "${1:-0}"
}

# count VAR WHAT: VAR must hold a plain decimal count (else exit 2, naming WHAT); it is
# rewritten without leading zeros. Only such a value may reach $((...)) or a test: bash
# evaluates a variable's text there as an expression, and an array subscript in it
# runs its $(...).
count() {
	local v=${!1} shown
	shown=${v:0:40}
	shown=${shown//[![:print:]]/?}
	case $v in '' | *[!0-9]*) echo "$me: $2: '$shown' is not a count" >&2; exit 2 ;; esac
	[ "${#v}" -le 9 ] || { echo "$me: $2: '$shown' is too large" >&2; exit 2; }
	printf -v "$1" %d "$((10#$v))"
}

# Print a command as the shell reads it back: words of safe characters bare, others in '...'.
print_cmd() {
	local w out=
	for w in "$@"; do
		case $w in
		'' | *[!A-Za-z0-9_@%+=:,./-]*) w="'$(printf '%s' "$w" | sed "s/'/'\\\\''/g")'" ;;
		esac
		out+="${out:+ }$w"
	done
	printf '%s\n' "$out"
}

np=
restarts_from=MAX_RESTARTS
args=()
while [ $# -gt 0 ]; do
	case $1 in
	-n | --np) [ $# -ge 2 ] || usage 2; np=$2; shift 2 ;;
	-n=* | --np=*) np=${1#*=}; shift ;;
	--max-restarts=*) MAX_RESTARTS=${1#*=}; restarts_from=--max-restarts; shift ;;
	-h | --help) usage 0 ;;
	*) args+=("$1"); shift ;;
	esac
done

if [ -z "$np" ]; then
	gpus=0
	if command -v nvidia-smi >/dev/null 2>&1; then
		gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
	fi
	if [ "$gpus" -gt 0 ]; then np=$gpus; else np=$(nproc); fi
fi
count np -n
[ "$np" -gt 0 ] || { echo "$me: -n: 0 ranks" >&2; exit 2; }
count MAX_RESTARTS "$restarts_from"

if [ -z "$DDPTRAIN" ]; then
	here=$(cd "$(dirname "$0")/.." && pwd)
	if [ -x "$here/src/ddptrain" ]; then DDPTRAIN=$here/src/ddptrain; else DDPTRAIN=ddptrain; fi
fi

attempt=0
# Its existence asks the running ddptrain to stop (--stop-file): how the script tells it
# of a stop, as a signal to mpirun while it starts would kill it or reach no rank.
if [ "$DRY_RUN" = 1 ]; then
	stop_dir=${TMPDIR:-/tmp}/run-local.XXXXXX
else
	stop_dir=$(mktemp -d "${TMPDIR:-/tmp}/run-local.XXXXXX")
	# shellcheck disable=SC2064 # the name now
	trap "rm -rf '$stop_dir'" EXIT
fi
stop_file=$stop_dir/stop
# The command, rebuilt for every attempt: --resume once the checkpoint exists.
build_cmd() {
	local train=(--stop-file="$stop_file") extra a
	if [ -n "$CHECKPOINT" ]; then
		train+=(--checkpoint="$CHECKPOINT" --checkpoint-every="$CHECKPOINT_EVERY")
		[ ! -f "$CHECKPOINT" ] || train+=(--resume="$CHECKPOINT")
	fi
	for a in ${args[@]+"${args[@]}"}; do train+=("${a//@ATTEMPT@/$attempt}"); done
	read -r -a extra <<<"$MPIRUN_ARGS"
	cmd=("$MPIRUN" -np "$np")
	# More ranks than cores: Open MPI wants to be told.
	[ "$np" -le "$(nproc)" ] || cmd+=(--oversubscribe)
	cmd+=(${extra[@]+"${extra[@]}"} "$DDPTRAIN" ${train[@]+"${train[@]}"})
}
build_cmd

if [ "$DRY_RUN" = 1 ]; then
	print_cmd "${cmd[@]}"
	exit 0
fi

# Open MPI refuses root unless told.
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

# mpirun runs in its own session, so Ctrl-C reaches this script only: mpirun
# answers SIGINT and SIGTERM by killing the ranks. The first stop goes to ddptrain
# through the stop file; a second one to mpirun as SIGTERM, which ends the ranks now.
pid=
live=  # set while ddptrain may run: a stop is then told to it
stops=0 # stops told to it
# shellcheck disable=SC2317 # called by the traps
stop() {
	[ -n "$stop_sig" ] || stop_sig=$1
	[ -n "$live" ] || return 0
	stops=$((stops + 1))
	if [ "$stops" -eq 1 ]; then
		echo "$me: SIG$1: asking ddptrain to write its checkpoint and stop (again to stop at once)" >&2
		: >"$stop_file"
	elif [ -n "$pid" ]; then
		kill -TERM "$pid" 2>/dev/null || true
	fi
}
for s in INT TERM USR1 HUP; do
	# shellcheck disable=SC2064 # $s now, on purpose
	trap "stop $s" "$s"
done
restarts=0
while :; do
	ran= # ddptrain started in this round
	[ -z "$stop_sig" ] || break
	build_cmd
	rm -f "$stop_file"
	live=1
	[ -z "$stop_sig" ] || { live=; break; } # (it came just now)
	[ "$attempt" -eq 0 ] || echo "$me: attempt $attempt (restart $restarts of $MAX_RESTARTS)" >&2
	[ -z "$CHECKPOINT" ] || [ ! -f "$CHECKPOINT" ] || echo "$me: resuming from $CHECKPOINT" >&2
	ran=1
	setsid "${cmd[@]}" &
	pid=$!
	# A trapped signal interrupts wait; wait again until mpirun has really exited.
	while :; do
		rc=0
		wait "$pid" || rc=$?
		kill -0 "$pid" 2>/dev/null || break
	done
	live=
	pid=
	case $rc in 0 | 2 | 3 | 4) break ;; esac
	if [ "$stops" -gt 0 ] || [ "$restarts" -ge "$MAX_RESTARTS" ]; then
		break
	fi
	restarts=$((restarts + 1))
	attempt=$((attempt + 1))
	if [ -z "$CHECKPOINT" ]; then
		from="from the start (CHECKPOINT is empty: no checkpoints)"
	elif [ -f "$CHECKPOINT" ]; then
		from="from the last checkpoint"
	else
		from="from the start (no checkpoint written yet)"
	fi
	echo "$me: ddptrain failed (exit $rc); restart $restarts of $MAX_RESTARTS $from" >&2
done
if [ -z "$ran" ]; then
	rc=3
	echo "$me: SIG$stop_sig before ddptrain started (attempt $attempt): not starting it; run the same command again to start" >&2
fi
case $rc in
0 | 2) ;;
3) [ -z "$ran" ] || echo "$me: stopped; checkpoint in $CHECKPOINT: run the same command again to resume" >&2 ;;
4) echo "$me: finished with --save written, but an output of --metrics, --trace or --prometheus is incomplete (exit 4); not run again" >&2 ;;
*)
	if [ "$stops" -gt 0 ]; then
		echo "$me: ddptrain failed (exit $rc) while stopping; not restarted" >&2
	else
		echo "$me: gave up: ddptrain failed (exit $rc) in attempt $attempt, after $restarts of $MAX_RESTARTS restarts" >&2
	fi
	;;
esac
exit "$rc"
