/*
 * sync_buckets.c - DDP's gradient sync: each bucket of the plan all-reduced as soon as
 * backward has finished its layers (with --no-overlap, all after backward), in the
 * communicator's wire type with --grad-compress; the slots with the bucket of the last
 * layer or in an all-reduce of their own (plan.h). ZeRO-1 runs the same hooks with
 * reduce-scatters (the plan's cuts set).
 *
 * Streaming (the MPI ring, overlap on, no frozen layer, no ZeRO or compression):
 * instead of whole buckets, regions of at least the first bucket's size start as soon
 * as backward has finished them, down to row panels of one layer's weight gradient
 * (the backend reports finished panels through its progress callback), so the last
 * layer's all-reduce is not all exposed.
 */
#include <stdlib.h>

#include "train/sync.h"

struct streaming {
	enum status st;   /* a start that failed between panels, for the layer's hook */
	size_t limit;     /* a region starts once it holds this many floats */
	int layer;        /* the layer backward is in */
	size_t lay_hi;    /* end of the rows the panels reported for that layer */
	size_t plo, phi;  /* finished, not started: grads[plo..phi); empty if equal */
	int nstarted;     /* all-reduces started in this backward */
};

enum status buckets_start(struct grad_sync *s, int k, unsigned flags)
{
	const struct grad_plan *p = s->p;
	const struct bucket *b = &p->bucket[k];
	float *buf = s->m->grads + b->off;

	sync_next_coll(s, k);
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

/* Streaming: start the pending region grads[plo..phi) and empty it. */
static enum status region_start(struct grad_sync *s, int last)
{
	struct streaming *r = s->own;
	enum status st = comm_allreduce_start(s->c, s->m->grads + r->plo, r->phi - r->plo,
					      last ? COMM_LAST : 0, s->d);

	r->nstarted++;
	r->plo = r->phi = 0;
	return st;
}

/* The pending region goes; the last one may complete at once: watched, timed as waiting. */
static enum status region_flush(struct grad_sync *s, int last)
{
	return last ? sync_start_last(s, region_start, 1, "the gradient all-reduce") : region_start(s, 0);
}

/* Streaming: grads[a..b) is final. Grow the pending region with it when they touch, else
 * start the pending one; start it once it reaches the limit (while the communicator has
 * room for the flushes still to come: one per layer left, and the last), or when final. */
static enum status stream_add(struct grad_sync *s, size_t a, size_t b, int final)
{
	struct streaming *r = s->own;
	enum status st = ST_OK;

	if (r->plo == r->phi) {
		r->plo = a;
		r->phi = b;
	} else if (r->plo == b) {
		r->plo = a;
	} else if (r->phi == a) {
		r->phi = b;
	} else {
		st = region_flush(s, 0);
		r->plo = a;
		r->phi = b;
	}
	/* In the first layer, the last in backward, every panel goes at once: what is left
	 * when backward ends is all exposed. */
	if (st == ST_OK && (final || (r->phi - r->plo >= (r->layer == 0 ? 0 : r->limit) &&
				      r->nstarted + 2 * r->layer + 3 <= COMM_MAX_INFLIGHT)))
		st = region_flush(s, final);
	return st;
}

/* The backend's progress callback between the panels of backward's products: dw's rows
 * done[0..n) are final (streaming), or n is 0; either way, let the all-reduces move. A
 * failure to start is kept for the layer's hook to return. */
static void on_panel(void *arg, float *done, size_t n)
{
	struct grad_sync *s = arg;
	struct streaming *r = s->own;

	if (r->st != ST_OK)
		return;
	if (s->stream && s->syncing && n > 0) {
		size_t a = (size_t)(done - s->m->grads);

		r->lay_hi = a + n;
		r->st = stream_add(s, a, a + n, 0);
	}
	comm_progress(s->c);
}

/* Streaming: layer l is done; the rest of its gradient joins the pending region. */
static enum status stream_layer_done(struct grad_sync *s, int layer)
{
	struct streaming *r = s->own;
	const struct model *m = s->m;
	const size_t end = m->b_off[layer] + (size_t)m->widths[layer + 1] +
			   (layer == m->nlayers - 1 ? MODEL_SLOTS : 0);
	enum status st;

	if (r->st != ST_OK)
		return r->st;
	st = stream_add(s, r->lay_hi > m->w_off[layer] ? r->lay_hi : m->w_off[layer], end, layer == 0);
	if (layer > 0)
		r->lay_hi = m->w_off[layer - 1];
	r->layer = layer - 1;
	comm_progress(s->c);
	return st;
}

/* After each layer: start the bucket it completes (the last one watched and timed as
 * waiting: the step waits for it), stream, or let MPI progress. */
enum status buckets_layer_done(struct grad_sync *s, int layer)
{
	const int b = s->p->closes[layer];

	if (!s->syncing)
		return ST_OK;
	if (s->stream)
		return stream_layer_done(s, layer);
	if (b >= 0 && layer == s->p->lowest)
		return sync_start_last(s, start_last_bucket, b, "the gradient all-reduce");
	if (b >= 0)
		return buckets_start(s, b, 0);
	comm_progress(s->c);
	return ST_OK;
}

enum status buckets_begin(struct grad_sync *s, int sync)
{
	struct streaming *r = s->own;
	const struct model *m = s->m;

	s->syncing = sync && s->overlap;
	if (r != NULL && s->stream) {
		r->layer = m->nlayers - 1;
		r->lay_hi = m->w_off[m->nlayers - 1];
		r->plo = r->phi = 0;
		r->nstarted = 0;
		r->st = ST_OK;
	}
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

/* Streaming where the communicator's all-reduces move during compute and the backend
 * reports finished panels; the report then counts the plan's streaming buckets (every
 * one at the first bucket's size, the regions' limit). */
static enum status buckets_init(struct grad_sync *s)
{
	const struct backend_ops *ops = s->m->be->ops;
	struct streaming *r;

	s->stream = s->c->stream && s->overlap && ops->set_progress != NULL && s->w->size > 1 &&
		    s->m->nlayers <= COMM_MAX_INFLIGHT / 4 && s->p->nsbuckets > 0;
	if (!s->stream)
		return ST_OK;
	r = calloc(1, sizeof *r);
	if (r == NULL)
		return diag_set(s->d, ST_RUNTIME, "trainer: out of host memory");
	r->limit = s->p->cfg.first_cap;
	s->own = r;
	s->nbuckets = s->p->nsbuckets;
	s->bucket = s->p->sbucket;
	ops->set_progress(s->m->be->ctx, on_panel, s, s->c->panel_flops);
	return ST_OK;
}

static void buckets_free(struct grad_sync *s)
{
	const struct backend_ops *ops = s->m->be->ops;

	if (ops->set_progress != NULL)
		ops->set_progress(s->m->be->ctx, NULL, NULL, 0);
	free(s->own);
	s->own = NULL;
}

const struct grad_sync_ops sync_buckets_ops = {
	.name = "buckets",
	.init = buckets_init,
	.begin = buckets_begin,
	.layer_done = buckets_layer_done,
	.finish = buckets_finish,
	.free = buckets_free,
};
