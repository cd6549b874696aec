/* loader.c - micro-batches made ahead by worker threads into a ring of host buffers. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <sched.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/vmspace.h" /* vmspace_thread_bytes */
#include "data/loader.h"

long loader_epoch_length(size_t n, const struct loader_config *cfg)
{
	size_t samples = sampler_num_samples(n, cfg->world, cfg->sampler_drop_last);
	long nmicro = (long)(samples / (size_t)cfg->batch);

	return nmicro + (!cfg->drop_short && samples % (size_t)cfg->batch != 0);
}

static void default_fill(void *arg, const struct dataset *ds, const uint32_t *idx, size_t n, float *x,
			 float *y)
{
	data_fill(ds, idx, n, x, y);
}

/* The oldest queued batch with a chunk no worker has taken, or NULL. Under l->mu. */
static struct loader_slot *next_chunk(struct loader *l)
{
	struct loader_slot *best = NULL;

	for (int i = 0; i < LOADER_BUFFERS; i++) {
		struct loader_slot *s = &l->slot[i];

		if (s->taken < s->chunks && (best == NULL || s->seq < best->seq))
			best = s;
	}
	return best;
}

/* A worker: makes chunks of queued batches, oldest first, until told to quit. */
static void *worker(void *arg)
{
	struct loader *l = arg;
	const size_t in = (size_t)l->ds->in, out = (size_t)l->ds->out;

	pthread_mutex_lock(&l->mu);
	while (!l->quit) {
		struct loader_slot *s = next_chunk(l);
		size_t lo, hi;
		int c;

		if (s == NULL) {
			pthread_cond_wait(&l->work, &l->mu);
			continue;
		}
		c = s->taken++;
		lo = (size_t)s->b.n * (size_t)c / (size_t)s->chunks;
		hi = (size_t)s->b.n * (size_t)(c + 1) / (size_t)s->chunks;
		pthread_mutex_unlock(&l->mu);
		l->fill(l->fill_arg, l->ds, s->idx + lo, hi - lo, s->x + lo * in, s->y + lo * out);
		pthread_mutex_lock(&l->mu);
		if (++s->done == s->chunks)
			pthread_cond_broadcast(&l->made);
	}
	pthread_mutex_unlock(&l->mu);
	return NULL;
}

/* Wait until the copies queued from slot s have run: a query first (by now the device has
 * usually run them, and a host wait would cost the step), a wait only if not. */
static enum status wait_users(struct loader_slot *s, int i, struct diag *d)
{
	enum status st = ST_OK;

	for (int k = 0; k < s->nusers; k++) {
		struct backend *be = s->users[k];
		int done = 0;
		enum status e = be->ops->host_poll != NULL ? be->ops->host_poll(be->ctx, i, &done, d) : ST_OK;

		if (e == ST_OK && !done)
			e = be->ops->host_wait(be->ctx, i, d);

		st = st != ST_OK ? st : e;
	}
	s->nusers = 0;
	return st;
}

/* Wait until no worker is making rows of any batch. Under l->mu. */
static void drain(struct loader *l)
{
	for (int i = 0; i < LOADER_BUFFERS; i++)
		while (l->slot[i].done < l->slot[i].taken)
			pthread_cond_wait(&l->made, &l->mu);
}

static void stop_threads(struct loader *l)
{
	if (!l->sync_init)
		return;
	pthread_mutex_lock(&l->mu);
	l->quit = 1;
	pthread_cond_broadcast(&l->work);
	pthread_mutex_unlock(&l->mu);
	for (int i = 0; i < l->nthreads; i++)
		pthread_join(l->thread[i], NULL);
	l->nthreads = 0;
	pthread_cond_destroy(&l->made);
	pthread_cond_destroy(&l->work);
	pthread_mutex_destroy(&l->mu);
	l->sync_init = 0;
}

int loader_workers(int node_ranks)
{
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	int cpus = online > 0 ? (int)online : 2;
#ifdef CPU_COUNT
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof set, &set) == 0)
		cpus = CPU_COUNT(&set);
#endif
	if (node_ranks > 1 && cpus >= online) /* not bound: the node's ranks share its CPUs */
		cpus /= node_ranks;
	return cpus - 1 < 1 ? 1 : cpus - 1 > LOADER_THREADS ? LOADER_THREADS : cpus - 1;
}

int loader_threads(const struct dataset *ds, const struct loader_config *cfg)
{
	int threads = cfg->threads > 0 ? cfg->threads
		      : (size_t)cfg->batch * ((size_t)ds->in + (size_t)ds->out) >= LOADER_INLINE_VALUES
			      ? loader_workers(cfg->node_ranks)
			      : 0;

	return threads > LOADER_THREADS ? LOADER_THREADS : threads;
}

size_t loader_map_bytes(const struct dataset *ds, const struct loader_config *cfg)
{
	size_t row = (size_t)ds->in + (size_t)ds->out + 1; /* x, y and the index, 4 bytes each */

	return LOADER_BUFFERS * (size_t)cfg->batch * row * sizeof(float) +
	       (size_t)loader_threads(ds, cfg) * vmspace_thread_bytes();
}

enum status loader_init(struct loader *l, const struct dataset *ds, const struct loader_config *cfg,
			struct backend *be, struct diag *d)
{
	const long batch = cfg->batch;
	enum status st;
	int e, threads;

	memset(l, 0, sizeof *l);
	l->ds = ds;
	l->be = be;
	l->batch = batch;
	l->epochs = cfg->epochs;
	l->fill = cfg->fill != NULL ? cfg->fill : default_fill;
	l->fill_arg = cfg->fill_arg;
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
	l->on_device = ds->synthetic && !be->ops->host_memory && be->ops->synth != NULL;
	for (int i = 0; i < LOADER_BUFFERS; i++) {
		struct loader_slot *s = &l->slot[i];

		if (!l->on_device) {
			s->x = be->ops->host_alloc(be->ctx, (size_t)batch * (size_t)ds->in);
			s->y = be->ops->host_alloc(be->ctx, (size_t)batch * (size_t)ds->out);
		}
		s->idx = (uint32_t *)be->ops->host_alloc(be->ctx, (size_t)batch); /* 4-byte words */
		if ((!l->on_device && (s->x == NULL || s->y == NULL)) || s->idx == NULL) {
			st = diag_set(d, ST_RUNTIME, "loader: out of host memory for batches of %ld", batch);
			goto out;
		}
	}
	if (pthread_mutex_init(&l->mu, NULL) != 0 || pthread_cond_init(&l->work, NULL) != 0 ||
	    pthread_cond_init(&l->made, NULL) != 0) {
		st = diag_set(d, ST_RUNTIME, "loader: cannot create its locks");
		goto out;
	}
	l->sync_init = 1;
	threads = l->on_device ? 0 : loader_threads(ds, cfg);
	for (; l->nthreads < threads; l->nthreads++) {
		e = pthread_create(&l->thread[l->nthreads], NULL, worker, l);
		if (e != 0) {
			st = diag_set(d, ST_RUNTIME, "loader: pthread_create: %s", strerror(e));
			goto out;
		}
	}
	if (l->on_device) {
		/* The backend sizes its device copy of the indices now, for a whole batch: a step
		 * captured as a device graph later could not allocate it. */
		memset(l->slot[0].idx, 0, (size_t)batch * sizeof *l->slot[0].idx);
		be->ops->synth(be->ctx, NULL, NULL, &ds->synth, l->slot[0].idx, (int)batch);
		loader_copied(l, &(struct batch){.buf = 0}, be);
	}
	l->next_epoch = -1; /* set_epoch(0) on the first batch queued */
	return ST_OK;
out:
	loader_free(l);
	return st;
}

/* Queue the batch following the last one queued into its buffer, once the copies queued
 * from that buffer have run; *queued says whether there was one. */
static enum status queue(struct loader *l, int *queued, struct diag *d)
{
	long epoch = l->next_epoch, mb = l->next_mb;
	int i = (int)(l->tail % LOADER_BUFFERS);
	struct loader_slot *s = &l->slot[i];
	size_t first;
	int n;
	enum status st;

	*queued = 0;
	if (l->end)
		return ST_OK;
	st = wait_users(s, i, d);
	if (st != ST_OK)
		return st;
	if (epoch < 0 || mb >= l->nmicro) {
		epoch++;
		mb = 0;
		l->fresh_epoch = 1;
	}
	if (epoch >= l->epochs) {
		l->end = 1;
		return ST_OK;
	}
	if (l->fresh_epoch) {
		sampler_set_epoch(&l->s, (uint64_t)epoch);
		l->fresh_epoch = 0;
	}
	first = (size_t)mb * (size_t)l->batch;
	n = (int)(l->s.num_samples - first < (size_t)l->batch ? l->s.num_samples - first
							       : (size_t)l->batch);
	/* The indices are copied: the sampler reshuffles at the next epoch while the workers
	 * may still be making this batch. */
	memcpy(s->idx, l->s.indices + first, (size_t)n * sizeof *s->idx);
	pthread_mutex_lock(&l->mu);
	s->b = (struct batch){epoch, mb, n, s->x, s->y, s->idx, l->on_device ? &l->ds->synth : NULL, i, 0.0};
	s->seq = l->tail++;
	s->chunks = l->on_device || l->nthreads == 0 ? 0 : n < l->nthreads ? n : l->nthreads;
	s->taken = s->done = 0;
	pthread_cond_broadcast(&l->work);
	pthread_mutex_unlock(&l->mu);
	if (!l->on_device && l->nthreads == 0) /* made here, now */
		l->fill(l->fill_arg, l->ds, s->idx, (size_t)n, s->x, s->y);
	l->next_epoch = epoch;
	l->next_mb = mb + 1;
	*queued = 1;
	return ST_OK;
}

int loader_next(struct loader *l, struct batch *b)
{
	struct diag ignore = {0};
	struct loader_slot *s;
	int queued = 1;

	/* Only the first batch, or the first after a seek (or without loader_prefetch), is
	 * queued here, and waited for: no copy from its buffer can be queued yet, so the
	 * wait in queue cannot fail. */
	if (l->head == l->tail) {
		double t0 = clock_now();
		enum status st = queue(l, &queued, &ignore);

		l->waited_s += l->nthreads == 0 ? clock_now() - t0 : 0.0; /* made here */
		if (st != ST_OK)
			return 0;
	}
	if (l->head == l->tail)
		return 0;
	s = &l->slot[l->head % LOADER_BUFFERS];
	pthread_mutex_lock(&l->mu);
	if (s->done < s->chunks) {
		double t0 = clock_now();

		while (s->done < s->chunks)
			pthread_cond_wait(&l->made, &l->mu);
		l->waited_s += clock_now() - t0;
	}
	pthread_mutex_unlock(&l->mu);
	*b = s->b;
	b->waited_s = l->waited_s;
	l->head++;
	return 1;
}

void loader_copied(struct loader *l, const struct batch *b, struct backend *be)
{
	struct loader_slot *s = &l->slot[b->buf];

	if (be->ops->host_mark == NULL)
		return; /* copies from host memory are done when queued */
	be->ops->host_mark(be->ctx, b->buf);
	for (int k = 0; k < s->nusers; k++)
		if (s->users[k] == be)
			return;
	if (s->nusers < LOADER_MAX_USERS)
		s->users[s->nusers++] = be;
}

enum status loader_prefetch(struct loader *l, struct diag *d)
{
	int queued = 1;

	/* The buffer in use (batch head - 1) is left alone: up to LOADER_BUFFERS - 1 ahead. */
	while (queued && l->tail < l->head + LOADER_BUFFERS - 1) {
		enum status st = queue(l, &queued, d);

		if (st != ST_OK)
			return st;
	}
	return ST_OK;
}

void loader_seek(struct loader *l, long epoch, long mb)
{
	pthread_mutex_lock(&l->mu);
	drain(l);
	for (int i = 0; i < LOADER_BUFFERS; i++)
		l->slot[i].chunks = l->slot[i].taken = l->slot[i].done = 0; /* nothing queued */
	pthread_mutex_unlock(&l->mu);
	if (mb >= l->nmicro) {
		epoch++;
		mb = 0;
	}
	l->head = l->tail = 0;
	l->end = 0;
	l->next_epoch = epoch;
	l->next_mb = mb;
	l->fresh_epoch = 1;
}

void loader_free(struct loader *l)
{
	stop_threads(l); /* first: no worker writes a buffer freed here */
	for (int i = 0; i < LOADER_BUFFERS; i++) {
		struct loader_slot *s = &l->slot[i];
		struct diag ignore = {0};

		wait_users(s, i, &ignore); /* nothing may still read a buffer freed here */
		if (l->be != NULL) {
			l->be->ops->host_free(l->be->ctx, s->x);
			l->be->ops->host_free(l->be->ctx, s->y);
			l->be->ops->host_free(l->be->ctx, (float *)s->idx);
		}
		s->x = s->y = NULL;
		s->idx = NULL;
	}
	sampler_free(&l->s);
}
