/*
 * comm.c - the doors to the collectives: each call's arguments are checked
 * here, once, and then handed to the communicator (struct comm_ops), which
 * with its algorithms relies on them; the count of what is in flight; the
 * release of whichever communicator was set up.
 */
#include "core/opstable.h" /* opstable_check: a communicator the CUDA module made */
#include "comm/comm.h"

const char *const comm_wire_names[] = {"fp32", "fp16", "bf16", NULL};

/* A collective of n floats with these flags may start: room in flight, a length the
 * communicator takes, known flags and wire type. */
static enum status start_check(const struct comm *c, size_t n, unsigned flags, struct diag *d)
{
	if (c->inflight >= COMM_MAX_INFLIGHT)
		return diag_set(d, ST_RUNTIME, "internal: more than %d collectives in flight",
				COMM_MAX_INFLIGHT);
	if (c->ops->max_floats != 0 && n > c->ops->max_floats)
		return diag_set(d, ST_RUNTIME, "internal: a collective of %zu floats is too large", n);
	if (flags & ~(COMM_LAST | COMM_WIRE))
		return diag_set(d, ST_RUNTIME, "internal: unknown collective flags %#x", flags);
	if ((flags & COMM_WIRE) && (c->wire < COMM_WIRE_F32 || c->wire > COMM_WIRE_BF16))
		return diag_set(d, ST_RUNTIME, "internal: unknown wire type %d", (int)c->wire);
	return ST_OK;
}

/* cuts as comm_ops.reduce_scatter_start says: size + 1 entries, 0 to n, never decreasing. */
static enum status cuts_check(const struct comm *c, size_t n, const size_t *cuts, struct diag *d)
{
	if (cuts == NULL)
		return diag_set(d, ST_RUNTIME, "internal: a collective of %zu floats without cuts", n);
	if (cuts[0] != 0 || cuts[c->size] != n)
		return diag_set(d, ST_RUNTIME, "internal: cuts run from %zu to %zu, not 0 to %zu",
				cuts[0], cuts[c->size], n);
	for (int q = 0; q < c->size; q++)
		if (cuts[q + 1] < cuts[q])
			return diag_set(d, ST_RUNTIME, "internal: cuts decrease at part %d", q);
	return ST_OK;
}

/* A reduce-scatter or an all-gather (kind) may start: as start_check says, the
 * communicator has one (has), and its cuts are good. */
static enum status parts_check(const struct comm *c, int has, const char *kind, size_t n,
			       const size_t *cuts, unsigned flags, struct diag *d)
{
	enum status st = start_check(c, n, flags, d);

	if (st != ST_OK)
		return st;
	if (!has)
		return diag_set(d, ST_RUNTIME, "internal: the %s communicator has no %s",
				c->ops->name, kind);
	return cuts_check(c, n, cuts, d);
}

/* Count a collective that started: one in flight, and what it makes this rank send, as a
 * ring sends it (nccl-tests' bus bytes): an all-reduce of n elements 2 (N - 1) / N n, a
 * reduce-scatter or an all-gather (N - 1) / N n, each element 2 bytes in a 16-bit wire
 * type, else 4. */
static enum status started(struct comm *c, enum status st, size_t n, unsigned flags, int passes)
{
	const double elem = (flags & COMM_WIRE) && c->wire != COMM_WIRE_F32 ? 2.0 : 4.0;

	if (st != ST_OK)
		return st;
	c->inflight++;
	c->sent_bytes += passes * (double)(c->size - 1) / (double)c->size * (double)n * elem;
	return st;
}

enum status comm_allreduce_start(struct comm *c, float *buf, size_t n, unsigned flags,
				 struct diag *d)
{
	enum status st = start_check(c, n, flags, d);

	if (st != ST_OK)
		return st;
	return started(c, c->ops->allreduce_start(c->ctx, buf, n, flags, d), n, flags, 2);
}

enum status comm_reduce_scatter_start(struct comm *c, float *buf, size_t n, const size_t *cuts,
				      unsigned flags, struct diag *d)
{
	enum status st = parts_check(c, c->ops->reduce_scatter_start != NULL, "reduce-scatter", n,
				     cuts, flags, d);

	if (st != ST_OK)
		return st;
	return started(c, c->ops->reduce_scatter_start(c->ctx, buf, n, cuts, flags, d), n, flags, 1);
}

enum status comm_all_gather_start(struct comm *c, float *buf, size_t n, const size_t *cuts,
				  struct diag *d)
{
	enum status st = parts_check(c, c->ops->all_gather_start != NULL, "all-gather", n, cuts, 0,
				     d);

	if (st != ST_OK)
		return st;
	return started(c, c->ops->all_gather_start(c->ctx, buf, n, cuts, d), n, 0, 1);
}

void comm_progress(struct comm *c)
{
	c->ops->progress(c->ctx);
}

enum status comm_wait_first(struct comm *c, int k, struct diag *d)
{
	if (c->ops->wait_first == NULL)
		return diag_set(d, ST_RUNTIME, "internal: the %s communicator cannot wait for some collectives",
				c->ops->name);
	if (k < 0 || k > c->inflight)
		return diag_set(d, ST_RUNTIME, "internal: wait_first(%d) with %d collectives started",
				k, c->inflight);
	return c->ops->wait_first(c->ctx, k, d);
}

enum status comm_wait_all(struct comm *c, struct diag *d)
{
	enum status st = c->ops->wait_all(c->ctx, d);

	c->inflight = 0;
	c->rounds++;
	return st;
}

struct comm_ticket comm_ticket(const struct comm *c)
{
	return (struct comm_ticket){c->rounds, c->inflight};
}

int comm_ticket_done(const struct comm *c, struct comm_ticket t)
{
	return t.k == 0 || t.round != c->rounds;
}

enum status comm_wait_ticket(struct comm *c, struct comm_ticket t, struct diag *d)
{
	return comm_ticket_done(c, t) ? ST_OK : comm_wait_first(c, t.k, d);
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

void comm_describe(const struct comm *c, char *buf, size_t len)
{
	c->ops->describe(c->ctx, buf, len);
}

/* The entries of struct comm_ops: the doors above check reduce_scatter_start,
 * all_gather_start, wait_first and observe before calling them; the rest they call. */
#define ROW(m, group) OPSTABLE_ROW(comm_ops, "comm.", m, group)
static const struct opstable_row comm_rows[] = {
	ROW(allreduce_start, OPSTABLE_REQUIRED), ROW(reduce_scatter_start, OPSTABLE_OPTIONAL),
	ROW(all_gather_start, OPSTABLE_OPTIONAL), ROW(progress, OPSTABLE_REQUIRED),
	ROW(wait_first, OPSTABLE_OPTIONAL), ROW(wait_all, OPSTABLE_REQUIRED),
	ROW(bcast, OPSTABLE_REQUIRED), ROW(fini, OPSTABLE_REQUIRED),
	ROW(observe, OPSTABLE_OPTIONAL), ROW(describe, OPSTABLE_REQUIRED),
};
OPSTABLE_COVERS(comm_rows, comm_ops, allreduce_start);
#undef ROW

enum status comm_ops_check(const struct comm_ops *ops, struct diag *d)
{
	if (ops == NULL)
		return diag_set(d, ST_RUNTIME, "its communicator has no table (comm.ops is NULL)");
	return opstable_check(ops, comm_rows, (int)(sizeof comm_rows / sizeof comm_rows[0]), d);
}

void comm_free(struct comm *c)
{
	if (c->ops != NULL)
		c->ops->fini(c->ctx);
	c->ops = NULL;
	c->ctx = NULL;
	c->inflight = 0;
}
