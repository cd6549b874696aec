/*
 * session.h - one run of ddptrain from the parsed options to the exit status:
 * set up (data, checks, device, model, communicator, starting weights), train,
 * save, summarise, tear down, with every rank agreeing after each phase that
 * can fail on some ranks only (so all exit together with the same code and the
 * message is printed once, by the lowest rank that saw the problem).
 *
 * The run/ wing (floor 5, the top below main.c): the command line, what it
 * becomes, and one session's phases. Everything that depends on options lives
 * here or below through the configurations it hands down.
 *
 * The session owns every module's state for the run; the jobs themselves live
 * beside their data: settings.h (options -> configurations), preflight.h (the
 * checks), persist.h (files of weights), observers.h, overview.h (the report
 * text). main.c parses, starts the world and calls these.
 */
#ifndef DDPT_SESSION_H
#define DDPT_SESSION_H

#include "backend/backend.h"  /* struct backend, struct backend_config */
#include "core/outfile.h"     /* struct outfile_lock */
#include "data/data.h"        /* struct dataset */
#include "comm/comm.h"        /* struct comm */
#include "comm/world.h"       /* struct world */
#include "observe/report.h"   /* struct report */
#include "run/observers.h"    /* struct observers */
#include "run/options.h"      /* struct options */
#include "run/persist.h"      /* struct persist */
#include "run/placement.h"    /* struct placement */
#include "model/model.h"      /* struct model */
#include "model/optimizer.h"  /* struct optimizer, struct optimizer_hparams */
#include "train/plan.h"       /* struct grad_plan */
#include "train/trainer.h"    /* struct train_config, train_ctl, train_result */

struct session {
	struct world w;
	struct options o;
	struct placement pl;
	struct dataset ds;
	struct dataset val;  /* validation set (val.n == 0: none) */
	struct backend_config cfg;
	struct backend be;
	struct comm c;
	struct model m;
	struct optimizer_hparams hp;
	struct optimizer opt;
	struct grad_plan plan; /* ddp: how the gradients are cut for communication */
	struct train_config tc;
	struct report r;
	struct train_result res;
	struct train_ctl ctl;
	struct observers ob;
	struct persist per;
	struct outfile_lock claims[OPT_MAX_FILES]; /* rank 0: the outputs' lock files, held to the end */
	int reported;        /* the current failure was printed already */
	int outputs_checked; /* preflight_outputs passed: the output paths may be written */
	struct diag d;
};

/* All ranks agree on st; the reporting rank prints the message (or, for ST_STOP, the
 * --help or --version text that stopped the run). Returns the agreed status. */
enum status session_agree(struct session *s, enum status st);

/* After options_parse and world_init: everything up to the first training step. */
enum status session_setup(struct session *s);

/* Train, write --save, print the summary, then finish the observers (whatever the outcome:
 * a stop writes the trace, every end the last --prometheus update). */
enum status session_run(struct session *s);

/* The metrics file's end record for st, then free everything. */
void session_end(struct session *s, enum status st);

/* Replicas of this run: MPI ranks (ddp) or worker threads (dp). */
int session_replicas(const struct session *s);

#endif
