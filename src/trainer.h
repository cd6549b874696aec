/*
 * trainer.h - the training loops. Both take a model whose replicas already
 * hold identical weights, and run the epochs the options ask for.
 *
 * ddp: this rank trains on its DistributedSampler shard; each micro-batch's
 * gradients are summed into the model's gradient buffer and, on the last
 * micro-batch of an optimizer step, every bucket's all-reduce starts as soon
 * as backward has finished its layers, overlapping the rest of backward.
 *
 * dp: PyTorch's DataParallel in one process: every micro-batch is scattered
 * in torch.chunk pieces over worker threads, replica 0's weights are copied
 * to the others, the outputs are gathered onto replica 0 for the loss, the
 * output gradient is scattered back, and the replicas' gradients are summed
 * onto replica 0, which alone takes the optimizer step.
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
	int nreplicas;      /* dp: replicas in rep[]; ddp: 1 (this rank) */
	struct replica_stats rep[OPT_MAX_REPLICAS];
};

/* dp: G replicas on worker threads; the replica-0 model m0 holds the weights to train
 * (and is the one saved); replica i is created here on an instance of m0's backend on
 * device cfg->device + i. */
enum status trainer_dp(const struct options *o, int replicas, struct model *m0,
		       const struct backend_config *cfg, const struct dataset *ds,
		       struct report *r, struct train_result *res, struct diag *d);

enum status trainer_ddp(const struct options *o, struct world *w, struct model *m,
			struct comm *c, const struct dataset *ds, struct report *r,
			struct train_result *res, struct diag *d);

#endif
