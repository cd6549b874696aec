#!/bin/bash
# The README's real-data demo, shortened: scripts/digits.py converts scikit-learn's
# bundled digits to .npy, and 2 ranks train the README's MLP on them for 5 epochs to a
# validation accuracy of at least 90% (the full 30 epochs reach 98.3%).
# Skips (77) when python3 cannot import sklearn and numpy.
. "$(dirname "$0")/lib/setup.sh"

PY=${PYTHON:-/usr/bin/python3}
command -v "$PY" >/dev/null 2>&1 || skip "no python3 ($PY)"
"$PY" -c 'import sklearn, numpy' >/dev/null 2>&1 ||
	skip "python3 cannot import sklearn and numpy (apt-get install python3-sklearn)"
"$PY" "$TOP_SRCDIR/scripts/digits.py" convert "$TMPD" >/dev/null || fail "digits.py convert"
run_mpi 2 --inputs="$TMPD/digits-train-x.npy" --targets="$TMPD/digits-train-y.npy" \
	--val-inputs="$TMPD/digits-val-x.npy" --val-targets="$TMPD/digits-val-y.npy" \
	--loss=cross-entropy --layers=64,128,10 --batch-size=32 --epochs=5 --optimizer=adamw \
	--lr=0.003 --weight-decay=0.01 --lr-schedule=cosine --warmup-steps=20 --clip-grad-norm=1 \
	--log-every=0 --metrics="$TMPD/m.jsonl" >"$TMPD/out" || fail "training on the digits"
acc=$(grep '"type":"eval"' "$TMPD/m.jsonl" | tail -1 | sed 's/.*"accuracy":\([0-9.e-]*\).*/\1/')
# A number, checked as text first: awk compares a missing value (sed then leaves the whole
# line) or "nan" as a string, and "{..." >= 0.90 or nan >= 0.90 would pass.
awk -v a="$acc" 'BEGIN { exit !(a ~ /^[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$/ && a + 0 >= 0.90 && a + 0 <= 1) }' ||
	fail "validation accuracy $acc after 5 epochs, want a number >= 0.90"
grep "eval after step" "$TMPD/out" | tail -1
echo "digits-demo: ok (validation accuracy $acc)"
