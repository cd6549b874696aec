#!/bin/bash
# compare-modes.sh - DDP against DataParallel on the same model, data and global batch.
#
#   scripts/compare-modes.sh [--replicas G] [DDPTRAIN OPTION]...
#
# Runs `mpirun -np 1|G ddptrain OPTIONS` (ddp) and `ddptrain --mode=dp --replicas=1|G
# OPTIONS` (dp), each with --batch-size per replica, so both modes see the same global
# batch, and prints one table: samples/s, ms per step, scaling against one replica
# (same per-replica batch), memory per replica, and where dp's step goes.
# Then dp, ddp, and ddp again with --zero=1, --zero=2, --zero=3 and
# --grad-compress=bf16, all at G replicas, side by side: ms per step, rank 0's
# all-reduce share, the KiB a rank sends per step (ddp: its collectives, as a ring
# sends them; dp: replica 0's copies to the others), the state per rank in its parts
# (parameters, gradients, optimizer state, ZeRO-3's gathered layers: the largest over
# the ranks) and the final loss. A variant whose flag this ddptrain does not know is
# skipped with a note; one that fails fails.
#
# Environment: DDPTRAIN (the binary; default: the build tree's, else ddptrain on PATH),
# MPIRUN (default mpirun; may carry options, e.g. "mpirun --oversubscribe").
set -euo pipefail

usage() {
	sed -n '2,20s/^# \{0,1\}//p' "$0"
	exit "${1:-0}"
}

G=2
args=()
while [ $# -gt 0 ]; do
	case $1 in
	--replicas) [ $# -ge 2 ] || usage 2; G=$2; shift 2 ;;
	--replicas=*) G=${1#*=}; shift ;;
	-h | --help) usage 0 ;;
	--mode* | --quiet | --log-every*) echo "compare-modes: $1 is set by the script" >&2; exit 2 ;;
	*) args+=("$1"); shift ;;
	esac
done
case $G in '' | *[!0-9]* | 0) echo "compare-modes: --replicas: '$G' is not a positive integer" >&2; exit 2 ;; esac

here=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "${DDPTRAIN:-}" ]; then
	if [ -x "$here/src/ddptrain" ]; then DDPTRAIN=$here/src/ddptrain; else DDPTRAIN=$(command -v ddptrain || true); fi
fi
[ -n "$DDPTRAIN" ] && [ -x "$DDPTRAIN" ] || { echo "compare-modes: no ddptrain (build it, or set DDPTRAIN)" >&2; exit 1; }
MPIRUN=${MPIRUN:-mpirun}
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
mpiflags=()
[ "$G" -le "$(nproc)" ] || mpiflags+=(--oversubscribe)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run NAME MODE REPLICAS [FLAG...]: leave the report in $tmp/NAME
run() {
	local name=$1 mode=$2 n=$3
	shift 3
	if [ "$mode" = ddp ]; then
		$MPIRUN "${mpiflags[@]}" -np "$n" "$DDPTRAIN" --log-every=0 "${args[@]}" "$@" >"$tmp/$name"
	else
		"$DDPTRAIN" --mode=dp --replicas="$n" --log-every=0 "${args[@]}" >"$tmp/$name"
	fi
}
run ddp1 ddp 1
run ddpG ddp "$G"
run dp1 dp 1
run dpG dp "$G"
# The variants, each only where this ddptrain has its flag (and, for --zero, the stage).
help=$("$DDPTRAIN" --help 2>&1 || true)
variants=()
for v in zero1:--zero=1 zero2:--zero=2 zero3:--zero=3 bf16:--grad-compress=bf16; do
	flag=${v#*:}
	if grep -q -- "${flag%%=*}=[^ ]*${flag#*=}" <<<"$help"; then
		run "${v%%:*}" ddp "$G" "$flag"
		variants+=("${v%%:*}")
	else
		echo "# compare-modes: this ddptrain does not take $flag: no ${v%%:*} row"
	fi
done

grep -E '^# (ddptrain|model) ' "$tmp/ddpG" | sed 's/^# ddptrain [^:]*: /# compare-modes: ddp run: /'
awk -v G="$G" '
function field(line, key,   i, n, parts, kv) {
	n = split(line, parts, " ")
	for (i = 1; i <= n; i++) { split(parts[i], kv, "="); if (kv[1] == key) return kv[2] }
	return ""
}
FNR == 1 { file++ }
/^# summary:/ { sps[file] = field($0, "samples_per_s"); ms[file] = field($0, "ms_per_step") }
# ddp rank rows: "#  rank compute ar_wait step sent_KiB state_MiB rss_MiB ar_% data_wait TFLOP/s
# dev_MiB"
(file <= 2) && /^# +[0-9]+ / && NF == 12 {
	if ($7 > st[file]) st[file] = $7; if ($8 > rss[file]) rss[file] = $8
	if ($2 == 0) { wait[file] = $4; stepms[file] = $5 }
}
# dp replica rows: "#  replica scatter replicate forward gather loss backward reduce step in out state
# data_wait TFLOP/s dev_MiB"
(file >= 3) && /^# +[0-9]+ / && NF == 16 {
	if ($2 == 0) { r0[file] = $13; serial[file] = $6 + $7 + $9 + $10; repl[file] = $4; total0[file] = 0
		for (i = 3; i <= 10; i++) total0[file] += $i }
	else if ($13 > other[file]) other[file] = $13
	if ($4 > repl[file]) repl[file] = $4
}
END {
	printf "# %-5s %8s %14s %12s %8s %22s\n", "mode", "replicas", "samples/s", "ms/step", "scaling", "state MiB per replica"
	name[1] = "ddp"; name[2] = "ddp"; name[3] = "dp"; name[4] = "dp"
	n[1] = 1; n[2] = G; n[3] = 1; n[4] = G
	for (f = 1; f <= 4; f++) {
		base = (f <= 2) ? sps[1] : sps[3]
		if (f <= 2) mem = sprintf("%.3f (rss %.1f)", st[f], rss[f])
		else if (n[f] > 1) mem = sprintf("%.3f (others %.3f)", r0[f], other[f])
		else mem = sprintf("%.3f", r0[f])
		printf "  %-5s %8d %14.0f %12.4f %7.2fx %22s\n", name[f], n[f], sps[f], ms[f], sps[f] / base, mem
	}
	printf "# ddp/dp at %d replicas: %.2fx the samples/s\n", G, sps[2] / sps[4]
	if (stepms[2] > 0)
		printf "# ddp rank 0: %.1f%% of the step waiting for the all-reduce\n", 100 * wait[2] / stepms[2]
	if (total0[4] > 0)
		printf "# dp replica 0: %.1f%% of its step in the serial gather, loss, reduce and optimizer step; replicas spend %.4f ms per step being replicated\n", 100 * serial[4] / total0[4], repl[4]
}' "$tmp/ddp1" "$tmp/ddpG" "$tmp/dp1" "$tmp/dpG"

# The variants beside dp and plain ddp at G replicas. The per-rank table's columns are
# found by their names in its header, so parts added beside state_MiB (params, grads,
# optimizer state, work) are read wherever they stand; a column that is not there
# prints "-". dp's replica table is read by its place.
awk -v G="$G" '
function field(line, key,   i, n, parts, kv) {
	n = split(line, parts, " ")
	for (i = 1; i <= n; i++) { split(parts[i], kv, "="); if (kv[1] == key) return kv[2] }
	return ""
}
function part(v) { return v == "" ? "-" : sprintf("%.3f", v) }
FNR == 1 { file++; name[file] = FILENAME; sub(/.*\//, "", name[file])
	if (name[file] == "ddpG") name[file] = "ddp"; if (name[file] == "dpG") name[file] = "dp"
	delete col; inrank = 0 }
/^# summary:/ { ms[file] = field($0, "ms_per_step") }
/^# loss: / { v = $0; sub(/.*final /, "", v); loss[file] = v + 0; hasloss[file] = 1 }
name[file] == "dp" && /^# +[0-9]+ / && NF == 16 {
	if ($2 == 0) sent[file] = $12
	if ($13 + 0 > mx[file, "state"]) mx[file, "state"] = $13 + 0
	next
}
/^# +rank +[a-z]/ { # the per-rank table and the memory table under it
	delete col; inrank = 1
	for (i = 2; i <= NF; i++) {
		h = tolower($i)
		if (h == "ar_%") col["ar"] = i
		else if (h ~ /^(sent|ar_kib)/) col["sent"] = i
		else if (h ~ /^state/) col["state"] = i
		else if (h ~ /^param/) col["params"] = i
		else if (h ~ /^grad/) col["grads"] = i
		else if (h ~ /^(opt|optim)/) col["optim"] = i
		else if (h ~ /^work/) col["work"] = i
	}
	next
}
inrank && /^# +[0-9]+ / {
	if ($2 == 0 && ("ar" in col)) ar[file] = $(col["ar"])
	if ($2 == 0 && ("sent" in col)) sent[file] = $(col["sent"])
	for (k in col) if (k != "ar" && k != "sent" && (!((file, k) in mx) || $(col[k]) + 0 > mx[file, k])) mx[file, k] = $(col[k]) + 0
	next
}
inrank && !/^# +[0-9]+ / { inrank = 0 }
END {
	printf "# dp, ddp and its variants at %d replicas: KiB sent per step by rank 0; state MiB per rank (largest over the ranks)\n", G
	printf "# %-7s %10s %7s %10s %11s %10s %10s %10s %10s %11s %12s\n", "variant", "ms/step", "ar_%", "sent_KiB", "params_MiB", "grads_MiB", "optim_MiB", "work_MiB", "state_MiB", "vs ddp", "final_loss"
	for (f = 1; f <= file; f++) {
		tot = ((f, "state") in mx) ? mx[f, "state"] : ""
		if (tot == "" && ((f, "params") in mx)) tot = mx[f, "params"] + mx[f, "grads"] + mx[f, "optim"] + mx[f, "work"]
		if (name[f] == "ddp") base = tot
		state[f] = tot
	}
	for (f = 1; f <= file; f++) {
		tot = state[f]
		rel = (tot != "" && base > 0) ? sprintf("%.2fx", tot / base) : "-"
		printf "  %-7s %10.4f %7s %10s %11s %10s %10s %10s %10s %11s %12s\n", name[f], ms[f], (f in ar) ? ar[f] : "-",
			(f in sent) ? sent[f] : "-",
			part((f, "params") in mx ? mx[f, "params"] : ""), part((f, "grads") in mx ? mx[f, "grads"] : ""),
			part((f, "optim") in mx ? mx[f, "optim"] : ""), part((f, "work") in mx ? mx[f, "work"] : ""), part(tot), rel,
			hasloss[f] ? sprintf("%.6f", loss[f]) : "-"
	}
}' "$tmp/dpG" "$tmp/ddpG" "${variants[@]/#/$tmp/}"
