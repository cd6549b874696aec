#!/bin/bash
# gpu-check.sh - the whole GPU verification of ddptrain in one command.
#
#   scripts/gpu-check.sh --prepare   on a build machine (Debian, network): build with CUDA
#                                    (make, make tests/lib/opcheck tests/lib/stcompare) first; this
#                                    downloads the Debian packages the binaries need at run
#                                    time (Open MPI, OpenBLAS, jansson) into .gpucheck/debs
#   scripts/gpu-check.sh             on the GPU machine, from the repository root with the
#                                    build and .gpucheck/ copied along: unpacks the packages
#                                    into a private prefix (never into /), then checks and
#                                    times, and prints a table last
#
#   scripts/gpu-check.sh --find-libs LIB...   where the check would find each library
#                                    (python3's nvidia package, then a deep search); also
#                                    checks glibc. For tests: GPUCHECK_SEARCH_ROOT (default
#                                    /), GPUCHECK_PYTHON, GPUCHECK_GLIBC (this machine's
#                                    version), GPUCHECK_GLIBC_WANT override what is probed.
#
# Assumes nothing on the GPU machine beyond the NVIDIA driver (and, if the CUDA
# toolkit is not installed there, cuBLAS/NCCL/cudart in Python packages' nvidia/*/lib
# folders -- however deep the Python environment sits -- or anywhere LD_LIBRARY_PATH
# points), and a glibc at least as new as the build machine's (the unpacked Debian
# packages need it; the check says so and stops otherwise). Runs in under 8 minutes.
#
# Checks: every CUDA backend operation against the CPU backend (1e-6, TF32 off);
# 1 rank GPU vs CPU after 50 steps (1e-5); mpirun -np 2 --device=cuda --backend=mpi
# sharing one GPU vs the CPU; -np 1 --backend=nccl; dp on every visible GPU; the CUDA
# graph path (-np 1 --backend=nccl replays graphs); then the ToyModel's microseconds per
# step eager (DDPTRAIN_CUDA_GRAPHS=0) and with graphs, --layers=4096x5 --batch-size=1024
# TFLOP/s against cuBLAS SGEMMs of the step's own shapes and layouts timed in the same
# run, and dp's phase times (CUDA events) on every visible GPU.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
G=.gpucheck

if [ "${1:-}" = "--prepare" ]; then
	set -e
	for f in src/ddptrain src/ddptrain-cuda.so tests/lib/opcheck tests/lib/stcompare; do
		[ -x "$f" ] || { echo "gpu-check: build $f first (./configure && make && make tests/lib/opcheck tests/lib/stcompare)" >&2; exit 1; }
	done
	mkdir -p "$G/debs"
	pkgs="openmpi-bin openmpi-common libopenmpi3 libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7
	      libpmix2 libfabric1 libucx0 libibverbs1 librdmacm1 libpsm-infinipath1 libpsm2-2 libnl-3-200
	      libnl-route-3-200 libxnvctrl0 libmunge2 libnuma1 libltdl7 libudev1
	      libopenblas0-pthread libgfortran5 libquadmath0 libjansson4"
	# Plus whatever else the binaries link (dpkg -S of each library ldd resolves).
	for f in src/ddptrain tests/lib/opcheck tests/lib/stcompare; do
		ldd "$f" | awk '$3 ~ /^\// { print $3 }'
	done | xargs -r -n1 readlink -f | xargs -r -n1 dpkg -S 2>/dev/null | cut -d: -f1 |
		grep -Ev '^(libc6|libgcc-s1|libstdc\+\+6|libzstd1|zlib1g)$' >"$G/extra" || true
	(cd "$G/debs" && apt-get download $pkgs $(sort -u ../extra))
	# The packages need this glibc or newer on the GPU machine.
	getconf GNU_LIBC_VERSION | awk '{ print $2 }' >"$G/glibc"
	du -sh "$G/debs"
	echo "gpu-check: prepared; carry src/ddptrain src/ddptrain-cuda.so tests/lib/opcheck tests/lib/stcompare $G"
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

t_start=$SECONDS
rows=()
fails=0
row() { rows+=("$(printf '%-44s %-8s %s' "$1" "$2" "$3")"); [ "$2" != FAIL ] || fails=$((fails + 1)); }
table() {
	echo
	printf '%-44s %-8s %s\n' "check" "result" "figures"
	printf '%s\n' "${rows[@]}"
	echo "# $((${#rows[@]} - fails)) passed, $fails failed, in $((SECONDS - t_start)) s$([ $((SECONDS - t_start)) -lt "${BUDGET:-450}" ] || echo " (time budget spent: the last runs were cut short)")"
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
# logic be tried here against the tests' fake GPU module (tests/lib/fake-gpu.so).
export DDPTRAIN_CUDA_MODULE=${GPUCHECK_MODULE:-$B/src/ddptrain-cuda.so}
if [ "${GPUCHECK_SMALL:-0}" = 1 ]; then TOY_STEPS=200 WD=64 WB=32 DPW=32; else TOY_STEPS=20000 WD=4096 WB=1024 DPW=1024; fi
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

# Each run is limited to what is left of the budget (GPUCHECK_BUDGET, 450 s: the whole
# call stays under 8 minutes even if runs hang), and ddptrain's own --timeout turns a
# stalled collective into exit 1 with a message.
BUDGET=${GPUCHECK_BUDGET:-450}
lim() { local l=$((BUDGET - (SECONDS - t_start))); [ "$l" -lt "$1" ] || l=$1; [ "$l" -gt 0 ] || l=1; echo "$l"; }
mpi() { local np=$1; shift; timeout -k 5 "$(lim 180)" "$MPIRUN" --oversubscribe -np "$np" "$D" --timeout=60 "$@"; }
cmp_row() { # NAME A B
	local out
	if out=$("$B/tests/lib/stcompare" "$2" "$3" 1e-5 2>&1); then row "$1" ok "${out#stcompare: }"
	else row "$1" FAIL "${out#stcompare: }"; fi
}

# 1. operations
if out=$(timeout "$(lim 120)" "$B/tests/lib/opcheck" 2>&1); then
	row "backend ops vs CPU (TF32 off)" ok "$(echo "$out" | grep -v '^#' | awk '{ if ($(NF-1) > m) m = $(NF-1) } END { printf "worst rel err %.3g over %d ops", m, NR }')"
else
	row "backend ops vs CPU (TF32 off)" FAIL "$(echo "$out" | grep -E 'FAIL|SKIP|opcheck' | head -3 | tr '\n' ' ')"
fi
echo "$out" >"$TMP/opcheck.txt"

# 2-5. training against the CPU
c="--samples=2000 --batch-size=20 --max-steps=50 --seed=7 --lr=0.01 --momentum=0.9 --quiet"
mpi 1 $c --device=cpu --save="$TMP/cpu1.st" && mpi 1 $c --device=cuda --backend=mpi --save="$TMP/gpu1.st" &&
	cmp_row "1 rank GPU vs CPU, 50 steps" "$TMP/gpu1.st" "$TMP/cpu1.st" || row "1 rank GPU vs CPU, 50 steps" FAIL "run failed"
mpi 1 $c --device=cuda --backend=nccl --save="$TMP/nccl1.st" &&
	cmp_row "-np 1 --backend=nccl vs CPU" "$TMP/nccl1.st" "$TMP/cpu1.st" || row "-np 1 --backend=nccl vs CPU" FAIL "run failed"
mpi 2 $c --device=cpu --save="$TMP/cpu2.st" &&
	CUDA_VISIBLE_DEVICES=0 mpi 2 $c --device=cuda --backend=mpi --save="$TMP/mpi2.st" >"$TMP/mpi2.out" &&
	cmp_row "-np 2 --backend=mpi sharing GPU 0 vs CPU" "$TMP/mpi2.st" "$TMP/cpu2.st" ||
	row "-np 2 --backend=mpi sharing GPU 0 vs CPU" FAIL "run failed"
if CUDA_VISIBLE_DEVICES=0 mpi 2 $c --device=cuda --backend=nccl 2>"$TMP/err"; then
	row "-np 2 --backend=nccl on one GPU refused" FAIL "it ran"
else
	grep -q "use --backend=mpi" "$TMP/err" && row "-np 2 --backend=nccl on one GPU refused" ok "exit 2, suggests --backend=mpi" ||
		row "-np 2 --backend=nccl on one GPU refused" FAIL "$(head -1 "$TMP/err")"
fi
if [ "$NGPU" -ge 2 ]; then
	mpi 2 $c --device=cuda --backend=nccl --save="$TMP/nccl2.st" &&
		cmp_row "-np 2 --backend=nccl (2 GPUs) vs CPU" "$TMP/nccl2.st" "$TMP/cpu2.st" || row "-np 2 --backend=nccl vs CPU" FAIL "run failed"
fi
timeout "$(lim 180)" "$D" --mode=dp --replicas="$NGPU" --device=cpu $c --save="$TMP/dpcpu.st" &&
	timeout "$(lim 180)" "$D" --mode=dp --replicas="$NGPU" --device=cuda $c --save="$TMP/dpgpu.st" &&
	cmp_row "dp on $NGPU GPU(s) vs CPU dp" "$TMP/dpgpu.st" "$TMP/dpcpu.st" || row "dp on $NGPU GPU(s) vs CPU dp" FAIL "run failed"

# 6. the graph path with a real NCCL communicator (1 rank: graphs are captured and replayed)
mpi 1 ${c/--quiet/} --device=cuda --backend=nccl --max-steps=50 --save="$TMP/graph1.st" >"$TMP/graph1.out" 2>&1 &&
	! grep -q "graphs off" "$TMP/graph1.out" && cmp_row "-np 1 nccl with CUDA graphs vs CPU" "$TMP/graph1.st" "$TMP/cpu1.st" ||
	row "-np 1 nccl with CUDA graphs vs CPU" FAIL "$(grep -E 'graphs off|ddptrain:' "$TMP/graph1.out" | head -1)"

# 7. speed
summary() { sed -n 's/.*'"$1"'=\([0-9.]*\).*/\1/p' "$2" | tail -1; }
toy="--device=cuda --backend=nccl --max-steps=$TOY_STEPS --samples=$((20 * TOY_STEPS)) --log-every=0"
for mode in eager graphs; do
	g=1; [ $mode = eager ] && g=0
	if DDPTRAIN_CUDA_GRAPHS=$g mpi 1 $toy >"$TMP/toy-$mode.out" 2>&1; then
		row "ToyModel, 1 rank, us per step, $mode" ok "$(awk -v m="$(summary ms_per_step "$TMP/toy-$mode.out")" 'BEGIN { printf "%.1f us", 1000 * m }')"
	else
		row "ToyModel, 1 rank, us per step, $mode" FAIL "$(grep ddptrain: "$TMP/toy-$mode.out" | head -1)"
	fi
done
if mpi 1 --device=cuda --layers=$WD,$WD,$WD,$WD,$WD --batch-size=$WB --samples=$((60 * WB)) --epochs=1 \
	--log-every=0 >"$TMP/wide.out" 2>&1; then
	ms=$(summary ms_per_step "$TMP/wide.out")
	sps=$(summary samples_per_s "$TMP/wide.out")
	# The step's own products, as the CUDA backend calls cuBLAS (column-major): forward
	# (T,N WDxWBxWD) x4, weight grad (N,T WDxWDxWB) x4, input grad (N,N WDxWBxWD) x3 (the
	# first layer has none). Same FLOPs each: the ceiling is their harmonic mean, weighted
	# by count.
	f=$(timeout "$(lim 60)" "$B/tests/lib/opcheck" --sgemm $WD $WB $WD T N 2>/dev/null || echo 0)
	w=$(timeout "$(lim 60)" "$B/tests/lib/opcheck" --sgemm $WD $WD $WB N T 2>/dev/null || echo 0)
	i=$(timeout "$(lim 60)" "$B/tests/lib/opcheck" --sgemm $WD $WB $WD N N 2>/dev/null || echo 0)
	peak=$(awk -v f="$f" -v w="$w" -v i="$i" 'BEGIN { if (f > 0 && w > 0 && i > 0) printf "%.2f", 11 / (4 / f + 4 / w + 3 / i); else print 0 }')
	tf=$(awk -v d=$WD -v b=$WB -v ms="$ms" 'BEGIN { printf "%.2f", 2 * b * d * d * 11 / (ms * 1e-3) / 1e12 }')
	[ "$peak" != 0 ] && r=ok || r=FAIL # no SGEMM timing: the comparison is the point
	row "${WD}x5 batch $WB, 1 rank" $r "$(printf '%.0f samples/s, %s TFLOP/s = %.0f%% of SGEMM %s (fwd %s, wgrad %s, igrad %s)' "$sps" "$tf" "$(awk -v a="$tf" -v b="$peak" 'BEGIN { print (b > 0 ? 100 * a / b : 0) }')" "$peak" "$f" "$w" "$i")"
else
	row "${WD}x5 batch $WB, 1 rank" FAIL "$(grep ddptrain: "$TMP/wide.out" | head -1)"
fi
# dp's phases, timed by CUDA events on each replica's stream: one row per replica.
if timeout "$(lim 180)" "$D" --mode=dp --replicas="$NGPU" --device=cuda --layers=$DPW,$DPW,$DPW,$DPW --batch-size=256 \
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
echo "# $(head -3 "$TMP/toy-graphs.out" 2>/dev/null | grep -i GPU || true)"
table
[ "$fails" -eq 0 ]
