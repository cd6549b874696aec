# netns-hosts.sh - two "hosts" made of network namespaces on a private bridge, for a
# real multi-host Open MPI run on one machine (recipe: the README's "Multi-host"
# section). Sourced by tests/comm/multihost.sh and scripts/bench-network.sh; needs root.
#
#   netns_hosts_up PREFIX NET16 HOST1 HOST2 DIR
#       claims an id N by creating the bridge PREFIX<N>b (atomic: two runs at once take
#       two ids), makes the namespaces PREFIX<N>h1 and PREFIX<N>h2, each with an eth0
#       at NET16.<N>.2 and .3 on the bridge, and writes DIR/agent, an rsh agent for
#       Open MPI that runs a command in a host's namespace under the name HOST1 or
#       HOST2. Sets ID BR NS1 NS2 NET A B AGENT. On failure it calls the caller's
#       `skip REASON` (cannot work here) or `fail REASON` (broke).
#   netns_hosts_down
#       removes everything netns_hosts_up made; safe to call twice, and from a trap.
ID='' BR='' NS1='' NS2='' NETNS_PROBE=''
mountpoint -q /run/netns 2>/dev/null && netns_mounted_before=1 || netns_mounted_before=0

netns_hosts_down() {
	[ -z "$NETNS_PROBE" ] || ip netns del "$NETNS_PROBE" 2>/dev/null || true
	NETNS_PROBE=''
	if [ -n "$ID" ]; then
		# the veths first: deleting a namespace removes its peer only later, asynchronously
		ip link del "${BR%b}v1" 2>/dev/null || true
		ip link del "${BR%b}v2" 2>/dev/null || true
		ip netns del "$NS1" 2>/dev/null || true
		ip netns del "$NS2" 2>/dev/null || true
		ip link del "$BR" 2>/dev/null || true
		ID=''
	fi
	# ip netns add bind-mounts /run/netns onto itself the first time: that mount goes
	# too when it was not there before and no namespace is left in it.
	if [ "$netns_mounted_before" = 0 ] && mountpoint -q /run/netns 2>/dev/null &&
		[ -z "$(ls -A /run/netns 2>/dev/null)" ]; then
		umount /run/netns 2>/dev/null || umount -l /run/netns 2>/dev/null || true
	fi
}

netns_hosts_up() {
	local prefix=$1 net16=$2 hn1=$3 hn2=$4 dir=$5 err id first try i ns
	for c in ip unshare; do command -v "$c" >/dev/null 2>&1 || skip "no $c command (apt-get install iproute2 util-linux)"; done
	unshare --uts true 2>/dev/null || skip "unshare --uts fails here (no CAP_SYS_ADMIN?)"
	# A namespace can be made and entered? (ip netns exec first remounts / as a slave: in
	# a chroot whose / is not a mount point that fails with "mount --make-rslave /"
	# failed: Invalid argument.)
	NETNS_PROBE=${prefix}$$p
	err=$(ip netns add "$NETNS_PROBE" 2>&1) || skip "ip netns add fails here: $err"
	err=$(ip netns exec "$NETNS_PROBE" true 2>&1) ||
		skip "ip netns exec fails here (a chroot or container whose / is not a mount point?): $(echo "$err" | head -n 1)"
	ip netns del "$NETNS_PROBE" 2>/dev/null || true
	NETNS_PROBE=''

	first=$(($$ % 200 + 20))
	for try in $(seq 0 19); do
		id=$((first + try))
		ip -4 addr show 2>/dev/null | grep -q "inet ${net16//./\\.}\.$id\." && continue
		if err=$(ip link add "${prefix}${id}b" type bridge 2>&1); then
			ID=$id
			break
		fi
		case $err in *"File exists"*) continue ;; esac
		skip "cannot create a bridge: $err"
	done
	[ -n "$ID" ] || skip "no free ${prefix}<N>b bridge name among 20 tried"
	BR=${prefix}${ID}b NS1=${prefix}${ID}h1 NS2=${prefix}${ID}h2
	NET=$net16.$ID
	A=$NET.2 B=$NET.3
	{ ip addr add "$NET.1/24" dev "$BR" && ip link set "$BR" up; } || fail "configuring $BR"
	for i in 1 2; do
		ns=${prefix}${ID}h$i
		err=$(ip netns add "$ns" 2>&1) || skip "cannot create a network namespace: $err"
		ip link add "${prefix}${ID}v$i" type veth peer name eth0 netns "$ns" || fail "veth for $ns"
		{ ip link set "${prefix}${ID}v$i" master "$BR" && ip link set "${prefix}${ID}v$i" up; } || fail "veth up"
		ip netns exec "$ns" ip addr add "$NET.$((i + 1))/24" dev eth0 || fail "address in $ns"
		{ ip netns exec "$ns" ip link set eth0 up && ip netns exec "$ns" ip link set lo up; } || fail "links up in $ns"
	done
	# Open MPI calls the agent in place of ssh: AGENT HOST COMMAND...; it runs the
	# command in that host's namespace, under that host's own name.
	AGENT=$dir/agent
	cat >"$AGENT" <<AGENT_EOF
#!/bin/bash
host=\$1
shift
case \$host in
$A) ns=$NS1 hn=$hn1 ;;
$B) ns=$NS2 hn=$hn2 ;;
*) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" unshare --uts /bin/sh -c "hostname \$hn; exec \$*"
AGENT_EOF
	chmod +x "$AGENT"
}
