/*
 * hostcoll.h - the host collective algorithms behind the MPI communicator:
 * all-reduce, reduce-scatter and all-gather on host memory, one table of
 * operations each, its entries named as struct comm_ops names them: MPI's
 * own (hostcoll_mpi.c), the pipelined ring over all ranks (hostcoll_ring.c,
 * over ring.h), the shared-memory window of one node and the hierarchical
 * one, the window in each node with the ring among node peers
 * (hostcoll_shm.c, over shm.h). Each takes the arguments comm.c's doors
 * checked (at most COMM_MAX_INFLIGHT collectives in flight, good cuts).
 *
 * hostcoll_choose is the one place that picks an algorithm (rank 0's
 * DDPTRAIN_ALLREDUCE, the layout of the nodes, the fallbacks); comm_mpi.c
 * then only calls through struct hostcoll_ops. Every algorithm tells its
 * completions to one observer (struct hostcoll_obs), which keeps each
 * all-reduce's start time and length by its order in the step.
 *
 * A new algorithm is a file defining its struct hostcoll_ops (listed in
 * Makefile.am), its declaration below and its entry in hostcoll.c's table.
 *
 * Not here: device memory (comm_mpi.c stages it for hostcoll_mpi) and the
 * broadcast of the weights.
 */
#ifndef DDPT_HOSTCOLL_H
#define DDPT_HOSTCOLL_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "comm/comm.h"  /* struct comm, struct comm_observer, COMM_MAX_INFLIGHT */
#include "comm/world.h" /* struct world */

/* The one observer of every algorithm: an all-reduce's start time and length, by its
 * order among the step's all-reduces (0: the first started). All-reduces past the
 * COMM_MAX_INFLIGHT-th of a step are not timed (the trainer starts at most that many). */
struct hostcoll_obs {
	struct comm_observer to;       /* to.done NULL: nobody is told */
	int started;                   /* all-reduces started since the step's wait */
	double t0[COMM_MAX_INFLIGHT];  /* by order: when it was started (clock_now) */
	struct comm_tag tag[COMM_MAX_INFLIGHT]; /* by order: the observer's tag then */
	size_t n[COMM_MAX_INFLIGHT];   /* by order: its length, floats */
};

/* Note the start of an all-reduce of n floats; returns its order in the step. */
int hostcoll_obs_start(struct hostcoll_obs *o, size_t n);
/* All-reduce `order` of this step is complete on this rank: tell the observer, if there
 * is one and it was there when the all-reduce started. */
void hostcoll_obs_done(const struct hostcoll_obs *o, int order);
/* 1 if somebody is told (an algorithm may then track completions one by one). */
int hostcoll_obs_watched(const struct hostcoll_obs *o);

/* The 16-bit mirror of the gradients in which COMM_WIRE collectives travel (MPI's own and
 * the ring's): buf's floats are rounded into h at buf's offset from base, and the result
 * is widened back from there. One per struct hostcoll, shared by an algorithm and the
 * MPI algorithm it hands small buckets to (no two collectives in flight overlap);
 * allocated at first use. */
struct hostcoll_mirror {
	const float *base;   /* the gradients, base[0..n): device memory, its pinned mirror */
	size_t n;
	enum comm_wire wire; /* the 16-bit type (never COMM_WIRE_F32 when used) */
	uint16_t *h;         /* (n) or NULL: not yet needed */
};

/* buf[0..n) (inside base[0..m->n)) rounded into its place in the mirror, which is returned;
 * NULL (d set) if buf lies outside or memory runs out. */
uint16_t *hostcoll_narrow(struct hostcoll_mirror *m, const float *buf, size_t n, struct diag *d);
/* dst[0..n) = h[0..n) widened from the mirror's type. */
void hostcoll_widen(const struct hostcoll_mirror *m, float *dst, const uint16_t *h, size_t n);

/* The settings, from rank 0's environment (so that every rank agrees). */
struct hostcoll_cfg {
	int chunk_kb;     /* DDPTRAIN_RING_CHUNK_KB: floats per ring piece x 4 / 1024 */
	int window;       /* DDPTRAIN_RING_WINDOW: ring blocks in flight */
	int min_kb;       /* DDPTRAIN_RING_MIN_KB: smallest bucket for the ring */
	int panel_mflop;  /* DDPTRAIN_PANEL_MFLOP: backward's panels between progress calls */
};

/* What an algorithm's init is given, and what it gives back. */
struct hostcoll_setup {
	struct world *w;                 /* over all of w's ranks */
	const struct hostcoll_cfg *cfg;
	struct hostcoll_obs *obs;        /* told of every completion; outlives the algorithm */
	const float *base;               /* the gradients, base[0..nfloats) (host memory) */
	size_t nfloats;
	size_t later_bytes;              /* what this rank still maps after the set-up */
	enum comm_wire wire;             /* the type of COMM_WIRE collectives */
	struct hostcoll_mirror *mirror;  /* their 16-bit mirror; outlives the algorithm */
	float *grads;                    /* out, non-NULL: the gradients must live here */
	/* out, on failure: the failure is every rank's and for want of something a rank
	 * lacked (room for a shared-memory window); nothing is left set up, another may stand
	 * in; the message is the same on every rank */
	int unavailable;
};

struct hostcoll_ops {
	const char *name; /* DDPTRAIN_ALLREDUCE's word for it; NULL: never asked for by name */
	int stream;       /* its all-reduces move while the caller computes: stream gradients */
	/* Set up (collective over s->w unless said otherwise); *ctx is the instance. */
	enum status (*init)(void **ctx, struct hostcoll_setup *s, struct diag *d);
	/* Start summing buf[0..n) over all ranks, in place (see comm_ops.allreduce_start;
	 * flags COMM_LAST, COMM_WIRE: the algorithm converts to and from setup's wire type). */
	enum status (*allreduce_start)(void *ctx, float *buf, size_t n, unsigned flags,
				       struct diag *d);
	/* comm_ops.reduce_scatter_start and all_gather_start, over all of w's ranks. */
	enum status (*reduce_scatter_start)(void *ctx, float *buf, size_t n, const size_t *cuts,
					    unsigned flags, struct diag *d);
	enum status (*all_gather_start)(void *ctx, float *buf, size_t n, const size_t *cuts,
					struct diag *d);
	/* Let outstanding collectives advance; never blocks. */
	void (*progress)(void *ctx);
	/* Complete the first k collectives started since the last wait (comm_ops.wait_first),
	 * telling the observer of each. */
	enum status (*wait_first)(void *ctx, int k, struct diag *d);
	/* Complete every outstanding collective, telling the observer of each. */
	enum status (*wait_all)(void *ctx, struct diag *d);
	/* Release the instance (NULL: nothing to do). */
	void (*fini)(void *ctx);
	/* The per-rank table's name for it: "ring all-reduce". */
	void (*describe)(void *ctx, char *buf, size_t len);
};

/* The algorithms (each in hostcoll_NAME.c). */
extern const struct hostcoll_ops hostcoll_mpi;  /* MPI_Iallreduce, MPI_Testall */
extern const struct hostcoll_ops hostcoll_ring; /* ring.h over all ranks; small buckets: mpi */
extern const struct hostcoll_ops hostcoll_shm;  /* shm.h: one node */
extern const struct hostcoll_ops hostcoll_hier; /* shm.h in each node, ring.h among them */

/* One algorithm, set up. */
struct hostcoll {
	const struct hostcoll_ops *ops;
	void *ctx;
	struct hostcoll_mirror mirror;
};

/* Choose and set up the all-reduce over w's ranks for the gradients base[0..nfloats) (device
 * memory: its host mirror, where the collectives run), told to obs: device memory (host 0)
 * and a single rank take MPI's own. Host memory on
 * 2+ ranks: rank 0's environment decides for all (a collective); auto and shm take the
 * shared-memory window inside one node; across nodes with the same number of ranks
 * (2 or more) on each, the hierarchical all-reduce; otherwise the ring over all ranks.
 * Where the window cannot be had on every rank (no room for it, or for it and the
 * later_bytes this rank still maps after the set-up), auto falls back (to MPI's on one
 * node, to the ring across nodes) with c->notice saying why; asked for by name, that is
 * an error on every rank. Sets c->grads, c->stream, c->panel_flops and c->notice. */
enum status hostcoll_choose(struct hostcoll *a, struct comm *c, struct world *w, int host,
			    const float *base, size_t nfloats, size_t later_bytes,
			    struct hostcoll_obs *obs, struct diag *d);
/* Safe to call twice. */
void hostcoll_free(struct hostcoll *a);

#endif
