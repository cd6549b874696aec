#!/bin/bash
# torch-crosscheck.sh - optional: train the same models from the same initial
# weights in real PyTorch (DDP emulated in one process by torch_crosscheck.py)
# and in ddptrain over 1, 2 and 3 MPI ranks, and compare the final weights
# (relative error max|a-b| / max|b| <= 1e-5 per tensor).
# Skips (77) when python3 with torch and numpy is not installed.
. "$(dirname "$0")/setup.sh"

PY=${PYTHON:-/usr/bin/python3}
HELPER=$(dirname "$0")/torch_crosscheck.py

command -v "$PY" >/dev/null 2>&1 || skip "no python3 ($PY) for the PyTorch cross-check"
"$PY" -c 'import torch, numpy' >/dev/null 2>&1 ||
	skip "python3 cannot import torch and numpy (apt-get install python3-torch python3-numpy)"
[ -x "$DDPTRAIN" ] || fail "no ddptrain at $DDPTRAIN"

# One intra-op thread: deterministic, and no oversubscription on small machines.
export OMP_NUM_THREADS=1

"$PY" "$HELPER" gen "$TMPD" || fail "torch_crosscheck.py gen failed"

while read -r name np args; do
	[ -n "$name" ] || continue
	# mpirun reads stdin: keep it off cases.txt.
	# shellcheck disable=SC2086 # args is a word list without spaces in any word
	run_mpi "$np" $args </dev/null || fail "$name: ddptrain exited $? (mpirun -np $np ddptrain $args)"
done <"$TMPD/cases.txt"

"$PY" "$HELPER" compare "$TMPD" || fail "ddptrain and PyTorch disagree (see above)"
