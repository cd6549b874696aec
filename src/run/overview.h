/*
 * overview.h - what the report says about the run as a whole: the header lines
 * (version, mode, device, every rank's place, model, data, optimizer, schedule,
 * validation) and the summary's figures.
 *
 * It reads the session's parts through struct overview and changes none of them;
 * the report (observe/report.h) prints.
 */
#ifndef DDPT_OVERVIEW_H
#define DDPT_OVERVIEW_H

#include "backend/backend.h"   /* struct backend */
#include "data/data.h"         /* struct dataset */
#include "comm/comm.h"         /* struct comm */
#include "comm/world.h"        /* struct world */
#include "observe/report.h"    /* struct report, report_summary */
#include "observe/straggler.h" /* struct straggler */
#include "run/options.h"       /* struct options */
#include "run/placement.h"     /* struct placement */
#include "model/model.h"       /* struct model */
#include "model/optimizer.h"   /* struct optimizer_hparams */
#include "train/trainer.h"     /* struct train_config, train_result */

/* The parts of a session the overview reads (all borrowed). */
struct overview {
	const struct options *o;
	const struct placement *pl;
	const struct backend *be;
	const struct comm *c;
	struct world *w;
	const struct model *m;
	const struct dataset *ds, *val;
	const struct train_config *tc;
	const struct optimizer_hparams *hp;
	const struct train_result *res;
	const struct straggler *strag;
	struct report *r;
	int replicas;  /* ranks (ddp) or worker threads (dp) */
};

/* The header lines. Collective in ddp mode (every rank's line is gathered). */
void overview_header(const struct overview *v);
/* The summary's figures; in ddp mode rank 0 gathers every rank's into ranks, rss and
 * strag (w->size each). Collective in ddp mode. */
enum status overview_summary(const struct overview *v, struct report_summary *sum,
			     struct replica_stats *ranks, double *rss, struct straggler_rank *strag,
			     struct diag *d);

#endif
