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
 * Every replica's time per phase, the bytes it moved and the memory it holds
 * are counted, so the report shows where DP spends its time (the serial
 * gather, loss and reduce on replica 0, and the per-step replication).
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sampler.h"
#include "trainer.h"

enum dp_job { JOB_FORWARD, JOB_BACKWARD, JOB_QUIT };

struct dp;

struct dp_replica {
	struct dp *dp;
	int id;
	struct model own;     /* replicas 1..G-1 */
	struct model *m;      /* &own, or the caller's model for replica 0 */
	pthread_t thread;
	int started;
	int n;                /* rows of this micro-batch's chunk; 0 = sits out */
	size_t row0;          /* first row of the chunk in the batch */
	int accumulate;       /* backward adds to the gradients (replica 0 inside a group) */
	struct replica_stats *st;
};

struct dp {
	int g;
	struct dp_replica rep[OPT_MAX_REPLICAS];
	pthread_barrier_t go, done;
	enum dp_job job;
	float *outputs;       /* replica 0: (batch, out) gathered outputs */
	float *targets;       /* replica 0: (batch, out) */
	float *dout;          /* replica 0: (batch, out) gradient of the loss wrt outputs */
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The parallel part of a job, run by replica r's thread. */
static void run_job(struct dp_replica *r, enum dp_job job)
{
	struct dp *dp = r->dp;
	struct model *m0 = dp->rep[0].m;
	const struct backend_ops *ops = r->m->be->ops;
	double t;

	if (r->n == 0)
		return;
	if (job == JOB_FORWARD) {
		if (r->id > 0) {
			t = now_s();
			ops->copy(r->m->be->ctx, r->m->params, m0->params, m0->nparams);
			r->st->seconds[DP_REPLICATE] += now_s() - t;
			r->st->bytes_in += (double)m0->nparams * sizeof(float);
		}
		t = now_s();
		model_forward(r->m, r->n);
		r->st->seconds[DP_FORWARD] += now_s() - t;
	} else if (job == JOB_BACKWARD) {
		t = now_s();
		model_backward(r->m, r->n, r->accumulate, NULL, NULL);
		r->st->seconds[DP_BACKWARD] += now_s() - t;
	}
}

static void *worker_main(void *arg)
{
	struct dp_replica *r = arg;
	struct dp *dp = r->dp;

	for (;;) {
		enum dp_job job;

		pthread_barrier_wait(&dp->go);
		job = dp->job;
		if (job == JOB_QUIT)
			break;
		run_job(r, job);
		pthread_barrier_wait(&dp->done);
	}
	return NULL;
}

/* Run a job on every replica: the workers on their threads, replica 0 here. */
static void dispatch(struct dp *dp, enum dp_job job)
{
	dp->job = job;
	pthread_barrier_wait(&dp->go);
	if (job == JOB_QUIT)
		return;
	run_job(&dp->rep[0], job);
	pthread_barrier_wait(&dp->done);
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

/* One micro-batch: n rows in hx/hy; scale = 1 / micro-batches in this step. */
static void dp_micro_batch(struct dp *dp, const float *hx, const float *hy, int n, float scale,
			   int first_in_group)
{
	struct dp_replica *r0 = &dp->rep[0];
	struct model *m0 = r0->m;
	const struct backend_ops *ops = m0->be->ops;
	void *c0 = m0->be->ctx;
	const int in = m0->widths[0], out = m0->widths[m0->nlayers], L = m0->nlayers;
	const size_t pbytes = m0->nparams * sizeof(float);
	double t;

	plan_chunks(dp, n);
	/* Scatter the inputs (and the targets to replica 0, where the loss is computed). */
	for (int i = 0; i < dp->g; i++) {
		struct dp_replica *r = &dp->rep[i];

		if (r->n == 0)
			continue;
		t = now_s();
		r->m->be->ops->to_device(r->m->be->ctx, r->m->act[0], hx + r->row0 * in,
					 (size_t)r->n * in);
		r->st->seconds[DP_SCATTER] += now_s() - t;
		r->st->bytes_in += (double)r->n * in * sizeof(float);
		if (i > 0)
			r0->st->bytes_out += (double)pbytes; /* replica 0's weights, replicated */
	}
	t = now_s();
	ops->to_device(c0, dp->targets, hy, (size_t)n * out);
	r0->st->seconds[DP_SCATTER] += now_s() - t;
	r0->st->bytes_in += (double)n * out * sizeof(float);

	dispatch(dp, JOB_FORWARD);

	/* Gather the outputs onto replica 0. */
	t = now_s();
	for (int i = 0; i < dp->g; i++) {
		struct dp_replica *r = &dp->rep[i];

		if (r->n == 0)
			continue;
		ops->copy(c0, dp->outputs + r->row0 * out, r->m->act[L], (size_t)r->n * out);
		if (i > 0) {
			r->st->bytes_out += (double)r->n * out * sizeof(float);
			r0->st->bytes_in += (double)r->n * out * sizeof(float);
		}
	}
	r0->st->seconds[DP_GATHER] += now_s() - t;

	/* The loss over the whole batch, on replica 0. */
	t = now_s();
	ops->mse(c0, dp->dout, m0->grads + m0->nparams + MODEL_SLOT_LOSS, dp->outputs, dp->targets,
		 n, out, scale, !first_in_group);
	r0->st->seconds[DP_LOSS] += now_s() - t;

	/* Scatter the output gradient back with the same chunks. */
	for (int i = 0; i < dp->g; i++) {
		struct dp_replica *r = &dp->rep[i];

		if (r->n == 0)
			continue;
		t = now_s();
		r->m->be->ops->copy(r->m->be->ctx, r->m->dbuf[0], dp->dout + r->row0 * out,
				    (size_t)r->n * out);
		r->st->seconds[DP_SCATTER] += now_s() - t;
		if (i > 0) {
			r->st->bytes_in += (double)r->n * out * sizeof(float);
			r0->st->bytes_out += (double)r->n * out * sizeof(float);
		}
	}
	r0->accumulate = !first_in_group;
	dispatch(dp, JOB_BACKWARD);

	/* Sum the replicas' gradients onto replica 0 (serially, as reduce_add does). */
	t = now_s();
	for (int i = 1; i < dp->g; i++) {
		struct dp_replica *r = &dp->rep[i];

		if (r->n == 0)
			continue;
		ops->add(c0, m0->grads, r->m->grads, m0->nparams);
		r->st->bytes_out += (double)pbytes;
		r0->st->bytes_in += (double)pbytes;
	}
	r0->st->seconds[DP_REDUCE] += now_s() - t;
}

static void dp_free(struct dp *dp)
{
	struct backend *be = dp->rep[0].m ? dp->rep[0].m->be : NULL;

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
		pthread_barrier_destroy(&dp->done);
	}
	for (int i = 1; i < dp->g; i++)
		model_free(&dp->rep[i].own);
	if (be != NULL) {
		be->ops->free(be->ctx, dp->outputs);
		be->ops->free(be->ctx, dp->targets);
		be->ops->free(be->ctx, dp->dout);
	}
}

static enum status dp_init(struct dp *dp, int g, struct model *m0, int max_batch,
			   struct train_result *res, struct diag *d)
{
	const struct backend_ops *ops = m0->be->ops;
	const int out = m0->widths[m0->nlayers];
	const size_t gathered = (size_t)max_batch * (size_t)out;
	int chunk = (max_batch + g - 1) / g;

	memset(dp, 0, sizeof *dp);
	dp->rep[0].m = m0;
	for (int i = 0; i < g; i++) {
		dp->rep[i].dp = dp;
		dp->rep[i].id = i;
		dp->rep[i].st = &res->rep[i];
	}
	dp->outputs = ops->alloc(m0->be->ctx, gathered);
	dp->targets = ops->alloc(m0->be->ctx, gathered);
	dp->dout = ops->alloc(m0->be->ctx, gathered);
	if (dp->outputs == NULL || dp->targets == NULL || dp->dout == NULL) {
		dp_free(dp);
		return diag_set(d, ST_RUNTIME, "dp: out of memory for the gathered batch");
	}
	res->rep[0].state_bytes = m0->bytes + 3 * gathered * sizeof(float);
	for (int i = 1; i < g; i++) {
		enum status st = model_init(&dp->rep[i].own, m0->be, m0->widths, m0->nlayers, chunk, 0, d);

		if (st != ST_OK) {
			dp->g = 0;
			dp_free(dp);
			return st;
		}
		dp->rep[i].m = &dp->rep[i].own;
		res->rep[i].state_bytes = dp->rep[i].own.bytes;
	}
	dp->g = g;
	pthread_barrier_init(&dp->go, NULL, (unsigned)g);
	pthread_barrier_init(&dp->done, NULL, (unsigned)g);
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

enum status trainer_dp(const struct options *o, int replicas, struct model *m0,
		       const struct dataset *ds, struct report *r, struct train_result *res,
		       struct diag *d)
{
	const struct backend_ops *ops = m0->be->ops;
	void *c0 = m0->be->ctx;
	const int in = m0->widths[0], out = m0->widths[m0->nlayers];
	const long global = o->batch_size * replicas; /* samples per micro-batch */
	struct sgd_hparams h = {(float)o->lr, (float)o->momentum, (float)o->weight_decay};
	struct sampler s;
	struct dp dp;
	float *hx = NULL, *hy = NULL, loss = 0.0f;
	long nmicro, steps_per_epoch, total, step = 0;
	double t0, t_last_log, consumed = 0.0, consumed_at_log = 0.0, loss_sum = 0.0;
	long loss_count = 0;
	enum status st;

	memset(res, 0, sizeof *res);
	res->nreplicas = replicas;
	st = sampler_init(&s, ds->n, 1, 0, o->shuffle, 0, o->seed, d);
	if (st != ST_OK)
		return st;
	nmicro = (long)(s.num_samples / (size_t)global);
	if (!o->drop_last && s.num_samples % (size_t)global != 0)
		nmicro++;
	if (nmicro == 0) {
		sampler_free(&s);
		return diag_set(d, ST_USAGE, "--drop-last: %zu samples make no full batch of %ld (--batch-size x --replicas)",
				s.num_samples, global);
	}
	st = dp_init(&dp, replicas, m0, (int)global, res, d);
	if (st != ST_OK) {
		sampler_free(&s);
		return st;
	}
	hx = malloc((size_t)global * (size_t)in * sizeof *hx);
	hy = malloc((size_t)global * (size_t)out * sizeof *hy);
	if (hx == NULL || hy == NULL) {
		st = diag_set(d, ST_RUNTIME, "trainer: out of memory for the batch");
		goto out;
	}
	steps_per_epoch = (nmicro + o->grad_accum - 1) / o->grad_accum;
	total = steps_per_epoch * o->epochs;
	if (o->max_steps > 0 && o->max_steps < total)
		total = o->max_steps;
	report_note(r, "dp: %d replicas on worker threads, %ld samples per step split in chunks of %ld, %ld steps per epoch, %ld steps in all",
		    replicas, global, (global + replicas - 1) / replicas, steps_per_epoch, total);

	t0 = t_last_log = now_s();
	for (long epoch = 0; epoch < o->epochs && step < total; epoch++) {
		sampler_set_epoch(&s, (uint64_t)epoch);
		res->epochs = epoch + 1;
		for (long mb = 0; mb < nmicro && step < total; mb++) {
			long gi = mb % o->grad_accum;
			long group = nmicro - (mb - gi) < o->grad_accum ? nmicro - (mb - gi) : o->grad_accum;
			size_t first = (size_t)mb * (size_t)global;
			int n = (int)(s.num_samples - first < (size_t)global ? s.num_samples - first
									  : (size_t)global);
			double t;

			data_fill(ds, s.indices + first, (size_t)n, hx, hy);
			dp_micro_batch(&dp, hx, hy, n, 1.0f / (float)group, gi == 0);
			consumed += n;
			if (gi != group - 1)
				continue;
			ops->to_host(c0, &loss, m0->grads + m0->nparams + MODEL_SLOT_LOSS, 1);
			if (!isfinite(loss)) {
				st = diag_set(d, ST_RUNTIME,
					      "loss is %f at step %ld (epoch %ld): training diverged; lower --lr",
					      (double)loss, step + 1, epoch + 1);
				goto out;
			}
			t = now_s();
			ops->sgd(c0, m0->params, m0->grads, m0->mom, m0->nparams, &h);
			res->rep[0].seconds[DP_STEP] += now_s() - t;
			step++;
			if (step == 1)
				res->first_loss = loss;
			res->final_loss = loss;
			loss_sum += loss;
			loss_count++;
			if ((o->log_every > 0 && step % o->log_every == 0) || step == total) {
				double tn = now_s();

				report_step(r, epoch + 1, step, total, loss_sum / (double)loss_count,
					    (consumed - consumed_at_log) / (tn - t_last_log), tn - t0);
				t_last_log = tn;
				consumed_at_log = consumed;
				loss_sum = 0.0;
				loss_count = 0;
			}
		}
	}
	st = ops->sync(c0, d);
	res->steps = step;
	res->seconds = now_s() - t0;
	res->samples = consumed;
out:
	free(hx);
	free(hy);
	dp_free(&dp);
	sampler_free(&s);
	return st;
}
