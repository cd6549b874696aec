/*
 * trainer_dp.c - DataParallel: one process, one worker thread per replica.
 *
 * Follows PyTorch's nn.DataParallel dataflow on every micro-batch: scatter
 * the batch in torch.chunk pieces (chunks of ceil(n/G), possibly fewer than
 * G; a replica without a chunk sits the step out), replicate replica 0's
 * weights onto the replicas that have a chunk, forward in parallel, gather
 * the outputs onto replica 0, compute the loss there over the whole batch,
 * scatter the output gradient back, backward in parallel, and sum the
 * gradients onto replica 0, whose optimizer alone steps.
 *
 * The main thread is replica 0's worker and does the serial parts; replicas
 * 1..G-1 each have a thread that waits at a barrier for the next job. No MPI
 * call is made here.
 *
 * The watchdog watches the replicas as ddp's watches the ranks: the main thread's
 * wait for each replica's job (and device) is a marked wait naming that replica,
 * so a replica stuck in a product ends the run at --timeout, named, and a stop
 * signal that cannot complete (the step never ends) gives up after the short
 * grace instead of waiting for ever.
 *
 * Every replica's time per phase, the bytes it moved and the memory it holds
 * are counted, so the report shows where DP spends its time (the serial
 * gather, loss and reduce on replica 0, and the per-step replication).
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/signals.h"
#include "train/trainer.h"

enum dp_job { JOB_FORWARD, JOB_BACKWARD, JOB_QUIT };
enum { WAIT_FORWARD, WAIT_BACKWARD, WAIT_DEVICE, WAITS }; /* what the main thread waits for */

#define DP_MAX_SPANS (BACKEND_TIMERS / 2)

struct dp;

struct dp_replica {
	struct dp *dp;
	int id;
	struct backend own_be; /* replicas 1..G-1: an instance on device id */
	struct model own;     /* replicas 1..G-1 */
	struct model *m;      /* &own, or the caller's model for replica 0 */
	pthread_t thread;
	int started;
	int n;                /* rows of this micro-batch's chunk; 0 = sits out */
	size_t row0;          /* first row of the chunk in the batch */
	int accumulate;       /* backward adds to the gradients (replica 0 inside a group) */
	float gscale;         /* backward's factor of the weight gradients (trainer_mean_scales) */
	unsigned long done;   /* the last job (struct dp's jobs) this replica finished; under mu */
	char waiting[WAITS][48]; /* the watchdog's names of the waits for it ("replica 1's forward pass") */
	struct replica_stats *st;
	struct diag err;      /* the first error of this replica's device */
	struct dp_span {      /* a phase between two timer marks, not yet read */
		enum dp_phase phase;
		int a, b;
	} span[DP_MAX_SPANS];
	int nspans, nmarks;
	struct trace_buf *tb; /* this step's trace buffer (this replica's thread), or NULL */
};

struct dp {
	const struct train_config *tc;
	const struct train_ctl *ctl;
	struct report *r;
	struct diag *d;
	struct world *w;      /* its watchdog watches the waits for the replicas */
	int ydim;             /* target columns: the output width, or 1 (class labels) */
	int g;
	struct dp_replica rep[TRAIN_MAX_REPLICAS];
	pthread_barrier_t go;  /* the workers start the next job */
	pthread_mutex_t mu;    /* a worker's done, and cv, on which the main thread waits for it */
	pthread_cond_t cv;
	unsigned long jobs;    /* jobs dispatched */
	enum dp_job job;
	float *outputs;       /* replica 0: (batch, out) gathered outputs */
	float *targets;       /* replica 0: (batch, out) */
	float *dout;          /* replica 0: (batch, out) gradient of the loss wrt outputs */
	float *scratch;       /* replica 0: (nparams) another replica's gradients, when the
			       * replicas do not share host memory */
	int timed_sync;       /* device memory but no timer marks: sync after each phase so
			       * host timers measure device work */
	struct trace *trace;  /* --trace, or NULL */
};

/* The --trace span of each phase; forward and backward are traced per layer by the model. */
static const signed char phase_trace[DP_NPHASES] = {
	[DP_SCATTER] = TR_SCATTER, [DP_REPLICATE] = TR_REPLICATE, [DP_FORWARD] = -1,
	[DP_GATHER] = TR_GATHER, [DP_LOSS] = TR_LOSS, [DP_BACKWARD] = -1, [DP_REDUCE] = TR_REDUCE,
	[DP_STEP] = TR_OPTIMIZER,
};

/* A timed phase of a replica: device time between two marks on its stream where the
 * backend has them (read when the step ends, with one wait per replica and step), else
 * host time (the CPU backend's work is done when its call returns). */
struct phase {
	double t0; /* host clock at the start */
	int mark;  /* the start's timer mark, or -1 */
};

static void dp_collect(struct dp_replica *r);

static struct phase phase_begin(struct dp *dp, struct dp_replica *r)
{
	const struct backend_ops *ops = r->m->be->ops;
	struct phase p = {clock_now(), -1};

	if (ops->timer_mark == NULL)
		return p;
	if (r->nmarks + 2 > BACKEND_TIMERS || r->nspans == DP_MAX_SPANS)
		dp_collect(r);
	p.mark = r->nmarks++;
	ops->timer_mark(r->m->be->ctx, p.mark);
	return p;
}

static void phase_end(struct dp *dp, struct dp_replica *r, enum dp_phase phase, struct phase p)
{
	/* Traced in host time: with device timer marks, when the work was queued. */
	if (r->tb != NULL && phase_trace[phase] >= 0) {
		if (p.mark < 0 && dp->timed_sync && r->err.st == ST_OK)
			r->m->be->ops->sync(r->m->be->ctx, &r->err);
		trace_record(r->tb, phase_trace[phase], -1, TRACE_SPAN, p.t0, clock_now(), 0.0);
	}
	if (p.mark < 0) {
		if (dp->timed_sync && r->err.st == ST_OK) /* device work without timer marks */
			r->m->be->ops->sync(r->m->be->ctx, &r->err);
		r->st->seconds[phase] += clock_now() - p.t0;
		return;
	}
	r->m->be->ops->timer_mark(r->m->be->ctx, r->nmarks);
	r->span[r->nspans++] = (struct dp_span){phase, p.mark, r->nmarks++};
}

/* Wait for replica r's device (keeping its first error) and add up its timed phases. */
static void dp_collect(struct dp_replica *r)
{
	const struct backend_ops *ops = r->m->be->ops;

	if (r->nmarks == 0)
		return;
	if (r->err.st == ST_OK)
		ops->sync(r->m->be->ctx, &r->err);
	for (int i = 0; i < r->nspans && r->err.st == ST_OK; i++) {
		double ms = ops->timer_ms(r->m->be->ctx, r->span[i].a, r->span[i].b);

		if (ms >= 0)
			r->st->seconds[r->span[i].phase] += ms * 1e-3;
	}
	r->nspans = r->nmarks = 0;
}

/* The first error any replica has seen (after a dispatch, or at the end of the run). */
static enum status dp_status(struct dp *dp, struct diag *d)
{
	for (int i = 0; i < dp->g; i++)
		if (dp->rep[i].err.st != ST_OK)
			return diag_set(d, dp->rep[i].err.st, "replica %d: %s", i, dp->rep[i].err.msg);
	return ST_OK;
}

/* Wait for every replica's device: an error on any of them is the run's error. */
static enum status dp_sync_all(struct dp *dp, struct diag *d)
{
	for (int i = 0; i < dp->g; i++) {
		struct dp_replica *r = &dp->rep[i];

		world_watch_thread(dp->w, r->waiting[WAIT_DEVICE]);
		dp_collect(r);
		if (r->err.st == ST_OK)
			r->m->be->ops->sync(r->m->be->ctx, &r->err);
		world_watch_end(dp->w);
	}
	return dp_status(dp, d);
}

/* The parallel part of a job, run by replica r's thread. */
static void run_job(struct dp_replica *r, enum dp_job job)
{
	struct dp *dp = r->dp;
	struct model *m0 = dp->rep[0].m;
	const struct backend_ops *ops = r->m->be->ops;
	struct phase t;

	if (r->n == 0)
		return;
	if (job == JOB_FORWARD) {
		if (r->id > 0) {
			t = phase_begin(dp, r);
			ops->copy_peer(r->m->be->ctx, r->m->params, m0->be->ctx, m0->params, m0->nparams);
			phase_end(dp, r, DP_REPLICATE, t);
			r->st->bytes_in += (double)m0->nparams * sizeof(float);
		}
		t = phase_begin(dp, r);
		model_forward(r->m, r->n, NULL);
		phase_end(dp, r, DP_FORWARD, t);
	} else if (job == JOB_BACKWARD) {
		t = phase_begin(dp, r);
		model_backward(r->m, r->n, r->gscale, r->accumulate, NULL);
		phase_end(dp, r, DP_BACKWARD, t);
	}
}

static void *worker_main(void *arg)
{
	struct dp_replica *r = arg;
	struct dp *dp = r->dp;

	/* This thread drives replica r's device; a failure is reported after the first job. */
	r->m->be->ops->bind(r->m->be->ctx, &r->err);
	for (;;) {
		enum dp_job job;

		pthread_barrier_wait(&dp->go);
		job = dp->job;
		if (job == JOB_QUIT)
			break;
		run_job(r, job);
		pthread_mutex_lock(&dp->mu);
		r->done = dp->jobs;
		pthread_cond_broadcast(&dp->cv);
		pthread_mutex_unlock(&dp->mu);
	}
	return NULL;
}

/* Run a job on every replica: the workers on their threads, replica 0 here; then wait for
 * each worker in turn, a marked wait naming it (a barrier could not say which one is
 * stuck). */
static void dispatch(struct dp *dp, enum dp_job job)
{
	dp->job = job;
	dp->jobs++; /* the workers read it after the barrier */
	pthread_barrier_wait(&dp->go);
	if (job == JOB_QUIT)
		return;
	run_job(&dp->rep[0], job);
	for (int i = 1; i < dp->g; i++) {
		struct dp_replica *r = &dp->rep[i];

		world_watch_thread(dp->w, r->waiting[job == JOB_FORWARD ? WAIT_FORWARD : WAIT_BACKWARD]);
		pthread_mutex_lock(&dp->mu);
		while (r->done != dp->jobs)
			pthread_cond_wait(&dp->cv, &dp->mu);
		pthread_mutex_unlock(&dp->mu);
		world_watch_end(dp->w);
	}
}

/* torch.chunk(n, G) along dim 0: chunks of ceil(n/G), the last smaller, maybe fewer than G. */
static void plan_chunks(struct dp *dp, int n)
{
	int c = (n + dp->g - 1) / dp->g;

	for (int i = 0; i < dp->g; i++) {
		int first = i * c;

		dp->rep[i].row0 = (size_t)first;
		dp->rep[i].n = first >= n ? 0 : (n - first < c ? n - first : c);
	}
}

/* n floats went from replica `from` to replica `to`: their per-replica byte counts. */
static void count_copy(struct dp_replica *from, struct dp_replica *to, size_t n)
{
	from->st->bytes_out += (double)n * sizeof(float);
	to->st->bytes_in += (double)n * sizeof(float);
}

/* Scatter the inputs (and the targets to replica 0, where the loss is computed). */
static void dp_scatter_inputs(struct dp *dp, const struct batch *b)
{
	struct dp_replica *r0 = &dp->rep[0];
	const int in = r0->m->widths[0];
	const size_t pbytes = r0->m->nparams * sizeof(float);
	struct phase t;

	for (int i = 0; i < dp->g; i++) {
		struct dp_replica *r = &dp->rep[i];

		if (r->n == 0)
			continue;
		t = phase_begin(dp, r);
		if (b->synth != NULL) /* synthetic rows made on the device: only the indices cross */
			r->m->be->ops->synth(r->m->be->ctx, r->m->act[0], NULL, b->synth, b->idx + r->row0, r->n);
		else
			r->m->be->ops->to_device(r->m->be->ctx, r->m->act[0], b->x + r->row0 * in, (size_t)r->n * in);
		phase_end(dp, r, DP_SCATTER, t);
		r->st->bytes_in += (double)r->n * (b->synth != NULL ? sizeof(uint32_t) : in * sizeof(float));
		if (i > 0)
			r0->st->bytes_out += (double)pbytes; /* replica 0's weights, replicated */
	}
	t = phase_begin(dp, r0);
	if (b->synth != NULL)
		r0->m->be->ops->synth(r0->m->be->ctx, NULL, dp->targets, b->synth, b->idx, b->n);
	else
		r0->m->be->ops->to_device(r0->m->be->ctx, dp->targets, b->y, (size_t)b->n * (size_t)dp->ydim);
	phase_end(dp, r0, DP_SCATTER, t);
	r0->st->bytes_in += (double)b->n * (b->synth != NULL ? sizeof(uint32_t) : dp->ydim * sizeof(float));
}

/* Gather the outputs onto replica 0, and the loss over the whole batch there, its seed
 * times dscale. */
static void dp_gather_loss(struct dp *dp, int n, float scale, float dscale, int first_in_group)
{
	struct dp_replica *r0 = &dp->rep[0];
	struct model *m0 = r0->m;
	const int out = m0->widths[m0->nlayers];
	struct phase t = phase_begin(dp, r0);

	for (int i = 0; i < dp->g; i++) {
		struct dp_replica *r = &dp->rep[i];

		if (r->n == 0)
			continue;
		m0->be->ops->copy_peer(m0->be->ctx, dp->outputs + r->row0 * out, r->m->be->ctx,
				       r->m->act[m0->nlayers], (size_t)r->n * out);
		if (i > 0)
			count_copy(r, r0, (size_t)r->n * out);
	}
	phase_end(dp, r0, DP_GATHER, t);
	t = phase_begin(dp, r0);
	loss_apply(&dp->tc->loss, m0->be, dp->dout, m0->grads + m0->nparams + MODEL_SLOT_LOSS, dp->outputs,
		   dp->targets, n, out, scale, dscale, !first_in_group);
	phase_end(dp, r0, DP_LOSS, t);
}

/* Scatter the output gradient back with the same chunks. */
static void dp_scatter_grad(struct dp *dp)
{
	struct dp_replica *r0 = &dp->rep[0];
	const int out = r0->m->widths[r0->m->nlayers];

	for (int i = 0; i < dp->g; i++) {
		struct dp_replica *r = &dp->rep[i];
		struct phase t;

		if (r->n == 0)
			continue;
		t = phase_begin(dp, r);
		r->m->be->ops->copy_peer(r->m->be->ctx, r->m->dbuf[0], r0->m->be->ctx, dp->dout + r->row0 * out,
					 (size_t)r->n * out);
		phase_end(dp, r, DP_SCATTER, t);
		if (i > 0)
			count_copy(r0, r, (size_t)r->n * out);
	}
}

/* Sum the replicas' gradients onto replica 0 (serially, as reduce_add does). */
static void dp_reduce(struct dp *dp)
{
	struct dp_replica *r0 = &dp->rep[0];
	struct model *m0 = r0->m;
	const struct backend_ops *ops = m0->be->ops;
	void *c0 = m0->be->ctx;
	const size_t pbytes = m0->nparams * sizeof(float);
	struct phase t = phase_begin(dp, r0);

	for (int i = 1; i < dp->g; i++) {
		struct dp_replica *r = &dp->rep[i];

		if (r->n == 0)
			continue;
		if (dp->scratch != NULL) {
			ops->copy_peer(c0, dp->scratch, r->m->be->ctx, r->m->grads, m0->nparams);
			ops->add(c0, m0->grads, dp->scratch, m0->nparams);
		} else {
			ops->add(c0, m0->grads, r->m->grads, m0->nparams);
		}
		r->st->bytes_out += (double)pbytes;
		r0->st->bytes_in += (double)pbytes;
	}
	phase_end(dp, r0, DP_REDUCE, t);
}

/* One micro-batch b of optimizer step `step` (1-based); scale = 1 / micro-batches in it:
 * DataParallel's scatter, replicate, forward, gather, loss, backward and reduce. */
static enum status dp_micro_batch(struct dp *dp, struct loader *l, const struct batch *b, float scale,
				  int first_in_group, long step, struct diag *d)
{
	struct dp_replica *r0 = &dp->rep[0];
	enum status st;
	float dscale, gscale;
	long span;

	/* Each replica's thread records into its own buffer; this thread is replica 0's. */
	for (int i = 0; i < dp->g; i++)
		dp->rep[i].tb = dp->rep[i].m->trace = trace_buf_for(dp->trace, i, step);
	plan_chunks(dp, b->n);
	dp_scatter_inputs(dp, b);
	for (int i = 0; i < dp->g; i++)
		if (dp->rep[i].n > 0 || i == 0)
			loader_copied(l, b, dp->rep[i].m->be);
	span = trace_begin(r0->tb, TR_LOAD, -1);
	st = loader_prefetch(l, d); /* the next batch, while the devices work on this one */
	trace_end(r0->tb, span);
	if (st != ST_OK)
		return st;
	dispatch(dp, JOB_FORWARD);
	st = dp_status(dp, d);
	if (st != ST_OK)
		return st;
	trainer_mean_scales(dp->tc, scale, &dscale, &gscale);
	dp_gather_loss(dp, b->n, scale, dscale, first_in_group);
	dp_scatter_grad(dp);
	r0->accumulate = !first_in_group;
	for (int i = 0; i < dp->g; i++)
		dp->rep[i].gscale = gscale;
	for (int i = 0; i < dp->g; i++) /* each replica's share of the products */
		dp->rep[i].st->flops += model_flops(dp->rep[i].m, dp->rep[i].n);
	dispatch(dp, JOB_BACKWARD);
	st = dp_status(dp, d);
	if (st != ST_OK)
		return st;
	dp_reduce(dp);
	return dp_status(dp, d);
}

static void dp_free(struct dp *dp)
{
	struct backend *be = dp->rep[0].m ? dp->rep[0].m->be : NULL;

	if (dp->rep[0].m != NULL)
		dp->rep[0].m->trace = NULL; /* the caller's model outlives the trace */
	if (dp->g > 0) {
		int started = 0;

		for (int i = 1; i < dp->g; i++)
			started += dp->rep[i].started;
		if (started == dp->g - 1) {
			dispatch(dp, JOB_QUIT);
			for (int i = 1; i < dp->g; i++)
				pthread_join(dp->rep[i].thread, NULL);
		}
		pthread_barrier_destroy(&dp->go);
		pthread_mutex_destroy(&dp->mu);
		pthread_cond_destroy(&dp->cv);
	}
	for (int i = 1; i < TRAIN_MAX_REPLICAS; i++) {
		model_free(&dp->rep[i].own);
		backend_free(&dp->rep[i].own_be);
	}
	if (be != NULL) {
		be->ops->bind(be->ctx, NULL);
		be->ops->free(be->ctx, dp->outputs);
		be->ops->free(be->ctx, dp->targets);
		be->ops->free(be->ctx, dp->dout);
		be->ops->free(be->ctx, dp->scratch);
	}
}

/* Replica 0 is m0 on the caller's backend; replica i gets a backend instance on device i
 * (cfg->device + i) and a model for chunks of up to ceil(max_batch / g) rows. */
static enum status dp_init(struct dp *dp, int g, struct model *m0, int max_batch,
			   const struct backend_config *cfg, struct train_result *res,
			   struct diag *d)
{
	const struct backend_ops *ops = m0->be->ops;
	const int out = m0->widths[m0->nlayers];
	const size_t gathered = (size_t)max_batch * (size_t)out;
	int chunk = (max_batch + g - 1) / g;
	enum status st;

	memset(dp, 0, sizeof *dp);
	dp->rep[0].m = m0;
	dp->timed_sync = !ops->host_memory && ops->timer_mark == NULL;
	for (int i = 0; i < g; i++) {
		dp->rep[i].dp = dp;
		dp->rep[i].id = i;
		dp->rep[i].st = &res->rep[i];
		snprintf(dp->rep[i].waiting[WAIT_FORWARD], sizeof dp->rep[i].waiting[0], "replica %d's forward pass", i);
		snprintf(dp->rep[i].waiting[WAIT_BACKWARD], sizeof dp->rep[i].waiting[0], "replica %d's backward pass", i);
		snprintf(dp->rep[i].waiting[WAIT_DEVICE], sizeof dp->rep[i].waiting[0], "replica %d's device work", i);
	}
	dp->outputs = ops->alloc(m0->be->ctx, gathered);
	dp->targets = ops->alloc(m0->be->ctx, gathered);
	dp->dout = ops->alloc(m0->be->ctx, gathered);
	if (!ops->host_memory)
		dp->scratch = ops->alloc(m0->be->ctx, m0->nparams);
	if (!dp->outputs || !dp->targets || !dp->dout || (!ops->host_memory && !dp->scratch)) {
		dp_free(dp);
		return diag_set(d, ST_RUNTIME, "dp: out of %s memory for the gathered batch", ops->name);
	}
	res->rep[0].state_bytes = m0->bytes + (3 * gathered + (dp->scratch ? m0->nparams : 0)) * sizeof(float);
	for (int i = 1; i < g; i++) {
		struct backend_config c = *cfg;

		c.device = cfg->device + i;
		st = backend_init(&dp->rep[i].own_be, ops, &c, d);
		if (st == ST_OK)
			st = model_init(&dp->rep[i].own, &dp->rep[i].own_be, m0->widths, m0->nlayers,
					chunk, d);
		if (st == ST_OK)
			model_freeze(&dp->rep[i].own, m0->frozen);
		if (st != ST_OK) {
			dp_free(dp);
			return st;
		}
		dp->rep[i].m = &dp->rep[i].own;
		res->rep[i].state_bytes = dp->rep[i].own.bytes;
	}
	st = ops->bind(m0->be->ctx, d); /* this thread drives replica 0 */
	if (st != ST_OK) {
		dp_free(dp);
		return st;
	}
	dp->g = g;
	pthread_barrier_init(&dp->go, NULL, (unsigned)g);
	pthread_mutex_init(&dp->mu, NULL);
	pthread_cond_init(&dp->cv, NULL);
	for (int i = 1; i < g; i++) {
		if (pthread_create(&dp->rep[i].thread, NULL, worker_main, &dp->rep[i]) != 0) {
			diag_set(d, ST_RUNTIME, "dp: cannot start worker thread %d", i);
			/* Workers already started are stuck at the barrier: they cannot be released
			 * without the full count, so the run ends here with the process. */
			return ST_RUNTIME;
		}
		dp->rep[i].started = 1;
	}
	return ST_OK;
}

/* trainer_after_step's eval: replica 0 alone runs the whole validation set (forward is
 * the same on every replica). */
static enum status dp_eval(void *arg, long step, long epoch)
{
	struct dp *dp = arg;
	double loss = 0.0, acc = 0.0;
	long span = trace_begin(dp->rep[0].tb, TR_VALIDATION, -1);
	enum status st;

	st = trainer_evaluate(dp->tc, dp->rep[0].m, dp->ctl->val, 0, 1, NULL, dp->w, NULL, &loss, &acc, dp->d);
	trace_end(dp->rep[0].tb, span);
	if (st != ST_OK)
		return st;
	report_eval(dp->r, step, epoch + 1, loss, acc, dp->ctl->val->n);
	return dp->ctl->evaluated ? dp->ctl->evaluated(dp->ctl->arg, step, epoch, loss, dp->d) : ST_OK;
}

/* Peak device memory each replica held, where the backend can tell. */
static void dp_memory(struct dp *dp, struct train_result *res)
{
	for (int i = 0; i < dp->g; i++) {
		struct backend *be = dp->rep[i].m->be;
		size_t used = be->ops->mem_used(be->ctx); /* a GPU's peak; 0 on the CPU */

		if (used > 0)
			res->rep[i].state_bytes = used;
		res->rep[i].dev_peak_bytes = used;
	}
}

/* The optimizer step on replica 0 after a step's last micro-batch, then its loss read and
 * the work after a step (progress, evaluation, checkpoints, Prometheus). */
static enum status dp_step(struct dp *dp, struct optimizer *opt, const struct train_loop *loop, long *step,
			   const struct batch *b, double consumed)
{
	struct model *m0 = dp->rep[0].m;
	const struct train_ctl *ctl = dp->ctl;
	float loss[2] = {0.0f, 0.0f};
	struct phase t = phase_begin(dp, &dp->rep[0]);
	double lr;
	enum status st;

	(void)trainer_optimizer_step(dp->tc, opt, *step, loop->total, NULL, &lr, dp->d); /* unsharded: no communication, cannot fail */
	phase_end(dp, &dp->rep[0], DP_STEP, t);
	/* Every replica's device must be sound before this step counts (a checkpoint); this
	 * also reads the step's phase times. */
	st = dp_sync_all(dp, dp->d);
	if (st == ST_OK)
		st = m0->be->ops->to_host(m0->be->ctx, loss, m0->grads + m0->nparams + MODEL_SLOT_LOSS, 2, dp->d);
	if (st != ST_OK)
		return st;
	st = trainer_after_step(loop, step, &(struct step_end){b, loss[0], loss[1], lr, consumed, signals_pending() != 0},
				dp->d);
	if (st == ST_OK && ctl->prom != NULL && prometheus_due(ctl->prom, clock_now())) {
		double el = clock_now() - loop->clk->t0;

		trainer_prometheus(ctl, dp->r, loop->res, *step, loop->total, loss[0], el > 0 ? consumed / el : 0.0,
				   0.0, -1, dp->g);
	}
	return st;
}

enum status trainer_dp(const struct train_config *tc, int replicas, struct world *w, struct model *m0,
		       struct optimizer *opt, const struct backend_config *cfg,
		       const struct dataset *ds, const struct train_ctl *ctl, struct report *r,
		       struct train_result *res, struct diag *d)
{
	const long global = tc->batch_size * replicas; /* samples per micro-batch */
	struct loader L;
	struct batch b;
	struct dp dp;
	long steps_per_epoch, total, step = ctl->start_step;
	struct step_clock clk = {0};
	struct train_loop loop;
	double consumed = 0.0;
	struct loader_config lcfg;
	enum status st;

	memset(res, 0, sizeof *res);
	res->nreplicas = replicas;
	/* One process: the sampler sees one replica; --drop-last drops the short last batch. */
	lcfg = trainer_run_loader_config(tc, 1, replicas, 0, 0);
	st = loader_init(&L, ds, &lcfg, m0->be, d);
	if (st != ST_OK) {
		if (st == ST_USAGE)
			diag_append(d, " (--batch-size x --replicas)");
		return st;
	}
	loader_seek(&L, ctl->start_epoch, ctl->start_mb);
	st = dp_init(&dp, replicas, m0, (int)global, cfg, res, d);
	if (st != ST_OK) {
		loader_free(&L);
		return st;
	}
	dp.tc = tc;
	dp.ctl = ctl;
	dp.r = r;
	dp.d = d;
	dp.w = w;
	dp.ydim = ds->out;
	dp.trace = ctl->trace;
	steps_per_epoch = trainer_steps_per_epoch(L.nmicro, tc->grad_accum);
	total = trainer_total_steps(ctl, L.nmicro, tc->grad_accum, tc->epochs, tc->max_steps);
	res->total = total;
	loop = (struct train_loop){ctl, tc, res, r, &clk, total, L.nmicro, dp_eval, &dp, NULL, ds, NULL, NULL};
	report_training_starts(r); /* nothing refuses the run now: the metrics stream opens */
	report_note(r, "dp: %d replicas on worker threads, %ld samples per step split in chunks of %ld, %ld steps per epoch, %ld steps in all",
		    replicas, global, (global + replicas - 1) / replicas, steps_per_epoch, total);

	clk.t0 = clk.t_last = clock_now();
	while (step < total && loader_next(&L, &b)) {
		long gi, group = trainer_group(b.mb, L.nmicro, tc->grad_accum, &gi);

		res->epochs = b.epoch + 1;
		w->step = step + 1; /* the watchdog names it */
		st = dp_micro_batch(&dp, &L, &b, 1.0f / (float)group, gi == 0, step + 1, d);
		if (st != ST_OK)
			break;
		consumed += b.n;
		if (gi != group - 1)
			continue;
		st = dp_step(&dp, opt, &loop, &step, &b, consumed);
		if (st != ST_OK)
			break;
	}
	if (st == ST_OK)
		st = dp_sync_all(&dp, d);
	res->steps = step;
	res->seconds = clock_now() - clk.t0;
	res->samples = consumed;
	dp_memory(&dp, res);
	for (int i = 0; i < res->nreplicas; i++)
		res->rep[i].data_wait_s = L.waited_s; /* the replicas wait for one loader together */
	loader_free(&L); /* first: it waits for the replicas' copies from its buffers */
	dp_free(&dp);
	return st;
}
