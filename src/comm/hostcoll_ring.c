/*
 * hostcoll_ring.c - the pipelined ring over all ranks (ring.h) for buckets
 * of at least DDPTRAIN_RING_MIN_KB, progressed between layers and between
 * the panels of backward's products (it streams); smaller buckets go to
 * MPI's own algorithm (hostcoll_mpi), whose latency is lower. Both kinds of
 * collective (all-reduce, reduce-scatter, all-gather) go either way; they are
 * completed in the order started, whichever carries them.
 *
 * The 16-bit wire: a ring bucket is rounded into the 16-bit mirror of the
 * gradients (struct hostcoll_mirror) and travels and is summed there
 * (core/half.h's sum, in the ring's order: part i from rank i+1 to rank i);
 * its result is widened back into the floats when it is waited for.
 */
#include <stdio.h>
#include <stdlib.h>

#include "comm/hostcoll.h"
#include "comm/ring.h"

/* One collective started since the last wait. */
struct ring_rec {
	int on_mpi;                /* 1: MPI's (its mpi-th collective since the wait) */
	int mpi;
	unsigned long long seq;    /* the ring's: complete once ring.finished >= seq */
	int order;                 /* the ring's: its order in the step, for the observer */
	uint16_t *h16;             /* 16-bit: the result, widened into wide[0..wide_n) */
	float *wide;
	size_t wide_n;
};

struct ring_alg {
	struct ring ring;                /* over all ranks */
	int rank, size;
	size_t min;                      /* floats: smaller buckets go to mpi */
	void *mpi;                       /* hostcoll_mpi's instance, for those */
	struct hostcoll_obs *obs;
	enum comm_wire wire;             /* COMM_WIRE collectives' type */
	struct hostcoll_mirror *mirror;  /* where they run (shared with mpi's) */
	size_t *lo, *hi;                 /* (COMM_MAX_INFLIGHT, size): the parts, by record */
	struct ring_rec rec[COMM_MAX_INFLIGHT];
	int n, nmpi, nwaited;            /* started since the wait; of them MPI's; complete */
};

static enum status ring_alg_init(void **ctx, struct hostcoll_setup *s, struct diag *d)
{
	struct ring_alg *r = calloc(1, sizeof *r);
	size_t parts = (size_t)COMM_MAX_INFLIGHT * (size_t)s->w->size;
	enum status st;

	*ctx = NULL;
	if (r == NULL)
		return diag_set(d, ST_RUNTIME, "comm: out of memory");
	r->lo = malloc(parts * sizeof *r->lo);
	r->hi = malloc(parts * sizeof *r->hi);
	if (r->lo == NULL || r->hi == NULL) {
		free(r->lo);
		free(r->hi);
		free(r);
		return diag_set(d, ST_RUNTIME, "comm: out of memory");
	}
	st = hostcoll_mpi.init(&r->mpi, s, d);
	if (st == ST_OK) {
		st = ring_init(&r->ring, s->w->comm, (size_t)s->cfg->chunk_kb * 256, s->cfg->window, d);
		if (st != ST_OK)
			hostcoll_mpi.fini(r->mpi);
	} else {
		hostcoll_mpi.fini(r->mpi);
	}
	if (st != ST_OK) {
		free(r->lo);
		free(r->hi);
		free(r);
		return st;
	}
	r->rank = s->w->rank;
	r->size = s->w->size;
	r->min = (size_t)s->cfg->min_kb * 256;
	r->obs = s->obs;
	r->wire = s->wire;
	r->mirror = s->mirror;
	*ctx = r;
	return ST_OK;
}

/* The next record (the doors, comm.c, keep what is in flight under COMM_MAX_INFLIGHT). */
static struct ring_rec *rec_next(struct ring_alg *r)
{
	struct ring_rec *c = &r->rec[r->n];

	*c = (struct ring_rec){0};
	return c;
}

/* Hand a small collective to MPI's algorithm and count it. */
static enum status to_mpi(struct ring_alg *r, struct ring_rec *c, enum status st)
{
	if (st != ST_OK)
		return st;
	c->on_mpi = 1;
	c->mpi = r->nmpi++;
	r->n++;
	return ST_OK;
}

/* Queue q on the ring as record c, in 16 bits if wire16 (q->buf then being the floats,
 * rounded into the mirror first; wide_lo..wide_hi: what comes back). */
static enum status to_ring(struct ring_alg *r, struct ring_rec *c, struct ring_coll *q, int wire16,
			   size_t wide_lo, size_t wide_hi, struct diag *d)
{
	float *buf = q->buf;
	enum status st;

	if (wire16) {
		c->h16 = hostcoll_narrow(r->mirror, buf, q->n, d);
		if (c->h16 == NULL)
			return ST_RUNTIME;
		q->buf = c->h16;
		q->type = r->wire;
		c->h16 += wide_lo;
		c->wide = buf + wide_lo;
		c->wide_n = wide_hi - wide_lo;
	}
	st = ring_start_coll(&r->ring, q, d);
	if (st != ST_OK)
		return st;
	c->order = hostcoll_obs_start(r->obs, q->n);
	c->seq = r->ring.started;
	r->n++;
	return ST_OK;
}

static int is_wire16(const struct ring_alg *r, unsigned flags)
{
	return (flags & COMM_WIRE) && r->wire != COMM_WIRE_F32;
}

static enum status ring_alg_allreduce_start(void *ctx, float *buf, size_t n, unsigned flags, struct diag *d)
{
	struct ring_alg *r = ctx;
	struct ring_rec *c = rec_next(r);
	struct ring_coll q = {buf, n, RING_ALLREDUCE, COMM_WIRE_F32, NULL, NULL};

	if (n < r->min)
		return to_mpi(r, c, hostcoll_mpi.allreduce_start(r->mpi, buf, n, flags, d));
	return to_ring(r, c, &q, is_wire16(r, flags), 0, n, d);
}

/* The ring's parts from cuts, kept in record c's rows of lo and hi. */
static void parts(struct ring_alg *r, int c, const size_t *cuts, struct ring_coll *q)
{
	size_t *lo = r->lo + (size_t)c * (size_t)r->size, *hi = r->hi + (size_t)c * (size_t)r->size;

	for (int i = 0; i < r->size; i++) {
		lo[i] = cuts[i];
		hi[i] = cuts[i + 1];
	}
	q->lo = lo;
	q->hi = hi;
}

static enum status ring_alg_reduce_scatter_start(void *ctx, float *buf, size_t n, const size_t *cuts,
					   unsigned flags, struct diag *d)
{
	struct ring_alg *r = ctx;
	struct ring_rec *c = rec_next(r);
	struct ring_coll q = {buf, n, RING_REDUCE_SCATTER, COMM_WIRE_F32, NULL, NULL};

	if (n < r->min)
		return to_mpi(r, c, hostcoll_mpi.reduce_scatter_start(r->mpi, buf, n, cuts, flags, d));
	parts(r, r->n, cuts, &q);
	return to_ring(r, c, &q, is_wire16(r, flags), cuts[r->rank], cuts[r->rank + 1], d);
}

static enum status ring_alg_all_gather_start(void *ctx, float *buf, size_t n, const size_t *cuts,
				       struct diag *d)
{
	struct ring_alg *r = ctx;
	struct ring_rec *c = rec_next(r);
	struct ring_coll q = {buf, n, RING_ALL_GATHER, COMM_WIRE_F32, NULL, NULL};

	if (n < r->min)
		return to_mpi(r, c, hostcoll_mpi.all_gather_start(r->mpi, buf, n, cuts, d));
	parts(r, r->n, cuts, &q);
	return to_ring(r, c, &q, 0, 0, 0, d);
}

static void ring_alg_progress(void *ctx)
{
	struct ring_alg *r = ctx;

	ring_progress(&r->ring);
	hostcoll_mpi.progress(r->mpi);
}

/* Record c is complete: its 16-bit result goes back into the floats, the observer is told
 * of a ring collective (MPI's tells its own). */
static void rec_done(struct ring_alg *r, struct ring_rec *c)
{
	if (c->h16 != NULL)
		hostcoll_widen(r->mirror, c->wide, c->h16, c->wide_n);
	c->h16 = NULL;
	if (!c->on_mpi)
		hostcoll_obs_done(r->obs, c->order);
}

static enum status ring_alg_wait_first(void *ctx, int k, struct diag *d)
{
	struct ring_alg *r = ctx;
	enum status st = ST_OK;

	if (k > r->n)
		k = r->n;
	for (; r->nwaited < k && st == ST_OK; r->nwaited++) {
		struct ring_rec *c = &r->rec[r->nwaited];

		st = c->on_mpi ? hostcoll_mpi.wait_first(r->mpi, c->mpi + 1, d) :
				 ring_wait_upto(&r->ring, c->seq, d);
		if (st == ST_OK)
			rec_done(r, c);
	}
	return st;
}

static enum status ring_alg_wait_all(void *ctx, struct diag *d)
{
	struct ring_alg *r = ctx;
	enum status st = ring_wait(&r->ring, d), mst;

	mst = hostcoll_mpi.wait_all(r->mpi, d);
	for (; r->nwaited < r->n && st == ST_OK && mst == ST_OK; r->nwaited++)
		rec_done(r, &r->rec[r->nwaited]);
	r->n = r->nmpi = r->nwaited = 0;
	return mst != ST_OK ? mst : st;
}

static void ring_alg_fini(void *ctx)
{
	struct ring_alg *r = ctx;

	ring_free(&r->ring);
	hostcoll_mpi.fini(r->mpi);
	free(r->lo);
	free(r->hi);
	free(r);
}

static void ring_alg_describe(void *ctx, char *buf, size_t len)
{
	snprintf(buf, len, "ring all-reduce");
}

const struct hostcoll_ops hostcoll_ring = {
	.name = "ring",
	.stream = 1,
	.init = ring_alg_init,
	.allreduce_start = ring_alg_allreduce_start,
	.reduce_scatter_start = ring_alg_reduce_scatter_start,
	.all_gather_start = ring_alg_all_gather_start,
	.progress = ring_alg_progress,
	.wait_first = ring_alg_wait_first,
	.wait_all = ring_alg_wait_all,
	.fini = ring_alg_fini,
	.describe = ring_alg_describe,
};
