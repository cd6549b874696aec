/* test_loader.c - the micro-batch stream: coverage, the short tail, resuming, prefetching. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "backend/backend.h"
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

/* A backend whose copies from host memory run later (a GPU's): the loader must wait for
 * the mark after a buffer's copies before it refills that buffer. */
static int marked[2], waited[2], refilled_unwaited;
static const float *buf_of[2];

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
	buf_of[0] = l.hx[0];
	buf_of[1] = l.hx[1];
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
	assert_int_equal(marked[0] + marked[1], 10);
	assert_int_equal(waited[0], marked[0]); /* loader_free waited for the last ones too */
	assert_int_equal(waited[1], marked[1]);
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
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
