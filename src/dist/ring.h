/*
 * ring.h - a pipelined ring all-reduce (sum, float, in place, host memory)
 * over non-blocking MPI point-to-point, advanced by ring_progress calls.
 *
 * Open MPI's MPI_Iallreduce (libnbc) moves a large buffer in a few big
 * messages that travel only inside MPI calls, and its blocking all-reduce
 * cannot overlap anything. Here a bucket is cut into blocks of `size` pieces
 * of at most `chunk` floats; each block is an ordinary ring all-reduce
 * (reduce-scatter then all-gather: every rank sends the block once), and up
 * to RING_WINDOW blocks are in flight at once, so the link always has a few
 * small messages queued and each progress call can move the next ones.
 *
 * Numerics: piece i of a block is summed along the ring in one fixed order
 * (rank i+1, i+2, ..., i) and the owner's sum is copied to every rank, so
 * results are bit-identical from run to run and across ranks.
 *
 * Not thread-safe; all calls on one ring come from one thread.
 */
#ifndef DDPT_RING_H
#define DDPT_RING_H

#include <mpi.h>
#include <stddef.h>

#include "core/status.h"

#define RING_WINDOW 8   /* blocks in flight at once (most) */
#define RING_BUCKETS 64 /* buckets queued between waits (most) */

struct ring_block {
	float *buf;          /* the block: size pieces, piece i = [i*len/size, (i+1)*len/size) */
	size_t len;          /* floats */
	int step;            /* 0..2(size-1)-1; -1: the slot is free */
	int tag;             /* tag of step 0; step s uses tag + s */
	int last;            /* the last block of its bucket */
	MPI_Request req[2];  /* send, receive */
};

struct ring {
	MPI_Comm comm;       /* private duplicate: tags cannot meet other traffic */
	int rank, size;
	size_t chunk;        /* floats per piece */
	int window;          /* blocks in flight at most (<= RING_WINDOW) */
	int tag_slots;       /* distinct tag bases (block sequence modulo this) */
	float *scratch;      /* (window, chunk): where reduce-scatter pieces arrive */
	struct { float *buf; size_t n, next; } q[RING_BUCKETS]; /* next: first float not yet in a block */
	int nq, qhead;       /* buckets queued; the first with floats not yet in a block */
	struct ring_block slot[RING_WINDOW]; /* a circular window, retired in order */
	MPI_Request req[2 * RING_WINDOW];    /* the slots' requests, for MPI_Testsome */
	int oldest, active;  /* the oldest block's slot; blocks in flight */
	unsigned seq;        /* blocks started since ring_init */
	unsigned long long started, finished; /* buckets started and completed since ring_init */
	int err;             /* first MPI error code seen in ring_progress, or MPI_SUCCESS */
	const char *err_call;
};

/* A ring over comm's ranks (collective: duplicates comm) with pieces of `chunk` floats and
 * up to `window` blocks in flight. ST_RUNTIME if MPI refuses or memory runs out. */
enum status ring_init(struct ring *r, MPI_Comm comm, size_t chunk, int window, struct diag *d);
/* Queue buf[0..n) for summing over the ranks, in place; every rank queues the same sizes
 * in the same order. Starts what the window allows. Buckets complete in the order they
 * were started: the i-th (counting from 1 at ring_init) is complete once r->finished >=
 * i, where i is r->started after its ring_start. Nothing to move (n == 0, one rank):
 * nothing is queued and the counts stay. */
enum status ring_start(struct ring *r, float *buf, size_t n, struct diag *d);
/* Move every block as far as it can go now; never blocks. */
void ring_progress(struct ring *r);
/* 1 if anything is queued or in flight. */
int ring_busy(const struct ring *r);
/* Complete every queued all-reduce. */
enum status ring_wait(struct ring *r, struct diag *d);
/* Safe to call twice (and on a ring whose init failed). */
void ring_free(struct ring *r);

#endif
