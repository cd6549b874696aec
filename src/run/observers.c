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

enum status observers_finish(struct observers *ob, const struct options *o, int replicas,
			     struct world *w, const struct train_ctl *ctl, const struct train_result *res,
			     struct report *r, enum status st, const struct agreement *ag, struct diag *d)
{
	const char *meta[4] = {NULL};
	char mode[32], lost[64];
	int trace_lost = 0, nlost;

	if (st != ST_OK)
		return st;
	snprintf(mode, sizeof mode, "mode=%s", options_mode_names[o->mode]);
	meta[0] = "producer=ddptrain " PACKAGE_VERSION;
	meta[1] = mode;
	if (o->trace != NULL) {
		struct diag td = {0}; /* the trace's own: it is lost, the run is not */

		trace_lost = trace_write(&ob->trace, w, meta, w->host, &td) != ST_OK;
		if (trace_lost)
			report_output_failed(r, REPORT_TRACE, td.msg);
		/* Rank 0 may take long to write it (hundreds of MB on a long run). */
		world_expect_wait(w, "the --trace write on rank 0");
	}
	if (ctl->prom != NULL) {
		double el = res->seconds;

		trainer_prometheus(ctl, r, res, res->steps, res->steps, res->final_loss,
				   el > 0 ? res->samples / el : 0.0, el > 0 ? res->wait_s / el : 0.0, 0,
				   replicas);
	}
	/* Rank 0 holds the observers; another rank can only lose the trace's gathers. */
	nlost = report_lost(r, lost, sizeof lost);
	if (nlost > 0)
		st = diag_set(d, ST_INCOMPLETE, "training finished%s, but %s %s not written in full (see the warning above)",
			      o->save != NULL ? " and --save is written" : "", lost, nlost > 1 ? "were" : "was");
	else if (trace_lost)
		st = diag_set(d, ST_INCOMPLETE, "--trace could not be written");
	return agreement_reach(ag, st);
}

void observers_free(struct observers *ob)
{
	trace_free(&ob->trace);
	straggler_free(&ob->strag);
}
