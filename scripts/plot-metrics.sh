#!/bin/bash
# plot-metrics.sh - draw ddptrain's --metrics files: loss and samples/s over the steps.
#
#   scripts/plot-metrics.sh METRICS.jsonl [MORE.jsonl]... [-o OUT.png] [-t TITLE]
#
# One PNG, two panels (loss above, throughput below), one line per file,
# labelled by the file name and its summary's mode and replica count, so that
# runs can be laid over each other (ddp against dp, 2 ranks against 4).
# OUT defaults to the first file's name with .png in place of .jsonl.
# Needs gnuplot (Debian: gnuplot-nox). The step rows are read with awk from the
# one-object-per-line JSON that ddptrain writes.
set -euo pipefail

me=plot-metrics.sh
usage() {
	sed -n '2,12s/^# \{0,1\}//p' "$0"
	exit "${1:-0}"
}
die() {
	echo "$me: $*" >&2
	exit 1
}

out=
title="ddptrain: loss and throughput"
files=()
while [ $# -gt 0 ]; do
	case $1 in
	-o | --output) [ $# -ge 2 ] || usage 2; out=$2; shift 2 ;;
	-o=* | --output=*) out=${1#*=}; shift ;;
	-t | --title) [ $# -ge 2 ] || usage 2; title=$2; shift 2 ;;
	-t=* | --title=*) title=${1#*=}; shift ;;
	-h | --help) usage 0 ;;
	--) shift; files+=("$@"); break ;;
	-?*) echo "$me: unknown option '$1'" >&2; usage 2 ;;
	*) files+=("$1"); shift ;;
	esac
done
[ ${#files[@]} -gt 0 ] || usage 2
[ -n "$out" ] || out=${files[0]%.jsonl}.png
command -v gnuplot >/dev/null 2>&1 || die "needs gnuplot (Debian: apt-get install gnuplot-nox)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/plot-metrics.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# A gnuplot string literal: '...' with each ' doubled.
gp_str() {
	printf "'%s'" "$(printf '%s' "$1" | sed "s/'/''/g")"
}

# Per file: $tmp/N.dat with "step loss samples_per_s" rows, and a label.
loss_plots=()
rate_plots=()
n=0
for f in "${files[@]}"; do
	[ -r "$f" ] || die "$f: cannot read"
	n=$((n + 1))
	awk '
		# the number after "KEY": on this line, or "" when absent
		function num(key,   s) {
			if (!match($0, "\"" key "\": *[-+0-9.eE]+"))
				return ""
			s = substr($0, RSTART, RLENGTH)
			sub(/^[^:]*: */, "", s)
			return s
		}
		/"type": *"step"/ { print num("step"), num("loss"), num("samples_per_s") }' "$f" >"$tmp/$n.dat"
	[ -s "$tmp/$n.dat" ] || die "$f: no step rows (was it written with --log-every=0?)"
	# "ddp, 2 replicas" from the summary object, when there is one.
	what=$(awk '
		function str(key,   s) {
			if (!match($0, "\"" key "\": *\"[^\"]*\""))
				return ""
			s = substr($0, RSTART, RLENGTH)
			sub(/^[^:]*: *"/, "", s)
			sub(/"$/, "", s)
			return s
		}
		/"type": *"summary"/ {
			m = str("mode")
			if (match($0, /"replicas": *[0-9]+/)) {
				r = substr($0, RSTART, RLENGTH)
				sub(/^[^:]*: */, "", r)
				m = m ", " r (r == 1 ? " replica" : " replicas")
			}
			print m
		}' "$f" | tail -n 1)
	label=$(basename "$f")
	[ -z "$what" ] || label="$label ($what)"
	# The first run wide, the others narrower with other point shapes: runs
	# that train alike (ddp and dp) lie on each other and must stay visible.
	style="with linespoints linecolor $n pointtype $(((n - 1) % 6 * 2 + 6 + (n == 1))) pointsize 0.7"
	style="$style linewidth $([ "$n" -eq 1 ] && echo 4 || echo 1.5) title $(gp_str "$label")"
	loss_plots+=("$(gp_str "$tmp/$n.dat") using 1:2 $style")
	rate_plots+=("$(gp_str "$tmp/$n.dat") using 1:3 $style")
done

join() {
	local IFS=,
	echo "$*"
}

term="pngcairo size 900,700 noenhanced font ',11'"
gnuplot -e "set terminal pngcairo" </dev/null >/dev/null 2>&1 || term="png size 900,700 noenhanced"
cat >"$tmp/plot.gp" <<EOF
set terminal $term
set output $(gp_str "$out")
set multiplot layout 2,1 title $(gp_str "$title")
set grid
set key top right
set xlabel 'step'
set ylabel 'loss (mean since the previous row)'
plot $(join "${loss_plots[@]}")
set ylabel 'samples/s (all replicas)'
set format y '%.1s%c'
set yrange [0:*]
# headroom above the highest curve for the key
set offsets 0, 0, graph 0.35, 0
plot $(join "${rate_plots[@]}")
unset multiplot
EOF
gnuplot "$tmp/plot.gp" || die "gnuplot failed"
echo "$me: wrote $out (${#files[@]} run$([ ${#files[@]} -eq 1 ] || echo s))"
