/*
 * sync_zero3.c - ZeRO-3's gradient sync: the parameters themselves sharded. Each rank
 * keeps only its window of the parameters (plan.h, zero.h), and the gradient shard and
 * optimizer state of the same trainable floats, as ZeRO-2 does (sync_zero2.c, whose
 * gradient side this entry runs as it is). A layer's weights exist whole only in one of
 * GRAD_PLAN_GATHERED working buffers, all-gathered there when a pass needs them:
 *
 * - forward: before layer l, the all-gather of layer l + 1 starts (so it moves while l
 *   computes) and layer l's, started one layer earlier, is waited for; a buffer is
 *   reused two layers later, which frees the layer before it (resharded after forward);
 * - backward: before layer l passes its gradient down (which reads its weights), the
 *   all-gather of layer l - 1 starts, before layer l's reduce-scatter is started at its
 *   end, so both move while l computes; the last two layers are still in their buffers
 *   from forward and are not gathered again, and the first trainable layer, whose
 *   gradient goes no further down, needs none;
 * - after the optimizer step every gathered copy is stale: the first layer's all-gather
 *   starts for the next forward (evaluation, checkpoints and the end settle it first).
 *
 * All-gather is a copy, so the weights, gradients and optimizer state are ZeRO-2's bit
 * for bit. The working buffers are in the model's memory (struct model_shard's work);
 * every wait goes through a ticket (comm.h), so whoever completes the collectives in
 * between (a full wait for the in-flight limit, validation's all-reduce), a wait stays
 * right.
 */
#include <stdlib.h>

#include "model/zero.h" /* zero_cut */
#include "train/sync.h"

struct zero3 {
	struct zero2 z2;                         /* first: the gradient side, ZeRO-2's */
	int held[GRAD_PLAN_GATHERED];            /* the layer buffer i holds or is gathering; -1: none */
	struct comm_ticket ag[GRAD_PLAN_GATHERED]; /* buffer i's all-gather, until complete */
};

/* Working buffer i: room for the largest of the layers it takes (plan.h). */
static float *work_buf(const struct grad_sync *s, int i)
{
	return s->m->work + s->p->gather_at[i];
}

/* Layer l's floats: its weight, then its bias. */
static size_t layer_floats(const struct model *m, int l)
{
	return (size_t)m->widths[l + 1] * (size_t)(m->widths[l] + 1);
}

/* Start the all-gather of layer l into buffer l % GRAD_PLAN_GATHERED, unless it holds it:
 * this rank's part of the layer copied in from its window (queued on the backend, before
 * the collective that reads it), then the in-place all-gather of the whole layer. */
static enum status gather_start(struct grad_sync *s, int l)
{
	struct zero3 *z = s->own;
	struct model *m = s->m;
	const int i = l % GRAD_PLAN_GATHERED, r = s->w->rank;
	const size_t *cu = grad_plan_layer_cuts(s->p, l);
	enum status st;

	if (z->held[i] == l)
		return ST_OK;
	/* the buffer's last all-gather lands before the buffer is written again */
	st = sync_wait_ticket(s, z->ag[i], "the parameter all-gather");
	if (st == ST_OK && comm_inflight(s->c) + 1 >= COMM_MAX_INFLIGHT)
		st = sync_wait_all(s, "the parameter all-gather");
	if (st != ST_OK)
		return st;
	if (z->held[i] >= 0)
		m->pw[z->held[i]] = NULL; /* resharded: that layer is gathered again when needed */
	z->held[i] = -1;
	if (cu[r + 1] > cu[r])
		m->be->ops->copy(m->be->ctx, work_buf(s, i) + cu[r],
				 m->params + (m->w_off[l] + cu[r] - m->arena[0].first), cu[r + 1] - cu[r]);
	st = sync_all_gather_start(s, l, work_buf(s, i), layer_floats(m, l), cu);
	if (st != ST_OK)
		return st;
	z->ag[i] = comm_ticket(s->c);
	z->held[i] = l;
	return ST_OK;
}

/* Layer l whole in its buffer (started now if it was not), and pw[l] pointing there. */
static enum status gather_wait(struct grad_sync *s, int l)
{
	struct zero3 *z = s->own;
	const int i = l % GRAD_PLAN_GATHERED;
	enum status st = gather_start(s, l);

	if (st == ST_OK)
		st = sync_wait_ticket(s, z->ag[i], "the parameter all-gather");
	if (st == ST_OK)
		s->m->pw[l] = work_buf(s, i);
	return st;
}

/* Forward's hook: the next layer's all-gather starts, this one's is waited for. */
static enum status zero3_before_layer(struct grad_sync *s, int l)
{
	enum status st = l + 1 < s->m->nlayers ? gather_start(s, l + 1) : ST_OK;

	return st == ST_OK ? gather_wait(s, l) : st;
}

/* Backward's hook, before layer l passes its gradient down: the layer below it starts, if
 * it passes one down too (above the first trainable layer), then this one is waited for. */
static enum status zero3_before_backward(struct grad_sync *s, int l)
{
	enum status st = l - 1 > s->p->lowest ? gather_start(s, l - 1) : ST_OK;

	return st == ST_OK ? gather_wait(s, l) : st;
}

/* The optimizer changed this rank's window: every gathered copy is stale. The first
 * layer's all-gather starts for the next forward. */
static enum status zero3_after_step(struct grad_sync *s)
{
	struct zero3 *z = s->own;

	for (int i = 0; i < GRAD_PLAN_GATHERED; i++) {
		enum status st = sync_wait_ticket(s, z->ag[i], "the parameter all-gather");

		if (st != ST_OK)
			return st;
		if (z->held[i] >= 0)
			s->m->pw[z->held[i]] = NULL;
		z->held[i] = -1;
	}
	return gather_start(s, 0);
}

/* Nothing in flight changes the weights; the all-gathers in flight complete (all, so the
 * communicator's count starts again), so that whatever comes next (checkpoints, the end,
 * where NCCL's teardown must find nothing in flight) meets an idle communicator. */
static enum status zero3_settle(struct grad_sync *s)
{
	struct zero3 *z = s->own;

	for (int i = 0; i < GRAD_PLAN_GATHERED; i++)
		if (!comm_ticket_done(s->c, z->ag[i]))
			return sync_wait_all(s, "the parameter all-gather");
	return ST_OK;
}

/* --check-replicas: layer l gathered (reused where it is in a buffer still), and where. */
static const float *zero3_gathered(struct grad_sync *s, int l)
{
	return gather_wait(s, l) == ST_OK ? s->m->pw[l] : NULL;
}

static void zero3_describe(const struct grad_sync *s, struct report *r, double bucket_mb)
{
	const struct grad_plan *p = s->p;
	const struct model *m = s->m;

	report_note(r, "zero: stage 3: each rank keeps its window of the parameters (%zu of %zu on rank 0), and the optimizer state and reduced gradient of its shard (%zu of %zu trained parameters); each layer all-gathered before its forward and its backward, one layer ahead, into %d working buffers of %.3g MiB in all",
		    p->pwin[1] - p->pwin[0], m->nparams, zero_cut(m->ntrainable, 1, s->w->size), m->ntrainable, GRAD_PLAN_GATHERED,
		    (double)p->gather_at[GRAD_PLAN_GATHERED] * sizeof(float) / 1048576.0);
	zero2_describe_panels(s, r, bucket_mb);
}

static int zero3_applies(const struct grad_sync *s)
{
	return s->p->cfg.zero == 3;
}

static enum status zero3_init(struct grad_sync *s)
{
	struct zero3 *z = calloc(1, sizeof *z);
	enum status st;

	if (z == NULL)
		return diag_set(s->d, ST_RUNTIME, "trainer: out of host memory");
	for (int i = 0; i < GRAD_PLAN_GATHERED; i++)
		z->held[i] = -1;
	st = zero2_setup(s, &z->z2);
	if (st != ST_OK) {
		free(z);
		s->own = NULL;
	}
	return st;
}

static void zero3_free(struct grad_sync *s)
{
	struct zero3 *z = s->own;

	if (z != NULL)
		zero2_release(&z->z2);
	free(z);
	s->own = NULL;
}

const struct grad_sync_ops sync_zero3_ops = {
	.name = "zero3",
	.applies = zero3_applies,
	.uncapturable = "--zero=3 decides on the host, layer by layer, which all-gathers to start and wait for (which layer each working buffer holds), which a replayed graph would not redo",
	.untimed = "--zero=3 reduce-scatters the gradients in parts of layers as backward makes them and all-gathers the parameters layer by layer, not in these buckets",
	.bucket_note = "",
	.describe = zero3_describe,
	/* nothing kept whole; what the all-gathers bring is the same on every rank */
	.replicated = SYNC_SAME_GATHERED,
	.gathered = zero3_gathered,
	.init = zero3_init,
	.begin = zero2_begin,
	.before_layer = zero3_before_layer,
	.before_backward = zero3_before_backward,
	.layer_done = zero2_layer_done,
	.panel_dst = zero2_panel_dst,
	.panel_done = zero2_panel_done,
	.finish = zero2_finish,
	.after_step = zero3_after_step,
	.settle = zero3_settle,
	.free = zero3_free,
};
