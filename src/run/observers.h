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
#include "comm/world.h"        /* struct world */
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

/* After the run, st its agreed status, whatever it is: on a finished run (ST_OK, its
 * weights already saved) or a stop (ST_INTERRUPTED) rank 0 writes the merged trace; on
 * every end the last --prometheus file (running 0, the exit status, the last step). An
 * output that could not be written is r's warning, and a finished run ends
 * ST_INCOMPLETE (exit 4): it is finished, and its weights are in place. Collective for
 * ST_OK and ST_INTERRUPTED, agreed through ag; rank 0 alone after a failure. Returns the
 * run's status. */
enum status observers_finish(struct observers *ob, const struct options *o, int replicas,
			     struct world *w, const struct train_ctl *ctl, const struct train_result *res,
			     struct report *r, enum status st, const struct agreement *ag, struct diag *d);

/* A run that failed with st before observers_init, once its outputs were checked: rank 0
 * still leaves --prometheus final (res: what training did, nothing yet). No-op when
 * observers_init ran (observers_finish wrote it). */
void observers_end_early(struct observers *ob, const struct options *o, int replicas,
			 const struct world *w, struct train_ctl *ctl, const struct train_result *res,
			 struct report *r, enum status st);

/* Safe to call twice. */
void observers_free(struct observers *ob);

#endif
