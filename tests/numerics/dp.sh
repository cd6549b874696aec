#!/bin/bash
# --mode=dp (DataParallel in one process) trains exactly what DDP trains:
# - N divisible by B*G, shuffle on and off: dp with G replicas and batch B ends
#   with the weights of `mpirun -np G ddptrain --batch-size=B` and of one rank with
#   batch B*G (relative error at most 1e-5);
# - uneven chunks (a short last batch split 3,3,3,1, or a replica sitting out) and
#   --drop-last, --grad-accum, momentum and weight decay: against one process
#   training on the same batches;
# - with --drop-last, dp and ddp agree exactly when B divides floor(N/G) (the README's
#   condition), not merely when G divides N;
# - the same command twice is bit-identical, and the report has one row per replica.
. "$(dirname "$0")/../lib/setup.sh"

dp() { timeout -k 5 120 "$DDPTRAIN" --mode=dp --quiet "$@"; }
# must WHAT COMMAND...: run it; a failure names WHAT, the exit status (124 or 137: the
# 120 s timeout ended it, a hang or a starved machine), how long it ran and the end of
# its standard error, so a failure seen once (issue 34 item 17) says what happened.
must() {
	local what=$1 rc=0 t0=$SECONDS
	shift
	"$@" 2>"$TMPD/err" || rc=$?
	[ $rc -eq 0 ] && return 0
	case $rc in 124 | 137) what="$what: ended by the 120 s timeout" ;; esac
	fail "$what: exit $rc after $((SECONDS - t0)) s: $(tail -n 5 "$TMPD/err")"
}
cmp_st() { # NAME A B
	local out
	out=$("$STCOMPARE" "$2" "$3" 1e-5) || fail "$1: $out"
	echo "$1: $out"
}

common="--samples=480 --epochs=2 --seed=11 --lr=0.05"
B=4
for shuffle in --shuffle --no-shuffle; do
	for G in 2 3 4; do
		must "dp G=$G" dp $common $shuffle --replicas=$G --batch-size=$B --save="$TMPD/dp.st"
		must "ddp W=$G" run_mpi "$G" $common $shuffle --batch-size=$B --quiet --save="$TMPD/ddp.st"
		must "1 rank" run_mpi 1 $common $shuffle --batch-size=$((B * G)) --quiet --save="$TMPD/one.st"
		cmp_st "dp G=$G B=$B $shuffle vs ddp -np $G" "$TMPD/dp.st" "$TMPD/ddp.st"
		cmp_st "dp G=$G B=$B $shuffle vs 1 rank B=$((B * G))" "$TMPD/dp.st" "$TMPD/one.st"
	done
done

# Uneven: 26 samples, B=4, G=4: batches of 16 and 10; 10 rows split 3,3,3,1.
# 50 samples, B=4, G=3: batches 12,12,12,12,2; 2 rows split 1,1 and replica 2 sits out.
for shape in "26 4 4" "50 4 3"; do
	set -- $shape
	for shuffle in --shuffle --no-shuffle; do
		u="--samples=$1 --epochs=3 --seed=12 --lr=0.05 --momentum=0.9 --weight-decay=0.01 $shuffle"
		must "dp uneven" dp $u --replicas=$3 --batch-size=$2 --save="$TMPD/dp.st"
		must "1 rank uneven" run_mpi 1 $u --batch-size=$(($2 * $3)) --quiet --save="$TMPD/one.st"
		cmp_st "uneven N=$1 B=$2 G=$3 $shuffle vs 1 rank" "$TMPD/dp.st" "$TMPD/one.st"
	done
done

# --drop-last drops the short batch: 26 samples, global batch 16, no shuffle = the first 16.
must "dp drop-last" dp --samples=26 --epochs=3 --no-shuffle --drop-last --replicas=4 --batch-size=4 --save="$TMPD/dp.st"
must "1 rank 16" run_mpi 1 --samples=16 --epochs=3 --no-shuffle --batch-size=16 --quiet --save="$TMPD/one.st"
cmp_st "dp --drop-last vs the full batches alone" "$TMPD/dp.st" "$TMPD/one.st"

# The README's condition for dp and ddp training the same thing: G divides N, or with
# --drop-last, B divides floor(N/G) (ddp's sampler drops the tail that does not divide by G
# and keeps each rank's short batch; dp drops the short global batch). G=3, B=4, --drop-last:
# 37 samples (floor 12) train the same; 30 (floor 10, though 3 divides 30) do not.
for c in "37 same" "30 differ"; do
	set -- $c
	d="--samples=$1 --epochs=3 --seed=14 --lr=0.05 --drop-last"
	must "dp --drop-last N=$1" dp $d --replicas=3 --batch-size=4 --save="$TMPD/dp.st"
	must "ddp --drop-last N=$1" run_mpi 3 $d --batch-size=4 --quiet --save="$TMPD/ddp.st"
	if [ "$2" = same ]; then
		cmp_st "--drop-last N=$1 G=3 B=4 (4 divides floor(N/3)): dp vs ddp" "$TMPD/dp.st" "$TMPD/ddp.st"
	else
		out=$("$STCOMPARE" "$TMPD/dp.st" "$TMPD/ddp.st" 1e-5) &&
			fail "--drop-last N=$1 G=3 B=4: dp and ddp trained the same, but 4 does not divide floor(N/3): $out"
		echo "--drop-last N=$1 G=3 B=4 (4 does not divide floor(N/3)): dp and ddp differ: $out"
	fi
done

# --grad-accum: 3 micro-batches of 2 x 4 = batch 24 (and a shorter last group).
ga="--samples=100 --epochs=2 --seed=13 --lr=0.05 --momentum=0.5"
must "dp grad-accum" dp $ga --replicas=2 --batch-size=4 --grad-accum=3 --save="$TMPD/dp.st"
must "1 rank grad-accum" run_mpi 1 $ga --batch-size=8 --grad-accum=3 --quiet --save="$TMPD/one.st"
cmp_st "dp --grad-accum=3 vs 1 rank batch 8 x 3" "$TMPD/dp.st" "$TMPD/one.st"

# Deterministic despite the threads.
must "dp run a" dp $common --replicas=3 --batch-size=5 --save="$TMPD/a.st"
must "dp run b" dp $common --replicas=3 --batch-size=5 --save="$TMPD/b.st"
"$STCOMPARE" --exact "$TMPD/a.st" "$TMPD/b.st" || fail "dp not deterministic"

# The report: one row per replica with the phases; metrics carry the same.
must "dp report run" timeout -k 5 120 "$DDPTRAIN" --mode=dp --replicas=3 --samples=120 --epochs=1 --metrics="$TMPD/m.jsonl" >"$TMPD/out"
grep -q "^# ddptrain .*mode dp, 1 process, 3 replicas" "$TMPD/out" || fail "dp header: $(cat "$TMPD/out")"
grep -q "^#replica   scatter replicate   forward    gather      loss  backward    reduce      step" "$TMPD/out" ||
	fail "dp phase table header"
[ "$(grep -cE '^# +[0-9]+ +[0-9.]+' "$TMPD/out")" -eq 3 ] || fail "dp table rows: $(cat "$TMPD/out")"
grep -q "^# summary: mode=dp replicas=3 steps=2 " "$TMPD/out" || fail "dp summary line: $(cat "$TMPD/out")"
if command -v python3 >/dev/null; then
	python3 - "$TMPD/m.jsonl" <<'PY' || fail "dp metrics"
import json, sys
s = [json.loads(l) for l in open(sys.argv[1])][-1]
assert s["type"] == "summary" and s["mode"] == "dp" and s["replicas"] == 3, s
reps = s["per_replica"]
assert len(reps) == 3 and all("gather_ms_per_step" in r and "reduce_ms_per_step" in r for r in reps)
# Replica 0 receives the gathered outputs and the other replicas' gradients.
assert reps[0]["bytes_in_per_step"] > reps[1]["bytes_in_per_step"], reps
assert reps[0]["state_bytes"] > reps[1]["state_bytes"], reps
PY
fi
echo "dp: ok"
