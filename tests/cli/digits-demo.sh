#!/bin/bash
# The README's real-data demo, shortened: scripts/digits.py converts scikit-learn's
# bundled digits to .npy, and 2 ranks train the README's MLP on them for 5 epochs to a
# validation accuracy of at least 90% (the full 30 epochs reach 98.3%). Without
# scikit-learn or numpy, or given what it cannot use, digits.py says so in one line.
# Skips (77) when python3 cannot import sklearn and numpy (after the checks that need neither).
. "$(dirname "$0")/../lib/setup.sh"

PY=${PYTHON:-/usr/bin/python3}
command -v "$PY" >/dev/null 2>&1 || skip "no python3 ($PY)"
DIGITS="$PY $TOP_SRCDIR/scripts/digits.py"

# refused WANT-EXIT TEXT ARGS...: digits.py exits WANT-EXIT with one line holding TEXT
refused() {
	local want=$1 text=$2 rc=0
	shift 2
	$DIGITS "$@" >"$TMPD/out" 2>"$TMPD/err" || rc=$?
	[ "$rc" -eq "$want" ] && [ "$(wc -l <"$TMPD/err")" -eq 1 ] && grep -qF -- "$text" "$TMPD/err" ||
		fail "digits.py $*: exit $rc (want $want), want one line with '$text': $(cat "$TMPD/err")"
}
# A package that cannot be imported, as on a python3 without it.
for m in sklearn numpy; do
	mkdir -p "$TMPD/no-$m/$m"
	echo "raise ImportError('No module named $m (hidden by the test)')" >"$TMPD/no-$m/$m/__init__.py"
done
# (numpy is asked for first: where it is missing anyway, hiding sklearn shows numpy's line)
if "$PY" -c 'import numpy' >/dev/null 2>&1; then
	PYTHONPATH=$TMPD/no-sklearn refused 3 "needs sklearn (Debian: apt-get install python3-sklearn; or pip install scikit-learn)" \
		convert "$TMPD/d"
fi
PYTHONPATH=$TMPD/no-numpy refused 3 "needs numpy (Debian: apt-get install python3-numpy" convert "$TMPD/d"
[ ! -e "$TMPD/d" ] || fail "digits.py convert without its packages made $TMPD/d"
echo '{"type":"step","step":1,"loss":0.5}' >"$TMPD/noeval.jsonl"
refused 1 "noeval.jsonl: no eval records" plot "$TMPD/noeval.jsonl" "$TMPD/p.png"
refused 1 "$TMPD/missing.jsonl: No such file or directory" plot "$TMPD/missing.jsonl" "$TMPD/p.png"
echo 'not json' >"$TMPD/bad.jsonl"
refused 1 "bad.jsonl: line 1: not a ddptrain --metrics record" plot "$TMPD/bad.jsonl" "$TMPD/p.png"
refused 2 "torch: --epochs=x: want --epochs=N" torch "$TMPD" --epochs=x
echo "digits.py: missing packages and bad arguments: one line each"

"$PY" -c 'import sklearn, numpy' >/dev/null 2>&1 ||
	skip "python3 cannot import sklearn and numpy (apt-get install python3-sklearn)"
$DIGITS convert "$TMPD" >/dev/null || fail "digits.py convert"
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
