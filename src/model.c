/* model.c - MLP layout, init, forward and backward over a backend. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model.h"
#include "rng.h"

void model_layout(struct model *m, const int *widths, int nlayers)
{
	size_t off = 0;

	m->nlayers = nlayers;
	for (int l = 0; l <= nlayers; l++)
		m->widths[l] = widths[l];
	for (int l = 0; l < nlayers; l++) {
		m->w_off[l] = off;
		off += (size_t)widths[l + 1] * (size_t)widths[l];
		m->b_off[l] = off;
		off += (size_t)widths[l + 1];
	}
	m->nparams = off;
}

size_t model_bytes_needed(const int *widths, int nlayers, int max_batch, int with_momentum)
{
	struct model m;
	size_t floats, maxw = 0;

	model_layout(&m, widths, nlayers);
	for (int l = 0; l <= nlayers; l++)
		maxw = (size_t)widths[l] > maxw ? (size_t)widths[l] : maxw;
	/* params, grads (+ slots), momentum; activations, targets, two gradient buffers */
	floats = m.nparams * (2 + (with_momentum != 0)) + MODEL_SLOTS +
		 (size_t)max_batch * ((size_t)widths[nlayers] + 2 * maxw);
	for (int l = 0; l <= nlayers; l++)
		floats += (size_t)max_batch * (size_t)widths[l];
	return floats * sizeof(float);
}

enum status model_init(struct model *m, struct backend *be, const int *widths, int nlayers,
		       int max_batch, int with_momentum, struct diag *d)
{
	const struct backend_ops *ops = be->ops;
	int maxw = 0;

	memset(m, 0, sizeof *m);
	model_layout(m, widths, nlayers);
	m->be = be;
	m->max_batch = max_batch;
	for (int l = 0; l <= nlayers; l++)
		maxw = widths[l] > maxw ? widths[l] : maxw;
	m->bytes = model_bytes_needed(widths, nlayers, max_batch, with_momentum);
	m->params = ops->alloc(be->ctx, m->nparams);
	m->grads = ops->alloc(be->ctx, m->nparams + MODEL_SLOTS);
	if (with_momentum)
		m->mom = ops->alloc(be->ctx, m->nparams);
	for (int l = 0; l <= nlayers; l++)
		m->act[l] = ops->alloc(be->ctx, (size_t)max_batch * (size_t)widths[l]);
	m->target = ops->alloc(be->ctx, (size_t)max_batch * (size_t)widths[nlayers]);
	m->dbuf[0] = ops->alloc(be->ctx, (size_t)max_batch * (size_t)maxw);
	m->dbuf[1] = ops->alloc(be->ctx, (size_t)max_batch * (size_t)maxw);
	if (!m->params || !m->grads || (with_momentum && !m->mom) || !m->target || !m->dbuf[0] ||
	    !m->dbuf[1])
		goto out_oom;
	for (int l = 0; l <= nlayers; l++)
		if (!m->act[l])
			goto out_oom;
	return ST_OK;

out_oom:
	diag_set(d, ST_RUNTIME, "model: out of %s memory for %zu parameters and batch %d",
		 ops->name, m->nparams, max_batch);
	model_free(m);
	return ST_RUNTIME;
}

void model_init_host(const struct model *m, uint64_t seed, float *host)
{
	uint64_t key = rng_key(seed, RNG_INIT);

	for (int l = 0; l < m->nlayers; l++) {
		float bound = 1.0f / sqrtf((float)m->widths[l]);
		size_t end = m->b_off[l] + (size_t)m->widths[l + 1];

		for (size_t p = m->w_off[l]; p < end; p++)
			host[p] = bound * (2.0f * rng_u01(key, p) - 1.0f);
	}
}

void model_tensor_name(int k, char *buf, size_t len)
{
	snprintf(buf, len, "net%d.%s", k / 2 + 1, k % 2 ? "bias" : "weight");
}

void model_forward(struct model *m, int n)
{
	const struct backend_ops *ops = m->be->ops;
	void *c = m->be->ctx;

	for (int l = 0; l < m->nlayers; l++) {
		int in = m->widths[l], out = m->widths[l + 1];

		ops->linear_forward(c, m->act[l + 1], m->act[l], m->params + m->w_off[l],
				    m->params + m->b_off[l], n, in, out, l + 1 < m->nlayers);
	}
}

void model_backward(struct model *m, int n, int accumulate, void (*hook)(void *arg, int layer),
		    void *arg)
{
	const struct backend_ops *ops = m->be->ops;
	void *c = m->be->ctx;
	int cur = 0;

	for (int l = m->nlayers - 1; l >= 0; l--) {
		int in = m->widths[l], out = m->widths[l + 1];
		float *dx = l > 0 ? m->dbuf[1 - cur] : NULL;

		ops->linear_backward(c, dx, m->grads + m->w_off[l], m->grads + m->b_off[l],
				     m->dbuf[cur], m->act[l], m->params + m->w_off[l], n, in, out,
				     accumulate);
		if (hook != NULL)
			hook(arg, l);
		if (dx != NULL) {
			ops->relu_backward(c, dx, m->act[l], (size_t)n * (size_t)in);
			cur = 1 - cur;
		}
	}
}

int model_plan_buckets(const struct model *m, size_t cap, size_t first_cap, struct bucket *b)
{
	int nb = 0;
	size_t size = 0, limit = first_cap;
	int hi = m->nlayers - 1;

	for (int l = m->nlayers - 1; l >= 0; l--) {
		size += (size_t)m->widths[l + 1] * (size_t)(m->widths[l] + 1);
		if (size >= limit || l == 0) {
			b[nb].lo = l;
			b[nb].hi = hi;
			b[nb].off = m->w_off[l];
			b[nb].len = size + (hi == m->nlayers - 1 ? MODEL_SLOTS : 0);
			nb++;
			hi = l - 1;
			size = 0;
			limit = cap;
		}
	}
	return nb;
}

void model_free(struct model *m)
{
	const struct backend_ops *ops;

	if (m->be == NULL)
		return;
	ops = m->be->ops;
	ops->free(m->be->ctx, m->params);
	ops->free(m->be->ctx, m->grads);
	ops->free(m->be->ctx, m->mom);
	for (int l = 0; l <= m->nlayers; l++)
		ops->free(m->be->ctx, m->act[l]);
	ops->free(m->be->ctx, m->target);
	ops->free(m->be->ctx, m->dbuf[0]);
	ops->free(m->be->ctx, m->dbuf[1]);
	memset(m, 0, sizeof *m);
}
