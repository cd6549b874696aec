#!/bin/bash
# layout.sh - the README's Layout section, made from the tree: each wing of src/ from
# the top floor down (doc/ARCHITECTURE.md), and in it each source file with the first
# sentence of its opening comment. One list, derived: tests/cli/layout.sh fails when the
# README's copy differs.
#
#   scripts/layout.sh            print the block
#   scripts/layout.sh --update   rewrite the block in README.md in place
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top/src"

# The wings, top floor first, and what each is (its main header says more).
wings=(
	"main.c|parse, start the world, run one session, choose the exit code"
	"run/|the session: options, settings, placement, preflight, persist, observers, overview"
	"train/|the gradient plan, the gradient-sync strategies, the ddp and dp training loops, the replica check"
	"observe/|report, trace, stragglers, Prometheus"
	"cuda/|the CUDA module (dlopen'd): cuBLAS and kernels, NCCL"
	"store/|safetensors and checkpoints"
	"comm/|MPI world, communicators, the host collective algorithms"
	"data/|data sets, DistributedSampler, the loader"
	"model/|model, loss, optimizer, schedule, ZeRO's shard plan"
	"backend/|the compute interface, the CPU backend, the GPU probe and module loader"
	"core/|status, clock, signals, rng, digests, files, the atomic writer, trace buffers"
)
# A folder of src/ missing above would drop out of the README unnoticed.
for d in */; do
	case " ${wings[*]} " in
	*" $d|"*) ;;
	*) echo "layout.sh: src/$d is no wing of this list: add it" >&2; exit 1 ;;
	esac
done

# The first sentence of a file's opening comment, without its "name - ".
summary() {
	awk 'NR == 1 && !/^\/\*/ { exit }
	     { line = $0; sub(/^\/\* */, "", line); sub(/^ *\*\/? ?/, "", line); sub(/\*\/.*$/, "", line) }
	     NR > 1 && line == "" { exit }
	     { text = text (text == "" ? "" : " ") line }
	     /\*\// { exit }
	     END { sub(/^[^ ]+ - /, "", text); n = index(text, ". "); if (n) text = substr(text, 1, n); print text }' "$1"
}

block() {
	local w dir what f
	echo '```'
	for w in "${wings[@]}"; do
		dir=${w%%|*} what=${w#*|}
		if [ "$dir" = main.c ]; then
			printf 'src/%-22s %s\n' main.c "$what"
			continue
		fi
		printf 'src/%-22s %s\n' "$dir" "$what"
		for f in "$dir"*.c "$dir"*.cu; do
			[ -e "$f" ] || continue
			summary "$f" | fold -s -w 72 | sed '1s/^/    '"$(printf '%-22s' "${f#"$dir"}")"' /; 2,$s/^/                           /; s/ *$//'
		done
	done
	echo '```'
}

if [ "${1:-}" = --update ]; then
	tmp=$(mktemp "$top/README.md.XXXXXX")
	trap 'rm -f "$tmp"' EXIT
	awk -v blk="$(block)" '
		/^<!-- layout: made by scripts\/layout.sh -->$/ { print; print blk; skip = 1; next }
		skip && /^```$/ { if (++fences == 2) { skip = 0 } ; next }
		!skip { print }' "$top/README.md" >"$tmp"
	mv "$tmp" "$top/README.md"
	trap - EXIT
else
	block
fi
