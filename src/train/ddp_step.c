/*
 * ddp_step.c - one ddp micro-batch as its phases, and the step as a device graph.
 *
 * Averaging: the micro-batch's share of the step's mean, 1 / (world * micro-batches in
 * this step), scales the loss gradient's seed (float32) or the weight gradients as the
 * backward makes them (bf16: trainer_mean_scales), so the summed gradient is already the
 * mean over ranks and micro-batches, with no extra pass over the gradients. The loss
 * value is scaled alike, and rides in the gradient's slots (model.h), so
 * the mean loss over ranks costs no collective of its own (with ZeRO or
 * --grad-compress: one small float32 all-reduce, plan.h).
 */
#include "core/clock.h"
#include "core/signals.h" /* signals_pending */
#include "train/ddp.h"

/* load: the micro-batch onto the device. */
static void step_load(struct ddp *t, const struct batch *b)
{
	const struct model *m = t->m;
	long span = trace_begin(t->sync.tb, TR_LOAD, -1);

	if (b->synth != NULL) { /* synthetic rows made on the device: only the indices cross */
		m->be->ops->synth(m->be->ctx, m->act[0], m->target, b->synth, b->idx, b->n);
	} else if (m->be->ops->host_memory) { /* read where the loader made them (ddp_micro) */
		model_read_input(t->m, b->x, b->y);
	} else {
		m->be->ops->to_device(m->be->ctx, m->act[0], b->x, (size_t)b->n * (size_t)m->widths[0]);
		m->be->ops->to_device(m->be->ctx, m->target, b->y, (size_t)b->n * (size_t)t->ydim);
	}
	trace_end(t->sync.tb, span);
}

/* forward (ZeRO: each layer waits for its all-gather), then the loss and its gradient. */
static enum status step_forward(struct ddp *t, const struct batch *b, int accumulate, float scale,
				float dscale)
{
	struct model *m = t->m;
	enum status st = model_forward(m, b->n, &t->sync.hooks);
	long span;

	if (st != ST_OK)
		return st;
	span = trace_begin(t->sync.tb, TR_LOSS, -1);
	loss_apply(&t->tc->loss, m->be, m->dbuf[0], m->slots + MODEL_SLOT_LOSS, m->act[m->nlayers], m->target,
		   b->n, m->widths[m->nlayers], scale, dscale, accumulate);
	trace_end(t->sync.tb, span);
	return ST_OK;
}

/* backward, with the gradient sync starting collectives as layers finish; with sync the
 * reduced gradient is complete at the end. */
static enum status step_backward(struct ddp *t, const struct batch *b, float gscale, int accumulate,
				 int sync)
{
	struct grad_sync *s = &t->sync;
	struct model *m = t->m;
	enum status st;

	if (sync) /* before backward starts the collective that carries it */
		m->be->ops->to_device(m->be->ctx, m->slots + MODEL_SLOT_STOP, t->stop_host + b->buf, 1);
	s->accumulate = accumulate;
	st = s->ops->begin(s, sync);
	if (st == ST_OK)
		st = model_backward(m, b->n, gscale, s->accumulate, &s->hooks);
	if (st == ST_OK)
		return s->ops->finish(s, sync);
	s->syncing = 0;
	return st;
}

/* optimizer: the step on the reduced gradient, then the strategy's after-step. */
static enum status step_optimizer(struct ddp *t)
{
	struct grad_sync *s = &t->sync;
	long span = trace_begin(s->tb, TR_OPTIMIZER, -1);
	enum status st;

	sync_next_coll(s, -1, COMM_ALLREDUCE); /* the clipping norm's all-reduce, if any: no bucket's */
	st = trainer_optimizer_step(t->tc, t->opt, t->step, t->total, t->c, &t->lr, t->d);
	trace_end(s->tb, span);
	if (st == ST_OK && s->ops->after_step != NULL)
		st = s->ops->after_step(s);
	return st;
}

enum status ddp_micro(struct ddp *t, const struct batch *b, int accumulate, int sync, float scale)
{
	enum status st;
	float dscale, gscale;

	trainer_mean_scales(t->tc, scale, &dscale, &gscale);
	step_load(t, b);
	st = step_forward(t, b, accumulate, scale, dscale);
	if (st == ST_OK)
		st = step_backward(t, b, gscale, accumulate, sync);
	/* the loader refills b's buffer once the step has queued it (loader_copied), and the
	 * evaluation copies into the model's own input */
	model_read_input(t->m, NULL, NULL);
	if (st != ST_OK || !sync)
		return st;
	return step_optimizer(t);
}

/* Capture the step into graph slot `slot`; 1 if that worked (a failure only turns graphs
 * off, its reason in why). */
static int capture(struct ddp *t, const struct batch *b, float scale, int slot, struct diag *why)
{
	const struct backend_ops *ops = t->m->be->ops;
	void *bctx = t->m->be->ctx;
	struct diag *caller = t->d;
	enum status st;

	if (ops->graph_begin(bctx, why) != ST_OK)
		return 0;
	t->d = t->sync.d = why; /* a failure while capturing only turns graphs off */
	st = ddp_micro(t, b, 0, 1, scale);
	t->d = t->sync.d = caller;
	return ops->graph_end(bctx, slot, why) == ST_OK && st == ST_OK;
}

/* Recorded on its second occurrence for each host buffer counted from this run's start (the
 * first step of every run, resumed or not, warms up cuBLAS and NCCL eagerly: their lazy
 * set-up cannot be captured), replayed after that. NCCL requires every rank to capture the
 * same collectives, so the ranks agree on each capture's outcome (one small collective per
 * capture, two per run) before any graph is launched: if a capture failed anywhere, every
 * rank drops its graphs and runs eagerly. */
enum status ddp_graph_step(struct ddp *t, const struct batch *b, float scale, long ran, int *done)
{
	const struct backend_ops *ops = t->m->be->ops;
	void *bctx = t->m->be->ctx;
	struct diag why = {0}, after = {0};
	int slot = b->buf, ok; /* a captured step reads the addresses of one loader buffer */
	enum status st;

	*done = 0;
	if (t->graph_off)
		return ST_OK;
	if (!t->graph_buf[slot] && ran < 1)
		return ST_OK;
	if (!t->graph_buf[slot]) {
		ok = capture(t, b, scale, slot, &why);
		if (!world_all(t->w, ok)) {
			/* Nothing captured ran: the caller runs the step eagerly, on every rank. */
			ops->graph_reset(bctx);
			t->graph_off = 1;
			report_note(t->r, "CUDA graphs off from step %ld: a capture failed%s%s", t->w->step,
				    ok ? " on another rank" : ": ", ok ? "" : why.msg);
			/* A capture also fails on an error of the device or the communicator (NCCL's
			 * asynchronous error, seen first here now that a step's read comes a step
			 * later): that one ends the run, before an aborted communicator is used. */
			st = ops->sync(bctx, &after);
			if (st != ST_OK) /* the first error: what the capture failed on, if it was here */
				diag_set(t->d, st, "%s", ok ? after.msg : why.msg);
			return st;
		}
		t->graph_buf[slot] = 1;
	}
	st = ops->graph_launch(bctx, slot, t->d);
	*done = st == ST_OK;
	return st;
}

/* The straggler check's warnings, as report notes. */
static void say_note(void *r, const char *line)
{
	report_note(r, "%s", line);
}

float ddp_stop_slot(struct ddp *t, int sync)
{
	const struct train_ctl *ctl = t->ctl;
	float v = signals_pending() ? 1.0f : 0.0f;

	if (sync && !t->observe_planned && ctl->prom != NULL && prometheus_due(ctl->prom, clock_now())) {
		t->observe_planned = 1; /* one write at a time: the next is planned once it is read */
		v += DDP_OBSERVE;
	}
	return v;
}

/* A step's stop slot, read (step `read`, counted from 1; now: read at once): whether a
 * rank asked to stop (*stop) and whether rank 0 writes --prometheus after it (returned).
 * The other ranks then wait for rank 0 patiently -- a pending stop waits for its write,
 * within --timeout -- until they have read the first step rank 0 queues after writing:
 * the next one if this one is read at once, else the one after (the next is queued). */
static int read_stop_slot(struct ddp *t, float v, long read, int now, int *stop)
{
	const int observe = v >= DDP_OBSERVE;

	*stop = (observe ? v - DDP_OBSERVE : v) != 0.0f;
	if (observe) /* rank 0's plan, read: it writes now, and may plan the next */
		t->observe_planned = 0;
	if (t->busy_until > 0 && read >= t->busy_until) {
		t->busy_until = 0;
		world_expect_busy(t->w, NULL);
	}
	if (observe && t->w->rank != 0) {
		t->busy_until = read + (now ? 1 : 2);
		world_expect_busy(t->w, "the --prometheus write on rank 0");
	}
	return observe;
}

/* After trainer_after_step: the straggler samples (and check), and --prometheus when the
 * step said so (observe; whose failure is a warning: rank 0 alone writes it, and must not
 * leave the others in the next step's all-reduce). */
static enum status ddp_observe_step(struct ddp *t, struct step_clock *clk, long step, float loss,
				    double consumed, int observe)
{
	const struct train_ctl *ctl = t->ctl;
	const double wait = t->sync.wait;
	double now = clock_now(), step_s = now - clk->t_step, waited = wait - clk->wait_step;
	enum status st = ST_OK;

	clk->t_step = now;
	clk->wait_step = wait;
	if (ctl->straggler != NULL)
		st = straggler_step(ctl->straggler, t->w, step, step_s, step_s - waited, say_note, t->r, t->d);
	if (st == ST_OK && ctl->prom != NULL && observe) {
		double el = now - clk->t0;

		t->res->wait_s = wait;
		trainer_prometheus(ctl, t->r, t->res, step, t->total, loss, el > 0 ? consumed / el : 0.0,
				   el > 0 ? wait / el : 0.0, -1, t->w->size);
	}
	return st;
}

/* Read step p's slots (a query first: by now the device has usually passed them; a host
 * wait, watched, only if not), then its work. now: nothing is queued after it; else the
 * next step is, and a stop it asks for waits for that one (read at once): this step's work
 * is an ordinary step's, since the weights already hold the next one's update, and a stop
 * (its checkpoint, its "stopped after step N") here would name this step over them. */
static enum status ddp_read(struct ddp *t, const struct train_loop *loop, long *step,
			    const struct ddp_late *p, int now)
{
	const struct backend_ops *ops = t->m->be->ops;
	const float *slots = t->slots + p->ring * MODEL_SLOTS;
	enum status st = ST_OK;
	int done = 1, stop, observe;

	/* watched as the read behind the step's collectives was: a test double's device may
	 * run them, and wait for a peer, inside the query */
	world_watch_begin(t->w, "the gradient all-reduce");
	if (ops->host_mark != NULL && ops->host_poll != NULL)
		st = ops->host_poll(t->m->be->ctx, DDP_MARK + p->ring, &done, t->d);
	if (st == ST_OK && ops->host_mark != NULL && !done)
		st = ops->host_wait(t->m->be->ctx, DDP_MARK + p->ring, t->d);
	world_watch_end(t->w);
	if (st != ST_OK)
		return st;
	trace_resolve(p->tb);
	observe = read_stop_slot(t, slots[MODEL_SLOT_STOP], *step + 1, now, &stop);
	if (stop && !now) {
		t->stop_seen = 1;
		stop = 0;
	}
	st = trainer_after_step(loop, step,
				&(struct step_end){&p->b, slots[MODEL_SLOT_LOSS], slots[MODEL_SLOT_ACC], p->lr,
						   p->consumed, stop || (now && t->stop_seen)},
				t->d);
	if (st == ST_OK)
		st = ddp_observe_step(t, loop->clk, *step, slots[MODEL_SLOT_LOSS], p->consumed, observe);
	return st;
}

enum status ddp_after(struct ddp *t, const struct train_loop *loop, long *step, const struct batch *b,
		      double consumed)
{
	const struct backend_ops *ops = t->m->be->ops;
	const struct ddp_late cur = {*b, consumed, t->lr, t->sync.tb, (int)(t->step % 2)};
	enum status st = ST_OK;

	/* behind the step's collectives, on the device's stream */
	ops->to_host_async(t->m->be->ctx, t->slots + cur.ring * MODEL_SLOTS, t->m->slots, MODEL_SLOTS);
	if (ops->host_mark != NULL)
		ops->host_mark(t->m->be->ctx, DDP_MARK + cur.ring);
	if (t->pending) {
		t->pending = 0;
		st = ddp_read(t, loop, step, &t->late, 0);
	}
	if (st != ST_OK)
		return st;
	if (ops->host_mark != NULL && !t->stop_seen && cur.tb == NULL &&
	    !trainer_step_reads_weights(loop, *step + 1, b)) {
		t->late = cur;
		t->pending = 1;
		return ST_OK;
	}
	return ddp_read(t, loop, step, &cur, 1);
}

enum status ddp_after_last(struct ddp *t, const struct train_loop *loop, long *step)
{
	if (!t->pending)
		return ST_OK;
	t->pending = 0;
	return ddp_read(t, loop, step, &t->late, 1);
}
