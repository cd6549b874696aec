/* zero.c - the ZeRO shard plan: owned ranges, bucket cuts, optimizer pieces. */
#include <string.h>

#include "model/zero.h"

size_t zero_cut(size_t total, int q, int size)
{
	/* total q fits 64 bits for any model that fits in memory */
	return (size_t)((unsigned long long)total * (unsigned long long)q / (unsigned long long)size);
}

void zero_plan_init(struct zero_plan *z, const struct model *m, int rank, int size)
{
	size_t off[MODEL_MAX_LAYERS], so[MODEL_MAX_LAYERS], len[MODEL_MAX_LAYERS];
	int nruns = model_trainable_runs(m, off, so, len);

	memset(z, 0, sizeof *z);
	z->rank = rank;
	z->size = size;
	z->total = m->ntrainable;
	z->lo = zero_cut(z->total, rank, size);
	z->hi = zero_cut(z->total, rank + 1, size);
	/* The runs intersected with [lo, hi): each piece is where they overlap. */
	for (int r = 0; r < nruns; r++) {
		size_t a = so[r] > z->lo ? so[r] : z->lo;
		size_t b = so[r] + len[r] < z->hi ? so[r] + len[r] : z->hi;

		if (a >= b)
			continue;
		z->piece[z->npieces++] = (struct zero_piece){off[r] + (a - so[r]), a - z->lo, b - a};
	}
}

/* The trainable index of layer l's first parameter: the trainable layers before it. */
static size_t trainable_index(const struct model *m, int l)
{
	size_t t = 0;

	for (int k = 0; k < l; k++)
		if (!m->frozen[k])
			t += (size_t)m->widths[k + 1] * (size_t)(m->widths[k] + 1);
	return t;
}

size_t zero_shard_room(const struct model *m, int size)
{
	size_t most = 0;

	for (int q = 0; q < size; q++) {
		size_t n = zero_cut(m->ntrainable, q + 1, size) - zero_cut(m->ntrainable, q, size);

		most = n > most ? n : most;
	}
	return most;
}

size_t zero_param_cut(const struct model *m, int q, int size)
{
	size_t t, acc = 0;

	if (q <= 0)
		return 0;
	if (q >= size)
		return m->nparams;
	t = zero_cut(m->ntrainable, q, size); /* < ntrainable for q < size */
	for (int l = 0; l < m->nlayers; l++) {
		size_t lf = (size_t)m->widths[l + 1] * (size_t)(m->widths[l] + 1);

		if (m->frozen[l])
			continue;
		if (t < acc + lf)
			return m->w_off[l] + (t - acc);
		acc += lf;
	}
	return m->nparams;
}

size_t zero_param_room(const struct model *m, int size)
{
	size_t most = 0;

	for (int q = 0; q < size; q++) {
		size_t n = zero_param_cut(m, q + 1, size) - zero_param_cut(m, q, size);

		most = n > most ? n : most;
	}
	return most;
}

size_t zero_arena_cut(const struct model *m, int arena, int stage, int q, int size)
{
	const size_t whole = arena == 0 ? m->nparams : m->ntrainable;

	if (q >= size)
		return whole;
	if (arena == 0)
		return stage == 3 ? zero_param_cut(m, q, size) : 0;
	return stage > 0 ? zero_cut(m->ntrainable, q, size) : 0;
}

size_t zero_bucket_start(const struct model *m, const struct bucket *b)
{
	/* a panel starts inside its layer */
	return trainable_index(m, b->lo) + (b->off - m->w_off[b->lo]);
}

void zero_range_cuts(const struct zero_plan *z, size_t t0, size_t len, size_t *cuts)
{
	for (int q = 0; q <= z->size; q++) {
		size_t c = zero_cut(z->total, q, z->size);

		cuts[q] = c <= t0 ? 0 : c - t0 >= len ? len : c - t0;
	}
}

void zero_bucket_cuts(const struct zero_plan *z, const struct model *m, const struct bucket *b,
		      size_t len, size_t *cuts)
{
	/* whole consecutive trainable layers, or a range of one: contiguous in the index space */
	zero_range_cuts(z, zero_bucket_start(m, b), len, cuts);
}
