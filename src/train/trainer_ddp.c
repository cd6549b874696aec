/*
 * trainer_ddp.c - DistributedDataParallel: one replica per rank, its gradients summed
 * over the ranks during backward by the gradient-sync strategy the plan calls for
 * (sync.h: DDP's buckets, ZeRO-1, ZeRO-2). This file is the loop: per micro-batch the
 * step (ddp_step.c: load, forward, backward, optimizer, as a device graph where it can
 * be), per optimizer step the after-step work (ddp_after); the rank's set-up and
 * teardown are ddp.c's.
 */
#include <string.h>

#include "core/clock.h"
#include "train/ddp.h"

enum status trainer_ddp(const struct train_config *tc, const struct grad_plan *p, struct world *w,
			struct model *m, struct optimizer *opt, struct comm *c, const struct dataset *ds,
			const struct train_ctl *ctl, struct report *r, struct train_result *res,
			struct diag *d)
{
	struct ddp t = {.tc = tc, .w = w, .m = m, .opt = opt, .c = c, .d = d, .ctl = ctl, .r = r,
			.ydim = ds->out, .res = res};
	struct loader_config lcfg = trainer_run_loader_config(tc, 0, w->size, w->rank, w->local_size);
	struct loader L;
	struct batch b;
	struct step_clock clk = {0};
	struct train_loop loop;
	long step = ctl->start_step;
	double consumed = 0.0;
	enum status st;

	memset(res, 0, sizeof *res);
	st = loader_init(&L, ds, &lcfg, m->be, d);
	if (st == ST_OK)
		loader_seek(&L, ctl->start_epoch, ctl->start_mb);
	if (!world_all(w, st == ST_OK)) { /* this rank's loader too is freed (safe twice) */
		if (st == ST_OK)
			st = diag_set(d, ST_PEER, "another rank could not start training");
		goto out_loader;
	}
	st = ddp_setup(&t, p);
	if (st != ST_OK)
		goto out_loader;
	if (ctl->trace != NULL && ctl->trace->path != NULL && m->be->ops->trace_dev != NULL) {
		ctl->trace->buf[0].dev = m->be->ops->trace_dev;
		ctl->trace->buf[0].dev_ctx = m->be->ctx;
	}
	t.total = res->total = trainer_total_steps(ctl, L.nmicro, tc->grad_accum, tc->epochs, tc->max_steps);
	loop = (struct train_loop){ctl, tc, res, r, &clk, t.total, L.nmicro, ddp_eval, &t, ddp_settle, ds, w,
				   replicas_on(&t.rep) ? ddp_check : NULL};
	report_training_starts(r); /* nothing refuses the run now: the metrics stream opens */
	ddp_describe(&t, trainer_steps_per_epoch(L.nmicro, tc->grad_accum));
	clk.t0 = clk.t_last = clk.t_step = clock_now();
	t.sent0 = c->sent_bytes;
	/* step counts the steps whose work is done; one more may be queued with its read left
	 * for later (t.pending) */
	while (step + t.pending < t.total && loader_next(&L, &b)) {
		const long k = step + t.pending; /* the step being queued, from 0 */
		long gi, group = trainer_group(b.mb, L.nmicro, tc->grad_accum, &gi);
		int sync = gi == group - 1, done = 0;
		float scale = 1.0f / ((float)w->size * (float)group);

		res->epochs = b.epoch + 1;
		w->step = k + 1;
		t.step = k;
		t.stop_host[b.buf] = ddp_stop_slot(&t, sync);
		m->trace = trace_buf_for(ctl->trace, 0, k + 1);
		grad_sync_step(&t.sync, m->trace);
		if (t.graphs && b.n == tc->batch_size && t.sync.tb == NULL) /* traced steps run eagerly */
			st = ddp_graph_step(&t, &b, scale, k - ctl->start_step, &done);
		if (st == ST_OK && !done)
			st = ddp_micro(&t, &b, gi > 0, sync, scale);
		if (st == ST_OK) {
			loader_copied(&L, &b, m->be);
			st = loader_prefetch(&L, d); /* the next batch, while the device works on this one */
		}
		if (st != ST_OK)
			break;
		consumed += b.n;
		t.flops += model_flops(m, b.n); /* eager or replayed */
		if (sync)
			st = ddp_after(&t, &loop, &step, &b, consumed * w->size);
		if (st != ST_OK)
			break;
	}
	if (st == ST_OK)
		st = ddp_after_last(&t, &loop, &step);
	st = ddp_teardown(&t, st);
	ddp_result(&t, step, clock_now() - clk.t0, consumed);
	res->rep[0].data_wait_s = L.waited_s;
	ddp_free(&t);
out_loader:
	loader_free(&L);
	return st;
}
