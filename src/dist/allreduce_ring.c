/*
 * allreduce_ring.c - the pipelined ring over all ranks (ring.h) for buckets
 * of at least DDPTRAIN_RING_MIN_KB, progressed between layers and between
 * the panels of backward's products (it streams); smaller buckets go to
 * MPI's own all-reduce (allreduce_mpi), whose latency is lower.
 */
#include <stdio.h>
#include <stdlib.h>

#include "dist/allreduce.h"
#include "dist/ring.h"

struct ring_alg {
	struct ring ring;                /* over all ranks */
	size_t min;                      /* floats: smaller buckets go to mpi */
	void *mpi;                       /* allreduce_mpi's instance, for those */
	struct allreduce_obs *obs;
	/* the ring's all-reduces this step, by order: told when wait has completed them */
	int order[COMM_MAX_INFLIGHT], n;
};

static enum status ring_alg_init(void **ctx, struct allreduce_setup *s, struct diag *d)
{
	struct ring_alg *r = calloc(1, sizeof *r);
	enum status st;

	*ctx = NULL;
	if (r == NULL)
		return diag_set(d, ST_RUNTIME, "comm: out of memory");
	st = allreduce_mpi.init(&r->mpi, s, d);
	if (st == ST_OK) {
		st = ring_init(&r->ring, s->w->comm, (size_t)s->cfg->chunk_kb * 256, s->cfg->window, d);
		if (st != ST_OK)
			allreduce_mpi.fini(r->mpi);
	}
	if (st != ST_OK) {
		free(r);
		return st;
	}
	r->min = (size_t)s->cfg->min_kb * 256;
	r->obs = s->obs;
	*ctx = r;
	return ST_OK;
}

static enum status ring_alg_start(void *ctx, float *buf, size_t n, unsigned flags, struct diag *d)
{
	struct ring_alg *r = ctx;
	int k;

	if (n < r->min)
		return allreduce_mpi.start(r->mpi, buf, n, flags, d);
	k = allreduce_obs_start(r->obs, n);
	if (r->n < COMM_MAX_INFLIGHT)
		r->order[r->n++] = k;
	return ring_start(&r->ring, buf, n, d);
}

static void ring_alg_progress(void *ctx)
{
	struct ring_alg *r = ctx;

	ring_progress(&r->ring);
	allreduce_mpi.progress(r->mpi);
}

static enum status ring_alg_wait(void *ctx, struct diag *d)
{
	struct ring_alg *r = ctx;
	enum status st = ring_wait(&r->ring, d), mst;

	for (int i = 0; i < r->n; i++)
		allreduce_obs_done(r->obs, r->order[i]);
	r->n = 0;
	mst = allreduce_mpi.wait(r->mpi, d);
	return mst != ST_OK ? mst : st;
}

static void ring_alg_fini(void *ctx)
{
	struct ring_alg *r = ctx;

	ring_free(&r->ring);
	allreduce_mpi.fini(r->mpi);
	free(r);
}

static void ring_alg_describe(void *ctx, char *buf, size_t len)
{
	snprintf(buf, len, "ring all-reduce");
}

const struct allreduce_ops allreduce_ring = {
	.name = "ring",
	.stream = 1,
	.init = ring_alg_init,
	.start = ring_alg_start,
	.progress = ring_alg_progress,
	.wait = ring_alg_wait,
	.fini = ring_alg_fini,
	.describe = ring_alg_describe,
};
