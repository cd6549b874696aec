#!/bin/bash
# Under an address-space limit (ulimit -v) too small for the shared-memory window (every
# rank maps every rank's part) and what training still maps, every rank falls back to
# MPI's all-reduce with one note naming the window, /dev/shm and the limit, trains what
# DDPTRAIN_ALLREDUCE=mpi trains, and leaves no osc_sm.* file. Before the fix rank 0's
# MPI_Win_allocate_shared failed (Open MPI's mmap, after its ftruncate) while the others
# stayed inside it: the job hung until --timeout and left the window's file behind.
# Runs in a private mount namespace with its own /dev/shm (SKIP where not root or unshare
# is refused), and SKIPs where MPI's all-reduce itself does not train under the limit.
. "$(dirname "$0")/../lib/setup.sh"
private_shm 2g

# One OpenBLAS thread (ddptrain computes on one anyway): each further thread adds its
# stack and buffers to the address space, and the limit is sized for this.
export OPENBLAS_NUM_THREADS=1
# 4 ranks of 32.6 M parameters: 392 MiB in use at the window, which needs 497 MiB more
# (4 x 124 MiB), and training maps up to 625 MiB after it (OpenBLAS's work buffer, MPI's
# all-reduce buffers, the host copies), so that the window is refused below about
# 1550000 KiB, while MPI's all-reduce trains from about 680000 KiB.
limit=930000
args="--layers=10,5700,5700,5 --samples=16 --batch-size=2 --epochs=1 --log-every=0 --no-overlap --timeout=20"
printf '#!/bin/sh\nulimit -v %s && exec "%s" "$@"\n' "$limit" "$DDPTRAIN" >"$TMPD/limited"
chmod +x "$TMPD/limited"

DDPTRAIN_ALLREDUCE=mpi DDPTRAIN=$TMPD/limited run_mpi 4 $args --quiet --save="$TMPD/mpi.st" >"$TMPD/probe" 2>&1 ||
	skip "MPI's all-reduce itself does not train under ulimit -v $limit here: $(grep -m1 ddptrain "$TMPD/probe")"
out=$(DDPTRAIN=$TMPD/limited run_mpi 4 $args --save="$TMPD/auto.st") || fail "ulimit -v $limit: the run failed ($?): $out"
left=$(ls /dev/shm | grep '^osc_sm\.' || true)
[ -z "$left" ] || fail "left in /dev/shm: $left"
note=$(grep '^# all-reduce auto: ' <<<"$out") || fail "no note on the fallback: $out"
grep -qE "^# all-reduce auto: mpi \(the [0-9.]+ MiB shared-memory window in /dev/shm and the [0-9.]+ MiB training still maps do not fit in the address-space limit \(ulimit -v $limit, [0-9.]+ MiB of [0-9.]+ MiB in use\)\)$" <<<"$note" ||
	fail "the note does not name the window, /dev/shm and the limit: $note"
[ "$(grep -c "backend mpi, MPI all-reduce" <<<"$out")" = 4 ] || fail "not MPI's all-reduce on every rank: $out"
"$STCOMPARE" --exact "$TMPD/auto.st" "$TMPD/mpi.st" >/dev/null || fail "the fallback trains other weights than MPI's all-reduce"
echo "ulimit -v $limit, 4 ranks: $note; the weights of DDPTRAIN_ALLREDUCE=mpi"
echo "shm-ulimit: ok"
