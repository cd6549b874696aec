/* trainer.c - what both training loops share: the loss, the optimizer step, and what
 * comes after a step (progress, checkpoints, stops). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/clock.h"
#include "model/schedule.h"
#include "core/signals.h" /* signals_stop_saved */
#include "train/trainer.h"

/* Is evaluation due after step `step` (counted from 1), whose last micro-batch was b? */
static int eval_due(const struct train_loop *lp, long step, const struct batch *b)
{
	const struct train_config *tc = lp->tc;

	return lp->eval != NULL && lp->ctl->val != NULL &&
	       ((tc->eval_every > 0 && step % tc->eval_every == 0) || b->mb + 1 >= lp->nmicro || step == lp->total);
}

/* Is a checkpoint due after step `step` (counted from 1)? */
static int checkpoint_due(const struct train_loop *lp, long step, int stop)
{
	const struct train_ctl *ctl = lp->ctl;

	return ctl->checkpoint != NULL && ((ctl->every > 0 && step % ctl->every == 0) || step == lp->total || stop);
}

/* Is a replica check due after step `step`? Every check_replicas steps, and before
 * anything writes the weights (a checkpoint, --save-best after an evaluation, --save after
 * the last step), so that no file is ever written from replicas that differ. */
static int check_due(const struct train_loop *lp, long step, const struct batch *b, int stop)
{
	const long every = lp->tc->check_replicas;

	return lp->check != NULL && every > 0 &&
	       (step % every == 0 || step == lp->total || checkpoint_due(lp, step, stop) ||
		(lp->ctl->evaluated != NULL && eval_due(lp, step, b)));
}

int trainer_step_reads_weights(const struct train_loop *lp, long step, const struct batch *b)
{
	return step == lp->total || eval_due(lp, step, b) || checkpoint_due(lp, step, 0) ||
	       check_due(lp, step, b, 0);
}

/* A loss that is not finite on every rank (it is their mean, or their sum): was a file of ds
 * rewritten in place with a non-finite number (or a label out of range) after the scan at
 * start-up (its rows are read from its map)? Each rank scans its share of ds again -- rows
 * [rank n / world, (rank + 1) n / world), only on this path, so the loader's copies cost
 * nothing more -- and the lowest rank that finds one tells every rank of w (NULL: this one
 * alone): ST_RUNTIME naming the file, row and column, and *d has it, with `became` (what
 * the loss became) said after it; ST_OK if none did (a divergence). Collective over w. */
static enum status data_changed(const struct dataset *ds, int rank, int world, struct world *w,
				const char *became, struct diag *d)
{
	struct diag met = {0};

	if (ds != NULL && data_check_finite_share(ds, rank, world, &met) != ST_OK)
		diag_append(&met, " (the file changed after ddptrain checked it at start-up; %s)", became);
	if (w != NULL)
		world_share_failure(w, &met);
	if (met.st == ST_OK)
		return ST_OK;
	*d = met;
	return met.st;
}

/* The training loss is not finite: a training file changed under the run, or a divergence. */
static enum status nonfinite_input(const struct train_loop *lp, long step, float loss, struct diag *d)
{
	char became[96];

	snprintf(became, sizeof became, "the loss became %f at step %ld", (double)loss, step);
	return data_changed(lp->ds, lp->w != NULL ? lp->w->rank : 0, lp->w != NULL ? lp->w->size : 1, lp->w, became,
			    d);
}

enum status trainer_after_step(const struct train_loop *lp, long *step, const struct step_end *e,
			       struct diag *d)
{
	const struct train_ctl *ctl = lp->ctl;
	const struct train_config *tc = lp->tc;
	const struct batch *b = e->b;
	struct step_clock *clk = lp->clk;
	const long total = lp->total, nmicro = lp->nmicro;
	const float loss = e->loss;
	long epoch = b->epoch, next = b->mb + 1;
	int logged;
	enum status st;

	if (!isfinite(loss) && (st = nonfinite_input(lp, *step + 1, loss, d)) != ST_OK)
		return st;
	if (!isfinite(loss) && trainer_fp16_overflow(tc) != NULL)
		return diag_set(d, ST_RUNTIME, "loss is %f at step %ld (epoch %ld) %s",
				(double)loss, *step + 1, b->epoch + 1, trainer_fp16_overflow(tc));
	if (!isfinite(loss))
		return diag_set(d, ST_RUNTIME, "loss is %f at step %ld (epoch %ld): training diverged; lower --lr",
				(double)loss, *step + 1, b->epoch + 1);
	++*step;
	if (*step == ctl->start_step + 1)
		lp->res->first_loss = loss;
	lp->res->final_loss = loss;
	clk->loss_sum += loss;
	clk->acc_sum += e->acc;
	clk->loss_count++;
	/* A line every --log-every steps, and between them when one is due by time; only the
	 * former close the interval the means and the metrics record cover. */
	logged = (tc->log_every > 0 && *step % tc->log_every == 0) || *step == total;
	if (logged || report_due(lp->r)) {
		const double now = clock_now();

		report_step(lp->r, &(struct report_progress){
			.epoch = b->epoch + 1, .epochs = tc->epochs, .step = *step, .total = total,
			.loss = clk->loss_sum / (double)clk->loss_count,
			.acc = tc->loss.kind == LOSS_CROSS_ENTROPY ? clk->acc_sum / (double)clk->loss_count : NAN,
			.lr = e->lr, .samples_per_s = (e->consumed - clk->consumed_at_last) / (now - clk->t_last),
			.data_wait_s = (b->waited_s - clk->waited_at_last) / (double)clk->loss_count,
			.elapsed = now - clk->t0, .steps_here = *step - ctl->start_step}, logged);
		if (logged) {
			clk->t_last = now;
			clk->consumed_at_last = e->consumed;
			clk->waited_at_last = b->waited_s;
			clk->loss_sum = 0.0;
			clk->acc_sum = 0.0;
			clk->loss_count = 0;
		}
	}
	/* before the evaluation and the checkpoint: nothing is written from replicas that
	 * differ, and the last checkpoint written stays */
	if (check_due(lp, *step, b, e->stop)) {
		struct trace_buf *tb = trace_buf_for(ctl->trace, 0, *step);
		long span = trace_begin(tb, TR_CHECK, -1);

		st = lp->check(lp->eval_arg, *step);
		trace_end(tb, span);
		if (st != ST_OK)
			return st;
	}
	if (eval_due(lp, *step, b)) {
		st = lp->settle != NULL ? lp->settle(lp->eval_arg) : ST_OK;
		if (st == ST_OK)
			st = lp->eval(lp->eval_arg, *step, b->epoch);
		if (st != ST_OK)
			return st;
	}
	if (next >= nmicro) {
		epoch++;
		next = 0;
	}
	if (checkpoint_due(lp, *step, e->stop)) {
		struct trace_buf *tb = trace_buf_for(ctl->trace, 0, *step);
		long span;

		st = lp->settle != NULL ? lp->settle(lp->eval_arg) : ST_OK;
		if (st != ST_OK)
			return st;
		span = trace_begin(tb, TR_CHECKPOINT, -1);
		st = ctl->checkpoint(ctl->arg, *step, epoch, next, trainer_schedule_steps(tc, total), d);
		trace_end(tb, span);
		if (st != ST_OK)
			return st;
	}
	if (!e->stop)
		return ST_OK;
	trace_instant(trace_buf_for(ctl->trace, 0, *step), TR_STOP);
	if (ctl->checkpoint != NULL)
		signals_stop_saved();
	report_note(lp->r, "stopped by a signal after step %ld of %ld%s", *step, total,
		    ctl->checkpoint ? ": checkpoint written, continue with --resume"
				    : " (no --checkpoint: nothing was saved)");
	return ST_INTERRUPTED;
}

long trainer_group(long mb, long nmicro, long grad_accum, long *gi)
{
	long first = mb - mb % grad_accum;

	*gi = mb - first;
	return nmicro - first < grad_accum ? nmicro - first : grad_accum;
}

void trainer_bucket_caps(double bucket_mb, size_t *cap, size_t *first_cap)
{
	size_t c = (size_t)(bucket_mb * 1048576.0 / sizeof(float));

	*first_cap = c < 262144 ? c : 262144; /* PyTorch: first bucket 1 MiB */
	*first_cap = *first_cap ? *first_cap : 1;
	*cap = c ? c : 1;
}

long trainer_steps_per_epoch(long nmicro, long grad_accum)
{
	return (nmicro + grad_accum - 1) / grad_accum;
}

struct loader_config trainer_loader_config(const struct train_config *tc, int dp, int replicas, int rank)
{
	if (dp) /* one global order (world 1), batches of B*G; --drop-last drops the short one */
		return (struct loader_config){.world = 1, .rank = 0, .shuffle = tc->shuffle, .seed = tc->seed,
					      .batch = tc->batch_size * replicas, .drop_short = tc->drop_last,
					      .epochs = tc->epochs};
	return (struct loader_config){.world = replicas, .rank = rank, .shuffle = tc->shuffle,
				      .sampler_drop_last = tc->drop_last, .seed = tc->seed,
				      .batch = tc->batch_size, .epochs = tc->epochs};
}

struct loader_config trainer_run_loader_config(const struct train_config *tc, int dp, int replicas, int rank,
					       int node_ranks)
{
	struct loader_config c = trainer_loader_config(tc, dp, replicas, rank);

	if (!dp) /* the workers share the CPUs with the node's other ranks */
		c.node_ranks = node_ranks;
	return c;
}

long trainer_total_steps(const struct train_ctl *ctl, long nmicro, long grad_accum, long epochs,
			 long max_steps)
{
	long per_epoch = trainer_steps_per_epoch(nmicro, grad_accum);
	long epoch = ctl->start_epoch, mb = ctl->start_mb, total = ctl->start_step;

	if (mb >= nmicro) {
		epoch++;
		mb = 0;
	}
	if (epoch < epochs)
		total += (nmicro - mb + grad_accum - 1) / grad_accum + per_epoch * (epochs - epoch - 1);
	if (max_steps > 0 && max_steps < total)
		total = max_steps;
	return total;
}

const char *trainer_fp16_overflow(const struct train_config *tc)
{
	/* fp16 on the wire: a gradient beyond 65504 arrives as infinity and the next loss (or
	 * the weights) are not finite, whatever --lr is; bf16 keeps float32's range. */
	if (!tc->compress_fp16)
		return NULL;
	return "with --grad-compress=fp16: a gradient beyond fp16's range (65504) becomes infinite on the wire; use --grad-compress=bf16 (float32's range) or none, or scale the data or the loss down (lower --lr only if the run diverges without compression too)";
}

void trainer_mean_scales(const struct train_config *tc, float share, float *dscale, float *gscale)
{
	*dscale = tc->mean_after_backward ? 1.0f : share;
	*gscale = tc->mean_after_backward ? share : 1.0f;
}

long trainer_schedule_steps(const struct train_config *tc, long total)
{
	return tc->schedule_steps > 0 ? tc->schedule_steps : total;
}

int trainer_step_is_fixed(const struct train_config *tc, const struct optimizer *opt)
{
	/* AdamW's bias corrections and a scheduled lr are new scalars every step. */
	return opt->h.kind == OPTIM_SGD && tc->schedule == SCHED_CONSTANT && tc->warmup_steps == 0;
}

enum status trainer_optimizer_step(const struct train_config *tc, struct optimizer *opt, long step,
				   long total, struct comm *c, double *lr, struct diag *d)
{
	struct model *m = opt->m;
	const struct backend_ops *ops = m->be->ops;
	void *bc = m->be->ctx;
	const struct zero_piece *pc = opt->piece;
	enum status st = ST_OK;

	if (tc->clip_grad_norm > 0.0) {
		/* the sum of squares over the pieces (0 for none: a rank may own nothing) */
		if (opt->npieces == 0)
			ops->sumsq(bc, m->norm, m->norm, 0, 0);
		for (int r = 0; r < opt->npieces; r++)
			ops->sumsq(bc, m->norm, optimizer_grad(opt, r), pc[r].len, r > 0);
		/* ZeRO: each rank has its shard's; the global norm is their sum */
		if (opt->sharded && c != NULL) {
			st = comm_allreduce_start(c, m->norm, 1, COMM_LAST, d);
			if (st == ST_OK)
				st = comm_wait_all(c, d);
			if (st != ST_OK)
				return st;
		}
		for (int r = 0; r < opt->npieces; r++)
			ops->clip(bc, optimizer_grad(opt, r), pc[r].len, m->norm, (float)tc->clip_grad_norm);
	}
	*lr = optimizer_step(opt, schedule_multiplier(tc->schedule, step, tc->warmup_steps,
						      trainer_schedule_steps(tc, total)));
	return st;
}

enum status trainer_evaluate(const struct train_config *tc, struct model *m, const struct dataset *val,
			     int rank, int world, struct comm *c, struct world *w, const struct model_hooks *h,
			     double *loss, double *acc, struct diag *d)
{
	static const float zeros[3] = {0.0f, 0.0f, 0.0f}, failed[3] = {0.0f, 0.0f, 1.0f};
	const struct backend_ops *ops = m->be->ops;
	void *bc = m->be->ctx;
	const size_t lo = val->n * (size_t)rank / (size_t)world;
	const size_t hi = val->n * (size_t)(rank + 1) / (size_t)world;
	float *slots = m->slots + MODEL_SLOT_LOSS;
	float *hx = ops->host_alloc(bc, (size_t)m->max_batch * (size_t)val->in);
	float *hy = ops->host_alloc(bc, (size_t)m->max_batch * (size_t)val->out);
	float *res = ops->host_alloc(bc, 3); /* read behind the all-reduce: pinned (backend.h) */
	uint32_t *idx = malloc((size_t)m->max_batch * sizeof *idx);
	enum status st = ST_OK;

	/* slots: loss, accuracy, and (MODEL_SLOT_STOP's place) how many ranks failed, so that a
	 * rank failing here still meets the others in the all-reduce and all end at once. */
	ops->to_device(bc, slots, zeros, 3);
	if (hx == NULL || hy == NULL || res == NULL || idx == NULL)
		st = diag_set(d, ST_RUNTIME, "evaluation: out of host memory for batches of %d", m->max_batch);
	/* With the parameters sharded (ZeRO-3) every forward gathers each layer from every rank:
	 * all ranks run as many batches as the largest share needs, a rank past its own rows a
	 * row that counts for nothing (scale 0), and a rank that failed goes on forwarding
	 * (whatever its input) so that every gather is met; its failure travels in the slots. */
	const size_t share = m->psharded ? (val->n + (size_t)world - 1) / (size_t)world : hi - lo;
	const size_t batches = (share + (size_t)m->max_batch - 1) / (size_t)m->max_batch;

	for (size_t b = 0; b < batches && (st == ST_OK || m->psharded); b++) {
		const size_t r0 = lo + b * (size_t)m->max_batch;
		int n = r0 >= hi ? 0 : hi - r0 < (size_t)m->max_batch ? (int)(hi - r0) : m->max_batch;
		const float scale = (float)n / (float)val->n;
		enum status fst;

		n = n > 0 ? n : 1; /* past its rows: a row that counts for nothing, the set's first */
		if (st == ST_OK) {
			for (int i = 0; i < n; i++)
				idx[i] = r0 < hi ? (uint32_t)(r0 + (size_t)i) : 0;
			data_fill(val, idx, (size_t)n, hx, hy);
			ops->to_device(bc, m->act[0], hx, (size_t)n * (size_t)val->in);
			ops->to_device(bc, m->target, hy, (size_t)n * (size_t)val->out);
		}
		fst = model_forward(m, n, h);
		st = st != ST_OK ? st : fst;
		/* Each batch adds its share of the mean over all V rows. */
		if (st == ST_OK)
			loss_apply(&tc->loss, m->be, m->dbuf[0], slots, m->act[m->nlayers], m->target, n,
				   m->widths[m->nlayers], scale, 1.0f, 1);
		if (st == ST_OK)
			st = ops->sync(bc, d); /* hx and hy are refilled for the next batch */
		world_watch_progress(w); /* an evaluation longer than --timeout is no stall */
	}
	if (c != NULL) {
		enum status cst;
		struct diag cd = {0};

		if (st != ST_OK)
			ops->to_device(bc, slots, failed, 3);
		world_watch_begin(w, "the validation all-reduce");
		cst = comm_allreduce_start(c, slots, 3, COMM_LAST, &cd);
		if (cst == ST_OK)
			cst = comm_wait_all(c, &cd);
		world_watch_end(w);
		if (st == ST_OK && cst != ST_OK) {
			st = cst;
			*d = cd;
		}
	}
	if (st == ST_OK)
		st = ops->to_host(bc, res, slots, 3, d);
	if (st == ST_OK && res[2] != 0.0f)
		st = diag_set(d, ST_PEER, "the evaluation failed on another rank");
	if (st == ST_OK) {
		*loss = res[0];
		*acc = tc->loss.kind == LOSS_CROSS_ENTROPY ? res[1] : NAN;
	}
	/* the same on every rank (a sum over them): a validation file changed under the run is
	 * named, as a training file is; weights that diverged say so at the training loss */
	if (st == ST_OK && !isfinite(*loss)) {
		char became[64];

		snprintf(became, sizeof became, "the validation loss became %f", *loss);
		st = data_changed(val, rank, world, c != NULL ? w : NULL, became, d);
	}
	ops->host_free(bc, hx);
	ops->host_free(bc, hy);
	ops->host_free(bc, res);
	free(idx);
	return st;
}

void trainer_prometheus(const struct train_ctl *ctl, struct report *r, const struct train_result *res,
			long step, long total, double loss, double samples_per_s, double wait_share,
			int exit_code, int nranks)
{
	struct prom_sample ps = {0};
	struct diag d = {0}; /* its own: the run's diag keeps the run's failure */

	ps.step = step;
	ps.total = total;
	ps.loss = loss;
	ps.samples_per_s = samples_per_s;
	ps.wait_share = wait_share;
	ps.exit_code = exit_code;
	ps.nbuckets = res->nbuckets < PROM_MAX_BUCKETS ? res->nbuckets : PROM_MAX_BUCKETS;
	for (int b = 0; b < ps.nbuckets; b++) {
		const struct bucket_stats *x = &res->buckets[b];

		ps.bucket_bytes[b] = x->bytes;
		ps.bucket_busbw[b] = x->count > 0 && x->sum_s > 0 ?
			report_busbw(x->bytes * (double)x->count / x->sum_s, nranks) : 0.0;
	}
	if (prometheus_write(ctl->prom, &ps, clock_now(), &d) == ST_OK)
		report_output_ok(r, REPORT_PROMETHEUS);
	else
		report_output_failed(r, REPORT_PROMETHEUS, d.msg);
}
