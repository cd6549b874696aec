#!/bin/bash
# A real multi-host run: two "hosts" made of network namespaces (own address,
# own host name) joined by a bridge, Open MPI's rsh launcher entering them
# through an agent script, and TCP between all ranks. A 2-host x 2-rank DDP run
# must end with the weights of the single-host 4-rank run (relative error at
# most 1e-5), and the node-local rank count must be per host: rank 0's header
# says "4 ranks (2 on this node)" there, "(4 on this node)" on one host, and
# with 3 + 1 ranks "(3 on this node)" when rank 0 is on the host with 3.
# Skips where network namespaces cannot be made or entered (not root, no ip or
# unshare, a chroot or container whose / is not a mount point), with the reason.
# Every path out, failures included, removes what it made.
. "$(dirname "$0")/setup.sh"

[ "$(id -u)" -eq 0 ] || skip "network namespaces need root"
command -v ip >/dev/null 2>&1 || skip "no ip command (apt-get install iproute2)"
command -v unshare >/dev/null 2>&1 || skip "no unshare command (apt-get install util-linux)"
unshare --uts true 2>/dev/null || skip "unshare --uts fails here (no CAP_SYS_ADMIN?)"

# ---- Clean-up, on every path out ----
# ip netns add bind-mounts /run/netns onto itself the first time: that mount goes
# too when it was not there before and no namespace is left in it.
ID=
NS1='' NS2='' BR='' PROBE=''
mountpoint -q /run/netns 2>/dev/null && netns_mounted_before=1 || netns_mounted_before=0
cleanup() {
	[ -z "$PROBE" ] || ip netns del "$PROBE" 2>/dev/null || true
	if [ -n "$ID" ]; then
		ip netns del "$NS1" 2>/dev/null || true
		ip netns del "$NS2" 2>/dev/null || true
		ip link del "$BR" 2>/dev/null || true
	fi
	if [ "$netns_mounted_before" = 0 ] && mountpoint -q /run/netns 2>/dev/null &&
		[ -z "$(ls -A /run/netns 2>/dev/null)" ]; then
		umount /run/netns 2>/dev/null || umount -l /run/netns 2>/dev/null || true
	fi
	PROBE='' ID=''
}
trap 'cleanup; rm -rf "$TMPD"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- Probe: a namespace can be made and entered ----
# (ip netns exec first remounts / as a slave: in a chroot whose / is not a mount
# point that fails with "mount --make-rslave /" failed: Invalid argument.)
PROBE=ddpt$$p
err=$(ip netns add "$PROBE" 2>&1) || skip "ip netns add fails here: $err"
err=$(ip netns exec "$PROBE" true 2>&1) ||
	skip "ip netns exec fails here (a chroot or container whose / is not a mount point?): $(echo "$err" | head -n 1)"
ip netns del "$PROBE" 2>/dev/null || true
PROBE=

# ---- Two hosts on a private bridge ----
# Claim an id: creating the bridge is atomic, so a second run of this test at
# the same time takes the next id. Names and addresses all carry it.

first=$(($$ % 200 + 20))
for try in $(seq 0 19); do
	id=$((first + try))
	ip -4 addr show 2>/dev/null | grep -q "inet 10\.200\.$id\." && continue
	if err=$(ip link add "ddpt${id}b" type bridge 2>&1); then
		ID=$id
		break
	fi
	case $err in *"File exists"*) continue ;; esac
	skip "cannot create a bridge: $err"
done
[ -n "$ID" ] || skip "no free ddpt<N>b bridge name among 20 tried"
BR=ddpt${ID}b NS1=ddpt${ID}h1 NS2=ddpt${ID}h2
NET=10.200.$ID
A=$NET.2 B=$NET.3
HN1=ddpt-host1 HN2=ddpt-host2

{ ip addr add "$NET.1/24" dev "$BR" && ip link set "$BR" up; } || fail "configuring $BR"
for i in 1 2; do
	ns=ddpt${ID}h$i
	ip netns add "$ns" 2>"$TMPD/err" || skip "cannot create a network namespace: $(cat "$TMPD/err")"
	ip link add "ddpt${ID}v$i" type veth peer name eth0 netns "$ns" || fail "veth for $ns"
	{ ip link set "ddpt${ID}v$i" master "$BR" && ip link set "ddpt${ID}v$i" up; } || fail "veth up"
	ip netns exec "$ns" ip addr add "$NET.$((i + 1))/24" dev eth0 || fail "address in $ns"
	{ ip netns exec "$ns" ip link set eth0 up && ip netns exec "$ns" ip link set lo up; } || fail "links up in $ns"
done
echo "hosts: $HN1 = $A (netns $NS1), $HN2 = $B (netns $NS2), bridge $BR $NET.1/24"

# Open MPI calls the agent in place of ssh: AGENT HOST COMMAND...; it runs the
# command in that host's namespace, under that host's own name.
AGENT=$TMPD/agent
cat >"$AGENT" <<EOF
#!/bin/bash
host=\$1
shift
case \$host in
$A) ns=$NS1 hn=$HN1 ;;
$B) ns=$NS2 hn=$HN2 ;;
*) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" unshare --uts /bin/sh -c "hostname \$hn; exec \$*"
EOF
chmod +x "$AGENT"

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
cmp=$("$STCOMPARE" "$TMPD/two.st" "$TMPD/one.st" 1e-5) || fail "2 hosts x 2 against one host: $cmp"
exact=$("$STCOMPARE" --exact "$TMPD/two.st" "$TMPD/one.st" 2>&1 | sed 's/^stcompare: //') || true
echo "1 host x 4 ranks: $one"
echo "2 hosts x 2 ranks, rank 0 on $HN1: $two; weights against 1 host: ${cmp#stcompare: } ($exact)"

# Uneven, with rank 0 on the second host: 3 there, 1 on the first.
run_hosts "$B:3,$A:1" "$DDPTRAIN" "${args[@]}" --save="$TMPD/uneven.st" >"$TMPD/uneven.out" 2>"$TMPD/err" ||
	fail "3+1 run: $(cat "$TMPD/err")"
uneven=$(header "$TMPD/uneven.out")
[ "$uneven" = "4 ranks (3 on this node)" ] || fail "3+1: header says '$uneven': $(head -n 1 "$TMPD/uneven.out")"
cmp=$("$STCOMPARE" "$TMPD/uneven.st" "$TMPD/one.st" 1e-5) || fail "3+1 against one host: $cmp"
echo "hosts with 3 + 1 ranks, rank 0 on $HN2: $uneven; weights against 1 host: ${cmp#stcompare: }"
echo "multihost: ok"
