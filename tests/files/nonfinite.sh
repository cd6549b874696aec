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
echo "nonfinite: 10 cases refused with the right message"
