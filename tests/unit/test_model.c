/*
 * test_model.c - the model's forward and backward against finite differences, its
 * initialisation, its layout in state-dict order, its gradient buckets and its
 * frozen layers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "lib/fill.h"
#include "model/model.h"
#include "train/plan.h"

static const struct backend_ops *ops = &backend_cpu_ops;

/* Model loss for the current params on act[0]/target (n rows). */
static double model_loss(struct model *m, int n)
{
	float loss = 0;

	model_forward(m, n, NULL);
	ops->mse(NULL, m->dbuf[0], &loss, m->act[m->nlayers], m->target, n, m->widths[m->nlayers],
		 1.0f, 1.0f, 0);
	return loss;
}

static void test_model_backward_matches_finite_differences(void **state)
{
	const int widths[4] = {3, 5, 4, 2};
	struct backend be;
	struct model m;
	struct diag d = {0};
	const int n = 6;
	const float eps = 1e-2f;

	struct backend_config cfg = {0, 0};

	assert_int_equal(backend_init(&be, ops, &cfg, &d), ST_OK);
	assert_int_equal(model_init(&m, &be, widths, 3, n, &d), ST_OK);
	assert_int_equal(m.nparams, 5 * 3 + 5 + 4 * 5 + 4 + 2 * 4 + 2);
	model_init_host(&m, 11, m.params);
	fill(m.act[0], (size_t)n * 3, 12);
	fill(m.target, (size_t)n * 2, 13);
	model_loss(&m, n);
	model_backward(&m, n, 1.0f, 0, NULL);
	for (size_t p = 0; p < m.nparams; p++) {
		float keep = m.params[p], g = m.grads[p];
		double up, down;

		m.params[p] = keep + eps;
		up = model_loss(&m, n);
		m.params[p] = keep - eps;
		down = model_loss(&m, n);
		m.params[p] = keep;
		/* Exact for a quadratic away from ReLU kinks; eps is far smaller than typical pre-activations. */
		assert_float_equal(g, (up - down) / (2 * eps), 2e-4);
	}
	model_free(&m);
	model_free(&m);
	backend_free(&be);
}

static void test_model_init_is_uniform_in_fan_in_bound(void **state)
{
	const int widths[3] = {16, 8, 4};
	struct model m;
	float *host;

	model_layout(&m, widths, 2);
	host = malloc(m.nparams * sizeof *host);
	model_init_host(&m, 0, host);
	for (int l = 0; l < 2; l++) {
		float bound = 1.0f / sqrtf((float)widths[l]), lo = 1, hi = -1;

		for (size_t p = m.w_off[l]; p < m.b_off[l] + (size_t)widths[l + 1]; p++) {
			assert_true(fabsf(host[p]) <= bound);
			lo = host[p] < lo ? host[p] : lo;
			hi = host[p] > hi ? host[p] : hi;
		}
		/* Spread over the interval, not collapsed. */
		assert_true(lo < -0.5f * bound && hi > 0.5f * bound);
	}
	free(host);
}

static void test_model_layout_follows_state_dict_order(void **state)
{
	const int widths[3] = {10, 10, 5};
	struct model m;
	struct model_tensor t[4];

	model_layout(&m, widths, 2);
	assert_int_equal(m.nparams, 165);
	assert_int_equal(m.w_off[0], 0);
	assert_int_equal(m.b_off[0], 100);
	assert_int_equal(m.w_off[1], 110);
	assert_int_equal(m.b_off[1], 160);
	m.narenas = 1;
	m.arena[0].name = "";
	assert_int_equal(model_state_dict(&m, 0, 1, t), 4);
	assert_string_equal(t[0].name, "net1.weight");
	assert_string_equal(t[3].name, "net2.bias");
}

static void test_buckets_are_contiguous_and_cover_all_gradients(void **state)
{
	const int widths[6] = {8, 16, 16, 16, 16, 4};
	struct model m;
	struct bucket b[MODEL_MAX_LAYERS + 1];
	size_t end;
	int nb;

	model_layout(&m, widths, 5);
	/* One big bucket: everything plus the slots. */
	nb = grad_plan_cut(&m, 1u << 20, 1u << 20, 0, 0, MODEL_MAX_LAYERS + 1, b);
	assert_int_equal(nb, 1);
	assert_int_equal(b[0].off, 0);
	assert_int_equal(b[0].len, m.nparams + MODEL_SLOTS);
	/* Small cap: one layer each, last layer first, slots in the first bucket. */
	nb = grad_plan_cut(&m, 1, 1, 0, 0, MODEL_MAX_LAYERS + 1, b);
	assert_int_equal(nb, 5);
	end = m.nparams + MODEL_SLOTS;
	for (int i = 0; i < nb; i++) {
		assert_int_equal(b[i].lo, 4 - i);
		assert_int_equal(b[i].hi, 4 - i);
		assert_int_equal(b[i].off + b[i].len, end);
		end = b[i].off;
	}
	assert_int_equal(end, 0);
	/* A cap of two middle layers (272 floats each): buckets close once they reach it. */
	nb = grad_plan_cut(&m, 500, 60, 0, 0, MODEL_MAX_LAYERS + 1, b);
	assert_int_equal(nb, 3);
	assert_int_equal(b[0].lo, 4); /* 68 floats >= first cap 60 */
	assert_int_equal(b[1].lo, 2); /* 272 + 272 >= 500 */
	assert_int_equal(b[2].lo, 0);
	assert_int_equal(b[2].hi, 1);
}

/* A frozen middle layer: its gradient slice is left alone, the layers before and after it
 * still get the gradients of the unfrozen model (they flow through it), it is in no
 * bucket, and the trainable runs skip it. */
static void test_frozen_layer_passes_gradients_through_and_gets_none(void **state)
{
	const int widths[4] = {3, 5, 4, 2};
	const unsigned char frozen[3] = {0, 1, 0};
	struct backend be;
	struct model m;
	struct diag d = {0};
	struct backend_config cfg = {0, 0};
	struct bucket b[MODEL_MAX_LAYERS + 1];
	size_t off[3], so[3], len[3];
	float *want;
	const int n = 6;

	assert_int_equal(backend_init(&be, ops, &cfg, &d), ST_OK);
	assert_int_equal(model_init(&m, &be, widths, 3, n, &d), ST_OK);
	want = malloc(m.nparams * sizeof *want);
	model_init_host(&m, 11, m.params);
	fill(m.act[0], (size_t)n * 3, 12);
	fill(m.target, (size_t)n * 2, 13);
	model_loss(&m, n);
	model_backward(&m, n, 1.0f, 0, NULL);
	memcpy(want, m.grads, m.nparams * sizeof *want);
	model_freeze(&m, frozen);
	for (size_t p = 0; p < m.nparams; p++)
		m.grads[p] = 42.0f;
	model_loss(&m, n);
	model_backward(&m, n, 1.0f, 0, NULL);
	for (size_t p = 0; p < m.nparams; p++) {
		if (p >= m.w_off[1] && p < m.w_off[2])
			assert_true(m.grads[p] == 42.0f);
		else
			assert_true(m.grads[p] == want[p]);
	}
	assert_int_equal(model_trainable_runs(&m, off, so, len), 2);
	assert_int_equal(off[0], 0);
	assert_int_equal(len[0], m.w_off[1]);
	assert_int_equal(off[1], m.w_off[2]);
	assert_int_equal(off[1] + len[1], m.nparams);
	/* in a state arena the frozen layer takes no room */
	assert_int_equal(so[0], 0);
	assert_int_equal(so[1], len[0]);
	assert_int_equal(m.ntrainable, len[0] + len[1]);
	/* one bucket per trainable run, the last layer's with the slots */
	assert_int_equal(grad_plan_cut(&m, 1u << 20, 1u << 20, 0, 0, MODEL_MAX_LAYERS + 1, b), 2);
	assert_int_equal(b[0].lo, 2);
	assert_int_equal(b[0].off, m.w_off[2]);
	assert_int_equal(b[0].len, m.nparams - m.w_off[2] + MODEL_SLOTS);
	assert_int_equal(b[1].lo, 0);
	assert_int_equal(b[1].hi, 0);
	assert_int_equal(b[1].len, m.w_off[1]);
	/* the last layer frozen: the slots travel alone, in the last bucket */
	{
		const unsigned char last[3] = {0, 0, 1};

		model_freeze(&m, last);
		assert_int_equal(grad_plan_cut(&m, 1u << 20, 1u << 20, 0, 0, MODEL_MAX_LAYERS + 1, b), 2);
		assert_int_equal(b[0].lo, 0);
		assert_int_equal(b[0].hi, 1);
		assert_int_equal(b[0].len, m.w_off[2]);
		assert_int_equal(b[1].lo, -1);
		assert_int_equal(b[1].off, m.nparams);
		assert_int_equal(b[1].len, MODEL_SLOTS);
	}
	free(want);
	model_free(&m);
	backend_free(&be);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_frozen_layer_passes_gradients_through_and_gets_none),
		cmocka_unit_test(test_model_backward_matches_finite_differences),
		cmocka_unit_test(test_model_init_is_uniform_in_fan_in_bound),
		cmocka_unit_test(test_model_layout_follows_state_dict_order),
		cmocka_unit_test(test_buckets_are_contiguous_and_cover_all_gradients),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
