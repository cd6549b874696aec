#!/bin/bash
# DDPTRAIN_CUDA_MODULE that is no usable module gets one line naming the file and what is
# wrong, exit 1 on every rank, at once: a FIFO (before, dlopen's open waited for a writer
# for ever, past --timeout and SIGTERM), a directory or a device (refused before anything
# opens them for loading); a module whose entry returns NULL, lacks an entry of its tables
# (a NULL function, or one of a group that comes together), or whose entry's name is a
# data symbol (before: SIGSEGV, exit 139, once ddptrain called it). Issue 34 item 9.
. "$(dirname "$0")/../lib/setup.sh"

for f in "$FAKE_GPU" "$BAD_GPU" "$BAD_GPU_DATA"; do
	[ -f "$f" ] || skip "no $f (make check builds it)"
done
args="--device=cuda --samples=16 --batch-size=4 --max-steps=2 --quiet --timeout=10"
lead="ddptrain: --device=cuda: cannot load the CUDA module (DDPTRAIN_CUDA_MODULE)"

# refused MODULE WHAT: 2 ranks, each exits 1, one line "...: MODULE: WHAT" within 20 s.
refused() {
	DDPTRAIN_CUDA_MODULE=$1 expect_fail 1 "$lead: $1: $2" 2 $args
	grep -qxF "$lead: $1: $2" "$TMPD/stderr" || fail "$1: want '$lead: $1: $2', got: $(cat "$TMPD/stderr")"
	echo "$(cat "$TMPD/stderr")"
}

mkfifo "$TMPD/fifo"
refused "$TMPD/fifo" "a FIFO, not a regular file"
refused "$TMPD" "a directory, not a regular file"
refused /dev/null "a character device, not a regular file"

export DDPT_BAD_GPU_FAKE=$FAKE_GPU
DDPT_BAD_GPU=null refused "$BAD_GPU" "ddptrain_gpu_module() returned NULL"
DDPT_BAD_GPU=probe refused "$BAD_GPU" "its entry probe is NULL"
DDPT_BAD_GPU=backend refused "$BAD_GPU" "its entry backend is NULL"
DDPT_BAD_GPU=axpbz refused "$BAD_GPU" "its entry backend.axpbz is NULL"
DDPT_BAD_GPU=graph_end refused "$BAD_GPU" "its entry backend.graph_end is NULL while backend.graph_begin is not (they come together)"
# The communicator's table comes later, from nccl_comm_init: refused there, every rank.
DDPT_BAD_GPU=bcast DDPTRAIN_CUDA_MODULE=$BAD_GPU expect_fail 1 \
	"ddptrain: the CUDA module ($BAD_GPU): its entry comm.bcast is NULL" 2 $args
echo "$(cat "$TMPD/stderr")"
refused "$BAD_GPU_DATA" "ddptrain_gpu_module is not a function (a data symbol)"

# The tables the double starts from are whole: the fake module itself trains.
DDPTRAIN_CUDA_MODULE=$FAKE_GPU run_mpi 2 $args || fail "the fake module, whole, does not train"
echo "bad-module: ok"
