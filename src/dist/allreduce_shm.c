/*
 * allreduce_shm.c - the all-reduces through the shared-memory window (shm.h):
 * on one node (allreduce_shm), and across nodes with the same number of ranks
 * on each (allreduce_hier: the window in each node, the ring of ring.h among
 * the ranks of the same node-local rank). The two differ only in set-up; the
 * gradients live in the window, so both move them there.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/allreduce.h"
#include "dist/ring.h"
#include "dist/shm.h"

struct shm_alg {
	struct shm shm;
	struct ring ring;           /* hier: among this node-local rank's peers (shm.up) */
	struct world *w;            /* for watching MPI_Win_free */
	struct allreduce_obs *obs;
	int order[SHM_QUEUE];       /* all-reduce k (from the start) at k % SHM_QUEUE: its order */
	uint64_t told;              /* all-reduces told to the observer so far */
};

/* Map the window on every rank of each node, or on none: s->unavailable, with the first
 * failing rank's reason on every rank, where some rank cannot. Whether it can is agreed
 * before MPI_Win_allocate_shared: Open MPI 4.1's osc/sm fails only on the rank that
 * creates or maps the backing file and leaves the others inside the call (until
 * --timeout). Where the call fails all the same, a rank whose own window was mapped then
 * leaves it, since freeing it is a collective the failed rank would not join. */
static enum status window_open(struct shm_alg **out, struct allreduce_setup *s, struct diag *d)
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
	*out = a;
	return ST_OK;
}

/* Move the gradients into the window: the caller's buffer from now on. */
static enum status window_ready(struct shm_alg *a, void **ctx, struct allreduce_setup *s)
{
	memcpy(a->shm.mine, s->base, s->nfloats * sizeof *s->base);
	s->grads = a->shm.mine;
	*ctx = a;
	return ST_OK;
}

static enum status shm_alg_init(void **ctx, struct allreduce_setup *s, struct diag *d)
{
	struct shm_alg *a;
	enum status st = window_open(&a, s, d);

	*ctx = NULL;
	return st != ST_OK ? st : window_ready(a, ctx, s);
}

static enum status hier_alg_init(void **ctx, struct allreduce_setup *s, struct diag *d)
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
	else
		st = ring_init(&a->ring, peers, (size_t)s->cfg->chunk_kb * 256, s->cfg->window, d);
	if (peers != MPI_COMM_NULL && (rc = MPI_Comm_free(&peers)) != MPI_SUCCESS) /* the ring has its own */
		st = st != ST_OK ? st : world_mpi_error(d, rc, "MPI_Comm_free(node peers)");
	/* With the window set up everywhere, all free it together (a collective) or none. */
	if (!world_all(s->w, st == ST_OK)) {
		ring_free(&a->ring);
		shm_free(&a->shm);
		free(a);
		return st != ST_OK ? st : diag_set(d, ST_RUNTIME, "another rank could not set up the ring across nodes");
	}
	a->shm.up = &a->ring;
	return window_ready(a, ctx, s);
}

static enum status shm_alg_start(void *ctx, float *buf, size_t n, unsigned flags, struct diag *d)
{
	struct shm_alg *a = ctx;

	a->order[a->shm.started % SHM_QUEUE] = allreduce_obs_start(a->obs, n);
	return shm_start(&a->shm, buf, n, d);
}

/* Tell the observer of the all-reduces completed on every rank so far. */
static void shm_alg_tell(struct shm_alg *a, uint64_t complete)
{
	for (; a->told < complete; a->told++)
		allreduce_obs_done(a->obs, a->order[a->told % SHM_QUEUE]);
}

static void shm_alg_progress(void *ctx)
{
	struct shm_alg *a = ctx;

	shm_alg_tell(a, shm_progress(&a->shm));
}

static enum status shm_alg_wait(void *ctx, struct diag *d)
{
	struct shm_alg *a = ctx;
	enum status st = shm_wait(&a->shm, d);

	shm_alg_tell(a, st == ST_OK ? a->shm.started : a->shm.complete);
	return st;
}

static void shm_alg_fini(void *ctx)
{
	struct shm_alg *a = ctx;

	ring_free(&a->ring);
	/* collective over the node: a rank that never comes is watched */
	world_watch_begin(a->w, "freeing the shared-memory gradients");
	shm_free(&a->shm);
	world_watch_end(a->w);
	free(a);
}

static void shm_alg_describe(void *ctx, char *buf, size_t len)
{
	snprintf(buf, len, "shared-memory all-reduce");
}

static void hier_alg_describe(void *ctx, char *buf, size_t len)
{
	snprintf(buf, len, "hierarchical all-reduce (shared memory, ring across nodes)");
}

const struct allreduce_ops allreduce_shm = {
	.name = "shm",
	.stream = 0,
	.init = shm_alg_init,
	.start = shm_alg_start,
	.progress = shm_alg_progress,
	.wait = shm_alg_wait,
	.fini = shm_alg_fini,
	.describe = shm_alg_describe,
};

const struct allreduce_ops allreduce_hier = {
	.name = NULL, /* DDPTRAIN_ALLREDUCE=shm across nodes */
	.stream = 0,
	.init = hier_alg_init,
	.start = shm_alg_start,
	.progress = shm_alg_progress,
	.wait = shm_alg_wait,
	.fini = shm_alg_fini,
	.describe = hier_alg_describe,
};
