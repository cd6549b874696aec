#!/bin/bash
# scripts/bench.sh prints its whole table and the same rows as JSON (a --smoke run: one
# run per row, a few steps, no PyTorch); torch_ddp_bench.py prints the summary line the
# bench parses, when /usr/bin/python3 has torch. Timings are never judged here: a row's
# figures must be there and be numbers, whatever they are.
. "$(dirname "$0")/../lib/setup.sh"

BENCH=$TOP_SRCDIR/scripts/bench.sh
bash -n "$BENCH" || fail "syntax"
export SGEMM_CEILING=$TESTS_BUILDDIR/../bench/sgemm_ceiling MPI_FLOOR=$TESTS_BUILDDIR/../bench/mpi_floor
[ -x "$SGEMM_CEILING" ] && [ -x "$MPI_FLOOR" ] || fail "bench/sgemm_ceiling and bench/mpi_floor are not built"

timeout -k 5 120 "$BENCH" --smoke --no-torch --json "$TMPD/bench.json" >"$TMPD/out" 2>"$TMPD/err" ||
	fail "exited $?: $(tail -n 5 "$TMPD/err")"
cat "$TMPD/out"

num='[0-9]+(\.[0-9]+)?'
# ROW UNIT AGAINST: the row, its unit, a number, what it is compared with (- for nothing),
# no PyTorch figure, and a result
# check_rows: each line of stdin, ROW UNIT AGAINST, is a row of the table
check_rows() {
	while read -r id unit against; do
		line=$(grep -E "^  ${id//./\\.} " "$TMPD/out") || fail "no row $id"
		# a figure that is a difference (a check's share of a step) may come out below 0 in noise
		[[ $line =~ \ $unit\ +-?$num\ +([^ ].*)$ ]] || fail "row $id: no $unit figure: $line"
		rest=${BASH_REMATCH[2]}
		if [ "$against" = - ]; then
			[[ $rest =~ ^-\ +-\ +-\ +-\ +- ]] || fail "row $id: a comparison from nowhere: $line"
		else
			[[ $rest =~ ^$against\ +$num\ +[-+]?$num(x|%)?\ +-\ +- ]] || fail "row $id: no comparison with $against: $line"
		fi
		[[ $line =~ \ (pass|miss|-)$ ]] || fail "row $id: no result: $line"
	done
}
check_rows <<'EOF'
toy.np1 us/step -
toy.np1.noov us/step overlap
toy.np2 us/step -
toy.np2.noov us/step overlap
toy.np4 us/step -
toy.np4.noov us/step overlap
wide.np1 samples/s -
wide.np2 samples/s -
wide.weak % -
wide.gflops.np1 GFLOP/s SGEMM
wide.gflops.np2 GFLOP/s SGEMM
wide.compute.np2 GFLOP/s SGEMM
toy.dp2 samples/s dp
wide.dp2 samples/s dp
toy.np2.trace us/step trace off
wide.np2.trace samples/s trace off
synth.np1 ms/step .npy
synth.unbound ms/step .npy
synth.wait ms/step -
npy.wait ms/step -
job.wall s MPI floor
job.wall.mpi s MPI floor
job.wall.shm s MPI floor
job.rss MiB MPI floor
EOF
# Issue 22's rows, where this ddptrain has --zero; else the line saying they were not run
nrows=24
if "$DDPTRAIN" --help 2>&1 | grep -q -- --zero; then
	nrows=37
	check_rows <<'EOF'
big.opt.np2.z1 MiB ddp
big.state.np2.z1 MiB ddp
big.opt.np2.z2 MiB ddp
big.state.np2.z2 MiB ddp
big.grad.np2.z2 MiB ddp
big.opt.np4.z1 MiB ddp
big.state.np4.z1 MiB ddp
big.opt.np4.z2 MiB ddp
big.state.np4.z2 MiB ddp
big.grad.np4.z2 MiB ddp
wide.np2.z1 ms/step ddp
wide.np2.z2 ms/step ddp
wide.best.gflops GFLOP/s SGEMM
EOF
	# issue 35's, where it has --zero=3
	if "$DDPTRAIN" --help 2>&1 | grep -q -- '--zero=[0-9|]*3'; then
		nrows=40
		check_rows <<'EOF'
big.kept.np4.z3 MiB ddp
big.work.np4.z3 MiB -
wide.np2.z3 ms/step --zero=2
EOF
	fi
else
	grep -q "^# issue 22's rows (--zero, state per rank): not run" "$TMPD/out" || fail "no line saying the issue-22 rows were not run"
fi
# Issue 35's rows, where this ddptrain has --check-replicas
if "$DDPTRAIN" --help 2>&1 | grep -q -- --check-replicas; then
	nrows=$((nrows + 3))
	check_rows <<'EOF'
check.toy us/step check off
check.wide1 ms/step check off
check.wide100 % -
EOF
fi
[ "$(grep -c '^  [a-z]' "$TMPD/out")" -eq $nrows ] || fail "not $nrows rows"
grep -Eq "^# SGEMM, 1 thread, .*FLOP-weighted ceiling $num$" "$TMPD/out" || fail "no SGEMM line"
grep -q '^# PyTorch: not run' "$TMPD/out" || fail "no PyTorch line"
grep -q '^# \*: against the issue' "$TMPD/out" || fail "no footnote for the issue's PyTorch figures"

# The JSON: the same rows, each with its figure and its runs
[ "$(grep -c '{"id": ' "$TMPD/bench.json")" -eq $nrows ] || fail "not $nrows rows in the JSON"
# (signed: a difference such as check.wide100's share of a step is noise around 0 and may be below it)
[ "$(grep -Ec "\"ddptrain\": -?$num, \"runs\": \\[-?$num\\]" "$TMPD/bench.json")" -eq $nrows ] ||
	fail "a JSON row without its figure: $(grep -Ev '"ddptrain": -?[0-9]' "$TMPD/bench.json" | grep '"id"')"
if command -v python3 >/dev/null 2>&1; then
	python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert len(d["rows"]) == int(sys.argv[2])' \
		"$TMPD/bench.json" "$nrows" || fail "the JSON does not parse"
fi

"$BENCH" --reps=0 >/dev/null 2>&1 && fail "--reps=0 accepted"
"$BENCH" --bogus >/dev/null 2>&1 && fail "--bogus accepted"

# PyTorch's side, when there is one: 2 ranks, 2 steps, the summary line bench.sh reads
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
	port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	timeout -k 5 120 mpirun --oversubscribe -np 2 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT="$port" \
		/usr/bin/python3 "$TOP_SRCDIR/scripts/torch_ddp_bench.py" --steps=2 --warmup=1 >"$TMPD/torch" 2>&1 ||
		fail "torch_ddp_bench.py: $(tail -n 5 "$TMPD/torch")"
	cat "$TMPD/torch"
	grep -Eq "^# summary: mode=torch-ddp replicas=2 steps=2 seconds=$num samples_per_s=$num ms_per_step=$num " \
		"$TMPD/torch" || fail "torch_ddp_bench.py: no summary line"
else
	echo "torch_ddp_bench.py: not run (/usr/bin/python3 has no torch)"
fi
echo "bench: ok"
