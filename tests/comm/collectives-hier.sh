#!/bin/bash
# The hierarchical algorithm's collectives (the window in each node, the ring among
# the ranks of the same node-local rank) on two "hosts" made of network namespaces
# (scripts/netns-hosts.sh, as tests/comm/multihost.sh): tests/lib/collcheck.c at 2 hosts x 2
# and x 3 ranks, float32 exact and fp16/bf16 exactly the stated order (each node's
# 16-bit sum in node-local rank order, then the ring's order among the nodes).
# Skips where namespaces cannot be made or entered, with the reason.
. "$(dirname "$0")/../lib/setup.sh"

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

# The trainer over them: --zero=1 and --zero=2 end with plain DDP's weights (within 1e-6:
# the reduce-scatter's ring order among the nodes is not the all-reduce's), and with
# --grad-compress=bf16 the sharded runs equal the unsharded one (the same 16-bit sums).
unset DDPTRAIN_RING_CHUNK_KB DDPTRAIN_RING_WINDOW
args=(--samples=96 --epochs=2 --layers=10,24,24,5 --bucket-mb=0.001 --momentum=0.9)
train() { # NAME ARGS...: 2 hosts x 2 ranks, the weights into NAME.st
	local name=$1
	shift
	timeout -k 5 90 mpirun "${MCA[@]}" --oversubscribe --host "$A:2,$B:2" -np 4 "$DDPTRAIN" "${args[@]}" "$@" \
		--save="$TMPD/$name.st" >"$TMPD/$name.out" 2>&1 || fail "ddptrain $*: $(cat "$TMPD/$name.out")"
}
train plain
n=$(grep -c "backend mpi, hierarchical all-reduce" "$TMPD/plain.out") || true
[ "$n" = 4 ] || fail "ddptrain on 2 hosts x 2: not the hierarchical all-reduce on every rank: $(cat "$TMPD/plain.out")"
for z in 1 2; do
	train z$z --zero=$z
	out=$("$STCOMPARE" "$TMPD/z$z.st" "$TMPD/plain.st" 1e-6) || fail "hier --zero=$z against plain DDP: $out"
	echo "hier --zero=$z: $out"
done
train bf16 --grad-compress=bf16
for z in 1 2; do
	train bf16z$z --grad-compress=bf16 --zero=$z
	out=$("$STCOMPARE" "$TMPD/bf16z$z.st" "$TMPD/bf16.st" 1e-6) || fail "hier bf16 --zero=$z against bf16: $out"
	echo "hier bf16 --zero=$z: $out"
done
echo "collectives-hier: ok"
