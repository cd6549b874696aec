#!/bin/bash
# mutate.sh - mutation testing for developers: does make check catch the bugs that
# training code really gets?
#
# Each tests/mutants/NN-name.diff plants one realistic bug in src/ (an epoch seed
# ignored, an off-by-one in the padding, epsilon inside AdamW's bias correction, a
# float left out of the ring all-reduce...; the diff's first lines say which); those
# from 20 on plant it in the CUDA module (src/cuda/: a transposed product, a kernel's
# bound, AdamW's bias correction, the bf16 wire truncating, an event on the legacy
# stream...), which only the tests that load the module see (tests/gpu/cuda-stub.sh through
# the stub libraries without a GPU; tests/gpu-*.sh on a GPU). This
# script copies the working tree (tracked files plus untracked ones git does not
# ignore, so uncommitted work is included) into a private temporary directory,
# builds it once, then for each mutant: applies it, rebuilds, runs make check with
# PyTorch hidden from Python (the suite must catch the bug without the reference
# implementation), records the verdict, reverses the diff and rebuilds.
#
#   KILLED    make check failed: the failing tests are listed
#   SURVIVED  make check passed with the bug in place: a hole in the tests
#   BROKEN    the mutant does not compile (not counted: fix the diff)
#   STALE     the diff no longer applies to src/ (not counted: refresh the diff)
#
# It is not part of make check. Run it before you stop whenever you touch training
# math (the loss, the optimizers, the sampler, the all-reduces, gradient accumulation,
# resume): every mutant should be KILLED. The unmutated tree is checked first; if
# that fails, the verdicts would mean nothing and the script stops.
#
# The tree is configured without CUDA unless a chosen mutant touches src/cuda/ (then
# with the toolkit configure finds, which a src/cuda mutant needs: without it the
# module is not built and its tests skip). For those, --tests "tests/gpu/cuda-stub.sh
# tests/gpu/cuda-stub-fixed.sh tests/gpu/gpu-module.sh tests/gpu/gpu-train.sh tests/gpu/gpu-placement.sh"
# runs every test that loads the module (about 2 minutes a mutant here, nvcc included).
#
# How long: autoreconf, configure and one build (about a minute), then one make check
# for the unmutated tree and one per mutant, each with a rebuild of what the diff
# touched. On 2 cores the whole suite takes about 2 minutes, so all 19 mutants take
# about 45 minutes; with --tests naming a few unit tests, a few seconds each.
#
# Usage: scripts/mutate.sh [--tests "tests/a.sh tests/unit/test_b ..."] [--keep] [-j N]
#                          [MUTANT...]
#   --tests LIST  run only these tests (make check TESTS=LIST) instead of the suite
#   --keep        keep the temporary directory (the copy and every log) and say where
#   -j N          parallel make jobs (default: the number of cores)
#   MUTANT        a mutant's name (its file name without .diff) or a glob such as
#                 '0[1-3]-*'; default: all of tests/mutants
# Exit status: 0 every mutant that applied and compiled was killed, 1 otherwise (or
# the unmutated tree fails to build or to pass), 2 usage error.
set -u

usage() {
	sed -n '/^# Usage:/,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'
}
die_usage() {
	echo "mutate.sh: $*" >&2
	echo "Try 'scripts/mutate.sh --help'." >&2
	exit 2
}

tests=""
keep=0
jobs=$(nproc 2>/dev/null || echo 2)
want=()
while [ $# -gt 0 ]; do
	case $1 in
	--tests) [ $# -ge 2 ] || die_usage "--tests needs a list"; tests=$2; shift 2 ;;
	--tests=*) tests=${1#--tests=}; shift ;;
	--keep) keep=1; shift ;;
	-j) [ $# -ge 2 ] || die_usage "-j needs a number"; jobs=$2; shift 2 ;;
	-j*) jobs=${1#-j}; shift ;;
	-h | --help) usage; exit 0 ;;
	--) shift; want+=("$@"); break ;;
	-*) die_usage "unknown option $1" ;;
	*) want+=("$1"); shift ;;
	esac
done
case $jobs in '' | *[!0-9]* | 0) die_usage "-j wants a positive number, not '$jobs'" ;; esac
if [ -n "$tests" ] && [ -z "${tests// /}" ]; then
	die_usage "--tests: an empty list"
fi

top=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel 2>/dev/null) ||
	die_usage "$(dirname "$0")/.. is not in a git working tree"
[ -d "$top/tests/mutants" ] || die_usage "$top/tests/mutants: no such directory"

# The mutants to run, in name order; every name or glob must match one at least.
all=()
for f in "$top"/tests/mutants/*.diff; do
	[ -f "$f" ] && all+=("$(basename "$f" .diff)")
done
[ ${#all[@]} -gt 0 ] || die_usage "no mutants in $top/tests/mutants"
chosen=()
if [ ${#want[@]} -eq 0 ]; then
	chosen=("${all[@]}")
else
	for i in "${!want[@]}"; do
		w=${want[$i]%.diff}
		want[i]=${w##*/}
	done
	for w in "${want[@]}"; do
		hit=0
		for m in "${all[@]}"; do
			# shellcheck disable=SC2053 # $w is a glob on purpose
			[[ $m == $w ]] && hit=1
		done
		[ $hit = 1 ] || die_usage "no mutant matches '$w' (see tests/mutants)"
	done
	for m in "${all[@]}"; do
		for w in "${want[@]}"; do
			# shellcheck disable=SC2053
			if [[ $m == $w ]]; then
				chosen+=("$m")
				break
			fi
		done
	done
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/mutate.XXXXXX") || exit 1
cleanup() {
	if [ $keep = 1 ]; then
		echo "# kept: $tmp (the tree in tree/, logs in logs/)"
	else
		rm -rf "$tmp"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

tree=$tmp/tree
logs=$tmp/logs
mkdir -p "$tree" "$logs" "$tmp/nopytorch"
# A torch module that cannot be imported shadows the real one: the tests that compare
# against PyTorch skip, so a mutant must be caught by the suite's own references.
echo 'raise ImportError("torch hidden by scripts/mutate.sh")' >"$tmp/nopytorch/torch.py"
export PYTHONPATH="$tmp/nopytorch${PYTHONPATH:+:$PYTHONPATH}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# Tracked files as they are now (a deleted one is left out) and untracked ones git does
# not ignore.
git -C "$top" ls-files -co --exclude-standard -z |
	(cd "$top" && while IFS= read -r -d '' f; do
		[ -e "$f" ] || [ -L "$f" ] && printf '%s\0' "$f"
	done) |
	tar -C "$top" --null -T - -cf - | tar -C "$tree" -xf - || {
	echo "mutate.sh: copying $top failed" >&2
	exit 1
}
cd "$tree" || exit 1

# Build everything make check builds, so that a compile error is BROKEN, not KILLED.
build() {
	make -j"$jobs" >>"$1" 2>&1 && make -j"$jobs" check TESTS= >>"$1" 2>&1
}

# Run make check (or TESTS=$tests); sets $failed to the failing tests' names.
check() {
	local rc

	find . -name '*.trs' -exec rm -f {} +
	if [ -n "$tests" ]; then
		make -j"$jobs" check TESTS="$tests" >"$1" 2>&1
	else
		make -j"$jobs" check >"$1" 2>&1
	fi
	rc=$?
	failed=$(find . -name '*.trs' -exec grep -l -E '^:test-result: (FAIL|ERROR)' {} + 2>/dev/null |
		sed 's|^\./||; s|\.trs$||' | sort | tr '\n' ' ')
	failed=${failed% }
	return $rc
}

# Stop: say why, show the end of the log (the directory goes unless --keep).
fatal() { # MESSAGE LOG
	echo "mutate.sh: $1 (the end of ${2#"$tmp"/}:)" >&2
	tail -n 25 "$2" >&2
	exit 1
}

row() { # NAME VERDICT SECONDS [NOTE]
	printf '%-40s %-8s %7s' "$1" "$2" "$3"
	[ -z "${4:-}" ] || printf '  %s' "$4"
	printf '\n'
}

# CUDA only for a mutant in src/cuda/ (nvcc's builds are slow).
cuda=--without-cuda
for m in "${chosen[@]}"; do
	grep -q '^+++ b/src/cuda/' "$tree/tests/mutants/$m.diff" && cuda=
done

echo "# mutate.sh: $top -> $tmp, make -j$jobs, ${cuda:-with CUDA,} tests: ${tests:-the whole suite}"
t0=$SECONDS
blog=$logs/base.build.log
# shellcheck disable=SC2086 # $cuda is one word or none
if ! { autoreconf -fi && ./configure $cuda; } >"$blog" 2>&1 || ! build "$blog"; then
	fatal "the unmutated tree does not build" "$blog"
fi
if ! check "$logs/base.check.log"; then
	fatal "make check fails without a mutant (${failed:-no test FAILed}): fix that first" \
		"$logs/base.check.log"
fi
echo "# unmutated tree: built and passed in $((SECONDS - t0)) s"
row "# mutant" verdict seconds "failed tests"

killed=0
counted=0
survivors=()
for m in "${chosen[@]}"; do
	diff=$tree/tests/mutants/$m.diff
	t0=$SECONDS
	blog=$logs/$m.build.log
	if ! patch -p1 -N -f --fuzz=0 --dry-run <"$diff" >"$blog" 2>&1; then
		row "$m" STALE - "no longer applies (patch -p1 --dry-run)"
		continue
	fi
	patch -p1 -N -f --fuzz=0 --no-backup-if-mismatch -s <"$diff" >>"$blog" 2>&1 ||
		fatal "$m: patch failed after its dry run" "$blog"
	if ! build "$blog"; then
		row "$m" BROKEN $((SECONDS - t0)) "$(grep -m1 -E 'error|Error' "$blog")"
	elif check "$logs/$m.check.log"; then
		counted=$((counted + 1))
		survivors+=("$m")
		row "$m" SURVIVED $((SECONDS - t0))
	else
		counted=$((counted + 1))
		killed=$((killed + 1))
		row "$m" KILLED $((SECONDS - t0)) "${failed:-(make check failed, no .trs says FAIL: see the log with --keep)}"
	fi
	if ! patch -R -p1 -f --fuzz=0 --no-backup-if-mismatch -s <"$diff" >>"$blog" 2>&1 ||
		! build "$blog"; then
		fatal "$m: reversing it or rebuilding after that failed" "$blog"
	fi
done

if [ $counted -gt 0 ]; then
	echo "kill rate: $killed of $counted ($((100 * killed / counted))%)"
else
	echo "kill rate: 0 of 0 (no mutant applied and compiled)"
fi
if [ ${#survivors[@]} -gt 0 ]; then
	echo "survivors: ${survivors[*]}"
else
	echo "survivors: none"
fi
[ $counted -gt 0 ] && [ $killed = $counted ]
