#!/bin/bash
# Outputs that cannot be written: --save and --metrics into a missing directory,
# onto something that is not a regular file, into a read-only directory, onto a
# full file system; --checkpoint and --metrics past the file-size limit. Each fails with one clear line and exit 1 on every rank,
# before training where that can be known (nothing printed on stdout), and the
# previous file of that name survives byte for byte, with no temporary left.
# The observers' outputs (--metrics, --trace, --prometheus) filling the disk cost
# a run its exit 0, not its weights: one warning at once, --save written, exit 4.
. "$(dirname "$0")/../lib/setup.sh"

RO=$TMPD/ro FULL=$TMPD/full
mkdir -p "$RO" "$FULL"
# Unmount what was mounted, make the read-only directory writable again, then remove all.
trap 'umount "$RO" "$FULL" 2>/dev/null || true; chmod -R u+w "$TMPD" 2>/dev/null || true; rm -rf "$TMPD"' EXIT

checks=0
# expect SUBSTRING WHEN NP ARGS...: exit 1 on every rank, SUBSTRING in the only message;
# WHEN is "early" (refused before training: nothing on stdout) or "late".
expect() {
	local want=$1 when=$2
	shift 2
	expect_fail 1 "$want" "$@"
	if [ "$when" = early ]; then
		[ ! -s "$TMPD/stdout" ] || fail "trained before refusing: $*: $(head -3 "$TMPD/stdout")"
	fi
	checks=$((checks + 1))
}

# keep FILE...: each must still equal its .orig copy, and no temporary file is left beside it.
keep() {
	for f in "$@"; do
		cmp -s "$f" "$f.orig" || fail "$f was changed by a failed run"
		! ls "$f".tmp.* >/dev/null 2>&1 || fail "temporary file left: $(ls "$f".tmp.*)"
	done
}

# Good previous outputs, to be kept by every failing run below.
G=$TMPD/good
mkdir -p "$G"
run_mpi 1 --max-steps=3 --quiet --save="$G/w.st" --metrics="$G/m.jsonl" || fail "making the good outputs"
cp "$G/w.st" "$G/w.st.orig"
cp "$G/m.jsonl" "$G/m.jsonl.orig"

mkfifo "$TMPD/fifo"
for np in 1 2; do
	expect "--save: $TMPD/no/dir/w.st: cannot create a file beside it: No such file or directory" early $np \
		--save="$TMPD/no/dir/w.st" --metrics="$G/m.jsonl"
	expect "--metrics: $TMPD/no/dir/m.jsonl: cannot create a file beside it: No such file or directory" early $np \
		--save="$G/w.st" --metrics="$TMPD/no/dir/m.jsonl"
	expect "--save: $TMPD/fifo: exists and is not a regular file" early $np --save="$TMPD/fifo"
	expect "--metrics: $G: exists and is not a regular file" early $np --metrics="$G"
	# A run that fails for another reason keeps the previous weights too; its metrics
	# (a stream) are kept, ending with the failure.
	expect "training diverged" late $np --lr=1e6 --momentum=0.9 --save="$G/w.st" --metrics="$G/m.jsonl"
	keep "$G/w.st"
	tail -n 1 "$G/m.jsonl" | grep -q '^{"type":"end","exit_code":1,"reason":"loss is' ||
		fail "the failed run's metrics do not end with its failure: $(tail -n 1 "$G/m.jsonl")"
	cp "$G/m.jsonl.orig" "$G/m.jsonl"
done
[ -p "$TMPD/fifo" ] || fail "the fifo was replaced"

# A directory that takes no new file. Root writes through permission bits, so as
# root use a read-only mount; otherwise a directory without write permission.
if [ "$(id -u)" -eq 0 ]; then
	if mount -t tmpfs -o size=64k tmpfs "$RO" 2>/dev/null; then
		cp "$G/w.st" "$G/m.jsonl" "$RO/" && cp "$G/w.st" "$RO/w.st.orig" && cp "$G/m.jsonl" "$RO/m.jsonl.orig"
		mount -o remount,ro "$RO" || fail "remount read-only"
		ro_ok=1
	else
		echo "output-safety: cannot mount a tmpfs here (needs CAP_SYS_ADMIN); read-only directory cases skipped"
	fi
	ro_err="Read-only file system"
else
	cp "$G/w.st" "$G/m.jsonl" "$RO/" && cp "$G/w.st" "$RO/w.st.orig" && cp "$G/m.jsonl" "$RO/m.jsonl.orig"
	chmod 555 "$RO"
	ro_ok=1 ro_err="Permission denied"
fi
if [ "${ro_ok:-0}" = 1 ]; then
	for np in 1 2; do
		expect "--save: $RO/w.st: cannot create a file beside it: $ro_err" early $np --save="$RO/w.st"
		expect "--metrics: $RO/m.jsonl: cannot create a file beside it: $ro_err" early $np --metrics="$RO/m.jsonl"
	done
	keep "$RO/w.st" "$RO/m.jsonl"
fi

# incomplete WARNING NP ARGS...: a run that finishes but loses an observer's output
# (--metrics, --trace, --prometheus): every rank exits 4 within 20 s; standard error is
# the warning, said when it happened, and the closing line; and --save is written, the
# same weights as the run without that output ($TMPD/ref.NP.st).
incomplete() {
	local want=$1 np=$2 t0=$SECONDS el
	shift 2
	rm -f "$TMPD"/rc.* "$TMPD/lost.st"
	RCDIR=$TMPD timeout -k 5 60 mpirun --oversubscribe -np "$np" \
		bash -c '"$0" "$@"; echo $? >"$RCDIR/rc.$OMPI_COMM_WORLD_RANK"' "$DDPTRAIN" "$@" --save="$TMPD/lost.st" \
		>"$TMPD/stdout" 2>"$TMPD/stderr" || fail "mpirun itself failed ($?) for: $*: $(tail -n 5 "$TMPD/stderr")"
	el=$((SECONDS - t0))
	[ "$el" -le 20 ] || fail "took ${el}s: $*: $(cat "$TMPD/stderr")"
	for r in $(seq 0 $((np - 1))); do
		[ "$(cat "$TMPD/rc.$r")" = 4 ] || fail "rank $r exited $(cat "$TMPD/rc.$r"), want 4: $* ($(cat "$TMPD/stderr"))"
	done
	[ "$(wc -l <"$TMPD/stderr")" -eq 2 ] || fail "want the warning and the closing line: $*: $(cat "$TMPD/stderr")"
	head -n 1 "$TMPD/stderr" | grep -qF -- "ddptrain: warning: $want" || fail "want the warning '$want': $(cat "$TMPD/stderr")"
	tail -n 1 "$TMPD/stderr" | grep -q '^ddptrain: training finished and --save is written, but --[a-z]* was not written in full' ||
		fail "want the closing line: $(cat "$TMPD/stderr")"
	cmp -s "$TMPD/lost.st" "$TMPD/ref.$np.st" || fail "--save of the run that lost an output differs: $*"
	checks=$((checks + 1))
}

# A full file system: a 68 KiB tmpfs (root only) holding a 4 KiB previous --save.
if [ "$(id -u)" -eq 0 ] && mount -t tmpfs -o size=68k tmpfs "$FULL" 2>/dev/null; then
	# Layers 1,5461,1 hold 16384 parameters: 64 KiB of data plus the header.
	run_mpi 1 --layers=1,8,1 --max-steps=1 --quiet --save="$FULL/w.st" || fail "small save on the tmpfs"
	cp "$FULL/w.st" "$TMPD/full-w.st.orig"
	big="--layers=1,5461,1 --samples=64 --max-steps=2"
	for np in 1 2; do
		# Known at start-up: 10,2000,5 needs 125 KiB.
		expect "--save: $FULL/w.st: needs 128020 bytes but its file system has 65536 free" early $np \
			--layers=10,2000,5 --save="$FULL/w.st"
		# Only the header does not fit: found while writing, after training.
		expect "--save: $FULL/w.st: write: No space left on device" late $np $big --quiet --save="$FULL/w.st"
		cmp -s "$FULL/w.st" "$TMPD/full-w.st.orig" || fail "previous --save changed by a failed save"
		[ "$(ls "$FULL")" = w.st ] || fail "left behind on the full device: $(ls "$FULL")"
		# The observers' outputs cost a finished run its exit 0, not its weights (before:
		# exit 1 and no --save; --prometheus: rank 0 left the others in the next step's
		# all-reduce until --timeout). 300 steps, one metrics record each: 60 KiB in.
		obs="--max-steps=300 --log-every=1 --quiet --timeout=15"
		run_mpi $np $obs --save="$TMPD/ref.$np.st" || fail "the run without observers"
		incomplete "--metrics: $FULL/m.jsonl: write: No space left on device; training goes on without its records" \
			$np $obs --metrics="$FULL/m.jsonl"
		[ "$(ls "$FULL" | tr '\n' ' ')" = "m.jsonl w.st " ] || fail "left behind on the full device: $(ls "$FULL")"
		python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' "$FULL/m.jsonl" ||
			fail "the metrics on the full device hold a partial line"
		rm -f "$FULL/m.jsonl"
		# The trace, written at the end, outgrows the device: the weights come first.
		incomplete "--trace: $FULL/t.json: write: No space left on device; the weights and the other outputs are kept" \
			$np $obs --trace="$FULL/t.json"
		[ "$(ls "$FULL")" = w.st ] || fail "left behind on the full device: $(ls "$FULL")"
		# --prometheus on a device already full: its first write, at step 1, fails.
		dd if=/dev/zero of="$FULL/filler" bs=4k 2>/dev/null || true
		incomplete "--prometheus: $FULL/p.prom: write: No space left on device; training goes on; the file is written again at the next update" \
			$np $obs --prometheus="$FULL/p.prom" --prometheus-every=0.01
		[ "$(ls "$FULL" | tr '\n' ' ')" = "filler w.st " ] || fail "left behind on the full device: $(ls "$FULL")"
		rm -f "$FULL/filler"
	done
else
	echo "output-safety: cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN); full file system cases skipped"
fi
# An output another job is writing. A second job naming the same checkpoint is refused at
# start (exit 2, not retried by run-local.sh or the batch scripts) with the first job's host
# and pid, and the first job's temporary in flight survives (before: the second job removed
# it as stale and the first died with "rename: No such file or directory"). Every fsync of
# the first job takes 1 s, so its checkpoint temporaries live that long (5 checkpoints,
# about 10 s in all).
J=$TMPD/jobs
mkdir "$J"
mpirun --oversubscribe -np 2 -x LD_PRELOAD="$FAULTSHIM" -x DDPT_SHIM_SLOW_FSYNC=1 "$DDPTRAIN" --max-steps=5 \
	--checkpoint-every=1 --checkpoint="$J/c.st" --quiet >"$J/a.out" 2>"$J/a.err" &
a=$!
for _ in $(seq 1 300); do ls "$J"/c.st.tmp.* >/dev/null 2>&1 && break; sleep 0.1; done
inflight=$(ls "$J"/c.st.tmp.* 2>/dev/null) ||
	fail "the first job wrote no checkpoint in 30 s (job $(kill -0 $a 2>/dev/null && echo running || echo ended); in $J: $(ls "$J" | tr '\n' ' ')): $(cat "$J/a.err" "$J/a.out")"
expect_fail 2 "--checkpoint: $J/c.st: another ddptrain is writing it (host $(hostname), pid " 2 \
	--max-steps=2 --checkpoint="$J/c.st"
[ -e "$inflight" ] || [ -e "$J/c.st" ] || fail "the refused job removed the first job's temporary"
# The pid named is the first job's rank 0, which holds c.st.lock.
[ "$(cat "$J/c.st.lock")" = "$(hostname) $(sed -n 's/.*, pid \([0-9]*\)).*/\1/p' "$TMPD/stderr")" ] ||
	fail "the message names another process than c.st.lock's: $(cat "$TMPD/stderr") / $(cat "$J/c.st.lock")"
wait "$a" || fail "the first job failed: $(grep -v '^[- ]*$' "$J/a.err" | head -3)"
[ "$(ls "$J" | tr '\n' ' ')" = "a.err a.out c.st " ] || fail "left beside the checkpoint: $(ls "$J")"
# A job killed with kill -9 leaves its lock file and a temporary: the next job takes the
# lock over and removes the temporary, which no live writer holds.
echo "$(hostname) 999999" >"$J/c.st.lock"
cp "$J/c.st" "$J/c.st.tmp.AbC123"
run_mpi 2 --max-steps=4 --resume="$J/c.st" --checkpoint="$J/c.st" --quiet || fail "taking over a dead job's lock"
[ "$(ls "$J" | tr '\n' ' ')" = "a.err a.out c.st " ] || fail "left after taking over a dead job's files: $(ls "$J")"
checks=$((checks + 2))

# A file-size limit (ulimit -f, which Slurm copies from the submitting shell) is a write
# error naming the file, not SIGXFSZ (before: exit 153, no message, c.st.tmp.* left). Open
# MPI's own files need a few MiB, so 8000 KiB (8192000 bytes), and the all-reduce that maps
# no shared window of the gradients' size. Layers 1,682666,1 hold 8191996 bytes of weights:
# they fit, the header does not.
FS=$TMPD/fsize
mkdir "$FS"
# One epoch of 2 micro-batches: a checkpoint at its end, which 2 ranks can resume too.
run_mpi 1 --samples=40 --max-steps=2 --quiet --checkpoint="$FS/c.st" --metrics="$FS/m.jsonl" ||
	fail "making the files under the limit"
cp "$FS/c.st" "$FS/c.st.orig"
# A metrics file 100 bytes short of the limit: the resumed run's first record crosses it.
head -c 8191900 /dev/zero | tr '\0' ' ' >"$FS/m.jsonl"
(
	ulimit -f 8000
	export DDPTRAIN_ALLREDUCE=mpi
	for np in 1 2; do
		# Known at start-up: 1,700000,1 needs 8400004 bytes.
		expect "--checkpoint: $FS/c.st: needs 8400004 bytes but the file-size limit (ulimit -f) is 8192000 bytes" early $np \
			--layers=1,700000,1 --samples=40 --max-steps=1 --checkpoint="$FS/c.st"
		expect "--checkpoint: $FS/c.st: write: File too large (the file-size limit, ulimit -f, is 8192000 bytes)" late $np \
			--layers=1,682666,1 --samples=40 --max-steps=1 --quiet --checkpoint="$FS/c.st"
		keep "$FS/c.st"
		# The metrics crossing the limit cost the run its exit 0, not its weights (exit 4).
		run_mpi $np --samples=40 --max-steps=3 --quiet --resume="$FS/c.st" --save="$TMPD/ref.$np.st" ||
			fail "the resumed run without --metrics under the limit"
		incomplete "--metrics: $FS/m.jsonl: write: File too large (the file-size limit, ulimit -f, is 8192000 bytes)" $np \
			--samples=40 --max-steps=3 --quiet --resume="$FS/c.st" --checkpoint="$FS/c.st" --metrics="$FS/m.jsonl"
		[ "$(stat -c %s "$FS/m.jsonl")" = 8191900 ] || fail "the metrics file kept part of a record: $(stat -c %s "$FS/m.jsonl")"
		cp "$FS/c.st.orig" "$FS/c.st" # that run's checkpoint of step 3 was written
	done
) || exit 1
[ "$(ls "$FS" | tr '\n' ' ')" = "c.st c.st.orig m.jsonl " ] || fail "left behind under the file-size limit: $(ls "$FS")"
checks=$((checks + 6))
echo "output-safety: $checks cases, each refused with exit 1 (another job's output: 2) on every rank and the previous files intact, or finished with exit 4 and its weights saved"
