/* plan.c - the gradient plan: buckets, the slots' place, ZeRO's cuts, ZeRO-2's parts and
 * ZeRO-3's windows of the parameters. */
#include <stdlib.h>
#include <string.h>

#include "train/plan.h"
#include "model/zero.h" /* zero_plan_init, zero_bucket_cuts, zero_bucket_start, zero_shard_room, zero_param_cut */

/* Layer l's weight and bias: floats. */
static size_t layer_floats(const struct model *m, int l)
{
	return (size_t)m->widths[l + 1] * (size_t)(m->widths[l] + 1);
}

int grad_plan_cut(const struct model *m, size_t cap, size_t first_cap, int parts, int first, int room,
		  struct bucket *b)
{
	int nb = 0, hi = m->nlayers - 1;
	size_t size = 0, limit = first_cap;

/* Entry nb, kept when it is one of those asked for. */
#define EMIT(...)                                                    \
	do {                                                         \
		if (nb >= first && nb - first < room)                \
			b[nb - first] = (struct bucket){__VA_ARGS__}; \
		nb++;                                                \
	} while (0)
	for (int l = m->nlayers - 1; l >= 0; l--) {
		size_t lf = layer_floats(m, l);

		if (m->frozen[l]) {
			hi = l - 1;
			continue;
		}
		if (parts && lf > cap) {
			int np = model_panel_count(m, l, cap);

			if (size > 0) /* the layers after it: a bucket of their own */
				EMIT(.lo = l + 1, .hi = hi, .off = m->w_off[l + 1], .len = size);
			for (int j = 0; j < np; j++) {
				size_t a, e;

				model_panel_range(m, l, cap, j, &a, &e);
				EMIT(.lo = l, .hi = l, .off = m->w_off[l] + a, .len = e - a, .panel = 1);
			}
			hi = l - 1;
			size = 0;
			limit = cap;
			continue;
		}
		size += lf;
		if (size >= limit || l == 0 || m->frozen[l - 1]) {
			EMIT(.lo = l, .hi = hi, .off = m->w_off[l],
			     .len = size + (!parts && hi == m->nlayers - 1 ? MODEL_SLOTS : 0));
			hi = l - 1;
			size = 0;
			limit = cap;
		}
	}
	if (!parts && m->frozen[m->nlayers - 1])
		EMIT(.lo = -1, .hi = -1, .off = m->nparams, .len = MODEL_SLOTS);
#undef EMIT
	return nb;
}

const size_t *grad_plan_cuts(const struct grad_plan *p, int k)
{
	return p->cuts + (size_t)k * (size_t)(p->cfg.size + 1);
}

const size_t *grad_plan_part_cuts(const struct grad_plan *p, int k)
{
	return p->pcuts + (size_t)k * (size_t)(p->cfg.size + 1);
}

const size_t *grad_plan_layer_cuts(const struct grad_plan *p, int l)
{
	return p->lcuts + (size_t)l * (size_t)(p->cfg.size + 1);
}

size_t grad_plan_block_floats(const struct grad_plan *p)
{
	return p->poolb[0] + p->poolb[1] + p->shard_room;
}

void grad_plan_shard(const struct grad_plan *p, struct model_shard *sh)
{
	const int r = p->cfg.rank;

	*sh = (struct model_shard){0};
	if (p->cfg.zero >= 2)
		sh->grad_extra = grad_plan_block_floats(p);
	if (p->cfg.zero == 3) {
		sh->param_first = p->pwin[r];
		sh->param_len = p->pwin[r + 1] - p->pwin[r];
		sh->sharded = 1;
		sh->work = p->gather_at[GRAD_PLAN_GATHERED];
	}
}

/* The buckets, the slots' place, what each layer completes, the streaming variant. */
static void plan_buckets(struct grad_plan *p, const struct model *m)
{
	const struct grad_plan_cfg *g = &p->cfg;
	const int room = MODEL_MAX_LAYERS + 1;
	int frozen = 0;

	p->nbuckets = grad_plan_cut(m, g->cap, g->first_cap, 0, 0, room, p->bucket);
	/* ZeRO and compression: the slots in an all-reduce of their own (float32), so every
	 * bucket is pure gradient. The first bucket holds the last layer and the slots. */
	if ((g->zero || g->compress) && !m->frozen[m->nlayers - 1]) {
		p->bucket[0].len -= MODEL_SLOTS;
		p->bucket[p->nbuckets++] = (struct bucket){.lo = -1, .hi = -1, .off = m->nparams,
							   .len = MODEL_SLOTS};
	}
	p->slot_bucket = -1;
	for (int l = 0; l < m->nlayers; l++) {
		p->closes[l] = -1;
		frozen |= m->frozen[l];
	}
	for (int k = 0; k < p->nbuckets; k++) {
		if (p->bucket[k].lo >= 0)
			p->closes[p->bucket[k].lo] = k;
		else
			p->slot_bucket = k;
		p->reduced += p->bucket[k].len;
	}
	p->ngrad = p->slot_bucket >= 0 ? p->slot_bucket : p->nbuckets; /* the slots' is listed last */
	while (p->lowest < m->nlayers - 1 && m->frozen[p->lowest])
		p->lowest++;
	if (!frozen && !g->zero && !g->compress)
		p->nsbuckets = grad_plan_cut(m, g->first_cap, g->first_cap, 0, 0, room, p->sbucket);
}

/* ZeRO-2's parts: their cuts, first trainable indices, the pool buffers, and which layer
 * completes which. */
static enum status plan_parts(struct grad_plan *p, const struct model *m, const struct zero_plan *z,
			      struct diag *d)
{
	const struct grad_plan_cfg *g = &p->cfg;
	size_t np;

	p->nparts = grad_plan_cut(m, g->cap, g->first_cap, 1, 0, 0, NULL);
	np = p->nparts > 0 ? (size_t)p->nparts : 1;
	p->part = malloc(np * sizeof *p->part);
	p->pcuts = malloc(np * (size_t)(g->size + 1) * sizeof *p->pcuts);
	p->pt0 = malloc(np * sizeof *p->pt0);
	if (p->part == NULL || p->pcuts == NULL || p->pt0 == NULL)
		return diag_set(d, ST_RUNTIME, "plan: out of host memory for %d gradient parts", p->nparts);
	grad_plan_cut(m, g->cap, g->first_cap, 1, 0, p->nparts, p->part);
	for (int l = 0; l < m->nlayers; l++)
		p->pfirst[l] = p->pcloses[l] = -1;
	for (int k = 0; k < p->nparts; k++) {
		const struct bucket *b = &p->part[k];

		zero_bucket_cuts(z, m, b, b->len, p->pcuts + (size_t)k * (size_t)(g->size + 1));
		p->pt0[k] = zero_bucket_start(m, b);
		p->poolb[k % 2] = b->len > p->poolb[k % 2] ? b->len : p->poolb[k % 2];
		if (!b->panel) {
			p->pcloses[b->lo] = k;
		} else if (p->pfirst[b->lo] < 0) {
			p->pfirst[b->lo] = k;
			p->npaneled++;
		}
	}
	return ST_OK;
}

/* ZeRO-3's windows of the parameters, each layer's all-gather cuts (where the windows cut
 * it) and the working buffers' size. */
static enum status plan_params(struct grad_plan *p, const struct model *m, struct diag *d)
{
	const int size = p->cfg.size;

	p->pwin = malloc((size_t)(size + 1) * sizeof *p->pwin);
	p->lcuts = malloc((size_t)m->nlayers * (size_t)(size + 1) * sizeof *p->lcuts);
	if (p->pwin == NULL || p->lcuts == NULL)
		return diag_set(d, ST_RUNTIME, "plan: out of host memory for the parameters' cuts");
	for (int q = 0; q <= size; q++)
		p->pwin[q] = zero_param_cut(m, q, size);
	p->param_room = zero_param_room(m, size);
	for (int l = 0; l < m->nlayers; l++) {
		size_t *cu = p->lcuts + (size_t)l * (size_t)(size + 1);
		const size_t a = m->w_off[l], n = layer_floats(m, l);

		for (int q = 0; q <= size; q++)
			cu[q] = p->pwin[q] <= a ? 0 : p->pwin[q] - a >= n ? n : p->pwin[q] - a;
		p->gather_floats = n > p->gather_floats ? n : p->gather_floats;
		if (n > p->gather_at[l % GRAD_PLAN_GATHERED + 1]) /* sizes first, offsets below */
			p->gather_at[l % GRAD_PLAN_GATHERED + 1] = n;
	}
	for (int i = 1; i <= GRAD_PLAN_GATHERED; i++)
		p->gather_at[i] += p->gather_at[i - 1];
	return ST_OK;
}

enum status grad_plan_init(struct grad_plan *p, const struct model *m, const struct grad_plan_cfg *cfg,
			   struct diag *d)
{
	struct zero_plan z;

	memset(p, 0, sizeof *p);
	p->cfg = *cfg;
	plan_buckets(p, m);
	if (!cfg->zero)
		return ST_OK;
	zero_plan_init(&z, m, cfg->rank, cfg->size);
	p->tlo = z.lo;
	p->shard_room = zero_shard_room(m, cfg->size);
	/* room for every bucket's cuts, the slots' own included */
	p->cuts = malloc((size_t)(p->nbuckets + 1) * (size_t)(cfg->size + 1) * sizeof *p->cuts);
	if (p->cuts == NULL)
		return diag_set(d, ST_RUNTIME, "plan: out of host memory for the buckets' cuts");
	for (int k = 0; k < p->ngrad; k++) /* the all-gathers' (and ZeRO-1's reduce-scatters') */
		zero_bucket_cuts(&z, m, &p->bucket[k], p->bucket[k].len,
				 p->cuts + (size_t)k * (size_t)(cfg->size + 1));
	if (cfg->zero == 3 && plan_params(p, m, d) != ST_OK)
		return ST_RUNTIME;
	if (cfg->zero >= 2)
		return plan_parts(p, m, &z, d);
	return ST_OK;
}

void grad_plan_free(struct grad_plan *p)
{
	free(p->cuts);
	free(p->part);
	free(p->pcuts);
	free(p->pt0);
	free(p->pwin);
	free(p->lcuts);
	p->cuts = p->pcuts = p->pt0 = p->pwin = p->lcuts = NULL;
	p->part = NULL;
}
