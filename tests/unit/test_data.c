/* test_data.c - synthetic samples are a pure function of (seed, index); .npy rows are gathered. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "core/synth.h"
#include "core/rng.h"

/* Synthetic sample i as ddptrain made it until the generator moved to synth.c (data.c's
 * synth_sample at d9594f3, with its teacher tables), kept here word for word so that the
 * fast generator is held to the bytes every committed reference and checkpoint saw. */
static void historic_sample(uint64_t seed, uint64_t first, int in, int out, int classify, uint64_t i,
			    float *x, float *y)
{
	const float a = 1.7320508f;
	uint64_t kt = rng_key(seed, RNG_TEACHER), key = rng_key(seed, RNG_DATA);
	uint64_t base = (first + i) * (uint64_t)(in + out);
	float best = 0.0f;

	for (int j = 0; j < in; j++)
		x[j] = a * (2.0f * rng_u01(key, base + (uint64_t)j) - 1.0f);
	for (int k = 0; k < out; k++) {
		float s = 0.0f, v;

		for (int t = 0; t < 4; t++) {
			size_t n = (size_t)k * 4 + (size_t)t;
			int ti = (int)(rng_u01(kt, 2 * n) * (float)in) % in;
			float tw = (2.0f * rng_u01(kt, 2 * n + 1) - 1.0f);

			s += tw * x[ti];
		}
		v = s + 0.1f * (2.0f * rng_u01(key, base + (uint64_t)(in + k)) - 1.0f);
		if (!classify)
			y[k] = v;
		else if (k == 0 || v > best)
			best = v, y[0] = (float)k;
	}
}

/* data_fill (synth_fill: the wide hash, the vectorized teacher) and synth_reference (the
 * element-by-element definition the CUDA kernel shares) both give the historic bytes, for
 * odd and wide shapes, regression and labels, indices near 2^32 and a validation offset. */
static void test_synthetic_fast_generator_gives_todays_bytes(void **state)
{
	static const struct { uint64_t seed, first; int in, out, classify; } c[] = {
		{0, 0, 1, 1, 0},      {1, 0, 3, 5, 0},     {42, 0, 17, 9, 1},   {7, 4000, 33, 2, 1},
		{123456789, 0, 257, 31, 0}, {5, 17, 4097, 3, 1}, {9, 0, 64, 4096, 0}, {2, 1 << 20, 1000, 10, 1},
	};
	const uint32_t idx[] = {0, 1, 2, 3, 999, 65535, 1u << 24, 4294967295u, 2147483647u, 12345, 77};
	const size_t n = sizeof idx / sizeof idx[0];

	for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
		struct dataset ds;
		struct diag d = {0};
		size_t ydim = c[k].classify ? 1 : (size_t)c[k].out;
		float *x = calloc(n * (size_t)c[k].in, sizeof *x), *y = calloc(n * ydim, sizeof *y);
		float *hx = calloc((size_t)c[k].in, sizeof *hx), *hy = calloc((size_t)c[k].out, sizeof *hy);
		float *rx = calloc((size_t)c[k].in, sizeof *rx), *ry = calloc((size_t)c[k].out, sizeof *ry);

		assert_int_equal(data_init_synthetic(&ds, c[k].seed, c[k].first, 1000, c[k].in, c[k].out,
						     c[k].classify, &d), ST_OK);
		data_fill(&ds, idx, n, x, y);
		for (size_t s = 0; s < n; s++) {
			historic_sample(c[k].seed, c[k].first, c[k].in, c[k].out, c[k].classify, idx[s], hx, hy);
			synth_reference(&ds.synth, idx[s], rx, ry);
			assert_memory_equal(x + s * (size_t)c[k].in, hx, (size_t)c[k].in * sizeof *x);
			assert_memory_equal(y + s * ydim, hy, ydim * sizeof *y);
			assert_memory_equal(rx, hx, (size_t)c[k].in * sizeof *x);
			assert_memory_equal(ry, hy, ydim * sizeof *y);
		}
		/* Inputs alone, targets alone: the same bytes (the device op fills either). */
		{
			float *scratch = malloc(((size_t)c[k].in + 2 * (size_t)c[k].out) * sizeof *scratch);
			float *x2 = calloc(n * (size_t)c[k].in, sizeof *x2), *y2 = calloc(n * ydim, sizeof *y2);

			synth_fill(&ds.synth, ds.tap_idx, ds.tap_w, idx, n, x2, NULL, scratch);
			synth_fill(&ds.synth, ds.tap_idx, ds.tap_w, idx, n, NULL, y2, scratch);
			assert_memory_equal(x2, x, n * (size_t)c[k].in * sizeof *x);
			assert_memory_equal(y2, y, n * ydim * sizeof *y);
			free(scratch), free(x2), free(y2);
		}
		data_free(&ds);
		free(x), free(y), free(hx), free(hy), free(rx), free(ry);
	}
}

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
		cmocka_unit_test(test_synthetic_fast_generator_gives_todays_bytes),
		cmocka_unit_test(test_synthetic_seed_changes_the_data),
		cmocka_unit_test(test_synthetic_inputs_have_unit_variance_and_targets_are_learnable),
		cmocka_unit_test(test_synthetic_labels_are_the_teachers_argmax_and_val_continues_the_stream),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
