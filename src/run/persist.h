/*
 * persist.h - what a run keeps on disk: its starting weights (--init or the
 * seed), its checkpoints (--checkpoint, --resume), the best weights so far
 * (--save-best) and the final weights (--save).
 *
 * Rank 0 reads and writes the files; every rank learns the outcome through the
 * session's agreement (run/agree.h), so all ranks go on or stop
 * together. Weights reach a file through one routine, persist_save_weights,
 * which refuses weights that are not finite. The file formats are store/'s.
 */
#ifndef DDPT_PERSIST_H
#define DDPT_PERSIST_H

#include "core/status.h"
#include "data/data.h"          /* struct dataset */
#include "comm/comm.h"          /* struct comm */
#include "comm/world.h"         /* struct world */
#include "observe/report.h"     /* struct report */
#include "run/agree.h"          /* struct agreement */
#include "run/options.h"        /* struct options */
#include "store/checkpoint.h"   /* CKPT_LINEAGE, struct st_pending */
#include "model/model.h"        /* struct model */
#include "model/optimizer.h"    /* struct optimizer */
#include "train/trainer.h"      /* struct train_ctl */

struct persist {
	/* borrowed from the session */
	const struct options *o;
	struct train_config *tc;   /* the loop's batches: a checkpoint's position is checked against
				    * them; a resumed one sets its schedule_steps */
	const struct dataset *ds;  /* the checkpoint's data identity */
	struct model *m;
	struct world *w;
	struct comm *c;
	struct report *r;
	struct agreement ag;
	struct diag *d;            /* the session's: messages go where the agreement reads them */
	int replicas;              /* ranks (ddp) or worker threads (dp) */
	/* owned */
	float *ckpt_host;          /* rank 0: the whole state dict (model_state_floats) */
	char lineage[CKPT_LINEAGE]; /* rank 0: this run's id in its checkpoints */
	double best_loss;          /* --save-best: the best validation loss so far */
	int have_best;
	struct st_pending saved;   /* rank 0: --save, written and waiting for the run's success */
	struct ckpt_rotation kept; /* rank 0: --keep-checkpoints' numbered copies */
	struct progress progress;  /* rank 0's writes tell w's watchdog, and through it the
				    * ranks waiting for them (world_expect_wait), as they go */
};

/* Set up p over what it borrows (its fields up to `ckpt_host` filled in by the caller)
 * and hook the checkpoint and --save-best callbacks into ctl. */
void persist_init(struct persist *p, struct train_ctl *ctl);

/* Rank 0: the checkpoint buffer, and the starting weights: --init, or nn.Linear's init
 * from --seed (--resume: nothing here; persist_resume reads them). Agreed. */
enum status persist_start(struct persist *p);

/* --keep-checkpoints, before training (after persist_resume: the lineage and the first
 * step are the run's): rank 0 reads the directory, and refuses the run (ST_USAGE naming
 * it) if a file that is not this run's holds the rotation name of a step it may write.
 * Agreed. */
enum status persist_keep_start(struct persist *p, const struct train_ctl *ctl);

/* --resume: rank 0 reads and checks the checkpoint; every rank gets the position (into
 * ctl and opt), the optimizer state and -- through the weight broadcast that follows --
 * the weights. ST_STOP when the checkpoint is already complete (after writing --save
 * from it). Agreed. */
enum status persist_resume(struct persist *p, struct train_ctl *ctl, struct optimizer *opt);

/* The model's weights to path as safetensors by rank 0, refused if not finite (training
 * diverged after `step`, or the fp16 wire overflowed: trainer_fp16_overflow). stage NULL:
 * written now; else written beside path and left in *stage for st_commit. flag names the
 * option in messages. Every rank calls it (ZeRO-3 gathers the weights from every rank's
 * window), and then waits for rank 0's write in the caller's agreement, hearing of its
 * progress (world_expect_wait). */
enum status persist_save_weights(struct persist *p, const char *path, const char *flag, long step,
				 struct st_pending *stage);

/* --save after training: staged now (agreed), committed by persist_commit once the run
 * has succeeded, so that a run that fails leaves no new file. */
enum status persist_stage_save(struct persist *p, long steps);
enum status persist_commit(struct persist *p);

/* Safe to call twice. */
void persist_free(struct persist *p);

#endif
