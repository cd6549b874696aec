/*
 * test_zero.c - the ZeRO shard plan: the ranks' shards partition the trainable
 * parameters (frozen layers left out) into contiguous ranges in rank order; each
 * bucket's cuts give every rank exactly its shard's part of the bucket; the
 * optimizer's state arenas hold the shard, placed in the whole arena; ZeRO-2's
 * parts are the buckets with each layer larger than the cap in row panels of at
 * most the cap, every trainable float in one part, and backward computes the
 * panels as the whole layer: bit for bit where the BLAS computes a row panel as it
 * computes those rows of the whole product (tests/lib/blasrows.h asks it), else
 * within the rounding of a dot product summed in another order; and ZeRO-2's pool
 * holds the largest even and the largest odd part.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "lib/blasrows.h"
#include "lib/fill.h"
#include "model/model.h"
#include "train/plan.h"
#include "model/optimizer.h"
#include "model/zero.h"

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
	struct bucket b[MODEL_MAX_LAYERS + 1];
	size_t cuts[8];
	int nb;

	(void)state;
	layout(&m);
	nb = grad_plan_cut(&m, 1, 1, 0, 0, MODEL_MAX_LAYERS + 1, b); /* one layer a bucket: 3 (plus none for slots) */
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
	assert_int_equal(model_bytes_needed(widths, 4, 1, 2, frozen, 3, NULL), m.bytes);
	model_free(&m);
	model_free(&w);
	backend_free(&be);
}

/* Layer l's floats: weight and bias. */
static size_t lfloats(const struct model *m, int l)
{
	return (size_t)m->widths[l + 1] * (size_t)(m->widths[l] + 1);
}

static void test_panels_are_row_ranges_of_at_most_the_cap(void **state)
{
	struct model m;

	(void)state;
	layout(&m);
	for (size_t cap = 1; cap <= 45; cap++) {
		for (int l = 0; l < 4; l++) {
			const size_t in = (size_t)m.widths[l], wf = in * (size_t)m.widths[l + 1];
			int np = model_panel_count(&m, l, cap);
			size_t next = 0;

			for (int j = 0; j < np; j++) {
				size_t a, b;

				model_panel_range(&m, l, cap, j, &a, &b);
				assert_int_equal(a, next); /* in order, no gap, no overlap */
				assert_true(b > a);
				if (a < wf) /* the weight's part starts and ends at a row */
					assert_int_equal(a % in, 0);
				if (b < wf)
					assert_int_equal(b % in, 0);
				/* at most the cap, or one row longer than it */
				assert_true(b - a <= cap || (b - a == in && b <= wf));
				next = b;
			}
			assert_int_equal(next, lfloats(&m, l));
			if (cap >= lfloats(&m, l))
				assert_int_equal(np, 1);
		}
	}
	/* 5 rows of 7 at cap 15: rows 0-1, 2-3, then row 4 with all 5 bias floats (7 + 5 <= 15) */
	assert_int_equal(model_panel_count(&m, 0, 15), 3);
	{
		size_t a, b;

		model_panel_range(&m, 0, 15, 2, &a, &b);
		assert_int_equal(a, 28);
		assert_int_equal(b, 40);
		/* at cap 9 the last row has room for 2 bias floats; the other 3 follow */
		assert_int_equal(model_panel_count(&m, 0, 9), 6);
		model_panel_range(&m, 0, 9, 4, &a, &b);
		assert_int_equal(a, 28);
		assert_int_equal(b, 37);
		model_panel_range(&m, 0, 9, 5, &a, &b);
		assert_int_equal(a, 37);
		assert_int_equal(b, 40);
	}
}

/* All of m's parts for these caps (room for 200). */
static int all_parts(const struct model *m, size_t cap, size_t first_cap, struct bucket *p)
{
	int np = grad_plan_cut(m, cap, first_cap, 1, 0, 0, NULL);

	assert_true(np <= 200);
	assert_int_equal(grad_plan_cut(m, cap, first_cap, 1, 0, 200, p), np);
	return np;
}

static void test_parts_hold_every_trainable_float_once_in_backward_order(void **state)
{
	const size_t caps[] = {1, 3, 5, 9, 10, 16, 17, 39, 40, 100};
	struct model m;
	struct bucket p[200], one, b[MODEL_MAX_LAYERS + 1];

	(void)state;
	layout(&m);
	for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
		for (int f = 0; f < 2; f++) {
			const size_t cap = caps[c], first_cap = f ? cap : 1;
			int np = all_parts(&m, cap, first_cap, p), owner[66 + 18];

			for (size_t i = 0; i < m.nparams; i++)
				owner[i] = -1;
			for (int k = 0; k < np; k++) {
				assert_true(p[k].lo >= 0 && p[k].lo <= p[k].hi);
				for (size_t i = p[k].off; i < p[k].off + p[k].len; i++) {
					assert_int_equal(owner[i], -1);
					owner[i] = k;
				}
				if (p[k].panel) {
					assert_int_equal(p[k].lo, p[k].hi);
					assert_true(lfloats(&m, p[k].lo) > cap);
				} else {
					size_t len = 0;

					for (int l = p[k].lo; l <= p[k].hi; l++) {
						assert_true(lfloats(&m, l) <= cap);
						len += lfloats(&m, l);
					}
					assert_int_equal(p[k].off, m.w_off[p[k].lo]);
					assert_int_equal(p[k].len, len);
				}
				/* backward's order: later layers first, a layer's panels by row */
				if (k > 0)
					assert_true(p[k].hi < p[k - 1].lo ||
						    (p[k].lo == p[k - 1].lo && p[k].panel && p[k - 1].panel &&
						     p[k].off == p[k - 1].off + p[k - 1].len));
				/* a window of one gives the same part */
				assert_int_equal(grad_plan_cut(&m, cap, first_cap, 1, k, 1, &one), np);
				assert_int_equal(one.lo, p[k].lo);
				assert_int_equal(one.hi, p[k].hi);
				assert_int_equal(one.off, p[k].off);
				assert_int_equal(one.len, p[k].len);
				assert_int_equal(one.panel, p[k].panel);
			}
			for (size_t i = 0; i < m.nparams; i++) /* the frozen layer 1 in none */
				assert_int_equal(owner[i] >= 0, i < m.w_off[1] || i >= m.w_off[2]);
		}
	}
	/* no layer over the cap: the buckets, the slots left out */
	assert_int_equal(all_parts(&m, 40, 1, p), grad_plan_cut(&m, 40, 1, 0, 0, MODEL_MAX_LAYERS + 1, b));
	for (int k = 0; k < 3; k++) {
		assert_int_equal(p[k].lo, b[k].lo);
		assert_int_equal(p[k].hi, b[k].hi);
		assert_int_equal(p[k].off, b[k].off);
		assert_int_equal(p[k].len, b[k].len - (k == 0 ? MODEL_SLOTS : 0));
		assert_int_equal(p[k].panel, 0);
	}
}

static void test_panel_cuts_give_each_rank_its_shard(void **state)
{
	struct model m;
	struct bucket p[200];
	size_t cuts[8];
	int np;

	(void)state;
	layout(&m);
	np = all_parts(&m, 9, 1, p);
	assert_true(np > 3);
	for (int n = 1; n <= 7; n++) {
		struct zero_plan z;

		zero_plan_init(&z, &m, 0, n);
		for (int k = 0; k < np; k++) {
			zero_bucket_cuts(&z, &m, &p[k], p[k].len, cuts);
			assert_int_equal(zero_bucket_start(&m, &p[k]), tindex(&m, p[k].off));
			assert_int_equal(cuts[0], 0);
			assert_int_equal(cuts[n], p[k].len);
			for (int q = 0; q < n; q++) {
				struct zero_plan zq;

				zero_plan_init(&zq, &m, q, n);
				assert_true(cuts[q] <= cuts[q + 1]);
				for (size_t i = cuts[q]; i < cuts[q + 1]; i++) {
					size_t t = tindex(&m, p[k].off + i);

					assert_true(t >= zq.lo && t < zq.hi);
				}
			}
		}
	}
}

/* The plan's two pool buffers for these caps (ZeRO-2, one rank). */
static size_t pool_floats(const struct model *m, size_t cap, size_t first_cap)
{
	struct grad_plan plan;
	struct diag d = {0};
	size_t n;

	assert_int_equal(grad_plan_init(&plan, m, &(struct grad_plan_cfg){.cap = cap, .first_cap = first_cap,
									  .zero = 2, .rank = 0, .size = 1},
					 &d),
			 ST_OK);
	n = plan.poolb[0] + plan.poolb[1];
	grad_plan_free(&plan);
	return n;
}

static void test_pool_holds_the_largest_even_and_odd_parts(void **state)
{
	const size_t caps[] = {1, 3, 9, 17, 40, 100};
	struct model m;
	struct bucket p[200];

	(void)state;
	layout(&m);
	/* no layer over the cap, one layer a bucket, from the last: 10 (even), 16 (odd), 40 (even) */
	assert_int_equal(pool_floats(&m, 40, 1), 40 + 16);
	for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
		size_t most[2] = {0, 0}, whole = 0;
		int np = all_parts(&m, caps[c], 1, p);

		for (int k = 0; k < np; k++) {
			most[k % 2] = p[k].len > most[k % 2] ? p[k].len : most[k % 2];
			if (!p[k].panel)
				whole = p[k].len > whole ? p[k].len : whole;
		}
		assert_int_equal(pool_floats(&m, caps[c], 1), most[0] + most[1]);
		/* each buffer at most the cap (or a row of 7 longer than it), or the largest bucket */
		for (int e = 0; e < 2; e++)
			assert_true(most[e] <= caps[c] || most[e] <= whole || most[e] == 7);
	}
	/* the 40-float layer at cap 17: rows 0-1, 2-3 and row 4 with its bias */
	assert_int_equal(pool_floats(&m, 17, 1), 14 + 16);
}

/* Records the panels' calls, and points each panel into whole at its own place. */
struct panels_seen {
	const struct model *m;
	size_t cap;       /* the panels' cap */
	float *whole;     /* (nparams) where the panels go */
	int layer, next;  /* the panel expected next */
	int done[8];      /* panels handed over, per layer */
};

static float *seen_dst(void *arg, int l, int j)
{
	struct panels_seen *s = arg;
	size_t a, b;

	if (l != s->layer) {
		s->layer = l;
		s->next = 0;
	}
	assert_int_equal(j, s->next);
	model_panel_range(s->m, l, s->cap, j, &a, &b);
	return s->whole + s->m->w_off[l] + a;
}

static enum status seen_done(void *arg, int l, int j)
{
	struct panels_seen *s = arg;

	assert_int_equal(l, s->layer);
	assert_int_equal(j, s->next);
	s->next++;
	s->done[l]++;
	return ST_OK;
}

/* The layer hook: every panel of a paneled layer was handed over before it. */
static enum status seen_layer(void *arg, int l)
{
	struct panels_seen *s = arg;

	if (lfloats(s->m, l) > s->cap)
		assert_int_equal(s->done[l], model_panel_count(s->m, l, s->cap));
	else
		assert_int_equal(s->done[l], 0);
	return ST_OK;
}

/* The whole backward's layer hook: keeps a copy of each layer's dy (n, out). Backward
 * starts from dbuf[0] and ping-pongs (model.h), and every layer here passes a dx down,
 * so the k-th layer done read dbuf[k % 2]. */
struct dys {
	const struct model *m;
	int n, k;
	float *dy[8];
};

static enum status keep_dy(void *arg, int l)
{
	struct dys *s = arg;
	size_t len = (size_t)s->n * (size_t)s->m->widths[l + 1];

	s->dy[l] = malloc(len * sizeof(float));
	assert_non_null(s->dy[l]);
	memcpy(s->dy[l], s->m->dbuf[s->k++ % 2], len * sizeof(float));
	return ST_OK;
}

/* Backward in panels of cap against backward whole: every gradient float, bit for bit
 * where blas_rows_exact says the BLAS gives row panels the whole product's bits; else
 * the bias (the backend's own loop) bit for bit and each weight gradient, the same
 * n-term dot product dy^T x summed in another order, within blas_dot_gap(n). */
static void check_panels_match_whole(const int *w, int nlayers, int n, size_t cap, int exact)
{
	struct backend be;
	struct backend_config cfg = {0, 0};
	struct model m;
	struct diag d = {0};
	struct panels_seen s = {.layer = -1};
	struct dys dys = {.n = n};
	float *ref, *whole;
	int paneled = 0;

	assert_int_equal(backend_init(&be, &backend_cpu_ops, &cfg, &d), ST_OK);
	assert_int_equal(model_init(&m, &be, w, nlayers, n, &d), ST_OK);
	ref = malloc(m.nparams * sizeof *ref);
	whole = malloc(m.nparams * sizeof *whole);
	assert_non_null(ref);
	assert_non_null(whole);
	model_init_host(&m, 3, m.params);
	fill(m.act[0], (size_t)n * (size_t)w[0], 4);
	fill(m.dbuf[0], (size_t)n * (size_t)w[nlayers], 5);
	model_forward(&m, n, NULL);
	fill(m.dbuf[0], (size_t)n * (size_t)w[nlayers], 5);
	dys.m = &m;
	assert_int_equal(model_backward(&m, n, 1.0f, 0, &(struct model_hooks){.arg = &dys, .layer_done = keep_dy}),
			 ST_OK);
	memcpy(ref, m.grads, m.nparams * sizeof *ref);

	for (size_t i = 0; i < m.nparams; i++) /* anything a panel does not write stays NaN */
		m.grads[i] = whole[i] = NAN;
	s.m = &m;
	s.whole = whole;
	s.cap = cap;
	fill(m.dbuf[0], (size_t)n * (size_t)w[nlayers], 5);
	assert_int_equal(model_backward(&m, n, 1.0f, 0,
					&(struct model_hooks){.arg = &s, .layer_done = seen_layer, .panel_cap = cap,
							      .panel_dst = seen_dst, .panel_done = seen_done}),
			 ST_OK);
	for (int l = 0; l < nlayers; l++) {
		const int in = w[l], out = w[l + 1];
		const size_t wf = (size_t)in * (size_t)out;
		const float *got = lfloats(&m, l) > cap ? whole : m.grads;
		size_t nd;
		double worst;

		/* the copy of dy is layer l's: its sums over the batch are the bias gradient */
		for (int o = 0; o < out; o++) {
			float sum = 0;

			for (int i = 0; i < n; i++)
				sum += dys.dy[l][(size_t)i * out + o];
			assert_memory_equal(&sum, ref + m.w_off[l] + wf + o, sizeof sum);
		}
		paneled += lfloats(&m, l) > cap;
		if (exact || lfloats(&m, l) <= cap) {
			assert_memory_equal(got + m.w_off[l], ref + m.w_off[l], lfloats(&m, l) * sizeof(float));
		} else { /* dw (out, in) = dy^T x: A(o, i) = dy[i * out + o], x = act[l] (n, in) */
			assert_int_equal(blas_beyond_gap(got + m.w_off[l], ref + m.w_off[l], out, in, n, dys.dy[l],
							 1, (size_t)out, m.act[l], (size_t)in, &nd, &worst),
					 0);
			assert_memory_equal(got + m.w_off[l] + wf, ref + m.w_off[l] + wf, (size_t)out * sizeof(float));
		}
		free(dys.dy[l]);
	}
	assert_true(paneled > 0);
	free(ref);
	free(whole);
	model_free(&m);
	backend_free(&be);
}

static void test_panels_compute_the_layer_gradient_as_the_whole_layer(void **state)
{
	const int small[5] = {7, 5, 3, 4, 2};
	const int wide[4] = {64, 96, 40, 8};
	char why[512];
	int exact = blas_rows_exact(why, sizeof why, NULL);

	(void)state;
	assert_true(exact >= 0); /* -1: the BLAS is beyond float rounding itself */
	if (!exact)
		print_message("# panels checked within float rounding, not bit for bit: %s\n", why);
	check_panels_match_whole(small, 4, 3, 9, exact);
	check_panels_match_whole(small, 4, 3, 1, exact);
	/* rows of 64: 7 a panel, the bias of 96 after the last 5 rows, then in parts */
	check_panels_match_whole(wide, 3, 16, 500, exact);
	check_panels_match_whole(wide, 3, 16, 3000, exact);
	check_panels_match_whole(wide, 3, 33, 40, exact);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_shards_partition_the_trainable_parameters),
		cmocka_unit_test(test_bucket_cuts_give_each_rank_its_shard),
		cmocka_unit_test(test_sharded_state_arenas_hold_the_shard),
		cmocka_unit_test(test_panels_are_row_ranges_of_at_most_the_cap),
		cmocka_unit_test(test_parts_hold_every_trainable_float_once_in_backward_order),
		cmocka_unit_test(test_panel_cuts_give_each_rank_its_shard),
		cmocka_unit_test(test_pool_holds_the_largest_even_and_odd_parts),
		cmocka_unit_test(test_panels_compute_the_layer_gradient_as_the_whole_layer),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
