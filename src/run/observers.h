/*
 * observers.h - the run's observers as one: --trace (clocks aligned just
 * before training, merged and written by rank 0 after it), the step-time
 * samples behind the straggler check, and --prometheus.
 *
 * What they record is observe/'s business; this is only when they start and
 * finish, and which of them a run has.
 */
#ifndef DDPT_OBSERVERS_H
#define DDPT_OBSERVERS_H

#include "core/status.h"
#include "dist/world.h"        /* struct world */
#include "observe/prometheus.h" /* struct prometheus */
#include "observe/report.h"     /* struct report */
#include "observe/straggler.h" /* struct straggler */
#include "observe/trace.h"     /* struct trace */
#include "run/agree.h"         /* struct agreement */
#include "run/options.h"       /* struct options */
#include "train/trainer.h"     /* struct train_ctl, struct train_result */

struct observers {
	struct trace trace;
	struct straggler strag;
	struct prometheus prom;
};

/* Start what o asks for and hook it into ctl. replicas: ranks (ddp) or worker threads
 * (dp). Collective (the clock alignment and the straggler set-up). */
enum status observers_init(struct observers *ob, const struct options *o, int replicas, struct world *w,
			   struct train_ctl *ctl, struct diag *d);

/* After the run, st its agreed status: on a finished run (ST_OK, its weights already
 * saved) rank 0 writes the merged trace and the last --prometheus file. An output that
 * could not be written is r's warning, and the run ends ST_INCOMPLETE (exit 4): it is
 * finished, and its weights are in place. Collective for ST_OK; agreed through ag.
 * Returns the run's status. */
enum status observers_finish(struct observers *ob, const struct options *o, int replicas,
			     struct world *w, const struct train_ctl *ctl, const struct train_result *res,
			     struct report *r, enum status st, const struct agreement *ag, struct diag *d);

/* Safe to call twice. */
void observers_free(struct observers *ob);

#endif
