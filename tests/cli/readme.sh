#!/bin/bash
# The README against ddptrain today: its flag table names every flag of --help (and no
# other), each flag's default in its row; and what its shown outputs can say on any
# machine still holds: the demo's header, losses and all-reduce bytes, the 3-rank
# bucket table's layers, bytes and counts, and the divergence message it quotes.
# (Timings vary by machine and load: they are the README's to date, not this test's.)
. "$(dirname "$0")/../lib/setup.sh"
PY=${PYTHON:-/usr/bin/python3}
command -v "$PY" >/dev/null || skip "python3 ($PY) is needed to read the README"
README=$TOP_SRCDIR/README.md
cd "$TMPD" || fail "cd $TMPD"

# The flag table of "A quick tour of the flags".
"$DDPTRAIN" --help >help || fail "--help"
"$PY" - "$README" help <<'PYEOF' || fail "README.md's flag table and ddptrain --help disagree (above)"
import re, sys
readme, help_text = (open(p).read() for p in sys.argv[1:3])
flags = {}
for line in help_text.splitlines():
    m = re.match(r"  --([a-z0-9-]+)\S*\s.*?(?:\(default: (.*)\))?$", line)
    if m:
        flags[m.group(1)] = m.group(2)
section = readme.split("\n## A quick tour of the flags\n", 1)[1].split("\n## ", 1)[0]
rows = [l for l in section.splitlines() if l.startswith("| `--")]
assert rows, "no flag table"
seen, bad = {}, []
for row in rows:
    cells = [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]
    names = re.findall(r"(?<![a-z0-9-])--([a-z0-9-]+)", cells[0])
    items = {re.sub(r" \(.*\)$", "", i.strip().strip("`")) for i in cells[1].split(", ")}
    for n in names:
        seen[n] = row
        if n in flags and flags[n] is not None and flags[n] not in items:
            bad.append(f"--{n}: --help's default {flags[n]!r} is not in its row's {cells[1]!r}")
missing = sorted(set(flags) - set(seen))
extra = sorted(set(seen) - set(flags))
assert not missing, "the table lacks " + ", ".join("--" + f for f in missing)
assert not extra, "the table names flags --help does not: " + ", ".join("--" + f for f in extra)
assert not bad, "\n".join(bad)
print(f"flag table: {len(rows)} rows, the {len(flags)} flags of --help, their defaults")
PYEOF

# block AFTER: the first ``` block of the README after the line that starts with AFTER.
block() {
	awk -v after="$1" 'index($0, after) == 1 { on = 1; next }
		on && /^```/ { if (in_block) exit; in_block = 1; next } in_block { print }' "$README"
}

# The demo: every line of its header that names no process, host or time; the losses
# of its progress lines and summary (within 1e-5: another CPU's BLAS may round
# otherwise); the all-reduce's bytes per step and per bucket.
block "## What the demo prints" >demo.readme
[ -s demo.readme ] || fail "no demo output in the README"
run_mpi 2 >demo.out || fail "the demo failed"
for pat in '^# model ' '^# MSE loss' '^# buckets: ' '^#  epoch '; do
	want=$(grep -- "$pat" demo.readme) || fail "the README's demo has no line $pat"
	grep -qxF -- "$want" demo.out || fail "the demo no longer prints '$want': $(grep -- "$pat" demo.out)"
done
"$PY" - demo.readme demo.out <<'PYEOF' || fail "the README's demo output is stale (above)"
import re, sys
def read(p):
    text = open(p).read()
    loss = {m.group(1): float(m.group(2)) for m in re.finditer(r"(?m)^ +\d+ +(\d+)/\d+ +([0-9.]+) ", text)}
    first_final = [float(x) for x in re.search(r"# loss: first ([0-9.]+), final ([0-9.]+)", text).groups()]
    def table(title):  # the rows of the '#' table under the line starting with title
        m = re.search(r"(?m)^" + re.escape(title) + r".*\n#[^\n]*\n((?:# +\d+ [^\n]*\n)+)", text)
        return [l.split() for l in m.group(1).splitlines()] if m else []
    ar_kib = [r[5] for r in table("# ddp per rank:")]
    buckets = [r[2:5] for r in table("# all-reduce per bucket")]
    return loss, first_final, ar_kib, buckets
(rl, rff, rkib, rb), (ol, off, okib, ob) = read(sys.argv[1]), read(sys.argv[2])
assert rl, "no progress lines in the README's demo"
close = lambda a, b: abs(a - b) <= 1e-5 * abs(b) + 1e-6
bad = [f"step {s}: README {v}, today {ol.get(s)}" for s, v in rl.items() if s not in ol or not close(v, ol[s])]
bad += [f"loss first/final: README {rff}, today {off}"] if not all(map(close, rff, off)) else []
bad += [f"KiB all-reduced per step: README {rkib}, today {okib}"] if rkib != okib else []
bad += [f"buckets (layers, bytes, count): README {rb}, today {ob}"] if rb != ob else []
assert not bad, "\n".join(bad)
print(f"demo: {len(rl)} progress lines' losses, first and final loss, {len(rb)} bucket's bytes as the README shows")
PYEOF

# The 3-rank bucket table: layers, bytes and count of each bucket.
cmd="--layers=32,160,160,160,4 --bucket-mb=0.05 --batch-size=8 --max-steps=50"
grep -qF -- "-np 3 src/ddptrain $cmd" "$README" || fail "the README no longer shows the 3-rank command"
awk '/^# all-reduce per bucket.*n = 3\)$/ { on = 1; next } on && /^# +[0-9]/ { print $2, $3, $4, $5; next } on { if (n++) exit }' \
	"$README" >buckets.readme
[ "$(wc -l <buckets.readme)" -eq 3 ] || fail "the README's 3-rank table has $(wc -l <buckets.readme) bucket rows"
# shellcheck disable=SC2086 # $cmd is a list of flags
run_mpi 3 $cmd >buckets.out || fail "the 3-rank run failed"
awk '/^# all-reduce per bucket/ { on = 1; next } on && /^# +[0-9]/ { print $2, $3, $4, $5; next } on { if (n++) exit }' \
	buckets.out >buckets.today
diff buckets.readme buckets.today >buckets.diff ||
	fail "the README's 3-rank bucket table is stale (bucket layers bytes count; < README, > today): $(cat buckets.diff)"
echo "3-rank table: $(wc -l <buckets.today) buckets' layers, bytes and counts as the README shows"

# The divergence message the README quotes for --lr=1e6.
want=$(tr -s '\n ' '  ' <"$README" | grep -o 'ddptrain: loss is inf at step [0-9]* (epoch [0-9]*): training diverged; lower --lr' | head -n 1)
[ -n "$want" ] || fail "the README quotes no divergence message"
grep -qF -- "mpirun -np 2 ddptrain --lr=1e6" "$README" || fail "the README does not say which command diverges"
expect_fail 1 "$want" 2 --lr=1e6
echo "divergence: '$want' as quoted"
echo "readme: the flag table, the demo, the 3-rank table and the divergence message agree with ddptrain"
