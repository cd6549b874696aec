/*
 * optimizer.h - the optimizer: hyperparameters, state and the step, written
 * against the backend's element-wise kernels.
 *
 * Its state lives in named arenas of the model (model_add_arena), laid out as
 * the parameters, so the state dict, checkpoints and the memory figures see
 * it without knowing which optimizer made it. SGD (torch.optim.SGD: momentum,
 * dampening 0, weight decay as an L2 term) keeps one arena, momentum_buffer,
 * and only when momentum is nonzero. A new optimizer is a new kind here, its
 * state arenas and, where the existing kernels do not suffice, a kernel in
 * each backend. This module is not the learning-rate schedule or the
 * gradient clipping: those belong to the caller of optimizer_step.
 *
 * The step is one flat pass over the whole parameter arena. Stepping only
 * some tensors (frozen layers) would walk model_state_dict(m, 0, 1, ...) and
 * step each trainable tensor's [off, off + len) slice of every arena instead.
 */
#ifndef DDPT_OPTIMIZER_H
#define DDPT_OPTIMIZER_H

#include <stddef.h>

#include "model.h"  /* struct model, model_add_arena */
#include "status.h" /* enum status, struct diag */

enum optimizer_kind { OPTIM_SGD };

struct optimizer_hparams {
	enum optimizer_kind kind;
	float lr;           /* learning rate */
	float momentum;     /* SGD: momentum factor; 0 keeps no state */
	float weight_decay; /* SGD: L2 penalty added to the gradient before momentum */
};

struct optimizer {
	struct optimizer_hparams h;
	struct model *m;        /* borrowed: the parameters, gradients and state arenas */
	float *momentum_buffer; /* (nparams) SGD with momentum: an arena of m; else NULL */
	long step;              /* steps taken, counting those before a resume */
};

/* State arenas optimizer_init will add to the model for h (for memory estimates). */
int optimizer_state_arenas(const struct optimizer_hparams *h);
/* Set up for m and add its state arenas to m (zeroed: PyTorch's lazy first buffer). */
enum status optimizer_init(struct optimizer *opt, struct model *m,
			   const struct optimizer_hparams *h, struct diag *d);
/* One step over all parameters from m->grads (queued on the backend). */
void optimizer_step(struct optimizer *opt);
/* 1 if name is a tensor of some optimizer's state ("momentum_buffer.net1.weight"): a
 * checkpoint's state is not weights, and --init skips it. */
int optimizer_is_state_tensor(const char *name);
/* "SGD lr 0.001 momentum 0 weight decay 0" for the run header. */
void optimizer_describe(const struct optimizer_hparams *h, char *buf, size_t len);

#endif
