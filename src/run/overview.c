/* overview.c - the report's text about the run: the header lines and the summary's figures. */
#include <stdio.h>

#include "config.h"          /* PACKAGE_VERSION */
#include "run/overview.h"

/* One "#" line per rank or dp replica: where it runs and on what. Collective. */
static void print_ranks(const struct overview *s)
{
	char device[160];
	char path[96];

	if (s->o->mode == MODE_DP) {
		for (int i = 0; i < s->pl->replicas; i++)
			if (s->pl->device == DEVICE_CUDA)
				report_note(s->r, "  replica %2d: thread %d, GPU %d", i, i, s->pl->gpu + i);
			else
				report_note(s->r, "  replica %2d: thread %d, cpu", i, i);
		return;
	}
	if (s->pl->device == DEVICE_CUDA)
		snprintf(device, sizeof device, "GPU %d of %d (%s)", s->pl->gpu, s->pl->gpu_count,
			 s->pl->gpu_name);
	else
		snprintf(device, sizeof device, "cpu");
	comm_describe(s->c, path, sizeof path);
	report_ranks(s->r, s->w, device, path);
}

void overview_header(const struct overview *s)
{
	const struct options *o = s->o;
	const int dp = o->mode == MODE_DP;
	const int reps = s->replicas;
	char widths[1024], opt[160], clip[64] = "off";

	options_format_widths(o, widths, sizeof widths);
	if (dp)
		report_note(s->r, "ddptrain %s: mode dp, 1 process, %d replicas on worker threads, device %s",
			    PACKAGE_VERSION, s->pl->replicas, s->be->ops->name);
	else
		report_note(s->r, "ddptrain %s: mode ddp, %d rank%s (%d on this node), device %s, backend %s",
			    PACKAGE_VERSION, s->w->size, s->w->size == 1 ? "" : "s", s->w->local_size,
			    s->be->ops->name, s->c->ops->name);
	if (s->pl->notice[0] != '\0')
		report_note(s->r, "%s", s->pl->notice);
	if (s->c->notice[0] != '\0')
		report_note(s->r, "%s", s->c->notice);
	if (s->pl->device == DEVICE_CUDA)
		report_note(s->r, "%s, TF32 %s%s", s->pl->info, o->precision == PRECISION_TF32 ? "on" : "off",
			    o->precision == PRECISION_BF16 ? ", bf16 autocast" : "");
	else if (o->precision == PRECISION_TF32) /* accepted (a job script may run either way), but not silently */
		report_note(s->r, "precision tf32: fp32 on the CPU (TF32 is cuBLAS's tensor-core mode; OpenBLAS computes float32)");
	print_ranks(s);
	report_note(s->r, "model %s (%zu parameters), data %s (%zu samples), batch %ld per %s x %d %ss x %ld accum = %ld per step",
		    widths, s->m->nparams, s->ds->synthetic ? "synthetic" : o->inputs, s->ds->n, o->batch_size,
		    dp ? "replica" : "rank", reps, dp ? "replica" : "rank", o->grad_accum,
		    o->batch_size * reps * o->grad_accum);
	optimizer_describe(s->hp, opt, sizeof opt);
	report_note(s->r, "%s loss, %s, %ld epochs, %s, seed %llu", loss_name(&s->tc->loss), opt, o->epochs,
		    o->shuffle ? "shuffled" : "not shuffled", (unsigned long long)o->seed);
	if (o->clip_grad_norm > 0.0)
		snprintf(clip, sizeof clip, "at norm %g", o->clip_grad_norm);
	if (o->schedule != SCHED_CONSTANT || o->warmup_steps > 0 || o->clip_grad_norm > 0.0)
		report_note(s->r, "lr schedule %s with %ld warmup steps, gradient clipping %s",
			    schedule_names[o->schedule], o->warmup_steps, clip);
	if (s->val->n > 0)
		report_note(s->r, "validation: %s (%zu samples), every epoch%s",
			    s->val->synthetic ? "synthetic" : o->val_inputs, s->val->n,
			    o->eval_every > 0 ? " and every --eval-every steps" : "");
}

enum status overview_summary(const struct overview *s, struct report_summary *sum,
			     struct replica_stats *ranks, double *rss, struct straggler_rank *strag,
			     struct diag *d)
{
	const struct train_result *res = s->res;
	double mine = report_peak_rss_mib(), state = 0.0;
	enum status st = ST_OK;

	sum->mode = options_mode_names[s->o->mode];
	sum->replicas = s->replicas;
	sum->steps = res->steps;
	sum->epochs = res->epochs;
	sum->seconds = res->seconds;
	sum->samples_per_s = res->seconds > 0 ? res->samples / res->seconds : 0.0;
	sum->first_loss = res->first_loss;
	sum->final_loss = res->final_loss;
	sum->comm_wait_share = res->seconds > 0 ? res->wait_s / res->seconds : 0.0;
	if (s->o->mode == MODE_DP) {
		sum->rep = res->rep;
	} else {
		struct straggler_rank me;

		straggler_mine(s->strag, s->w->host, &me);
		st = world_gather(s->w, &res->rep[0], sizeof res->rep[0], ranks, d);
		if (st == ST_OK)
			st = world_gather(s->w, &mine, sizeof mine, rss, d);
		if (st == ST_OK)
			st = world_gather(s->w, &me, sizeof me, strag, d);
		sum->rep = ranks;
		sum->rss_mib = rss;
		sum->strag = strag;
		sum->nbuckets = res->nbuckets;
		sum->untimed = res->untimed;
		sum->buckets = res->buckets;
	}
	for (int i = 0; i < sum->replicas && s->w->rank == 0; i++)
		state = (double)sum->rep[i].state_bytes > state ? (double)sum->rep[i].state_bytes : state;
	sum->state_mib = state / 1048576.0;
	return st;
}
