/*
 * comm_mpi.c - gradient all-reduce over MPI: host-memory buckets of at least
 * DDPTRAIN_RING_MIN_KB go through the pipelined ring (ring.h), progressed
 * between layers and between the panels of backward's products; smaller ones,
 * and device memory, through MPI_Iallreduce in place, progressed with
 * MPI_Testall.
 *
 * Device memory: each bucket is copied into a pinned host mirror of the
 * gradient buffer, reduced there, and copied back when the step's all-reduces
 * complete -- except, with an MPI that says at run time that it is CUDA-aware,
 * the last bucket, whose blocking MPI_Allreduce gets the device pointer after
 * the backend's queued work is done. Only the blocking reductions take device
 * memory: Open MPI 4's coll/cuda component stages those, but not the
 * non-blocking ones (libnbc would read device memory from the host).
 */
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"    /* clock_now: the observer's times */
#include "dist/comm_mpi.h"
#include "dist/ring.h"
#include "dist/shm.h"
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h> /* MPIX_Query_cuda_support, where Open MPI provides it */
#endif

enum mpi_path { PATH_HOST, PATH_DEVICE, PATH_STAGED };

/* The host-memory all-reduce (DDPTRAIN_ALLREDUCE; the values travel in struct ring_env). */
enum host_alg {
	ALG_MPI,  /* MPI_Iallreduce */
	ALG_RING, /* the pipelined ring over all ranks (src/ring.c) */
	ALG_AUTO, /* asked for: the best of the three below for this layout */
	ALG_SHM,  /* one node: the shared-memory window (src/shm.c) */
	ALG_HIER  /* shm in each node, the ring among node peers; never asked for by name */
};

struct comm_mpi {
	MPI_Comm comm;
	enum mpi_path path;
	struct backend *be;
	float *base;        /* the device gradient buffer */
	float *stage;       /* device memory: its pinned host mirror */
	size_t nfloats;
	MPI_Request req[COMM_MAX_INFLIGHT];
	float *dev[COMM_MAX_INFLIGHT]; /* staged: where each result goes back, or NULL */
	size_t len[COMM_MAX_INFLIGHT];
	int nreq;
	enum host_alg alg;  /* PATH_HOST on 2+ ranks: which all-reduce; else ALG_MPI */
	size_t ring_min;    /* floats, ALG_RING: smaller buckets go to MPI_Iallreduce */
	struct ring ring;   /* ALG_RING: over all ranks; ALG_HIER: among node peers (shm.up) */
	struct shm shm;     /* ALG_SHM and ALG_HIER */
	struct world *w;    /* for watching MPI_Win_free */
	double shm_t0[SHM_QUEUE];  /* observed: when shared-memory all-reduce k was started */
	int shm_order[SHM_QUEUE];  /* observed: its place among its step's all-reduces */
	uint64_t shm_told;         /* observed: all-reduces reported so far */
	struct comm_observer obs;      /* obs.done NULL: nobody is told */
	double t0[COMM_MAX_INFLIGHT];  /* observed: when each request was started */
	size_t n[COMM_MAX_INFLIGHT];   /* observed: its length */
	int order[COMM_MAX_INFLIGHT];  /* observed: its place among this step's all-reduces */
	int started;                   /* all-reduces started since the last wait_all */
	/* observed ring all-reduces: reported when wait_all has completed them */
	double ring_t0[COMM_MAX_INFLIGHT];
	size_t ring_n[COMM_MAX_INFLIGHT];
	int ring_order[COMM_MAX_INFLIGHT], nring;
};

/* The ring's settings, from rank 0's environment (so that every rank agrees). */
struct ring_env {
	int use;          /* DDPTRAIN_ALLREDUCE: an enum host_alg (default ALG_AUTO) */
	int chunk_kb;     /* DDPTRAIN_RING_CHUNK_KB: floats per piece x 4 / 1024 */
	int window;       /* DDPTRAIN_RING_WINDOW: blocks in flight */
	int min_kb;       /* DDPTRAIN_RING_MIN_KB: smallest bucket for the ring */
	int panel_mflop;  /* DDPTRAIN_PANEL_MFLOP: backward's panels between progress calls */
	int bad;          /* 1-based index of the variable that is wrong, or 0 */
};

static int env_int(const char *name, int def, int lo, int hi, int *bad, int idx)
{
	const char *v = getenv(name);
	char *end;
	long x;

	if (v == NULL || *v == '\0')
		return def;
	x = strtol(v, &end, 10);
	if (*end != '\0' || x < lo || x > hi) {
		*bad = *bad ? *bad : idx;
		return def;
	}
	return (int)x;
}

static void ring_env_read(struct ring_env *e)
{
	const char *a = getenv("DDPTRAIN_ALLREDUCE");

	memset(e, 0, sizeof *e);
	e->use = ALG_AUTO;
	if (a != NULL && strcmp(a, "mpi") == 0)
		e->use = ALG_MPI;
	else if (a != NULL && strcmp(a, "ring") == 0)
		e->use = ALG_RING;
	else if (a != NULL && strcmp(a, "shm") == 0)
		e->use = ALG_SHM;
	else if (a != NULL && *a != '\0' && strcmp(a, "auto") != 0)
		e->bad = 1;
	e->chunk_kb = env_int("DDPTRAIN_RING_CHUNK_KB", 1024, 1, 1 << 20, &e->bad, 2);
	e->window = env_int("DDPTRAIN_RING_WINDOW", 8, 1, RING_WINDOW, &e->bad, 3);
	e->min_kb = env_int("DDPTRAIN_RING_MIN_KB", 64, 0, 1 << 22, &e->bad, 4);
	e->panel_mflop = env_int("DDPTRAIN_PANEL_MFLOP", 0, 0, 1 << 20, &e->bad, 5);
}

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

static enum status mpi_allreduce_start(void *ctx, float *buf, size_t n, int last, struct diag *d)
{
	struct comm_mpi *c = ctx;
	float *target = buf;
	int rc;

	if (c->nreq == COMM_MAX_INFLIGHT)
		return diag_set(d, ST_RUNTIME, "internal: more than %d all-reduces in flight",
				COMM_MAX_INFLIGHT);
	if (n > (size_t)1 << 30)
		return diag_set(d, ST_RUNTIME, "internal: all-reduce of %zu floats is too large", n);
	c->dev[c->nreq] = NULL;
	if (c->path == PATH_STAGED || (c->path == PATH_DEVICE && !last)) {
		enum status st;

		if (buf < c->base || buf + n > c->base + c->nfloats)
			return diag_set(d, ST_RUNTIME, "internal: all-reduce outside the gradient buffer");
		target = c->stage + (buf - c->base);
		st = c->be->ops->to_host(c->be->ctx, target, buf, n, d); /* waits for the backward so far */
		if (st != ST_OK)
			return st;
		c->dev[c->nreq] = buf;
		c->len[c->nreq] = n;
	} else if (c->path == PATH_DEVICE) {
		enum status st = c->be->ops->sync(c->be->ctx, d);

		if (st != ST_OK)
			return st;
	}
	if (c->alg >= ALG_SHM) {
		if (c->obs.done != NULL) {
			c->shm_t0[c->shm.started % SHM_QUEUE] = clock_now();
			c->shm_order[c->shm.started % SHM_QUEUE] = c->started;
		}
		c->started++;
		return shm_start(&c->shm, target, n, d);
	}
	if (c->alg == ALG_RING && n >= c->ring_min) {
		if (c->obs.done != NULL && c->nring < COMM_MAX_INFLIGHT) {
			c->ring_t0[c->nring] = clock_now();
			c->ring_n[c->nring] = n;
			c->ring_order[c->nring++] = c->started;
		}
		c->started++;
		return ring_start(&c->ring, target, n, d);
	}
	if (c->obs.done != NULL) {
		c->t0[c->nreq] = clock_now();
		c->n[c->nreq] = n;
		c->order[c->nreq] = c->started;
	}
	c->started++;
	if (last) {
		/* Open MPI's blocking all-reduce (coll/tuned) is several times faster than its
		 * non-blocking one (libnbc) on large buffers, and with backward finished there
		 * is nothing left to overlap. Earlier buckets stay in flight meanwhile. */
		rc = MPI_Allreduce(MPI_IN_PLACE, target, (int)n, MPI_FLOAT, MPI_SUM, c->comm);
		if (rc != MPI_SUCCESS)
			return world_mpi_error(d, rc, "MPI_Allreduce");
		if (c->obs.done != NULL)
			c->obs.done(c->obs.arg, c->order[c->nreq], n, c->t0[c->nreq], clock_now());
		if (c->dev[c->nreq] != NULL) /* wait_all copies it back with the others */
			c->req[c->nreq++] = MPI_REQUEST_NULL;
		return ST_OK;
	}
	rc = MPI_Iallreduce(MPI_IN_PLACE, target, (int)n, MPI_FLOAT, MPI_SUM, c->comm,
			    &c->req[c->nreq]);
	if (rc != MPI_SUCCESS)
		return world_mpi_error(d, rc, "MPI_Iallreduce");
	c->nreq++;
	return ST_OK;
}

/* Tell the observer of the shared-memory all-reduces completed on every rank so far. */
static void shm_tell(struct comm_mpi *c, uint64_t complete)
{
	for (; c->shm_told < complete; c->shm_told++) {
		int k = (int)(c->shm_told % SHM_QUEUE);

		if (c->obs.done != NULL)
			c->obs.done(c->obs.arg, c->shm_order[k], c->shm.q[k].n, c->shm_t0[k], clock_now());
	}
}

static void mpi_progress(void *ctx)
{
	struct comm_mpi *c = ctx;
	int done, idx[COMM_MAX_INFLIGHT];

	if (c->alg >= ALG_SHM) {
		shm_tell(c, shm_progress(&c->shm));
		return;
	}
	if (c->alg == ALG_RING)
		ring_progress(&c->ring);
	if (c->nreq == 0)
		return;
	if (c->obs.done == NULL) {
		MPI_Testall(c->nreq, c->req, &done, MPI_STATUSES_IGNORE);
		return;
	}
	/* Observed: which ones completed, so each gets its own completion time. */
	if (MPI_Testsome(c->nreq, c->req, &done, idx, MPI_STATUSES_IGNORE) == MPI_SUCCESS &&
	    done != MPI_UNDEFINED)
		for (int i = 0; i < done; i++)
			c->obs.done(c->obs.arg, c->order[idx[i]], c->n[idx[i]], c->t0[idx[i]],
				    clock_now());
}

/* Complete every request, telling the observer of each as it completes. */
static int wait_observed(struct comm_mpi *c)
{
	for (;;) {
		int i, rc = MPI_Waitany(c->nreq, c->req, &i, MPI_STATUS_IGNORE);

		if (rc != MPI_SUCCESS || i == MPI_UNDEFINED)
			return rc;
		c->obs.done(c->obs.arg, c->order[i], c->n[i], c->t0[i], clock_now());
	}
}

static enum status mpi_wait_all(void *ctx, struct diag *d)
{
	struct comm_mpi *c = ctx;
	int rc = MPI_SUCCESS;
	enum status st = c->alg == ALG_RING ? ring_wait(&c->ring, d) : ST_OK;

	if (c->alg >= ALG_SHM) {
		st = shm_wait(&c->shm, d);
		shm_tell(c, st == ST_OK ? c->shm.started : c->shm.complete);
	}

	for (int i = 0; i < c->nring && c->obs.done != NULL; i++)
		c->obs.done(c->obs.arg, c->ring_order[i], c->ring_n[i], c->ring_t0[i], clock_now());
	c->nring = 0;

	if (c->nreq > 0)
		rc = c->obs.done != NULL ? wait_observed(c)
					 : MPI_Waitall(c->nreq, c->req, MPI_STATUSES_IGNORE);
	if (rc == MPI_SUCCESS)
		for (int i = 0; i < c->nreq; i++)
			if (c->dev[i] != NULL)
				c->be->ops->to_device(c->be->ctx, c->dev[i], c->stage + (c->dev[i] - c->base),
					      c->len[i]);
	c->nreq = 0;
	c->started = 0;
	if (rc != MPI_SUCCESS)
		return world_mpi_error(d, rc, "MPI_Waitall(gradient all-reduce)");
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
	if (c->alg == ALG_RING || c->alg == ALG_HIER)
		ring_free(&c->ring);
	if (c->alg >= ALG_SHM) { /* collective over the node: a rank that never comes is watched */
		world_watch_begin(c->w, "freeing the shared-memory gradients");
		shm_free(&c->shm);
		world_watch_end(c->w);
	}
	free(c);
}

static void mpi_observe(void *ctx, const struct comm_observer *obs)
{
	struct comm_mpi *c = ctx;

	c->obs = obs != NULL ? *obs : (struct comm_observer){NULL, NULL};
}

static const struct comm_ops comm_mpi_ops = {
	.name = "mpi",
	.capturable = 0,
	.allreduce_start = mpi_allreduce_start,
	.progress = mpi_progress,
	.wait_all = mpi_wait_all,
	.bcast = mpi_bcast,
	.fini = mpi_fini,
	.observe = mpi_observe,
};

/* Host memory on 2+ ranks: which all-reduce (rank 0's environment decides for all) and its
 * set-up. auto and shm: the shared-memory all-reduce inside one node; across nodes with the
 * same number of ranks (2 or more) on each, shm inside them and the ring among the ranks of
 * the same node-local rank (hierarchical); otherwise the ring over all ranks. Every rank
 * reaches the same choice: local_size < size on all of them or on none. */
static enum status host_allreduce_init(struct comm_mpi *m, struct comm *c, struct world *w,
				       const float *base, size_t nfloats, struct diag *d)
{
	static const char *const names[] = {"", "DDPTRAIN_ALLREDUCE: want auto, ring, shm or mpi",
		"DDPTRAIN_RING_CHUNK_KB: want 1 to 1048576", "DDPTRAIN_RING_WINDOW: want 1 to 8",
		"DDPTRAIN_RING_MIN_KB: want 0 to 4194304", "DDPTRAIN_PANEL_MFLOP: want 0 to 1048576"};
	struct ring_env e;
	enum status st = ST_OK;
	enum host_alg alg;
	int rc;

	ring_env_read(&e);
	rc = MPI_Bcast(&e, (int)sizeof e, MPI_BYTE, 0, w->comm);
	alg = (enum host_alg)e.use;
	if (rc == MPI_SUCCESS && (alg == ALG_AUTO || alg == ALG_SHM)) {
		int ls[2] = {w->local_size, -w->local_size};

		if (w->local_size == w->size)
			alg = ALG_SHM;
		else if ((rc = MPI_Allreduce(MPI_IN_PLACE, ls, 2, MPI_INT, MPI_MIN, w->comm)) ==
			 MPI_SUCCESS)
			alg = ls[0] == -ls[1] && ls[0] > 1 ? ALG_HIER : ALG_RING;
	}
	if (rc != MPI_SUCCESS)
		return world_mpi_error(d, rc, "MPI_Bcast/MPI_Allreduce(all-reduce settings)");
	if (e.bad)
		return diag_set(d, ST_USAGE, "%s", names[e.bad]);
	if (alg >= ALG_SHM) {
		st = shm_init(&m->shm, w->local, nfloats, d);
		/* Where the window cannot be had (a small /dev/shm in a container), auto falls
		 * back on every rank (to MPI's all-reduce on one node, to the ring across
		 * nodes); asked for, it is an error. */
		if (!world_all(w, st == ST_OK)) {
			if (st == ST_OK) /* another rank failed: a collective free could wait */
				m->shm.win = MPI_WIN_NULL;
			if (e.use == ALG_SHM) /* asked for */
				return st != ST_OK ? st : diag_set(d, ST_RUNTIME, "DDPTRAIN_ALLREDUCE=shm: another rank could not map the shared-memory gradients");
			alg = alg == ALG_HIER ? ALG_RING : ALG_MPI;
		}
	}
	if (alg == ALG_RING || alg == ALG_HIER) {
		MPI_Comm over = w->comm;

		if (alg == ALG_HIER && (rc = MPI_Comm_split(w->comm, w->local_rank, w->rank, &over)) != MPI_SUCCESS)
			st = world_mpi_error(d, rc, "MPI_Comm_split(node peers)");
		else
			st = ring_init(&m->ring, over, (size_t)e.chunk_kb * 256, e.window, d);
		if (over != w->comm)
			MPI_Comm_free(&over); /* the ring keeps its own duplicate */
		/* With the window set up everywhere, all free it together (a collective) or none. */
		if (alg == ALG_HIER && !world_all(w, st == ST_OK)) {
			ring_free(&m->ring);
			shm_free(&m->shm);
			return st != ST_OK ? st : diag_set(d, ST_RUNTIME, "another rank could not set up the ring across nodes");
		}
		if (st != ST_OK)
			return st;
	}
	m->alg = alg;
	if (alg >= ALG_SHM) {
		if (alg == ALG_HIER)
			m->shm.up = &m->ring;
		memcpy(m->shm.mine, base, nfloats * sizeof *base);
		c->grads = m->shm.mine;
	}
	m->ring_min = (size_t)e.min_kb * 256;
	c->panel_flops = e.panel_mflop * 1e6;
	return ST_OK;
}

enum status comm_mpi_init(struct comm *c, struct world *w, struct backend *be, float *base,
			  size_t nfloats, struct diag *d)
{
	struct comm_mpi *m = calloc(1, sizeof *m);

	c->ops = NULL;
	c->ctx = NULL;
	c->stream = 0;
	c->panel_flops = 0;
	c->grads = NULL;
	if (m == NULL)
		return diag_set(d, ST_RUNTIME, "comm: out of memory");
	m->comm = w->comm;
	m->w = w;
	m->be = be;
	m->base = base;
	m->nfloats = nfloats;
	m->path = be->ops->host_memory ? PATH_HOST : comm_mpi_cuda_aware() ? PATH_DEVICE : PATH_STAGED;
	if (m->path != PATH_HOST) {
		m->stage = be->ops->host_alloc(be->ctx, nfloats);
		if (m->stage == NULL) {
			free(m);
			return diag_set(d, ST_RUNTIME, "comm: out of pinned host memory for %zu floats", nfloats);
		}
	}
	if (m->path == PATH_HOST && w->size > 1) {
		enum status st = host_allreduce_init(m, c, w, base, nfloats, d);

		if (st != ST_OK) {
			free(m);
			return st;
		}
	}
	c->ops = &comm_mpi_ops;
	c->ctx = m;
	c->stream = m->alg == ALG_RING;
	return ST_OK;
}

const char *comm_mpi_path_name(const struct comm *c)
{
	static const char *const names[] = {"host memory", "device memory (CUDA-aware MPI)",
					    "staged through pinned host memory"};
	const struct comm_mpi *m = c->ctx;

	if (m->path == PATH_HOST)
		return m->alg == ALG_HIER  ? "hierarchical all-reduce (shared memory, ring across nodes)"
		       : m->alg == ALG_SHM ? "shared-memory all-reduce"
		       : m->alg == ALG_RING ? "ring all-reduce" : "MPI all-reduce";
	return names[m->path];
}
