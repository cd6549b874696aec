#!/bin/bash
# torch-crosscheck.sh - optional, the live form of tests/numerics/torch-ref.sh: train the same
# models from the same initial weights in the installed PyTorch (DDP emulated in one
# process by torch_crosscheck.py) and in ddptrain over 1, 2 and 3 MPI ranks and in dp,
# then compare the final weights, every step's reported loss, accuracy and learning
# rate, and the validation results (tests/numerics/torch-ref.sh over the fresh references), and
# what torch_crosscheck.py's own compare prints (the error relative to each tensor's
# update, frozen tensors bit for bit). Then the committed references in tests/torch-ref/
# must be what this torch makes of the cases today (torch_crosscheck.py same: the case
# list, data and initial weights byte for byte, the results within float32's rounding on
# another CPU's BLAS kernels): a case changed in torch_crosscheck.py without
# `torch_crosscheck.py gen tests/torch-ref` fails here. The same on any x86-64 CPU: the
# --precision=bf16 references are autocast's arithmetic with float32 sums, emulated where
# this torch's CPU autocast rounds its backward's sums to bf16 (1.13; gen prints which, and
# how far this torch's own autocast ends from them).
# Skips (77) when python3 with torch and numpy is not installed.
. "$(dirname "$0")/../lib/setup.sh"

PY=${PYTHON:-/usr/bin/python3}
HELPER=$(dirname "$0")/../lib/torch_crosscheck.py
COMMITTED=$TOP_SRCDIR/tests/torch-ref

command -v "$PY" >/dev/null 2>&1 || skip "no python3 ($PY) for the PyTorch cross-check"
"$PY" -c 'import torch, numpy' >/dev/null 2>&1 ||
	skip "python3 cannot import torch and numpy (apt-get install python3-torch python3-numpy)"
[ -x "$DDPTRAIN" ] || fail "no ddptrain at $DDPTRAIN"

# One intra-op thread: deterministic, and no oversubscription on small machines.
export OMP_NUM_THREADS=1

mkdir "$TMPD/ref"
"$PY" "$HELPER" gen "$TMPD/ref" || fail "torch_crosscheck.py gen failed"

TORCH_REF=$TMPD/ref TORCH_REF_OUT=$TMPD/ref bash "$(dirname "$0")/torch-ref.sh" ||
	fail "ddptrain and the installed PyTorch disagree (see above)"
"$PY" "$HELPER" compare "$TMPD/ref" || fail "ddptrain and PyTorch disagree (torch_crosscheck.py compare, above)"

# The committed references against the fresh ones.
"$PY" "$HELPER" same "$TMPD/ref" "$COMMITTED" ||
	fail "tests/torch-ref/ is not what this torch makes of today's cases (above; regenerate: $PY tests/lib/torch_crosscheck.py gen tests/torch-ref)"
echo "the committed references in tests/torch-ref/ are what torch $("$PY" -c 'import torch; print(torch.__version__)') makes today"
