/*
 * hostcoll_shm.c - the all-reduces through the shared-memory window (shm.h):
 * on one node (hostcoll_shm), and across nodes with the same number of ranks
 * on each (hostcoll_hier: the window in each node, the ring of ring.h among
 * the ranks of the same node-local rank). The two differ only in set-up; the
 * gradients live in the window, so both move them there.
 *
 * Reduce-scatters and 16-bit collectives go through the window too (shm.h);
 * the all-gather, whose buffer (the parameters) is not in the window, is MPI's
 * own (MPI_Iallgatherv, hostcoll_mpi), which Open MPI moves through its own
 * shared memory on a node. Collectives of both kinds complete in the order
 * started.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/hostcoll.h"
#include "comm/ring.h"
#include "comm/shm.h"

struct shm_alg {
	struct shm shm;
	struct ring ring;           /* hier: among this node-local rank's peers (shm.up) */
	struct world *w;            /* for watching MPI_Win_free */
	struct hostcoll_obs *obs;
	int order[SHM_QUEUE];       /* all-reduce k (from the start) at k % SHM_QUEUE: its order */
	uint64_t told;              /* all-reduces told to the observer so far */
	enum comm_wire wire;        /* COMM_WIRE collectives' type */
	void *mpi;                  /* hostcoll_mpi's instance: the all-gathers */
	/* the collectives since the last wait, in order: the window's (complete once
	 * shm.complete >= seq) or MPI's (its mpi-th); the doors (comm.c) keep them under
	 * COMM_MAX_INFLIGHT */
	struct { int on_mpi, mpi; uint64_t seq; } rec[COMM_MAX_INFLIGHT];
	int n, nmpi, nwaited;
};

/* Map the window on every rank of each node, or on none: s->unavailable, with the first
 * failing rank's reason on every rank, where some rank cannot. Whether it can is agreed
 * before MPI_Win_allocate_shared: Open MPI 4.1's osc/sm fails only on the rank that
 * creates or maps the backing file and leaves the others inside the call (until
 * --timeout). Where the call fails all the same, a rank whose own window was mapped then
 * leaves it, since freeing it is a collective the failed rank would not join. */
static enum status window_open(struct shm_alg **out, struct hostcoll_setup *s, struct diag *d)
{
	struct diag why = {0};
	struct shm_alg *a = NULL;

	*out = NULL;
	(void)shm_fits(s->w->local_size, s->nfloats, s->later_bytes, &why);
	if (world_share_failure(s->w, &why) == ST_OK) {
		a = calloc(1, sizeof *a);
		world_watch_begin(s->w, "the shared-memory window's set-up (MPI_Win_allocate_shared)");
		if (a == NULL)
			diag_set(&why, ST_RUNTIME, "comm: out of memory");
		else
			(void)shm_init(&a->shm, s->w->local, s->nfloats, &why);
		world_watch_end(s->w);
		if (why.st != ST_OK) /* the others may still be inside the call: the watchdog says why */
			world_failed(s->w, why.msg);
		(void)world_share_failure(s->w, &why);
		world_failed(s->w, NULL);
	}
	if (why.st != ST_OK) {
		free(a);
		s->unavailable = 1;
		return diag_set(d, why.st, "%s", why.msg);
	}
	a->ring.comm = MPI_COMM_NULL; /* no ring (yet): ring_free is safe */
	a->w = s->w;
	a->obs = s->obs;
	a->wire = s->wire;
	*out = a;
	return ST_OK;
}

/* Undo window_open's and the later set-up (collective over the node). */
static void window_close(struct shm_alg *a)
{
	ring_free(&a->ring);
	shm_free(&a->shm);
	hostcoll_mpi.fini(a->mpi);
	free(a);
}

/* Move the gradients into the window: the caller's buffer from now on. */
static enum status window_ready(struct shm_alg *a, void **ctx, struct hostcoll_setup *s)
{
	memcpy(a->shm.mine, s->base, s->nfloats * sizeof *s->base);
	s->grads = a->shm.mine;
	*ctx = a;
	return ST_OK;
}

static enum status shm_alg_init(void **ctx, struct hostcoll_setup *s, struct diag *d)
{
	struct shm_alg *a;
	enum status st = window_open(&a, s, d);

	*ctx = NULL;
	if (st != ST_OK)
		return st;
	st = shm_peers(&a->shm, MPI_COMM_NULL, s->w->rank, d);
	if (st == ST_OK)
		st = hostcoll_mpi.init(&a->mpi, s, d);
	/* With the window set up everywhere, all free it together (a collective) or none. */
	if (!world_all(s->w, st == ST_OK)) {
		window_close(a);
		return st != ST_OK ? st : diag_set(d, ST_RUNTIME, "another rank could not set up its collectives");
	}
	return window_ready(a, ctx, s);
}

static enum status hier_alg_init(void **ctx, struct hostcoll_setup *s, struct diag *d)
{
	struct shm_alg *a;
	MPI_Comm peers = MPI_COMM_NULL;
	enum status st = window_open(&a, s, d);
	int rc;

	*ctx = NULL;
	if (st != ST_OK)
		return st;
	rc = MPI_Comm_split(s->w->comm, s->w->local_rank, s->w->rank, &peers);
	if (rc != MPI_SUCCESS)
		st = world_mpi_error(d, rc, "MPI_Comm_split(node peers)");
	else /* the peers' collective first: a ring that fails after its own is local */
		st = shm_peers(&a->shm, peers, s->w->rank, d);
	if (st == ST_OK)
		st = ring_init(&a->ring, peers, (size_t)s->cfg->chunk_kb * 256, s->cfg->window, d);
	if (st == ST_OK)
		st = hostcoll_mpi.init(&a->mpi, s, d);
	if (peers != MPI_COMM_NULL && (rc = MPI_Comm_free(&peers)) != MPI_SUCCESS) /* the ring has its own */
		st = st != ST_OK ? st : world_mpi_error(d, rc, "MPI_Comm_free(node peers)");
	/* With the window set up everywhere, all free it together (a collective) or none. */
	if (!world_all(s->w, st == ST_OK)) {
		window_close(a);
		return st != ST_OK ? st : diag_set(d, ST_RUNTIME, "another rank could not set up the ring across nodes");
	}
	a->shm.up = &a->ring;
	return window_ready(a, ctx, s);
}

/* Start a window collective: all-reduce, or reduce-scatter with cuts. */
static enum status window_start(struct shm_alg *a, float *buf, size_t n, enum ring_kind kind,
				const size_t *cuts, unsigned flags, struct diag *d)
{
	enum comm_wire t = (flags & COMM_WIRE) ? a->wire : COMM_WIRE_F32;
	enum status st;

	a->order[a->shm.started % SHM_QUEUE] = hostcoll_obs_start(a->obs, n);
	st = shm_start_coll(&a->shm, buf, n, kind, cuts, t, d);
	if (st != ST_OK)
		return st;
	a->rec[a->n].on_mpi = 0;
	a->rec[a->n++].seq = a->shm.started;
	return ST_OK;
}

static enum status shm_alg_allreduce_start(void *ctx, float *buf, size_t n, unsigned flags, struct diag *d)
{
	return window_start(ctx, buf, n, RING_ALLREDUCE, NULL, flags, d);
}

static enum status shm_alg_reduce_scatter_start(void *ctx, float *buf, size_t n, const size_t *cuts,
					  unsigned flags, struct diag *d)
{
	return window_start(ctx, buf, n, RING_REDUCE_SCATTER, cuts, flags, d);
}

static enum status shm_alg_all_gather_start(void *ctx, float *buf, size_t n, const size_t *cuts,
				      struct diag *d)
{
	struct shm_alg *a = ctx;
	enum status st;

	st = hostcoll_mpi.all_gather_start(a->mpi, buf, n, cuts, d);
	if (st != ST_OK)
		return st;
	a->rec[a->n].on_mpi = 1;
	a->rec[a->n++].mpi = a->nmpi++;
	return ST_OK;
}

/* Tell the observer of the all-reduces completed on every rank so far. */
static void shm_alg_tell(struct shm_alg *a, uint64_t complete)
{
	for (; a->told < complete; a->told++)
		hostcoll_obs_done(a->obs, a->order[a->told % SHM_QUEUE]);
}

static void shm_alg_progress(void *ctx)
{
	struct shm_alg *a = ctx;

	shm_alg_tell(a, shm_progress(&a->shm));
	if (a->nmpi > 0)
		hostcoll_mpi.progress(a->mpi);
}

static enum status shm_alg_wait_first(void *ctx, int k, struct diag *d)
{
	struct shm_alg *a = ctx;
	enum status st = ST_OK;

	if (k > a->n)
		k = a->n;
	for (; a->nwaited < k && st == ST_OK; a->nwaited++) {
		if (a->rec[a->nwaited].on_mpi) {
			st = hostcoll_mpi.wait_first(a->mpi, a->rec[a->nwaited].mpi + 1, d);
		} else {
			st = shm_wait_upto(&a->shm, a->rec[a->nwaited].seq, d);
			shm_alg_tell(a, a->shm.complete);
		}
	}
	return st;
}

static enum status shm_alg_wait_all(void *ctx, struct diag *d)
{
	struct shm_alg *a = ctx;
	enum status st = shm_wait(&a->shm, d), mst;

	shm_alg_tell(a, st == ST_OK ? a->shm.started : a->shm.complete);
	mst = hostcoll_mpi.wait_all(a->mpi, d);
	a->n = a->nmpi = a->nwaited = 0;
	return st != ST_OK ? st : mst;
}

static void shm_alg_fini(void *ctx)
{
	struct shm_alg *a = ctx;
	struct world *w = a->w;

	/* collective over the node: a rank that never comes is watched */
	world_watch_begin(w, "freeing the shared-memory gradients");
	window_close(a);
	world_watch_end(w);
}

static void shm_alg_describe(void *ctx, char *buf, size_t len)
{
	snprintf(buf, len, "shared-memory all-reduce");
}

static void hier_alg_describe(void *ctx, char *buf, size_t len)
{
	snprintf(buf, len, "hierarchical all-reduce (shared memory, ring across nodes)");
}

const struct hostcoll_ops hostcoll_shm = {
	.name = "shm",
	.stream = 0,
	.init = shm_alg_init,
	.allreduce_start = shm_alg_allreduce_start,
	.reduce_scatter_start = shm_alg_reduce_scatter_start,
	.all_gather_start = shm_alg_all_gather_start,
	.progress = shm_alg_progress,
	.wait_first = shm_alg_wait_first,
	.wait_all = shm_alg_wait_all,
	.fini = shm_alg_fini,
	.describe = shm_alg_describe,
};

const struct hostcoll_ops hostcoll_hier = {
	.name = NULL, /* DDPTRAIN_ALLREDUCE=shm across nodes */
	.stream = 0,
	.init = hier_alg_init,
	.allreduce_start = shm_alg_allreduce_start,
	.reduce_scatter_start = shm_alg_reduce_scatter_start,
	.all_gather_start = shm_alg_all_gather_start,
	.progress = shm_alg_progress,
	.wait_first = shm_alg_wait_first,
	.wait_all = shm_alg_wait_all,
	.fini = shm_alg_fini,
	.describe = hier_alg_describe,
};
