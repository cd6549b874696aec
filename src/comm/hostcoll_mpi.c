/*
 * hostcoll_mpi.c - MPI's own collectives: MPI_Iallreduce, MPI_Ireduce_scatter
 * and MPI_Iallgatherv in place, progressed with MPI_Testall (with MPI_Testsome
 * when observed, so that each gets its own completion time); a collective
 * started with COMM_LAST by its blocking form. Also what the ring hands its
 * small buckets, and the only algorithm for device memory (comm_mpi.c stages
 * it).
 *
 * MPI's in-place reduce-scatter leaves each rank's part at the start of the
 * buffer: it is moved to its place (cuts[rank]) when the collective is waited
 * for, before anybody reads it.
 *
 * The 16-bit wire (COMM_WIRE): the floats are rounded into the 16-bit mirror
 * of the gradients (struct hostcoll_mirror), reduced there as
 * MPI_UINT16_T with a user-defined commutative sum (one per type: MPI has no
 * bf16, and Open MPI no fp16 sum), and widened back into the floats when the
 * collective is waited for. The wire carries 16 bits per gradient; the order
 * of the partial sums at more than 2 ranks is Open MPI's algorithm's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"      /* half_sum: the 16-bit MPI_Op */
#include "comm/hostcoll.h"

/* One collective started since the last wait. */
struct mpi_coll {
	int req;       /* its index in req[], or -1: complete (blocking, or waited for) */
	int order;     /* its order among the step's collectives, for the observer */
	float *move;   /* reduce-scatter: its part, to move from buf[0..move_n) to move */
	float *buf;
	size_t move_n;
	int *counts, *displs; /* (size) reduce-scatter and all-gather: MPI's arrays */
	uint16_t *h16;        /* 16-bit wire: the result in the mirror, widened ... */
	float *wide;          /* ... into wide[0..wide_n) when waited for */
	size_t wide_n;
};

struct mpi_alg {
	MPI_Comm comm;
	int rank, size;
	struct hostcoll_obs *obs;
	MPI_Request req[COMM_MAX_INFLIGHT];
	int order[COMM_MAX_INFLIGHT];  /* each request's collective, by its order in the step */
	int nreq;
	struct mpi_coll coll[COMM_MAX_INFLIGHT];
	int ncoll, nwaited;            /* started since the last wait; the first nwaited complete */
	int *arrays;                   /* (COMM_MAX_INFLIGHT, 2, size): the colls' counts, displs */
	int err;                       /* the first error of a progress call, or MPI_SUCCESS */
	const char *err_call;          /* ... and the call: wait reports them */
	enum comm_wire wire;           /* COMM_WIRE collectives' type */
	MPI_Op op;                     /* its sum on MPI_UINT16_T, or MPI_OP_NULL */
	struct hostcoll_mirror *mirror; /* where 16-bit collectives run */
};

/* The user-defined sums of the 16-bit wire: inout = round16(inout + in). */
static void sum_f16(void *in, void *inout, int *len, MPI_Datatype *type)
{
	half_sum(inout, in, (size_t)*len, HALF_F16);
}

static void sum_bf16(void *in, void *inout, int *len, MPI_Datatype *type)
{
	half_sum(inout, in, (size_t)*len, HALF_BF16);
}

static enum status mpi_alg_init(void **ctx, struct hostcoll_setup *s, struct diag *d)
{
	struct mpi_alg *m = calloc(1, sizeof *m);

	*ctx = m;
	if (m == NULL)
		return diag_set(d, ST_RUNTIME, "comm: out of memory");
	m->comm = s->w->comm;
	m->rank = s->w->rank;
	m->size = s->w->size;
	m->obs = s->obs;
	m->err = MPI_SUCCESS;
	m->wire = s->wire;
	m->op = MPI_OP_NULL;
	m->mirror = s->mirror;
	m->arrays = calloc((size_t)COMM_MAX_INFLIGHT * 2 * (size_t)m->size, sizeof *m->arrays);
	if (m->arrays == NULL)
		return diag_set(d, ST_RUNTIME, "comm: out of memory");
	if (m->wire != COMM_WIRE_F32) {
		int rc = MPI_Op_create(m->wire == COMM_WIRE_F16 ? sum_f16 : sum_bf16, 1, &m->op);

		if (rc != MPI_SUCCESS) {
			m->op = MPI_OP_NULL;
			return world_mpi_error(d, rc, "MPI_Op_create(16-bit sum)");
		}
	}
	return ST_OK;
}

/* Whether a collective with these flags travels in 16 bits. */
static int wire16(const struct mpi_alg *m, unsigned flags)
{
	return (flags & COMM_WIRE) && m->wire != COMM_WIRE_F32;
}

/* A 16-bit collective's result h[0..n) goes into the floats wide[0..n), now (blocking) or
 * when waited for. */
static void widen_later(struct mpi_alg *m, struct mpi_coll *c, uint16_t *h, float *wide, size_t n,
			int now)
{
	if (now) {
		hostcoll_widen(m->mirror, wide, h, n);
		return;
	}
	c->h16 = h;
	c->wide = wide;
	c->wide_n = n;
}

/* The next collective's record (the doors, comm.c, keep what is in flight under
 * COMM_MAX_INFLIGHT: each is one of the communicator's, or one the ring handed over). */
static struct mpi_coll *coll_next(struct mpi_alg *m)
{
	struct mpi_coll *c = &m->coll[m->ncoll];

	memset(c, 0, sizeof *c);
	c->req = -1;
	c->counts = m->arrays + (size_t)m->ncoll * 2 * (size_t)m->size;
	c->displs = c->counts + m->size;
	return c;
}

/* Count the started collective c: blocking (done) or with the request MPI just filled. */
static void coll_started(struct mpi_alg *m, struct mpi_coll *c, int done)
{
	if (done) {
		hostcoll_obs_done(m->obs, c->order);
	} else {
		c->req = m->nreq;
		m->order[m->nreq++] = c->order;
	}
	m->ncoll++;
}

/* MPI's int counts and displacements from cuts (the doors checked them, and the
 * communicator's max_floats keeps them within int). */
static void coll_arrays(struct mpi_alg *m, struct mpi_coll *c, const size_t *cuts)
{
	for (int q = 0; q < m->size; q++) {
		c->counts[q] = (int)(cuts[q + 1] - cuts[q]);
		c->displs[q] = (int)cuts[q];
	}
}

static enum status mpi_alg_allreduce_start(void *ctx, float *buf, size_t n, unsigned flags, struct diag *d)
{
	struct mpi_alg *m = ctx;
	struct mpi_coll *c = coll_next(m);
	int rc;

	if (wire16(m, flags)) {
		uint16_t *h = hostcoll_narrow(m->mirror, buf, n, d);

		if (h == NULL)
			return ST_RUNTIME;
		c->order = hostcoll_obs_start(m->obs, n);
		if (flags & COMM_LAST)
			rc = MPI_Allreduce(MPI_IN_PLACE, h, (int)n, MPI_UINT16_T, m->op, m->comm);
		else
			rc = MPI_Iallreduce(MPI_IN_PLACE, h, (int)n, MPI_UINT16_T, m->op, m->comm,
					    &m->req[m->nreq]);
		if (rc != MPI_SUCCESS)
			return world_mpi_error(d, rc, flags & COMM_LAST ? "MPI_Allreduce(16-bit)" :
					       "MPI_Iallreduce(16-bit)");
		widen_later(m, c, h, buf, n, flags & COMM_LAST);
		coll_started(m, c, flags & COMM_LAST);
		return ST_OK;
	}
	c->order = hostcoll_obs_start(m->obs, n);
	if (flags & COMM_LAST) {
		/* Open MPI's blocking all-reduce (coll/tuned) is several times faster than its
		 * non-blocking one (libnbc) on large buffers, and with backward finished there
		 * is nothing left to overlap. Earlier buckets stay in flight meanwhile. */
		rc = MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, m->comm);
		if (rc != MPI_SUCCESS)
			return world_mpi_error(d, rc, "MPI_Allreduce");
		coll_started(m, c, 1);
		return ST_OK;
	}
	rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, m->comm, &m->req[m->nreq]);
	if (rc != MPI_SUCCESS)
		return world_mpi_error(d, rc, "MPI_Iallreduce");
	coll_started(m, c, 0);
	return ST_OK;
}

static enum status mpi_alg_reduce_scatter_start(void *ctx, float *buf, size_t n, const size_t *cuts,
					  unsigned flags, struct diag *d)
{
	struct mpi_alg *m = ctx;
	struct mpi_coll *c = coll_next(m);
	int rc;

	coll_arrays(m, c, cuts);
	if (wire16(m, flags)) { /* this rank's part arrives at the start of the mirror's range */
		uint16_t *h = hostcoll_narrow(m->mirror, buf, n, d);

		if (h == NULL)
			return ST_RUNTIME;
		c->order = hostcoll_obs_start(m->obs, n);
		if (flags & COMM_LAST)
			rc = MPI_Reduce_scatter(MPI_IN_PLACE, h, c->counts, MPI_UINT16_T, m->op, m->comm);
		else
			rc = MPI_Ireduce_scatter(MPI_IN_PLACE, h, c->counts, MPI_UINT16_T, m->op, m->comm,
						 &m->req[m->nreq]);
		if (rc != MPI_SUCCESS)
			return world_mpi_error(d, rc, flags & COMM_LAST ? "MPI_Reduce_scatter(16-bit)" :
					       "MPI_Ireduce_scatter(16-bit)");
		widen_later(m, c, h, buf + cuts[m->rank], cuts[m->rank + 1] - cuts[m->rank],
			    flags & COMM_LAST);
		coll_started(m, c, flags & COMM_LAST);
		return ST_OK;
	}
	c->order = hostcoll_obs_start(m->obs, n);
	c->buf = buf;
	c->move = buf + cuts[m->rank];
	c->move_n = cuts[m->rank + 1] - cuts[m->rank];
	if (flags & COMM_LAST) {
		rc = MPI_Reduce_scatter(MPI_IN_PLACE, buf, c->counts, MPI_FLOAT, MPI_SUM, m->comm);
		if (rc != MPI_SUCCESS)
			return world_mpi_error(d, rc, "MPI_Reduce_scatter");
		memmove(c->move, buf, c->move_n * sizeof *buf);
		c->move = NULL;
		coll_started(m, c, 1);
		return ST_OK;
	}
	rc = MPI_Ireduce_scatter(MPI_IN_PLACE, buf, c->counts, MPI_FLOAT, MPI_SUM, m->comm,
				 &m->req[m->nreq]);
	if (rc != MPI_SUCCESS)
		return world_mpi_error(d, rc, "MPI_Ireduce_scatter");
	coll_started(m, c, 0);
	return ST_OK;
}

static enum status mpi_alg_all_gather_start(void *ctx, float *buf, size_t n, const size_t *cuts,
				      struct diag *d)
{
	struct mpi_alg *m = ctx;
	struct mpi_coll *c = coll_next(m);
	int rc;

	coll_arrays(m, c, cuts);
	c->order = hostcoll_obs_start(m->obs, n);
	rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, c->counts, c->displs,
			     MPI_FLOAT, m->comm, &m->req[m->nreq]);
	if (rc != MPI_SUCCESS)
		return world_mpi_error(d, rc, "MPI_Iallgatherv");
	coll_started(m, c, 0);
	return ST_OK;
}

/* Keep the first failure of a progress call for wait to report. */
static void mpi_alg_failed(struct mpi_alg *m, int rc, const char *call)
{
	if (m->err == MPI_SUCCESS) {
		m->err = rc;
		m->err_call = call;
	}
}

static void mpi_alg_progress(void *ctx)
{
	struct mpi_alg *m = ctx;
	int done, rc, idx[COMM_MAX_INFLIGHT];

	if (m->nreq == 0 || m->err != MPI_SUCCESS)
		return;
	if (!hostcoll_obs_watched(m->obs)) {
		rc = MPI_Testall(m->nreq, m->req, &done, MPI_STATUSES_IGNORE);
		if (rc != MPI_SUCCESS)
			mpi_alg_failed(m, rc, "MPI_Testall(gradient all-reduce)");
		return;
	}
	/* Observed: which ones completed, so each gets its own completion time. */
	rc = MPI_Testsome(m->nreq, m->req, &done, idx, MPI_STATUSES_IGNORE);
	if (rc != MPI_SUCCESS) {
		mpi_alg_failed(m, rc, "MPI_Testsome(gradient all-reduce)");
		return;
	}
	for (int i = 0; done != MPI_UNDEFINED && i < done; i++)
		hostcoll_obs_done(m->obs, m->order[idx[i]]);
}

/* Complete requests [0, nreq) (a completed one is MPI_REQUEST_NULL), telling the observer
 * of each as it completes. */
static int wait_requests(struct mpi_alg *m, int nreq)
{
	if (!hostcoll_obs_watched(m->obs))
		return MPI_Waitall(nreq, m->req, MPI_STATUSES_IGNORE);
	for (;;) {
		int i, rc = MPI_Waitany(nreq, m->req, &i, MPI_STATUS_IGNORE);

		if (rc != MPI_SUCCESS || i == MPI_UNDEFINED)
			return rc;
		hostcoll_obs_done(m->obs, m->order[i]);
	}
}

/* Complete collectives [nwaited, k): their requests (started in order, so a prefix of
 * req[]) and the moves of the reduce-scatters among them. */
static enum status wait_upto(struct mpi_alg *m, int k, const char *call, struct diag *d)
{
	int rc = MPI_SUCCESS, last = -1;

	if (m->err != MPI_SUCCESS) { /* the requests are abandoned, as the ring's are */
		rc = m->err;
		call = m->err_call;
		m->err = MPI_SUCCESS;
		m->nreq = m->ncoll = m->nwaited = 0;
		return world_mpi_error(d, rc, call);
	}
	if (k > m->ncoll)
		k = m->ncoll;
	for (int i = m->nwaited; i < k; i++)
		if (m->coll[i].req > last)
			last = m->coll[i].req;
	if (last >= 0)
		rc = wait_requests(m, last + 1);
	if (rc != MPI_SUCCESS) {
		m->nreq = m->ncoll = m->nwaited = 0;
		return world_mpi_error(d, rc, call);
	}
	for (int i = m->nwaited; i < k; i++) {
		struct mpi_coll *c = &m->coll[i];

		if (c->move != NULL && c->move != c->buf)
			memmove(c->move, c->buf, c->move_n * sizeof *c->buf);
		c->move = NULL;
		if (c->h16 != NULL)
			hostcoll_widen(m->mirror, c->wide, c->h16, c->wide_n);
		c->h16 = NULL;
	}
	if (k > m->nwaited)
		m->nwaited = k;
	return ST_OK;
}

static enum status mpi_alg_wait_first(void *ctx, int k, struct diag *d)
{
	return wait_upto(ctx, k, "MPI_Waitall(collectives)", d);
}

static enum status mpi_alg_wait_all(void *ctx, struct diag *d)
{
	struct mpi_alg *m = ctx;
	enum status st = wait_upto(m, m->ncoll, "MPI_Waitall(gradient all-reduce)", d);

	m->nreq = m->ncoll = m->nwaited = 0;
	return st;
}

static void mpi_alg_fini(void *ctx)
{
	struct mpi_alg *m = ctx;

	if (m != NULL) {
		free(m->arrays);
		if (m->op != MPI_OP_NULL)
			(void)MPI_Op_free(&m->op); /* teardown: nobody to tell of a failure */
	}
	free(m);
}

static void mpi_alg_describe(void *ctx, char *buf, size_t len)
{
	snprintf(buf, len, "MPI all-reduce");
}

const struct hostcoll_ops hostcoll_mpi = {
	.name = "mpi",
	.stream = 0,
	.init = mpi_alg_init,
	.allreduce_start = mpi_alg_allreduce_start,
	.reduce_scatter_start = mpi_alg_reduce_scatter_start,
	.all_gather_start = mpi_alg_all_gather_start,
	.progress = mpi_alg_progress,
	.wait_first = mpi_alg_wait_first,
	.wait_all = mpi_alg_wait_all,
	.fini = mpi_alg_fini,
	.describe = mpi_alg_describe,
};
