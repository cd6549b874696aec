/*
 * sync_stream.c - DDP's gradient sync streamed: where the communicator's all-reduces
 * move while the caller computes (the MPI ring), overlap is on, no layer is frozen and
 * there is no ZeRO or compression, the gradients go as regions instead of whole buckets:
 * each region, of at least the first bucket's size, starts as soon as backward has
 * finished it, down to row panels of one layer's weight gradient (the backend reports
 * finished panels through its progress callback), so the last layer's all-reduce is not
 * all exposed. The report then counts the plan's streaming buckets (every one at the
 * first bucket's size, the regions' limit). The slots travel in the last region.
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
	if (s->syncing && n > 0) {
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

static enum status stream_begin_pass(struct grad_sync *s, int sync)
{
	struct streaming *r = s->own;
	const struct model *m = s->m;

	r->layer = m->nlayers - 1;
	r->lay_hi = m->w_off[m->nlayers - 1];
	r->plo = r->phi = 0;
	r->nstarted = 0;
	r->st = ST_OK;
	return buckets_begin(s, sync);
}

static enum status stream_hook_layer_done(struct grad_sync *s, int layer)
{
	if (!s->syncing)
		return ST_OK;
	return stream_layer_done(s, layer);
}

static int stream_applies(const struct grad_sync *s)
{
	return s->c->stream && s->overlap && s->m->be->ops->set_progress != NULL && s->w->size > 1 &&
	       s->m->nlayers <= COMM_MAX_INFLIGHT / 4 && s->p->nsbuckets > 0;
}

static enum status stream_init(struct grad_sync *s)
{
	struct streaming *r = calloc(1, sizeof *r);

	if (r == NULL)
		return diag_set(s->d, ST_RUNTIME, "trainer: out of host memory");
	r->limit = s->p->cfg.first_cap;
	s->own = r;
	s->nbuckets = s->p->nsbuckets;
	s->bucket = s->p->sbucket;
	s->m->be->ops->set_progress(s->m->be->ctx, on_panel, s, s->c->panel_flops);
	return ST_OK;
}

static void stream_free(struct grad_sync *s)
{
	s->m->be->ops->set_progress(s->m->be->ctx, NULL, NULL, 0);
	free(s->own);
	s->own = NULL;
}

const struct grad_sync_ops sync_stream_ops = {
	.name = "stream",
	.applies = stream_applies,
	.uncapturable = "streaming starts the regions from the backend's callbacks on the host between the panels of backward, which a replayed graph would not make",
	.untimed = "the gradients stream in regions of layers as backward makes them, not whole buckets",
	.bucket_note = "; streamed: regions of 1 bucket's size start as backward finishes them",
	.replicated = SYNC_SAME_PARAMS | SYNC_SAME_STATE,
	.init = stream_init,
	.begin = stream_begin_pass,
	.layer_done = stream_hook_layer_done,
	.finish = buckets_finish,
	.free = stream_free,
};
