/*
 * trainer_ddp.c - DistributedDataParallel: one replica per rank, gradients
 * all-reduced bucket by bucket during backward.
 *
 * Averaging: the MSE gradient seed is scaled by 1 / (world * micro-batches in
 * this step), so the all-reduced sum is already the mean over ranks and
 * micro-batches, with no extra pass over the gradients. The loss rides in the
 * gradient buffer's loss slot, so the mean loss over ranks costs no extra
 * collective.
 *
 * ZeRO (tc->zero, zero.h): with stage 1 each bucket is reduce-scattered where it
 * would be all-reduced, the optimizer updates this rank's shard, and the updated
 * parameters are all-gathered bucket by bucket, overlapping the next step's
 * forward as ZeRO-2's do (below): on one node the all-gather is a whole extra pass
 * over the parameters, which waited for before the step ends made --zero=1's step
 * the slowest of the three. With ZeRO or
 * --grad-compress the slots travel in an all-reduce of their own (float32),
 * started when backward starts, so every bucket is pure gradient.
 *
 * ZeRO-2 (zero2): backward writes each part's gradient into one of two pool
 * buffers, the part is reduce-scattered as soon as backward has finished it, and
 * this rank's share of the result is copied (later micro-batches of a --grad-accum
 * step: added) into the model's gradient shard before backward reuses the buffer
 * for the part after next. The parts (model_plan_parts) are the buckets, except
 * that a layer larger than the bucket cap comes in row panels of at most the cap
 * (the model's panel hooks ask where each goes and hand it over), so that a buffer
 * is about the cap, not the largest layer. The gradients of the other layers go
 * where the model's gw views point, into their part's buffer.
 * Every micro-batch is reduce-scattered (as DeepSpeed's ZeRO-2), so with
 * --grad-accum the micro-batches' sums are added after the reduction rather
 * than before: equal to DDP's within float rounding, not bit for bit. The
 * updated parameters' all-gathers start after the step, in forward order, and
 * each layer's forward waits only for the one holding it; anything else that
 * reads the weights settles them first (ddp_settle).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/signals.h"
#include "train/trainer.h"
#include "train/zero.h"

struct ddp {
	const struct train_config *tc;
	struct world *w;
	struct model *m;
	struct optimizer *opt;
	struct comm *c;
	const struct train_ctl *ctl;
	struct report *r;
	long step, total;           /* the step being taken (0-based), and the run's last */
	double lr;                  /* the lr of the last optimizer step */
	double wait;                /* host time blocked in wait_all */
	float *stop_host;           /* (1) pinned: 1 if this rank was asked to stop */
	float *slots;               /* (MODEL_SLOTS) pinned: the step's read of the slots */
	const float *graph_x[2];    /* the host batch buffer each captured step reads */
	int graph_off;              /* no (more) graphs: unsupported, or a capture failed */
	struct bucket buckets[MODEL_MAX_LAYERS + 1];
	int nbuckets;
	int slot_bucket;            /* the slots' own bucket (last layer frozen, ZeRO, compress), or -1 */
	unsigned wire;              /* COMM_WIRE for the buckets with --grad-compress, else 0 */
	size_t *cuts;               /* ZeRO: bucket k's cuts at cuts[k (size + 1)], else NULL */
	/* ZeRO-2 */
	int zero2;                  /* gradients sharded: parts in a pool of two buffers */
	int ngrad;                  /* gradient buckets: 0 .. ngrad - 1 (the slots' is after) */
	struct bucket *part;        /* (nparts) the reduce-scatters, in backward's order */
	int nparts;
	int npaneled;               /* layers in row panels */
	size_t *pcuts;              /* (nparts, size + 1) part k's cuts */
	size_t *pt0;                /* (nparts) part k's first trainable index */
	int *rs_idx;                /* (nparts) part k's reduce-scatter's number (ncoll), 0: folded */
	int pfirst[MODEL_MAX_LAYERS]; /* layer l's first part */
	int pcloses[MODEL_MAX_LAYERS]; /* the part of whole layers layer l's backward completes, or -1 */
	size_t poolb[2];            /* floats of pool buffer 0 (even parts) and 1 (odd ones) */
	size_t tlo;                 /* this rank's first trainable float */
	int ncoll;                  /* collectives started since wait_all last returned */
	/* by that order: the bucket each collective carries, or -1 (an all-gather, a panel, the
	 * clipping norm), so the observer's per-bucket figures go to the right bucket */
	int coll_bucket[COMM_MAX_INFLIGHT];
	int evaluating;             /* validation's all-reduces are no bucket's */
	int fold_add;               /* this micro-batch's parts are added to the shard (not copied) */
	int ag_idx[MODEL_MAX_LAYERS]; /* the number of layer l's parameters' all-gather; 0: none */
	int ag_waited;              /* all-gathers waited for, up to this number */
	int gathering;              /* all-gathers may be in flight */
	enum status fwd_st;         /* a failed wait in forward's hook */
	size_t grad_floats;         /* gradient memory: the whole, or ZeRO-2's block */
	int ydim;                   /* target columns: the output width, or 1 (class labels) */
	int lowest;                 /* the first trainable layer: backward ends there */
	int closes[MODEL_MAX_LAYERS]; /* bucket completed by layer l's backward, or -1 */
	/* Streaming (the MPI ring, overlap on, no frozen layer): instead of whole buckets,
	 * regions of at least `limit` floats start as soon as backward has finished them, down
	 * to row panels of one layer's weight gradient, so the last layer's all-reduce is not
	 * all exposed. */
	int stream;
	size_t limit;
	int syncing;                /* this backward's gradients are all-reduced */
	int layer;                  /* the layer backward is in */
	size_t lay_hi;              /* end of the rows the panels reported for that layer */
	size_t plo, phi;            /* finished, not started: grads[plo..phi); empty if equal */
	int nstarted;               /* all-reduces started in this backward */
	enum status hook_st;
	struct diag *d;
	struct trace_buf *tb;       /* this step's trace buffer, or NULL */
	struct train_result *res;   /* per-bucket all-reduce figures */
};

/* Start the all-reduce of grads[off..off+len); the last one may complete at once, so it
 * is watched and timed as waiting. */
static void start_region(struct ddp *t, size_t off, size_t len, int last)
{
	double tw = clock_now();

	if (t->hook_st != ST_OK)
		return;
	if (last)
		world_watch_begin(t->w, "the gradient all-reduce");
	t->hook_st = t->c->ops->allreduce_start(t->c->ctx, t->m->grads + off, len, last, t->d);
	if (last) {
		world_watch_end(t->w);
		t->wait += clock_now() - tw;
	}
	t->nstarted++;
}

/* ZeRO-2: the pool buffer part k's gradient is written to: buffer k % 2. */
static float *pool_buf(const struct ddp *t, int k)
{
	return t->m->gpool + (k % 2 ? t->poolb[0] : 0);
}

/* ZeRO: bucket k's cuts (size + 1 entries). */
static const size_t *bucket_cuts(const struct ddp *t, int k)
{
	return t->cuts + (size_t)k * (size_t)(t->w->size + 1);
}

/* ZeRO-2: part k's cuts (size + 1 entries). */
static const size_t *part_cuts(const struct ddp *t, int k)
{
	return t->pcuts + (size_t)k * (size_t)(t->w->size + 1);
}

/* Start bucket k's collective: the slots' all-reduce (always float32), or the gradient
 * bucket's all-reduce -- with ZeRO-1 its reduce-scatter -- in the wire type when
 * compressed. (ZeRO-2's gradients go part by part: start_part.) */
/* The next collective carries bucket k (-1: none); said before it starts, since a
 * blocking one tells the observer from inside its start. */
static void next_coll(struct ddp *t, int k)
{
	if (t->ncoll < COMM_MAX_INFLIGHT)
		t->coll_bucket[t->ncoll] = k;
}

static enum status start_bucket(struct ddp *t, int k, unsigned flags)
{
	const struct bucket *b = &t->buckets[k];
	float *buf = t->m->grads + b->off;
	enum status st;

	next_coll(t, k);
	if (k == t->slot_bucket)
		st = t->c->ops->allreduce_start(t->c->ctx, t->m->slots, b->len, flags & COMM_LAST, t->d);
	else if (t->cuts != NULL)
		st = t->c->ops->reduce_scatter_start(t->c->ctx, buf, b->len, bucket_cuts(t, k),
						     flags | t->wire, t->d);
	else
		st = t->c->ops->allreduce_start(t->c->ctx, buf, b->len, flags | t->wire, t->d);
	if (st == ST_OK)
		t->ncoll++;
	return st;
}

/* ZeRO-2: start part k's reduce-scatter from its pool buffer, in the wire type when
 * compressed. */
static enum status start_part(struct ddp *t, int k, unsigned flags)
{
	enum status st;

	next_coll(t, -1);
	st = t->c->ops->reduce_scatter_start(t->c->ctx, pool_buf(t, k), t->part[k].len,
					     part_cuts(t, k), flags | t->wire, t->d);
	if (st == ST_OK)
		t->rs_idx[k] = ++t->ncoll;
	return st;
}

/* Start the last collective of backward (bucket k, or with part set ZeRO-2's part k),
 * which may complete at once: watched, and timed as waiting. */
static enum status start_last(struct ddp *t, int k, int part)
{
	double tw = clock_now();
	long span = trace_begin(t->tb, TR_WAIT, -1);
	enum status st;

	world_watch_begin(t->w, part ? "the gradient reduce-scatter" : "the gradient all-reduce");
	st = part ? start_part(t, k, COMM_LAST) : start_bucket(t, k, COMM_LAST);
	world_watch_end(t->w);
	trace_end(t->tb, span);
	t->wait += clock_now() - tw;
	return st;
}

/* Complete every collective in flight (their count starts again). */
static enum status ddp_wait_all(struct ddp *t, const char *what)
{
	double tw = clock_now();
	long span = trace_begin(t->tb, TR_WAIT, -1);
	enum status st;

	world_watch_begin(t->w, what);
	st = t->c->ops->wait_all(t->c->ctx, t->d);
	world_watch_end(t->w);
	trace_end(t->tb, span);
	t->wait += clock_now() - tw;
	t->ncoll = 0;
	t->gathering = 0;
	return st;
}

/* Complete the first k collectives since the last wait_all. */
static enum status ddp_wait_first(struct ddp *t, int k, const char *what)
{
	double tw = clock_now();
	long span = trace_begin(t->tb, TR_WAIT, -1);
	enum status st;

	world_watch_begin(t->w, what);
	st = t->c->ops->wait_first(t->c->ctx, k, t->d);
	world_watch_end(t->w);
	trace_end(t->tb, span);
	t->wait += clock_now() - tw;
	return st;
}

/* ZeRO-2: part k's reduce-scatter complete, this rank's share of it into the gradient
 * shard (copied on a step's first micro-batch, added on the others); its buffer is free. */
static enum status fold_part(struct ddp *t, int k)
{
	const struct backend_ops *ops = t->m->be->ops;
	const size_t *cu = part_cuts(t, k);
	const size_t a = cu[t->w->rank], n = cu[t->w->rank + 1] - a;
	float *src = pool_buf(t, k) + a;
	float *dst = t->m->gshard + (t->pt0[k] + a - t->tlo);
	enum status st;

	if (t->rs_idx[k] == 0)
		return ST_OK;
	st = ddp_wait_first(t, t->rs_idx[k], "the gradient reduce-scatter");
	t->rs_idx[k] = 0;
	if (st == ST_OK && n > 0) {
		if (t->fold_add)
			ops->add(t->m->be->ctx, dst, src, n);
		else
			ops->copy(t->m->be->ctx, dst, src, n);
	}
	return st;
}

/* ZeRO-2: part k is in its buffer. Its reduce-scatter starts (the last one watched and
 * timed: the step waits for it), and the part before it is folded, so that its buffer can
 * take part k + 1. A large layer has many panels: when the collectives started since the
 * last wait_all near COMM_MAX_INFLIGHT, the part before is folded first and every
 * collective in flight completed (nothing but the slots' all-reduce is), which starts the
 * count again. */
static void part_done(struct ddp *t, int k)
{
	if (t->hook_st != ST_OK)
		return;
	if (t->ncoll + 1 >= COMM_MAX_INFLIGHT) {
		if (k >= 1)
			t->hook_st = fold_part(t, k - 1);
		if (t->hook_st == ST_OK)
			t->hook_st = ddp_wait_all(t, "the gradient reduce-scatter");
		if (t->hook_st != ST_OK)
			return;
	}
	if (k == t->nparts - 1) {
		t->hook_st = start_last(t, k, 1);
	} else {
		t->hook_st = start_part(t, k, 0);
	}
	if (t->hook_st == ST_OK && k >= 1)
		t->hook_st = fold_part(t, k - 1);
}

/* The model's panel_dst (ZeRO-2): where panel j of layer l goes, its part's buffer. */
static float *ddp_panel_dst(void *arg, int l, int j)
{
	const struct ddp *t = arg;

	return pool_buf(t, t->pfirst[l] + j);
}

/* The model's panel_done (ZeRO-2): panel j of layer l is written. */
static void ddp_panel_done(void *arg, int l, int j)
{
	struct ddp *t = arg;

	part_done(t, t->pfirst[l] + j);
}

/* model_forward's pre_layer (ZeRO): layer l waits for the all-gather holding it. */
static void ddp_before_layer(void *arg, int l)
{
	struct ddp *t = arg;

	if (!t->gathering || t->fwd_st != ST_OK || t->ag_idx[l] <= t->ag_waited)
		return;
	t->fwd_st = ddp_wait_first(t, t->ag_idx[l], "the parameter all-gather");
	t->ag_waited = t->ag_idx[l];
}

/* train_loop's settle: the parameters' all-gathers complete. */
static enum status ddp_settle(void *arg)
{
	struct ddp *t = arg;

	return t->gathering ? ddp_wait_all(t, "the parameter all-gather") : ST_OK;
}

/* Streaming: grads[a..b) is final. Grow the pending region with it when they touch, else
 * start the pending one; start it once it reaches the limit (while the communicator has
 * room for the flushes still to come: one per layer left, and the last), or when final. */
static void stream_add(struct ddp *t, size_t a, size_t b, int final)
{
	if (t->plo == t->phi) {
		t->plo = a;
		t->phi = b;
	} else if (t->plo == b) {
		t->plo = a;
	} else if (t->phi == a) {
		t->phi = b;
	} else {
		start_region(t, t->plo, t->phi - t->plo, 0);
		t->plo = a;
		t->phi = b;
	}
	/* In the first layer, the last in backward, every panel goes at once: what is left
	 * when backward ends is all exposed. */
	if (final || (t->phi - t->plo >= (t->layer == 0 ? 0 : t->limit) &&
		      t->nstarted + 2 * t->layer + 3 <= COMM_MAX_INFLIGHT)) {
		start_region(t, t->plo, t->phi - t->plo, final);
		t->plo = t->phi = 0;
	}
}

/* Called by the backend between the panels of backward's products: dw's rows done[0..n)
 * are final (streaming), or n is 0; either way, let the all-reduces move. */
static void ddp_panel(void *arg, float *done, size_t n)
{
	struct ddp *t = arg;

	if (t->hook_st != ST_OK)
		return;
	if (t->stream && t->syncing && n > 0) {
		size_t a = (size_t)(done - t->m->grads);

		t->lay_hi = a + n;
		stream_add(t, a, a + n, 0);
	}
	t->c->ops->progress(t->c->ctx);
}

/* The communicator's observer: each all-reduce, launch to completion. Bucket figures only
 * when the all-reduces are the buckets (streaming sends regions of other sizes). */
static void ddp_allreduce_done(void *arg, int index, size_t n, double t0, double t1)
{
	struct ddp *t = arg;
	struct bucket_stats *b;

	trace_record(t->tb, TR_ALLREDUCE, index, TRACE_ASYNC, t0, t1, (double)n * sizeof(float));
	if (t->stream || t->npaneled > 0 || t->evaluating || index < 0 || index >= COMM_MAX_INFLIGHT ||
	    t->coll_bucket[index] < 0 || t->coll_bucket[index] >= t->nbuckets)
		return;
	b = &t->res->buckets[t->coll_bucket[index]];
	b->count++;
	b->sum_s += t1 - t0;
	if (b->count == 1 || t1 - t0 < b->min_s)
		b->min_s = t1 - t0;
}

/* Called by backward after each layer: start what it completes (its bucket, or streaming:
 * the rest of its gradient), or progress MPI. */
static void ddp_layer_done(void *arg, int layer)
{
	struct ddp *t = arg;
	const struct model *m = t->m;
	int b = t->closes[layer];

	if (t->hook_st != ST_OK)
		return;
	if (t->zero2) { /* a part of whole layers ends here, or panels went already */
		if (t->pcloses[layer] >= 0)
			part_done(t, t->pcloses[layer]);
		else
			t->c->ops->progress(t->c->ctx);
	} else if (t->stream) {
		size_t end = m->b_off[layer] + (size_t)m->widths[layer + 1] +
			     (layer == m->nlayers - 1 ? MODEL_SLOTS : 0);

		stream_add(t, t->lay_hi > m->w_off[layer] ? t->lay_hi : m->w_off[layer], end,
			   layer == 0);
		if (layer > 0)
			t->lay_hi = m->w_off[layer - 1];
		t->layer = layer - 1;
		t->c->ops->progress(t->c->ctx);
	} else if (b >= 0 && layer == t->lowest) { /* the last bucket completes here */
		t->hook_st = start_last(t, b, 0);
	} else if (b >= 0) {
		t->hook_st = start_bucket(t, b, 0);
	} else {
		t->c->ops->progress(t->c->ctx);
	}
}

static enum status start_all_buckets(struct ddp *t)
{
	enum status st = ST_OK;
	double tw = clock_now();

	world_watch_begin(t->w, "the gradient all-reduce");
	for (int b = 0; b < t->nbuckets && st == ST_OK; b++)
		st = start_bucket(t, b, COMM_LAST);
	world_watch_end(t->w);
	t->wait += clock_now() - tw;
	return st;
}

/* ZeRO: every rank's updated shard to every rank, bucket by bucket (the frozen layers,
 * in no bucket, never change), completed during the next forward. */
static enum status gather_params(struct ddp *t)
{
	enum status st = ST_OK;

	/* in forward order: the first layers' buckets (listed last) first */
	for (int k = t->ngrad - 1; k >= 0 && st == ST_OK; k--) {
		const struct bucket *b = &t->buckets[k];

		next_coll(t, -1);
		st = t->c->ops->all_gather_start(t->c->ctx, t->m->params + b->off, b->len,
						 bucket_cuts(t, k), t->d);
		if (st != ST_OK)
			break;
		t->ncoll++;
		for (int l = b->lo; l <= b->hi; l++)
			t->ag_idx[l] = t->ncoll;
	}
	if (st != ST_OK)
		return st;
	/* during the next forward, layer by layer (ddp_before_layer) */
	t->gathering = 1;
	t->ag_waited = 0;
	return ST_OK;
}

/* Queue one micro-batch: copy in, forward, loss, backward; on the step's last micro-batch
 * also the all-reduces (started during backward unless --no-overlap) and the optimizer. */
static enum status ddp_micro(struct ddp *t, const struct batch *b, int accumulate, int sync,
			     float scale)
{
	struct model *m = t->m;
	const struct backend_ops *ops = m->be->ops;
	void *bctx = m->be->ctx;
	const int in = m->widths[0], out = m->widths[m->nlayers];
	enum status st;
	long span = trace_begin(t->tb, TR_LOAD, -1);

	ops->to_device(bctx, m->act[0], b->x, (size_t)b->n * in);
	ops->to_device(bctx, m->target, b->y, (size_t)b->n * (size_t)t->ydim);
	trace_end(t->tb, span);
	t->fwd_st = ST_OK;
	model_forward(m, b->n);
	if (t->fwd_st != ST_OK)
		return t->fwd_st;
	span = trace_begin(t->tb, TR_LOSS, -1);
	loss_apply(&t->tc->loss, m->be, m->dbuf[0], m->slots + MODEL_SLOT_LOSS,
		   m->act[m->nlayers], m->target, b->n, out, scale, accumulate);
	trace_end(t->tb, span);
	if (sync) /* before backward starts the bucket that carries it */
		ops->to_device(bctx, m->slots + MODEL_SLOT_STOP, t->stop_host, 1);
	t->hook_st = ST_OK;
	if (sync && t->tc->overlap && t->slot_bucket >= 0) /* the slots alone: nothing to wait for */
		t->hook_st = start_bucket(t, t->slot_bucket, 0);
	/* ZeRO-2 reduce-scatters every micro-batch, each into fresh bucket buffers */
	t->syncing = (sync || t->zero2) && t->tc->overlap;
	t->fold_add = accumulate;
	t->layer = m->nlayers - 1;
	t->lay_hi = m->w_off[m->nlayers - 1];
	t->plo = t->phi = 0;
	t->nstarted = 0;
	model_backward(m, b->n, accumulate && !t->zero2, t->syncing ? ddp_layer_done : NULL, t);
	t->syncing = 0;
	st = t->hook_st;
	for (int k = 0; k < t->nparts && st == ST_OK && t->zero2; k++)
		st = fold_part(t, k);
	/* nothing is left in flight (forward waited for the all-gathers): counts start again */
	if (st == ST_OK && t->zero2 && !sync)
		st = ddp_wait_all(t, "the gradient reduce-scatter");
	if (!sync || st != ST_OK)
		return st;
	if (!t->tc->overlap)
		st = start_all_buckets(t);
	if (st != ST_OK)
		return st;
	st = ddp_wait_all(t, "the gradient all-reduce");
	if (st == ST_OK) {
		t->coll_bucket[0] = -1; /* the clipping norm's all-reduce, if any, comes first */
		span = trace_begin(t->tb, TR_OPTIMIZER, -1);
		st = trainer_optimizer_step(t->tc, t->opt, t->step, t->total, t->c, &t->lr, t->d);
		trace_end(t->tb, span);
		t->ncoll = 0; /* the clipping norm's all-reduce, if any, was waited for */
	}
	if (st == ST_OK && t->cuts != NULL)
		st = gather_params(t);
	return st;
}

/* A whole step as a device graph, where the backend and communicator allow it: recorded
 * on its second occurrence for each host buffer counted from this run's start (the first
 * step of every run, resumed or not, warms up cuBLAS and NCCL eagerly: their lazy set-up
 * cannot be captured), replayed after that. ran: steps taken since this run started.
 * NCCL requires every rank to capture the same collectives, so the ranks agree on each
 * capture's outcome (one small collective per capture, two per run) before any graph is
 * launched: if a capture failed anywhere, every rank drops its graphs and runs eagerly.
 * Returns ST_OK with *done = 0 when the step must run eagerly. */
static enum status ddp_graph_step(struct ddp *t, const struct batch *b, float scale, long ran,
				  int *done)
{
	const struct backend_ops *ops = t->m->be->ops;
	void *bctx = t->m->be->ctx;
	struct diag why = {0};
	int slot = b->x == t->graph_x[0] ? 0 : b->x == t->graph_x[1] ? 1 : -1, ok;
	enum status st = ST_OK;

	*done = 0;
	if (t->graph_off)
		return ST_OK;
	if (slot >= 0) {
		st = ops->graph_launch(bctx, slot, t->d);
		*done = st == ST_OK;
		return st;
	}
	if (ran < 1)
		return ST_OK;
	slot = t->graph_x[0] == NULL ? 0 : 1;
	if (t->graph_x[slot] != NULL) { /* a third host buffer: the same on every rank */
		t->graph_off = 1;
		return ST_OK;
	}
	ok = ops->graph_begin(bctx, &why) == ST_OK;
	if (ok) {
		struct diag *caller = t->d;

		t->d = &why; /* a failure while capturing only turns graphs off */
		st = ddp_micro(t, b, 0, 1, scale);
		t->d = caller;
		ok = ops->graph_end(bctx, slot, &why) == ST_OK && st == ST_OK;
	}
	if (!world_all(t->w, ok)) {
		/* Nothing captured ran: the caller runs the step eagerly, on every rank. */
		ops->graph_reset(bctx);
		t->graph_off = 1;
		report_note(t->r, "CUDA graphs off from step %ld: a capture failed%s%s", t->w->step,
			    ok ? " on another rank" : ": ", ok ? "" : why.msg);
		return ST_OK;
	}
	t->graph_x[slot] = b->x;
	st = ops->graph_launch(bctx, slot, t->d);
	*done = st == ST_OK;
	return st;
}

/* trainer_after_step's eval: every rank its share of the validation set, then the sums. */
static enum status ddp_eval(void *arg, long step, long epoch)
{
	struct ddp *t = arg;
	double loss = 0.0, acc = 0.0;
	long span = trace_begin(t->tb, TR_VALIDATION, -1);
	enum status st;

	t->evaluating = 1;
	st = trainer_evaluate(t->tc, t->m, t->ctl->val, t->w->rank, t->w->size, t->c, t->w, &loss,
			      &acc, t->d);
	t->evaluating = 0;
	trace_end(t->tb, span);
	if (st != ST_OK)
		return st;
	report_eval(t->r, step, epoch + 1, loss, acc, t->ctl->val->n);
	return t->ctl->evaluated ? t->ctl->evaluated(t->ctl->arg, step, epoch, loss, t->d) : ST_OK;
}

/* The straggler check's warnings, as report notes. */
static void say_note(void *r, const char *line)
{
	report_note(r, "%s", line);
}

/* After trainer_after_step: the straggler samples (and check), and --prometheus when due
 * (whose failure is a warning: rank 0 alone writes it, and must not leave the others in
 * the next step's all-reduce). */
static enum status ddp_after_step(struct ddp *t, const struct train_ctl *ctl,
				  struct step_clock *clk, long step, long total, float loss,
				  double consumed, struct report *r)
{
	double now = clock_now(), step_s = now - clk->t_step, waited = t->wait - clk->wait_step;
	enum status st = ST_OK;

	clk->t_step = now;
	clk->wait_step = t->wait;
	if (ctl->straggler != NULL)
		st = straggler_step(ctl->straggler, t->w, step, step_s, step_s - waited, say_note, r,
				    t->d);
	if (st == ST_OK && ctl->prom != NULL && prometheus_due(ctl->prom, now)) {
		double el = now - clk->t0;

		t->res->wait_s = t->wait;
		trainer_prometheus(ctl, r, t->res, step, total, loss, el > 0 ? consumed / el : 0.0,
				   el > 0 ? t->wait / el : 0.0, -1, t->w->size);
	}
	return st;
}

/* Free what trainer_ddp set up besides the loader (each part may be NULL); safe twice. */
static void ddp_free(struct ddp *t)
{
	const struct backend_ops *ops = t->m->be->ops;

	ops->host_free(t->m->be->ctx, t->stop_host);
	ops->host_free(t->m->be->ctx, t->slots);
	free(t->cuts);
	free(t->part);
	free(t->pcuts);
	free(t->pt0);
	free(t->rs_idx);
	t->stop_host = t->slots = NULL;
	t->cuts = t->pcuts = t->pt0 = NULL;
	t->part = NULL;
	t->rs_idx = NULL;
}

enum status trainer_ddp(const struct train_config *tc, struct world *w, struct model *m,
			struct optimizer *opt, struct comm *c, const struct dataset *ds,
			const struct train_ctl *ctl, struct report *r, struct train_result *res,
			struct diag *d)
{
	const struct backend_ops *ops = m->be->ops;
	void *bctx = m->be->ctx;
	size_t cap, first_cap;
	struct ddp t = {.tc = tc, .w = w, .m = m, .opt = opt, .c = c, .d = d, .ctl = ctl, .r = r,
			.ydim = ds->out, .slot_bucket = -1, .res = res};
	const struct comm_observer obs = {ddp_allreduce_done, &t};
	const struct loader_config lcfg = trainer_loader_config(tc, 0, w->size, w->rank);
	struct loader L;
	struct batch b;
	struct step_clock clk = {0};
	struct train_loop loop;
	long steps_per_epoch, total, step = ctl->start_step;
	double consumed = 0.0;
	size_t reduced = 0; /* floats all-reduced per step */
	int graphs;
	enum status st;

	memset(res, 0, sizeof *res);
	trainer_bucket_caps(tc->bucket_mb, &cap, &first_cap);
	st = loader_init(&L, ds, &lcfg, m->be, d);
	if (st == ST_OK) {
		loader_seek(&L, ctl->start_epoch, ctl->start_mb);
		/* The step's read comes after its all-reduces on the device: into pageable memory
		 * it would block inside the driver until they end, where a dead peer is never
		 * noticed; into pinned memory the backend's wait watches the communicator. */
		t.stop_host = ops->host_alloc(bctx, 1);
		t.slots = ops->host_alloc(bctx, MODEL_SLOTS);
		if (tc->zero) /* room for every bucket's cuts, the slots' own included */
			t.cuts = malloc((size_t)(m->nlayers + 2) * (size_t)(w->size + 1) * sizeof *t.cuts);
		if (tc->zero == 2) { /* the parts: the same plan as the session's pool (zero_pool_floats) */
			size_t np;

			t.nparts = model_plan_parts(m, cap, first_cap, 0, 0, NULL);
			np = t.nparts > 0 ? (size_t)t.nparts : 1;
			t.part = malloc(np * sizeof *t.part);
			t.pcuts = malloc(np * (size_t)(w->size + 1) * sizeof *t.pcuts);
			t.pt0 = malloc(np * sizeof *t.pt0);
			t.rs_idx = calloc(np, sizeof *t.rs_idx);
		}
		if (t.stop_host == NULL || t.slots == NULL || (tc->zero && t.cuts == NULL) ||
		    (tc->zero == 2 && (!t.part || !t.pcuts || !t.pt0 || !t.rs_idx))) {
			ddp_free(&t);
			loader_free(&L);
			st = diag_set(d, ST_RUNTIME, "trainer: out of host memory");
		}
	}
	/* The same verdict on every rank: the communicator is the same everywhere. */
	if (st == ST_OK && tc->zero &&
	    (c->ops->reduce_scatter_start == NULL || c->ops->all_gather_start == NULL ||
	     c->ops->wait_first == NULL)) {
		ddp_free(&t);
		loader_free(&L);
		st = diag_set(d, ST_USAGE, "--zero=%d: the %s communicator has no reduce-scatter and all-gather",
			      tc->zero, c->ops->name);
	}
	/* Every rank set up, or none trains: a rank that cannot start must not leave the
	 * others waiting in step 1's all-reduce until --timeout. */
	if (!world_all(w, st == ST_OK)) {
		if (st == ST_OK) {
			ddp_free(&t);
			loader_free(&L);
		}
		return st != ST_OK ? st : diag_set(d, ST_PEER, "another rank could not start training");
	}
	t.stop_host[0] = 0.0f;
	/* Streaming where the communicator's all-reduces move during compute and the backend
	 * reports finished panels; each region then is at most the first bucket's size (the
	 * cap still caps it), and whole-layer regions follow the bucket plan with that limit,
	 * which is what the report shows. Frozen layers keep the bucket plan. */
	t.stream = c->stream && tc->overlap && ops->set_progress != NULL && w->size > 1 &&
		   m->nlayers <= COMM_MAX_INFLIGHT / 4 && !tc->zero && !tc->compress;
	for (int l = 0; l < m->nlayers; l++)
		if (m->frozen[l])
			t.stream = 0;
	t.limit = first_cap;
	t.nbuckets = model_plan_buckets(m, t.stream ? t.limit : cap, t.limit, t.buckets);
	/* ZeRO and compression: the slots in an all-reduce of their own (float32), so every
	 * bucket is pure gradient. The first bucket holds the last layer and the slots. */
	if ((tc->zero || tc->compress) && !m->frozen[m->nlayers - 1]) {
		t.buckets[0].len -= MODEL_SLOTS;
		t.buckets[t.nbuckets++] = (struct bucket){.lo = -1, .hi = -1, .off = m->nparams,
							  .len = MODEL_SLOTS};
	}
	t.wire = tc->compress ? COMM_WIRE : 0;
	for (int l = 0; l < m->nlayers; l++)
		t.closes[l] = -1;
	for (int k = 0; k < t.nbuckets; k++) {
		if (t.buckets[k].lo >= 0)
			t.closes[t.buckets[k].lo] = k;
		else
			t.slot_bucket = k;
		reduced += t.buckets[k].len;
	}
	while (t.lowest < m->nlayers - 1 && m->frozen[t.lowest])
		t.lowest++;
	t.ngrad = t.slot_bucket >= 0 ? t.slot_bucket : t.nbuckets; /* the slots' is listed last */
	t.grad_floats = m->gfloats;
	if (t.cuts != NULL) {
		struct zero_plan z;

		zero_plan_init(&z, m, w->rank, w->size);
		for (int k = 0; k < t.ngrad; k++) /* the all-gathers' (and ZeRO-1's reduce-scatters') */
			zero_bucket_cuts(&z, m, &t.buckets[k], t.buckets[k].len,
					 t.cuts + (size_t)k * (size_t)(w->size + 1));
		t.tlo = z.lo;
		t.zero2 = tc->zero == 2;
		if (t.zero2) {
			model_plan_parts(m, cap, first_cap, 0, t.nparts, t.part);
			for (int l = 0; l < m->nlayers; l++)
				t.pfirst[l] = t.pcloses[l] = -1;
			for (int k = 0; k < t.nparts; k++) {
				const struct bucket *p = &t.part[k];

				zero_bucket_cuts(&z, m, p, p->len, t.pcuts + (size_t)k * (size_t)(w->size + 1));
				t.pt0[k] = zero_bucket_start(m, p);
				t.poolb[k % 2] = p->len > t.poolb[k % 2] ? p->len : t.poolb[k % 2];
				if (!p->panel) {
					t.pcloses[p->lo] = k;
				} else if (t.pfirst[p->lo] < 0) {
					t.pfirst[p->lo] = k;
					t.npaneled++;
				}
			}
		}
		/* ZeRO-2: the session made the model's gradient block (model_shard_grads) for the
		 * same parts */
		if (t.zero2 && (m->gshard == NULL || m->gshard_len < z.hi - z.lo ||
				m->gfloats != MODEL_SLOTS + 1 + m->gshard_len + t.poolb[0] + t.poolb[1])) {
			ddp_free(&t);
			loader_free(&L);
			return diag_set(d, ST_RUNTIME, "internal: --zero=2 without the model's gradient block for its buckets");
		}
		/* backward writes the layers of part k into pool buffer k % 2; the panels go where
		 * ddp_panel_dst says */
		for (int k = 0; k < t.nparts && t.zero2; k++)
			for (int l = t.part[k].lo; l <= t.part[k].hi && !t.part[k].panel; l++)
				if (!m->frozen[l])
					m->gw[l] = pool_buf(&t, k) + (m->w_off[l] - t.part[k].off);
		m->pre_layer = ddp_before_layer; /* both stages: the all-gathers overlap forward */
		m->pre_arg = &t;
		if (t.zero2) {
			m->panel_cap = cap;
			m->panel_dst = ddp_panel_dst;
			m->panel_done = ddp_panel_done;
			m->panel_arg = &t;
		}
	}
	for (int k = 0; k < t.nbuckets; k++) {
		res->buckets[k].bytes = (double)t.buckets[k].len * sizeof(float);
		res->buckets[k].lo = t.buckets[k].lo;
		res->buckets[k].hi = t.buckets[k].hi;
	}
	res->nbuckets = t.nbuckets;
	if (c->ops->observe != NULL)
		c->ops->observe(c->ctx, &obs);
	if (ctl->trace != NULL && ctl->trace->path != NULL && ops->trace_dev != NULL) {
		ctl->trace->buf[0].dev = ops->trace_dev;
		ctl->trace->buf[0].dev_ctx = bctx;
	}

	steps_per_epoch = trainer_steps_per_epoch(L.nmicro, tc->grad_accum);
	total = trainer_total_steps(ctl, L.nmicro, tc->grad_accum, tc->epochs, tc->max_steps);
	res->total = total;
	loop = (struct train_loop){ctl, tc, res, r, &clk, total, L.nmicro, ddp_eval, &t, ddp_settle};
	t.total = total;
	report_training_starts(r); /* nothing refuses the run now: the metrics stream opens */
	report_note(r, "buckets: %d (cap %.3g MiB%s), %ld steps per epoch, %ld steps in all",
		    t.nbuckets, tc->bucket_mb,
		    t.stream ? "; streamed: regions of 1 bucket's size start as backward finishes them" : "",
		    steps_per_epoch, total);
	if (tc->zero)
		report_note(r, "zero: stage %d: each rank keeps the optimizer state%s of its shard (%zu of %zu trained parameters on rank 0); buckets reduce-scattered, parameters all-gathered %s",
			    tc->zero, t.zero2 ? " and the reduced gradient" : "",
			    zero_cut(m->ntrainable, 1, w->size), m->ntrainable,
			    t.zero2 ? "during the next forward" : "after the step");
	if (t.npaneled > 0)
		report_note(r, "zero: %d layer%s larger than the bucket cap computed and reduce-scattered in row panels of at most the cap: %d reduce-scatters per micro-batch, two buffers of %.3g MiB",
			    t.npaneled, t.npaneled > 1 ? "s" : "", t.nparts,
			    (double)(t.poolb[0] + t.poolb[1]) * sizeof(float) / 1048576.0);
	if (tc->compress)
		report_note(r, "gradients all-reduced in %s (--grad-compress); loss, stop flag, clipping norm, validation and parameters in fp32",
			    comm_wire_names[c->wire]);
	if (reduced < m->nparams + MODEL_SLOTS)
		report_note(r, "frozen layers: %zu of %zu parameters trained and all-reduced",
			    reduced - MODEL_SLOTS, m->nparams);

	/* Steps can be device graphs with a backend that records them and a communicator whose
	 * collectives can be recorded (NCCL), for whole, single-micro-batch steps. */
	graphs = ops->graph_begin != NULL && ops->graph_reset != NULL && c->ops->capturable &&
		 tc->grad_accum == 1 && tc->graphs && trainer_step_is_fixed(tc, opt) && !tc->zero;
	t.graph_off = !graphs;
	if (t.stream)
		ops->set_progress(bctx, ddp_panel, &t, c->panel_flops);
	clk.t0 = clk.t_last = clk.t_step = clock_now();
	while (step < total && loader_next(&L, &b)) {
		long gi, group = trainer_group(b.mb, L.nmicro, tc->grad_accum, &gi);
		int sync = gi == group - 1, done = 0;
		float scale = 1.0f / ((float)w->size * (float)group);

		res->epochs = b.epoch + 1;
		w->step = step + 1;
		t.step = step;
		t.stop_host[0] = signals_pending() ? 1.0f : 0.0f;
		t.tb = m->trace = trace_buf_for(ctl->trace, 0, step + 1);
		st = ST_OK;
		if (graphs && b.n == tc->batch_size && t.tb == NULL) /* traced steps run eagerly */
			st = ddp_graph_step(&t, &b, scale, step - ctl->start_step, &done);
		if (st == ST_OK && !done)
			st = ddp_micro(&t, &b, gi > 0, sync, scale);
		if (st != ST_OK)
			break;
		loader_copied(&L, &b, m->be);
		st = loader_prefetch(&L, d); /* the next batch, while the device works on this one */
		if (st != ST_OK)
			break;
		consumed += b.n;
		if (!sync)
			continue;
		/* The step's one host synchronisation: its loss, for the finiteness check, and
		 * whether any rank was asked to stop. A device or communicator error stops the
		 * run here, before anything (a checkpoint) is taken from this step. */
		world_watch_begin(w, "the gradient all-reduce");
		st = ops->to_host(bctx, t.slots, m->slots, MODEL_SLOTS, d);
		world_watch_end(w);
		if (st != ST_OK)
			break;
		trace_resolve(t.tb);
		st = trainer_after_step(&loop, &step,
					&(struct step_end){&b, t.slots[MODEL_SLOT_LOSS], t.slots[MODEL_SLOT_ACC], t.lr,
							   consumed * w->size, t.slots[MODEL_SLOT_STOP] != 0.0f},
					d);
		if (st == ST_OK)
			st = ddp_after_step(&t, ctl, &clk, step, total, t.slots[MODEL_SLOT_LOSS],
					    consumed * w->size, r);
		if (st != ST_OK)
			break;
	}
	if (st == ST_OK) /* the weights are read now: the last all-gathers complete */
		st = ddp_settle(&t);
	m->pre_layer = NULL;
	m->pre_arg = NULL;
	m->panel_dst = NULL;
	m->panel_done = NULL;
	m->panel_arg = NULL;
	if (c->ops->observe != NULL)
		c->ops->observe(c->ctx, NULL);
	if (ctl->trace != NULL && ctl->trace->path != NULL)
		trace_resolve(&ctl->trace->buf[0]); /* the last step's checkpoint, on a device clock */
	m->trace = NULL;
	if (st == ST_OK)
		st = ops->sync(bctx, d);
	/* The graphs go before the communicator: NCCL's destroy waits for every graph that
	 * holds one of its collectives. */
	if (graphs)
		ops->graph_reset(bctx);
	if (ops->set_progress != NULL)
		ops->set_progress(bctx, NULL, NULL, 0);
	res->steps = step;
	res->seconds = clock_now() - clk.t0;
	res->wait_s = t.wait;
	res->samples = consumed * w->size;
	res->nreplicas = 1;
	res->rep[0].wait_s = t.wait;
	res->rep[0].compute_s = res->seconds - t.wait;
	res->rep[0].bytes_in = res->rep[0].bytes_out =
		(double)step * (double)reduced * sizeof(float);
	res->rep[0].state_bytes = m->bytes;
	res->rep[0].param_bytes = m->nparams * sizeof(float);
	res->rep[0].grad_bytes = t.grad_floats * sizeof(float);
	for (int k = 1; k < m->narenas; k++)
		res->rep[0].optim_bytes += m->arena[k].len * sizeof(float);
	ddp_free(&t);
	loader_free(&L);
	return st;
}
