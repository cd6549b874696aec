/* observers.c - starting and finishing --trace, the straggler samples and --prometheus. */
#include <stdio.h>

#include "config.h" /* PACKAGE_VERSION */
#include "run/observers.h"

enum status observers_init(struct observers *ob, const struct options *o, int replicas, struct world *w,
			   struct train_ctl *ctl, struct diag *d)
{
	const int dp = o->mode == MODE_DP;
	enum status st;

	st = trace_init(&ob->trace, o->trace, o->trace_lo, o->trace_hi, dp ? replicas : 1, dp,
			(size_t)1 << 20, d);
	if (st == ST_OK)
		st = trace_sync_clocks(&ob->trace, w, d);
	if (st == ST_OK && !dp)
		st = straggler_init(&ob->strag, w, o->straggler_warn, w->host, d);
	if (st != ST_OK)
		return st;
	ctl->trace = o->trace != NULL ? &ob->trace : NULL;
	ctl->straggler = dp ? NULL : &ob->strag;
	if (w->rank == 0 && o->prometheus != NULL) {
		prometheus_init(&ob->prom, o->prometheus, o->prometheus_every, options_mode_names[o->mode],
				replicas);
		ctl->prom = &ob->prom;
	}
	return ST_OK;
}

/* The last --prometheus file: running 0, the exit status, the last step. Every end writes
 * it, so a dashboard sees a stopped or failed run end too. */
static void prometheus_final(const struct train_ctl *ctl, struct report *r,
			     const struct train_result *res, long step, int replicas, int exit_code)
{
	double el = res->seconds;

	trainer_prometheus(ctl, r, res, step, res->total > 0 ? res->total : step,
			   res->final_loss, el > 0 ? res->samples / el : 0.0, el > 0 ? res->wait_s / el : 0.0,
			   exit_code, replicas);
}

enum status observers_finish(struct observers *ob, const struct options *o, int replicas,
			     struct world *w, const struct train_ctl *ctl, const struct train_result *res,
			     struct report *r, enum status st, const struct agreement *ag, struct diag *d)
{
	/* Finished or stopped, every rank is here and agreed; after a failure one may be gone. */
	const int whole = st == ST_OK || st == ST_INTERRUPTED;
	const char *meta[4] = {NULL};
	char mode[32], lost[64];
	int trace_lost = 0, nlost;

	snprintf(mode, sizeof mode, "mode=%s", options_mode_names[o->mode]);
	meta[0] = "producer=ddptrain " PACKAGE_VERSION;
	meta[1] = mode;
	/* A stop is when the trace is wanted most: it holds the stop and its checkpoint. */
	if (o->trace != NULL && whole) {
		struct diag td = {0}; /* the trace's own: it is lost, the run is not */

		trace_lost = trace_write(&ob->trace, w, meta, w->host, &td) != ST_OK;
		if (trace_lost)
			report_output_failed(r, REPORT_TRACE, td.msg);
	}
	nlost = report_lost(r, lost, sizeof lost);
	if (ctl->prom != NULL) {
		prometheus_final(ctl, r, res, res->steps, replicas,
				 st == ST_OK && nlost > 0 ? EXIT_INCOMPLETE : status_exit_code(st));
		nlost = report_lost(r, lost, sizeof lost);
	}
	if (!whole)
		return st;
	/* Rank 0 holds the observers; another rank can only lose the trace's gathers. */
	if (st == ST_OK && nlost > 0)
		st = diag_set(d, ST_INCOMPLETE, "training finished%s, but %s %s not written in full (see the warning above)",
			      o->save != NULL ? " and --save is written" : "", lost, nlost > 1 ? "were" : "was");
	else if (st == ST_OK && trace_lost)
		st = diag_set(d, ST_INCOMPLETE, "--trace could not be written");
	/* Rank 0 may take long to write them (a trace of hundreds of MB on a long run): with a
	 * stop pending, the others wait patiently, as for --save. */
	world_expect_wait(w, "the --trace and --prometheus writes on rank 0");
	return agreement_reach(ag, st);
}

void observers_end_early(struct observers *ob, const struct options *o, int replicas,
			 const struct world *w, struct train_ctl *ctl, const struct train_result *res,
			 struct report *r, enum status st)
{
	if (w->rank != 0 || o->prometheus == NULL || ctl->prom != NULL)
		return;
	prometheus_init(&ob->prom, o->prometheus, o->prometheus_every, options_mode_names[o->mode],
			replicas);
	ctl->prom = &ob->prom;
	prometheus_final(ctl, r, res, ctl->start_step, replicas, status_exit_code(st)); /* resumed from */
}

void observers_free(struct observers *ob)
{
	trace_free(&ob->trace);
	straggler_free(&ob->strag);
}
