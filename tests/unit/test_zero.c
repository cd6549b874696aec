/*
 * test_zero.c - the ZeRO shard plan: the ranks' shards partition the trainable
 * parameters (frozen layers left out) into contiguous ranges in rank order; each
 * bucket's cuts give every rank exactly its shard's part of the bucket; the
 * optimizer's state arenas hold the shard, placed in the whole arena; and
 * ZeRO-2's pool holds the largest even and the largest odd bucket.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "train/model.h"
#include "train/optimizer.h"
#include "train/zero.h"

/* 4 layers, 7-5-3-4-2, layer 2 (0-based 1) frozen: 40 + 0 + 16 + 10 = 66 trainable. */
static const int widths[5] = {7, 5, 3, 4, 2};
static const unsigned char frozen[4] = {0, 1, 0, 0};

static void layout(struct model *m)
{
	model_layout(m, widths, 4);
	model_freeze(m, frozen);
}

/* The trainable index of parameter p (p in a trainable layer). */
static size_t tindex(const struct model *m, size_t p)
{
	size_t t = 0;

	for (int l = 0; l < m->nlayers; l++) {
		size_t end = m->b_off[l] + (size_t)m->widths[l + 1];

		if (p >= m->w_off[l] && p < end)
			return t + (p - m->w_off[l]);
		if (!m->frozen[l])
			t += end - m->w_off[l];
	}
	fail_msg("parameter %zu is in no layer", p);
	return 0;
}

static void test_shards_partition_the_trainable_parameters(void **state)
{
	struct model m;

	(void)state;
	layout(&m);
	assert_int_equal(m.ntrainable, 66);
	for (int n = 1; n <= 7; n++) {
		size_t next = 0; /* the next trainable index a shard must hold */

		for (int r = 0; r < n; r++) {
			struct zero_plan z;
			size_t so = 0;

			zero_plan_init(&z, &m, r, n);
			assert_int_equal(z.lo, next);
			for (int k = 0; k < z.npieces; k++) {
				const struct zero_piece *pc = &z.piece[k];

				assert_true(pc->len > 0);
				assert_int_equal(pc->so, so); /* the state is the shard, in order */
				assert_int_equal(tindex(&m, pc->off), z.lo + so);
				assert_int_equal(tindex(&m, pc->off + pc->len - 1), z.lo + so + pc->len - 1);
				/* no frozen parameter: the frozen layer is [w_off[1], w_off[2]) */
				assert_true(pc->off + pc->len <= m.w_off[1] || pc->off >= m.w_off[2]);
				so += pc->len;
			}
			assert_int_equal(so, z.hi - z.lo);
			next = z.hi;
		}
		assert_int_equal(next, 66);
	}
}

static void test_bucket_cuts_give_each_rank_its_shard(void **state)
{
	struct model m;
	struct bucket b[5];
	size_t cuts[8];
	int nb;

	(void)state;
	layout(&m);
	nb = model_plan_buckets(&m, 1, 1, b); /* one layer a bucket: 3 (plus none for slots) */
	assert_int_equal(nb, 3);
	for (int n = 1; n <= 7; n++) {
		struct zero_plan z;

		zero_plan_init(&z, &m, 0, n);
		for (int k = 0; k < nb; k++) {
			size_t len = b[k].len - (b[k].hi == 3 ? MODEL_SLOTS : 0);

			zero_bucket_cuts(&z, &m, &b[k], len, cuts);
			assert_int_equal(cuts[0], 0);
			assert_int_equal(cuts[n], len);
			for (int q = 0; q < n; q++) {
				struct zero_plan zq;

				zero_plan_init(&zq, &m, q, n);
				assert_true(cuts[q] <= cuts[q + 1]);
				/* every float of rank q's part is in rank q's shard */
				for (size_t i = cuts[q]; i < cuts[q + 1]; i++) {
					size_t t = tindex(&m, b[k].off + i);

					assert_true(t >= zq.lo && t < zq.hi);
				}
			}
		}
	}
}

static void test_sharded_state_arenas_hold_the_shard(void **state)
{
	const struct optimizer_hparams h = {.kind = OPTIM_ADAMW, .lr = 0.001f, .beta1 = 0.9,
					    .beta2 = 0.999, .eps = 1e-8};
	struct backend be;
	struct backend_config cfg = {0, 0};
	struct model m, w;
	struct optimizer opt, whole;
	struct zero_plan z;
	struct diag d = {0};

	(void)state;
	assert_int_equal(backend_init(&be, &backend_cpu_ops, &cfg, &d), ST_OK);
	assert_int_equal(model_init(&m, &be, widths, 4, 1, &d), ST_OK);
	assert_int_equal(model_init(&w, &be, widths, 4, 1, &d), ST_OK);
	model_freeze(&m, frozen);
	model_freeze(&w, frozen);
	zero_plan_init(&z, &m, 1, 3); /* rank 1 of 3: trainable [22, 44) */
	assert_int_equal(optimizer_init(&opt, &m, &h, &z, &d), ST_OK);
	assert_int_equal(optimizer_init(&whole, &w, &h, NULL, &d), ST_OK);
	assert_int_equal(z.lo, 22);
	assert_int_equal(z.hi, 44);
	for (int a = 1; a < 3; a++) {
		assert_int_equal(m.arena[a].len, 22);
		assert_int_equal(m.arena[a].first, 22);
		assert_int_equal(m.arena[a].whole, 66);
	}
	/* the state dict and the checkpoint buffer see the whole arenas */
	assert_int_equal(model_state_floats(&m, 0, m.narenas), model_state_floats(&w, 0, w.narenas));
	assert_int_equal(w.bytes - m.bytes, 2 * 44 * sizeof(float));
	assert_int_equal(model_bytes_needed(widths, 4, 1, 2, frozen, 3), m.bytes);
	model_free(&m);
	model_free(&w);
	backend_free(&be);
}

static void test_pool_holds_the_largest_even_and_odd_buckets(void **state)
{
	struct model m;

	(void)state;
	layout(&m);
	/* one layer a bucket, from the last: 10 (even), 16 (odd), 40 (even) */
	assert_int_equal(zero_pool_floats(&m, 1, 1), 40 + 16);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_shards_partition_the_trainable_parameters),
		cmocka_unit_test(test_bucket_cuts_give_each_rank_its_shard),
		cmocka_unit_test(test_sharded_state_arenas_hold_the_shard),
		cmocka_unit_test(test_pool_holds_the_largest_even_and_odd_buckets),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
