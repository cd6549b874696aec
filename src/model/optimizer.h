/*
 * optimizer.h - the optimizer: hyperparameters, state and the step, written
 * against the backend's element-wise kernels.
 *
 * Its state lives in named arenas of the model (model_add_arena), laid out as
 * the parameters, so the state dict, checkpoints and the memory figures see
 * it without knowing which optimizer made it. SGD (torch.optim.SGD: momentum,
 * dampening 0, weight decay as an L2 term, optionally Nesterov) keeps one
 * arena, momentum_buffer, and only when momentum is nonzero; AdamW
 * (torch.optim.AdamW: decoupled weight decay, bias-corrected moments) keeps
 * two, exp_avg and exp_avg_sq, and counts its steps for the bias correction.
 * Frozen layers (model_freeze) are skipped: no update, no decay, and no state
 * (neither in the state dict nor in memory, as in PyTorch). A new optimizer is a new kind here, its state arenas and,
 * where the existing kernels do not suffice, a kernel in each backend. This
 * module is not the learning-rate schedule or the gradient clipping: those
 * belong to the caller of optimizer_step, which passes the schedule's
 * multiplier.
 *
 * The step walks a list of pieces made at init: the trainable runs of
 * consecutive layers (model_trainable_runs) of the parameters and of every state
 * arena, one flat pass when nothing is frozen; or, with ZeRO (zero.h), the runs
 * within this rank's shard, whose state arenas then hold the shard only.
 */
#ifndef DDPT_OPTIMIZER_H
#define DDPT_OPTIMIZER_H

#include <stddef.h>

#include "model/model.h"  /* struct model, model_add_arena */
#include "model/zero.h"   /* struct zero_plan, struct zero_piece */
#include "core/status.h" /* enum status, struct diag */

enum optimizer_kind { OPTIM_SGD, OPTIM_ADAMW };
extern const char *const optimizer_names[]; /* --optimizer: "sgd", "adamw", NULL */

struct optimizer_hparams {
	enum optimizer_kind kind;
	float lr;           /* learning rate (the peak of a schedule) */
	float momentum;     /* SGD: momentum factor; 0 keeps no state */
	int nesterov;       /* SGD: Nesterov momentum */
	float weight_decay; /* SGD: L2 penalty added to the gradient; AdamW: decoupled decay */
	double beta1, beta2, eps; /* AdamW */
};

struct optimizer {
	struct optimizer_hparams h;
	struct model *m;        /* borrowed: the parameters, gradients and state arenas */
	float *momentum_buffer; /* (state_len) SGD with momentum: an arena of m; else NULL */
	float *exp_avg, *exp_avg_sq; /* (state_len) AdamW: arenas of m; else NULL */
	long step;              /* steps taken, counting those before a resume */
	/* What the step updates: params[off..off+len) from the gradients at the same offsets,
	 * state[so..so+len). All trainable runs, or this rank's shard's (sharded). */
	struct zero_piece piece[MODEL_MAX_LAYERS];
	int npieces;
	int sharded;            /* ZeRO: the pieces are this rank's shard, the state arenas too */
	size_t state_len;       /* floats of each state arena: ntrainable, or the shard's */
	/* ZeRO-2: where the reduced gradient of the shard begins in the model's gradient block
	 * (gmem), laid out as the shard's state; 0: the pieces read m->grads (set by the
	 * session, from the gradient plan) */
	size_t grad_at;
};

/* State arenas optimizer_init will add to the model for h (for memory estimates). */
int optimizer_state_arenas(const struct optimizer_hparams *h);
/* Set up for m and add its state arenas to m (zeroed: PyTorch's lazy first buffer): for
 * all trainable parameters (z NULL), or for z's shard only (ZeRO). Call after
 * model_freeze. */
enum status optimizer_init(struct optimizer *opt, struct model *m,
			   const struct optimizer_hparams *h, const struct zero_plan *z,
			   struct diag *d);
/* One step over the pieces' parameters from m->grads (queued on the backend), at
 * learning rate h.lr * multiplier. Returns that learning rate. */
double optimizer_step(struct optimizer *opt, double multiplier);
/* Piece r's gradient (len floats): in the whole gradient at its offset, or (ZeRO-2) in
 * the gradient shard at grad_at, laid out as the shard's state. */
float *optimizer_grad(const struct optimizer *opt, int r);
/* 1 if name is a tensor of some optimizer's state ("momentum_buffer.net1.weight"): a
 * checkpoint's state is not weights, and --init skips it. */
int optimizer_is_state_tensor(const char *name);
/* Why v can never be element of the state-dict tensor `name` (a weight or an optimizer
 * state), or NULL if it can: nothing here is ever NaN or infinite (the data and the
 * starting weights are refused so, and a step that makes one is refused), and AdamW's
 * exp_avg_sq, a running mean of squares, is never negative. For a loaded checkpoint. */
const char *optimizer_impossible_value(const char *name, float v);
/* "SGD lr 0.001 momentum 0 weight decay 0" for the run header. */
void optimizer_describe(const struct optimizer_hparams *h, char *buf, size_t len);

#endif
