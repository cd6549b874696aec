#!/bin/bash
# man/ddptrain.1 and --help list the same flags with the same defaults, the
# page renders without warnings, and man finds and shows it.
. "$(dirname "$0")/../lib/setup.sh"

[ -f "$MANPAGE" ] || fail "no man page at $MANPAGE"

# --help: "  --flag[=ARG]   text (default: X)"
"$DDPTRAIN" --help | sed -n 's/^  --\([a-z0-9-]*\).*/\1/p' | sort >"$TMPD/help-flags"
"$DDPTRAIN" --help | sed -n 's/^  --\([a-z0-9-]*\).*(default: \(.*\))$/\1 \2/p' | sort >"$TMPD/help-defaults"

# man: ".TP" then ".B \-\-flag" or ".BI \-\-flag= ARG"; "Default: X." within the item.
awk '
	/^\.TP/ { tp = 1; next }
	tp && /^\.BR? \\-\\-|^\.BI \\-\\-/ {
		s = $2; gsub(/\\-/, "-", s); sub(/^--/, "", s); sub(/=.*/, "", s); flag = s; print "F " flag
	}
	{ tp = 0 }
	flag != "" && /^Default: / { d = $0; sub(/^Default: /, "", d); sub(/[.]$/, "", d); sub(/ \(.*$/, "", d); print "D " flag " " d; flag = "" }
	/^\.SH/ && $2 != "OPTIONS" { if (inopt) exit } /^\.SH OPTIONS/ { inopt = 1 }
' "$MANPAGE" >"$TMPD/man-items"
grep '^F ' "$TMPD/man-items" | cut -d' ' -f2 | sort >"$TMPD/man-flags"
grep '^D ' "$TMPD/man-items" | cut -d' ' -f2- | sort >"$TMPD/man-defaults"

diff -u "$TMPD/help-flags" "$TMPD/man-flags" || fail "flags differ between --help (-) and the man page (+)"
diff -u "$TMPD/help-defaults" "$TMPD/man-defaults" || fail "defaults differ between --help (-) and the man page (+)"
[ "$(wc -l <"$TMPD/help-flags")" -ge 25 ] || fail "too few flags parsed from --help"

# Renders without warnings.
warn=$(groff -man -ww -z "$MANPAGE" 2>&1) || fail "groff failed: $warn"
[ -z "$warn" ] || fail "groff warnings: $warn"
if command -v mandoc >/dev/null; then
	lint=$(mandoc -Tlint -W warning "$MANPAGE" 2>&1) || fail "mandoc -Tlint: $lint"
fi
# man reads it: from the build tree with man -l, and by name once it is where
# make install puts it (a MANPATH here stands in for $(mandir)).
command -v man >/dev/null 2>&1 || fail "no man command (scripts/install-deps.sh installs man-db)"
MANWIDTH=80 man -l "$MANPAGE" >"$TMPD/man-l" 2>"$TMPD/err" || fail "man -l $MANPAGE: $(cat "$TMPD/err")"
grep -q "data-parallel training" "$TMPD/man-l" || fail "man -l rendered: $(head -n 5 "$TMPD/man-l")"
mkdir -p "$TMPD/man/man1"
cp "$MANPAGE" "$TMPD/man/man1/ddptrain.1"
[ "$(MANPATH=$TMPD/man man -w ddptrain 2>&1)" = "$TMPD/man/man1/ddptrain.1" ] ||
	fail "man -w ddptrain found: $(MANPATH=$TMPD/man man -w ddptrain 2>&1)"
MANPATH=$TMPD/man MANWIDTH=80 man ddptrain >"$TMPD/man-name" 2>"$TMPD/err" || fail "man ddptrain: $(cat "$TMPD/err")"
cmp -s "$TMPD/man-l" "$TMPD/man-name" || fail "man ddptrain and man -l differ"
# What --help says about abbreviations, the page says too.
grep -q "abbreviated to any prefix that names only it" "$MANPAGE" || fail "the page does not say abbreviations are taken"
echo "manpage: $(wc -l <"$TMPD/help-flags") flags and $(wc -l <"$TMPD/help-defaults") defaults agree"
