#!/bin/bash
# scripts/bench-network.sh --smoke: two hosts (network namespaces) over a 10 Gbit/s
# tbf link, the wide MLP for a few steps, no PyTorch. Timings are never judged: the row
# must be there with a number in every ddptrain column, and nothing the bench made (its
# namespaces, bridge and veths) may be left behind. Skips where the bench skips (not
# root, no namespaces, no tbf).
. "$(dirname "$0")/../lib/setup.sh"

BENCH=$TOP_SRCDIR/scripts/bench-network.sh
bash -n "$BENCH" || fail "syntax"
"$BENCH" --links=x >/dev/null 2>&1 && fail "--links=x accepted"
"$BENCH" --bogus >/dev/null 2>&1 && fail "--bogus accepted"

# The namespaces need the real launcher settings, not setup.sh's loopback-only ones.
unset OMPI_MCA_btl OMPI_MCA_pml OMPI_MCA_plm_rsh_agent
rc=0
timeout -k 5 120 "$BENCH" --smoke --no-torch --models=wide >"$TMPD/out" 2>"$TMPD/err" || rc=$?
[ "$rc" -ne 77 ] || skip "$(tail -n 1 "$TMPD/err")"
[ "$rc" -eq 0 ] || fail "exited $rc: $(tail -n 5 "$TMPD/err")"
cat "$TMPD/out"
num='[0-9]+\.[0-9]+'
grep -Eq "^  10 +wide +$num +$num +$num +$num +13\.43 +-?[0-9]+% +$num""x +- +- *$" "$TMPD/out" ||
	fail "no whole 10 Gbit/s row: $(grep '^  10' "$TMPD/out")"
# Issue 35's row: --zero=2 and --zero=3, each a number, and their ratio.
grep -Eq "^# 10 +wide +$num +$num +$num""x +(pass|miss)$" "$TMPD/out" ||
	fail "no whole --zero=2/--zero=3 row: $(grep -A3 'issue 35' "$TMPD/out")"
# The scaling model reads the same output: its fit covers the one measured point.
if command -v python3 >/dev/null; then
	python3 "$TOP_SRCDIR/scripts/scaling-model.py" "$TMPD/out" --no-predict >"$TMPD/model" 2>&1 ||
		fail "scaling-model.py: $(cat "$TMPD/model")"
	grep -q "^# fit error: .* over 2 figures" "$TMPD/model" || fail "scaling-model.py: $(cat "$TMPD/model")"
fi
# Its own bridge, veths and namespaces (named in its first line), not another run's.
br=$(sed -n 's/.*, on the bridge \(nb[0-9]*b\)$/\1/p' "$TMPD/err")
[ -n "$br" ] || fail "no bridge named on stderr: $(head -n 3 "$TMPD/err")"
left=
for _ in 1 2 3 4 5 6 7 8 9 10; do # the kernel may take a moment to remove a veth
	left=$(ip -o link show 2>/dev/null | grep -E " ${br%b}[bv][0-9]*[:@]" || true)
	left+=$(ip netns list 2>/dev/null | grep -E "^${br%b}h[12]( |$)" || true)
	[ -n "$left" ] || break
	sleep 0.2
done
[ -z "$left" ] || fail "left behind: $left"
echo "bench-network: ok"
