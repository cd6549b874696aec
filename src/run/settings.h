/*
 * settings.h - what the options become: the optimizer's hyper-parameters, the
 * training loops' configuration, and the texts that say which settings a run
 * shares with its checkpoints and with the other ranks.
 *
 * Every setting that reaches a module from the command line or the environment
 * passes through here (the all-reduce's DDPTRAIN_* variables excepted: comm/
 * reads them on rank 0 and broadcasts them). It is not the parser (options.h)
 * and decides nothing about the world or the device (placement.h).
 */
#ifndef DDPT_SETTINGS_H
#define DDPT_SETTINGS_H

#include <stddef.h>

#include "data/data.h"       /* struct dataset */
#include "run/options.h"     /* struct options */
#include "model/optimizer.h" /* struct optimizer_hparams */
#include "train/trainer.h"   /* struct train_config */

/* Room for every setting as "--flag=value" lines, paths included. */
#define SETTINGS_TEXT_MAX (8 * 4096 + 4096)

/* The optimizer's and the training loops' parts of o (and DDPTRAIN_CUDA_GRAPHS). */
void settings_apply(const struct options *o, struct optimizer_hparams *hp, struct train_config *tc);

/* The settings a checkpoint must share with the run that resumes it, the data's identity
 * (shape, and the files' fingerprints) first, as "key=value" lines into buf. */
void settings_resume_text(const struct options *o, const struct dataset *ds, char *buf, size_t len);

/* "--flag=value" lines of every setting that must be equal on all ranks: those a
 * checkpoint must share, those that shape the run or its sequence of collectives, and
 * those that say what is written where (only rank 0 writes: another rank's different
 * --save would silently come to nothing). all: every setting instead, after the data
 * line, for the metrics file's record of the run. */
void settings_config_text(const struct options *o, const struct dataset *ds, char *buf, size_t len,
			  int all);

#endif
