#!/bin/bash
# The trainer's features beyond MSE and SGD (cross-entropy, AdamW, Nesterov, lr schedules,
# gradient clipping, frozen layers, validation) together: ranks against one rank
# (equivalence), stop and --resume bit-identical in both modes, the eval records and
# --save-best, and the bad-input messages. tests/numerics/torch-crosscheck.sh checks the same
# features against PyTorch itself.
. "$(dirname "$0")/../lib/setup.sh"
cd "$TMPD"

same() { "$STCOMPARE" --exact "$1" "$2" >/dev/null || fail "$3: $("$STCOMPARE" "$1" "$2" 0)"; }

# Synthetic classification (4 classes from the teacher), a synthetic validation set.
F="--layers=8,16,16,4 --loss=cross-entropy --samples=240 --val-samples=50 --epochs=3 --seed=5
   --optimizer=adamw --lr=0.01 --betas=0.8,0.99 --weight-decay=0.05 --lr-schedule=cosine
   --warmup-steps=4 --clip-grad-norm=0.5 --freeze=2 --quiet"

# 1. Equivalence: 2 ranks of batch 6 train what 1 rank of batch 12 trains, with every feature on.
run_mpi 1 $F --batch-size=12 --save=one.st || fail "1 rank"
run_mpi 2 $F --batch-size=6 --save=two.st || fail "2 ranks"
out=$("$STCOMPARE" two.st one.st 1e-5) || fail "2 ranks against 1: $out"
echo "AdamW + cosine warmup + clipping + freeze + cross-entropy, 2 ranks B=6 vs 1 rank B=12: $out"
"$DDPTRAIN" --mode=dp --replicas=2 $F --batch-size=6 --save=dp.st || fail "dp"
out=$("$STCOMPARE" dp.st one.st 1e-5) || fail "dp against 1 rank: $out"
echo "the same in --mode=dp --replicas=2: $out"

# 2. Stop and resume, bit-identical: AdamW's moments, the step count and the schedule all
#    continue. A schedule's shape depends on the run's length, so the stops are the periodic
#    checkpoints of a whole run (mid-epoch, and at the epoch boundary: 10 steps per epoch);
#    dp mode and SGD with Nesterov too.
A="$F --batch-size=6 --grad-accum=2"
run_mpi 2 $A --save=straight.st --checkpoint=ck.st --checkpoint-every=5 --keep-checkpoints=6 ||
	fail "straight run"
for k in 5 10; do
	run_mpi 2 $A --resume="$(printf 'ck.st.step-%08d' $k)" --save=resumed.st || fail "resume from step $k"
	same resumed.st straight.st "AdamW resume after step $k"
done
"$DDPTRAIN" --mode=dp $A --save=dpstraight.st --checkpoint=dpck.st --checkpoint-every=10 \
	--keep-checkpoints=3 || fail "dp straight"
"$DDPTRAIN" --mode=dp $A --resume=dpck.st.step-00000010 --save=dpresumed.st || fail "dp resume"
same dpresumed.st dpstraight.st "dp AdamW resume"
N="--samples=200 --epochs=2 --batch-size=8 --momentum=0.9 --nesterov --lr-schedule=linear --warmup-steps=3 --quiet"
run_mpi 2 $N --save=nstraight.st --checkpoint=nck.st --checkpoint-every=5 --keep-checkpoints=6 ||
	fail "nesterov straight"
run_mpi 2 $N --resume=nck.st.step-00000005 --save=nresumed.st || fail "nesterov resume"
same nresumed.st nstraight.st "Nesterov + linear schedule resume"
echo "stop and --resume: bit-identical (AdamW at 2 ranks and in dp mode, SGD Nesterov)"
# The optimizer and the schedule's length must match on resume.
rc=0; run_mpi 2 ${A/--optimizer=adamw/--optimizer=sgd} --resume=ck.st.step-00000005 2>err || rc=$?
[ $rc -eq 2 ] && grep -q "written with --optimizer=adamw; this run has --optimizer=sgd" err || fail "optimizer change on resume ($rc): $(cat err)"
rc=0; run_mpi 2 $A --max-steps=20 --resume=ck.st.step-00000005 2>err || rc=$?
[ $rc -eq 2 ] && grep -q "written with --max-steps=0; this run has --max-steps=20" err ||
	fail "schedule length change ($rc): $(cat err)"
# A world-size change at an epoch boundary keeps the schedule's length as the checkpoint
# wrote it (20 steps at 1 rank; the epoch left takes 5 at 2 ranks): steps 11 to 15 at 2
# ranks take the lr of steps 11 to 15 at 1 rank (issue 30; before: the length was
# recomputed as 15 and the lr jumped at the resume: 0.00323 at step 11, not 0.00587).
W="--layers=4,8,2 --samples=40 --batch-size=4 --epochs=2 --lr=0.01 --optimizer=adamw --lr-schedule=cosine
   --warmup-steps=2 --drop-last --quiet --log-every=1"
run_mpi 1 $W --checkpoint=wk.st --checkpoint-every=10 --keep-checkpoints=3 --metrics=w1.jsonl || fail "1 rank, cosine"
run_mpi 2 $W --resume=wk.st.step-00000010 --metrics=w2.jsonl || fail "resumed at 2 ranks"
lrs() { grep '"type":"step"' "$1" | sed 's/.*"step":\([0-9]*\).*"lr":\([^,}]*\).*/\1 \2/'; }
want=$(lrs w1.jsonl | sed -n '11,15p')
[ -n "$want" ] && [ "$(lrs w2.jsonl)" = "$want" ] ||
	fail "the lr after a resume at 2 ranks: $(lrs w2.jsonl | tr '\n' ' '), want $(tr '\n' ' ' <<<"$want")"
# The other way, fewer ranks would take the run past the schedule's end: refused (exit 2).
run_mpi 2 $W --checkpoint=wj.st --checkpoint-every=5 --keep-checkpoints=3 || fail "2 ranks, cosine"
expect_fail 2 "--resume: wj.st.step-00000005: its --lr-schedule=cosine is 10 optimizer steps long (written by 2 replicas), but with 1 replica the epochs left take this run to step 15, past the schedule's end; resume it with 2 replicas or more" \
	1 $W --resume=wj.st.step-00000005
echo "resume at 2 ranks of a 1-rank cosine run: the lr of steps 11-15 continues the 20-step schedule; at 1 rank of a 2-rank one: refused"

# 3. Validation: an eval record after every epoch (20 steps each) and every 7 steps, the
#    frozen layer untouched, --save-best written.
run_mpi 2 $A --eval-every=7 --metrics=m.jsonl --save-best=best.st --save=last.st --init=one.st ||
	fail "validation run"
steps=$(grep '"type":"eval"' m.jsonl | sed 's/.*"step":\([0-9]*\).*/\1/' | tr '\n' ' ')
[ "$steps" = "7 10 14 20 21 28 30 " ] || fail "eval records at steps '$steps', want '7 10 14 20 21 28 30 '"
grep '"type":"eval"' m.jsonl | grep -q '"accuracy":' || fail "eval records without accuracy"
grep '"type":"step"' m.jsonl | grep -q '"lr":' || fail "step records without lr"
[ -f best.st ] || fail "no --save-best file"
run_mpi 1 $A --init=best.st --max-steps=1 || fail "--save-best file is not loadable weights"
python3 - one.st last.st <<'PY' || fail "the frozen layer changed"
import json, struct, sys
def tensor(path, name):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])[name]
    b, e = h["data_offsets"]
    return raw[8 + n + b:8 + n + e]
for name in ("net2.weight", "net2.bias"):
    assert tensor(sys.argv[1], name) == tensor(sys.argv[2], name), name
assert tensor(sys.argv[1], "net1.weight") != tensor(sys.argv[2], "net1.weight")
PY
echo "validation: eval records at steps $steps; --save-best; frozen net2 unchanged"
# --save-best across --resume: with this lr the validation loss is lowest at the first eval
# (step 5) and higher at every later one, so a run resumed from step 10 must leave the
# best file alone (the checkpoint carries the best loss); with no best file it starts afresh.
V="--layers=8,16,4 --samples=40 --val-samples=200 --epochs=10 --batch-size=8 --lr=0.3 --momentum=0.9
   --eval-every=5 --quiet"
run_mpi 1 $V --save-best=bs.st --checkpoint=vck.st --checkpoint-every=10 --keep-checkpoints=10 ||
	fail "--save-best with checkpoints"
cp bs.st br.st
run_mpi 1 $V --save-best=br.st --resume=vck.st.step-00000010 || fail "--save-best resumed"
cmp -s bs.st br.st || fail "--save-best: the resumed run replaced the best weights with worse ones"
run_mpi 1 $V --save-best=bn.st --resume=vck.st.step-00000010 || fail "--save-best resumed, no file"
[ -f bn.st ] || fail "--save-best: a resumed run without the best file never wrote one"
echo "--save-best across --resume: the best of step 5 kept by a run resumed at step 10"

# 4. Bad input: one line, the flag named, the same exit code on every rank.
dict="{'descr': '|u1', 'fortran_order': False, 'shape': (4,), }" # labels 0 3 7 1 as uint8
{ printf '\x93NUMPY\x01\x00\x76\x00%s%*s\n' "$dict" $((118 - ${#dict} - 1)) ''; printf '\x00\x03\x07\x01'; } >lab.npy
"$MKNPY" x4.npy 4 8 f4 1 >/dev/null
expect_fail 1 "--targets: lab.npy: row 2 has label 7, outside [0, 4) (--layers ends with 4 classes)" 2 \
	--layers=8,4 --loss=cross-entropy --inputs=x4.npy --targets=lab.npy --batch-size=2
# A uint64 label past 2^63 is printed as stored (before: as -9223372036854775807).
dict="{'descr': '<u8', 'fortran_order': False, 'shape': (4,), }" # labels 0 3 2^63+1 1
{ printf '\x93NUMPY\x01\x00\x76\x00%s%*s\n' "$dict" $((118 - ${#dict} - 1)) ''
	printf '\0\0\0\0\0\0\0\0\3\0\0\0\0\0\0\0\1\0\0\0\0\0\0\200\1\0\0\0\0\0\0\0'; } >lab64.npy
expect_fail 1 "--targets: lab64.npy: row 2 has label 9223372036854775809, outside [0, 4)" 2 \
	--layers=8,4 --loss=cross-entropy --inputs=x4.npy --targets=lab64.npy --batch-size=2
# float16 inputs: the message names what --inputs reads, not the integer types it refuses too
# (before: "need a float or integer type: f4, f8, i1..i8, u1..u8").
dict="{'descr': '<f2', 'fortran_order': False, 'shape': (4, 8), }"
{ printf '\x93NUMPY\x01\x00\x76\x00%s%*s\n' "$dict" $((118 - ${#dict} - 1)) ''; head -c 64 /dev/zero; } >x16.npy
expect_fail 1 "--inputs: x16.npy: dtype '<f2' is not supported (need '<f4' or '<f8')" 1 \
	--layers=8,4 --inputs=x16.npy --targets=x4.npy
"$MKNPY" y4.npy 4 4 f4 2 >/dev/null
expect_fail 1 "--targets: y4.npy: dtype '<f4' is not supported for class labels" 1 \
	--layers=8,4 --loss=cross-entropy --inputs=x4.npy --targets=y4.npy
expect_fail 2 "--freeze: layer 4 is not one of the 3 layers" 2 --layers=8,16,16,4 --freeze=4
expect_fail 2 "--freeze=1,2 freezes every layer" 1 --layers=8,16,4 --freeze=1,2
expect_fail 2 "--nesterov needs --momentum greater than 0" 1 --nesterov
expect_fail 2 "--momentum applies to --optimizer=sgd" 1 --optimizer=adamw --momentum=0.9
expect_fail 2 "--save-best needs a validation set" 1 --save-best=b.st
expect_fail 2 "--betas: 0.9,1: each must be in [0, 1)" 1 --betas=0.9,1
expect_fail 2 "--lr-schedule: 'step' is not one of constant|linear|cosine" 1 --lr-schedule=step
# Issue 34 item 13. Cross-entropy over one class, as PyTorch takes it (loss 0, zero
#    gradients): trains at 2 ranks with loss 0 and accuracy 100 %, and SGD with momentum
#    leaves the weights byte-identical to --init (before: exit 2, "--loss=cross-entropy
#    needs at least 2 classes: --layers ends with width 1").
run_mpi 1 --layers=8,16,1 --max-steps=1 --save=c1.st --quiet || fail "one class: initial weights"
run_mpi 2 --layers=8,16,1 --loss=cross-entropy --momentum=0.9 --max-steps=4 --log-every=2 --init=c1.st \
	--save=c4.st >c.out 2>&1 || fail "one class: $(cat c.out)"
grep -qE "^ +1 +4/4 +0\.000000 +100\.00 " c.out || fail "one class: not loss 0, accuracy 100 %: $(cat c.out)"
"$STCOMPARE" --exact c1.st c4.st >/dev/null || fail "one class: the weights changed: $("$STCOMPARE" --exact c1.st c4.st)"
echo "cross-entropy over one class: loss 0, accuracy 100 %, weights unchanged at 2 ranks"
# 5. --lr=0, as PyTorch takes it (a pipeline check): every optimizer, schedule, warmup and
#    clipping leaves the weights byte-identical to --init, on 2 ranks and in dp mode (AdamW's
#    decoupled decay is scaled by lr too; before: exit 2, "--lr: 0 is out of range (0, 1e+06]").
run_mpi 1 --layers=8,16,4 --max-steps=3 --save=w0.st --quiet || fail "initial weights"
for o in "--optimizer=sgd --momentum=0.9 --nesterov --weight-decay=0.1" \
	"--optimizer=adamw --weight-decay=0.1 --lr-schedule=cosine --warmup-steps=3" \
	"--optimizer=sgd --lr-schedule=linear --clip-grad-norm=0.5"; do
	run_mpi 2 --layers=8,16,4 --init=w0.st --lr=0 --max-steps=20 $o --save=w1.st --quiet || fail "--lr=0 $o"
	"$STCOMPARE" --exact w0.st w1.st >/dev/null || fail "--lr=0 $o moved the weights"
done
"$DDPTRAIN" --mode=dp --replicas=2 --layers=8,16,4 --init=w0.st --lr=0 --optimizer=adamw --weight-decay=0.1 \
	--max-steps=20 --save=w2.st --quiet || fail "--lr=0 in dp mode"
"$STCOMPARE" --exact w0.st w2.st >/dev/null || fail "--lr=0 moved the weights in dp mode"
echo "--lr=0: SGD (momentum, Nesterov, decay), AdamW (decay, cosine warmup), clipping, dp: weights unchanged"

echo "trainer-features: ok"
