/*
 * trainer_ddp.c - DistributedDataParallel: one replica per rank, gradients
 * all-reduced bucket by bucket during backward.
 *
 * Averaging: the MSE gradient seed is scaled by 1 / (world * micro-batches in
 * this step), so the all-reduced sum is already the mean over ranks and
 * micro-batches, with no extra pass over the gradients. The loss rides in the
 * gradient buffer's loss slot, so the mean loss over ranks costs no extra
 * collective.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampler.h"
#include "trainer.h"

struct ddp {
	const struct options *o;
	struct model *m;
	struct comm *c;
	struct bucket buckets[OPT_MAX_LAYERS];
	int nbuckets;
	int closes[OPT_MAX_LAYERS]; /* bucket completed by layer l's backward, or -1 */
	enum status hook_st;
	struct diag *d;
};

long trainer_steps_per_epoch(size_t per_rank, long batch, long grad_accum)
{
	long micro = (long)((per_rank + (size_t)batch - 1) / (size_t)batch);

	return (micro + grad_accum - 1) / grad_accum;
}

/* Called by backward after each layer: start the bucket it completes, or progress MPI. */
static void ddp_layer_done(void *arg, int layer)
{
	struct ddp *t = arg;
	int b = t->closes[layer];

	if (t->hook_st != ST_OK)
		return;
	if (b >= 0)
		t->hook_st = t->c->ops->allreduce_start(t->c->ctx, t->m->grads + t->buckets[b].off,
							t->buckets[b].len, t->d);
	else
		t->c->ops->progress(t->c->ctx);
}

static enum status start_all_buckets(struct ddp *t)
{
	enum status st = ST_OK;

	for (int b = 0; b < t->nbuckets && st == ST_OK; b++)
		st = t->c->ops->allreduce_start(t->c->ctx, t->m->grads + t->buckets[b].off,
						t->buckets[b].len, t->d);
	return st;
}

enum status trainer_ddp(const struct options *o, struct world *w, struct model *m,
			struct comm *c, const struct dataset *ds, struct report *r,
			struct train_result *res, struct diag *d)
{
	const struct backend_ops *ops = m->be->ops;
	void *bctx = m->be->ctx;
	const int in = m->widths[0], out = m->widths[m->nlayers];
	const size_t cap = (size_t)(o->bucket_mb * 1048576.0 / sizeof(float));
	const size_t first_cap = cap < 262144 ? cap : 262144; /* PyTorch: first bucket 1 MiB */
	struct sgd_hparams h = {(float)o->lr, (float)o->momentum, (float)o->weight_decay};
	struct ddp t = {.o = o, .m = m, .c = c, .d = d};
	struct sampler s;
	float *hx, *hy, loss = 0.0f;
	long steps_per_epoch, total, step = 0;
	double t0, t_last_log, wait = 0.0, consumed = 0.0, consumed_at_log = 0.0;
	double loss_sum = 0.0; /* since the last progress line */
	long loss_count = 0;
	enum status st;

	memset(res, 0, sizeof *res);
	st = sampler_init(&s, ds->n, w->size, w->rank, o->shuffle, o->drop_last, o->seed, d);
	if (st != ST_OK)
		return st;
	hx = malloc((size_t)o->batch_size * (size_t)in * sizeof *hx);
	hy = malloc((size_t)o->batch_size * (size_t)out * sizeof *hy);
	if (hx == NULL || hy == NULL) {
		st = diag_set(d, ST_RUNTIME, "trainer: out of memory for the batch");
		goto out;
	}
	t.nbuckets = model_plan_buckets(m, cap ? cap : 1, first_cap ? first_cap : 1, t.buckets);
	for (int l = 0; l < m->nlayers; l++)
		t.closes[l] = -1;
	for (int b = 0; b < t.nbuckets; b++)
		t.closes[t.buckets[b].lo] = b;

	steps_per_epoch = trainer_steps_per_epoch(s.num_samples, o->batch_size, o->grad_accum);
	total = steps_per_epoch * o->epochs;
	if (o->max_steps > 0 && o->max_steps < total)
		total = o->max_steps;
	report_note(r, "buckets: %d (cap %.3g MiB), %ld steps per epoch, %ld steps in all",
		    t.nbuckets, o->bucket_mb, steps_per_epoch, total);

	t0 = t_last_log = world_time();
	for (long epoch = 0; epoch < o->epochs && step < total; epoch++) {
		long nmicro = (long)((s.num_samples + (size_t)o->batch_size - 1) / (size_t)o->batch_size);

		sampler_set_epoch(&s, (uint64_t)epoch);
		res->epochs = epoch + 1;
		for (long mb = 0; mb < nmicro && step < total; mb++) {
			long gi = mb % o->grad_accum;
			long group = nmicro - (mb - gi) < o->grad_accum ? nmicro - (mb - gi) : o->grad_accum;
			size_t first = (size_t)mb * (size_t)o->batch_size;
			int n = (int)((s.num_samples - first) < (size_t)o->batch_size ?
				      s.num_samples - first : (size_t)o->batch_size);
			int sync = gi == group - 1;
			float scale = 1.0f / ((float)w->size * (float)group);

			data_fill(ds, s.indices + first, (size_t)n, hx, hy);
			ops->to_device(bctx, m->act[0], hx, (size_t)n * in);
			ops->to_device(bctx, m->target, hy, (size_t)n * out);
			model_forward(m, n);
			ops->mse(bctx, m->dbuf[0], m->grads + m->nparams + MODEL_SLOT_LOSS,
				 m->act[m->nlayers], m->target, n, out, scale, gi > 0);
			consumed += n;
			t.hook_st = ST_OK;
			model_backward(m, n, gi > 0, sync && o->overlap ? ddp_layer_done : NULL, &t);
			if (!sync)
				continue;
			st = t.hook_st;
			if (st == ST_OK && !o->overlap)
				st = start_all_buckets(&t);
			if (st == ST_OK) {
				double tw = world_time();

				st = c->ops->wait_all(c->ctx, d);
				wait += world_time() - tw;
			}
			if (st != ST_OK)
				goto out;
			ops->to_host(bctx, &loss, m->grads + m->nparams + MODEL_SLOT_LOSS, 1);
			if (!isfinite(loss)) {
				st = diag_set(d, ST_RUNTIME,
					      "loss is %f at step %ld (epoch %ld): training diverged; lower --lr",
					      (double)loss, step + 1, epoch + 1);
				goto out;
			}
			ops->sgd(bctx, m->params, m->grads, m->mom, m->nparams, &h);
			step++;
			if (step == 1)
				res->first_loss = loss;
			res->final_loss = loss;
			loss_sum += loss;
			loss_count++;
			if ((o->log_every > 0 && step % o->log_every == 0) || step == total) {
				double now = world_time();
				double sps = (consumed - consumed_at_log) * w->size / (now - t_last_log);

				report_step(r, epoch + 1, step, total, loss_sum / (double)loss_count, sps, now - t0);
				t_last_log = now;
				consumed_at_log = consumed;
				loss_sum = 0.0;
				loss_count = 0;
			}
		}
	}
	st = ops->sync(bctx, d);
	res->steps = step;
	res->seconds = world_time() - t0;
	res->wait_s = wait;
	res->samples = consumed * w->size;
	res->nreplicas = 1;
	res->rep[0].wait_s = wait;
	res->rep[0].compute_s = res->seconds - wait;
	res->rep[0].bytes_in = res->rep[0].bytes_out =
		(double)step * (double)(m->nparams + MODEL_SLOTS) * sizeof(float);
	res->rep[0].state_bytes = m->bytes;
out:
	free(hx);
	free(hy);
	sampler_free(&s);
	return st;
}
