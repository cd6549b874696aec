#!/bin/bash
# A real multi-host run: two "hosts" made of network namespaces (own address,
# own host name) joined by a bridge, Open MPI's rsh launcher entering them
# through an agent script, and TCP between all ranks. A 2-host x 2-rank DDP run
# must end with the weights of the single-host 4-rank run (relative error at
# most 1e-5), and the node-local rank count must be per host: rank 0's header
# says "4 ranks (2 on this node)" there, "(4 on this node)" on one host, and
# with 3 + 1 ranks "(3 on this node)" when rank 0 is on the host with 3; 2 x 2 ranks
# take the hierarchical all-reduce (shared memory in each host, a ring between them),
# 3 + 1 the flat ring.
# Skips where network namespaces cannot be made or entered (not root, no ip or
# unshare, a chroot or container whose / is not a mount point), with the reason.
# Every path out, failures included, removes what it made.
. "$(dirname "$0")/../lib/setup.sh"

[ "$(id -u)" -eq 0 ] || skip "network namespaces need root"
. "$TOP_SRCDIR/scripts/netns-hosts.sh"
# On every path out, failures included, everything made goes.
trap 'netns_hosts_down; rm -rf "$TMPD"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

HN1=ddpt-host1 HN2=ddpt-host2
netns_hosts_up ddpt 10.200 "$HN1" "$HN2" "$TMPD"
echo "hosts: $HN1 = $A (netns $NS1), $HN2 = $B (netns $NS2), bridge $BR $NET.1/24"

# TCP only, on the bridge's network, and the agent in place of ssh. setup.sh's
# environment says shared memory and no remote launch: override it there, and
# say it again on the command line.
export OMPI_MCA_btl=self,tcp OMPI_MCA_pml=ob1 OMPI_MCA_plm_rsh_agent=$AGENT
# shellcheck disable=SC2054 # commas inside values
MCA=(--mca btl self,tcp --mca pml ob1 --mca btl_tcp_if_include "$NET.0/24" --mca oob_tcp_if_include "$NET.0/24"
	--mca plm_rsh_agent "$AGENT" --mca plm_rsh_no_tree_spawn 1)
# run_hosts HOSTS ARGS...: ddptrain on 4 ranks placed by --host
run_hosts() {
	local hosts=$1
	shift
	timeout -k 5 90 mpirun "${MCA[@]}" --host "$hosts" -np 4 "$@"
}

# Where each rank runs, as Open MPI sees it.
# shellcheck disable=SC2016 # expanded by each rank's shell
run_hosts "$A:2,$B:2" sh -c 'echo "rank $OMPI_COMM_WORLD_RANK on $(hostname): local rank $OMPI_COMM_WORLD_LOCAL_RANK of $OMPI_COMM_WORLD_LOCAL_SIZE"' \
	>"$TMPD/where" 2>"$TMPD/err" || fail "mpirun over the two hosts: $(cat "$TMPD/err")"
sort "$TMPD/where"
{ [ "$(grep -c "on $HN1: local rank . of 2$" "$TMPD/where")" -eq 2 ] &&
	[ "$(grep -c "on $HN2: local rank . of 2$" "$TMPD/where")" -eq 2 ]; } || fail "ranks not 2 per host: $(cat "$TMPD/where")"

# ---- The same training on one host and on two ----
# shellcheck disable=SC2054 # commas inside values
args=(--layers=10,32,5 --samples=400 --epochs=2 --batch-size=10 --lr=0.05 --momentum=0.9 --bucket-mb=0.001
	--log-every=0)
# header FILE: the "N ranks (K on this node)" of rank 0's first line
header() {
	sed -n '1s/.* \([0-9]* ranks\{0,1\} ([0-9]* on this node)\).*/\1/p' "$1"
}

run_mpi 4 "${args[@]}" --save="$TMPD/one.st" >"$TMPD/one.out" || fail "single-host run"
one=$(header "$TMPD/one.out")
[ "$one" = "4 ranks (4 on this node)" ] || fail "single host: header says '$one': $(head -n 1 "$TMPD/one.out")"

run_hosts "$A:2,$B:2" "$DDPTRAIN" "${args[@]}" --save="$TMPD/two.st" >"$TMPD/two.out" 2>"$TMPD/err" ||
	fail "2-host run: $(cat "$TMPD/err")"
two=$(header "$TMPD/two.out")
[ "$two" = "4 ranks (2 on this node)" ] || fail "2 hosts x 2: header says '$two': $(head -n 1 "$TMPD/two.out")"
n=$(grep -c "backend mpi, hierarchical all-reduce" "$TMPD/two.out") || true
[ "$n" = 4 ] || fail "2 hosts x 2: not the hierarchical all-reduce on every rank: $(grep "rank .*pid" "$TMPD/two.out")"
cmp=$("$STCOMPARE" "$TMPD/two.st" "$TMPD/one.st" 1e-5) || fail "2 hosts x 2 against one host: $cmp"
exact=$("$STCOMPARE" --exact "$TMPD/two.st" "$TMPD/one.st" 2>&1 | sed 's/^stcompare: //') || true
echo "1 host x 4 ranks: $one"
echo "2 hosts x 2 ranks, rank 0 on $HN1: $two; weights against 1 host: ${cmp#stcompare: } ($exact)"

# Uneven, with rank 0 on the second host: 3 there, 1 on the first.
run_hosts "$B:3,$A:1" "$DDPTRAIN" "${args[@]}" --save="$TMPD/uneven.st" >"$TMPD/uneven.out" 2>"$TMPD/err" ||
	fail "3+1 run: $(cat "$TMPD/err")"
uneven=$(header "$TMPD/uneven.out")
[ "$uneven" = "4 ranks (3 on this node)" ] || fail "3+1: header says '$uneven': $(head -n 1 "$TMPD/uneven.out")"
n=$(grep -c "backend mpi, ring all-reduce" "$TMPD/uneven.out") || true
[ "$n" = 4 ] || fail "3+1: not the flat ring on every rank: $(grep "rank .*pid" "$TMPD/uneven.out")"
cmp=$("$STCOMPARE" "$TMPD/uneven.st" "$TMPD/one.st" 1e-5) || fail "3+1 against one host: $cmp"
echo "hosts with 3 + 1 ranks, rank 0 on $HN2: $uneven; weights against 1 host: ${cmp#stcompare: }"
echo "multihost: ok"
