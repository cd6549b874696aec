/* test_data.c - synthetic samples are a pure function of (seed, index); .npy rows are gathered. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "data/data.h"

static void test_synthetic_sample_depends_only_on_seed_and_index(void **state)
{
	struct dataset a, b;
	struct diag d = {0};
	const uint32_t order1[3] = {7, 3, 999}, order2[2] = {999, 7};
	float x1[3 * 10], y1[3 * 5], x2[2 * 10], y2[2 * 5];

	assert_int_equal(data_init_synthetic(&a, 42, 0, 1000, 10, 5, 0, &d), ST_OK);
	assert_int_equal(data_init_synthetic(&b, 42, 0, 1000, 10, 5, 0, &d), ST_OK);
	data_fill(&a, order1, 3, x1, y1);
	data_fill(&b, order2, 2, x2, y2);
	assert_memory_equal(x1, x2 + 10, 10 * sizeof(float));     /* sample 7 */
	assert_memory_equal(y1, y2 + 5, 5 * sizeof(float));
	assert_memory_equal(x1 + 20, x2, 10 * sizeof(float));     /* sample 999 */
	data_free(&a);
	data_free(&b);
	data_free(&b);
}

static void test_synthetic_seed_changes_the_data(void **state)
{
	struct dataset a, b;
	struct diag d = {0};
	const uint32_t idx[1] = {5};
	float xa[10], ya[5], xb[10], yb[5];

	assert_int_equal(data_init_synthetic(&a, 1, 0, 10, 10, 5, 0, &d), ST_OK);
	assert_int_equal(data_init_synthetic(&b, 2, 0, 10, 10, 5, 0, &d), ST_OK);
	data_fill(&a, idx, 1, xa, ya);
	data_fill(&b, idx, 1, xb, yb);
	assert_memory_not_equal(xa, xb, sizeof xa);
	data_free(&a);
	data_free(&b);
}

static void test_synthetic_inputs_have_unit_variance_and_targets_are_learnable(void **state)
{
	struct dataset a;
	struct diag d = {0};
	enum { N = 4000 };
	static float x[N * 10], y[N * 5];
	static uint32_t idx[N];
	double mean = 0, var = 0, resid = 0;

	for (uint32_t i = 0; i < N; i++)
		idx[i] = i;
	assert_int_equal(data_init_synthetic(&a, 0, 0, N, 10, 5, 0, &d), ST_OK);
	data_fill(&a, idx, N, x, y);
	for (int i = 0; i < N * 10; i++)
		mean += x[i];
	mean /= N * 10;
	for (int i = 0; i < N * 10; i++)
		var += (x[i] - mean) * (x[i] - mean);
	var /= N * 10;
	assert_true(fabs(mean) < 0.05);
	assert_true(fabs(var - 1.0) < 0.05);
	/* The teacher explains the targets up to noise of variance 0.01/3. */
	for (int i = 0; i < N; i++)
		for (int k = 0; k < 5; k++) {
			double s = 0;

			for (int t = 0; t < DATA_TAPS; t++)
				s += a.tap_w[k * DATA_TAPS + t] * x[i * 10 + a.tap_idx[k * DATA_TAPS + t]];
			resid += (y[i * 5 + k] - s) * (y[i * 5 + k] - s);
		}
	assert_true(resid / (N * 5) < 0.004);
	data_free(&a);
}

/* Classification labels are the argmax of the regression targets of the same samples,
 * and a validation set from index `first` is the continuation of the same generator. */
static void test_synthetic_labels_are_the_teachers_argmax_and_val_continues_the_stream(void **state)
{
	struct dataset reg, cls, val;
	struct diag d = {0};
	uint32_t idx[50], vidx[10];
	float x[50 * 10], y[50 * 5], xc[50 * 10], lab[50], xv[10 * 10], lv[10];
	int seen[5] = {0};

	for (uint32_t i = 0; i < 50; i++)
		idx[i] = i;
	for (uint32_t i = 0; i < 10; i++)
		vidx[i] = i;
	assert_int_equal(data_init_synthetic(&reg, 7, 0, 50, 10, 5, 0, &d), ST_OK);
	assert_int_equal(data_init_synthetic(&cls, 7, 0, 40, 10, 5, 1, &d), ST_OK);
	assert_int_equal(data_init_synthetic(&val, 7, 40, 10, 10, 5, 1, &d), ST_OK);
	assert_int_equal(cls.out, 1);
	assert_int_equal(cls.classes, 5);
	data_fill(&reg, idx, 50, x, y);
	data_fill(&cls, idx, 50, xc, lab);
	data_fill(&val, vidx, 10, xv, lv);
	assert_memory_equal(x, xc, sizeof x);
	for (int i = 0; i < 50; i++) {
		int best = 0;

		for (int k = 1; k < 5; k++)
			if (y[i * 5 + k] > y[i * 5 + best])
				best = k;
		assert_true(lab[i] == (float)best);
		seen[best]++;
	}
	for (int k = 0; k < 5; k++)
		assert_true(seen[k] > 0); /* every class occurs: a task, not a constant */
	assert_memory_equal(xv, x + 40 * 10, sizeof xv);
	assert_memory_equal(lv, lab + 40, sizeof lv);
	data_free(&reg);
	data_free(&cls);
	data_free(&val);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_synthetic_sample_depends_only_on_seed_and_index),
		cmocka_unit_test(test_synthetic_seed_changes_the_data),
		cmocka_unit_test(test_synthetic_inputs_have_unit_variance_and_targets_are_learnable),
		cmocka_unit_test(test_synthetic_labels_are_the_teachers_argmax_and_val_continues_the_stream),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
