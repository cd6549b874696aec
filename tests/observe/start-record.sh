#!/bin/bash
# The --metrics "start" record names every setting of the option table: its "config"
# keys are the flags of --help (made from the table) less --help, --version and
# --no-shuffle (--shuffle's value), plus "data"; no value is "?"; and each value is the
# text that sets it again: a run given the record's values back records the same ones.
. "$(dirname "$0")/../lib/setup.sh"
PY=${PYTHON:-/usr/bin/python3}
command -v "$PY" >/dev/null || skip "python3 ($PY) is needed to read the metrics"
cd "$TMPD" || fail "cd $TMPD"

# "--flag" for a switch, "--flag=" for a flag that takes a value.
"$DDPTRAIN" --help | sed -n 's/^  \(--[a-z0-9-]*\)\(=\)\{0,1\}.*/\1\2/p' >flags
[ "$(wc -l <flags)" -gt 40 ] || fail "too few flags in --help: $(cat flags)"

# check RECORD: the start record's config against the table; prints the flags that set
# every value again (a switch given when on, --no-shuffle for shuffle off, a value flag
# unless empty; --metrics left to the caller).
check() {
	"$PY" - "$1" flags <<'PYEOF'
import json, sys
start = json.loads(open(sys.argv[1]).readline())
assert start["type"] == "start", start
cfg = start["config"]
flags = [l.strip() for l in open(sys.argv[2])]
table = {f.lstrip("-").rstrip("="): f.endswith("=") for f in flags}
# --no-shuffle and --tf32 are recorded as what they set (shuffle, precision)
for gone in ("help", "version", "no-shuffle", "tf32"):
    del table[gone]
keys = set(cfg) - {"data"}
missing, extra = sorted(set(table) - keys), sorted(keys - set(table))
assert not missing and not extra, "config lacks %s, has extra %s" % (missing, extra)
unknown = sorted(k for k, v in cfg.items() if v == "?")
assert not unknown, "config values '?': %s" % unknown
args = []
for k, takes_value in table.items():
    v = cfg[k]
    if k == "metrics":
        continue
    if takes_value:
        if v != "":
            args.append("--%s=%s" % (k, v))
    elif k == "shuffle":
        args.append("--shuffle" if v == "1" else "--no-shuffle")
    else:
        assert v in ("0", "1"), "switch --%s recorded as %r" % (k, v)
        if v == "1":
            args.append("--" + k)
print("\n".join(args))
PYEOF
}

# same A B: the two records' settings agree, --metrics aside.
same() {
	"$PY" - "$1" "$2" <<'PYEOF'
import json, sys
a, b = (json.loads(open(p).readline())["config"] for p in sys.argv[1:3])
for c in (a, b):
    del c["metrics"]
diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
assert not diff, "given back, these settings changed: %s" % ", ".join(
    "%s %r -> %r" % (k, a.get(k), b.get(k)) for k in diff)
PYEOF
}

# The defaults, then settings away from them (dp, frozen layer, a trace window, switches on).
n=0
for set in "" "--mode=dp --replicas=2 --freeze=1 --trace-steps=2: --momentum=0.5 --nesterov --no-shuffle --drop-last --no-overlap --log-every=1"; do
	n=$((n + 1))
	# shellcheck disable=SC2086 # $set is a list of flags
	"$DDPTRAIN" --max-steps=2 --quiet $set --metrics=a$n.jsonl || fail "run $n failed: $set"
	args=$(check a$n.jsonl) || fail "start record of run $n (${set:-defaults}): see above"
	mapfile -t again <<<"$args"
	"$DDPTRAIN" "${again[@]}" --metrics=b$n.jsonl || fail "run $n given its record back failed: ${again[*]}"
	same a$n.jsonl b$n.jsonl || fail "run $n (${set:-defaults}): the record does not set itself again"
	echo "run $n (${set:-defaults}): $(($(wc -l <flags) - 3)) settings, given back: ${#again[@]} flags, the same record"
done
echo "start-record: the config keys are the option table's flags, none '?', each value sets itself again"
