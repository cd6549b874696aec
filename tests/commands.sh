#!/bin/bash
# Every external command the tests, scripts and CI call comes with a fresh Debian
# machine after scripts/install-deps.sh: from an Essential package, or from the
# packages install-deps.sh installs and what they depend on. (A test that calls
# pgrep, with procps missing from install-deps.sh, passes on a machine that has
# it and fails on a fresh one: this test fails first, naming the command.)
#
# Cheap and a little coarse: every word of the scripts' code (comments dropped)
# that names a program in the system's bin directories counts as a call, so a
# word that only appears in a message may need to be listed below as not a call.
. "$(dirname "$0")/lib/setup.sh"

command -v dpkg-query >/dev/null 2>&1 && command -v apt-cache >/dev/null 2>&1 ||
	skip "not a Debian system (no dpkg-query or apt-cache)"

cd "$TOP_SRCDIR" || fail "cd $TOP_SRCDIR"
# Optional: each call is guarded, so a machine without it skips or falls back.
optional="sudo srun sbatch scontrol salloc qsub qstat qrerun nvidia-smi nvcc clang"
# Words of the scripts that name a program here but are not calls of it.
not_calls="init node opt pip less openssl zip prometheus"

pkgs=$(sed -n '/^PKGS="/,/"$/p' scripts/install-deps.sh | tr -d '"\\' | sed 's/^PKGS=//')
[ -n "$pkgs" ] || fail "no PKGS=\"...\" in scripts/install-deps.sh"
essential=$(dpkg-query -W -f='${Package} ${Essential}\n' | awk '$2 == "yes" { print $1 }')
# What a fresh machine has: Essential, apt, install-deps.sh's packages and their
# dependencies (install-deps.sh installs without recommends).
# shellcheck disable=SC2086
apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
	--no-enhances $pkgs apt $essential 2>/dev/null | grep -v '^ ' | sort -u >"$TMPD/have"
[ "$(wc -l <"$TMPD/have")" -gt 50 ] || skip "apt-cache knows too few packages here (no package lists?)"

files=(tests/*.sh tests/lib/*.sh scripts/*.sh scripts/slurm/* scripts/pbs/* .ci/run completion/ddptrain.bash)
sed -e 's/^[[:space:]]*#.*//' -e 's/[[:space:]]#[[:space:]].*//' "${files[@]}" |
	grep -o '[A-Za-z_][A-Za-z0-9_.+-]*' | sort -u >"$TMPD/words"
: >"$TMPD/paths"
n=0
while read -r w; do
	case " $optional $not_calls " in *" $w "*) continue ;; esac
	case $(type -t "$w") in builtin | keyword) continue ;; esac
	for d in /usr/sbin /usr/bin /sbin /bin; do
		if [ -f "$d/$w" ] && [ -x "$d/$w" ]; then
			p=$(readlink -f "$d/$w")
			# dpkg knows a merged-/usr file by the path its package ships
			printf '%s %s\n%s %s\n' "$w" "$p" "$w" "${p#/usr}" >>"$TMPD/paths"
			n=$((n + 1))
			break
		fi
	done
done <"$TMPD/words"
[ "$n" -ge 30 ] || fail "only $n commands found in the scripts: the word scan is broken"

# dpkg -S PATH... prints "package: path" for the paths it knows.
cut -d' ' -f2 "$TMPD/paths" | xargs dpkg -S 2>/dev/null | sed 's/^\([^:]*\)\(:[a-z0-9]*\)*: /\1 /' >"$TMPD/owners"
bad=
while read -r w p; do
	read -r _ p2 # the same command's other spelling of the path
	pkg=$(awk -v p="$p" -v q="$p2" '$2 == p || $2 == q { print $1; exit }' "$TMPD/owners")
	pkg=${pkg%%,*}
	if [ -z "$pkg" ]; then
		bad="$bad
  $w ($p, installed by no Debian package)"
	elif ! grep -qx "$pkg" "$TMPD/have"; then
		bad="$bad
  $w ($p, package $pkg)"
	fi
done <"$TMPD/paths"
[ -z "$bad" ] || fail "commands the scripts call that a fresh Debian machine lacks after scripts/install-deps.sh (add the package to its PKGS, or list the word in tests/commands.sh if it is optional or not a call):$bad"
echo "commands: $n commands the tests, scripts and CI call, each from Essential or install-deps.sh's packages"
