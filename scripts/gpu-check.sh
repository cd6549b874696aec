#!/bin/bash
# gpu-check.sh - the whole GPU verification of ddptrain in one command.
#
#   scripts/gpu-check.sh --prepare   on a build machine (Debian, network): build with CUDA
#                                    (make, make tests/opcheck tests/stcompare) first; this
#                                    downloads the Debian packages the binaries need at run
#                                    time (Open MPI, OpenBLAS, jansson) into .gpucheck/debs
#   scripts/gpu-check.sh             on the GPU machine, from the repository root with the
#                                    build and .gpucheck/ copied along: unpacks the packages
#                                    into a private prefix (never into /), then checks and
#                                    times, and prints a table last
#
# Assumes nothing on the GPU machine beyond the NVIDIA driver (and, if the CUDA
# toolkit is not installed there, cuBLAS/NCCL/cudart in Python packages' nvidia/*/lib
# folders or anywhere LD_LIBRARY_PATH points). Runs in under 8 minutes.
#
# Checks: every CUDA backend operation against the CPU backend (1e-6, TF32 off);
# 1 rank GPU vs CPU after 50 steps (1e-5); mpirun -np 2 --device=cuda --backend=mpi
# sharing one GPU vs the CPU; -np 1 --backend=nccl; dp on every visible GPU; then the
# ToyModel's microseconds per step and --layers=4096x5 --batch-size=1024 samples/s and
# TFLOP/s against a cuBLAS SGEMM of the same shape timed here.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
G=.gpucheck

if [ "${1:-}" = "--prepare" ]; then
	set -e
	for f in src/ddptrain src/ddptrain-cuda.so tests/opcheck tests/stcompare; do
		[ -x "$f" ] || { echo "gpu-check: build $f first (./configure && make && make tests/opcheck tests/stcompare)" >&2; exit 1; }
	done
	mkdir -p "$G/debs"
	pkgs="openmpi-bin openmpi-common libopenmpi3 libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7
	      libpmix2 libfabric1 libucx0 libibverbs1 librdmacm1 libpsm-infinipath1 libpsm2-2 libnl-3-200
	      libnl-route-3-200 libxnvctrl0 libmunge2 libnuma1 libltdl7 libudev1
	      libopenblas0-pthread libgfortran5 libquadmath0 libjansson4"
	# Plus whatever else the binaries link (dpkg -S of each library ldd resolves).
	for f in src/ddptrain tests/opcheck tests/stcompare; do
		ldd "$f" | awk '$3 ~ /^\// { print $3 }'
	done | xargs -r -n1 readlink -f | xargs -r -n1 dpkg -S 2>/dev/null | cut -d: -f1 |
		grep -Ev '^(libc6|libgcc-s1|libstdc\+\+6|libzstd1|zlib1g)$' >"$G/extra" || true
	(cd "$G/debs" && apt-get download $pkgs $(sort -u ../extra))
	du -sh "$G/debs"
	echo "gpu-check: prepared; carry src/ddptrain src/ddptrain-cuda.so tests/opcheck tests/stcompare $G"
	exit 0
fi

t_start=$SECONDS
rows=()
fails=0
row() { rows+=("$(printf '%-44s %-8s %s' "$1" "$2" "$3")"); [ "$2" != FAIL ] || fails=$((fails + 1)); }

# ---- environment: a private Open MPI / OpenBLAS / jansson prefix ----------------------
P=$PWD/$G/prefix
if [ -d "$G/debs" ] && [ ! -d "$P/usr" ]; then
	mkdir -p "$P"
	for d in "$G"/debs/*.deb; do
		if command -v dpkg >/dev/null; then dpkg -x "$d" "$P"
		else (cd "$P" && ar x "$OLDPWD/$d" data.tar.xz && tar -xf data.tar.xz && rm -f data.tar.xz); fi
	done
fi
if [ -d "$P/usr" ]; then
	export PATH=$P/usr/bin:$PATH OPAL_PREFIX=$P/usr
	export LD_LIBRARY_PATH=$P/usr/lib/x86_64-linux-gnu:$P/lib/x86_64-linux-gnu:$P/usr/lib/x86_64-linux-gnu/openmpi/lib:$P/usr/lib/x86_64-linux-gnu/openblas-pthread:${LD_LIBRARY_PATH:-}
fi
# cuBLAS / NCCL / cudart inside Python packages (nvidia-*-cu12/13 wheels)?
for d in $(find / -maxdepth 8 -type d -path '*site-packages/nvidia/*/lib' 2>/dev/null); do
	LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
done
export LD_LIBRARY_PATH
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_plm_rsh_agent=/bin/false OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export DDPTRAIN_CUDA_MODULE=$PWD/src/ddptrain-cuda.so
MPIRUN=$(command -v mpirun.openmpi || command -v mpirun || true)
D=src/ddptrain
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

echo "# gpu-check on $(hostname): $(nvidia-smi -L 2>/dev/null | head -4 | tr '\n' ';')"
if [ -z "$MPIRUN" ]; then echo "gpu-check: no mpirun (run --prepare on a build machine and copy $G)" >&2; exit 1; fi
if missing=$(ldd "$D" src/ddptrain-cuda.so | grep 'not found'); then
	echo "gpu-check: unresolved libraries:"; echo "$missing"; exit 1
fi
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "$NGPU" -gt 0 ] || NGPU=1

mpi() { local np=$1; shift; timeout -k 5 180 "$MPIRUN" --oversubscribe -np "$np" "$D" "$@"; }
cmp_row() { # NAME A B
	local out
	if out=$(tests/stcompare "$2" "$3" 1e-5 2>&1); then row "$1" ok "${out#stcompare: }"
	else row "$1" FAIL "${out#stcompare: }"; fi
}

# 1. operations
if out=$(timeout 120 tests/opcheck 2>&1); then
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
timeout 180 "$D" --mode=dp --replicas="$NGPU" --device=cpu $c --save="$TMP/dpcpu.st" &&
	timeout 180 "$D" --mode=dp --replicas="$NGPU" --device=cuda $c --save="$TMP/dpgpu.st" &&
	cmp_row "dp on $NGPU GPU(s) vs CPU dp" "$TMP/dpgpu.st" "$TMP/dpcpu.st" || row "dp on $NGPU GPU(s) vs CPU dp" FAIL "run failed"

# 6. speed
summary() { sed -n 's/.*'"$1"'=\([0-9.]*\).*/\1/p' "$2" | tail -1; }
if mpi 1 --device=cuda --max-steps=20000 --samples=400000 --log-every=0 >"$TMP/toy.out"; then
	row "ToyModel, 1 rank, us per step" ok "$(awk -v m="$(summary ms_per_step "$TMP/toy.out")" 'BEGIN { printf "%.1f us", 1000 * m }')"
else
	row "ToyModel, 1 rank, us per step" FAIL "run failed"
fi
W="--layers=4096,4096,4096,4096,4096 --batch-size=1024"
if mpi 1 --device=cuda $W --samples=61440 --epochs=1 --log-every=0 >"$TMP/wide.out"; then
	ms=$(summary ms_per_step "$TMP/wide.out")
	sps=$(summary samples_per_s "$TMP/wide.out")
	peak=$(timeout 60 tests/opcheck --sgemm 4096 1024 4096 2>/dev/null || echo 0)
	# 4 layers x 3 GEMMs (forward, weight grad, input grad; the first layer skips the input grad)
	flops=$(awk 'BEGIN { print 2 * 1024 * 4096 * 4096 * (4 * 3 - 1) }')
	tf=$(awk -v f="$flops" -v ms="$ms" 'BEGIN { printf "%.2f", f / (ms * 1e-3) / 1e12 }')
	row "4096x5 batch 1024, 1 rank" ok "$(printf '%.0f samples/s, %s TFLOP/s = %.0f%% of SGEMM %s' "$sps" "$tf" "$(awk -v a="$tf" -v b="$peak" 'BEGIN { print b > 0 ? 100 * a / b : 0 }')" "$peak")"
else
	row "4096x5 batch 1024, 1 rank" FAIL "run failed"
fi

echo
echo "# opcheck detail:"
sed 's/^/#   /' "$TMP/opcheck.txt"
echo "# $(head -3 "$TMP/toy.out" 2>/dev/null | grep GPU || true)"
echo
printf '%-44s %-8s %s\n' "check" "result" "figures"
printf '%s\n' "${rows[@]}"
echo "# $((${#rows[@]} - fails)) passed, $fails failed, in $((SECONDS - t_start)) s"
[ "$fails" -eq 0 ]
