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
#   - --trace on the GPU: the trace file's spans (tests/lib/trace_check.py) and the NVTX
#     ranges (tests/lib/nvtx-record.so) present, balanced and nested, one forward range
#     per forward span (each span's CUDA events were recorded with its range);
# then the speed: the ToyModel (10,10,5, batch 20) and --layers=4096x5 --batch-size=1024,
# DDP at 1 rank, eager (DDPTRAIN_CUDA_GRAPHS=0) and with graphs, ddptrain beside PyTorch
# DDP on the same GPU (scripts/torch_ddp_bench.py --device=cuda [--graphs]), the wide
# model's TFLOP/s against cuBLAS SGEMMs of the step's own shapes timed in the same run,
# and dp's phase times (CUDA events) on every visible GPU.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
G=.gpucheck

# What the check runs, built (carried to the GPU machine with .gpucheck/).
BUILT="src/ddptrain src/ddptrain-cuda.so tests/lib/opcheck tests/lib/stcompare tests/lib/metcompare tests/lib/nvtx-record.so"

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
	for f in src/ddptrain tests/lib/opcheck tests/lib/stcompare tests/lib/metcompare; do
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
	rows+=("$(printf '%-52s %-6s %s' "$1" "$2" "$3")")
	[ "$2" != FAIL ] || fails=$((fails + 1))
	[ "$2" != skip ] || skips=$((skips + 1))
}
table() {
	echo
	printf '%-52s %-6s %s\n' "check" "result" "figures"
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
# same NAME GPU CPU: weights (GPU.st, CPU.st) within 1e-5 and, where CPU.jsonl was
# written, the GPU run's step and eval records against the CPU run's.
same() {
	local out met=""
	if ! out=$("$B/tests/lib/stcompare" "$2.st" "$3.st" 1e-5 2>&1); then row "$1" FAIL "${out#stcompare: }"; return; fi
	if [ -f "$3.jsonl" ]; then
		grep -E '"type":"(step|eval)"' "$3.jsonl" >"$3.ref"
		if ! met=$("$B/tests/lib/metcompare" "$2.jsonl" "$3.ref" 1e-5 2>&1); then row "$1" FAIL "${met#metcompare: }"; return; fi
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

# 5. Checkpoints, and stop and resume: the GPU's checkpoints against the CPU's (written by
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

# 6. --trace on the GPU: the spans' CUDA events and their NVTX ranges.
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

# 7. Speed: ddptrain beside PyTorch DDP on the same GPU, 1 rank.
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
	[ -z "$torch_why" ] || case $torch_why in *"No module named"*) torch_why="no torch for $PY here and no .gpucheck/wheels" ;; esac
fi
# Rank 0's median step in ms, from the --metrics summary (the first steps' set-up aside).
p50() { sed -n 's/.*"step_p50_s":\([0-9.e+-]*\).*/\1/p' "$1" | awk 'NR == 1 { printf "%.6f", 1e3 * $1 }'; }
# torch NAME ARGS...: PyTorch DDP at 1 rank on GPU 0; prints its ms per step.
torch_ms() {
	timeout -k 5 "$(lim 120)" "$PY" "$B/scripts/torch_ddp_bench.py" --device=cuda "$@" >"$TMP/torch.out" 2>&1 &&
		sed -n 's/.* ms_per_step=\([0-9.]*\).*/\1/p' "$TMP/torch.out" | tail -1
}
# One model, eager and with graphs: ddptrain's rows, then PyTorch's. UNIT us or ms; FLOP
# per step, or 0 (no TFLOP/s).
speed() {
	local name=$1 unit=$2 flop=$3 steps=$4 tsteps=$5 layers=$6 batch=$7 mode g ms tms f scale
	scale=$([ "$unit" = us ] && echo 1000 || echo 1)
	for mode in eager graphs; do
		g=$([ $mode = graphs ] && echo 1 || echo 0)
		if DDPTRAIN_CUDA_GRAPHS=$g mpi 1 --device=cuda --backend=nccl --layers="$layers" --batch-size="$batch" \
			--max-steps="$steps" --samples=$((batch * steps)) --log-every=0 --metrics="$TMP/speed.jsonl" >"$TMP/speed.out" 2>&1 &&
			ms=$(p50 "$TMP/speed.jsonl") && [ -n "$ms" ] && ! grep -q "graphs off" "$TMP/speed.out"; then
			f=$(awk -v m="$ms" -v s="$scale" -v fl="$flop" -v pk="${PEAK:-0}" -v u="$unit" 'BEGIN {
				printf (u == "us" ? "%.1f %s per step (median)" : "%.3f %s per step (median)"), m * s, u
				if (fl > 0) { t = fl / (m * 1e-3) / 1e12; printf ", %.2f TFLOP/s", t; if (pk > 0) printf " = %.0f%% of SGEMM %.2f", 100 * t / pk, pk } }')
			row "$name, 1 rank, $mode: ddptrain" ok "$f"
		else
			row "$name, 1 rank, $mode: ddptrain" FAIL "$(grep -E 'ddptrain:|graphs off' "$TMP/speed.out" | head -1)"
		fi
		if [ -n "$torch_why" ]; then
			row "$name, 1 rank, $mode: PyTorch" skip "$torch_why"
		elif tms=$(torch_ms --layers="$layers" --batch-size="$batch" --steps="$tsteps" --warmup=20 $([ $mode = graphs ] && echo --graphs)) && [ -n "$tms" ]; then
			row "$name, 1 rank, $mode: PyTorch" ok "$(awk -v m="$tms" -v s="$scale" -v fl="$flop" -v u="$unit" 'BEGIN {
				printf (u == "us" ? "%.1f %s per step (mean)" : "%.3f %s per step (mean)"), m * s, u; if (fl > 0) printf ", %.2f TFLOP/s", fl / (m * 1e-3) / 1e12 }') ($(grep -m1 '^# torch' "$TMP/torch.out" | cut -c3-40))"
		else
			row "$name, 1 rank, $mode: PyTorch" FAIL "$(tail -1 "$TMP/torch.out")"
		fi
	done
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
speed "ToyModel 10,10,5 batch 20" us 0 "$TOY_STEPS" "$TORCH_TOY_STEPS" 10,10,5 20
speed "${WD}x5 batch $WB" ms $((2 * WB * WD * WD * 11)) "$WIDE_STEPS" "$WIDE_STEPS" $WD,$WD,$WD,$WD,$WD "$WB"
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

echo
echo "# opcheck detail:"
sed 's/^/#   /' "$TMP/opcheck.txt"
table
[ "$fails" -eq 0 ]
