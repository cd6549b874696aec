#!/bin/bash
# bench.sh - issue #6's benchmark: ddptrain's speed and footprint in one table,
# against PyTorch DDP, a one-thread SGEMM ceiling and a bare MPI job.
#
#   scripts/bench.sh [--reps N] [--quick | --smoke] [--no-torch] [--json FILE]
#
# Rows: the ToyModel's microseconds per step at 1, 2 and 4 ranks, overlap on
# and --no-overlap; the wide MLP (1024 x 4 layers, batch 128) in samples/s at 1
# and 2 ranks, its weak-scaling efficiency and GFLOP/s per rank against the
# SGEMM ceiling (bench/sgemm_ceiling); ddp against --mode=dp at 2 replicas;
# --trace's cost (ToyModel and wide MLP at 2 ranks, every step recorded: the
# step time it adds to the same run untraced); issue 35's --check-replicas cost (the
# ToyModel at 2 ranks with a check every 100 steps, and the wide MLP's with a check every
# step, each against the same run with none; the latter divided by 100: a check every 100
# steps as a share of the step, the issue's bound 1%); the seed job (mpirun -np 2 ddptrain --max-steps=1): wall time and peak RSS
# per rank against bench/mpi_floor launched the same way, and its wall time with
# DDPTRAIN_ALLREDUCE=mpi and =shm. Issue 29's rows: the
# synthetic --layers=4096,1,4096 --batch-size=1024 step on the CPU (its data made by
# the loader's threads; target: 0.2x the 2026-12-04 step, SYNTH_BEFORE_MS, 49 ms; bound
# to one core as mpirun binds it, and unbound, the loader's threads on the other core), the same
# shapes fed from .npy files (zeros, written here), and each one's wait for its data
# (the per-rank table's data_wait column). Issue 22's rows,
# where this ddptrain has --zero: the state per rank of
# --layers=1024,4096,4096,10 --optimizer=adamw at 2 and 4 ranks with --zero=1
# and --zero=2 against plain ddp (optimizer state, gradients, the whole state;
# the per-rank table's columns found by their header names), and the wide MLP's
# step at 2 ranks with --zero=1 and --zero=2 against plain ddp, the fastest of
# the three against the SGEMM ceiling. Issue 35's, where it has --zero=3: the
# big model's kept state per rank (parameters, gradients, optimizer state) at 4
# ranks against ddp's (target 0.25x) and its working set, and the wide MLP's step
# at 2 ranks against --zero=2's (target 1.15x). With PyTorch
# (TORCH_PYTHON imports torch), each row also runs in PyTorch DDP (gloo,
# scripts/torch_ddp_bench.py) and shows how many times better ddptrain does.
#
# Each figure is the median of N runs (default 5; --quick 3); the runs go in
# rounds, every configuration once per round, after a warm-up round, so load
# that comes and goes hits every row alike. Step times and samples/s are the
# programs' own (their summary line, start-up excluded); the seed job's wall
# time is the whole mpirun. --quick: fewer steps; --smoke: 1 run, no warm-up,
# a few steps, only for checking that the table comes out whole. --json FILE:
# the same rows (and every run's figure) as JSON. The script builds nothing.
#
# Environment: DDPTRAIN (default: the build tree's, else ddptrain on PATH),
# SGEMM_CEILING and MPI_FLOOR (default: the build tree's bench/), MPIRUN
# (default mpirun; may carry options), TORCH_PYTHON (default /usr/bin/python3).
set -euo pipefail
export LC_ALL=C

me=bench.sh
usage() {
	sed -n '2,30s/^# \{0,1\}//p' "$0"
	exit "${1:-0}"
}
die() {
	echo "$me: $*" >&2
	exit 1
}

reps=
mode=full
torch=auto
json=
while [ $# -gt 0 ]; do
	case $1 in
	--reps) [ $# -ge 2 ] || usage 2; reps=$2; shift 2 ;;
	--reps=*) reps=${1#*=}; shift ;;
	--quick) mode=quick; shift ;;
	--smoke) mode=smoke; shift ;;
	--no-torch) torch=no; shift ;;
	--json) [ $# -ge 2 ] || usage 2; json=$2; shift 2 ;;
	--json=*) json=${1#*=}; shift ;;
	-h | --help) usage 0 ;;
	*) echo "$me: unknown option '$1' (see --help)" >&2; exit 2 ;;
	esac
done
case $reps in
'') case $mode in full) reps=5 ;; quick) reps=3 ;; smoke) reps=1 ;; esac ;;
*[!0-9]* | 0*) echo "$me: --reps: '$reps' is not a positive integer" >&2; exit 2 ;;
esac
if [ -n "$json" ]; then
	[ -d "$(dirname -- "$json")" ] || { echo "$me: --json: no directory for '$json'" >&2; exit 2; }
fi

# Step counts: long enough that the first steps' page faults fade (full), or
# just enough to print every row (smoke). Torch: timed steps / warm-up steps.
case $mode in
full)
	toy_steps=(20000 20000 5000) wide_steps=30 sgemm_reps=10 warm=1 synth_steps=30
	torch_toy=("1000 50" "300 20" "100 10") torch_wide="10 2" ;;
quick)
	toy_steps=(5000 5000 1000) wide_steps=10 sgemm_reps=5 warm=1 synth_steps=10
	torch_toy=("300 20" "100 10" "30 5") torch_wide="4 1" ;;
smoke)
	toy_steps=(100 100 50) wide_steps=2 sgemm_reps=1 warm=0 synth_steps=2
	torch_toy=("5 1" "5 1" "5 1") torch_wide="1 0" ;;
esac
TOY=(--layers=10,10,5 --batch-size=20 --samples=4000 --epochs=100000)
WIDE_LAYERS=1024,1024,1024,1024,1024
WIDE_BATCH=128
WIDE=(--layers=$WIDE_LAYERS --batch-size=$WIDE_BATCH --samples=4096 --epochs=100000)
# issue 22's memory model: 21 million parameters, AdamW's two moments; a few steps suffice
BIG=(--layers=1024,4096,4096,10 --optimizer=adamw --batch-size=32 --samples=1024 --epochs=100000)
# issue 29: a wide step that is mostly data; before the loader's threads and the wide
# generator it took SYNTH_BEFORE_MS on the build machine (2 cores, shared; ddptrain
# d9594f3 on 2026-12-04, 30 steps, the median of 10 runs at load 2.4-3.4: 49 ms; 116 at
# load 10; the issue reported 74-113)
SYNTH=(--device=cpu --layers=4096,1,4096 --batch-size=1024 --samples=4000 --epochs=100000)
SYNTH_BEFORE_MS=${SYNTH_BEFORE_MS:-49}
BUCKET_MIB=25 # ddptrain's default --bucket-mb: --zero=2's two bucket buffers hold at most this each, beyond its 1/N of the gradients

# ---- the programs --------------------------------------------------------------
here=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "${DDPTRAIN:-}" ]; then
	if [ -x "$here/src/ddptrain" ]; then DDPTRAIN=$here/src/ddptrain; else DDPTRAIN=$(command -v ddptrain || true); fi
fi
[ -n "$DDPTRAIN" ] && [ -x "$DDPTRAIN" ] || die "no ddptrain (build it, or set DDPTRAIN)"
: "${SGEMM_CEILING:=$here/bench/sgemm_ceiling}"
: "${MPI_FLOOR:=$here/bench/mpi_floor}"
[ -x "$SGEMM_CEILING" ] || { echo "$me: no $SGEMM_CEILING (make; or set SGEMM_CEILING): no SGEMM ceiling" >&2; SGEMM_CEILING=; }
[ -x "$MPI_FLOOR" ] || { echo "$me: no $MPI_FLOOR (make; or set MPI_FLOOR): no MPI floor" >&2; MPI_FLOOR=; }
MPIRUN=${MPIRUN:-mpirun}
TORCH_PYTHON=${TORCH_PYTHON:-/usr/bin/python3}
TORCH_SCRIPT=$here/scripts/torch_ddp_bench.py
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
# issue 22's and issue 35's rows only where this ddptrain has the flags
zero=no zero3=no
if "$DDPTRAIN" --help 2>&1 | grep -q -- --zero; then zero=yes; fi
if "$DDPTRAIN" --help 2>&1 | grep -q -- '--zero=[0-9|]*3'; then zero3=yes; fi
check=no
if "$DDPTRAIN" --help 2>&1 | grep -q -- --check-replicas; then check=yes; fi
torch_version=
no_torch="--no-torch"
if [ "$torch" = auto ]; then
	if torch_version=$("$TORCH_PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null) &&
		[ -r "$TORCH_SCRIPT" ]; then torch=yes; else torch=no no_torch="$TORCH_PYTHON cannot import torch"; fi
fi
timecmd=/usr/bin/time
[ -x "$timecmd" ] || { echo "$me: no $timecmd (Debian: apt-get install time): no peak RSS" >&2; timecmd=; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# Each rank of a whole-job run under GNU time, its peak RSS (KiB) in $RSS_PREFIX.RANK.
cat >"$tmp/rss" <<'EOF'
#!/bin/sh
exec /usr/bin/time -f %M -o "$RSS_PREFIX.${OMPI_COMM_WORLD_RANK:-0}" "$@"
EOF
chmod +x "$tmp/rss"

# npy_zeros FILE ROWS COLS: a float32 .npy file of zeros (version 1.0 header, sparse data)
npy_zeros() {
	local dict="{'descr': '<f4', 'fortran_order': False, 'shape': ($2, $3), }" pad len
	pad=$(((64 - (10 + ${#dict} + 1) % 64) % 64))
	len=$((${#dict} + pad + 1))
	{
		printf '\223NUMPY\001\000'
		printf "\\$(printf %03o $((len % 256)))\\$(printf %03o $((len / 256)))"
		printf '%s%*s\n' "$dict" "$pad" ''
	} >"$1"
	truncate -s $((10 + len + $2 * $3 * 4)) "$1"
}
npy_zeros "$tmp/x4096.npy" 4096 4096
npy_zeros "$tmp/y4096.npy" 4096 4096

# ---- runners: each leaves one run's report in OUT -----------------------------
# mpirun options for NP ranks: --oversubscribe beyond the cores
np_flags() {
	[ "$1" -le "$(nproc)" ] || echo --oversubscribe
}

# a TCP port free now on the loopback, for torch's rendezvous
free_port() {
	"$TORCH_PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# run_ddp OUT NP ARGS...: ddptrain on NP ranks (BIND: more mpirun flags)
run_ddp() {
	local out=$1 np=$2
	shift 2
	$MPIRUN $(np_flags "$np") ${BIND:-} -np "$np" "$DDPTRAIN" --log-every=0 "$@" >"$out" 2>"$out.err"
}

# run_ddp_unbound OUT NP ARGS...: run_ddp with mpirun's binding off, so the loader's
# threads have the machine's other cores (mpirun binds a rank to one core at np <= 2)
run_ddp_unbound() { BIND="--bind-to none" run_ddp "$@"; }

# run_dp OUT G ARGS...: ddptrain --mode=dp with G replicas
run_dp() {
	local out=$1 g=$2
	shift 2
	"$DDPTRAIN" --mode=dp --replicas="$g" --log-every=0 "$@" >"$out" 2>"$out.err"
}

# run_torch OUT NP ARGS...: torch_ddp_bench.py on NP ranks
run_torch() {
	local out=$1 np=$2
	shift 2
	$MPIRUN $(np_flags "$np") -np "$np" -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT="$(free_port)" \
		"$TORCH_PYTHON" "$TORCH_SCRIPT" "$@" >"$out" 2>"$out.err"
}

# run_job OUT COMMAND...: the whole job on 2 ranks, as a user starts it: wall seconds in
# OUT.wall, each rank's peak RSS (KiB) in OUT.rss.RANK
run_job() {
	local out=$1 t0 t1 opts=() wrap=()
	shift
	[ -z "$timecmd" ] || wrap=("$tmp/rss")
	[ "$1" != torch ] || { shift; opts=(-x MASTER_ADDR=127.0.0.1 -x MASTER_PORT="$(free_port)"); }
	t0=$EPOCHREALTIME
	RSS_PREFIX=$out.rss $MPIRUN $(np_flags 2) -np 2 -x RSS_PREFIX "${opts[@]}" "${wrap[@]}" "$@" >"$out" 2>"$out.err" ||
		return 1
	t1=$EPOCHREALTIME
	awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f\n", b - a }' >"$out.wall"
}
job_torch() {
	local out=$1
	shift
	run_job "$out" torch "$@"
}

# run_sgemm OUT: the SGEMM ceiling of the wide MLP's step
run_sgemm() {
	"$SGEMM_CEILING" --layers="$WIDE_LAYERS" --batch-size="$WIDE_BATCH" --reps="$sgemm_reps" >"$1" 2>"$1.err"
}

# ---- the configurations, run in rounds -----------------------------------------
configs=()
declare -A cmd
# config NAME RUNNER ARGS...: one configuration, its runs in $tmp/NAME.ROUND
config() {
	local name=$1
	shift
	configs+=("$name")
	cmd[$name]=$(printf '%q ' "$@")
}
for i in 0 1 2; do
	np=$((1 << i))
	config "toy.np$np" run_ddp "$np" "${TOY[@]}" --max-steps="${toy_steps[i]}"
	config "toy.np$np.noov" run_ddp "$np" "${TOY[@]}" --max-steps="${toy_steps[i]}" --no-overlap
done
config toy.dp2 run_dp 2 "${TOY[@]}" --max-steps="${toy_steps[1]}"
config wide.np1 run_ddp 1 "${WIDE[@]}" --max-steps="$wide_steps"
config wide.np2 run_ddp 2 "${WIDE[@]}" --max-steps="$wide_steps"
config wide.dp2 run_dp 2 "${WIDE[@]}" --max-steps="$wide_steps"
# --trace's cost: the same runs recording every step (the file goes to the scratch directory)
config toy.np2.trace run_ddp 2 "${TOY[@]}" --max-steps="${toy_steps[1]}" --trace="$tmp/toy.trace.json"
config wide.np2.trace run_ddp 2 "${WIDE[@]}" --max-steps="$wide_steps" --trace="$tmp/wide.trace.json"
# --check-replicas' cost: each against the same run without a check
if [ "$check" = yes ]; then
	config toy.np2.check0 run_ddp 2 "${TOY[@]}" --max-steps="${toy_steps[1]}" --check-replicas=0
	config toy.np2.check100 run_ddp 2 "${TOY[@]}" --max-steps="${toy_steps[1]}" --check-replicas=100
	config wide.np2.check0 run_ddp 2 "${WIDE[@]}" --max-steps="$wide_steps" --check-replicas=0
	config wide.np2.check1 run_ddp 2 "${WIDE[@]}" --max-steps="$wide_steps" --check-replicas=1
fi
if [ "$zero" = yes ]; then
	for np in 2 4; do
		config "big.np$np" run_ddp "$np" "${BIG[@]}" --max-steps=2
		config "big.np$np.zero1" run_ddp "$np" "${BIG[@]}" --max-steps=2 --zero=1
		config "big.np$np.zero2" run_ddp "$np" "${BIG[@]}" --max-steps=2 --zero=2
	done
	config wide.np2.zero1 run_ddp 2 "${WIDE[@]}" --max-steps="$wide_steps" --zero=1
	config wide.np2.zero2 run_ddp 2 "${WIDE[@]}" --max-steps="$wide_steps" --zero=2
	if [ "$zero3" = yes ]; then
		config big.np4.zero3 run_ddp 4 "${BIG[@]}" --max-steps=2 --zero=3
		config wide.np2.zero3 run_ddp 2 "${WIDE[@]}" --max-steps="$wide_steps" --zero=3
	fi
fi
config synth.np1 run_ddp 1 "${SYNTH[@]}" --max-steps="$synth_steps"
config npy.np1 run_ddp 1 "${SYNTH[@]}" --inputs="$tmp/x4096.npy" --targets="$tmp/y4096.npy" --max-steps="$synth_steps"
config synth.np1.unbound run_ddp_unbound 1 "${SYNTH[@]}" --max-steps="$synth_steps"
config npy.np1.unbound run_ddp_unbound 1 "${SYNTH[@]}" --inputs="$tmp/x4096.npy" --targets="$tmp/y4096.npy" --max-steps="$synth_steps"
config job run_job "$DDPTRAIN" --max-steps=1
# the same job with each node-local all-reduce named (auto picks shm on one node): the
# shared-memory window's set-up is in the start-up (issue 30: 0.21 s of it was MPI_T)
config job.mpi run_job env DDPTRAIN_ALLREDUCE=mpi "$DDPTRAIN" --max-steps=1
config job.shm run_job env DDPTRAIN_ALLREDUCE=shm "$DDPTRAIN" --max-steps=1
[ -z "$MPI_FLOOR" ] || config floor run_job "$MPI_FLOOR"
[ -z "$SGEMM_CEILING" ] || config sgemm run_sgemm
if [ "$torch" = yes ]; then
	for i in 0 1 2; do
		np=$((1 << i))
		read -r s w <<<"${torch_toy[i]}"
		config "torch.toy.np$np" run_torch "$np" --layers=10,10,5 --batch-size=20 --steps="$s" --warmup="$w"
	done
	read -r s w <<<"$torch_wide"
	config torch.wide.np1 run_torch 1 --layers="$WIDE_LAYERS" --batch-size="$WIDE_BATCH" --steps="$s" --warmup="$w"
	config torch.wide.np2 run_torch 2 --layers="$WIDE_LAYERS" --batch-size="$WIDE_BATCH" --steps="$s" --warmup="$w"
	config torch.job job_torch "$TORCH_PYTHON" "$TORCH_SCRIPT" --steps=1 --warmup=0
fi

# first_error FILE: a failed run's own last words before mpirun's banner, else the banner's first
first_error() {
	awk '/^-----/ { if (l != "") exit; banner = 1; next } NF { l = $0; if (banner) exit } END { print l }' "$1"
}

# run_config NAME ROUND: one run, tried twice. A ddptrain configuration that fails twice
# stops the bench; a PyTorch one loses that run, and after two lost runs it is left out
# (NAME.failed), its rows without PyTorch.
run_config() {
	local name=$1 out=$tmp/$1.$2 runner
	eval "set -- ${cmd[$name]}"
	runner=$1
	shift
	"$runner" "$out" "$@" || "$runner" "$out" "$@" && return 0
	case $name in
	torch.*)
		echo "$me: $name failed twice: $(first_error "$out.err")" >&2
		mv "$out" "$out.lost"
		[ "$(ls "$tmp/$name".*.lost | wc -l)" -lt 2 ] || : >"$tmp/$name.failed" ;;
	*) die "$name failed: $(first_error "$out.err")" ;;
	esac
}

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
started=$SECONDS
for ((round = 1 - warm; round <= reps; round++)); do
	if [ "$round" -eq 0 ]; then
		echo "$me: warm-up round (${#configs[@]} configurations)" >&2
	else
		echo "$me: round $round/$reps ($((SECONDS - started)) s so far)" >&2
	fi
	for name in "${configs[@]}"; do
		[ ! -e "$tmp/$name.failed" ] || continue
		# torch's page cache warms once, on the first configuration; its rows warm up in-process
		if [ "$round" -eq 0 ] && [ "${name#torch.}" != "$name" ] && [ "$name" != torch.toy.np1 ]; then continue; fi
		run_config "$name" "$round"
	done
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- the figures -------------------------------------------------------------
# vals NAME KEY: one value per timed run: a summary field, "wall" (s), "rss" (the largest
# rank's peak, MiB) or rank_compute / rank_wait / rank_step (ms, mean over the ranks)
vals() {
	local name=$1 key=$2 r f
	for ((r = 1; r <= reps; r++)); do
		f=$tmp/$name.$r
		[ -e "$f" ] || continue
		case $key in
		wall) cat "$f.wall" ;;
		rss) cat "$f".rss.* 2>/dev/null | awk 'NF { k = $1 > k ? $1 : k } END { if (k) printf "%.3f\n", k / 1024 }' ;;
		rank_*)
			# the ddp per-rank table, its columns found by their header names
			awk -v col="${key#rank_}" '
				/^# +rank +compute / { k = 0; for (i = 2; i <= NF; i++) if ($i == (col == "wait" ? "ar_wait" : col)) k = i; next }
				k && /^# +[0-9]+ / { s += $k; n++; next }
				{ k = 0 }
				END { if (n) printf "%.6f\n", s / n }' "$f" ;;
		col_*)
			# the largest over the ranks of the per-rank column whose name starts with
			# param, grad, opt, work or state (the ddp per-rank table, or the memory table
			# under it); col_whole: the state column, else the parts; col_kept: params,
			# grads and opt (what a rank keeps, without the working set); col_gradwork:
			# grads and work
			awk -v want="${key#col_}" '
				/^# +rank +[a-z]/ { k = 0; np = 0
					for (i = 2; i <= NF; i++) { h = tolower($i)
						if (want !~ /^(whole|kept|gradwork)$/ && index(h, want) == 1) k = i
						if (want == "whole" && index(h, "state") == 1) k = i
						if (want == "whole" && h ~ /^(param|grad|opt|work)/) part[++np] = i
						if (want == "kept" && h ~ /^(param|grad|opt)/) part[++np] = i
						if (want == "gradwork" && h ~ /^(grad|work)/) part[++np] = i }
					if (want != "whole" && np > 0) k = -1
					if (want == "whole" && !k && np >= 3) k = -1
					next }
				k && /^# +[0-9]+ / { v = 0; if (k > 0) v = $k; else for (j = 1; j <= np; j++) v += $(part[j])
					if (!n || v > m) m = v; n++; next }
				{ k = 0 }
				END { if (n) printf "%.6f\n", m }' "$f" ;;
		*) awk -v key="$key" '/^# summary:/ {
				for (i = 3; i <= NF; i++) { split($i, kv, "="); if (kv[1] == key) print kv[2] } }' "$f" ;;
		esac
	done
}

# median: of the numbers on stdin ("" when there are none)
median() {
	sort -g | awk 'NF { v[++n] = $1 } END { if (n) printf "%.10g\n", n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }'
}

# scaled NAME KEY FACTOR: vals times FACTOR (FACTOR/x when FACTOR starts with "/")
scaled() {
	vals "$1" "$2" | awk -v f="$3" 'NF { printf "%.10g\n", substr(f, 1, 1) == "/" ? substr(f, 2) / $1 : $1 * f }'
}

# stat NAME KEY FACTOR: "MEDIAN<TAB>v1,v2,..." (scaled as above; empty when there are no runs)
stat() {
	local v
	v=$(scaled "$@")
	printf '%s\t%s' "$(median <<<"$v")" "$(paste -sd, <<<"$v")"
}

# per_round NAME1 NAME2 KEY FACTOR: like stat, of FACTOR * NAME1 / NAME2 within each round
per_round() {
	local v
	v=$(paste <(vals "$1" "$3") <(vals "$2" "$3") | awk -v f="$4" 'NF == 2 && $2 != 0 { printf "%.10g\n", f * $1 / $2 }')
	printf '%s\t%s' "$(median <<<"$v")" "$(paste -sd, <<<"$v")"
}

# FLOPs of one rank's step: forward and weight gradients 2*B*in*out per layer,
# input gradients the same but for the first layer
wide_flops=$(awk -v l="$WIDE_LAYERS" -v b="$WIDE_BATCH" 'BEGIN {
	n = split(l, w, ","); for (i = 1; i < n; i++) f += (i == 1 ? 2 : 3) * 2 * b * w[i] * w[i + 1]; printf "%.0f\n", f }')
gflop=$(awk -v f="$wide_flops" 'BEGIN { printf "%.10g", f / 1e6 }') # GFLOP/s = gflop / (ms per step)

ceiling=$(vals sgemm ceiling_gflops | median)
# a derived figure of two medians ("" unless both are there)
ratio() {
	awk -v a="$1" -v b="$2" -v f="${3:-1}" 'BEGIN { if (a != "" && b != "" && b + 0 != 0) printf "%.10g", f * a / b }'
}

# row ID WHAT UNIT BETTER VALUE<TAB>RUNS AGAINST AGAINST_VALUE AGAINST_KIND TORCH<TAB>RUNS TARGET_KIND
#     TARGET_ARG TARGET_REF TARGET_TEXT: one line of $tmp/rows (tab-separated, see the formatter)
row() {
	printf '%s\t' "$@" >>"$tmp/rows"
	printf '\n' >>"$tmp/rows"
}
: >"$tmp/rows"
t() { [ "$torch" = yes ] && stat "$@" || printf '\t'; }
for np in 1 2 4; do
	case $np in 2) tk=torchx ta=100 tr=2050 tt=">=100x PyTorch" ;; *) tk=- ta= tr= tt= ;; esac
	ranks="$np ranks"; [ "$np" -gt 1 ] || ranks="1 rank"
	over=; [ "$np" -le "$(nproc)" ] || over=", oversubscribed"
	row "toy.np$np" "ToyModel, $ranks$over" us/step low "$(stat toy.np$np ms_per_step 1000)" \
		- "" - "$(t torch.toy.np$np ms_per_step 1000)" "$tk" "$ta" "$tr" "$tt"
	row "toy.np$np.noov" "ToyModel, $ranks, --no-overlap" us/step low "$(stat toy.np$np.noov ms_per_step 1000)" \
		overlap "$(vals toy.np$np ms_per_step | median | awk 'NF { print $1 * 1000 }')" x "$(printf '\t')" - "" "" ""
done
row wide.np1 "wide MLP, 1 rank" samples/s high "$(stat wide.np1 samples_per_s 1)" \
	- "" - "$(t torch.wide.np1 samples_per_s 1)" - "" "" ""
row wide.np2 "wide MLP, 2 ranks" samples/s high "$(stat wide.np2 samples_per_s 1)" \
	- "" - "$(t torch.wide.np2 samples_per_s 1)" torchx 2 4400 ">=2x PyTorch"
row wide.weak "wide MLP, weak scaling 1 -> 2 ranks" % high "$(per_round wide.np2 wide.np1 samples_per_s 50)" \
	- "" - "$(per_round torch.wide.np2 torch.wide.np1 samples_per_s 50)" min 90 "" ">=90%"
row wide.gflops.np1 "wide MLP, GFLOP/s per rank, 1 rank" GFLOP/s high "$(stat wide.np1 ms_per_step "/$gflop")" \
	"SGEMM" "$ceiling" pct "$(t torch.wide.np1 ms_per_step "/$gflop")" pct 85 "" ">=85% of SGEMM"
row wide.gflops.np2 "wide MLP, GFLOP/s per rank, 2 ranks" GFLOP/s high "$(stat wide.np2 ms_per_step "/$gflop")" \
	"SGEMM" "$ceiling" pct "$(t torch.wide.np2 ms_per_step "/$gflop")" pct 85 "" ">=85% of SGEMM"
row wide.compute.np2 "  the same, compute only (no AR wait)" GFLOP/s high "$(stat wide.np2 rank_compute "/$gflop")" \
	"SGEMM" "$ceiling" pct "$(printf '\t')" pct 85 "" ">=85% of SGEMM"
row toy.dp2 "ToyModel, 2 replicas: ddp vs dp" samples/s high "$(stat toy.np2 samples_per_s 1)" \
	dp "$(vals toy.dp2 samples_per_s | median)" x "$(printf '\t')" - "" "" ""
row wide.dp2 "wide MLP, 2 replicas: ddp vs dp" samples/s high "$(stat wide.np2 samples_per_s 1)" \
	dp "$(vals wide.dp2 samples_per_s | median)" x "$(printf '\t')" x 1 "" "ddp faster than dp"
row toy.np2.trace "ToyModel, 2 ranks, --trace on" us/step low "$(stat toy.np2.trace ms_per_step 1000)" \
	"trace off" "$(vals toy.np2 ms_per_step | median | awk 'NF { print $1 * 1000 }')" over "$(printf '\t')" - "" "" ""
row wide.np2.trace "wide MLP, 2 ranks, --trace on" samples/s high "$(stat wide.np2.trace samples_per_s 1)" \
	"trace off" "$(vals wide.np2 samples_per_s | median)" over "$(printf '\t')" - "" "" ""
if [ "$check" = yes ]; then
	row check.toy "ToyModel, 2 ranks, a check every 100" us/step low "$(stat toy.np2.check100 ms_per_step 1000)" \
		"check off" "$(vals toy.np2.check0 ms_per_step | median | awk 'NF { print $1 * 1000 }')" over \
		"$(printf '\t')" over 1 "" "<=+1% of a step"
	row check.wide1 "wide MLP, 2 ranks, a check every step" ms/step low "$(stat wide.np2.check1 ms_per_step 1)" \
		"check off" "$(vals wide.np2.check0 ms_per_step | median)" over "$(printf '\t')" - "" "" ""
	# a check every 100 steps as a share of the step: (check1 / check0 - 1) / 100 in %, per round
	row check.wide100 "  every 100 steps: share of a step" % low \
		"$(per_round wide.np2.check1 wide.np2.check0 ms_per_step 1 | awk -F'\t' '{ n = split($2, v, ","); o = ""
			for (i = 1; i <= n; i++) o = o (i > 1 ? "," : "") sprintf("%.10g", v[i] - 1)
			printf "%s\t%s", $1 == "" ? "" : sprintf("%.10g", $1 - 1), o }')" \
		- "" - "$(printf '\t')" max 1 "" "<1% of a step"
fi
if [ "$zero" = yes ]; then
	for np in 2 4; do
		case $np in 2) ot=0.55 ;; 4) ot=0.3 ;; esac
		for z in 1 2; do
			row "big.opt.np$np.z$z" "AdamW state/rank, $np ranks, --zero=$z" MiB low \
				"$(stat big.np$np.zero$z col_opt 1)" ddp "$(vals big.np$np col_opt | median)" ratio \
				"$(printf '\t')" ratio "$ot" "" "<=${ot}x ddp"
			if [ "$np" = 2 ]; then wt=ratio wa=0.8 wx="<=0.8x ddp"; else wt=- wa= wx=; fi
			row "big.state.np$np.z$z" "  whole state/rank (params,grads,opt)" MiB low \
				"$(stat big.np$np.zero$z col_whole 1)" ddp "$(vals big.np$np col_whole | median)" ratio \
				"$(printf '\t')" "$wt" "$wa" "" "$wx"
		done
		# --zero=2: 1/N of the gradients plus its two bucket buffers (ddp's gradients as the
		# unit; the memory table shows the buffers as work)
		g=$(vals big.np$np col_grad | median)
		ga=$(awk -v n="$np" -v g="$g" -v b="$BUCKET_MIB" 'BEGIN { if (g > 0) printf "%.4f", 1 / n + 2 * b / g + 0.0001 }') # + the slots
		row "big.grad.np$np.z2" "  gradients and buffers per rank, --zero=2" MiB low "$(stat big.np$np.zero2 col_gradwork 1)" \
			ddp "$g" ratio "$(printf '\t')" ratio "$ga" "" "<=1/$np+2x${BUCKET_MIB}MiB (${ga}x)"
	done
	if [ "$zero3" = yes ]; then
		# --zero=3 at 4 ranks: parameters, gradients and optimizer state a quarter of ddp's,
		# the working set (two buffers of the gradients, two gathered layers) beside them
		row big.kept.np4.z3 "AdamW, 4 ranks, --zero=3: kept/rank" MiB low "$(stat big.np4.zero3 col_kept 1)" \
			ddp "$(vals big.np4 col_kept | median)" ratio "$(printf '\t')" ratio 0.2501 "" "<=0.25x ddp (+ the slots)"
		row big.work.np4.z3 "  its working set per rank" MiB low "$(stat big.np4.zero3 col_work 1)" \
			- "" - "$(printf '\t')" - "" "" ""
	fi
	for z in 1 2; do
		row "wide.np2.z$z" "wide MLP, 2 ranks, --zero=$z" ms/step low "$(stat wide.np2.zero$z ms_per_step 1)" \
			ddp "$(vals wide.np2 ms_per_step | median)" ratio "$(printf '\t')" ratio 1.05 "" "<=1.05x ddp"
	done
	[ "$zero3" = no ] ||
		row wide.np2.z3 "wide MLP, 2 ranks, --zero=3" ms/step low "$(stat wide.np2.zero3 ms_per_step 1)" \
			--zero=2 "$(vals wide.np2.zero2 ms_per_step | median)" ratio "$(printf '\t')" ratio 1.15 "" "<=1.15x --zero=2"
	# the fastest of ddp, --zero=1 and --zero=2 (by median step) against the SGEMM ceiling
	best=$(for n in wide.np2 wide.np2.zero1 wide.np2.zero2; do printf '%s %s\n' "$(vals $n ms_per_step | median)" "$n"; done |
		awk 'NF == 2 && (b == "" || $1 < b) { b = $1; n = $2 } END { print n }')
	row wide.best.gflops "  fastest of 3 (${best#wide.np2.}): GFLOP/s/rank" GFLOP/s high \
		"$(stat "${best:-wide.np2}" ms_per_step "/$gflop")" SGEMM "$ceiling" pct "$(printf '\t')" pct 90 "" ">=90% of SGEMM"
fi
st=$(awk -v b="$SYNTH_BEFORE_MS" 'BEGIN { printf "%.1f", 0.2 * b }')
row synth.np1 "synthetic 4096,1,4096 b1024 (cpu)" ms/step low "$(stat synth.np1 ms_per_step 1)" \
	".npy" "$(vals npy.np1 ms_per_step | median)" ratio "$(printf '\t')" max "$st" "" "<=$st (0.2x ${SYNTH_BEFORE_MS})"
row synth.unbound "  the same, mpirun --bind-to none" ms/step low "$(stat synth.np1.unbound ms_per_step 1)" \
	".npy" "$(vals npy.np1.unbound ms_per_step | median)" ratio "$(printf '\t')" max "$st" "" "<=$st (0.2x ${SYNTH_BEFORE_MS})"
row synth.wait "  its wait for data (first batch incl.)" ms/step low "$(stat synth.np1 rank_data_wait 1)" \
	- "" - "$(printf '\t')" - "" "" ""
row npy.wait "  the same from .npy files: data wait" ms/step low "$(stat npy.np1 rank_data_wait 1)" \
	- "" - "$(printf '\t')" - "" "" ""
row job.wall "seed job (np 2, 1 step): wall" s low "$(stat job wall 1)" \
	"MPI floor" "$(vals floor wall | median)" diff "$(t torch.job wall 1)" diff 0.1 "" "<=floor+0.1 s"
for a in mpi shm; do
	row "job.wall.$a" "  the same, DDPTRAIN_ALLREDUCE=$a" s low "$(stat job.$a wall 1)" \
		"MPI floor" "$(vals floor wall | median)" diff "$(printf '\t')" diff 0.1 "" "<=floor+0.1 s"
done
row job.rss "seed job: peak RSS, largest rank" MiB low "$(stat job rss 1)" \
	"MPI floor" "$(vals floor rss | median)" diff "$(t torch.job rss 1)" max 30 "" "<=30 MiB"

# ---- the table and the JSON ------------------------------------------------------
cpu=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)
sgemm_line=
if [ -n "$SGEMM_CEILING" ] && [ -n "$ceiling" ]; then
	sgemm_line=$(printf 'forward NT %.1f, weight-grad TN %.1f, input-grad NN %.1f GFLOP/s; FLOP-weighted ceiling %.1f' \
		"$(vals sgemm forward_gflops | median)" "$(vals sgemm wgrad_gflops | median)" \
		"$(vals sgemm igrad_gflops | median)" "$ceiling")
fi
wait2=$(ratio "$(vals wide.np2 rank_wait | median)" "$(vals wide.np2 rank_step | median)" 100)
toywait2=$(ratio "$(vals toy.np2 rank_wait | median)" "$(vals toy.np2 rank_step | median)" 100)

{
	echo "# bench: $("$DDPTRAIN" --version | head -n 1) ($DDPTRAIN), $(nproc) CPUs${cpu:+ ($cpu)}"
	echo "# median of $reps run(s)$([ "$warm" = 1 ] && echo " after a warm-up round"), in rounds; $mode step counts; load average $load_start at the start"
	if [ "$torch" = yes ]; then
		echo "# PyTorch $torch_version ($TORCH_PYTHON): DDP, gloo, 1 thread per rank, MSELoss, SGD lr 0.001, pre-generated batches"
	else
		echo "# PyTorch: not run ($no_torch); targets against PyTorch use the issue's figures"
	fi
	[ -z "$sgemm_line" ] || echo "# SGEMM, 1 thread, the wide MLP's products (M,N,K = 128,1024,1024 and 1024,1024,128): $sgemm_line"
	[ "$zero" = yes ] || echo "# issue 22's rows (--zero, state per rank): not run, this ddptrain has no --zero"
	echo "# issue #6, PyTorch 1.13 gloo on 2 ranks: ToyModel 2050 us/step (235 at 1 rank), wide MLP 4400 samples/s, 1-step job 2.0 s and 243 MiB per process"
} >"$tmp/head"
awk -F'\t' -v json="$json" -v headfile="$tmp/head" -v reps="$reps" -v mode="$mode" -v torch="$torch" \
	-v torchv="$torch_version" -v sgemm="$sgemm_line" -v wait2="$wait2" -v toywait2="$toywait2" \
	-v load0="$load_start" -v load1="$load_end" '
function fmt(v, unit) {
	if (v == "") return "-"
	if (unit == "us/step" || unit == "%" || unit == "GFLOP/s" || unit == "MiB") return sprintf("%.1f", v)
	if (unit == "s") return sprintf("%.3f", v)
	if (unit == "ms/step") return sprintf("%.2f", v)
	return sprintf("%.0f", v)
}
# how many times better a is than b
function better(a, b, dir) {
	if (a == "" || b == "" || a + 0 == 0 || b + 0 == 0) return ""
	return dir == "high" ? a / b : b / a
}
function times(x) { return x == "" ? "-" : sprintf(x < 10 ? "%.2fx" : "%.0fx", x) }
function jnum(v) { return v == "" ? "null" : sprintf("%.10g", v) }
function jstr(s) { gsub(/\\/, "\\\\", s); gsub(/"/, "\\\"", s); return "\"" s "\"" }
function jlist(s,   n, a, i, o) {
	n = split(s, a, ","); o = "["
	for (i = 1; i <= n; i++) o = o (i > 1 ? ", " : "") jnum(a[i])
	return o "]"
}
{
	id = $1; what = $2; unit = $3; dir = $4; v = $5; runs = $6
	an = $7; av = $8; ak = $9; tv = $10; truns = $11; tk = $12; ta = $13; tref = $14; ttext = $15
	# against: a yardstick in this run
	acmp = ""; atext = "-"
	if (an != "-" && v != "" && av != "") {
		if (ak == "x") { acmp = better(v, av, dir); atext = times(acmp) }
		else if (ak == "pct") { acmp = 100 * v / av; atext = sprintf("%.0f%%", acmp) }
		else if (ak == "diff") { acmp = v - av; atext = sprintf(unit == "s" ? "%+.3f" : "%+.1f", acmp) }
		else if (ak == "ratio") { acmp = v / av; atext = sprintf("%.2fx", acmp) }
		else if (ak == "over") { acmp = 100 * (dir == "low" ? v / av - 1 : av / v - 1); atext = sprintf("%+.1f%%", acmp) }
	}
	tx = better(v, tv, dir)
	# the target
	res = "-"
	if (tk != "-") {
		res = "n/a"
		if (tk == "torchx") {
			x = tx
			if (x == "" && tref != "") { x = better(v, tref, dir); ttext = ttext "*"; star = 1 }
			if (x != "") res = x >= ta ? "pass" : "miss"
		} else if (v != "") {
			if (tk == "min") res = v >= ta ? "pass" : "miss"
			else if (tk == "max") res = v <= ta ? "pass" : "miss"
			else if (acmp != "" && tk == "pct") res = acmp >= ta ? "pass" : "miss"
			else if (acmp != "" && tk == "diff") res = acmp <= ta ? "pass" : "miss"
			else if (acmp != "" && tk == "x") res = acmp > ta ? "pass" : "miss"
			else if (acmp != "" && tk == "ratio") res = acmp <= ta ? "pass" : "miss"
			else if (acmp != "" && tk == "over") res = acmp <= ta ? "pass" : "miss"
		}
	}
	n++
	line[n] = sprintf("  %-17s %-37s %-9s %10s  %-9s %9s %7s  %9s %7s  %-22s %s", id, what, unit, fmt(v, unit),
		an, fmt(av, unit), atext, fmt(tv, unit), times(tx), ttext == "" ? "-" : ttext, res)
	js[n] = sprintf("    {\"id\": %s, \"what\": %s, \"unit\": %s, \"better\": %s, \"ddptrain\": %s, \"runs\": %s,\n" \
		"     \"against\": %s, \"against_value\": %s, \"against_kind\": %s, \"against_result\": %s,\n" \
		"     \"pytorch\": %s, \"pytorch_runs\": %s, \"vs_pytorch\": %s, \"target\": %s, \"result\": %s}",
		jstr(id), jstr(what), jstr(unit), jstr(dir), jnum(v), jlist(runs),
		an == "-" ? "null" : jstr(an), jnum(av), ak == "-" ? "null" : jstr(ak), jnum(acmp),
		jnum(tv), jlist(truns), jnum(tx), ttext == "" ? "null" : jstr(ttext), tk == "-" ? "null" : jstr(res))
}
END {
	while ((getline h < headfile) > 0) print h
	printf "# %-17s %-37s %-9s %10s  %-9s %9s %7s  %9s %7s  %-22s %s\n", "row", "what", "unit", "ddptrain",
		"against", "value", "ddpt:it", "PyTorch", "ddpt:pt", "target", "result"
	for (i = 1; i <= n; i++) print line[i]
	print "# ddpt:it and ddpt:pt: how many times better ddptrain is (rates divided, times and sizes inverted);"
	print "# against SGEMM: % of the ceiling; against the MPI floor: what ddptrain adds; against trace off: the time --trace adds"
	print "# against check off: the step time --check-replicas adds to the same run without checks"
	print "# against ddp in the issue-22 rows (big: --layers=1024,4096,4096,10 --optimizer=adamw): the ratio ddptrain/ddp"
	if (star) print "# *: against the issue\47s PyTorch figure (no PyTorch figure from this run)"
	if (toywait2 != "" || wait2 != "")
		printf "# all-reduce wait on 2 ranks (mean over the ranks): ToyModel %s%%, wide MLP %s%% of the step\n",
			toywait2 == "" ? "-" : sprintf("%.0f", toywait2), wait2 == "" ? "-" : sprintf("%.0f", wait2)
	printf "# load average %s at the end\n", load1
	if (json != "") {
		printf("{\n  \"reps\": %d, \"mode\": %s, \"load_start\": %s, \"load_end\": %s,\n",
			reps, jstr(mode), jstr(load0), jstr(load1)) > json
		printf("  \"pytorch\": %s, \"sgemm\": %s,\n  \"rows\": [\n",
			(torch == "yes" ? jstr(torchv) : "null"), (sgemm == "" ? "null" : jstr(sgemm))) > json
		for (i = 1; i <= n; i++) printf("%s%s\n", js[i], (i < n ? "," : "")) > json
		printf("  ]\n}\n") > json
		close(json)
	}
}' "$tmp/rows"
echo "$me: $((SECONDS - started)) s" >&2
