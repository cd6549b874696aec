/* comm.c - releasing whichever communicator was set up. */
#include "comm/comm.h"

const char *const comm_wire_names[] = {"fp32", "fp16", "bf16", NULL};

enum status comm_allreduce_start(struct comm *c, float *buf, size_t n, unsigned flags,
				 struct diag *d)
{
	enum status st = c->ops->allreduce_start(c->ctx, buf, n, flags, d);

	c->inflight += st == ST_OK;
	return st;
}

enum status comm_reduce_scatter_start(struct comm *c, float *buf, size_t n, const size_t *cuts,
				      unsigned flags, struct diag *d)
{
	enum status st = c->ops->reduce_scatter_start(c->ctx, buf, n, cuts, flags, d);

	c->inflight += st == ST_OK;
	return st;
}

enum status comm_all_gather_start(struct comm *c, float *buf, size_t n, const size_t *cuts,
				  struct diag *d)
{
	enum status st = c->ops->all_gather_start(c->ctx, buf, n, cuts, d);

	c->inflight += st == ST_OK;
	return st;
}

void comm_progress(struct comm *c)
{
	c->ops->progress(c->ctx);
}

enum status comm_wait_first(struct comm *c, int k, struct diag *d)
{
	return c->ops->wait_first(c->ctx, k, d);
}

enum status comm_wait_all(struct comm *c, struct diag *d)
{
	enum status st = c->ops->wait_all(c->ctx, d);

	c->inflight = 0;
	return st;
}

enum status comm_bcast(struct comm *c, float *buf, size_t n, int root, struct diag *d)
{
	return c->ops->bcast(c->ctx, buf, n, root, d);
}

void comm_observe(struct comm *c, const struct comm_observer *obs)
{
	if (c->ops->observe != NULL)
		c->ops->observe(c->ctx, obs);
}

int comm_can_shard(const struct comm *c)
{
	return c->ops->reduce_scatter_start != NULL && c->ops->all_gather_start != NULL &&
	       c->ops->wait_first != NULL;
}

int comm_inflight(const struct comm *c)
{
	return c->inflight;
}

void comm_free(struct comm *c)
{
	if (c->ops != NULL)
		c->ops->fini(c->ctx);
	c->ops = NULL;
	c->ctx = NULL;
}
