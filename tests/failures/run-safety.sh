#!/bin/bash
# What a hostile or unlucky environment gets: FIFOs as input files, output flags
# on some ranks only, a launcher that starts lone processes, an input truncated
# while training, a standard output that cannot be written, --save through a
# symbolic link, stale temporary files, an address-space limit (ulimit -v) too
# small for what training maps; and the --metrics stream survives stops and resumes.
. "$(dirname "$0")/../lib/setup.sh"
cd "$TMPD"

# 2. A FIFO (nobody writing) as an input: refused at once, exit 1 (before: open() blocked forever).
mkfifo fifo
"$MKNPY" x.npy 40 10 && "$MKNPY" y.npy 40 5
np=1
for args in "--inputs=fifo --targets=y.npy" "--inputs=x.npy --targets=fifo" "--init=fifo" "--resume=fifo"; do
	expect_fail 1 "fifo: not a regular file" $np $args --quiet
	np=$((3 - np))
done
echo "FIFO as --inputs, --targets, --init, --resume: exit 1 on every rank"

# mpmd_fail CODE WANT ARGS...: an MPMD mpirun line; every rank exits CODE, WANT on stderr.
mpmd_fail() {
	local code=$1 want=$2
	shift 2
	rm -f rc.*
	timeout -k 5 60 mpirun --oversubscribe "$@" >out 2>err || true
	for r in 0 1; do
		[ "$(cat rc.$r 2>/dev/null)" = "$code" ] || fail "rank $r: exit $(cat rc.$r 2>/dev/null), want $code: $*: $(cat err)"
	done
	grep -qF -- "$want" err || fail "no '$want': $(cat err)"
}
R='"$0" "$@"; echo $? >rc.$OMPI_COMM_WORLD_RANK'
# 3. Output flags on some ranks only are configuration differences (before: collectives out of step).
mpmd_fail 2 "configuration differs between ranks: --checkpoint=c.st here, --checkpoint= on rank 0" \
	-np 1 bash -c "$R" "$DDPTRAIN" --quiet : -np 1 bash -c "$R" "$DDPTRAIN" --quiet --checkpoint=c.st
mpmd_fail 2 "configuration differs between ranks: --metrics= here, --metrics=m.jsonl on rank 0" \
	-np 1 bash -c "$R" "$DDPTRAIN" --quiet --metrics=m.jsonl : -np 1 bash -c "$R" "$DDPTRAIN" --quiet
# Every output is compared (the option table's file column): --prometheus and its interval too.
mpmd_fail 2 "configuration differs between ranks: --prometheus=b.prom here, --prometheus=a.prom on rank 0" \
	-np 1 bash -c "$R" "$DDPTRAIN" --quiet --prometheus=a.prom : -np 1 bash -c "$R" "$DDPTRAIN" --quiet --prometheus=b.prom
mpmd_fail 2 "configuration differs between ranks: --prometheus-every=4 here, --prometheus-every=3 on rank 0" \
	-np 1 bash -c "$R" "$DDPTRAIN" --quiet --prometheus-every=3 : -np 1 bash -c "$R" "$DDPTRAIN" --quiet --prometheus-every=4
[ ! -e c.st ] && [ ! -e m.jsonl ] && [ ! -e a.prom ] || fail "refused runs wrote output"
echo "--checkpoint, --metrics, --prometheus or --prometheus-every on one rank only or differing: exit 2 on both"

# 18. A launcher that starts lone processes: refused with a hint, unless one is what it says.
for env in "SLURM_STEP_NUM_TASKS=4 SLURM_NTASKS=4 SLURM_PROCID=1" "WORLD_SIZE=2 RANK=1"; do
	rc=0; env $env "$DDPTRAIN" --quiet 2>err || rc=$?
	[ $rc -eq 2 ] && grep -q "each would train alone\|each process would train alone" err &&
		grep -q "srun --mpi=pmix" err || fail "$env: exit $rc: $(cat err)"
done
SLURM_STEP_NUM_TASKS=1 SLURM_NTASKS=1 WORLD_SIZE=1 "$DDPTRAIN" --quiet --max-steps=1 || fail "a world of 1 that is one"
SLURM_NTASKS=4 "$DDPTRAIN" --quiet --max-steps=1 || fail "a lone process in a 4-task allocation (no srun step)"
WORLD_SIZE=2 run_mpi 1 --quiet --max-steps=1 || fail "mpirun -np 1 with a stray WORLD_SIZE"
echo "srun without pmix, torchrun-style WORLD_SIZE: exit 2 with a hint"

# 14. An input truncated while training: one line naming the file, exit 1, the job ends
#     (before: SIGBUS, exit 135, no message).
"$MKNPY" bx.npy 20000 10 && "$MKNPY" by.npy 20000 5
timeout -k 5 60 mpirun --oversubscribe -np 2 "$DDPTRAIN" --inputs=bx.npy --targets=by.npy --epochs=100000 \
	--log-every=0 >bus.out 2>bus.err &
bg=$!
for _ in $(seq 1 300); do grep -q "^# buckets:" bus.out 2>/dev/null && break; sleep 0.1; done
truncate -s 4096 bx.npy
rc=0; wait $bg || rc=$?
[ $rc -eq 1 ] || fail "truncated input: exit $rc: $(cat bus.err)"
grep -q "ddptrain: --inputs: bx.npy: the file became shorter while training read it" bus.err ||
	fail "truncated input message: $(cat bus.err)"
echo "input truncated during training: exit 1 naming it"

# Issue 30 item 3, issue 34 item 6. An address-space limit (ulimit -v) that cannot hold
#    what training still maps -- OpenBLAS's 128 MiB work buffer, mapped at the first product
#    (its allocator then retries forever), MPI's all-reduce buffers, and the loader's worker
#    threads and batches, which start after the check -- is refused before training on every rank, exit 1,
#    naming the limit and one that would do. The limit named is enough: the same job trains
#    under it; 64 MiB below it the job is refused again, naming no larger limit. A batch of
#    2000 x 15 values starts loader workers (before: the named limit left no room for their
#    stacks and malloc arenas, and both ranks spun in OpenBLAS until --timeout=10; and
#    whether a thread's 64 MiB arena was mapped depended on the limit, so a process started
#    without mpirun was told 458752 at ulimit -v 300000, then 589824 at 458752).
#    The limit is set in ddptrain's own process (mpirun keeps its own).
limited() { # limited KIB: $TMPD/limited runs ddptrain under ulimit -v KIB
	printf '#!/bin/sh\nulimit -v %s && exec "%s" "$@"\n' "$1" "$DDPTRAIN" >"$TMPD/limited"
	chmod +x "$TMPD/limited"
}
aspace="--batch-size=2000 --max-steps=5 --timeout=10"
limited 200000
DDPTRAIN=$TMPD/limited expect_fail 1 "the address-space limit (ulimit -v 200000, 195.3 MiB) cannot hold " 2 $aspace
cp "$TMPD/stderr" as.err
enough=$(sed -n 's/.*raise ulimit -v to at least \([0-9]*\)$/\1/p' as.err)
[ -n "$enough" ] || fail "no limit named: $(cat as.err)"
limited "$enough"
DDPTRAIN=$TMPD/limited run_mpi 2 $aspace >as.out 2>&1 ||
	fail "the job does not train under the limit the refusal named (ulimit -v $enough): $(grep -m1 ddptrain: as.out)"
grep -q "^# done: 5 steps" as.out || fail "not 5 steps under ulimit -v $enough: $(cat as.out)"
grep -qE "cannot hold the [0-9.]+ MiB training still maps \(OpenBLAS's 128 MiB work buffer, MPI's all-reduce buffers, the loader's [0-9]+ worker threads? and its batches\): [0-9.]+ MiB are in use; raise ulimit -v to at least [0-9]+$" as.err ||
	fail "the refusal does not name the work buffer and the loader's workers: $(cat as.err)"
limited $((enough - 65536))
DDPTRAIN=$TMPD/limited expect_fail 1 "the address-space limit (ulimit -v $((enough - 65536)), " 2 $aspace
again=$(sed -n 's/.*raise ulimit -v to at least \([0-9]*\)$/\1/p' "$TMPD/stderr")
[ -n "$again" ] && [ "$again" -le "$enough" ] ||
	fail "64 MiB below the limit named ($enough), another is named: $(cat "$TMPD/stderr")"
echo "ulimit -v 200000, loader workers: exit 1 before training naming $enough; $((enough - 65536)): refused, naming $again; $enough trains"
# The same started without mpirun (MPI's singleton maps more, its helper threads' arenas
# among it: before, 200000 named 327680, which named 458752, which hung). OpenBLAS's own
# threads, started as the library loads and idle in ddptrain, map 136 MiB each: one
# thread, as under mpirun's binding, on every machine.
limited 200000
OPENBLAS_NUM_THREADS=1 DDPTRAIN=$TMPD/limited expect_fail 1 "the address-space limit (ulimit -v 200000, 195.3 MiB) cannot hold the " alone $aspace
alone=$(sed -n 's/.*raise ulimit -v to at least \([0-9]*\)$/\1/p' "$TMPD/stderr")
[ -n "$alone" ] || fail "alone: no limit named: $(cat "$TMPD/stderr")"
limited "$alone"
OPENBLAS_NUM_THREADS=1 timeout -k 5 60 "$TMPD/limited" $aspace >as.out 2>&1 ||
	fail "alone: the job does not train under the limit the refusal named (ulimit -v $alone): $(grep -m1 ddptrain: as.out)"
grep -q "^# done: 5 steps" as.out || fail "alone: not 5 steps under ulimit -v $alone: $(cat as.out)"
echo "without mpirun: ulimit -v 200000 names $alone, which trains"

# 17, 11. Standard output on a full device: the write error is reported, exit 1, and
#     no --save is written (before: exit 0, output lost).
rc=0; "$DDPTRAIN" --max-steps=3 --save=full.st >/dev/full 2>err || rc=$?
[ $rc -eq 1 ] && grep -q "^ddptrain: standard output: write error: No space left on device$" err ||
	fail "stdout on /dev/full: exit $rc: $(cat err)"
[ ! -e full.st ] && ! ls full.st.tmp.* >/dev/null 2>&1 || fail "a failed run left --save: $(ls)"
echo "stdout on /dev/full: exit 1, no --save"

# 13. An output through a symbolic link replaces the file it names and keeps the link.
mkdir real
"$DDPTRAIN" --max-steps=1 --quiet --save=real/w.st || fail "first save"
cp real/w.st w.orig
ln -s real/w.st link.st
ln -s real/new.st dangling.st
"$DDPTRAIN" --max-steps=3 --quiet --save=link.st || fail "save through a link"
"$DDPTRAIN" --max-steps=3 --quiet --save=dangling.st || fail "save through a dangling link"
[ -L link.st ] && [ -L dangling.st ] || fail "a link was replaced"
! cmp -s real/w.st w.orig && "$STCOMPARE" --exact real/w.st real/new.st >/dev/null ||
	fail "the link's target was not rewritten"
[ "$(ls real)" = "$(printf 'new.st\nw.st')" ] || fail "left in real/: $(ls real)"
# --trace and --prometheus go through the same writer: links kept, the files they name
# written (the one a dangling link names created), no temporary left anywhere.
mkdir obs
ln -s obs/t.json t-link.json
ln -s obs/p.prom p-link.prom
echo old >obs/t.json
"$DDPTRAIN" --max-steps=3 --quiet --trace=t-link.json --prometheus=p-link.prom || fail "trace and prometheus through links"
[ -L t-link.json ] && [ -L p-link.prom ] || fail "a --trace or --prometheus link was replaced by a file"
grep -q traceEvents obs/t.json && grep -q '^ddptrain_step{' obs/p.prom ||
	fail "the files the links name were not written: $(ls -l obs)"
! ls ./*.tmp.* obs/*.tmp.* >/dev/null 2>&1 || fail "temporaries left: $(ls . obs)"

# 12. Temporary files of the same target left by a killed run are removed at start-up;
#     nothing else is.
touch real/w.st.tmp.Ab3dE9 real/w.st.tmp.keep real/w.st.tmpXYZ123 real/other.st.tmp.Ab3dE9
"$DDPTRAIN" --max-steps=1 --quiet --save=link.st || fail "save with stale temporaries"
[ "$(ls real | tr '\n' ' ')" = "new.st other.st.tmp.Ab3dE9 w.st w.st.tmp.keep w.st.tmpXYZ123 " ] ||
	fail "stale temporaries: $(ls real)"
echo "--save, --trace and --prometheus through links; stale temporaries of the target removed"

# 5. --metrics is a stream: a stopped run keeps its records (start, steps, end) and a
#    resumed run appends; every record has a time, the first the version and settings.
"$DDPTRAIN" --max-steps=6 --log-every=2 --quiet --metrics=m.jsonl --checkpoint=mk.st || fail "first attempt"
"$DDPTRAIN" --max-steps=10 --log-every=2 --quiet --metrics=m.jsonl --resume=mk.st || fail "resumed attempt"
"$DDPTRAIN" --epochs=100000 --log-every=1000 --quiet --metrics=k.jsonl &
p=$!
for _ in $(seq 1 300); do [ "$(cat k.jsonl 2>/dev/null | wc -l)" -ge 3 ] && break; sleep 0.1; done
kill -TERM $p
rc=0; wait $p || rc=$?
[ $rc -eq 3 ] || fail "stopped metrics run: exit $rc"
python3 - m.jsonl k.jsonl <<'PY' || fail "metrics stream"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["type"] for r in rows] == ["start", "step", "step", "step", "summary",
                                     "start", "step", "step", "summary"], [r["type"] for r in rows]
assert [r["step"] for r in rows if r["type"] == "step"] == [2, 4, 6, 8, 10]
assert all("time" in r and r["time"].endswith("Z") for r in rows)
s = rows[0]
assert s["version"] and s["start_time"] and s["config"]["max-steps"] == "6", s
assert s["config"]["metrics"] == "m.jsonl" and s["config"]["timeout"] == "600", s
assert rows[5]["config"]["resume"] == "mk.st", rows[5]
k = [json.loads(l) for l in open(sys.argv[2])]
assert k[0]["type"] == "start" and k[-1]["type"] == "end" and k[-1]["exit_code"] == 3, k[-1]
PY
echo "run-safety: ok"
