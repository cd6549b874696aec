#!/bin/bash
# A stop is exact wherever its signal lands (issue 34, item 1): the checkpoint is of the
# step the "stopped after step N" line, the --metrics end record and --prometheus name,
# and its resume ends bit for bit where a run that was never stopped ends. The signal
# comes from a test double at its N-th call into the device (DDPT_FAKE_SIGNAL in
# tests/lib/fake_gpu.c, DDPT_STUB_SIGNAL in the stub CUDA runtime under the real module,
# DDPT_SHIM_SIGNAL at the N-th cblas_sgemm of the CPU path), so sweeping N puts it in
# every phase of the steps: the load, each layer, the collectives, a capture or a graph's
# replay, the optimizer, the read one step late, evaluation, a checkpoint, the last step.
# Before: on a GPU the stop was taken at the late read of step N, labelled N, while the
# weights already held step N+1 (the resume took N+1 twice), and the fake GPU's
# checkpoint read past a queued collective (exit 1) or waited for it (2 ranks).
. "$(dirname "$0")/../lib/setup.sh"
cd "$TMPD"
STUB=$TESTS_BUILDDIR/lib/cuda-stub.so
[ -f "$FAKE_GPU" ] && [ -f "$FAULTSHIM" ] || skip "no $FAKE_GPU or $FAULTSHIM (make check builds them)"

# 200 steps per epoch: no epoch ends (the evaluation case asks for its own); each sweep
# gives --max-steps
C="--seed=3 --momentum=0.9 --batch-size=20 --log-every=0"
J=3 # cases at a time: a run mostly waits for MPI's start-up, not for the CPU

# go NP ENV ARGS...: ddptrain on NP ranks (1: the process alone, as a user starts it) with
# the environment assignments ENV (words; may be empty).
go() {
	local np=$1 e=$2
	shift 2
	if [ "$np" = 1 ]; then
		env $e timeout -k 5 60 "$DDPTRAIN" "$@"
	else
		env $e timeout -k 5 120 mpirun --oversubscribe -np "$np" "$DDPTRAIN" "$@"
	fi
}

# stopped NP ENV SIG ARGS...: in the current directory, a run that SIG (VAR=N[@R]) may
# stop; its exit code and the step it stopped after go to ./verdict: "3 N", or "0" when the
# signal came after the last step's flag (the run then ended as usual). Exit 3 must print
# the stop line, and the checkpoint, the metrics' end record and Prometheus must name N.
stopped() {
	local np=$1 e=$2 sig=$3 rc=0 n
	shift 3
	go "$np" "$e $sig" "$@" --checkpoint=ck.st --save=w.st --metrics=m.jsonl --prometheus=p.prom >out 2>err || rc=$?
	case $rc in
	0)
		echo 0 >verdict
		;;
	3)
		n=$(sed -n 's/^# stopped by a signal after step \([0-9]*\) of .*/\1/p' out)
		[ -n "$n" ] || fail "$sig: exit 3 without the stop line: $(cat out err)"
		grep -aq "\"step\":\"$n\"" ck.st ||
			fail "$sig: stopped after step $n, checkpoint of $(grep -ao '"step":"[0-9]*"' ck.st)"
		tail -n 1 m.jsonl | grep -q "^{\"type\":\"end\",\"exit_code\":3,.*,\"step\":$n[,}]" ||
			fail "$sig: stopped after step $n, metrics end: $(tail -n 1 m.jsonl)"
		grep -q "^ddptrain_step{.*} $n\$" p.prom || fail "$sig: stopped after step $n, $(grep ^ddptrain_step p.prom)"
		echo "3 $n" >verdict
		;;
	*)
		fail "$sig: exit $rc: $(grep -v '^[- ]*$' err | head -3)"
		;;
	esac
}

# same_end WHAT: ./w.st and ./ck.st are where the straight run ended (../s.save, ../s.st):
# its weights byte for byte, every tensor of the checkpoint (momentum too) bit for bit.
same_end() {
	cmp -s w.st ../s.save || fail "$1: weights differ from the straight run's: $("$STCOMPARE" w.st ../s.save 0 2>&1)"
	"$STCOMPARE" --exact ck.st ../s.st >/dev/null 2>&1 ||
		fail "$1: the checkpoint differs from the straight run's: $("$STCOMPARE" ck.st ../s.st 0 2>&1)"
}

# sweep NAME NP ENV VAR AT POINTS ARGS...: the straight run, then for each N of POINTS a
# run stopped by VAR=N (AT: "@R" for rank R alone, or empty for every rank), J at a time.
# A stop at a step not seen before in this sweep is resumed (to the end, with --save) and
# ends where the straight run ends; a later stop at that step must have written the same
# checkpoint bit for bit (every tensor, and the position it resumes from), so its resume
# is that one. A run the signal did not stop ends where the straight run ends.
sweep() {
	local name=$1 np=$2 e=$3 var=$4 at=$5 points=$6 n v s stops= finished=0
	local -A first=()
	shift 6
	mkdir "$name"
	cd "$name"
	go "$np" "$e" $C "$@" --checkpoint=s.st --save=s.save >out 2>err || fail "$name: the straight run: $(cat err)"
	for n in $points; do
		mkdir "$n"
		while [ "$(jobs -rp | wc -l)" -ge $J ]; do wait -n || true; done
		(cd "$n" && stopped "$np" "$e" "$var=$n$at" $C "$@") >"$n/log" 2>&1 &
	done
	wait
	for n in $points; do
		[ -f "$n/verdict" ] || fail "$name: $var=$n$at: $(grep FAIL "$n/log" || tail -n 3 "$n/log")"
		read -r v s <"$n/verdict"
		if [ "$v" = 0 ]; then
			(cd "$n" && same_end "$name: $var=$n$at (not stopped)")
			finished=$((finished + 1))
		elif [ -z "${first[$s]:-}" ]; then
			first[$s]=$n
			stops="$stops $s"
			cp "$n/ck.st" "$n/stop.st"
			(cd "$n" && go "$np" "$e" $C "$@" --resume=ck.st --checkpoint=ck.st --save=w.st >out2 2>err2 ||
				fail "$name: $var=$n$at: the resume from step $s: $(cat err2)"
			 same_end "$name: $var=$n$at, stopped after step $s, resumed")
		else
			"$STCOMPARE" --exact "$n/ck.st" "${first[$s]}/stop.st" >/dev/null &&
				[ "$(pos "$n/ck.st")" = "$(pos "${first[$s]}/stop.st")" ] ||
				fail "$name: $var=$n$at and $var=${first[$s]}$at both stopped after step $s with different checkpoints: $("$STCOMPARE" "$n/ck.st" "${first[$s]}/stop.st" 0 2>&1) $(pos "$n/ck.st") $(pos "${first[$s]}/stop.st")"
		fi
	done
	# the sweep must have stopped the run after more than one step
	[ "$(wc -w <<<"$stops")" -ge 2 ] || fail "$name: stops after step(s)$stops only: the points miss the steps"
	echo "$name: $(wc -w <<<"$points") signals ($var=N$at): stopped after steps$stops, each as it said, each resume bit for bit the straight run; $finished after the last step's flag, not stopped"
	cd ..
}
pos() { grep -ao '"\(step\|epoch\|next_micro_batch\)":"[0-9]*"' "$1" | sort | tr '\n' ' '; }

# calls STATS KEY NP ENV ARGS...: the test double's count KEY of calls into the device in a
# run of ARGS, from the stats file it writes where STATS says (rank 0's).
calls() {
	local stats=$1 key=$2 np=$3 e=$4
	shift 4
	rm -rf stats && mkdir stats
	go "$np" "$e $stats=$PWD/stats" $C "$@" --checkpoint=stats/c.st --quiet >/dev/null 2>stats/err ||
		fail "counting $key: $*: $(cat stats/err)"
	awk -v k="$key" '$1 == k { print $2 }' stats/stats.0
}
upto() { seq "$1" "$2" "$3" | tr '\n' ' '; } # FIRST STEP LAST

# every K NAME NP ENV VAR AT STATS KEY ARGS...: sweep NAME over every K-th call into the
# device of a run of ARGS (counted by the test double: STATS, KEY), from call (K + 1) / 2.
every() {
	local k=$1 name=$2 np=$3 e=$4 var=$5 at=$6 stats=$7 key=$8 n
	shift 8
	n=$(calls "$stats" "$key" "$np" "$e" "$@")
	sweep "$name" "$np" "$e" "$var" "$at" "$(upto $(((k + 1) / 2)) "$k" "$n")" "$@"
}

# The fake GPU, one rank, 6 steps: step 1 eager, steps 2 to 4 captured as CUDA graphs (one
# per loader buffer), 5 and 6 replayed. Every call of steps 1 and 2, of 5, 6 and the end,
# and every 5th of steps 3 and 4 (captured as 2 was).
F="DDPTRAIN_CUDA_MODULE=$FAKE_GPU"
f2=$(calls DDPT_FAKE_STATS entries 1 "$F" --device=cuda --max-steps=2)
f4=$(calls DDPT_FAKE_STATS entries 1 "$F" --device=cuda --max-steps=4)
f6=$(calls DDPT_FAKE_STATS entries 1 "$F" --device=cuda --max-steps=6)
sweep fake1 1 "$F" DDPT_FAKE_SIGNAL "" "$(upto 1 1 "$f2") $(upto $((f2 + 3)) 5 "$f4") $(upto $((f4 + 1)) 1 "$f6")" \
	--device=cuda --max-steps=6
# Two ranks, eager steps, the signal on rank 1 only; the 16-bit wire and ZeRO-1 (whose
# checkpoint gathers the optimizer state: before, its read waited behind the all-gather in
# the driver), the signal on rank 0; grad-accum; dp's replicas on threads.
FS="DDPT_FAKE_STATS entries"
every 15 fake2-eager 2 "$F DDPTRAIN_CUDA_GRAPHS=0" DDPT_FAKE_SIGNAL @1 $FS --device=cuda --max-steps=4
every 19 fake2-bf16 2 "$F" DDPT_FAKE_SIGNAL @0 $FS --device=cuda --max-steps=4 --grad-compress=bf16
every 29 fake2-zero1 2 "$F" DDPT_FAKE_SIGNAL @0 $FS --device=cuda --max-steps=4 --zero=1
# ZeRO-3 (issue 35): the parameters sharded, each layer gathered before its forward and
# backward and the first layer's gather started after the step: a stop anywhere in that
# resumes bit for bit
every 13 fake2-zero3 2 "$F" DDPT_FAKE_SIGNAL @1 $FS --device=cuda --max-steps=4 --zero=3
every 13 fake1-accum 1 "$F" DDPT_FAKE_SIGNAL "" $FS --device=cuda --max-steps=4 --grad-accum=2
every 23 fake-dp 1 "$F" DDPT_FAKE_SIGNAL "" $FS --device=cuda --max-steps=4 --mode=dp --replicas=2
# Steps read at once: checkpoints every 2 steps, evaluation every 3 and at the last.
every 7 fake1-read 1 "$F" DDPT_FAKE_SIGNAL "" $FS --device=cuda --max-steps=5 --checkpoint-every=2 \
	--val-samples=40 --eval-every=3

# The real CUDA module over the stub CUDA runtime, cuBLAS and NCCL: one rank with graphs
# (replayed from step 5); two ranks, the signal on rank 0; ZeRO-2 with grad-accum (its
# all-gathers after the step), the signal on rank 1.
if [ -f "$STUB" ]; then
	S="DDPTRAIN_CUDA_MODULE=$STUB"
	SS="DDPT_STUB_STATS calls"
	every 13 stub1 1 "$S" DDPT_STUB_SIGNAL "" $SS --device=cuda --max-steps=6
	every 29 stub2 2 "$S" DDPT_STUB_SIGNAL @0 $SS --device=cuda --max-steps=4
	every 47 stub2-zero2 2 "$S" DDPT_STUB_SIGNAL @1 $SS --device=cuda --max-steps=4 --zero=2 --grad-accum=2
else
	echo "no $STUB (built with the CUDA toolkit): the real module's stops not swept"
fi

# The CPU path, which reads every step at once (4 products a step: 2 forward, 2 backward):
# one rank, every other product; two ranks, the signal on rank 1; dp (4 a replica).
P="LD_PRELOAD=$FAULTSHIM"
sweep cpu1 1 "$P" DDPT_SHIM_SIGNAL "" "$(upto 1 2 18)" --device=cpu --max-steps=4
sweep cpu2 2 "$P" DDPT_SHIM_SIGNAL @1 "$(upto 2 6 18)" --device=cpu --max-steps=4
sweep cpu2-zero3 2 "$P" DDPT_SHIM_SIGNAL @0 "$(upto 1 3 18)" --device=cpu --max-steps=4 --zero=3
sweep cpu-dp 1 "$P" DDPT_SHIM_SIGNAL "" "$(upto 3 7 34)" --device=cpu --max-steps=4 --mode=dp --replicas=2
echo "stops: ok"
