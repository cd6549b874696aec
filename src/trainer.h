/*
 * trainer.h - the training loops. Both take a model whose replicas already
 * hold identical weights, and run the epochs the options ask for.
 *
 * ddp: this rank trains on its DistributedSampler shard; each micro-batch's
 * gradients are summed into the model's gradient buffer and, on the last
 * micro-batch of an optimizer step, every bucket's all-reduce starts as soon
 * as backward has finished its layers, overlapping the rest of backward.
 */
#ifndef DDPT_TRAINER_H
#define DDPT_TRAINER_H

#include "comm.h"
#include "data.h"
#include "model.h"
#include "options.h"
#include "report.h"
#include "world.h"

struct train_result {
	long steps;         /* optimizer steps taken */
	long epochs;        /* epochs started */
	double seconds;     /* training loop wall time */
	double samples;     /* samples consumed, all ranks */
	double first_loss, final_loss;
	double wait_s;      /* this rank's time blocked completing all-reduces */
};

/* Steps per epoch for a shard of `per_rank` samples (micro-batches of batch, K per step). */
long trainer_steps_per_epoch(size_t per_rank, long batch, long grad_accum);

enum status trainer_ddp(const struct options *o, struct world *w, struct model *m,
			struct comm *c, const struct dataset *ds, struct report *r,
			struct train_result *res, struct diag *d);

#endif
