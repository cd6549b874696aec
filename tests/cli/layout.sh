#!/bin/bash
# layout.sh - the README's Layout section is what scripts/layout.sh makes of the tree
# today: a file added, moved or described anew shows there, or this fails.
. "$(dirname "$0")/../lib/setup.sh"

README=$TOP_SRCDIR/README.md
grep -q '^<!-- layout: made by scripts/layout.sh -->$' "$README" || fail "README.md has no layout marker"
awk '/^<!-- layout: made by scripts\/layout.sh -->$/ { on = 1; next }
     on { print; if (/^```$/ && ++f == 2) exit }' "$README" >"$TMPD/have"
bash "$TOP_SRCDIR/scripts/layout.sh" >"$TMPD/want" || fail "scripts/layout.sh failed"
diff -u "$TMPD/have" "$TMPD/want" >"$TMPD/diff" ||
	fail "README.md's Layout is out of date (scripts/layout.sh --update): $(head -n 20 "$TMPD/diff")"
echo "layout: README.md lists the $(grep -cE '^    [a-z_]+\.(c|cu) ' "$TMPD/want") files of src/ as they are"
