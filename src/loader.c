/* loader.c - one-ahead, double-buffered micro-batches. */
#include <string.h>

#include "loader.h"

enum status loader_init(struct loader *l, const struct dataset *ds, int world, int rank,
			int shuffle, int sampler_drop_last, uint64_t seed, long batch,
			int drop_short, long epochs, struct backend *be, struct diag *d)
{
	enum status st;

	memset(l, 0, sizeof *l);
	l->ds = ds;
	l->be = be;
	l->batch = batch;
	l->epochs = epochs;
	st = sampler_init(&l->s, ds->n, world, rank, shuffle, sampler_drop_last, seed, d);
	if (st != ST_OK)
		return st;
	l->nmicro = (long)(l->s.num_samples / (size_t)batch);
	if (!drop_short && l->s.num_samples % (size_t)batch != 0)
		l->nmicro++;
	if (l->nmicro == 0) {
		st = diag_set(d, ST_USAGE, "--drop-last: %zu samples make no full batch of %ld",
			      l->s.num_samples, batch);
		goto out;
	}
	for (int i = 0; i < 2; i++) {
		l->hx[i] = be->ops->host_alloc(be->ctx, (size_t)batch * (size_t)ds->in);
		l->hy[i] = be->ops->host_alloc(be->ctx, (size_t)batch * (size_t)ds->out);
		if (l->hx[i] == NULL || l->hy[i] == NULL) {
			st = diag_set(d, ST_RUNTIME, "loader: out of host memory for batches of %ld", batch);
			goto out;
		}
	}
	l->next_epoch = -1; /* set_epoch(0) on the first prepare */
	return ST_OK;
out:
	loader_free(l);
	return st;
}

/* Fill buffer l->buf with the batch at (epoch, mb) following the last one prepared. */
static void prepare(struct loader *l)
{
	long epoch = l->next_epoch, mb = l->next_mb;
	size_t first;
	int n;

	if (epoch < 0 || mb >= l->nmicro) {
		epoch++;
		mb = 0;
		l->fresh_epoch = 1;
	}
	if (epoch >= l->epochs) {
		l->have_ready = 0;
		l->next_epoch = epoch;
		return;
	}
	if (l->fresh_epoch) {
		sampler_set_epoch(&l->s, (uint64_t)epoch);
		l->fresh_epoch = 0;
	}
	first = (size_t)mb * (size_t)l->batch;
	n = (int)(l->s.num_samples - first < (size_t)l->batch ? l->s.num_samples - first
							       : (size_t)l->batch);
	data_fill(l->ds, l->s.indices + first, (size_t)n, l->hx[l->buf], l->hy[l->buf]);
	l->ready = (struct batch){epoch, mb, n, l->hx[l->buf], l->hy[l->buf]};
	l->have_ready = 1;
	l->buf = 1 - l->buf;
	l->next_epoch = epoch;
	l->next_mb = mb + 1;
}

int loader_next(struct loader *l, struct batch *b)
{
	if (!l->have_ready && l->next_epoch < l->epochs)
		prepare(l);
	if (!l->have_ready)
		return 0;
	*b = l->ready;
	l->have_ready = 0;
	return 1;
}

void loader_prefetch(struct loader *l)
{
	if (!l->have_ready && l->next_epoch < l->epochs)
		prepare(l);
}

void loader_seek(struct loader *l, long epoch, long mb)
{
	if (mb >= l->nmicro) {
		epoch++;
		mb = 0;
	}
	l->next_epoch = epoch;
	l->next_mb = mb;
	l->fresh_epoch = 1;
	l->have_ready = 0;
}

void loader_free(struct loader *l)
{
	for (int i = 0; i < 2; i++) {
		if (l->be != NULL) {
			l->be->ops->host_free(l->be->ctx, l->hx[i]);
			l->be->ops->host_free(l->be->ctx, l->hy[i]);
		}
		l->hx[i] = l->hy[i] = NULL;
	}
	sampler_free(&l->s);
}
