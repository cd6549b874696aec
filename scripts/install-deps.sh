#!/bin/sh
# Install every Debian package that building and testing ddptrain needs.
# Idempotent and non-interactive; run as root (or it re-runs itself with sudo).
set -eu

# Every command the tests and scripts call is either in Debian's Essential set or
# comes with one of these (tests/cluster/commands.sh checks that): procps gives pgrep,
# mount gives mount/umount, man-db gives man, git is what .ci/run clones with,
# prometheus gives promtool (tests/observe/promtool.sh), strace counts the writes of a
# line (tests/failures/hangs.sh).
PKGS="build-essential autoconf automake libtool pkg-config \
openmpi-bin libopenmpi-dev libopenblas-dev libjansson-dev libssl-dev libcmocka-dev \
groff-base mandoc man-db python3 perl iproute2 util-linux mount procps git gnuplot-nox valgrind strace time shfmt \
prometheus slurmctld slurmd slurm-client munge"

if [ "$(id -u)" -ne 0 ]; then
	exec sudo "$0" "$@"
fi

missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
	echo "install-deps: all packages present"
	exit 0
fi
echo "install-deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing
