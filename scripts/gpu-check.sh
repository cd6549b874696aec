#!/bin/bash
# gpu-check.sh - the whole GPU verification of ddptrain in one command: every trainer
# feature on the GPU against the CPU, every backend operation at every launch path, and
# the speed side by side with PyTorch on the same GPU.
#
#   scripts/gpu-check.sh --prepare   on a build machine (Debian, network): builds what
#                                    the check runs (make, and make the tools of
#                                    tests/lib/ it needs) and downloads the Debian packages
#                                    the binaries need at run time (Open MPI, OpenBLAS,
#                                    jansson) into .gpucheck/debs; with GPUCHECK_TORCH_WHEELS=1
#                                    also PyTorch's wheels into .gpucheck/wheels (gigabytes)
#   scripts/gpu-check.sh             on the GPU machine, from the repository root with the
#                                    build and .gpucheck/ copied along: unpacks the packages
#                                    into a private prefix (never into /), then checks and
#                                    times, and prints a table last. Fetches nothing.
#
#   scripts/gpu-check.sh --find-libs LIB...   where the check would find each library
#                                    (python3's nvidia package, then a deep search); also
#                                    checks glibc. For tests: GPUCHECK_SEARCH_ROOT (default
#                                    /), GPUCHECK_PYTHON, GPUCHECK_GLIBC (this machine's
#                                    version), GPUCHECK_GLIBC_WANT override what is probed.
#   scripts/gpu-check.sh --check-nvtx TRACE.json LOG...   the trace row's NVTX check alone
#                                    (LOG: tests/lib/nvtx-record.so's files), for tests.
#
# Assumes nothing on the GPU machine beyond the NVIDIA driver (and, if the CUDA
# toolkit is not installed there, cuBLAS/NCCL/cudart in Python packages' nvidia/*/lib
# folders -- however deep the Python environment sits -- or anywhere LD_LIBRARY_PATH
# points), and a glibc at least as new as the build machine's (the unpacked Debian
# packages need it; the check says so and stops otherwise). PyTorch is optional: the
# python3 found there, else the wheels --prepare brought; without either its timing rows
# say why they were skipped. Runs in under 8 minutes (GPUCHECK_BUDGET, 450 s: each run is
# cut to what is left, and ddptrain's own --timeout ends a stalled collective).
#
# Checks, each GPU run against the same run on the CPU (weights within 1e-5, and the
# --metrics step and eval records within 1e-5: loss, accuracy, learning rate):
#   - every backend operation at 1e-6 (TF32 off), small and at the sizes of every launch
#     path: 2^21 + 3 elements, 70,001 rows, odd widths (tests/lib/opcheck);
#   - ddp, 1 rank, NCCL: SGD with a constant lr and validation (CUDA graphs replayed);
#     AdamW, cosine warm-up, clipping, cross-entropy, a frozen layer, validation; SGD
#     Nesterov, linear warm-up, clipping, MSE; --grad-accum=3;
#   - ddp, 2 ranks sharing GPU 0 (--backend=auto takes MPI there, and says so), with
#     --grad-accum=3; --backend=nccl there refused; 2 ranks on 2 GPUs over NCCL when the
#     machine has them; dp on every visible GPU, and with --grad-accum=3;
#   - checkpoints written on the GPU against the CPU's; a run stopped at step 20 and
#     resumed with graphs on, and dp stopped and resumed, bit-identical to straight runs;
#   - --zero=1/2 at 1 rank (NCCL) and 2 ranks sharing GPU 0 (MPI, staged), at 1e-5;
#     --grad-compress=bf16/fp16 at 1e-3 (the derivation is at its rows), each run also
#     shown to have used the wire; --precision=bf16 at 2e-3 (float32 sums in another
#     order: torch_crosscheck.py's sum_moved), where this build has --precision;
#   - --trace on the GPU: the trace file's spans (tests/lib/trace_check.py) and the NVTX
#     ranges (tests/lib/nvtx-record.so) present, balanced and nested, one forward range
#     per forward span (each span's CUDA events were recorded with its range);
# then the speed, 1 rank, MSE + SGD: the ToyModel (10,10,5, batch 20) and
# --layers=4096x5 --batch-size=1024 in fp32, TF32 and bf16, eager (DDPTRAIN_CUDA_GRAPHS=0)
# and with graphs; ddptrain's synthetic data (made on the device) and .npy files (rows
# gathered into pinned buffers) beside PyTorch on the same GPU with its batches resident
# and in pinned host memory (scripts/torch_ddp_bench.py --device=cuda --batches=...
# --precision=... [--graphs]); the wide model's TFLOP/s against cuBLAS SGEMMs of the
# step's own shapes timed in the same run; issue 29's targets and PyTorch's 2026-12-04
# figures beside each measured one (met or missed: a benchmark, never a failed row);
# dp's phase times (CUDA events) on every visible GPU; last, compute-sanitizer's
# memcheck, racecheck, synccheck and initcheck over a short NCCL run with graphs: 0
# errors each (--report-api-errors no: NCCL probes its kernel images and counts 8 API
# errors; ddptrain checks every call's status itself).
#
# Time, estimated from the first H200 run (110 s for the rows before issue 29's part 6;
# none of the new rows has run on a GPU yet): a feature run ~3 s (mpirun, CUDA and NCCL
# set-up), ~6 s a pair; a ddptrain speed row ~4 s (60 wide steps, 20,000 ToyModel
# steps); a PyTorch row ~8 s (import, NCCL, warm-up, 60 wide or 2,000 ToyModel steps);
# the four sanitizers at once ~60 s (racecheck the slowest). In all about 110 + 55
# (3 zero, 3 wire and 1 bf16 pairs, 2 float32 CPU runs, the bf16 probe) + 25 (6 new
# ddptrain speed rows, the .npy files) + 100 (12 new PyTorch rows) + 60 (sanitizers) =
# ~350 s of the 450; the machine's start comes on top (~2 minutes on 2026-12-04).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
G=.gpucheck

# What the check runs, built (carried to the GPU machine with .gpucheck/).
BUILT="src/ddptrain src/ddptrain-cuda.so tests/lib/opcheck tests/lib/stcompare tests/lib/metcompare tests/lib/mknpy tests/lib/nvtx-record.so"

if [ "${1:-}" = "--prepare" ]; then
	set -e
	for f in $BUILT; do
		[ -x "$f" ] || { echo "gpu-check: build $f first (./configure --with-cuda && make && make ${BUILT#src/ddptrain src/ddptrain-cuda.so })" >&2; exit 1; }
	done
	mkdir -p "$G/debs"
	pkgs="openmpi-bin openmpi-common libopenmpi3 libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7
	      libpmix2 libfabric1 libucx0 libibverbs1 librdmacm1 libpsm-infinipath1 libpsm2-2 libnl-3-200
	      libnl-route-3-200 libxnvctrl0 libmunge2 libnuma1 libltdl7 libudev1
	      libopenblas0-pthread libgfortran5 libquadmath0 libjansson4"
	# Plus whatever else the binaries link (dpkg -S of each library ldd resolves).
	for f in src/ddptrain tests/lib/opcheck tests/lib/stcompare tests/lib/metcompare tests/lib/mknpy; do
		ldd "$f" | awk '$3 ~ /^\// { print $3 }'
	done | xargs -r -n1 readlink -f | xargs -r -n1 dpkg -S 2>/dev/null | cut -d: -f1 |
		grep -Ev '^(libc6|libgcc-s1|libstdc\+\+6|libzstd1|zlib1g)$' >"$G/extra" || true
	(cd "$G/debs" && apt-get download $pkgs $(sort -u ../extra))
	# The packages need this glibc or newer on the GPU machine.
	getconf GNU_LIBC_VERSION | awk '{ print $2 }' >"$G/glibc"
	# PyTorch for the side-by-side timing, when the GPU machine has none (large: the CUDA
	# build of torch and its nvidia-* wheels).
	if [ "${GPUCHECK_TORCH_WHEELS:-0}" = 1 ]; then
		mkdir -p "$G/wheels"
		python3 -m pip download --dest "$G/wheels" torch
	fi
	du -sh "$G"/*/ 2>/dev/null
	echo "gpu-check: prepared; carry $BUILT $G"
	exit 0
fi

# ---- finding libraries and checking glibc (also --find-libs, for the tests) ----------
SEARCH_ROOT=${GPUCHECK_SEARCH_ROOT:-/}
PY=${GPUCHECK_PYTHON:-python3}
# The lib folders of python3's nvidia package (the nvidia-*-cu12/13 wheels), wherever the
# environment is: its own answer, not a guess at the depth.
py_nvidia_dirs() {
	"$PY" -c 'import nvidia, os
for p in nvidia.__path__:
    for d in sorted(os.listdir(p)):
        if os.path.isdir(os.path.join(p, d, "lib")):
            print(os.path.join(p, d, "lib"))' 2>/dev/null
}
# find_libs NAME...: a line "NAME => DIR (how)" or "NAME => not found" for each: python3's
# nvidia package first, then one search of the whole tree for what is still missing (any
# depth; not /proc, /sys, /dev; two minutes at most).
find_libs() {
	local name d f left=() expr=()
	declare -A at
	for name in "$@"; do
		for d in $(py_nvidia_dirs); do
			[ -e "$d/$name" ] && { at[$name]="$d (python3's nvidia package)"; break; }
		done
		[ -n "${at[$name]:-}" ] || left+=("$name")
	done
	if [ ${#left[@]} -gt 0 ]; then
		for name in "${left[@]}"; do expr+=(-o -name "$name"); done
		while read -r f; do
			name=$(basename "$f")
			[ -n "${at[$name]:-}" ] || at[$name]="$(dirname "$f") (search under $SEARCH_ROOT)"
		done < <(timeout 120 find "$SEARCH_ROOT" \( -path "${SEARCH_ROOT%/}/proc" -o -path "${SEARCH_ROOT%/}/sys" \
			-o -path "${SEARCH_ROOT%/}/dev" \) -prune -o \( -false "${expr[@]}" \) \( -type f -o -type l \) -print 2>/dev/null)
	fi
	for name in "$@"; do echo "$name => ${at[$name]:-not found}"; done
}
# glibc_check: 0 if this machine's glibc is at least the build machine's.
glibc_check() {
	local have want
	have=${GPUCHECK_GLIBC:-$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{ print $2 }')}
	want=${GPUCHECK_GLIBC_WANT:-$(cat "$G/glibc" 2>/dev/null || true)}
	if [ -z "$want" ]; then echo "glibc ${have:-unknown} (no .gpucheck/glibc: run --prepare)"; return 0; fi
	if [ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | head -1)" != "$want" ]; then
		echo "glibc $have here, but the unpacked Debian packages need $want or newer: run in a container with a newer userland (Debian 12 or later)"
		return 1
	fi
	echo "glibc $have (packages need $want)"
}
if [ "${1:-}" = "--find-libs" ]; then
	shift
	msg=$(glibc_check); rc=$?
	echo "$msg"
	out=$(find_libs "$@")
	[ -z "$out" ] || echo "$out"
	! echo "$out" | grep -q ' => not found$' || rc=1
	exit $rc
fi

# nvtx_check JSON LOG...: tests/lib/nvtx-record.so's logs of one traced run against its
# trace file: each thread's pushes and pops balanced (never a pop without its push, none
# left open), ranges nested (the last bucket's all-reduce inside the wait), every bucket's
# all-reduce range there, and as many "forward" ranges as the trace has forward spans --
# the CUDA module opens each range where it records the span's CUDA event. Prints the
# figures; exit 1 with the first failure.
nvtx_check() {
	local json=$1 spans
	shift
	spans=$(grep -o '"name":"forward layer [0-9]*"' "$json" | wc -l)
	cat "$@" /dev/null | awk -v spans="$spans" '
		NF == 0 { next }
		$2 == "push" { name = $3; for (i = 4; i <= NF; i++) name = name " " $i
			sub(/ [0-9]+$/, " N", name) # "allreduce bucket 2": one name for every bucket
			if (d[$1] > 0) nest[top[$1, d[$1]] " > " name] = 1
			top[$1, ++d[$1]] = name; if (d[$1] > deep) deep = d[$1]
			pushes[name]++; n++; next }
		$2 == "pop" { if (d[$1] == 0) { print "thread " $1 ": a pop without its push (event " NR ")"; bad = 1; exit 1 }
			d[$1]--; next }
		{ print "line " NR ": not a push or a pop: " $0; bad = 1; exit 1 }
		END { if (bad) exit 1
			for (t in d) if (d[t] != 0) { print "thread " t ": " d[t] " range(s) never closed"; exit 1 }
			if (n == 0) { print "no NVTX range recorded"; exit 1 }
			if (pushes["forward"] != spans) { print pushes["forward"] + 0 " forward ranges, " spans " forward spans in the trace"; exit 1 }
			if (!pushes["allreduce bucket N"]) { print "no all-reduce range"; exit 1 }
			if (!("wait > allreduce bucket N" in nest)) {
				s = ""; for (k in nest) s = s " [" k "]"; print "no all-reduce range nested in the wait:" s; exit 1 }
			printf "%d ranges balanced, depth %d, %d forward = the trace'"'"'s spans, %d all-reduces", n, deep, spans, pushes["allreduce bucket N"] }'
}
if [ "${1:-}" = "--check-nvtx" ]; then
	shift
	nvtx_check "$@"
	exit
fi

t_start=$SECONDS
rows=()
fails=0
skips=0
row() {
	rows+=("$(printf '%-56s %-6s %s' "$1" "$2" "$3")")
	[ "$2" != FAIL ] || fails=$((fails + 1))
	[ "$2" != skip ] || skips=$((skips + 1))
}
table() {
	echo
	printf '%-56s %-6s %s\n' "check" "result" "figures"
	printf '%s\n' "${rows[@]}"
	echo "# $((${#rows[@]} - fails - skips)) passed, $fails failed, $skips skipped, in $((SECONDS - t_start)) s$([ $((SECONDS - t_start)) -lt "${BUDGET:-450}" ] || echo " (time budget spent: the last runs were cut short)")"
}

B=${GPUCHECK_BUILD:-$PWD} # the build tree (here: the repository root)
# ---- environment: a private Open MPI / OpenBLAS / jansson prefix ----------------------
if msg=$(glibc_check); then row "glibc" ok "$msg"; else row "glibc" FAIL "$msg"; table; exit 1; fi
P=$PWD/$G/prefix
if [ -d "$G/debs" ] && [ ! -d "$P/usr" ]; then
	mkdir -p "$P"
	for d in "$G"/debs/*.deb; do
		if command -v dpkg >/dev/null; then dpkg -x "$d" "$P"
		else (cd "$P" && ar x "$OLDPWD/$d" && tar -xf data.tar.* && rm -f data.tar.* control.tar.* debian-binary); fi
	done
fi
if [ -d "$P/usr" ]; then
	export PATH=$P/usr/bin:$PATH OPAL_PREFIX=$P/usr
	export LD_LIBRARY_PATH=$P/usr/lib/x86_64-linux-gnu:$P/lib/x86_64-linux-gnu:$P/usr/lib/x86_64-linux-gnu/openmpi/lib:$P/usr/lib/x86_64-linux-gnu/openblas-pthread:${LD_LIBRARY_PATH:-}
fi
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
# cuBLAS / NCCL / cudart the module cannot find through its rpath (the CUDA toolkit here):
# python3's nvidia package first, then anywhere.
found=""
missing=$(ldd "${GPUCHECK_MODULE:-$B/src/ddptrain-cuda.so}" 2>/dev/null | awk '/not found/ { print $1 }' | sort -u)
if [ -n "$missing" ]; then
	while read -r lib _ where; do
		[ "$where" != "not found" ] || continue
		LD_LIBRARY_PATH=$LD_LIBRARY_PATH:${where%% (*}
		found="$found $lib in $where;"
	done < <(find_libs $missing)
fi
row "CUDA libraries" ok "${found:- all found through the rpath of the module}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_plm_rsh_agent=/bin/false OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# GPUCHECK_MODULE, GPUCHECK_NGPU and GPUCHECK_SMALL=1 (tiny sizes) let the script's own
# logic be tried here against the tests' fake GPU module (tests/lib/fake-gpu.so), which
# has no device clock, no NVTX and no all-reduce observer: with it, the trace row is
# skipped and says so.
export DDPTRAIN_CUDA_MODULE=${GPUCHECK_MODULE:-$B/src/ddptrain-cuda.so}
if [ "${GPUCHECK_SMALL:-0}" = 1 ]; then
	TOY_STEPS=200 TORCH_TOY_STEPS=200 WD=64 WB=32 WIDE_STEPS=20 DPW=32
else
	TOY_STEPS=20000 TORCH_TOY_STEPS=2000 WD=4096 WB=1024 WIDE_STEPS=60 DPW=1024
fi
MPIRUN=$(command -v mpirun.openmpi || command -v mpirun || true)
D=$B/src/ddptrain
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

echo "# gpu-check on $(hostname): $(nvidia-smi -L 2>/dev/null | head -4 | tr '\n' ';')"
if [ -z "$MPIRUN" ]; then echo "gpu-check: no mpirun (run --prepare on a build machine and copy $G)" >&2; exit 1; fi
if missing=$(ldd "$D" "$DDPTRAIN_CUDA_MODULE" "$B/tests/lib/opcheck" | grep 'not found'); then
	row "libraries resolved" FAIL "$(echo "$missing" | awk '{ print $1 }' | sort -u | tr '\n' ' ')"; table; exit 1
fi
NGPU=${GPUCHECK_NGPU:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)}
[ "$NGPU" -gt 0 ] || NGPU=1

BUDGET=${GPUCHECK_BUDGET:-450}
lim() { local l=$((BUDGET - (SECONDS - t_start))); [ "$l" -lt "$1" ] || l=$1; [ "$l" -gt 0 ] || l=1; echo "$l"; }
mpi() { local np=$1; shift; timeout -k 5 "$(lim 180)" "$MPIRUN" --oversubscribe -np "$np" "$D" --timeout=60 "$@"; }
one() { timeout -k 5 "$(lim 180)" "$D" --timeout=60 "$@"; } # dp: one process
# same NAME GPU CPU: weights (GPU.st, CPU.st) within TOL (default 1e-5) and, where
# CPU.jsonl was written, the GPU run's step and eval records against the CPU run's.
same() {
	local out met="" tol=${TOL:-1e-5}
	if ! out=$("$B/tests/lib/stcompare" "$2.st" "$3.st" "$tol" 2>&1); then row "$1" FAIL "${out#stcompare: }"; return; fi
	if [ -f "$3.jsonl" ]; then
		grep -E '"type":"(step|eval)"' "$3.jsonl" >"$3.ref"
		if ! met=$("$B/tests/lib/metcompare" "$2.jsonl" "$3.ref" "$tol" 2>&1); then row "$1" FAIL "${met#metcompare: }"; return; fi
		met="; ${met#metcompare: }"
	fi
	row "$1" ok "${out#stcompare: }$met"
}
# pair TAG NAME NP|dp ARGS...: NP ranks (dp: one process, a replica per visible GPU) on the
# CPU, then on the GPU (--device=cuda, the backend auto), the same arguments with @DEV@
# read as cpu or gpu; compared with same. The runs leave $TMP/TAG.{cpu,gpu}.{st,jsonl,out}.
pair() {
	local tag=$TMP/$1 name=$2 np=$3 dev run
	shift 3
	for dev in cpu gpu; do
		if [ "$np" = dp ]; then run=(one --mode=dp --replicas="$NGPU"); else run=(mpi "$np"); fi
		if ! "${run[@]}" "${@//@DEV@/$dev}" --device=$([ $dev = cpu ] && echo cpu || echo cuda) \
			--save="$tag.$dev.st" --metrics="$tag.$dev.jsonl" >"$tag.$dev.out" 2>&1; then
			row "$name" FAIL "${dev^^} run: $(grep ddptrain: "$tag.$dev.out" | head -1)"
			return 1
		fi
	done
	same "$name" "$tag.gpu" "$tag.cpu"
}

# 1. Every operation against the CPU backend, small and at every launch path's sizes.
if out=$(timeout "$(lim 120)" "$B/tests/lib/opcheck" 2>&1); then
	row "backend ops vs CPU, small and large (TF32 off)" ok "$(echo "$out" | grep -v '^#' | awk '{ if ($(NF-1) > m) m = $(NF-1) } END { printf "worst rel err %.3g over %d ops", m, NR }')"
else
	row "backend ops vs CPU, small and large (TF32 off)" FAIL "$(echo "$out" | grep -E 'FAIL|SKIP|opcheck' | head -3 | tr '\n' ' ')"
fi
echo "$out" >"$TMP/opcheck.txt"
if out=$(timeout "$(lim 120)" "$B/tests/lib/opcheck" --bf16 2>&1); then
	row "backend ops vs CPU, --precision=bf16" ok "$(echo "$out" | grep -v '^#' | awk '{ if ($(NF-1) > m) m = $(NF-1) } END { printf "worst rel err %.3g over %d ops (bound 2^-8)", m, NR }')"
else
	row "backend ops vs CPU, --precision=bf16" FAIL "$(echo "$out" | grep -E 'FAIL|SKIP|opcheck' | head -3 | tr '\n' ' ')"
fi
echo "$out" >>"$TMP/opcheck.txt"

# 2. The trainer's features, ddp on one GPU (NCCL at 1 rank) against the CPU.
E="--samples=240 --epochs=3 --seed=5 --log-every=1"
SGD="$E --batch-size=12 --momentum=0.9 --lr=0.01 --val-samples=50 --eval-every=7"
ADAMW="$E --layers=8,16,16,4 --loss=cross-entropy --val-samples=50 --eval-every=7 --optimizer=adamw --lr=0.01
       --betas=0.8,0.99 --weight-decay=0.05 --lr-schedule=cosine --warmup-steps=4 --clip-grad-norm=0.5 --freeze=2"
NESTEROV="$E --batch-size=12 --momentum=0.9 --nesterov --lr=0.01 --lr-schedule=linear --warmup-steps=3 --clip-grad-norm=1"
if pair sgd "ddp SGD, constant lr, validation (graphs)" 1 $SGD \
	--checkpoint="$TMP/ck.@DEV@.st" --checkpoint-every=20 --keep-checkpoints=5 && grep -q "graphs off" "$TMP/sgd.gpu.out"; then
	row "ddp SGD, constant lr: CUDA graphs replayed" FAIL "$(grep 'graphs off' "$TMP/sgd.gpu.out" | head -1)"
fi
pair adamw "ddp AdamW, cosine, clip, xent, frozen, validation" 1 $ADAMW --batch-size=12
pair nesterov "ddp SGD Nesterov, linear warm-up, clipping, MSE" 1 $NESTEROV
pair accum "ddp --grad-accum=3, AdamW set" 1 $ADAMW --batch-size=4 --grad-accum=3

# 3. Ranks sharing GPU 0: --backend=auto takes MPI there and says so; NCCL is refused.
if CUDA_VISIBLE_DEVICES=0 pair shared "ddp 2 ranks on GPU 0 (auto: mpi), AdamW, accum 3" 2 $ADAMW --batch-size=2 --grad-accum=3; then
	grep -q "^# backend auto: mpi, not nccl (node-local ranks 0 and 1 share GPU 0" "$TMP/shared.gpu.out" &&
		row "-np 2 on one GPU: auto takes mpi, with a notice" ok "$(grep -m1 '^# backend auto' "$TMP/shared.gpu.out" | cut -c3-)" ||
		row "-np 2 on one GPU: auto takes mpi, with a notice" FAIL "$(grep -m1 -E 'backend' "$TMP/shared.gpu.out")"
fi
if CUDA_VISIBLE_DEVICES=0 mpi 2 $SGD --max-steps=2 --device=cuda --backend=nccl 2>"$TMP/err"; then
	row "-np 2 --backend=nccl on one GPU refused" FAIL "it ran"
else
	grep -q "use --backend=mpi" "$TMP/err" && row "-np 2 --backend=nccl on one GPU refused" ok "exit 2, suggests --backend=mpi" ||
		row "-np 2 --backend=nccl on one GPU refused" FAIL "$(head -1 "$TMP/err")"
fi
if [ "$NGPU" -ge 2 ] && pair nccl2 "ddp 2 ranks on 2 GPUs (auto: nccl), AdamW set" 2 $ADAMW --batch-size=6 &&
	! grep -q "rank   1: .*backend nccl" "$TMP/nccl2.gpu.out"; then
	row "ddp 2 ranks on 2 GPUs: auto takes nccl" FAIL "$(grep -m1 'rank   1:' "$TMP/nccl2.gpu.out")"
fi

# 4. dp, a replica per visible GPU.
pair dp "dp on $NGPU GPU(s), AdamW set" dp $ADAMW --batch-size=12
pair dpaccum "dp on $NGPU GPU(s), Nesterov set, --grad-accum=3" dp $NESTEROV --grad-accum=3

# 5. Past DDP: --zero and the 16-bit wire against the CPU, and bf16 autocast.
#    --zero only shards the same float32 arithmetic: 1e-5, as every row above.
pair zero1 "ddp --zero=1, 1 rank (NCCL), AdamW set" 1 $ADAMW --batch-size=12 --zero=1
pair zero2 "ddp --zero=2, 1 rank (NCCL), AdamW set" 1 $ADAMW --batch-size=12 --zero=2
CUDA_VISIBLE_DEVICES=0 pair zero2mpi "ddp --zero=2, 2 ranks on GPU 0 (MPI, staged), AdamW" 2 $ADAMW --batch-size=6 --zero=2
[ "$NGPU" -lt 2 ] || pair zero2nccl "ddp --zero=2, 2 ranks on 2 GPUs (NCCL), AdamW set" 2 $ADAMW --batch-size=6 --zero=2
#    The 16-bit wire: a GPU gradient element 1e-7 from the CPU's (another order of float32
#    sums) that lies that close to a rounding boundary rounds to the other 16-bit
#    neighbour: that weight's update then differs by one ulp, at most 2^-7 of the element
#    in bf16 (2^-10 in fp16). SGD without momentum carries it no further (only through
#    later gradients, a second-order effect), and --clip-grad-norm=1 bounds every element
#    SGD applies by 1, so one flip moves a weight by at most lr 0.01 x 2^-7 = 7.8e-5: 3.2e-4
#    of the smallest tensor's largest weight (0.247, net2.bias of this run on the CPU,
#    2026-12-04). Flips are rare (an element lands within 1e-7 of a boundary with odds
#    2 x 1e-7 / 2^-8 = 5e-5 a step: ~0.5 in 165 weights x 60 steps), so 1e-3, three flips
#    on one weight, is the tolerance. (At 2 ranks each rank's half is rounded: the bound assumes a rank's
#    share no larger than the clipped sum.) That is above the wire's whole effect on these
#    weights (1.6e-4 on the CPU), so each row also shows the wire was used: the GPU's
#    16-bit run is further than 1e-5 from the CPU's float32 run.
WIRE="$E --batch-size=12 --lr=0.01 --clip-grad-norm=1"
wire() { # TAG NAME NP ARGS...: pair at 1e-3, then the GPU run against the CPU's float32 one
	local tag=$1 name=$2 np=$3 out
	shift 3
	TOL=1e-3 pair "$tag" "$name" "$np" $WIRE "$@" || return
	if out=$("$B/tests/lib/stcompare" "$TMP/$tag.gpu.st" "$TMP/wire32.$np.st" 1e-5 2>&1); then
		row "$name: the wire was used" FAIL "the GPU's 16-bit run is within 1e-5 of the CPU's float32 run (${out#stcompare: })"
	else
		rows[-1]+="; the wire used: $(sed -n 's/.*max relative error \([^ ]*\) .*/\1/p' <<<"$out") from the CPU's float32 run"
	fi
}
if mpi 1 $WIRE --device=cpu --save="$TMP/wire32.1.st" >/dev/null 2>&1 && mpi 2 $WIRE --device=cpu --save="$TMP/wire32.2.st" >/dev/null 2>&1; then
	wire wire1 "ddp --grad-compress=bf16, 1 rank (NCCL), SGD clip 1" 1 --grad-compress=bf16
	CUDA_VISIBLE_DEVICES=0 wire wire2 "ddp --grad-compress=bf16, 2 ranks on GPU 0 (MPI)" 2 --grad-compress=bf16
	wire wire16 "ddp --grad-compress=fp16, 1 rank (NCCL), SGD clip 1" 1 --grad-compress=fp16
else
	row "ddp --grad-compress: the CPU's float32 runs" FAIL "$(mpi 1 $WIRE --device=cpu 2>&1 | grep -m1 ddptrain:)"
fi
#    bf16 autocast (--precision=bf16) where this ddptrain has it: the GPU's bf16 products
#    (bf16 operands, float32 sums in cuBLAS's order) against the CPU's (the same operands,
#    float32 sums in OpenBLAS's order), at 2e-3: torch_crosscheck.py's gen moves every
#    float32 sum within its error bound (sum_moved), which ends 2.9e-4 to 8.8e-4 from
#    autocast on its first three bf16 cases (2.2e-3 on autocast-np2-zero2-accum3, whose
#    float32 run ends only 4.2e-3 away). BF16_WHY: why bf16 cannot run here (also the
#    speed rows').
BF16_WHY=""
HAVE_PRECISION=$("$D" --help 2>/dev/null | grep -q -- '--precision=' && echo 1)
if [ -z "$HAVE_PRECISION" ]; then
	BF16_WHY="no --precision in this build"
elif ! mpi 1 --device=cuda --precision=bf16 --max-steps=1 --samples=20 --log-every=0 >"$TMP/bf16.out" 2>&1; then
	BF16_WHY=$(grep -m1 'ddptrain:' "$TMP/bf16.out")
	BF16_WHY=${BF16_WHY:-a 1-step --precision=bf16 run failed}
fi
if [ -z "$BF16_WHY" ]; then
	TOL=2e-3 pair bf16 "ddp --precision=bf16, 1 rank (NCCL), SGD set (graphs)" 1 $SGD --precision=bf16
else
	case $BF16_WHY in
	*"not in this CUDA module"* | "no --precision"*) row "ddp --precision=bf16, 1 rank (NCCL), SGD set (graphs)" skip "$BF16_WHY" ;;
	*) row "ddp --precision=bf16, 1 rank (NCCL), SGD set (graphs)" FAIL "$BF16_WHY" ;;
	esac
fi

# 6. Checkpoints, and stop and resume: the GPU's checkpoints against the CPU's (written by
#    the SGD row's runs), a run stopped at step 20 and resumed (graphs captured afresh
#    after its eager first step) bit-identical to the straight GPU run; dp the same.
t=$TMP/sgd
n=0 out=""
for f in "$TMP"/ck.gpu.st.step-*; do
	[ -f "$f" ] || continue
	c=$TMP/ck.cpu.st${f#"$TMP"/ck.gpu.st}
	if ! o=$("$B/tests/lib/stcompare" "$f" "$c" 1e-5 2>&1); then out="$(basename "$f"): ${o#stcompare: }"; break; fi
	n=$((n + 1))
done
[ "$n" -ge 3 ] && [ -z "$out" ] && row "checkpoints written on the GPU vs CPU's" ok "$n checkpoints (steps 20, 40, 60) within 1e-5" ||
	row "checkpoints written on the GPU vs CPU's" FAIL "${out:-$n checkpoints written, want 3}"
if mpi 1 $SGD --device=cuda --max-steps=20 --checkpoint="$TMP/stop.st" >/dev/null 2>"$TMP/err" &&
	mpi 1 $SGD --device=cuda --resume="$TMP/stop.st" --save="$TMP/resumed.st" >"$TMP/resumed.out" 2>&1; then
	if "$B/tests/lib/stcompare" --exact "$TMP/resumed.st" "$t.gpu.st" >/dev/null 2>&1 && ! grep -q "graphs off" "$TMP/resumed.out"; then
		row "stop at step 20, --resume with graphs = straight" ok "bit-identical to the straight GPU run"
	else
		row "stop at step 20, --resume with graphs = straight" FAIL "$("$B/tests/lib/stcompare" "$TMP/resumed.st" "$t.gpu.st" 0 2>&1; grep 'graphs off' "$TMP/resumed.out")"
	fi
else
	row "stop at step 20, --resume with graphs = straight" FAIL "$(cat "$TMP/err" "$TMP/resumed.out" 2>/dev/null | grep ddptrain: | head -1)"
fi
A="$ADAMW --batch-size=12 --mode=dp --replicas=$NGPU --device=cuda"
if one $A --save="$TMP/dps.st" --checkpoint="$TMP/dpck.st" --checkpoint-every=20 --keep-checkpoints=5 >/dev/null 2>"$TMP/err" &&
	one $A --resume="$TMP/dpck.st.step-00000020" --save="$TMP/dpr.st" >/dev/null 2>>"$TMP/err"; then
	"$B/tests/lib/stcompare" --exact "$TMP/dpr.st" "$TMP/dps.st" >/dev/null 2>&1 &&
		row "dp stop at step 20, --resume (AdamW set) = straight" ok "bit-identical to the straight GPU run" ||
		row "dp stop at step 20, --resume (AdamW set) = straight" FAIL "$("$B/tests/lib/stcompare" "$TMP/dpr.st" "$TMP/dps.st" 0 2>&1)"
else
	row "dp stop at step 20, --resume (AdamW set) = straight" FAIL "$(grep ddptrain: "$TMP/err" | head -1)"
fi

# 7. --trace on the GPU: the spans' CUDA events and their NVTX ranges.
PY=${GPUCHECK_PYTHON:-python3}
NVTX=$B/tests/lib/nvtx-record.so
NET="--layers=32,160,160,160,4 --bucket-mb=0.05 --batch-size=8 --log-every=0 --max-steps=4"
if NVTX_INJECTION64_PATH=$NVTX NVTX_RECORD=$TMP/nvtx mpi 1 $NET --device=cuda --backend=nccl --trace="$TMP/trace.json" \
	>"$TMP/trace.out" 2>&1; then
	if [ -n "${GPUCHECK_MODULE:-}" ]; then
		row "--trace: CUDA-event spans, NVTX ranges nested" skip "the stand-in module $(basename "$GPUCHECK_MODULE") has no device clock, NVTX or all-reduce observer"
	elif ! j=$("$PY" "$B/tests/lib/trace_check.py" "$TMP/trace.json" ddp 1 4 3 1 4 yes 2>&1); then
		row "--trace: CUDA-event spans, NVTX ranges nested" FAIL "${j:-$PY cannot run tests/lib/trace_check.py}"
	elif [ ! -f "$NVTX" ]; then
		row "--trace: CUDA-event spans, NVTX ranges nested" FAIL "no $NVTX (--prepare builds it)"
	elif v=$(nvtx_check "$TMP/trace.json" "$TMP"/nvtx.*); then
		row "--trace: CUDA-event spans, NVTX ranges nested" ok "$v; $j"
	else
		row "--trace: CUDA-event spans, NVTX ranges nested" FAIL "NVTX: $v"
	fi
else
	row "--trace: CUDA-event spans, NVTX ranges nested" FAIL "$(grep ddptrain: "$TMP/trace.out" | head -1)"
fi

# 8. Speed: ddptrain beside PyTorch on the same GPU, 1 rank.
# PyTorch: python3's own, else the wheels --prepare brought (installed into .gpucheck/pylib).
torch_why=""
if ! "$PY" -c 'import torch' 2>/dev/null && [ -d "$G/wheels" ] && [ ! -d "$G/pylib/torch" ]; then
	"$PY" -m pip install --quiet --no-index --find-links "$G/wheels" --target "$G/pylib" torch >"$TMP/pip" 2>&1 ||
		torch_why="pip could not install .gpucheck/wheels: $(tail -1 "$TMP/pip")"
fi
[ ! -d "$G/pylib" ] || export PYTHONPATH=$PWD/$G/pylib${PYTHONPATH:+:$PYTHONPATH}
if [ -z "$torch_why" ]; then
	torch_why=$("$PY" -c 'import sys, torch
if not torch.cuda.is_available(): sys.exit("torch %s here, but torch.cuda.is_available() is False" % torch.__version__)' 2>&1 | tail -1)
	case $torch_why in
	"" | *"is_available() is False"*) ;;
	*"No module named"*) torch_why="no torch for $PY here and no .gpucheck/wheels" ;;
	*) torch_why="torch does not import for $PY: $torch_why" ;; # a broken install, say
	esac
fi
# Rank 0's median step in ms, from the --metrics summary (the first steps' set-up aside).
p50() { sed -n 's/.*"step_p50_s":\([0-9.e+-]*\).*/\1/p' "$1" | awk 'NR == 1 { printf "%.6f", 1e3 * $1 }'; }
# fig UNIT MS FLOP STAT [PEAK]: "8.123 ms per step (median), 49.10 TFLOP/s = 99% of SGEMM
# 49.50" (UNIT us or ms; FLOP per step, 0 for none; PEAK the SGEMM ceiling, 0 for none).
fig() {
	awk -v u="$1" -v m="$2" -v fl="$3" -v st="$4" -v pk="${5:-0}" 'BEGIN {
		printf (u == "us" ? "%.1f %s per step (%s)" : "%.3f %s per step (%s)"), (u == "us" ? 1000 : 1) * m, u, st
		if (fl > 0) { t = fl / (m * 1e-3) / 1e12; printf ", %.2f TFLOP/s", t; if (pk > 0) printf " = %.0f%% of SGEMM %.2f", 100 * t / pk, pk } }'
}
# target WHAT OP LIMIT VALUE: "; target WHAT: met" (or "missed"): issue 29's targets are a
# benchmark's, so a missed one is said, never counted as a failed row.
target() {
	awk -v w="$1" -v op="$2" -v l="$3" -v v="$4" 'BEGIN { printf "; target %s: %s", w, ((op == "<=" ? v <= l : v >= l) ? "met" : "missed") }'
}
# ddp_ms MODE ARGS...: ddptrain at 1 rank over NCCL, eager (DDPTRAIN_CUDA_GRAPHS=0) or
# with graphs; sets MS (its median step, ms) or, when the run failed, WHY.
ddp_ms() {
	local g=0
	[ "$1" = graphs ] && g=1
	shift
	MS="" WHY=""
	rm -f "$TMP/speed.jsonl"
	if ! DDPTRAIN_CUDA_GRAPHS=$g mpi 1 --device=cuda --backend=nccl --log-every=0 --metrics="$TMP/speed.jsonl" "$@" \
		>"$TMP/speed.out" 2>&1; then
		WHY=$(grep -m1 'ddptrain:' "$TMP/speed.out")
		WHY=${WHY:-ddptrain failed without a message}
	elif grep -q "graphs off" "$TMP/speed.out"; then
		WHY=$(grep -m1 "graphs off" "$TMP/speed.out")
	else
		MS=$(p50 "$TMP/speed.jsonl")
		[ -n "$MS" ] || WHY="no step_p50_s in its --metrics"
	fi
	[ -n "$MS" ]
}
# torch_ms ARGS...: PyTorch at 1 rank on GPU 0 (scripts/torch_ddp_bench.py); prints its
# ms per step (the mean over its timed steps).
torch_ms() {
	timeout -k 5 "$(lim 120)" "$PY" "$B/scripts/torch_ddp_bench.py" --device=cuda "$@" >"$TMP/torch.out" 2>&1 &&
		sed -n 's/.* ms_per_step=\([0-9.]*\).*/\1/p' "$TMP/torch.out" | tail -1
}
# torch_row NAME UNIT FLOP REF ARGS...: one PyTorch row; REF its figure on the H200 on
# 2026-12-04, in UNIT ("" where there is none).
torch_row() {
	local name=$1 unit=$2 flop=$3 ref=$4 tms
	shift 4
	if [ -n "$torch_why" ]; then
		row "$name" skip "$torch_why"
	elif tms=$(torch_ms "$@") && [ -n "$tms" ]; then
		row "$name" ok "$(fig "$unit" "$tms" "$flop" mean)${ref:+; 2026-12-04: $ref $unit} ($(sed -n 's/^# torch \([^,]*\),.*/torch \1/p' "$TMP/torch.out"))"
	else
		row "$name" FAIL "$(tail -1 "$TMP/torch.out")"
	fi
}
# The wide model's products, as the CUDA backend calls cuBLAS (column-major): forward
# (T,N WDxWBxWD) x4, weight grad (N,T WDxWDxWB) x4, input grad (N,N WDxWBxWD) x3 (the first
# layer has none). Same FLOPs each: the ceiling is their harmonic mean, weighted by count.
f=$(timeout "$(lim 60)" "$B/tests/lib/opcheck" --sgemm $WD $WB $WD T N 2>/dev/null || echo 0)
w=$(timeout "$(lim 60)" "$B/tests/lib/opcheck" --sgemm $WD $WD $WB N T 2>/dev/null || echo 0)
i=$(timeout "$(lim 60)" "$B/tests/lib/opcheck" --sgemm $WD $WB $WD N N 2>/dev/null || echo 0)
PEAK=$(awk -v f="$f" -v w="$w" -v i="$i" 'BEGIN { if (f > 0 && w > 0 && i > 0) printf "%.2f", 11 / (4 / f + 4 / w + 3 / i); else print 0 }')
[ "$PEAK" != 0 ] && row "cuBLAS SGEMM, the ${WD}x5 step's shapes" ok "$PEAK TFLOP/s (fwd $f, wgrad $w, igrad $i)" ||
	row "cuBLAS SGEMM, the ${WD}x5 step's shapes" FAIL "opcheck --sgemm: fwd $f, wgrad $w, igrad $i"

# The ToyModel: ddptrain's synthetic data beside PyTorch's batches in pinned host memory
# and resident on the GPU; PyTorch's 2026-12-04 figures: DDP eager 1463 us (pinned), 1268
# us (resident), the plain model's whole step in one graph 54 us. Target: graphs <= 30 us.
TOY="--layers=10,10,5 --batch-size=20"
for mode in eager graphs; do
	gf=$([ $mode = graphs ] && echo --graphs)
	if ddp_ms $mode $TOY --max-steps="$TOY_STEPS" --samples=$((20 * TOY_STEPS)); then
		row "ToyModel 10,10,5 b20, $mode: ddptrain, synthetic" ok "$(fig us "$MS" 0 median)$([ $mode = eager ] || target "<= 30 us" "<=" 0.030 "$MS")"
	else
		row "ToyModel 10,10,5 b20, $mode: ddptrain, synthetic" FAIL "$WHY"
	fi
	torch_row "ToyModel 10,10,5 b20, $mode: PyTorch, pinned host" us 0 "$([ $mode = eager ] && echo 1463)" \
		$TOY --steps="$TORCH_TOY_STEPS" --warmup=20 --batches=pinned $gf
	torch_row "ToyModel 10,10,5 b20, $mode: PyTorch, resident" us 0 "$([ $mode = eager ] && echo 1268 || echo 54)" \
		$TOY --steps="$TORCH_TOY_STEPS" --warmup=20 --batches=resident $gf
done

# The wide model in fp32, TF32 and bf16, eager and with graphs. ddptrain's .npy rows feed
# it as a DataLoader feeds PyTorch (rows gathered into pinned host buffers, copied each
# step): beside PyTorch's pinned rows; its synthetic data is made on the device: beside
# PyTorch's resident rows. PyTorch on the H200, 2026-12-04 (issue 29), eager resident /
# eager pinned / one graph: fp32 8.08 / 8.69 / 8.01 ms, TF32 2.10 / 2.57 / 1.89, bf16
# autocast 2.74 / 2.66 / 1.47. Targets (the ms ones at the issue's sizes only, 4096x5
# batch 1024): synthetic within 3% of .npy (synthetic <= 1.03 x .npy); fp32 eager <= 8.69
# ms; fp32 graphs >= 95% of the SGEMM ceiling; TF32 graphs <= 1.85 ms; bf16 graphs <= 1.40
# ms, bf16 eager <= 2.6 ms.
WIDE="--layers=$WD,$WD,$WD,$WD,$WD --batch-size=$WB"
FLOP=$((2 * WB * WD * WD * 11))
ISSUE=$([ "$WD" = 4096 ] && [ "$WB" = 1024 ] && echo 1) # the issue's sizes: its ms targets apply
declare -A REF=([fp32]="8.08 8.69 8.01" [tf32]="2.10 2.57 1.89" [bf16]="2.74 2.66 1.47")
NPY_WHY=""
if ! { "$B/tests/lib/mknpy" "$TMP/x.npy" $((8 * WB)) "$WD" f4 1 && "$B/tests/lib/mknpy" "$TMP/y.npy" $((8 * WB)) "$WD" f4 2; } \
	>"$TMP/mknpy.out" 2>&1; then
	NPY_WHY="tests/lib/mknpy: $(tail -1 "$TMP/mknpy.out")"
fi
for prec in fp32 tf32 bf16; do
	pf="" as=""
	case $prec in
	tf32) if [ -n "$HAVE_PRECISION" ]; then pf=--precision=tf32; else pf=--tf32 as=" (as --tf32: no --precision in this build)"; fi ;;
	bf16) pf=--precision=bf16 ;;
	esac
	read -r ref_res ref_pin ref_graph <<<"${REF[$prec]}"
	for mode in eager graphs; do
		gf=$([ $mode = graphs ] && echo --graphs)
		name="${WD}x5 b$WB, $prec, $mode"
		steps="--max-steps=$WIDE_STEPS"
		npy_ms=""
		# ddptrain, .npy files (fp32 only: the same data path for every precision)
		if [ $prec = fp32 ]; then
			if [ -n "$NPY_WHY" ]; then
				row "$name: ddptrain, .npy files" FAIL "$NPY_WHY"
			elif ddp_ms $mode $WIDE $steps --epochs=1000 --inputs="$TMP/x.npy" --targets="$TMP/y.npy"; then
				npy_ms=$MS
				t=$([ $mode = eager ] && [ -n "$ISSUE" ] && target "<= 8.69 ms" "<=" 8.69 "$MS")
				[ $mode = eager ] || [ "$PEAK" = 0 ] ||
					t=$(target ">= 95% of SGEMM" ">=" 0.95 "$(awk -v fl="$FLOP" -v m="$MS" -v pk="$PEAK" 'BEGIN { print fl / (m * 1e-3) / 1e12 / pk }')")
				row "$name: ddptrain, .npy files" ok "$(fig ms "$MS" "$FLOP" median "$PEAK")$t"
			else
				row "$name: ddptrain, .npy files" FAIL "$WHY"
			fi
		fi
		# ddptrain, synthetic data
		if [ $prec = bf16 ] && [ -n "$BF16_WHY" ]; then
			case $BF16_WHY in
			*"not in this CUDA module"* | "no --precision"*) row "$name: ddptrain, synthetic" skip "$BF16_WHY" ;;
			*) row "$name: ddptrain, synthetic" FAIL "$BF16_WHY" ;;
			esac
		elif ddp_ms $mode $WIDE $steps --samples=$((WB * WIDE_STEPS)) $pf; then
			t=""
			case $prec.$mode in
			fp32.eager) [ -z "$ISSUE" ] || t=$(target "<= 8.69 ms" "<=" 8.69 "$MS") ;;
			fp32.graphs) [ "$PEAK" = 0 ] || t=$(target ">= 95% of SGEMM" ">=" 0.95 "$(awk -v fl="$FLOP" -v m="$MS" -v pk="$PEAK" 'BEGIN { print fl / (m * 1e-3) / 1e12 / pk }')") ;;
			tf32.graphs) [ -z "$ISSUE" ] || t=$(target "<= 1.85 ms" "<=" 1.85 "$MS") ;;
			bf16.eager) [ -z "$ISSUE" ] || t=$(target "<= 2.6 ms" "<=" 2.6 "$MS") ;;
			bf16.graphs) [ -z "$ISSUE" ] || t=$(target "<= 1.40 ms" "<=" 1.40 "$MS") ;;
			esac
			[ -z "$npy_ms" ] || t="$t$(target "within 3% of .npy $(printf %.3f "$npy_ms") ms" "<=" "$(awk -v n="$npy_ms" 'BEGIN { print 1.03 * n }')" "$MS")"
			row "$name: ddptrain, synthetic" ok "$(fig ms "$MS" "$FLOP" median "$([ $prec = fp32 ] && echo "$PEAK" || echo 0)")$t$as"
		else
			row "$name: ddptrain, synthetic" FAIL "$WHY"
		fi
		torch_row "$name: PyTorch, pinned host" ms "$FLOP" "$([ $mode = eager ] && echo "$ref_pin")" \
			$WIDE --steps="$WIDE_STEPS" --warmup=10 --precision=$prec --batches=pinned $gf
		torch_row "$name: PyTorch, resident" ms "$FLOP" "$([ $mode = eager ] && echo "$ref_res" || echo "$ref_graph")" \
			$WIDE --steps="$WIDE_STEPS" --warmup=10 --precision=$prec --batches=resident $gf
	done
done
# dp's phases, timed by CUDA events on each replica's stream: one row per replica.
if one --mode=dp --replicas="$NGPU" --device=cuda --layers=$DPW,$DPW,$DPW,$DPW --batch-size=256 \
	--samples=$((50 * 256 * NGPU)) --epochs=1 --log-every=0 >"$TMP/dp.out" 2>&1; then
	mapfile -t reps < <(awk '/^#replica/ { split($0, h); t = 1; next }
		t && /^# +[0-9]+ / { s = ""; for (i = 3; i <= 10; i++) s = s sprintf("%s %s  ", h[i - 1], $i); print $2 "|" s; next }
		{ t = 0 }' "$TMP/dp.out")
	[ ${#reps[@]} -eq "$NGPU" ] || row "dp phases on $NGPU GPU(s)" FAIL "no phase table: $(grep -c . "$TMP/dp.out") lines of output"
	for x in "${reps[@]}"; do row "dp ${DPW}x4, replica ${x%%|*}: ms per step" ok "${x#*|}"; done
else
	row "dp phases on $NGPU GPU(s)" FAIL "$(grep ddptrain: "$TMP/dp.out" | head -1)"
fi

# 9. compute-sanitizer over a short NCCL run with graphs (an eager first step, the
#    capture, replays): the four tools at once, each in its own process on the GPU (about
#    a minute, racecheck the slowest). Last, so the timings above ran alone, and a tool
#    that runs long is cut by what is left of the budget, not the rows after it.
#    --report-api-errors no: NCCL probes its kernel images at init and the probes count 8
#    cudaErrorNoKernelImageForDevice API errors; ddptrain checks the status of every call
#    it makes itself, so an API error of its own ends the run and fails the row by its
#    exit status. GPUCHECK_SANITIZER names another compute-sanitizer (the tests'
#    stand-in: it then runs with the stand-in module too).
SAN=${GPUCHECK_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
SANRUN="--layers=32,160,160,160,4 --bucket-mb=0.05 --batch-size=8 --log-every=0 --max-steps=6"
declare -A sanpid=()
for t in memcheck racecheck synccheck initcheck; do
	if [ -n "${GPUCHECK_MODULE:-}" ] && [ -z "${GPUCHECK_SANITIZER:-}" ]; then
		row "compute-sanitizer $t, NCCL run with graphs" skip "the stand-in module $(basename "$GPUCHECK_MODULE") runs on the CPU: nothing for a CUDA tool to see"
	elif [ ! -x "$SAN" ]; then
		row "compute-sanitizer $t, NCCL run with graphs" skip "no compute-sanitizer here (PATH, /usr/local/cuda/bin)"
	else
		timeout -k 5 "$(lim 240)" "$MPIRUN" --oversubscribe -np 1 "$SAN" --tool "$t" --error-exitcode 9 --report-api-errors no \
			"$D" --timeout=120 $SANRUN --device=cuda --backend=nccl >"$TMP/san.$t" 2>&1 &
		sanpid[$t]=$!
	fi
done
for t in memcheck racecheck synccheck initcheck; do
	[ -n "${sanpid[$t]:-}" ] || continue
	rc=0
	wait "${sanpid[$t]}" || rc=$?
	sum=$(grep -m1 -o 'ERROR SUMMARY: [0-9]* error[s]*' "$TMP/san.$t")
	if [ $rc -eq 0 ] && [ "$sum" = "ERROR SUMMARY: 0 errors" ]; then
		row "compute-sanitizer $t, NCCL run with graphs" ok "0 errors over ${SANRUN##*--max-steps=} steps"
	else
		why=$(grep -m1 -E '^========= (Invalid|Race|Barrier|Uninitialized|Error|Program hit)|ddptrain:' "$TMP/san.$t")
		row "compute-sanitizer $t, NCCL run with graphs" FAIL "exit $rc, ${sum:-no summary}: ${why:-$(tail -1 "$TMP/san.$t")}"
	fi
done

echo
echo "# opcheck detail:"
sed 's/^/#   /' "$TMP/opcheck.txt"
table
[ "$fails" -eq 0 ]
