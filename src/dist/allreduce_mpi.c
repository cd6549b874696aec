/*
 * allreduce_mpi.c - MPI's own all-reduce: MPI_Iallreduce in place, progressed
 * with MPI_Testall (with MPI_Testsome when observed, so that each all-reduce
 * gets its own completion time); the last bucket by the blocking
 * MPI_Allreduce. Also what the ring hands its small buckets, and the only
 * algorithm for device memory (comm_mpi.c stages it).
 */
#include <stdio.h>
#include <stdlib.h>

#include "dist/allreduce.h"

struct mpi_alg {
	MPI_Comm comm;
	struct allreduce_obs *obs;
	MPI_Request req[COMM_MAX_INFLIGHT];
	int order[COMM_MAX_INFLIGHT];  /* each request's all-reduce, by its order in the step */
	int nreq;
	int err;                       /* the first error of a progress call, or MPI_SUCCESS */
	const char *err_call;          /* ... and the call: wait reports them */
};

static enum status mpi_alg_init(void **ctx, struct allreduce_setup *s, struct diag *d)
{
	struct mpi_alg *m = calloc(1, sizeof *m);

	*ctx = m;
	if (m == NULL)
		return diag_set(d, ST_RUNTIME, "comm: out of memory");
	m->comm = s->w->comm;
	m->obs = s->obs;
	m->err = MPI_SUCCESS;
	return ST_OK;
}

static enum status mpi_alg_start(void *ctx, float *buf, size_t n, int last, struct diag *d)
{
	struct mpi_alg *m = ctx;
	int k, rc;

	if (m->nreq == COMM_MAX_INFLIGHT)
		return diag_set(d, ST_RUNTIME, "internal: more than %d all-reduces in flight",
				COMM_MAX_INFLIGHT);
	k = allreduce_obs_start(m->obs, n);
	if (last) {
		/* Open MPI's blocking all-reduce (coll/tuned) is several times faster than its
		 * non-blocking one (libnbc) on large buffers, and with backward finished there
		 * is nothing left to overlap. Earlier buckets stay in flight meanwhile. */
		rc = MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, m->comm);
		if (rc != MPI_SUCCESS)
			return world_mpi_error(d, rc, "MPI_Allreduce");
		allreduce_obs_done(m->obs, k);
		return ST_OK;
	}
	rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, m->comm, &m->req[m->nreq]);
	if (rc != MPI_SUCCESS)
		return world_mpi_error(d, rc, "MPI_Iallreduce");
	m->order[m->nreq++] = k;
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
	if (!allreduce_obs_watched(m->obs)) {
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
		allreduce_obs_done(m->obs, m->order[idx[i]]);
}

/* Complete every request, telling the observer of each as it completes. */
static int wait_observed(struct mpi_alg *m)
{
	for (;;) {
		int i, rc = MPI_Waitany(m->nreq, m->req, &i, MPI_STATUS_IGNORE);

		if (rc != MPI_SUCCESS || i == MPI_UNDEFINED)
			return rc;
		allreduce_obs_done(m->obs, m->order[i]);
	}
}

static enum status mpi_alg_wait(void *ctx, struct diag *d)
{
	struct mpi_alg *m = ctx;
	const char *call = "MPI_Waitall(gradient all-reduce)";
	int rc = MPI_SUCCESS;

	if (m->err != MPI_SUCCESS) { /* the requests are abandoned, as the ring's are */
		rc = m->err;
		call = m->err_call;
		m->err = MPI_SUCCESS;
	} else if (m->nreq > 0) {
		rc = allreduce_obs_watched(m->obs) ? wait_observed(m)
						   : MPI_Waitall(m->nreq, m->req, MPI_STATUSES_IGNORE);
	}
	m->nreq = 0;
	return rc == MPI_SUCCESS ? ST_OK : world_mpi_error(d, rc, call);
}

static void mpi_alg_fini(void *ctx)
{
	free(ctx);
}

static void mpi_alg_describe(void *ctx, char *buf, size_t len)
{
	snprintf(buf, len, "MPI all-reduce");
}

const struct allreduce_ops allreduce_mpi = {
	.name = "mpi",
	.stream = 0,
	.init = mpi_alg_init,
	.start = mpi_alg_start,
	.progress = mpi_alg_progress,
	.wait = mpi_alg_wait,
	.fini = mpi_alg_fini,
	.describe = mpi_alg_describe,
};
