#!/bin/bash
# fuzz.sh [SECONDS] - build the libFuzzer targets of the two file readers and
# run each for SECONDS (default 60), seeded with the hostile-file corpus.
#
#   scripts/fuzz.sh 300          or          make fuzz FUZZ_SECONDS=300
#
# Needs clang with the libFuzzer runtime (Debian 12: apt-get install clang
# libclang-rt-14-dev); make check does not. Builds into ./fuzz-build (or
# $FUZZ_BUILD), keeps the inputs each fuzzer finds in fuzz-build/corpus-*, and
# leaves any crashing input as fuzz-build/crash-*. Exit status 1 if a target
# crashed, 2 if the tools are missing.
set -euo pipefail

SECONDS_EACH=${1:-60}
SRC=$(cd "$(dirname "$0")/.." && pwd)
OUT=${FUZZ_BUILD:-$PWD/fuzz-build}
CC=${FUZZ_CC:-clang}
# Address and undefined-behaviour sanitizers; any UB report stops the run.
FLAGS="-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"

mkdir -p "$OUT"
if ! echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }' >"$OUT/probe.c" ||
	! "$CC" $FLAGS "$OUT/probe.c" -o "$OUT/probe" 2>"$OUT/probe.log"; then
	echo "fuzz.sh: '$CC -fsanitize=fuzzer' does not work here ($(head -1 "$OUT/probe.log" 2>/dev/null));" \
		"install clang and libclang-rt-14-dev (Debian 12) or set FUZZ_CC" >&2
	exit 2
fi
JANSSON=$(pkg-config --cflags --libs jansson)

# Only the readers and the status helpers: the code that sees the bytes.
"$CC" $FLAGS -I"$SRC/src" "$SRC/tests/fuzz/fuzz_npy.c" "$SRC/src/data/npy.c" "$SRC/src/core/status.c" \
	-o "$OUT/fuzz_npy"
# shellcheck disable=SC2086
"$CC" $FLAGS -I"$SRC/src" "$SRC/tests/fuzz/fuzz_safetensors.c" "$SRC/src/store/safetensors.c" \
	"$SRC/src/core/status.c" $JANSSON -o "$OUT/fuzz_safetensors"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
for t in npy safetensors; do
	mkdir -p "$OUT/corpus-$t"
	echo "fuzz.sh: fuzz_$t for ${SECONDS_EACH}s"
	# The first directory receives new inputs; the committed corpus only seeds.
	if ! "$OUT/fuzz_$t" -max_total_time="$SECONDS_EACH" -print_final_stats=1 -max_len=16384 \
		-dict="$SRC/tests/fuzz/$t.dict" -artifact_prefix="$OUT/" \
		"$OUT/corpus-$t" "$SRC/tests/corpus" >"$OUT/fuzz_$t.log" 2>&1; then
		status=1
		echo "fuzz.sh: fuzz_$t FAILED; see $OUT/fuzz_$t.log and $OUT/crash-*" >&2
		grep -A20 -m1 'ERROR\|runtime error\|deadly signal' "$OUT/fuzz_$t.log" >&2 || true
	fi
	# The final statistics: runs, speed, coverage, corpus size.
	grep -E '^(stat::number_of_executed_units|stat::average_exec_per_sec|stat::peak_rss_mb|#[0-9]+.*DONE)' \
		"$OUT/fuzz_$t.log" | sed "s/^/fuzz_$t: /" || true
done
exit $status
