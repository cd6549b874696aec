/* test_loader.c - the micro-batch stream: coverage, the short tail, resuming, prefetching. */
#define _GNU_SOURCE /* sched_setaffinity */
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "core/vmspace.h"
#include "data/data.h"
#include "data/loader.h"

enum { N = 10, IN = 3, OUT = 2 };

static struct backend be;
static struct dataset ds;

static int setup(void **state)
{
	struct backend_config cfg = {0, 0};
	struct diag d = {0};

	if (backend_init(&be, &backend_cpu_ops, &cfg, &d) != ST_OK)
		return -1;
	return data_init_synthetic(&ds, 3, 0, N, IN, OUT, 0, &d) == ST_OK ? 0 : -1;
}

static int teardown(void **state)
{
	data_free(&ds);
	backend_free(&be);
	return 0;
}

/* Row i of batch b is sample idx[i]. */
static void assert_rows(const struct batch *b, const uint32_t *idx)
{
	float x[IN], y[OUT];

	for (int i = 0; i < b->n; i++) {
		data_fill(&ds, &idx[i], 1, x, y);
		assert_memory_equal(b->x + (size_t)i * IN, x, sizeof x);
		assert_memory_equal(b->y + (size_t)i * OUT, y, sizeof y);
	}
}

static void test_loader_without_shuffle_walks_the_data_in_order_each_epoch(void **state)
{
	const uint32_t idx[N] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
	const int sizes[3] = {4, 4, 2};
	struct loader l;
	struct batch b;
	struct diag d = {0};

	assert_int_equal(loader_init(&l, &ds, &(struct loader_config){.world = 1, .rank = 0, .batch = 4, .epochs = 2}, &be, &d), ST_OK);
	assert_int_equal(l.nmicro, 3);
	for (int e = 0; e < 2; e++) {
		for (int k = 0; k < 3; k++) {
			assert_true(loader_next(&l, &b));
			assert_int_equal(b.epoch, e);
			assert_int_equal(b.mb, k);
			assert_int_equal(b.n, sizes[k]);
			assert_rows(&b, idx + 4 * k);
		}
	}
	assert_false(loader_next(&l, &b));
	loader_free(&l);
	loader_free(&l);
}

static void test_loader_drop_short_drops_the_last_short_batch(void **state)
{
	struct loader l;
	struct batch b;
	struct diag d = {0};
	int count = 0;

	assert_int_equal(loader_init(&l, &ds, &(struct loader_config){.world = 1, .rank = 0, .batch = 4, .drop_short = 1, .epochs = 1}, &be, &d), ST_OK);
	assert_int_equal(l.nmicro, 2);
	while (loader_next(&l, &b)) {
		assert_int_equal(b.n, 4);
		count++;
	}
	assert_int_equal(count, 2);
	loader_free(&l);
}

static void test_loader_refuses_a_batch_larger_than_the_shard_when_dropping(void **state)
{
	struct loader l;
	struct diag d = {0};

	assert_int_equal(loader_init(&l, &ds, &(struct loader_config){.world = 1, .rank = 0, .batch = 11, .drop_short = 1, .epochs = 1}, &be, &d), ST_USAGE);
	assert_string_equal(d.msg, "--drop-last: 10 samples make no full batch of 11");
}

/* The batches of a 3-epoch shuffled run on rank 1 of 2, as (epoch, mb, first x) triples. */
static int stream(long seek_epoch, long seek_mb, int prefetch, float *first, long *ep, long *mb)
{
	struct loader l;
	struct batch b;
	struct diag d = {0};
	int n = 0;

	assert_int_equal(loader_init(&l, &ds, &(struct loader_config){.world = 2, .rank = 1, .shuffle = 1, .seed = 7, .batch = 2, .epochs = 3}, &be, &d), ST_OK);
	loader_seek(&l, seek_epoch, seek_mb);
	while (loader_next(&l, &b)) {
		first[n] = b.x[0];
		ep[n] = b.epoch;
		mb[n] = b.mb;
		n++;
		if (prefetch)
			assert_int_equal(loader_prefetch(&l, &d), ST_OK);
	}
	loader_free(&l);
	return n;
}

static void test_loader_prefetch_does_not_change_the_stream(void **state)
{
	float a[16], b[16];
	long ea[16], eb[16], ma[16], mb[16];
	int na = stream(0, 0, 0, a, ea, ma), nb = stream(0, 0, 1, b, eb, mb);

	assert_int_equal(na, 9); /* 5 samples per rank, batches of 2: 3 per epoch */
	assert_int_equal(nb, na);
	assert_memory_equal(a, b, (size_t)na * sizeof *a);
	assert_memory_equal(ea, eb, (size_t)na * sizeof *ea);
}

static void test_loader_seek_resumes_with_the_same_batches(void **state)
{
	float a[16], b[16];
	long ea[16], eb[16], ma[16], mb[16];
	int na = stream(0, 0, 1, a, ea, ma), nb = stream(1, 2, 1, b, eb, mb);

	/* Resuming at micro-batch 2 of epoch 1 skips the first 5 batches and nothing else. */
	assert_int_equal(nb, na - 5);
	assert_int_equal(eb[0], 1);
	assert_int_equal(mb[0], 2);
	assert_memory_equal(b, a + 5, (size_t)nb * sizeof *b);
	assert_memory_equal(eb, ea + 5, (size_t)nb * sizeof *eb);
	assert_memory_equal(mb, ma + 5, (size_t)nb * sizeof *mb);
}

/* Every value of every batch of a 3-epoch shuffled run (batches of 3, split between the
 * workers), made by `threads` workers (0: the caller's thread), into x and y. */
static int all_values(int threads, float *x, float *y)
{
	struct loader l;
	struct batch b;
	struct diag d = {0};
	int rows = 0;

	assert_int_equal(loader_init(&l, &ds, &(struct loader_config){.world = 1, .rank = 0, .shuffle = 1, .seed = 5,
								       .batch = 3, .epochs = 3, .threads = threads}, &be, &d), ST_OK);
	assert_int_equal(l.nthreads, threads);
	while (loader_next(&l, &b)) {
		assert_rows(&b, b.idx);
		memcpy(x + (size_t)rows * IN, b.x, (size_t)b.n * IN * sizeof *x);
		memcpy(y + (size_t)rows * OUT, b.y, (size_t)b.n * OUT * sizeof *y);
		rows += b.n;
		assert_int_equal(loader_prefetch(&l, &d), ST_OK);
	}
	loader_free(&l);
	return rows;
}

static void test_loader_threads_make_the_same_batches(void **state)
{
	float x[3][3 * N * IN], y[3][3 * N * OUT];

	for (int t = 0; t < 3; t++)
		assert_int_equal(all_values(t, x[t], y[t]), 3 * N);
	assert_memory_equal(x[1], x[0], sizeof x[0]);
	assert_memory_equal(x[2], x[0], sizeof x[0]);
	assert_memory_equal(y[1], y[0], sizeof y[0]);
	assert_memory_equal(y[2], y[0], sizeof y[0]);
}

/* A backend whose copies from host memory run later (a GPU's): the loader must wait for
 * the mark after a buffer's copies before it refills that buffer. */
static int marked[LOADER_BUFFERS], waited[LOADER_BUFFERS], refilled_unwaited;
static const float *buf_of[LOADER_BUFFERS];

static void rec_mark(void *ctx, int slot)
{
	marked[slot]++;
}

static enum status rec_wait(void *ctx, int slot, struct diag *d)
{
	waited[slot] = marked[slot];
	return ST_OK;
}

static void test_loader_waits_for_a_buffers_copies_before_refilling_it(void **state)
{
	struct backend_ops ops = backend_cpu_ops;
	struct backend gpu = {&ops, NULL};
	struct loader l;
	struct batch b;
	struct diag d = {0};
	int batches = 0;

	ops.host_mark = rec_mark;
	ops.host_wait = rec_wait;
	assert_int_equal(loader_init(&l, &ds, &(struct loader_config){.world = 1, .rank = 0, .seed = 7, .batch = 2, .epochs = 2}, &gpu, &d), ST_OK);
	for (int i = 0; i < LOADER_BUFFERS; i++)
		buf_of[i] = l.slot[i].x;
	while (loader_next(&l, &b)) {
		/* This batch's buffer was refilled only after its last copies were waited for. */
		refilled_unwaited += waited[b.buf] != marked[b.buf];
		assert_ptr_equal(b.x, buf_of[b.buf]);
		loader_copied(&l, &b, &gpu); /* the trainer queued its copies */
		assert_int_equal(loader_prefetch(&l, &d), ST_OK);
		batches++;
	}
	loader_free(&l);
	assert_int_equal(batches, 10); /* 5 batches of 2 per epoch, 2 epochs */
	assert_int_equal(refilled_unwaited, 0);
	assert_int_equal(marked[0] + marked[1] + marked[2], 10);
	for (int i = 0; i < LOADER_BUFFERS; i++)
		assert_int_equal(waited[i], marked[i]); /* loader_free waited for the last ones too */
}

/* A reader that makes a batch only when the test lets it: each call records which sample
 * it was asked for first and blocks until `allowed` calls have been let through. */
struct gate {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int calls, allowed;
	uint32_t first[64];
};

static void gated_fill(void *arg, const struct dataset *dset, const uint32_t *idx, size_t n, float *x,
		       float *y)
{
	struct gate *g = arg;

	pthread_mutex_lock(&g->mu);
	g->first[g->calls++ % 64] = idx[0];
	pthread_cond_broadcast(&g->cv);
	while (g->calls > g->allowed)
		pthread_cond_wait(&g->cv, &g->mu);
	pthread_mutex_unlock(&g->mu);
	data_fill(dset, idx, n, x, y);
}

static void gate_allow(struct gate *g, int calls)
{
	pthread_mutex_lock(&g->mu);
	g->allowed = calls;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
}

/* Wait until the reader has been called `calls` times (the loader asked for those rows). */
static void gate_await(struct gate *g, int calls)
{
	pthread_mutex_lock(&g->mu);
	while (g->calls < calls)
		pthread_cond_wait(&g->cv, &g->mu);
	pthread_mutex_unlock(&g->mu);
}

/* Wait until the workers have made batch number seq (the loader's ring slot for it). */
static void await_made(struct loader *l, long seq)
{
	struct loader_slot *s = &l->slot[seq % LOADER_BUFFERS];

	pthread_mutex_lock(&l->mu);
	while (s->seq != seq || s->done < s->chunks)
		pthread_cond_wait(&l->made, &l->mu);
	pthread_mutex_unlock(&l->mu);
}

static void *let_go_later(void *arg)
{
	struct gate *g = arg;
	struct timespec ts = {0, 200 * 1000 * 1000};

	nanosleep(&ts, NULL); /* the trainer is (almost surely) blocked in loader_next by now */
	gate_allow(g, 1000);
	return NULL;
}

/* Batches of one row (one reader call each), in order. After loader_next(batch 0) and
 * loader_prefetch, the reader is asked for batches 1 and 2 with nothing consumed: the
 * loader runs two ahead. A batch the trainer has to wait for counts in waited_s; one made
 * while the trainer was away adds nothing. */
static void test_loader_makes_two_batches_ahead_and_counts_the_wait(void **state)
{
	struct gate g = {.allowed = 1};
	struct loader l;
	struct batch b;
	struct diag d = {0};
	pthread_t th;
	double before;

	pthread_mutex_init(&g.mu, NULL);
	pthread_cond_init(&g.cv, NULL);
	assert_int_equal(loader_init(&l, &ds, &(struct loader_config){.world = 1, .rank = 0, .batch = 1, .epochs = 1,
								       .fill = gated_fill, .fill_arg = &g, .threads = 2}, &be, &d), ST_OK);
	assert_true(loader_next(&l, &b)); /* batch 0 (a worker may have made it already) */
	assert_int_equal(b.mb, 0);
	before = b.waited_s;
	assert_int_equal(loader_prefetch(&l, &d), ST_OK);
	gate_await(&g, 2);     /* batch 1 is being made; batch 2 is queued behind it */
	gate_allow(&g, 3);
	gate_await(&g, 3);     /* both ahead of the trainer, which still holds batch 0 */
	/* two workers: either may ask for its batch first */
	assert_true((g.first[1] == 1 && g.first[2] == 2) || (g.first[1] == 2 && g.first[2] == 1));
	await_made(&l, 1);
	await_made(&l, 2);
	assert_true(loader_next(&l, &b)); /* batch 1: made ahead, no wait */
	assert_int_equal(b.mb, 1);
	assert_true(b.waited_s == before);
	assert_int_equal(loader_prefetch(&l, &d), ST_OK);
	assert_true(loader_next(&l, &b)); /* batch 2 */
	assert_true(b.waited_s == before);
	assert_int_equal(loader_prefetch(&l, &d), ST_OK);
	gate_await(&g, 4);     /* batch 3 is being made, held by the reader */
	assert_int_equal(pthread_create(&th, NULL, let_go_later, &g), 0);
	assert_true(loader_next(&l, &b)); /* batch 3: the trainer waits for it */
	assert_int_equal(b.mb, 3);
	assert_true(b.waited_s > before);
	assert_rows(&b, (const uint32_t[]){3});
	pthread_join(th, NULL);
	while (loader_prefetch(&l, &d) == ST_OK && loader_next(&l, &b))
		;
	assert_int_equal(b.mb, N - 1);
	loader_free(&l);
	pthread_cond_destroy(&g.cv);
	pthread_mutex_destroy(&g.mu);
}

/* The default workers follow the CPUs this process may run on: the mask less the trainer's
 * thread, 1 to LOADER_THREADS; an unbound mask is shared by the node's ranks; a rank bound
 * to one CPU (as mpirun binds at np <= 2) gets one worker. */
static void test_loader_workers_follow_the_affinity_mask(void **state)
{
	cpu_set_t all, one;
	int cpus, first = -1;

	assert_int_equal(sched_getaffinity(0, sizeof all, &all), 0);
	cpus = CPU_COUNT(&all);
	assert_int_equal(loader_workers(1),
			 cpus - 1 < 1 ? 1 : cpus - 1 > LOADER_THREADS ? LOADER_THREADS : cpus - 1);
	if (cpus >= sysconf(_SC_NPROCESSORS_ONLN)) /* unbound: 64 ranks share the node */
		assert_int_equal(loader_workers(64), 1);
	for (int c = 0; c < CPU_SETSIZE && first < 0; c++)
		if (CPU_ISSET(c, &all))
			first = c;
	CPU_ZERO(&one);
	CPU_SET(first, &one);
	assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
	assert_int_equal(loader_workers(1), 1);
	assert_int_equal(loader_workers(4), 1);
	assert_int_equal(sched_setaffinity(0, sizeof all, &all), 0);
}

/* What an address-space limit must leave room for is what loader_init starts: the workers
 * it runs (none below LOADER_INLINE_VALUES, the asked-for count otherwise) and three
 * buffers of rows and indices. */
static void test_loader_map_bytes_counts_the_workers_it_starts(void **state)
{
	const long big = LOADER_INLINE_VALUES / (IN + OUT) + 1;
	const struct loader_config cfgs[3] = {{.world = 1, .batch = 2, .epochs = 1},
					      {.world = 1, .batch = big, .epochs = 1, .node_ranks = 1},
					      {.world = 1, .batch = big, .epochs = 1, .threads = 3}};
	const int want[3] = {0, loader_workers(1), 3};

	for (int i = 0; i < 3; i++) {
		struct loader l;
		struct diag d = {0};

		assert_int_equal(loader_init(&l, &ds, &cfgs[i], &be, &d), ST_OK);
		assert_int_equal(l.nthreads, want[i]);
		assert_int_equal(loader_threads(&ds, &cfgs[i]), l.nthreads);
		assert_int_equal(loader_map_bytes(&ds, &cfgs[i]),
				 LOADER_BUFFERS * (size_t)cfgs[i].batch * (IN + OUT + 1) * sizeof(float) +
					 (size_t)l.nthreads * vmspace_thread_bytes());
		loader_free(&l);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_loader_without_shuffle_walks_the_data_in_order_each_epoch),
		cmocka_unit_test(test_loader_drop_short_drops_the_last_short_batch),
		cmocka_unit_test(test_loader_refuses_a_batch_larger_than_the_shard_when_dropping),
		cmocka_unit_test(test_loader_prefetch_does_not_change_the_stream),
		cmocka_unit_test(test_loader_waits_for_a_buffers_copies_before_refilling_it),
		cmocka_unit_test(test_loader_seek_resumes_with_the_same_batches),
		cmocka_unit_test(test_loader_makes_two_batches_ahead_and_counts_the_wait),
		cmocka_unit_test(test_loader_threads_make_the_same_batches),
		cmocka_unit_test(test_loader_workers_follow_the_affinity_mask),
		cmocka_unit_test(test_loader_map_bytes_counts_the_workers_it_starts),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
