#!/bin/bash
# The hierarchical algorithm's collectives (the window in each node, the ring among
# the ranks of the same node-local rank) on two "hosts" made of network namespaces
# (scripts/netns-hosts.sh, as tests/multihost.sh): tests/lib/collcheck.c at 2 hosts x 2
# and x 3 ranks, float32 exact and fp16/bf16 exactly the stated order (each node's
# 16-bit sum in node-local rank order, then the ring's order among the nodes).
# Skips where namespaces cannot be made or entered, with the reason.
. "$(dirname "$0")/lib/setup.sh"

[ "$(id -u)" -eq 0 ] || skip "network namespaces need root"
. "$TOP_SRCDIR/scripts/netns-hosts.sh"
trap 'netns_hosts_down; rm -rf "$TMPD"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

COLLCHECK=$TESTS_BUILDDIR/lib/collcheck
netns_hosts_up ddpc 10.201 ddpc-host1 ddpc-host2 "$TMPD"
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_pml=ob1 OMPI_MCA_plm_rsh_agent=$AGENT
# shellcheck disable=SC2054 # commas inside values
MCA=(--mca btl self,vader,tcp --mca pml ob1 --mca btl_tcp_if_include "$NET.0/24" --mca oob_tcp_if_include "$NET.0/24"
	--mca plm_rsh_agent "$AGENT" --mca plm_rsh_no_tree_spawn 1)
export DDPTRAIN_RING_CHUNK_KB=1 DDPTRAIN_RING_WINDOW=3
for per in 2 3; do
	for wire in fp32 fp16 bf16; do
		out=$(timeout -k 5 90 mpirun "${MCA[@]}" --oversubscribe --host "$A:$per,$B:$per" -np $((2 * per)) \
			-x DDPTRAIN_RING_CHUNK_KB -x DDPTRAIN_RING_WINDOW "$COLLCHECK" --wire="$wire" 2>&1) ||
			fail "2 hosts x $per, $wire: $out"
		case $out in
		*"hierarchical all-reduce"*"# collcheck: ok: 0 wrong values over $((2 * per)) ranks"*) ;;
		*) fail "2 hosts x $per, $wire: not the hierarchical algorithm, or no verdict: $out" ;;
		esac
		echo "2 hosts x $per ranks, $wire: ok"
	done
done
echo "collectives-hier: ok"
