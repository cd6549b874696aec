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
 * Not thread-safe; all calls on one shm come from one thread.
 */
#ifndef DDPT_SHM_H
#define DDPT_SHM_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "dist/ring.h"
#include "core/status.h"

#define SHM_QUEUE 64 /* all-reduces started and not yet complete (most) */
#define SHM_RANKS 64 /* ranks on one node (most) */

struct shm {
	MPI_Win win;                 /* MPI_WIN_NULL: not set up */
	int rank, size;              /* in the node's communicator */
	size_t n;                    /* floats in each rank's buffer */
	float *mine;                 /* this rank's buffer: where the gradients must live */
	float *seg[SHM_RANKS];       /* every rank's buffer, mapped here */
	/* rank q's counters, at the end of its buffer, each on its own cache line */
	_Atomic uint64_t *ready[SHM_RANKS]; /* all-reduces q has published */
	_Atomic uint64_t *done[SHM_RANKS];  /* all-reduces whose slice q has added */
	uint64_t started;            /* all-reduces started on this rank */
	uint64_t added;              /* all-reduces whose slice this rank has added on its node */
	uint64_t finished;           /* ... and, with up, got back from the other nodes */
	/* started, not complete: all-reduce k at k % SHM_QUEUE; up: its slice is back once
	 * up->finished >= up_seq */
	struct { size_t off, n; unsigned long long up_seq; } q[SHM_QUEUE];
	uint64_t complete;           /* all-reduces known complete on every rank */
	struct ring *up;             /* NULL: one node; else the ring among this node-local rank's peers */
	int yield;                   /* more ranks on the node than cores: waits yield the core */
	int up_full;                 /* a slice found the ring's queue full (a bug: shm_wait fails) */
};

/* Whether this rank can have a window of n floats per rank over local_size ranks, asked
 * before MPI is: room for the backing file where Open MPI's osc/sm puts it (/dev/shm, or
 * its osc_sm_backing_directory), and address space under RLIMIT_AS for the whole window
 * (every rank maps every rank's part) and later_bytes that training still maps after it.
 * ST_RUNTIME with one line naming the directory or the limit and the sizes if not. Local:
 * no communication. */
enum status shm_fits(int local_size, size_t n, size_t later_bytes, struct diag *d);
/* A window of n floats per rank over local's ranks (collective over local). ST_RUNTIME if
 * MPI refuses, there are more than SHM_RANKS ranks, or memory runs out; a backing file
 * that a failed MPI_Win_allocate_shared left in the directory is removed. */
enum status shm_init(struct shm *s, MPI_Comm local, size_t n, struct diag *d);
/* Sum buf[0..n) (inside s->mine) over the ranks, in place. Every rank starts the same
 * ranges in the same order. Adds this rank's slices of whatever has become ready. */
enum status shm_start(struct shm *s, float *buf, size_t n, struct diag *d);
/* Add this rank's slices of what every rank has published; never blocks. Returns the
 * number of all-reduces now complete on every rank (counting from the start). */
uint64_t shm_progress(struct shm *s);
/* Complete every started all-reduce. ST_RUNTIME if the ring across nodes fails. */
enum status shm_wait(struct shm *s, struct diag *d);
/* Collective over the node's ranks (MPI_Win_free). Safe to call twice. */
void shm_free(struct shm *s);

#endif
