#!/bin/bash
# bench-network.sh - issue #15's network bench: 2 "hosts" x 1 rank over an
# emulated link (two network namespaces on a bridge, each host's egress
# limited by the kernel's tbf), for the wide MLP and a deep 16 x 512 MLP.
#
#   scripts/bench-network.sh [--reps N] [--smoke] [--links LIST] [--models LIST]
#                            [--no-torch] [--extra NAME=ARGS]... [--keep-raw DIR]
#                            [--ranks-per-host N]
#
# Per link (Gbit/s; 0 = no limit) and model it prints: the 1-rank compute-only
# step, the 2-host step, the same with --no-overlap, the all-reduce alone
# (the --no-overlap run's all-reduce wait, mean over the ranks), the link
# floor (each rank sends the whole gradient once: half in the reduce-scatter,
# half in the all-gather), the share of the all-reduce hidden behind backward,
# 1 - (step - compute) / all-reduce, and PyTorch DDP (gloo, scripts/
# torch_ddp_bench.py) launched across the same namespaces. Step times are
# steady state: from the elapsed time logged after the first LOGSTEP steps to
# the end. Every figure is the median of N runs (default 3), taken in rounds
# (each configuration once per round) so that load hits every row alike; the
# load average is printed with the table.
#
# --links "1 10 25 0" and --models "wide deep" are the defaults. --extra
# NAME=ARGS adds a 2-host ddptrain row with extra arguments, run in the same
# rounds: VAR=VALUE words are set in every rank's environment (mpirun -x;
# OMPI_MCA_* ones set Open MPI parameters; DDPTRAIN=PATH runs another build),
# the others go to ddptrain, e.g. --extra 'mpi=DDPTRAIN_ALLREDUCE=mpi'. --smoke: one run of a few steps
# on one link, only to check the plumbing. --keep-raw DIR keeps every run's
# output there. --ranks-per-host N (default 1) puts N ranks on each host, so
# ddptrain takes its hierarchical all-reduce (shared memory in a host, a ring
# between the hosts); compare the flat ring with --extra
# 'flat=DDPTRAIN_ALLREDUCE=ring'. The hosts are namespaces of this machine: with
# N ranks each they share its cores, and compute-only is still 1 rank alone.
#
# Issue 22's rows, in a second table: ddptrain with --grad-compress=bf16 and
# with --zero=1 beside its fp32 step (where this ddptrain has those flags), and
# PyTorch DDP with fp16_compress_hook (pt16) and with bf16_gather_hook (ptbf:
# the bf16 hook's arithmetic over an all-gather; gloo in torch 1.13 refuses
# bf16_compress_hook), with the issue's targets: bf16 <= 0.6x the fp32 step
# and >= 1.6x faster than PyTorch in fp32, zero1 <= 1.1x the fp32 step. Issue 35's,
# in a third: --zero=2 and --zero=3, with its target: --zero=3 <= 1.6x --zero=2's step
# (it moves 1.5x the bytes).
#
# Needs root (network namespaces), ip, unshare and tc with tbf; without them
# it says so and exits 77. Names carry "nb" and a free id; everything it
# creates is removed on every exit path.
#
# Environment: DDPTRAIN (default: the build tree's), MPIRUN (default mpirun),
# TORCH_PYTHON (default /usr/bin/python3), QUIET and QUIET_WAIT (before each
# run, wait up to QUIET_WAIT seconds, default 30, for at most QUIET runnable
# tasks, default 0: do not wait).
set -euo pipefail
export LC_ALL=C

me=bench-network.sh
usage() {
	sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"
	exit "${1:-0}"
}
skip() {
	echo "$me: SKIP: $*" >&2
	exit 77
}
die() {
	echo "$me: $*" >&2
	exit 1
}

reps=3 smoke=0 torch=auto links="1 10 25 0" models="wide deep" raw= rph=1
extras=()
while [ $# -gt 0 ]; do
	case $1 in
	--reps) [ $# -ge 2 ] || usage 2; reps=$2; shift 2 ;;
	--reps=*) reps=${1#*=}; shift ;;
	--smoke) smoke=1; reps=1; links=10; shift ;;
	--links) [ $# -ge 2 ] || usage 2; links=$2; shift 2 ;;
	--links=*) links=${1#*=}; shift ;;
	--models) [ $# -ge 2 ] || usage 2; models=$2; shift 2 ;;
	--models=*) models=${1#*=}; shift ;;
	--extra) [ $# -ge 2 ] || usage 2; extras+=("$2"); shift 2 ;;
	--extra=*) extras+=("${1#*=}"); shift ;;
	--no-torch) torch=no; shift ;;
	--keep-raw) [ $# -ge 2 ] || usage 2; raw=$2; shift 2 ;;
	--keep-raw=*) raw=${1#*=}; shift ;;
	--ranks-per-host) [ $# -ge 2 ] || usage 2; rph=$2; shift 2 ;;
	--ranks-per-host=*) rph=${1#*=}; shift ;;
	-h | --help) usage 0 ;;
	*) echo "$me: unknown option '$1' (see --help)" >&2; exit 2 ;;
	esac
done
case $reps in *[!0-9]* | '' | 0*) echo "$me: --reps: '$reps' is not a positive integer" >&2; exit 2 ;; esac
case $rph in *[!0-9]* | '' | 0*) echo "$me: --ranks-per-host: '$rph' is not a positive integer" >&2; exit 2 ;; esac
for l in $links; do
	case $l in *[!0-9]* | '') echo "$me: --links: '$l' is not a whole number of Gbit/s" >&2; exit 2 ;; esac
done
for m in $models; do
	case $m in wide | deep) ;; *) echo "$me: --models: '$m' is not wide or deep" >&2; exit 2 ;; esac
done
for e in "${extras[@]}"; do
	case $e in [a-z]*=*) ;; *) echo "$me: --extra: '$e' is not NAME=ARGS" >&2; exit 2 ;; esac
done

here=$(cd "$(dirname "$0")/.." && pwd)
: "${DDPTRAIN:=$here/src/ddptrain}"
[ -x "$DDPTRAIN" ] || die "no $DDPTRAIN (build it, or set DDPTRAIN)"
MPIRUN=${MPIRUN:-mpirun}
QUIET=${QUIET:-0} QUIET_WAIT=${QUIET_WAIT:-30}
TORCH_PYTHON=${TORCH_PYTHON:-/usr/bin/python3}
TORCH_SCRIPT=$here/scripts/torch_ddp_bench.py
if [ "$torch" = auto ]; then
	if "$TORCH_PYTHON" -c 'import torch' 2>/dev/null && [ -r "$TORCH_SCRIPT" ]; then torch=yes; else
		echo "$me: $TORCH_PYTHON cannot import torch: no PyTorch rows" >&2
		torch=no
	fi
fi

[ "$(id -u)" -eq 0 ] || skip "network namespaces need root"
command -v tc >/dev/null 2>&1 || skip "no tc command (apt-get install iproute2)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# ---- two hosts on a private bridge (scripts/netns-hosts.sh) -------------------------
fail() { die "$@"; }
. "$(dirname "$0")/netns-hosts.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench-network.XXXXXX")
cleanup() {
	netns_hosts_down
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
netns_hosts_up nb 10.215 nbhost1 nbhost2 "$tmp"
echo "$me: hosts in the namespaces $NS1 and $NS2, on the bridge $BR" >&2
ip netns exec "$NS1" tc qdisc add dev eth0 root tbf rate 1gbit burst 4mb latency 50ms 2>"$tmp/err" ||
	skip "no tbf queueing discipline: $(cat "$tmp/err")"
ip netns exec "$NS1" tc qdisc del dev eth0 root

# set_link GBIT: each host's egress limited to GBIT Gbit/s (0: no limit)
set_link() {
	local ns
	for ns in "$NS1" "$NS2"; do
		ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null || true
		[ "$1" -eq 0 ] || ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$1gbit" burst 4mb latency 50ms ||
			die "tbf at $1 Gbit/s"
	done
}

# TCP on the bridge's network, the agent in place of ssh, no binding (each namespace looks
# like a whole machine to Open MPI, which would put both ranks on core 0).
# shellcheck disable=SC2054 # commas inside values
HOSTS=(--host "$A:$rph,$B:$rph" -np $((2 * rph)) --bind-to none --mca pml ob1 --mca btl self,tcp
	--mca btl_tcp_if_include "$NET.0/24" --mca oob_tcp_if_include "$NET.0/24"
	--mca plm_rsh_agent "$AGENT" --mca plm_rsh_no_tree_spawn 1)

# ---- the runs ------------------------------------------------------------------
# Steps per run by link: enough for a steady state after LOGSTEP steps.
steps_for() {
	if [ "$smoke" = 1 ]; then echo 6; return; fi
	case $1 in 1) echo 16 ;; 10) echo 40 ;; *) echo 60 ;; esac
}
LOGSTEP=3
model_args() {
	case $1 in
	wide) echo "--layers=1024,1024,1024,1024,1024 --batch-size=128" ;;
	deep) echo "--layers=$(printf '512,%.0s' $(seq 16))512 --batch-size=128" ;;
	esac
}

# ddp OUT WHERE ARGS...: ddptrain on 1 rank here (WHERE=local) or on the 2 hosts, with
# mpirun's options MPIENV (-x VAR=VALUE...)
MPIENV=()
ddp() {
	local out=$1 where=$2
	shift 2
	if [ "$where" = local ]; then
		timeout -k 5 300 $MPIRUN -np 1 --bind-to none "$DDPTRAIN" "$@" >"$out" 2>"$out.err"
	else
		timeout -k 5 300 $MPIRUN "${HOSTS[@]}" "${MPIENV[@]}" "$DDPTRAIN" "$@" >"$out" 2>"$out.err"
	fi
}

# run_torch OUT ARGS...: torch_ddp_bench.py on the 2 hosts, gloo over eth0
run_torch() {
	local out=$1
	shift
	timeout -k 5 300 $MPIRUN "${HOSTS[@]}" -x MASTER_ADDR="$A" -x MASTER_PORT=$((29500 + RANDOM % 1000)) \
		-x GLOO_SOCKET_IFNAME=eth0 "$TORCH_PYTHON" "$TORCH_SCRIPT" "$@" >"$out" 2>"$out.err"
}

# steady FILE: ms per step after the first LOGSTEP steps, from ddptrain's log
steady() {
	awk -v k="$LOGSTEP" '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+\/[0-9]+$/ {
		split($2, s, "/"); if (s[1] == k) { s0 = s[1]; e0 = $5 } n = s[1]; e = $5 }
		END { if (s0 != "" && n > s0) printf "%.4f\n", 1000 * (e - e0) / (n - s0) }' "$1"
}
# arwait FILE: all-reduce wait per step, mean over the ranks (ms); the per-rank table's
# ar_wait column found by its name
arwait() {
	awk '/^# +rank +compute / { k = 0; for (i = 2; i <= NF; i++) if ($i == "ar_wait") k = i; next }
		k && /^# +[0-9]+ / { w += $k; n++; next } { k = 0 }
		END { if (n) printf "%.4f\n", w / n }' "$1"
}
# torchstep FILE: PyTorch's ms per step
torchstep() {
	awk '/^# summary:/ { for (i = 3; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "ms_per_step") print kv[2] } }' "$1"
}

# quiet: wait (at most QUIET_WAIT s) until at most QUIET tasks are runnable in 3 looks in a
# row, 0.2 s apart; the machine is shared and its load comes and goes
quiet() {
	local t0=$SECONDS ok=0 n
	[ "$QUIET" -gt 0 ] || return 0
	while [ "$ok" -lt 3 ] && [ $((SECONDS - t0)) -lt "$QUIET_WAIT" ]; do
		n=$(awk '{ split($4, a, "/"); print a[1] }' /proc/loadavg)
		if [ "$n" -le "$QUIET" ]; then ok=$((ok + 1)); else ok=0; fi
		sleep 0.2
	done
}

# run_one NAME ROUND LINK MODEL: one configuration's run, its figures appended to $tmp/figs
run_one() {
	local name=$1 round=$2 link=$3 model=$4 out n margs extra rc
	out=$tmp/$name.$link.$model.$round
	n=$(steps_for "$link")
	read -ra margs <<<"$(model_args "$model")"
	local common=("${margs[@]}" --samples=4096 --epochs=100000 --max-steps="$n" --log-every=1)
	quiet
	echo "$link $model $name load $(cut -d' ' -f1 /proc/loadavg)" >>"$tmp/figs"
	case $name in
	compute) ddp "$out" local "${common[@]}" ;;
	overlap) ddp "$out" hosts "${common[@]}" ;;
	noov) ddp "$out" hosts "${common[@]}" --no-overlap ;;
	torch) run_torch "$out" "${margs[@]}" --steps="$n" --warmup="$LOGSTEP" ;;
	torch.fp16) run_torch "$out" "${margs[@]}" --steps="$n" --warmup="$LOGSTEP" --hook=fp16 ;;
	torch.bf16g) run_torch "$out" "${margs[@]}" --steps="$n" --warmup="$LOGSTEP" --hook=bf16-gather ;;
	bf16) ddp "$out" hosts "${common[@]}" --grad-compress=bf16 ;;
	zero1) ddp "$out" hosts "${common[@]}" --zero=1 ;;
	zero2) ddp "$out" hosts "${common[@]}" --zero=2 ;;
	zero3) ddp "$out" hosts "${common[@]}" --zero=3 ;;
	x.*)
		local env=() args=() tok
		for extra in "${extras[@]}"; do [ "${extra%%=*}" != "${name#x.}" ] || break; done
		local bin=$DDPTRAIN
		for tok in ${extra#*=}; do
			case $tok in DDPTRAIN=*) bin=${tok#*=} ;; [A-Z]*=*) env+=(-x "$tok") ;; *) args+=("$tok") ;; esac
		done
		MPIENV=("${env[@]}")
		DDPTRAIN=$bin ddp "$out" hosts "${common[@]}" "${args[@]}"
		rc=$?
		MPIENV=()
		[ "$rc" -eq 0 ] ;;
	esac || { echo "$me: $name at $link Gbit/s, $model: failed: $(tail -n 3 "$out.err")" >&2; return 0; }
	[ -z "$raw" ] || cp "$out" "$raw/"
	case $name in
	torch*) echo "$link $model $name step $(torchstep "$out")" ;;
	*)
		echo "$link $model $name step $(steady "$out")"
		echo "$link $model $name wait $(arwait "$out")" ;;
	esac >>"$tmp/figs"
}

[ -z "$raw" ] || mkdir -p "$raw"
names=(compute overlap noov)
# issue 22: the compressed and sharded runs where this ddptrain has the flags
i22=()
help=$("$DDPTRAIN" --help 2>&1 || true)
if grep -q -- --grad-compress <<<"$help"; then i22+=(bf16); else echo "$me: this ddptrain has no --grad-compress: no bf16 runs" >&2; fi
if grep -q -- --zero <<<"$help"; then i22+=(zero1); else echo "$me: this ddptrain has no --zero: no zero1 runs" >&2; fi
# issue 35: --zero=3 beside --zero=2 (it moves 1.5x the bytes: the parameters gathered
# again for backward)
if grep -q -- '--zero=[0-9|]*3' <<<"$help"; then i22+=(zero2 zero3); else echo "$me: this ddptrain has no --zero=3: no zero2/zero3 runs" >&2; fi
names+=("${i22[@]}")
for e in "${extras[@]}"; do names+=("x.${e%%=*}"); done
[ "$torch" = no ] || names+=(torch torch.fp16 torch.bf16g)
: >"$tmp/figs"
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
started=$SECONDS
for ((round = 1; round <= reps; round++)); do
	for link in $links; do
		set_link "$link"
		for model in $models; do
			echo "$me: round $round/$reps, $link Gbit/s, $model ($((SECONDS - started)) s so far, load $(cut -d' ' -f1 /proc/loadavg))" >&2
			for name in "${names[@]}"; do run_one "$name" "$round" "$link" "$model"; done
		done
	done
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- the table ----------------------------------------------------------------------
nparams() {
	case $1 in wide) echo 4198400 ;; deep) echo $((15 * (512 * 512 + 512))) ;; esac
}
{
	echo "# bench-network: $("$DDPTRAIN" --version | head -n 1), 2 hosts x $rph rank(s) (netns + veth + bridge, tbf on each host's egress), $(nproc) CPUs"
	echo "# median of $reps run(s) in rounds; steady-state ms per step after $LOGSTEP steps; load average $load_start at the start, $load_end at the end"
	echo "# wide = 1024 x 4 layers, deep = 512 x 15 layers, batch 128 per rank; floor = gradient bytes x 8 / link rate"
	echo "# hidden = 1 - (step - compute) / allreduce; pt = PyTorch $([ "$torch" = yes ] && "$TORCH_PYTHON" -c 'import torch; print(torch.__version__)') DDP (gloo) step; x pt = PyTorch step / ddptrain step"
} >"$tmp/head"
awk -v headfile="$tmp/head" -v np_wide="$(nparams wide)" -v np_deep="$(nparams deep)" -v links="$links" \
	-v models="$models" -v names="${names[*]}" '
function median(key,   n, a, i, j, t, m) {
	if (!(key in v)) return ""  # asking must not make a key (the "every run" list shows them all)
	n = split(v[key], a, " ")
	if (n == 0 || v[key] == "") return ""
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
	m = n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	return m
}
function f(x, fmt) { return x == "" ? "-" : sprintf(fmt, x) }
NF == 5 { v[$1 " " $2 " " $3 " " $4] = v[$1 " " $2 " " $3 " " $4] " " $5 }
END {
	while ((getline h < headfile) > 0) print h
	printf "# %-5s %-5s %9s %9s %9s %9s %9s %8s %9s %9s %7s", "Gbit", "model", "compute", "step",
		"noov", "allreduce", "floor", "hidden", "step/cmp", "pt", "x pt"
	nn = split(names, nm, " ")
	for (i = 1; i <= nn; i++) if (nm[i] ~ /^x\./) printf " %12s %7s", substr(nm[i], 3), "hidden"
	printf "\n"
	nl = split(links, L, " "); nmod = split(models, M, " ")
	for (i = 1; i <= nl; i++) for (j = 1; j <= nmod; j++) {
		k = L[i] " " M[j]
		c = median(k " compute step"); s = median(k " overlap step"); no = median(k " noov step")
		ar = median(k " noov wait"); pt = median(k " torch step")
		np = M[j] == "wide" ? np_wide : np_deep
		fl = L[i] > 0 ? np * 4 * 8 / (L[i] * 1e9) * 1000 : ""
		hid = (c != "" && s != "" && ar > 0) ? 100 * (1 - (s - c) / ar) : ""
		printf "  %-5s %-5s %9s %9s %9s %9s %9s %8s %9s %9s %7s", (L[i] > 0 ? L[i] : "none"), M[j], f(c, "%.2f"),
			f(s, "%.2f"), f(no, "%.2f"), f(ar, "%.2f"), f(fl, "%.2f"), f(hid, "%.0f%%"),
			(c != "" && s != "") ? sprintf("%.2fx", s / c) : "-", f(pt, "%.2f"),
			(pt != "" && s != "") ? sprintf("%.2fx", pt / s) : "-"
		for (q = 1; q <= nn; q++) if (nm[q] ~ /^x\./) {
			xs = median(k " " nm[q] " step")
			xh = (c != "" && xs != "" && ar > 0) ? 100 * (1 - (xs - c) / ar) : ""
			printf " %12s %7s", f(xs, "%.2f"), f(xh, "%.0f%%")
		}
		printf "\n"
	}
	# issue 22: compressed and sharded steps beside fp32 and PyTorch, with the targets
	print "# issue 22 (ms per step; -: not run): ddptrain fp32, --grad-compress=bf16, --zero=1; PyTorch fp32, fp16 hook, bf16 hook over all-gather"
	printf "# %-5s %-5s %9s %9s %8s %9s %8s %9s %9s %9s %8s  %s\n", "Gbit", "model", "fp32", "bf16", "bf16/32",
		"zero1", "z1/32", "pt", "pt16", "ptbf", "pt/bf16", "targets: bf16/32<=0.6 pt/bf16>=1.6 z1/32<=1.1"
	for (i = 1; i <= nl; i++) for (j = 1; j <= nmod; j++) {
		k = L[i] " " M[j]
		s = median(k " overlap step"); b = median(k " bf16 step"); z = median(k " zero1 step")
		pt = median(k " torch step"); p16 = median(k " torch.fp16 step"); pbf = median(k " torch.bf16g step")
		rb = (b != "" && s > 0) ? b / s : ""; rz = (z != "" && s > 0) ? z / s : ""; rp = (pt != "" && b > 0) ? pt / b : ""
		verdict = (rb == "" ? "-" : (rb <= 0.6 ? "pass" : "miss")) " " (rp == "" ? "-" : (rp >= 1.6 ? "pass" : "miss")) \
			" " (rz == "" ? "-" : (rz <= 1.1 ? "pass" : "miss"))
		printf "# %-5s %-5s %9s %9s %8s %9s %8s %9s %9s %9s %8s  %s\n", (L[i] > 0 ? L[i] : "none"), M[j], f(s, "%.2f"),
			f(b, "%.2f"), f(rb, "%.2fx"), f(z, "%.2f"), f(rz, "%.2fx"), f(pt, "%.2f"), f(p16, "%.2f"), f(pbf, "%.2f"),
			f(rp, "%.2fx"), verdict
	}
	print "# issue 35 (ms per step; -: not run): ddptrain --zero=2, --zero=3"
	printf "# %-5s %-5s %9s %9s %8s  %s\n", "Gbit", "model", "zero2", "zero3", "z3/z2", "target: z3/z2<=1.6"
	for (i = 1; i <= nl; i++) for (j = 1; j <= nmod; j++) {
		k = L[i] " " M[j]
		z2 = median(k " zero2 step"); z3 = median(k " zero3 step")
		r3 = (z2 != "" && z3 != "" && z2 > 0) ? z3 / z2 : ""
		printf "# %-5s %-5s %9s %9s %8s  %s\n", (L[i] > 0 ? L[i] : "none"), M[j], f(z2, "%.2f"), f(z3, "%.2f"),
			f(r3, "%.2fx"), (r3 == "" ? "-" : (r3 <= 1.6 ? "pass" : "miss"))
	}
	print "# every run (ms):"
	for (key in v) printf "#   %s:%s\n", key, v[key] | "sort"
}' "$tmp/figs"
echo "$me: $((SECONDS - started)) s" >&2
