/* comm_open.c - choosing and setting up the gradient communicator. */
#include "comm/comm_mpi.h"
#include "comm/comm_open.h"

/* nccl_comm_init's ready: every rank's own set-up succeeded (a collective), and then the
 * init, which blocks until every rank is in it, runs under the watchdog. */
struct ready_arg {
	struct world *w;
	int watching;
};

static int nccl_ready(void *arg, int ok)
{
	struct ready_arg *r = arg;

	if (!world_all(r->w, ok))
		return 0;
	world_watch_begin(r->w, "the NCCL communicator set-up");
	r->watching = 1;
	return 1;
}

enum status comm_open(struct comm *c, enum comm_kind kind, struct world *w, struct backend *be,
		      const struct gpu *mod, float *grads, size_t n, size_t later_bytes,
		      double timeout_s, struct diag *d)
{
	unsigned char id[GPU_NCCL_ID_BYTES] = {0};
	enum status st = ST_OK;

	c->size = w->size; /* the doors check cuts against it (comm.c) */
	c->inflight = 0;
	if (kind != COMM_NCCL)
		return comm_mpi_init(c, w, be, grads, n, later_bytes, d);
	if (w->rank == 0)
		st = mod->mod->nccl_unique_id(id, d);
	if (!world_all(w, st == ST_OK))
		return st != ST_OK ? st : diag_set(d, ST_RUNTIME, "rank 0 could not create the NCCL id");
	st = world_bcast(w, id, sizeof id, 0, d);
	if (!world_all(w, st == ST_OK))
		return st != ST_OK ? st : diag_set(d, ST_RUNTIME, "the NCCL id broadcast failed");
	{
		struct ready_arg r = {w, 0};

		st = mod->mod->nccl_comm_init(c, be, id, w->rank, w->size, (int)timeout_s, nccl_ready,
					      &r, world_peer_failed, w, d);
		if (r.watching)
			world_watch_end(w);
	}
	/* The module's table, seen only now: one it lacks an entry of is refused before the
	 * doors call through it (every rank loaded the same module: all refuse). */
	if (st == ST_OK && comm_ops_check(c->ops, d) != ST_OK) {
		if (c->ops != NULL && c->ops->fini != NULL)
			c->ops->fini(c->ctx);
		c->ops = NULL;
		c->ctx = NULL;
		diag_prefix(d, "the CUDA module (%s): ", mod->path);
		st = ST_RUNTIME;
	}
	return st;
}
