/*
 * sync_zero1.c - ZeRO-1's gradient sync: the buckets' hooks with each bucket
 * reduce-scattered where DDP all-reduces it (the plan's cuts), so the optimizer
 * updates this rank's shard; then the updated parameters all-gathered bucket by
 * bucket. The all-gathers overlap the next step's forward, each layer waiting only
 * for the one holding it (zero_before_layer): on one node the all-gather is a whole
 * extra pass over the parameters, which waited for before the step ended made
 * --zero=1's step the slowest of the three. Anything else that reads the weights
 * (validation, checkpoints, the end) settles them first. ZeRO-2 (sync_zero2.c) shares
 * the all-gathers.
 */
#include <stdlib.h>

#include "model/zero.h" /* zero_cut */
#include "train/sync.h"

/* Every rank's updated shard to every rank, bucket by bucket (the frozen layers, in no
 * bucket, never change), in forward order: the first layers' buckets (listed last) first. */
enum status zero_gather(struct grad_sync *s)
{
	struct zero_gathers *g = s->own;
	const struct grad_plan *p = s->p;

	for (int k = p->ngrad - 1; k >= 0; k--) {
		const struct bucket *b = &p->bucket[k];
		enum status st = sync_all_gather_start(s, -1, s->m->params + b->off, b->len, grad_plan_cuts(p, k));

		if (st != ST_OK)
			return st;
		for (int l = b->lo; l <= b->hi; l++)
			g->ag_idx[l] = comm_inflight(s->c);
	}
	s->gathering = 1;
	g->ag_waited = 0;
	return ST_OK;
}

/* Forward's hook: layer l waits for the all-gather holding it. */
enum status zero_before_layer(struct grad_sync *s, int l)
{
	struct zero_gathers *g = s->own;
	enum status st;

	if (!s->gathering || g->ag_idx[l] <= g->ag_waited)
		return ST_OK;
	st = sync_wait_first(s, g->ag_idx[l], "the parameter all-gather");
	g->ag_waited = g->ag_idx[l];
	return st;
}

enum status zero_settle(struct grad_sync *s)
{
	return s->gathering ? sync_wait_all(s, "the parameter all-gather") : ST_OK;
}

/* ZeRO's collectives: the same verdict on every rank, as the communicator is the same
 * everywhere. */
enum status zero_require_shard(struct grad_sync *s)
{
	if (!comm_can_shard(s->c))
		return diag_set(s->d, ST_USAGE, "--zero=%d: the %s communicator has no reduce-scatter and all-gather",
				s->p->cfg.zero, s->c->ops->name);
	return ST_OK;
}

/* The run header's note on the stage. */
void zero_describe(const struct grad_sync *s, struct report *r)
{
	const int zero = s->p->cfg.zero;

	report_note(r, "zero: stage %d: each rank keeps the optimizer state%s of its shard (%zu of %zu trained parameters on rank 0); buckets reduce-scattered, parameters all-gathered during the next forward",
		    zero, zero == 2 ? " and the reduced gradient" : "", zero_cut(s->m->ntrainable, 1, s->w->size),
		    s->m->ntrainable);
}

static void zero1_describe(const struct grad_sync *s, struct report *r, double bucket_mb)
{
	zero_describe(s, r);
}

static int zero1_applies(const struct grad_sync *s)
{
	return s->p->cfg.zero == 1;
}

static enum status zero1_init(struct grad_sync *s)
{
	enum status st = zero_require_shard(s);

	if (st != ST_OK)
		return st;
	s->own = calloc(1, sizeof(struct zero_gathers));
	return s->own != NULL ? ST_OK : diag_set(s->d, ST_RUNTIME, "trainer: out of host memory");
}

static void zero1_free(struct grad_sync *s)
{
	free(s->own);
	s->own = NULL;
}

const struct grad_sync_ops sync_zero1_ops = {
	.name = "zero1",
	.applies = zero1_applies,
	.uncapturable = "--zero decides on the host, layer by layer, which all-gathers forward waits for, which a replayed graph would not redo",
	.times_buckets = 1,
	.bucket_note = "",
	.replicated = SYNC_SAME_PARAMS, /* the optimizer state is sharded: not compared */
	.describe = zero1_describe,
	.init = zero1_init,
	.begin = buckets_begin,
	.before_layer = zero_before_layer,
	.layer_done = buckets_layer_done,
	.finish = buckets_finish,
	.after_step = zero_gather,
	.settle = zero_settle,
	.free = zero1_free,
};
