#!/bin/bash
# Non-finite numbers never reach a file: a NaN or infinity in --inputs or --targets
# (or a float64 beyond float32's range) is refused at load naming the file, row and
# column; weights that diverged to non-finite values are never written by --save or
# --checkpoint, and the message says the training diverged (lower --lr), which is not
# the same message as bad data. Exit 1 on every rank, at 1 and 2 ranks.
. "$(dirname "$0")/../lib/setup.sh"

cd "$TMPD"
"$MKNPY" x.npy 64 10 f4 1
"$MKNPY" y.npy 64 5 f4 2
"$MKNPY" xnan.npy 64 10 f4 1 1 nan:17:3
"$MKNPY" x8big.npy 64 10 f8 1 1 big:40:9
"$MKNPY" yinf.npy 64 5 f4 2 1 inf:63:4
for np in 1 2; do
	expect_fail 1 "--inputs: xnan.npy: row 17, column 3 (counting from 0) is nan: ddptrain refuses non-finite data" \
		$np --inputs=xnan.npy --targets=y.npy --save=w.st
	expect_fail 1 "--inputs: x8big.npy: row 40, column 9 (counting from 0) is 1e+300, beyond float32's range" \
		$np --inputs=x8big.npy --targets=y.npy --save=w.st
	expect_fail 1 "--targets: yinf.npy: row 63, column 4 (counting from 0) is -inf" \
		$np --inputs=x.npy --targets=yinf.npy --save=w.st
done
[ ! -e w.st ] || fail "--save written from non-finite data"

# Inputs near 1e18 keep the first loss finite (about 1e36) while one step at --lr=1e6
# takes the weights to infinity: the loss check alone would save them.
"$MKNPY" xhuge.npy 64 10 f4 1 1 x1e18
"$MKNPY" ytiny.npy 64 5 f4 2 1 x1e-30
for np in 1 2; do
	expect_fail 1 "training diverged: the weights are not finite after step 1; lower --lr (--save: w.st was not written)" \
		$np --inputs=xhuge.npy --targets=ytiny.npy --max-steps=1 --lr=1e6 --save=w.st
	expect_fail 1 "training diverged: the weights are not finite after step 1; lower --lr (--checkpoint: c.st not written" \
		$np --inputs=xhuge.npy --targets=ytiny.npy --max-steps=1 --lr=1e6 --checkpoint=c.st
done
[ ! -e w.st ] && [ ! -e c.st ] || fail "non-finite weights were written"

# Issue 34 item 10. A file rewritten in place with a non-finite number after the scan at
#    start-up (the file is mapped: training reads the new bytes) is named -- file, row,
#    column -- when the loss turns non-finite, in one line, exit 1 on every rank (before:
#    "loss is nan at step N (epoch E): training diverged; lower --lr"). The element is
#    written with dd once the run header is out (its "# buckets:" or "# dp:" line comes
#    after the scan), where the clean file and the one mknpy made with the bad number differ.
# rewrite WANT NP FILE BAD ARGS...: FILE takes BAD's element while training runs; the
# message ends with what $became says (default: the training loss at a step)
rewrite() {
	local want=$1 np=$2 file=$3 bad=$4 at rc=0
	shift 4
	# cmp -l: the first differing byte's offset from 1, in digits (its one-line message
	# says "byte" or "char" by locale: "char" in a fresh root's POSIX locale)
	at=$(cmp -l "$file" "$bad" | awk 'NR == 1 { print $1 }')
	[ -n "$at" ] || fail "$bad does not differ from $file"
	rm -f rw.out rw.err
	timeout -k 5 60 mpirun --oversubscribe -np "$np" "$DDPTRAIN" --epochs=100000 --log-every=0 "$@" >rw.out 2>rw.err &
	for _ in $(seq 1 300); do grep -qE "^# (buckets|dp):" rw.out 2>/dev/null && break; sleep 0.1; done
	grep -qE "^# (buckets|dp):" rw.out || fail "no run header in 30 s: $(cat rw.err)"
	# the whole 4-byte element (the header is a multiple of 64 bytes long)
	dd if="$bad" of="$file" bs=4 skip=$(((at - 1) / 4)) seek=$(((at - 1) / 4)) count=1 conv=notrunc status=none
	wait $! || rc=$?
	[ $rc -eq 1 ] || fail "np=$np: $file rewritten: exit $rc: $(cat rw.err)"
	[ "$(grep -c '^ddptrain:' rw.err)" = 1 ] && grep -qE "^ddptrain: $want \(the file changed after ddptrain checked it at start-up; ${became:-the loss became -?(nan|inf) at step [0-9]+}\)$" rw.err ||
		fail "np=$np: $file rewritten: want one line naming it: $(grep ddptrain: rw.err)"
}
for np in 1 2; do
	"$MKNPY" rx.npy 2000 10 f4 1 && "$MKNPY" ry.npy 2000 5 f4 2
	"$MKNPY" rxnan.npy 2000 10 f4 1 1 nan:1717:3 && "$MKNPY" ryinf.npy 2000 5 f4 2 1 inf:404:2
	rewrite "--inputs: rx.npy: row 1717, column 3 \(counting from 0\) is nan: ddptrain refuses non-finite data" \
		$np rx.npy rxnan.npy --inputs=rx.npy --targets=ry.npy
	"$MKNPY" rx.npy 2000 10 f4 1
	rewrite "--targets: ry.npy: row 404, column 2 \(counting from 0\) is -inf: ddptrain refuses non-finite data" \
		$np ry.npy ryinf.npy --inputs=rx.npy --targets=ry.npy
done
# A label rewritten out of range under the run (the loss kernels read nothing past the
# row's logits: that row's loss is NaN) is named the way the load names one.
labels() { # labels FILE N BAD_ROW: int64 labels i % 5, row BAD_ROW (or -1: none) 7
	python3 - "$@" <<'PYEOF2'
import struct, sys
path, n, bad = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
head = "{'descr': '<i8', 'fortran_order': False, 'shape': (%d,), }" % n
head += " " * (63 - (10 + len(head)) % 64) + "\n"
with open(path, "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head.encode())
    f.write(b"".join(struct.pack("<q", 7 if i == bad else i % 5) for i in range(n)))
PYEOF2
}
for np in 1 2; do
	"$MKNPY" rx.npy 2000 10 f4 1 && labels ly.npy 2000 -1 && labels lybad.npy 2000 1234
	rewrite "--targets: ly.npy: row 1234 has label 7, outside \[0, 5\) \(--layers ends with 5 classes\)" \
		$np ly.npy lybad.npy --inputs=rx.npy --targets=ly.npy --loss=cross-entropy
done
# A validation file rewritten so is named too, when the validation loss it makes is not
# finite (before: "validation loss nan" at every evaluation, and training went on), in
# ddp at 1 and 2 ranks, under --zero=3 (whose evaluation gathers each layer) and in dp.
"$MKNPY" rx.npy 2000 10 f4 1 && "$MKNPY" ry.npy 2000 5 f4 2
"$MKNPY" vy.npy 500 5 f4 4 && "$MKNPY" vxnan.npy 500 10 f4 3 1 nan:321:6
for run in "1" "2" "2 --zero=3" "1 --mode=dp --replicas=2"; do
	np=${run%% *} flags=${run#"${run%% *}"}
	"$MKNPY" vx.npy 500 10 f4 3
	# shellcheck disable=SC2086 # the run's flags, one word each
	became="the validation loss became nan" \
		rewrite "--val-inputs: vx.npy: row 321, column 6 \(counting from 0\) is nan: ddptrain refuses non-finite data" \
		"$np" vx.npy vxnan.npy --inputs=rx.npy --targets=ry.npy --val-inputs=vx.npy --val-targets=vy.npy \
		--eval-every=20 $flags
done
echo "nonfinite: 10 cases refused with the right message; training files rewritten with nan and -inf, and a label out of range, while training: named at 1 and 2 ranks; a validation file so: named in ddp at 1 and 2 ranks, --zero=3 and dp"
