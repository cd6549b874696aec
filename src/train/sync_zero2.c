/*
 * sync_zero2.c - ZeRO-2's gradient sync: backward writes each part's gradient into one
 * of two pool buffers, the part is reduce-scattered as soon as backward has finished it,
 * and this rank's share of the result is copied (later micro-batches of a --grad-accum
 * step: added) into the gradient shard before backward reuses the buffer for the part
 * after next. The parts are the plan's (plan.h): the buckets, except that a layer larger
 * than the bucket cap comes in row panels of at most the cap (the model's panel hooks
 * ask where each goes and hand it over), so that a buffer is about the cap, not the
 * largest layer. Every micro-batch is reduce-scattered (as DeepSpeed's ZeRO-2), so with
 * --grad-accum the micro-batches' sums are added after the reduction rather than before:
 * equal to DDP's within float rounding, not bit for bit. The updated parameters are
 * all-gathered as ZeRO-1's (sync_zero1.c).
 *
 * The gradient block (struct model_shard's grad_extra): the slots, the norm, pool buffer 0 (even parts),
 * pool buffer 1 (odd parts), then the shard, laid out as the shard's optimizer state.
 */
#include <stdio.h>  /* snprintf */
#include <stdlib.h>

#include "train/sync.h"

/* The pool buffer part k's gradient is written to: buffer k % 2. */
static float *pool_buf(const struct grad_sync *s, int k)
{
	const struct zero2 *z = s->own;

	return z->pool + (k % 2 ? s->p->poolb[0] : 0);
}

/* Part k's reduce-scatter complete, this rank's share of it into the shard; its buffer is
 * free. */
static enum status fold_part(struct grad_sync *s, int k)
{
	struct zero2 *z = s->own;
	const struct backend_ops *ops = s->m->be->ops;
	const size_t *cu = grad_plan_part_cuts(s->p, k);
	const size_t a = cu[s->w->rank], n = cu[s->w->rank + 1] - a;
	float *dst = z->shard + (s->p->pt0[k] + a - s->p->tlo);
	enum status st;

	if (!z->pending[k])
		return ST_OK;
	st = sync_wait_ticket(s, z->rs[k], "the gradient reduce-scatter");
	z->pending[k] = 0;
	if (st != ST_OK || n == 0)
		return st;
	if (z->fold_add)
		ops->add(s->m->be->ctx, dst, pool_buf(s, k) + a, n);
	else
		ops->copy(s->m->be->ctx, dst, pool_buf(s, k) + a, n);
	return ST_OK;
}

/* Start part k's reduce-scatter from its pool buffer, in the wire type when compressed. */
static enum status start_part(struct grad_sync *s, int k, unsigned flags)
{
	struct zero2 *z = s->own;
	enum status st;

	sync_next_coll(s, -1, COMM_REDUCE_SCATTER);
	st = comm_reduce_scatter_start(s->c, pool_buf(s, k), s->p->part[k].len, grad_plan_part_cuts(s->p, k),
				       flags | s->wire, s->d);
	if (st == ST_OK) {
		z->rs[k] = comm_ticket(s->c);
		z->pending[k] = 1;
	}
	return st;
}

static enum status start_last_part(struct grad_sync *s, int k)
{
	return start_part(s, k, COMM_LAST);
}

/* Part k is in its buffer. Its reduce-scatter starts (the last one watched and timed: the
 * step waits for it), and the part before it is folded, so that its buffer can take part
 * k + 1. A large layer has many panels: when the collectives in flight near
 * COMM_MAX_INFLIGHT, the part before is folded first and every collective in flight
 * completed (nothing but the slots' all-reduce is), which starts the count again. */
static enum status part_done(struct grad_sync *s, int k)
{
	enum status st = ST_OK;

	if (comm_inflight(s->c) + 1 >= COMM_MAX_INFLIGHT) {
		if (k >= 1)
			st = fold_part(s, k - 1);
		if (st == ST_OK)
			st = sync_wait_all(s, "the gradient reduce-scatter");
		if (st != ST_OK)
			return st;
	}
	if (k == s->p->nparts - 1)
		st = sync_start_last(s, start_last_part, k, "the gradient reduce-scatter");
	else
		st = start_part(s, k, 0);
	if (st == ST_OK && k >= 1)
		st = fold_part(s, k - 1);
	return st;
}

float *zero2_panel_dst(struct grad_sync *s, int l, int j)
{
	return pool_buf(s, s->p->pfirst[l] + j);
}

enum status zero2_panel_done(struct grad_sync *s, int l, int j)
{
	return part_done(s, s->p->pfirst[l] + j);
}

/* A part of whole layers ends at this layer, or its panels went already. */
enum status zero2_layer_done(struct grad_sync *s, int layer)
{
	if (s->p->pcloses[layer] >= 0)
		return part_done(s, s->p->pcloses[layer]);
	comm_progress(s->c);
	return ST_OK;
}

/* Every micro-batch reduce-scatters, each into fresh buffers: backward sets, the fold adds. */
enum status zero2_begin(struct grad_sync *s, int sync)
{
	struct zero2 *z = s->own;
	enum status st = buckets_begin(s, sync);

	s->syncing = s->overlap;
	z->fold_add = s->accumulate;
	s->accumulate = 0;
	return st;
}

enum status zero2_finish(struct grad_sync *s, int sync)
{
	enum status st = ST_OK;

	for (int k = 0; k < s->p->nparts && st == ST_OK; k++)
		st = fold_part(s, k);
	s->syncing = 0;
	if (st != ST_OK)
		return st;
	/* nothing is left in flight (forward waited for the all-gathers): counts start again */
	if (!sync)
		return sync_wait_all(s, "the gradient reduce-scatter");
	return sync_wait_all(s, "the gradient all-reduce");
}

/* ZeRO-2's row panels: of at most the cap, or of one row where a row (a layer's input
 * width plus nothing: the weight's row) is longer than the cap. */
void zero2_describe_panels(const struct grad_sync *s, struct report *r, double bucket_mb)
{
	const struct grad_plan *p = s->p;
	const struct model *m = s->m;
	const double mib = (double)(p->poolb[0] + p->poolb[1]) * sizeof(float) / 1048576.0;
	size_t longest = 0; /* the longest weight row over the cap, floats */
	int over = 0, paneled = 0;
	char rows[160];

	if (p->npaneled == 0)
		return;
	for (int l = 0; l < m->nlayers; l++) {
		if (p->pfirst[l] < 0)
			continue;
		paneled++;
		if ((size_t)m->widths[l] > p->cfg.cap) {
			over++;
			longest = (size_t)m->widths[l] > longest ? (size_t)m->widths[l] : longest;
		}
	}
	if (over == 0)
		snprintf(rows, sizeof rows, "of at most the cap");
	else
		snprintf(rows, sizeof rows, "%s (a row of up to %zu floats, %.3g MiB, is larger than the %.3g MiB cap)",
			 over == paneled ? "of one row each" : "of at most the cap, or of one row where a row is larger",
			 longest, (double)longest * sizeof(float) / 1048576.0, bucket_mb);
	report_note(r, "zero: %d layer%s larger than the bucket cap computed and reduce-scattered in row panels %s: %d reduce-scatters per micro-batch, two buffers of %.3g MiB",
		    p->npaneled, p->npaneled > 1 ? "s" : "", rows, p->nparts, mib);
}

static void zero2_describe(const struct grad_sync *s, struct report *r, double bucket_mb)
{
	zero_describe(s, r);
	zero2_describe_panels(s, r, bucket_mb);
}

static int zero2_applies(const struct grad_sync *s)
{
	return s->p->cfg.zero == 2;
}

/* Backward writes the layers of part k into pool buffer k % 2; the panels go where
 * zero2_panel_dst says. z is s->own's (first member of it): ZeRO-3 sets its own up. */
enum status zero2_setup(struct grad_sync *s, struct zero2 *z)
{
	const struct grad_plan *p = s->p;
	struct model *m = s->m;
	const size_t np = p->nparts > 0 ? (size_t)p->nparts : 1;
	enum status st = zero_require_shard(s);

	if (st != ST_OK)
		return st;
	z->rs = calloc(np, sizeof *z->rs);
	z->pending = calloc(np, sizeof *z->pending);
	if (z->rs == NULL || z->pending == NULL) {
		zero2_release(z);
		return diag_set(s->d, ST_RUNTIME, "trainer: out of host memory");
	}
	z->pool = m->gmem + MODEL_SLOTS + 1;
	z->shard = z->pool + p->poolb[0] + p->poolb[1];
	s->own = z;
	for (int k = 0; k < p->nparts; k++)
		for (int l = p->part[k].lo; l <= p->part[k].hi && !p->part[k].panel; l++)
			if (!m->frozen[l])
				m->gw[l] = pool_buf(s, k) + (m->w_off[l] - p->part[k].off);
	return ST_OK;
}

void zero2_release(struct zero2 *z)
{
	free(z->rs);
	free(z->pending);
	z->rs = NULL;
	z->pending = NULL;
}

static enum status zero2_init(struct grad_sync *s)
{
	struct zero2 *z = calloc(1, sizeof *z);
	enum status st;

	if (z == NULL)
		return diag_set(s->d, ST_RUNTIME, "trainer: out of host memory");
	st = zero2_setup(s, z);
	if (st != ST_OK) {
		free(z);
		s->own = NULL;
	}
	return st;
}

static void zero2_free(struct grad_sync *s)
{
	struct zero2 *z = s->own;

	if (z != NULL)
		zero2_release(z);
	free(z);
	s->own = NULL;
}

const struct grad_sync_ops sync_zero2_ops = {
	.name = "zero2",
	.applies = zero2_applies,
	.uncapturable = "--zero decides on the host, layer by layer, which all-gathers forward waits for and which reduce-scatters backward folds, which a replayed graph would not redo",
	.untimed = "--zero=2 reduce-scatters the gradients in parts of layers as backward makes them, not in these buckets",
	.bucket_note = "",
	.replicated = SYNC_SAME_PARAMS, /* the optimizer state is sharded: not compared */
	.describe = zero2_describe,
	.init = zero2_init,
	.begin = zero2_begin,
	.before_layer = zero_before_layer,
	.layer_done = zero2_layer_done,
	.panel_dst = zero2_panel_dst,
	.panel_done = zero2_panel_done,
	.finish = zero2_finish,
	.after_step = zero_gather,
	.settle = zero_settle,
	.free = zero2_free,
};
