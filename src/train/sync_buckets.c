/*
 * sync_buckets.c - DDP's gradient sync: each bucket of the plan all-reduced as soon as
 * backward has finished its layers (with --no-overlap, all after backward), in the
 * communicator's wire type with --grad-compress; the slots with the bucket of the last
 * layer or in an all-reduce of their own (plan.h). ZeRO-1 runs the same hooks with
 * reduce-scatters (the plan's cuts set), and the streamed variant (sync_stream.c) the
 * begin and finish.
 */
#include "train/sync.h"

enum status buckets_start(struct grad_sync *s, int k, unsigned flags)
{
	const struct grad_plan *p = s->p;
	const struct bucket *b = &p->bucket[k];
	float *buf = s->m->grads + b->off;

	sync_next_coll(s, k, p->cuts != NULL && k != p->slot_bucket ? COMM_REDUCE_SCATTER : COMM_ALLREDUCE);
	if (k == p->slot_bucket) /* the slots: always float32 */
		return comm_allreduce_start(s->c, s->m->slots, b->len, flags & COMM_LAST, s->d);
	if (p->cuts != NULL) /* ZeRO-1 */
		return comm_reduce_scatter_start(s->c, buf, b->len, grad_plan_cuts(p, k), flags | s->wire,
						 s->d);
	return comm_allreduce_start(s->c, buf, b->len, flags | s->wire, s->d);
}

static enum status start_last_bucket(struct grad_sync *s, int k)
{
	return buckets_start(s, k, COMM_LAST);
}

/* After each layer: start the bucket it completes (the last one watched and timed as
 * waiting: the step waits for it), or let MPI progress. */
enum status buckets_layer_done(struct grad_sync *s, int layer)
{
	const int b = s->p->closes[layer];

	if (!s->syncing)
		return ST_OK;
	if (b >= 0 && layer == s->p->lowest)
		return sync_start_last(s, start_last_bucket, b, "the gradient all-reduce");
	if (b >= 0)
		return buckets_start(s, b, 0);
	comm_progress(s->c);
	return ST_OK;
}

enum status buckets_begin(struct grad_sync *s, int sync)
{
	s->syncing = sync && s->overlap;
	/* the slots alone: nothing to wait for */
	if (sync && s->overlap && s->p->slot_bucket >= 0)
		return buckets_start(s, s->p->slot_bucket, 0);
	return ST_OK;
}

/* Every bucket after backward (--no-overlap). */
static enum status start_all(struct grad_sync *s, int unused)
{
	enum status st = ST_OK;

	(void)unused;
	for (int b = 0; b < s->p->nbuckets && st == ST_OK; b++)
		st = buckets_start(s, b, COMM_LAST);
	return st;
}

enum status buckets_finish(struct grad_sync *s, int sync)
{
	enum status st = ST_OK;

	s->syncing = 0;
	if (!sync)
		return ST_OK;
	if (!s->overlap)
		st = sync_start_last(s, start_all, 0, "the gradient all-reduce");
	if (st == ST_OK)
		st = sync_wait_all(s, "the gradient all-reduce");
	return st;
}

/* Every plan can be run this way: the table's last entry. */
static int buckets_applies(const struct grad_sync *s)
{
	return 1;
}

static enum status buckets_init(struct grad_sync *s)
{
	return ST_OK;
}

static void buckets_free(struct grad_sync *s)
{
	s->own = NULL;
}

const struct grad_sync_ops sync_buckets_ops = {
	.name = "buckets",
	.applies = buckets_applies,
	.times_buckets = 1,
	.bucket_note = "",
	.replicated = SYNC_SAME_PARAMS | SYNC_SAME_STATE,
	.init = buckets_init,
	.begin = buckets_begin,
	.layer_done = buckets_layer_done,
	.finish = buckets_finish,
	.free = buckets_free,
};
