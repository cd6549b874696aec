#!/bin/bash
# packaging/run-dockerfile.sh DOCKERFILE - run a Dockerfile's ENV and RUN steps here,
# in the current directory (the source tree that COPY . . would copy), as a stand-in
# for `docker build` where no Docker engine is available (CI in a fresh root).
# FROM, WORKDIR, COPY, ARG and CMD are skipped: the caller provides the machine
# and the tree. Stops at the first failing RUN step with its exit code.
set -euo pipefail
[ $# -eq 1 ] && [ -f "$1" ] || { echo "usage: $0 DOCKERFILE" >&2; exit 2; }
# Join continuation lines, drop comments.
steps=$(sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$1" | grep -Ev '^[[:space:]]*(#|$)')
n=0
while IFS= read -r line; do
	case $line in
	ENV\ *)
		# ENV KEY=VALUE [KEY=VALUE...] (values without spaces)
		for kv in ${line#ENV }; do export "${kv?}"; done ;;
	RUN\ *)
		n=$((n + 1))
		echo "run-dockerfile: step $n: ${line#RUN }"
		# stdin from /dev/null: mpirun would read the rest of the steps from it
		bash -euo pipefail -c "${line#RUN }" </dev/null ||
			{ rc=$?; echo "run-dockerfile: step $n failed ($rc)" >&2; exit "$rc"; } ;;
	esac
done <<<"$steps"
echo "run-dockerfile: $1: $n RUN steps passed"
