#!/bin/bash
# layering.sh - src/ is built in wings, each a directory, and a wing includes only its
# own headers and those of the wings below it (doc/ARCHITECTURE.md):
#
#   6  main.c
#   5  run/       the session: options, settings, placement, preflight, persist
#   4  train/     the gradient plan and sync strategies, the trainers
#   3  observe/   report, trace, stragglers, Prometheus     cuda/ (the dlopen'd module)
#                                                            store/ (safetensors, checkpoints)
#   2  data/      data sets, sampler, loader                 comm/ (world, communicators)
#                                                            model/ (model, loss, optimizer,
#                                                            schedule, ZeRO's shard plan)
#   1  backend/   the compute ops tables, the GPU probe
#   0  core/      status, clock, signals, files, spans
#
# Wings on one floor never include each other. Every #include "x/y.h" of a file under
# src/ (and the module's own cuda_*.h) is checked; a header that is not there fails too.
. "$(dirname "$0")/../lib/setup.sh"

declare -A floor=([core]=0 [backend]=1 [data]=2 [comm]=2 [model]=2 [observe]=3 [cuda]=3 [store]=3 [train]=4 [run]=5 [main]=6)
cd "$TOP_SRCDIR/src"
bad=0 n=0
for f in main.c */*.c */*.h */*.cu; do
	[ -f "$f" ] || continue
	w=${f%%/*}
	[ "$f" = main.c ] && w=main
	[ -n "${floor[$w]+x}" ] || { echo "layering: $f is in src/$w/, which is no wing"; bad=1; continue; }
	while IFS= read -r inc; do
		n=$((n + 1))
		case $inc in
		config.h) continue ;;          # configure's, in the build tree
		cuda_ctx.h | cuda_module.h)   # the module's own, beside it
			[ "$w" = cuda ] || { echo "layering: $f includes the CUDA module's $inc"; bad=1; }
			continue ;;
		*/*) ;;
		*) echo "layering: $f includes \"$inc\": name its wing (\"wing/$inc\")"; bad=1; continue ;;
		esac
		iw=${inc%%/*}
		[ -f "$inc" ] || { echo "layering: $f includes $inc, which does not exist"; bad=1; continue; }
		[ -n "${floor[$iw]+x}" ] || { echo "layering: $f includes $inc from no wing"; bad=1; continue; }
		if [ "$iw" != "$w" ] && [ "${floor[$iw]}" -ge "${floor[$w]}" ]; then
			echo "layering: $f ($w, floor ${floor[$w]}) includes $inc ($iw, floor ${floor[$iw]})"
			bad=1
		fi
	done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done
[ "$bad" = 0 ] || fail "an include runs up or across the wings (above)"
echo "layering: $n includes in $(ls main.c */*.[ch] */*.cu | wc -l) files, none runs up or across"
