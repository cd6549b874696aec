/*
 * comm_mpi.c - gradient all-reduce over MPI: where the gradients travel (host
 * memory, device memory given to a CUDA-aware MPI, or staged through pinned
 * host memory) and the broadcast of the weights. The all-reduce itself is
 * the algorithm hostcoll_choose picks (hostcoll.h): in host memory on 2+
 * ranks the ring, the shared-memory window or the hierarchical one; otherwise
 * MPI_Iallreduce in place, progressed with MPI_Testall.
 *
 * Device memory: each bucket is copied into a pinned host mirror of the
 * gradient buffer, reduced there, and copied back when the step's all-reduces
 * complete -- except, with an MPI that says at run time that it is CUDA-aware,
 * the last bucket, whose blocking MPI_Allreduce gets the device pointer after
 * the backend's queued work is done (in float32 only: a 16-bit collective is
 * rounded on the host, so it is staged too). Only the blocking reductions take device
 * memory: Open MPI 4's coll/cuda component stages those, but not the
 * non-blocking ones (libnbc would read device memory from the host). A buffer
 * outside the gradients (the parameters an all-gather completes) is staged
 * through a second pinned buffer of the same size, or of struct comm.outside
 * when larger (ZeRO-2's gradient memory can be smaller than the parameters),
 * taken in the order the collectives start and given back at wait_all.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/hostcoll.h" /* hostcoll_choose, struct hostcoll_ops */
#include "comm/comm_mpi.h"
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h> /* MPIX_Query_cuda_support, where Open MPI provides it */
#endif

enum mpi_path { PATH_HOST, PATH_DEVICE, PATH_STAGED };

struct comm_mpi {
	MPI_Comm comm;
	int rank;
	enum mpi_path path;
	struct backend *be;
	float *base;        /* the device gradient buffer */
	float *stage;       /* device memory: its pinned host mirror */
	size_t nfloats;
	enum comm_wire wire;  /* COMM_WIRE collectives' type */
	/* staged since the last wait: where each result goes back when its collective (by
	 * its order since that wait) completes; at most one per collective, and the doors
	 * (comm.c) keep those under COMM_MAX_INFLIGHT */
	struct { float *dev, *host; size_t n; int coll; } staged[COMM_MAX_INFLIGHT];
	/* device memory: (nother) pinned, for buffers outside base, taken as a ring: the
	 * staged entries not yet copied back hold one run of it, oldest first */
	float *other;
	size_t nother;       /* the gradients' size, or struct comm.outside if larger */
	int nstaged, ncoll, nback; /* staged entries; collectives started; entries copied back */
	struct hostcoll alg;      /* host memory: the one chosen; device memory: MPI's own */
	struct hostcoll_obs obs;  /* what alg tells: comm_ops.observe's observer */
};

static const struct comm_ops comm_mpi_ops;

int comm_mpi_cuda_aware(void)
{
	/* For the tests' fake GPU module, whose device memory is host memory: force it. */
	const char *force = getenv("DDPTRAIN_MPI_CUDA_AWARE");

	if (force != NULL && *force != '\0')
		return strcmp(force, "0") != 0;
	/* The library decides, not the header: Debian's mpi-ext.h says MPIX_CUDA_AWARE_SUPPORT
	 * 0 whatever the libmpi found at run time was built with. */
#if defined(OMPI_HAVE_MPI_EXT_CUDA) && OMPI_HAVE_MPI_EXT_CUDA
	return MPIX_Query_cuda_support() == 1;
#else
	return 0;
#endif
}

/* n floats of the outside ring for a new collective, or NULL: after the newest entry in
 * use if it has room to the end, else from the start if that has room before the oldest.
 * Entries are copied back (freed) in the order taken, so what is in use is one run. */
static float *other_take(struct comm_mpi *c, size_t n)
{
	float *oldest = NULL, *end = c->other;

	for (int i = c->nback; i < c->nstaged; i++) {
		float *h = c->staged[i].host;

		if (h < c->other || h >= c->other + c->nother)
			continue; /* in the gradients' mirror */
		oldest = oldest != NULL ? oldest : h;
		end = h + c->staged[i].n;
	}
	if (n <= (size_t)(c->other + c->nother - end) && (oldest == NULL || end > oldest))
		return end;
	if (oldest != NULL && end > oldest && n <= (size_t)(oldest - c->other))
		return c->other;
	if (oldest != NULL && end <= oldest && n <= (size_t)(oldest - end))
		return end;
	return NULL;
}

/* Where a collective over buf[0..n) runs: buf itself, or (device memory) its pinned host
 * mirror, filled from the device with buf[from..to) (waiting for the backward so far) and
 * copied back whole when the collective completes. */
static enum status mpi_target(struct comm_mpi *c, float *buf, size_t n, size_t from, size_t to,
			      unsigned flags, float **target, struct diag *d)
{
	enum status st;

	*target = buf;
	if (c->path == PATH_HOST)
		return ST_OK;
	/* an all-reduce in float32 (16 bits are rounded on the host: staged) */
	if (c->path == PATH_DEVICE && (flags & COMM_LAST) && from == 0 && to == n &&
	    !((flags & COMM_WIRE) && c->wire != COMM_WIRE_F32))
		return c->be->ops->sync(c->be->ctx, d);
	if (buf >= c->base && buf + n <= c->base + c->nfloats) {
		*target = c->stage + (buf - c->base);
	} else { /* elsewhere (a float32 all-gather of the parameters) */
		if (c->other == NULL && (c->other = c->be->ops->host_alloc(c->be->ctx, c->nother)) == NULL)
			return diag_set(d, ST_RUNTIME, "comm: out of pinned host memory for %zu floats",
					c->nother);
		*target = other_take(c, n);
		if (*target == NULL)
			return diag_set(d, ST_RUNTIME,
					"internal: collectives outside the gradients beyond their size in flight");
	}
	st = c->be->ops->to_host(c->be->ctx, *target + from, buf + from, to - from, d);
	if (st != ST_OK)
		return st;
	c->staged[c->nstaged].dev = buf;
	c->staged[c->nstaged].host = *target;
	c->staged[c->nstaged].n = n;
	c->staged[c->nstaged++].coll = c->ncoll;
	return ST_OK;
}

/* A collective failed to start: its staged entry, if any, goes. */
static enum status mpi_started(struct comm_mpi *c, enum status st)
{
	if (st != ST_OK && c->nstaged > c->nback && c->staged[c->nstaged - 1].coll == c->ncoll)
		c->nstaged--;
	if (st == ST_OK)
		c->ncoll++;
	return st;
}

static enum status mpi_allreduce_start(void *ctx, float *buf, size_t n, unsigned flags,
				       struct diag *d)
{
	struct comm_mpi *c = ctx;
	float *target;
	enum status st = mpi_target(c, buf, n, 0, n, flags, &target, d);

	if (st != ST_OK)
		return st;
	return mpi_started(c, c->alg.ops->allreduce_start(c->alg.ctx, target, n, flags, d));
}

static enum status mpi_reduce_scatter_start(void *ctx, float *buf, size_t n, const size_t *cuts,
					    unsigned flags, struct diag *d)
{
	struct comm_mpi *c = ctx;
	float *target;
	enum status st;

	if (c->alg.ops->reduce_scatter_start == NULL)
		return diag_set(d, ST_RUNTIME, "internal: the %s has no reduce-scatter",
				c->alg.ops->name);
	st = mpi_target(c, buf, n, 0, n, flags & ~COMM_LAST, &target, d);
	if (st != ST_OK)
		return st;
	return mpi_started(c, c->alg.ops->reduce_scatter_start(c->alg.ctx, target, n, cuts, flags, d));
}

static enum status mpi_all_gather_start(void *ctx, float *buf, size_t n, const size_t *cuts,
					struct diag *d)
{
	struct comm_mpi *c = ctx;
	const int r = c->rank;
	float *target;
	enum status st;

	if (c->alg.ops->all_gather_start == NULL)
		return diag_set(d, ST_RUNTIME, "internal: the %s has no all-gather", c->alg.ops->name);
	st = mpi_target(c, buf, n, cuts[r], cuts[r + 1], 0, &target, d);
	if (st != ST_OK)
		return st;
	return mpi_started(c, c->alg.ops->all_gather_start(c->alg.ctx, target, n, cuts, d));
}

static void mpi_progress(void *ctx)
{
	struct comm_mpi *c = ctx;

	c->alg.ops->progress(c->alg.ctx);
}

/* The staged results of collectives before k go back to the device. */
static void mpi_copy_back(struct comm_mpi *c, int k)
{
	for (; c->nback < c->nstaged && c->staged[c->nback].coll < k; c->nback++)
		c->be->ops->to_device(c->be->ctx, c->staged[c->nback].dev, c->staged[c->nback].host,
				      c->staged[c->nback].n);
}

static enum status mpi_wait_first(void *ctx, int k, struct diag *d)
{
	struct comm_mpi *c = ctx;
	enum status st;

	if (c->alg.ops->wait_first == NULL)
		return diag_set(d, ST_RUNTIME, "internal: the %s cannot wait for some collectives",
				c->alg.ops->name);
	st = c->alg.ops->wait_first(c->alg.ctx, k, d);
	if (st == ST_OK)
		mpi_copy_back(c, k);
	return st;
}

static enum status mpi_wait_all(void *ctx, struct diag *d)
{
	struct comm_mpi *c = ctx;
	enum status st = c->alg.ops->wait_all(c->alg.ctx, d);

	if (st == ST_OK)
		mpi_copy_back(c, c->ncoll);
	c->nstaged = c->nback = c->ncoll = 0;
	c->obs.started = 0; /* the next step's collectives count from 0 */
	return st;
}

static enum status mpi_bcast(void *ctx, float *buf, size_t n, int root, struct diag *d)
{
	struct comm_mpi *c = ctx;
	const size_t chunk = (size_t)1 << 30;
	float *host = buf;
	enum status st = ST_OK;

	if (c->path != PATH_HOST) { /* once, at start-up: a plain host copy will do */
		host = malloc((n ? n : 1) * sizeof *host);
		if (host == NULL)
			return diag_set(d, ST_RUNTIME, "comm: out of memory for the broadcast");
		st = c->be->ops->to_host(c->be->ctx, host, buf, n, d);
	}
	for (size_t off = 0; off < n && st == ST_OK; off += chunk) {
		size_t len = n - off < chunk ? n - off : chunk;
		int rc = MPI_Bcast(host + off, (int)len, MPI_FLOAT, root, c->comm);

		if (rc != MPI_SUCCESS)
			st = world_mpi_error(d, rc, "MPI_Bcast(weights)");
	}
	if (host != buf) {
		if (st == ST_OK) {
			c->be->ops->to_device(c->be->ctx, buf, host, n);
			st = c->be->ops->sync(c->be->ctx, d);
		}
		free(host);
	}
	return st;
}

static void mpi_fini(void *ctx)
{
	struct comm_mpi *c = ctx;

	if (c == NULL)
		return;
	if (c->stage != NULL)
		c->be->ops->host_free(c->be->ctx, c->stage);
	if (c->other != NULL)
		c->be->ops->host_free(c->be->ctx, c->other);
	hostcoll_free(&c->alg);
	free(c);
}

static void mpi_observe(void *ctx, const struct comm_observer *obs)
{
	struct comm_mpi *c = ctx;

	c->obs.to = obs != NULL ? *obs : (struct comm_observer){0};
}

/* "mpi, " and how the gradients travel: the algorithm in host memory, else the path. */
static void mpi_describe(void *ctx, char *buf, size_t len)
{
	static const char *const paths[] = {NULL, "device memory (CUDA-aware MPI)",
					    "staged through pinned host memory"};
	struct comm_mpi *c = ctx;
	char how[128];

	if (c->path == PATH_HOST)
		c->alg.ops->describe(c->alg.ctx, how, sizeof how);
	else
		snprintf(how, sizeof how, "%s", paths[c->path]);
	snprintf(buf, len, "%s, %s", comm_mpi_ops.name, how);
}

static const struct comm_ops comm_mpi_ops = {
	.name = "mpi",
	.capturable = 0,
	.max_floats = (size_t)1 << 30, /* MPI's counts are int */
	.allreduce_start = mpi_allreduce_start,
	.reduce_scatter_start = mpi_reduce_scatter_start,
	.all_gather_start = mpi_all_gather_start,
	.progress = mpi_progress,
	.wait_first = mpi_wait_first,
	.wait_all = mpi_wait_all,
	.bcast = mpi_bcast,
	.fini = mpi_fini,
	.observe = mpi_observe,
	.describe = mpi_describe,
};

enum status comm_mpi_init(struct comm *c, struct world *w, struct backend *be, float *base,
			  size_t nfloats, size_t later_bytes, struct diag *d)
{
	struct comm_mpi *m = calloc(1, sizeof *m);
	enum status st;

	c->ops = NULL;
	c->ctx = NULL;
	c->stream = 0;
	c->panel_flops = 0;
	c->grads = NULL;
	c->notice[0] = '\0';
	if (m == NULL)
		return diag_set(d, ST_RUNTIME, "comm: out of memory");
	m->comm = w->comm;
	m->rank = w->rank;
	m->be = be;
	m->base = base;
	m->nfloats = nfloats;
	m->nother = c->outside > nfloats ? c->outside : nfloats;
	m->wire = c->wire;
	m->path = be->ops->host_memory ? PATH_HOST : comm_mpi_cuda_aware() ? PATH_DEVICE : PATH_STAGED;
	if (m->path != PATH_HOST) {
		m->stage = be->ops->host_alloc(be->ctx, nfloats);
		if (m->stage == NULL) {
			free(m);
			return diag_set(d, ST_RUNTIME, "comm: out of pinned host memory for %zu floats", nfloats);
		}
	}
	/* Device memory: the algorithm sees the pinned mirror, where staged collectives run. */
	st = hostcoll_choose(&m->alg, c, w, m->path == PATH_HOST, m->path == PATH_HOST ? base : m->stage,
			      nfloats, later_bytes, &m->obs, d);
	if (st != ST_OK) {
		mpi_fini(m);
		return st;
	}
	c->ops = &comm_mpi_ops;
	c->ctx = m;
	return ST_OK;
}
