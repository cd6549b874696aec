#!/bin/bash
# Every external command the tests, scripts and CI call comes with a fresh Debian
# machine after scripts/install-deps.sh: from an Essential package, or from the
# packages install-deps.sh installs and what they depend on. (A test that calls
# pgrep, with procps missing from install-deps.sh, passes on a machine that has
# it and fails on a fresh one: this test fails first, naming the command.)
#
# A call is a word in command position, as shfmt parses the scripts
# (tests/lib/shell_calls.py says where it looks); a word in a message, a case pattern
# or a Python heredoc is not, so a machine with more packages (ImageMagick's compare,
# convert, import and stream, xdg-utils' open, prometheus) passes as a fresh one does.
# The first checks show that on stand-in commands: extra programs named like words of
# the scripts change nothing, and the same names called are caught.
. "$(dirname "$0")/../lib/setup.sh"

command -v dpkg-query >/dev/null 2>&1 && command -v apt-cache >/dev/null 2>&1 ||
	skip "not a Debian system (no dpkg-query or apt-cache)"
command -v shfmt >/dev/null 2>&1 || skip "no shfmt to parse the scripts (apt-get install shfmt; install-deps.sh has it)"
command -v python3 >/dev/null 2>&1 || skip "no python3"
CALLS="python3 $TOP_SRCDIR/tests/lib/shell_calls.py"

cd "$TOP_SRCDIR" || fail "cd $TOP_SRCDIR"
# Optional: each call is guarded, so a machine without it skips or falls back.
optional="sudo srun sbatch scontrol salloc qsub qstat qrerun nvidia-smi nvcc clang"

pkgs=$(sed -n '/^PKGS="/,/"$/p' scripts/install-deps.sh | tr -d '"\\' | sed 's/^PKGS=//')
[ -n "$pkgs" ] || fail "no PKGS=\"...\" in scripts/install-deps.sh"
essential=$(dpkg-query -W -f='${Package} ${Essential}\n' | awk '$2 == "yes" { print $1 }')
# What a fresh machine has: Essential, apt, install-deps.sh's packages and their
# dependencies (install-deps.sh installs without recommends).
# shellcheck disable=SC2086
apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
	--no-enhances $pkgs apt $essential 2>/dev/null | grep -v '^ ' | sort -u >"$TMPD/have"
[ "$(wc -l <"$TMPD/have")" -gt 50 ] || skip "apt-cache knows too few packages here (no package lists?)"

# judge DIRS FILE...: the commands FILE... call that the program directories DIRS hold
# and a fresh machine lacks, one per line ("name (path, why) at file:line"), in
# $TMPD/bad; $n: how many distinct commands were found in DIRS.
judge() {
	local dirs=$1 w where p d
	shift
	$CALLS "$@" >"$TMPD/calls" || fail "tests/lib/shell_calls.py could not read the scripts"
	: >"$TMPD/paths"
	n=0
	# The first call of each command names where it is.
	sort -k1,1 -s "$TMPD/calls" | awk '!seen[$1]++' >"$TMPD/first"
	while read -r w where; do
		case " $optional " in *" $w "*) continue ;; esac
		case $(type -t -- "$w" 2>/dev/null) in builtin | keyword) continue ;; esac
		p=
		case $w in
		/*) [ ! -f "$w" ] || [ ! -x "$w" ] || p=$w ;;
		*/*) ;; # a path in the source tree or the build
		*)
			for d in $dirs; do
				if [ -f "$d/$w" ] && [ -x "$d/$w" ]; then p=$d/$w && break; fi
			done
			;;
		esac
		[ -n "$p" ] || continue
		p=$(readlink -f "$p")
		# dpkg knows a merged-/usr file by the path its package ships
		printf '%s %s %s\n%s %s %s\n' "$w" "$p" "$where" "$w" "${p#/usr}" "$where" >>"$TMPD/paths"
		n=$((n + 1))
	done <"$TMPD/first"
	# dpkg -S PATH... prints "package: path" for the paths it knows.
	cut -d' ' -f2 "$TMPD/paths" | xargs -r dpkg -S 2>/dev/null | sed 's/^\([^:]*\)\(:[a-z0-9]*\)*: /\1 /' >"$TMPD/owners"
	: >"$TMPD/bad"
	while read -r w p where; do
		read -r _ p2 _ # the same command's other spelling of the path
		pkg=$(awk -v p="$p" -v q="$p2" '$2 == p || $2 == q { print $1; exit }' "$TMPD/owners")
		pkg=${pkg%%,*}
		if [ -z "$pkg" ]; then
			echo "$w ($p, installed by no Debian package) at $where" >>"$TMPD/bad"
		elif ! grep -qx "$pkg" "$TMPD/have"; then
			echo "$w ($p, package $pkg) at $where" >>"$TMPD/bad"
		fi
	done <"$TMPD/paths"
}

system_dirs="/usr/sbin /usr/bin /sbin /bin"
files=(tests/*/*.sh scripts/*.sh scripts/slurm/* scripts/pbs/* .ci/run completion/ddptrain.bash)

# A machine with more packages: programs named like words the scripts only mention
# (installed by no package, so each would be reported if it counted as a call).
X=$TMPD/extra-bin
mkdir -p "$X"
extra="compare convert import open stream prometheus display identify edit see print w"
for c in $extra; do printf '#!/bin/sh\nexit 0\n' >"$X/$c" && chmod +x "$X/$c"; done
judge "$X $system_dirs" "${files[@]}"
! grep -q "installed by no Debian package" "$TMPD/bad" ||
	fail "words that are not calls counted as calls of extra programs: $(grep "installed by no" "$TMPD/bad")"
# The same names called are caught, wherever the call stands; named in text, they are not.
# (No #! line: this file's own scan would read the heredoc as a script it writes.)
cat >"$TMPD/calls-them.sh" <<'EOF'
echo "compare, convert, import, open, stream: words in a message" # and prometheus here
case $1 in display) ;; esac
python3 - <<'PY'
import os; print(open("/dev/null").read())
PY
compare a b
x=$(timeout -k 1 5 convert y)
env A=1 import z | cat
mpirun --oversubscribe -np 2 bash -c 'stream q; exit 0'
bash <<'SH'
open file
SH
cmd=(prometheus --web.listen-address=:0)
EDIT="identify -verbose"
$EDIT z
find . -name x -exec see {} \;
EOF
judge "$X $system_dirs" "$TMPD/calls-them.sh"
got=$(sed -n 's/^\([^ ]*\) (.*installed by no Debian package) at [^:]*:\([0-9]*\)$/\1:\2/p' "$TMPD/bad" | sort | tr '\n' ' ')
want="compare:6 convert:7 identify:15 import:8 open:11 prometheus:13 see:16 stream:9 "
[ "$got" = "$want" ] || fail "calls of extra programs: got '$got', want '$want'"
echo "commands: extra programs named like words of the scripts ($extra) change nothing; called, each is caught"

judge "$system_dirs" "${files[@]}"
[ "$n" -ge 30 ] || fail "only $n commands found in the scripts: the scan is broken"
[ ! -s "$TMPD/bad" ] || fail "commands the scripts call that a fresh Debian machine lacks after scripts/install-deps.sh (add the package to its PKGS, or to the optional ones in tests/cluster/commands.sh if each call is guarded):
$(sed 's/^/  /' "$TMPD/bad")"
echo "commands: $n commands the tests, scripts and CI call, each from Essential or install-deps.sh's packages"
