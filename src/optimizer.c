/* optimizer.c - SGD over the model's flat parameter arena. */
#include <stdio.h>
#include <string.h>

#include "optimizer.h"

/* The arena names of every optimizer's state (the prefixes of their tensors). */
static const char *const state_names[] = {"momentum_buffer"};

int optimizer_state_arenas(const struct optimizer_hparams *h)
{
	return h->kind == OPTIM_SGD && h->momentum != 0.0f ? 1 : 0;
}

enum status optimizer_init(struct optimizer *opt, struct model *m,
			   const struct optimizer_hparams *h, struct diag *d)
{
	memset(opt, 0, sizeof *opt);
	opt->h = *h;
	opt->m = m;
	if (optimizer_state_arenas(h) > 0) {
		opt->momentum_buffer = model_add_arena(m, state_names[0], d);
		if (opt->momentum_buffer == NULL)
			return ST_RUNTIME;
	}
	return ST_OK;
}

void optimizer_step(struct optimizer *opt)
{
	struct model *m = opt->m;
	const struct backend_ops *ops = m->be->ops;
	const float lr = opt->h.lr, wd = opt->h.weight_decay;

	/* torch.optim.SGD: g' = g + wd p; buf = momentum buf + g'; p -= lr (buf or g'). */
	if (opt->momentum_buffer != NULL) {
		ops->axpbz(m->be->ctx, opt->momentum_buffer, opt->h.momentum, 1.0f, m->grads, wd,
			   m->params, m->nparams);
		ops->axpbz(m->be->ctx, m->params, 1.0f, -lr, opt->momentum_buffer, 0.0f, NULL,
			   m->nparams);
	} else {
		ops->axpbz(m->be->ctx, m->params, 1.0f, -lr, m->grads, wd, m->params, m->nparams);
	}
	opt->step++;
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

void optimizer_describe(const struct optimizer_hparams *h, char *buf, size_t len)
{
	snprintf(buf, len, "SGD lr %g momentum %g weight decay %g", (double)h->lr,
		 (double)h->momentum, (double)h->weight_decay);
}
