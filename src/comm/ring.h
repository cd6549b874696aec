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
 * (rank i, i+1, ..., i-1: rank i's value first, each rank adding its own to
 * the partial sum it receives, rank i-1 last, which then owns the piece) and
 * the owner's sum is copied to every rank, so results are bit-identical from
 * run to run and across ranks.
 *
 * The same blocks do the reduce-scatter and the all-gather of parts of any
 * length (ring_start_coll): block k's piece i is part i-1's floats at
 * [k x chunk, (k+1) x chunk) of that part (empty where the part is shorter),
 * so rank r ends the reduce-scatter phase owning its own part r, summed in the
 * order r+1, r+2, ..., r; the reduce-scatter stops there, the all-gather runs
 * only the second phase. In 16 bits (fp16, bf16) the pieces travel as
 * MPI_UINT16_T and every partial sum is rounded to the type (core/half.h).
 *
 * Not thread-safe; all calls on one ring come from one thread.
 */
#ifndef DDPT_RING_H
#define DDPT_RING_H

#include <mpi.h>
#include <stddef.h>

#include "core/status.h"
#include "comm/comm.h" /* enum comm_wire: the element type */

#define RING_WINDOW 8   /* blocks in flight at once (most) */
#define RING_BUCKETS 64 /* buckets queued between waits (most) */

enum ring_kind { RING_ALLREDUCE, RING_REDUCE_SCATTER, RING_ALL_GATHER };

/* One collective for ring_start_coll: over buf[0..n) elements of type `type`. */
struct ring_coll {
	void *buf;
	size_t n;
	enum ring_kind kind;
	enum comm_wire type;     /* float32, or 16-bit elements (uint16_t) */
	/* reduce-scatter and all-gather: rank i's part is buf[lo[i] .. hi[i]) (lo[i] <= hi[i]
	 * <= n, parts apart), the same on every rank; the arrays stay until it completes */
	const size_t *lo, *hi;
};

struct ring_block {
	char *buf;           /* its collective's buffer */
	size_t pos, len;     /* all-reduce: elements [pos, pos+len) of buf, cut into size pieces
			      * [pos + i*len/size, pos + (i+1)*len/size); parts: [pos, pos+len) of each */
	enum ring_kind kind;
	enum comm_wire type;
	const size_t *lo, *hi;
	int step;            /* 0..2(size-1)-1; -1: the slot is free */
	int end;             /* the step after its last */
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
	/* n: elements (all-reduce) or the longest part (parts); next: the first not in a block */
	struct { struct ring_coll c; size_t n, next; } q[RING_BUCKETS];
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
/* Queue c (see struct ring_coll), counted and completed in order with ring_start's. A
 * reduce-scatter leaves this rank's part summed and the rest of c->buf undefined; an
 * all-gather sends this rank's part to every rank. Nothing to move (every part empty,
 * one rank): nothing is queued. */
enum status ring_start_coll(struct ring *r, const struct ring_coll *c, struct diag *d);
/* Move every block as far as it can go now; never blocks. */
void ring_progress(struct ring *r);
/* 1 if anything is queued or in flight. */
int ring_busy(const struct ring *r);
/* Complete every queued all-reduce. */
enum status ring_wait(struct ring *r, struct diag *d);
/* Complete the queued collectives up to the count-th (r->finished >= count); later ones
 * may stay in flight. */
enum status ring_wait_upto(struct ring *r, unsigned long long count, struct diag *d);
/* Safe to call twice (and on a ring whose init failed). */
void ring_free(struct ring *r);

#endif
