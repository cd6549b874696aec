#!/bin/bash
# Every bad input gets one clear line naming the flag or file, the right exit code
# (2 usage, 1 runtime) on every rank, promptly, alone and at 1 to 4 ranks, and no output
# file is left behind (but the --metrics stream of a run that failed while training).
. "$(dirname "$0")/../lib/setup.sh"

D=$TMPD/data
mkdir -p "$D" "$TMPD/out"
"$MKNPY" "$D/x.npy" 40 10
"$MKNPY" "$D/y.npy" 40 5
"$MKNPY" "$D/y39.npy" 39 5
"$MKNPY" "$D/x7.npy" 40 7
"$MKNPY" "$D/trunc.npy" 40 10 f4 1 1 truncate
"$MKNPY" "$D/magic.npy" 40 10 f4 1 1 magic
"$MKNPY" "$D/int.npy" 40 10 f4 1 1 i4
"$MKNPY" "$D/oned.npy" 40 10 f4 1 1 1d
printf 'not a safetensors file at all' >"$D/bad.st"
run_mpi 1 --max-steps=1 --layers=10,8,5 --quiet --save="$D/wrongshape.st" || fail "making wrongshape.st"
run_mpi 1 --max-steps=1 --layers=10,10,5,5 --quiet --save="$D/extra.st" || fail "making extra.st"
SAVE="--save=$TMPD/out/w.st --metrics=$TMPD/out/m.jsonl"

checks=0
# expect CODE SUBSTRING NP ARGS...: expect_fail, and no output file left behind.
expect() {
	expect_fail "$@"
	[ -z "$(ls -A "$TMPD/out")" ] || fail "left files behind: $(ls -A "$TMPD/out"): $*"
	checks=$((checks + 1))
}
# expect_late CODE SUBSTRING NP ARGS...: a failure during training: no --save, and the
# --metrics stream is kept, ending with the failure.
expect_late() {
	expect_fail "$@"
	[ "$(ls -A "$TMPD/out")" = m.jsonl ] || fail "left: $(ls -A "$TMPD/out"): $*"
	tail -n 1 "$TMPD/out/m.jsonl" | grep -q "^{\"type\":\"end\",\"exit_code\":$1," ||
		fail "metrics do not end with the failure: $(tail -n 1 "$TMPD/out/m.jsonl")"
	rm -f "$TMPD/out/m.jsonl"
	checks=$((checks + 1))
}

# Usage errors the command line alone decides: alone (answered before MPI starts) and on
# 3 ranks (every rank takes part in the decision). Runtime errors: on 1 and 2 ranks, and a
# few on 3 and 4 (a file every rank reads, one only rank 0 reads, a failure mid-training).
for np in alone 3; do
	expect 2 "unknown option '--bogus'" $np --bogus $SAVE
	expect 2 "option '--che' is ambiguous: it abbreviates --checkpoint, --checkpoint-every" $np --che=x $SAVE
	expect 2 "--batch-size: 'abc' is not an integer" $np --batch-size=abc $SAVE
	expect 2 "--lr: -1 is out of range" $np --lr=-1 $SAVE
	expect 2 "--layers: '10' needs at least two widths" $np --layers=10 $SAVE
	expect 2 "--epochs needs a value" $np $SAVE --epochs
	expect 2 "--inputs given without --targets" $np --inputs="$D/x.npy" $SAVE
	expect 2 "--mode: 'fsdp' is not one of ddp|dp" $np --mode=fsdp $SAVE
	expect 2 "--replicas applies to --mode=dp only" $np --replicas=2 $SAVE
	expect 2 "--replicas: 0 is out of range" $np --mode=dp --replicas=0 $SAVE
done
for np in 1 2; do
	# runtime errors: exit 1
	expect 1 "--inputs: $D/missing.npy: No such file or directory" $np --inputs="$D/missing.npy" --targets="$D/y.npy" $SAVE
	expect 1 "--inputs: $D/magic.npy: not a .npy file" $np --inputs="$D/magic.npy" --targets="$D/y.npy" $SAVE
	expect 1 "dtype '<i4' is not supported" $np --inputs="$D/int.npy" --targets="$D/y.npy" $SAVE
	expect 1 "1 dimensions, need 2" $np --inputs="$D/oned.npy" --targets="$D/y.npy" $SAVE
	expect 1 "truncated" $np --inputs="$D/trunc.npy" --targets="$D/y.npy" $SAVE
	expect 1 "--targets: $D/y39.npy has 39 rows but --inputs" $np --inputs="$D/x.npy" --targets="$D/y39.npy" $SAVE
	expect 1 "has 7 columns but --layers starts with width 10" $np --inputs="$D/x7.npy" --targets="$D/y.npy" $SAVE
	expect 1 "--init: $D/none.st: No such file" $np --init="$D/none.st" $SAVE
	expect 1 "--init: $D/bad.st: bad safetensors header length" $np --init="$D/bad.st" $SAVE
	expect 1 "tensor 'net1.weight' has the wrong shape" $np --init="$D/wrongshape.st" $SAVE
	expect 1 "--init: $D/extra.st: unexpected tensor 'net3.weight': --layers has net1 to net2" $np --init="$D/extra.st" $SAVE
	expect_late 1 "training diverged" $np --lr=1e6 --momentum=0.9 $SAVE
	expect 1 "--layers=200000,200000 --batch-size=20: needs 745.14 GiB per rank, but only" $np --layers=200000,200000
	expect 1 "--save: $TMPD/out/no/dir/w.st" $np --max-steps=2 --save="$TMPD/out/no/dir/w.st"
	expect 1 "--metrics: $TMPD/out/no/dir/m.jsonl" $np --max-steps=2 --metrics="$TMPD/out/no/dir/m.jsonl"
	expect 1 "--device=cuda: " $np --device=cuda $SAVE
	# a usage error found after MPI starts (where the run is placed)
	expect 2 "--backend=nccl needs GPUs (--device=cuda); use --backend=mpi on the CPU" $np --device=cpu --backend=nccl $SAVE
done
for np in 3 4; do
	expect 1 "--inputs: $D/missing.npy: No such file or directory" $np --inputs="$D/missing.npy" --targets="$D/y.npy" $SAVE
	expect 1 "--init: $D/bad.st: bad safetensors header length" $np --init="$D/bad.st" $SAVE
	expect_late 1 "training diverged" $np --lr=1e6 --momentum=0.9 $SAVE
done
# --mode=dp is one process: refused under mpirun with several ranks, and its own
# errors behave as in ddp mode.
for np in 2 3; do
	expect 2 "--mode=dp runs in one process (one thread per replica), but $np MPI ranks were started" $np --mode=dp $SAVE
done
expect 1 "--inputs: $D/missing.npy: No such file or directory" 1 --mode=dp --inputs="$D/missing.npy" --targets="$D/y.npy" $SAVE
expect_late 1 "training diverged" 1 --mode=dp --lr=1e6 --momentum=0.9 $SAVE
expect 1 "tensor 'net1.weight' has the wrong shape" 1 --mode=dp --init="$D/wrongshape.st" $SAVE
expect 2 "--drop-last: 10 samples make no full batch of 12" 1 --mode=dp --replicas=3 --batch-size=4 --samples=10 --drop-last $SAVE
# Only meaningful with several ranks.
expect 2 "--drop-last: 3 samples leave none for each of 4 ranks" 4 --samples=3 --drop-last $SAVE
# A configuration that differs between ranks (MPMD launch): named by the rank that differs.
rm -f "$TMPD"/rc.*
timeout -k 5 60 mpirun --oversubscribe -np 1 "$DDPTRAIN" --batch-size=20 : -np 1 "$DDPTRAIN" --batch-size=10 \
	>"$TMPD/stdout" 2>"$TMPD/stderr" && fail "mismatched configuration was accepted"
grep -q "^ddptrain: rank 1: configuration differs between ranks: --batch-size=10 here, --batch-size=20 on rank 0$" \
	"$TMPD/stderr" || fail "mismatch message: $(cat "$TMPD/stderr")"
[ "$(grep -c '^ddptrain' "$TMPD/stderr")" -eq 1 ] || fail "mismatch reported more than once"
echo "bad-input: $checks cases, each with its message once and the same exit code on every rank"
