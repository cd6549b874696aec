/* optimizer.c - SGD and AdamW over pieces of the parameter arena: its trainable runs, or
 * with ZeRO this rank's shard of them (and the state arenas, which hold the trainable
 * layers only, or the shard). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/optimizer.h"

/* The arena names of every optimizer's state (the prefixes of their tensors). */
static const char *const state_names[] = {"momentum_buffer", "exp_avg", "exp_avg_sq"};

const char *const optimizer_names[] = {"sgd", "adamw", NULL};

int optimizer_state_arenas(const struct optimizer_hparams *h)
{
	if (h->kind == OPTIM_ADAMW)
		return 2;
	return h->momentum != 0.0f ? 1 : 0;
}

enum status optimizer_init(struct optimizer *opt, struct model *m,
			   const struct optimizer_hparams *h, const struct zero_plan *z,
			   struct diag *d)
{
	size_t off[MODEL_MAX_LAYERS], so[MODEL_MAX_LAYERS], len[MODEL_MAX_LAYERS], first = 0;

	memset(opt, 0, sizeof *opt);
	opt->h = *h;
	opt->m = m;
	if (z != NULL) {
		opt->sharded = 1;
		opt->npieces = z->npieces;
		memcpy(opt->piece, z->piece, sizeof z->piece);
		first = z->lo;
		opt->state_len = z->hi - z->lo;
	} else {
		opt->npieces = model_trainable_runs(m, off, so, len);
		for (int r = 0; r < opt->npieces; r++)
			opt->piece[r] = (struct zero_piece){off[r], so[r], len[r]};
		opt->state_len = m->ntrainable;
	}
	if (h->kind == OPTIM_ADAMW) {
		opt->exp_avg = model_add_arena(m, state_names[1], first, opt->state_len, d);
		opt->exp_avg_sq = opt->exp_avg ? model_add_arena(m, state_names[2], first, opt->state_len, d)
					       : NULL;
		return opt->exp_avg_sq != NULL ? ST_OK : ST_RUNTIME;
	}
	if (optimizer_state_arenas(h) > 0) {
		opt->momentum_buffer = model_add_arena(m, state_names[0], first, opt->state_len, d);
		if (opt->momentum_buffer == NULL)
			return ST_RUNTIME;
	}
	return ST_OK;
}

float *optimizer_grad(const struct optimizer *opt, int r)
{
	const struct model *m = opt->m;

	return opt->grad_at > 0 ? m->gmem + opt->grad_at + opt->piece[r].so : m->grads + opt->piece[r].off;
}

/* Piece r's parameters: in the whole arena, or (ZeRO-3) in this rank's window of it. */
static float *optimizer_param(const struct optimizer *opt, int r)
{
	const struct model *m = opt->m;

	return m->params + (opt->piece[r].off - m->arena[0].first);
}

/* torch.optim.SGD on piece r: n parameters (so in the state). */
static void sgd_run(struct optimizer *opt, int r, float lr)
{
	struct model *m = opt->m;
	const struct backend_ops *ops = m->be->ops;
	const float wd = opt->h.weight_decay, mu = opt->h.momentum;
	const size_t so = opt->piece[r].so, n = opt->piece[r].len;
	float *p = optimizer_param(opt, r), *g = optimizer_grad(opt, r);

	/* g' = g + wd p; buf = momentum buf + g'; p -= lr (buf, or with Nesterov g' + mu buf). */
	if (opt->momentum_buffer != NULL) {
		float *buf = opt->momentum_buffer + so;

		ops->axpbz(m->be->ctx, buf, mu, 1.0f, g, wd, p, n);
		if (opt->h.nesterov) {
			ops->axpbz(m->be->ctx, p, 1.0f, -lr, g, wd, p, n);
			ops->axpbz(m->be->ctx, p, 1.0f, -lr * mu, buf, 0.0f, NULL, n);
		} else {
			ops->axpbz(m->be->ctx, p, 1.0f, -lr, buf, 0.0f, NULL, n);
		}
	} else {
		ops->axpbz(m->be->ctx, p, 1.0f, -lr, g, wd, p, n);
	}
}

double optimizer_step(struct optimizer *opt, double multiplier)
{
	struct model *m = opt->m;
	const struct backend_ops *ops = m->be->ops;
	const double lr = (double)opt->h.lr * multiplier;
	const struct zero_piece *pc = opt->piece;

	opt->step++;
	if (opt->h.kind == OPTIM_ADAMW) {
		/* PyTorch works these out in Python floats (double) from the step count t. */
		const double t = (double)opt->step, b1 = opt->h.beta1, b2 = opt->h.beta2;
		struct adamw_hparams h = {
			.decay = (float)(1.0 - lr * (double)opt->h.weight_decay),
			.beta1 = (float)b1,
			.beta2 = (float)b2,
			.one_minus_beta1 = (float)(1.0 - b1),
			.one_minus_beta2 = (float)(1.0 - b2),
			.step_size = (float)(lr / (1.0 - pow(b1, t))),
			.bc2_sqrt = (float)sqrt(1.0 - pow(b2, t)),
			.eps = (float)opt->h.eps,
		};

		for (int r = 0; r < opt->npieces; r++)
			ops->adamw(m->be->ctx, optimizer_param(opt, r), optimizer_grad(opt, r),
				   opt->exp_avg + pc[r].so, opt->exp_avg_sq + pc[r].so, pc[r].len, &h);
	} else {
		for (int r = 0; r < opt->npieces; r++)
			sgd_run(opt, r, (float)lr);
	}
	return lr;
}

int optimizer_is_state_tensor(const char *name)
{
	for (size_t i = 0; i < sizeof state_names / sizeof state_names[0]; i++) {
		size_t n = strlen(state_names[i]);

		if (strncmp(name, state_names[i], n) == 0 && name[n] == '.')
			return 1;
	}
	return 0;
}

const char *optimizer_impossible_value(const char *name, float v)
{
	size_t n = strlen(state_names[2]);

	if (!isfinite(v))
		return "not a finite number";
	if (v < 0 && strncmp(name, state_names[2], n) == 0 && name[n] == '.')
		return "negative, where exp_avg_sq is AdamW's running mean of squared gradients";
	return NULL;
}

void optimizer_describe(const struct optimizer_hparams *h, char *buf, size_t len)
{
	if (h->kind == OPTIM_ADAMW)
		snprintf(buf, len, "AdamW lr %g betas %g,%g eps %g weight decay %g", (double)h->lr,
			 h->beta1, h->beta2, h->eps, (double)h->weight_decay);
	else
		snprintf(buf, len, "SGD lr %g momentum %g%s weight decay %g", (double)h->lr,
			 (double)h->momentum, h->nesterov ? " (Nesterov)" : "",
			 (double)h->weight_decay);
}
