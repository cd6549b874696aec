/* model.c - MLP layout, state dict, init, forward and backward over a backend. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/model.h"
#include "core/rng.h"

void model_layout(struct model *m, const int *widths, int nlayers)
{
	size_t off = 0;

	m->nlayers = nlayers;
	memset(m->frozen, 0, sizeof m->frozen);
	for (int l = 0; l <= nlayers; l++)
		m->widths[l] = widths[l];
	for (int l = 0; l < nlayers; l++) {
		m->w_off[l] = off;
		off += (size_t)widths[l + 1] * (size_t)widths[l];
		m->b_off[l] = off;
		off += (size_t)widths[l + 1];
		/* The one place a layer's activation is chosen: ReLU between layers, none after
		 * the last (the loss module sees the raw output). */
		m->act_fn[l] = l + 1 < nlayers ? ACT_RELU : ACT_NONE;
	}
	m->nparams = off;
	m->ntrainable = off;
}

size_t model_bytes_needed(const int *widths, int nlayers, int max_batch, int state_arenas,
			  const unsigned char *frozen, int shards, const struct model_shard *sh)
{
	struct model m;
	size_t floats, maxw = 0;

	model_layout(&m, widths, nlayers);
	model_freeze(&m, frozen);
	for (int l = 0; l <= nlayers; l++)
		maxw = (size_t)widths[l] > maxw ? (size_t)widths[l] : maxw;
	/* params (or a window, and the working set), grads (+ slots and norm, or the block),
	 * optimizer state; activations, targets, two gradient buffers */
	floats = (sh != NULL && sh->sharded ? sh->param_len + sh->work : m.nparams) +
		 (sh != NULL && sh->grad_extra > 0 ? sh->grad_extra : m.nparams) +
		 (m.ntrainable + (size_t)shards - 1) / (size_t)shards * (size_t)state_arenas + MODEL_SLOTS + 1 +
		 (size_t)max_batch * ((size_t)widths[nlayers] + 2 * maxw);
	for (int l = 0; l <= nlayers; l++)
		floats += (size_t)max_batch * (size_t)widths[l];
	return floats * sizeof(float);
}

/* The parameter views: each layer in the whole parameters, or none yet (sharded: the
 * caller's hooks point them at what they gather). */
static void model_point_params(struct model *m)
{
	for (int l = 0; l < m->nlayers; l++)
		m->pw[l] = m->psharded ? NULL : m->params + m->w_off[l];
}

/* The gradient views over the gradients' memory: the whole gradient, or a block laid out
 * by the caller (grad_extra: its gw views are the caller's). */
static void model_point_grads(struct model *m)
{
	if (m->gblock) {
		m->slots = m->gmem;
		m->norm = m->gmem + MODEL_SLOTS;
		return;
	}
	m->grads = m->gmem;
	if (m->gmem == NULL)
		return; /* out of memory: model_init fails */
	for (int l = 0; l < m->nlayers; l++)
		m->gw[l] = m->grads + m->w_off[l];
	m->slots = m->grads + m->nparams;
	m->norm = m->slots + MODEL_SLOTS;
}

enum status model_init(struct model *m, struct backend *be, const int *widths, int nlayers,
		       int max_batch, struct diag *d)
{
	return model_init_shard(m, be, widths, nlayers, max_batch, NULL, d);
}

enum status model_init_shard(struct model *m, struct backend *be, const int *widths, int nlayers,
			     int max_batch, const struct model_shard *sh, struct diag *d)
{
	const struct backend_ops *ops = be->ops;
	const struct model_shard all = {0};
	int maxw = 0;

	sh = sh != NULL ? sh : &all;
	memset(m, 0, sizeof *m);
	model_layout(m, widths, nlayers);
	m->be = be;
	m->max_batch = max_batch;
	for (int l = 0; l <= nlayers; l++)
		maxw = widths[l] > maxw ? widths[l] : maxw;
	m->bytes = model_bytes_needed(widths, nlayers, max_batch, 0, NULL, 1, sh);
	m->psharded = sh->sharded;
	m->arena[0].name = "";
	m->arena[0].first = sh->sharded ? sh->param_first : 0;
	m->arena[0].len = sh->sharded ? sh->param_len : m->nparams;
	m->arena[0].whole = m->nparams;
	m->narenas = 1;
	/* a rank may hold no parameters at all (more ranks than floats): one float all the same */
	m->params = ops->alloc(be->ctx, m->arena[0].len > 0 ? m->arena[0].len : 1);
	m->arena[0].data = m->params;
	model_point_params(m);
	m->work_floats = sh->work;
	if (sh->work > 0)
		m->work = ops->alloc(be->ctx, sh->work);
	m->gblock = sh->grad_extra > 0;
	m->gfloats = MODEL_SLOTS + 1 + (m->gblock ? sh->grad_extra : m->nparams);
	m->gmem = ops->alloc(be->ctx, m->gfloats);
	model_point_grads(m);
	for (int l = 0; l <= nlayers; l++)
		m->act[l] = ops->alloc(be->ctx, (size_t)max_batch * (size_t)widths[l]);
	m->target = ops->alloc(be->ctx, (size_t)max_batch * (size_t)widths[nlayers]);
	m->dbuf[0] = ops->alloc(be->ctx, (size_t)max_batch * (size_t)maxw);
	m->dbuf[1] = ops->alloc(be->ctx, (size_t)max_batch * (size_t)maxw);
	m->own_input = m->act[0];
	m->own_target = m->target;
	if (!m->params || !m->gmem || (sh->work > 0 && !m->work) || !m->target || !m->dbuf[0] || !m->dbuf[1])
		goto out_oom;
	for (int l = 0; l <= nlayers; l++)
		if (!m->act[l])
			goto out_oom;
	return ST_OK;

out_oom:
	diag_set(d, ST_RUNTIME, "model: out of %s memory for %zu parameters%s and batch %d", ops->name,
		 sh->sharded ? sh->param_len : m->nparams, sh->sharded ? " (this rank's window)" : "", max_batch);
	model_free(m);
	return ST_RUNTIME;
}

/* Layer l's weight and bias: floats. */
static size_t layer_floats(const struct model *m, int l)
{
	return (size_t)m->widths[l + 1] * (size_t)(m->widths[l] + 1);
}

void model_freeze(struct model *m, const unsigned char *frozen)
{
	m->ntrainable = 0;
	for (int l = 0; l < m->nlayers; l++) {
		m->frozen[l] = frozen != NULL && frozen[l];
		if (!m->frozen[l])
			m->ntrainable += layer_floats(m, l);
	}
}

int model_trainable_runs(const struct model *m, size_t *off, size_t *state_off, size_t *len)
{
	size_t so = 0;
	int n = 0;

	for (int l = 0; l < m->nlayers; l++) {
		size_t size = layer_floats(m, l);

		if (m->frozen[l])
			continue;
		if (n > 0 && off[n - 1] + len[n - 1] == m->w_off[l]) {
			len[n - 1] += size;
		} else {
			off[n] = m->w_off[l];
			if (state_off != NULL)
				state_off[n] = so;
			len[n++] = size;
		}
		so += size;
	}
	return n;
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

int model_all_finite(const float *host, size_t n)
{
	int bad = 0;

	for (size_t i = 0; i < n; i++) /* no early exit: the loop vectorizes */
		bad |= !isfinite(host[i]);
	return !bad;
}

float *model_add_arena(struct model *m, const char *name, size_t first, size_t len,
		       struct diag *d)
{
	float *p;

	if (m->narenas == MODEL_MAX_ARENAS) {
		diag_set(d, ST_RUNTIME, "model: no room for state arena '%s'", name);
		return NULL;
	}
	/* an empty shard still gets a pointer of its own (a rank may own nothing) */
	p = m->be->ops->alloc(m->be->ctx, len > 0 ? len : 1);
	if (p == NULL) {
		diag_set(d, ST_RUNTIME, "model: out of %s memory for %s (%zu floats)", m->be->ops->name,
			 name, len);
		return NULL;
	}
	m->arena[m->narenas].name = name;
	m->arena[m->narenas].data = p;
	m->arena[m->narenas].len = len;
	m->arena[m->narenas].first = first;
	m->arena[m->narenas].whole = m->ntrainable;
	m->narenas++;
	m->bytes += len * sizeof(float);
	return p;
}

int model_tensors_per_arena(const struct model *m)
{
	return 2 * m->nlayers;
}

int model_state_dict(const struct model *m, int first, int last, struct model_tensor *t)
{
	int k = 0;

	for (int a = first; a < last; a++) {
		const char *prefix = a < m->narenas ? m->arena[a].name : "";
		size_t so = 0; /* a state arena leaves frozen layers out */

		for (int l = 0; l < m->nlayers; l++) {
			if (a > 0 && m->frozen[l])
				continue; /* a frozen layer has no optimizer state */
			for (int bias = 0; bias < 2; bias++, k++) {
				struct model_tensor *x = &t[k];

				snprintf(x->name, sizeof x->name, "%s%snet%d.%s", prefix,
					 *prefix ? "." : "", l + 1, bias ? "bias" : "weight");
				x->ndim = bias ? 1 : 2;
				x->shape[0] = m->widths[l + 1];
				x->shape[1] = bias ? 0 : m->widths[l];
				x->arena = a;
				/* the layer starts at w_off in the parameters, at so in a state arena */
				x->off = (a > 0 ? so : m->w_off[l]) + (bias ? m->b_off[l] - m->w_off[l] : 0);
				x->len = (size_t)m->widths[l + 1] * (bias ? 1 : (size_t)m->widths[l]);
			}
			so += layer_floats(m, l);
		}
	}
	return k;
}

size_t model_state_floats(const struct model *m, int first, int last)
{
	size_t n = 0;

	for (int a = first; a < last; a++)
		n += m->arena[a].whole;
	return n;
}

enum status model_state_to_host(const struct model *m, int first, int last, float *host,
				struct diag *d)
{
	enum status st = ST_OK;

	for (int a = first; a < last && st == ST_OK; a++) {
		st = m->be->ops->to_host(m->be->ctx, host + m->arena[a].first, m->arena[a].data,
					 m->arena[a].len, d);
		host += m->arena[a].whole;
	}
	return st;
}

void model_state_to_device(struct model *m, int first, int last, const float *host)
{
	for (int a = first; a < last; a++) {
		m->be->ops->to_device(m->be->ctx, m->arena[a].data, host + m->arena[a].first,
				      m->arena[a].len);
		host += m->arena[a].whole;
	}
}

double model_flops(const struct model *m, int n)
{
	double f = 0.0;
	int lowest = 0;

	while (lowest < m->nlayers - 1 && m->frozen[lowest])
		lowest++;
	for (int l = 0; l < m->nlayers; l++) {
		const double mac = 2.0 * n * m->widths[l] * m->widths[l + 1];

		f += mac;                                   /* forward */
		f += l >= lowest && !m->frozen[l] ? mac : 0.0; /* the weight gradient */
		f += l > lowest ? mac : 0.0;                /* the input gradient */
	}
	return f;
}

void model_read_input(struct model *m, const float *x, const float *y)
{
	/* the model never writes act[0] or target: a borrowed pair is only read */
	m->act[0] = x != NULL ? (float *)x : m->own_input;
	m->target = y != NULL ? (float *)y : m->own_target;
}

enum status model_forward(struct model *m, int n, const struct model_hooks *h)
{
	const struct backend_ops *ops = m->be->ops;
	void *c = m->be->ctx;

	for (int l = 0; l < m->nlayers; l++) {
		int in = m->widths[l], out = m->widths[l + 1];
		enum status st = h != NULL && h->before_layer != NULL ? h->before_layer(h->arg, l) : ST_OK;
		long span;

		if (st != ST_OK)
			return st;
		span = trace_begin(m->trace, TR_FORWARD, l);
		ops->linear_forward(c, m->act[l + 1], m->act[l], m->pw[l], m->pw[l] + (m->b_off[l] - m->w_off[l]),
				    n, in, out, m->act_fn[l] == ACT_RELU);
		trace_end(m->trace, span);
	}
	return ST_OK;
}

/* Layer l's panels for cap: weight rows a part, parts holding weight rows, and floats of
 * the bias riding with the last of them. */
static void panel_shape(const struct model *m, int l, size_t cap, size_t *rows, size_t *nw,
			size_t *head)
{
	const size_t in = (size_t)m->widths[l], out = (size_t)m->widths[l + 1];
	size_t last;

	*rows = cap / in > 0 ? cap / in : 1;
	*nw = (out + *rows - 1) / *rows;
	last = (out - (*nw - 1) * *rows) * in;
	*head = last < cap ? (cap - last < out ? cap - last : out) : 0;
}

int model_panel_count(const struct model *m, int l, size_t cap)
{
	const size_t out = (size_t)m->widths[l + 1];
	size_t rows, nw, head;

	panel_shape(m, l, cap, &rows, &nw, &head);
	return (int)(nw + (out - head + cap - 1) / cap);
}

void model_panel_range(const struct model *m, int l, size_t cap, int j, size_t *a, size_t *b)
{
	const size_t in = (size_t)m->widths[l], out = (size_t)m->widths[l + 1], wf = in * out;
	size_t rows, nw, head;

	panel_shape(m, l, cap, &rows, &nw, &head);
	if ((size_t)j < nw) {
		*a = (size_t)j * rows * in;
		*b = (size_t)j + 1 == nw ? wf + head : *a + rows * in;
		return;
	}
	*a = wf + head + ((size_t)j - nw) * cap;
	*b = *a + cap < wf + out ? *a + cap : wf + out;
}

/* Layer l's weight and bias gradients from dy, part by part (model_panel_range), each
 * into the place h->panel_dst gives and handed over by h->panel_done. */
static enum status backward_panels(struct model *m, int l, int n, const float *dy, float gscale,
				   const struct model_hooks *h)
{
	const struct backend_ops *ops = m->be->ops;
	const int in = m->widths[l], out = m->widths[l + 1];
	const size_t wf = (size_t)in * (size_t)out;
	const int np = model_panel_count(m, l, h->panel_cap);

	for (int j = 0; j < np; j++) {
		float *dst = h->panel_dst(h->arg, l, j);
		size_t a, b;
		enum status st;

		model_panel_range(m, l, h->panel_cap, j, &a, &b);
		if (a < wf) /* weight rows [a / in, b / in) */
			ops->linear_grad_rows(m->be->ctx, dst, NULL, dy, m->act[l], n, in, out,
					      (int)(a / (size_t)in), (int)((b < wf ? b : wf) / (size_t)in), gscale);
		if (b > wf) /* bias rows: what is left of the part */
			ops->linear_grad_rows(m->be->ctx, NULL, dst + (a < wf ? wf - a : 0), dy, m->act[l],
					      n, in, out, (int)((a > wf ? a : wf) - wf), (int)(b - wf), gscale);
		st = h->panel_done != NULL ? h->panel_done(h->arg, l, j) : ST_OK;
		if (st != ST_OK)
			return st;
	}
	return ST_OK;
}

enum status model_backward(struct model *m, int n, float gscale, int accumulate,
			   const struct model_hooks *h)
{
	const struct backend_ops *ops = m->be->ops;
	void *c = m->be->ctx;
	int cur = 0, lowest = 0;

	while (lowest < m->nlayers - 1 && m->frozen[lowest])
		lowest++; /* layers below the first trainable one need no gradient at all */
	for (int l = m->nlayers - 1; l >= lowest; l--) {
		int in = m->widths[l], out = m->widths[l + 1];
		float *dx = l > lowest ? m->dbuf[1 - cur] : NULL;
		/* the weights are read only to pass the gradient down (dx) */
		enum status st = dx != NULL && h != NULL && h->before_backward != NULL ? h->before_backward(h->arg, l)
										       : ST_OK;
		long span = trace_begin(m->trace, TR_BACKWARD, l);
		int panels = !m->frozen[l] && h != NULL && h->panel_dst != NULL &&
			     layer_floats(m, l) > h->panel_cap;
		float *dw = m->frozen[l] || panels ? NULL : m->gw[l];

		/* panels first: their reduce-scatters move while dx is computed */
		if (panels && st == ST_OK)
			st = backward_panels(m, l, n, m->dbuf[cur], gscale, h);
		if (st != ST_OK) {
			trace_end(m->trace, span);
			return st;
		}
		if (dx != NULL || dw != NULL)
			ops->linear_backward(c, dx, dw, dw != NULL ? dw + (m->b_off[l] - m->w_off[l]) : NULL,
					     m->dbuf[cur], m->act[l], m->pw[l], n, in, out,
					     gscale, accumulate);
		/* the activation before this layer is part of its backward span */
		if (dx != NULL && m->act_fn[l - 1] == ACT_RELU)
			ops->relu_backward(c, dx, m->act[l], (size_t)n * (size_t)in);
		trace_end(m->trace, span);
		st = h != NULL && h->layer_done != NULL ? h->layer_done(h->arg, l) : ST_OK;
		if (st != ST_OK)
			return st;
		if (dx != NULL)
			cur = 1 - cur;
	}
	return ST_OK;
}

void model_free(struct model *m)
{
	const struct backend_ops *ops;

	if (m->be == NULL)
		return;
	ops = m->be->ops;
	for (int a = 0; a < m->narenas; a++)
		ops->free(m->be->ctx, m->arena[a].data);
	ops->free(m->be->ctx, m->work);
	if (m->narenas == 0)
		ops->free(m->be->ctx, m->params);
	if (!m->grads_lent)
		ops->free(m->be->ctx, m->gmem);
	model_read_input(m, NULL, NULL);
	for (int l = 0; l <= m->nlayers; l++)
		ops->free(m->be->ctx, m->act[l]);
	ops->free(m->be->ctx, m->target);
	ops->free(m->be->ctx, m->dbuf[0]);
	ops->free(m->be->ctx, m->dbuf[1]);
	memset(m, 0, sizeof *m);
}

void model_move_grads(struct model *m, float *grads)
{
	memcpy(grads, m->gmem, m->gfloats * sizeof *grads);
	if (!m->grads_lent)
		m->be->ops->free(m->be->ctx, m->gmem);
	m->gmem = grads;
	m->grads_lent = 1;
	model_point_grads(m);
}

