/*
 * comm_mpi.c - gradient all-reduce with non-blocking MPI (MPI_Iallreduce in
 * place), progressed with MPI_Testall between layers.
 */
#include <stdlib.h>

#include "comm.h"

struct comm_mpi {
	MPI_Comm comm;
	MPI_Request req[COMM_MAX_INFLIGHT];
	int nreq;
};

static enum status mpi_fail(struct diag *d, int rc, const char *call)
{
	char msg[MPI_MAX_ERROR_STRING];
	int len = 0;

	MPI_Error_string(rc, msg, &len);
	return diag_set(d, ST_RUNTIME, "%s failed: %s", call, msg);
}

static enum status mpi_allreduce_start(void *ctx, float *buf, size_t n, struct diag *d)
{
	struct comm_mpi *c = ctx;
	int rc;

	if (c->nreq == COMM_MAX_INFLIGHT)
		return diag_set(d, ST_RUNTIME, "internal: more than %d all-reduces in flight",
				COMM_MAX_INFLIGHT);
	if (n > (size_t)1 << 30)
		return diag_set(d, ST_RUNTIME, "internal: all-reduce of %zu floats is too large", n);
	rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, c->comm,
			    &c->req[c->nreq]);
	if (rc != MPI_SUCCESS)
		return mpi_fail(d, rc, "MPI_Iallreduce");
	c->nreq++;
	return ST_OK;
}

static void mpi_progress(void *ctx)
{
	struct comm_mpi *c = ctx;
	int done;

	if (c->nreq > 0)
		MPI_Testall(c->nreq, c->req, &done, MPI_STATUSES_IGNORE);
}

static enum status mpi_wait_all(void *ctx, struct diag *d)
{
	struct comm_mpi *c = ctx;
	int rc = MPI_SUCCESS;

	if (c->nreq > 0)
		rc = MPI_Waitall(c->nreq, c->req, MPI_STATUSES_IGNORE);
	c->nreq = 0;
	if (rc != MPI_SUCCESS)
		return mpi_fail(d, rc, "MPI_Waitall(gradient all-reduce)");
	return ST_OK;
}

static enum status mpi_bcast(void *ctx, float *buf, size_t n, int root, struct diag *d)
{
	struct comm_mpi *c = ctx;
	size_t chunk = (size_t)1 << 30;

	for (size_t off = 0; off < n; off += chunk) {
		size_t len = n - off < chunk ? n - off : chunk;
		int rc = MPI_Bcast(buf + off, (int)len, MPI_FLOAT, root, c->comm);

		if (rc != MPI_SUCCESS)
			return mpi_fail(d, rc, "MPI_Bcast(weights)");
	}
	return ST_OK;
}

static void mpi_fini(void *ctx)
{
	free(ctx);
}

static const struct comm_ops comm_mpi_ops = {
	.name = "mpi",
	.allreduce_start = mpi_allreduce_start,
	.progress = mpi_progress,
	.wait_all = mpi_wait_all,
	.bcast = mpi_bcast,
	.fini = mpi_fini,
};

enum status comm_mpi_init(struct comm *c, struct world *w, struct diag *d)
{
	struct comm_mpi *m = calloc(1, sizeof *m);

	c->ops = NULL;
	c->ctx = NULL;
	if (m == NULL)
		return diag_set(d, ST_RUNTIME, "comm: out of memory");
	m->comm = w->comm;
	c->ops = &comm_mpi_ops;
	c->ctx = m;
	return ST_OK;
}

void comm_free(struct comm *c)
{
	if (c->ops != NULL)
		c->ops->fini(c->ctx);
	c->ops = NULL;
	c->ctx = NULL;
}
