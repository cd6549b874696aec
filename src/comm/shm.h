/*
 * shm.h - the gradient all-reduce of ranks on one node through an MPI-3
 * shared-memory window, with no copies: the gradients themselves live in the
 * window, every rank reads the others' directly.
 *
 * Open MPI's all-reduce between ranks of one node (vader) moves each byte
 * through shared-memory fragments: the sender copies in, the receiver copies
 * out and adds. Here every all-reduced range is cut into one slice per rank;
 * rank r adds slice r of every rank's gradient (in rank order 0, 1, ..., P-1)
 * and writes the sum into every rank's gradient. Each rank reads the whole
 * range once and writes it once, the least any all-reduce can move, and the
 * sums are bit-identical on every rank and from run to run (at 2 ranks equal
 * to MPI's, since a + b == b + a).
 *
 * Ordering: all-reduce k (counted from the start) is published by a rank
 * when its range is final (ready[rank] = k + 1, a release store); rank r adds
 * its slice once every rank has published k, then says so (done[r] = k + 1).
 * All-reduce k is complete on every rank once every done[] >= k + 1. Ranges
 * and their order must be the same on every rank, as for any collective; no
 * MPI call is made between shm_init and shm_free.
 *
 * Across nodes (hierarchical, with `up` set): rank r first adds slice r over
 * its node's ranks into its own buffer only, then all-reduces that slice with
 * the ranks of the same node-local rank on the other nodes (the ring `up`),
 * and only then writes the result into its node's other buffers and says
 * done. Each node then sends 2(N-1)/N of the gradient over the network per
 * node, not per rank (N nodes). Every node must have the same number of ranks.
 *
 * Reduce-scatter (shm_start_coll): rank r adds part r over the node's ranks,
 * in rank order, into its own buffer only; across nodes, the parts of every
 * rank with r's node-local rank (its peers on the other nodes), then the
 * ring's reduce-scatter among the peers leaves r its own.
 *
 * The 16-bit wire: a rank rounds its range in place to 16 bits (the first
 * half of the range's bytes) before publishing it, so the others read 16 bits
 * per gradient; the sums are taken in 16 bits (each partial sum rounded, in
 * rank order; across nodes then the ring's order) and written back as 16
 * bits; each rank widens its own range in place once the collective is
 * complete on every rank.
 *
 * Not thread-safe; all calls on one shm come from one thread.
 */
#ifndef DDPT_SHM_H
#define DDPT_SHM_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/ring.h"
#include "core/status.h"

#define SHM_QUEUE 64 /* all-reduces started and not yet complete (most) */
#define SHM_RANKS 64 /* ranks on one node (most) */

struct shm {
	MPI_Win win;                 /* MPI_WIN_NULL: not set up */
	int rank, size;              /* in the node's communicator */
	size_t n;                    /* floats in each rank's buffer */
	float *mine;                 /* this rank's buffer: where the gradients must live */
	float *seg[SHM_RANKS];       /* every rank's buffer, mapped here */
	void *mapped;                /* the window's lowest address, named to the SIGBUS handler */
	/* rank q's counters, at the end of its buffer, each on its own cache line */
	_Atomic uint64_t *ready[SHM_RANKS]; /* all-reduces q has published */
	_Atomic uint64_t *done[SHM_RANKS];  /* all-reduces whose slice q has added */
	uint64_t started;            /* all-reduces started on this rank */
	uint64_t added;              /* all-reduces whose slice this rank has added on its node */
	uint64_t finished;           /* ... and, with up, got back from the other nodes */
	/* started, not complete: all-reduce k at k % SHM_QUEUE; up: its slice is back once
	 * up->finished >= up_seq */
	struct {
		size_t off, n;
		unsigned long long up_seq;
		enum ring_kind kind;     /* all-reduce or reduce-scatter */
		enum comm_wire type;     /* float32, or rounded to 16 bits in place */
		const size_t *cuts;      /* reduce-scatter: (world size + 1) the parts, from off */
	} q[SHM_QUEUE];
	uint64_t complete;           /* all-reduces known complete on every rank */
	uint64_t widened;            /* ... of which this rank has widened its 16-bit ones */
	/* the ranks of this node-local rank, one per node, by their rank in up (one node: this
	 * rank alone): their world ranks, and each queued reduce-scatter's parts of them */
	int npeers;
	int *peer_world;             /* (npeers) */
	size_t *plo, *phi;           /* (SHM_QUEUE, npeers) */
	struct ring *up;             /* NULL: one node; else the ring among this node-local rank's peers */
	int yield;                   /* more ranks on the node than cores: waits yield the core */
	int up_full;                 /* a slice found the ring's queue full (a bug: shm_wait fails) */
};

/* Whether this rank can have a window of n floats per rank over local_size ranks, asked
 * before MPI is: a directory this process may write, with a free inode and room, for the
 * backing file where Open MPI's osc/sm puts it (its osc_sm_backing_directory, /dev/shm,
 * or its session directory), and address space under RLIMIT_AS for the whole window
 * (every rank maps every rank's part) and later_bytes that training still maps after it.
 * ST_RUNTIME with one line naming the directory or the limit and the sizes if not. Local:
 * no communication. */
enum status shm_fits(int local_size, size_t n, size_t later_bytes, struct diag *d);
/* A window of n floats per rank over local's ranks (collective over local). ST_RUNTIME if
 * MPI refuses, there are more than SHM_RANKS ranks, or memory runs out; a backing file
 * that a failed MPI_Win_allocate_shared left in the directory is removed. */
enum status shm_init(struct shm *s, MPI_Comm local, size_t n, struct diag *d);
/* Who this rank's peers are (collective over peers, or local with peers MPI_COMM_NULL: one
 * node): needed by reduce-scatters. world_rank: this rank's in the world. */
enum status shm_peers(struct shm *s, MPI_Comm peers, int world_rank, struct diag *d);
/* Sum buf[0..n) (inside s->mine) over the ranks, in place. Every rank starts the same
 * ranges in the same order. Adds this rank's slices of whatever has become ready. */
enum status shm_start(struct shm *s, float *buf, size_t n, struct diag *d);
/* shm_start for a reduce-scatter too (kind RING_REDUCE_SCATTER: cuts has world size + 1
 * entries, unchanged until complete; this rank's world part is summed, the rest of buf
 * undefined) and in 16 bits (type). */
enum status shm_start_coll(struct shm *s, float *buf, size_t n, enum ring_kind kind,
			   const size_t *cuts, enum comm_wire type, struct diag *d);
/* Add this rank's slices of what every rank has published; never blocks. Returns the
 * number of all-reduces now complete on every rank (counting from the start). */
uint64_t shm_progress(struct shm *s);
/* Complete every started all-reduce. ST_RUNTIME if the ring across nodes fails. */
enum status shm_wait(struct shm *s, struct diag *d);
/* Complete the first count all-reduces (counting from the start). */
enum status shm_wait_upto(struct shm *s, uint64_t count, struct diag *d);
/* Collective over the node's ranks (MPI_Win_free). Safe to call twice. */
void shm_free(struct shm *s);

#endif
