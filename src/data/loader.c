/* loader.c - one-ahead, double-buffered micro-batches. */
#include <string.h>

#include "data/loader.h"

long loader_epoch_length(size_t n, const struct loader_config *cfg)
{
	size_t samples = sampler_num_samples(n, cfg->world, cfg->sampler_drop_last);
	long nmicro = (long)(samples / (size_t)cfg->batch);

	return nmicro + (!cfg->drop_short && samples % (size_t)cfg->batch != 0);
}

enum status loader_init(struct loader *l, const struct dataset *ds, const struct loader_config *cfg,
			struct backend *be, struct diag *d)
{
	const long batch = cfg->batch;
	enum status st;

	memset(l, 0, sizeof *l);
	l->ds = ds;
	l->be = be;
	l->batch = batch;
	l->epochs = cfg->epochs;
	st = sampler_init(&l->s, ds->n, cfg->world, cfg->rank, cfg->shuffle, cfg->sampler_drop_last, cfg->seed,
			  d);
	if (st != ST_OK)
		return st;
	l->nmicro = loader_epoch_length(ds->n, cfg);
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

/* Wait until the copies queued from buffer i have run: a query first (by now the device
 * has usually run them, and a host wait would cost the step), a wait only if not. */
static enum status wait_users(struct loader *l, int i, struct diag *d)
{
	enum status st = ST_OK;

	for (int k = 0; k < l->nusers[i]; k++) {
		struct backend *be = l->users[i][k];
		int done = 0;
		enum status s = be->ops->host_poll != NULL ? be->ops->host_poll(be->ctx, i, &done, d) : ST_OK;

		if (s == ST_OK && !done)
			s = be->ops->host_wait(be->ctx, i, d);

		st = st != ST_OK ? st : s;
	}
	l->nusers[i] = 0;
	return st;
}

/* Fill buffer l->buf with the batch at (epoch, mb) following the last one prepared. */
static enum status prepare(struct loader *l, struct diag *d)
{
	long epoch = l->next_epoch, mb = l->next_mb;
	size_t first;
	int n;
	enum status st = wait_users(l, l->buf, d);

	if (st != ST_OK)
		return st;

	if (epoch < 0 || mb >= l->nmicro) {
		epoch++;
		mb = 0;
		l->fresh_epoch = 1;
	}
	if (epoch >= l->epochs) {
		l->have_ready = 0;
		l->next_epoch = epoch;
		return ST_OK;
	}
	if (l->fresh_epoch) {
		sampler_set_epoch(&l->s, (uint64_t)epoch);
		l->fresh_epoch = 0;
	}
	first = (size_t)mb * (size_t)l->batch;
	n = (int)(l->s.num_samples - first < (size_t)l->batch ? l->s.num_samples - first
							       : (size_t)l->batch);
	data_fill(l->ds, l->s.indices + first, (size_t)n, l->hx[l->buf], l->hy[l->buf]);
	l->ready = (struct batch){epoch, mb, n, l->hx[l->buf], l->hy[l->buf], l->buf};
	l->have_ready = 1;
	l->buf = 1 - l->buf;
	l->next_epoch = epoch;
	l->next_mb = mb + 1;
	return ST_OK;
}

int loader_next(struct loader *l, struct batch *b)
{
	struct diag ignore = {0};

	/* Only the first batch, or the first after a seek, is prepared here: no copy from its
	 * buffer can be queued yet, so the wait in prepare cannot fail. */
	if (!l->have_ready && l->next_epoch < l->epochs && prepare(l, &ignore) != ST_OK)
		return 0;
	if (!l->have_ready)
		return 0;
	*b = l->ready;
	l->have_ready = 0;
	return 1;
}

void loader_copied(struct loader *l, const struct batch *b, struct backend *be)
{
	int i = b->buf;

	if (be->ops->host_mark == NULL)
		return; /* copies from host memory are done when queued */
	be->ops->host_mark(be->ctx, i);
	for (int k = 0; k < l->nusers[i]; k++)
		if (l->users[i][k] == be)
			return;
	if (l->nusers[i] < LOADER_MAX_USERS)
		l->users[i][l->nusers[i]++] = be;
}

enum status loader_prefetch(struct loader *l, struct diag *d)
{
	if (!l->have_ready && l->next_epoch < l->epochs)
		return prepare(l, d);
	return ST_OK;
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
		struct diag ignore = {0};

		wait_users(l, i, &ignore); /* nothing may still read a buffer freed here */
		if (l->be != NULL) {
			l->be->ops->host_free(l->be->ctx, l->hx[i]);
			l->be->ops->host_free(l->be->ctx, l->hy[i]);
		}
		l->hx[i] = l->hy[i] = NULL;
	}
	sampler_free(&l->s);
}
