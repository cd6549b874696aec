/*
 * test_backend.c - the CPU backend's kernels: Linear forward (with the fused ReLU)
 * and backward, in panels too, ReLU, and the gradient norm and clipping, against
 * naive loops, finite differences and hand-computed values. Backward in panels
 * equals backward whole bit for bit where the BLAS computes a row panel as it
 * computes those rows of the whole product (tests/lib/blasrows.h asks it), else
 * within the rounding of a dot product summed in another order. The gradient scale
 * comes after the bf16 roundings. The replica check's digest against splitmix64's
 * reference output and its own sum. The loss kernels are in test_loss.c.
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
#include "core/hash64.h"
#include "lib/blasrows.h"
#include "lib/fill.h"

static const struct backend_ops *ops = &backend_cpu_ops;

static void test_linear_forward_matches_naive_loops(void **state)
{
	enum { N = 4, IN = 3, OUT = 5 };
	float x[N * IN], w[OUT * IN], b[OUT], y[N * OUT];

	fill(x, N * IN, 1);
	fill(w, OUT * IN, 2);
	fill(b, OUT, 3);
	ops->linear_forward(NULL, y, x, w, b, N, IN, OUT, 0);
	for (int i = 0; i < N; i++)
		for (int o = 0; o < OUT; o++) {
			double s = b[o];

			for (int k = 0; k < IN; k++)
				s += (double)x[i * IN + k] * w[o * IN + k]; /* w is (out, in) */
			assert_float_equal(y[i * OUT + o], s, 1e-5);
		}
}

static void test_linear_forward_fuses_relu(void **state)
{
	enum { N = 5, IN = 4, OUT = 6 };
	float x[N * IN], w[OUT * IN], b[OUT], y[N * OUT], yr[N * OUT];
	int negatives = 0;

	fill(x, N * IN, 21);
	fill(w, OUT * IN, 22);
	fill(b, OUT, 23);
	ops->linear_forward(NULL, y, x, w, b, N, IN, OUT, 0);
	ops->linear_forward(NULL, yr, x, w, b, N, IN, OUT, 1);
	for (int i = 0; i < N * OUT; i++) {
		assert_true(yr[i] == (y[i] > 0.0f ? y[i] : 0.0f));
		negatives += y[i] < 0.0f;
	}
	assert_true(negatives > 0); /* the case is not vacuous */
}

/* f(x, w, b) = sum(r * linear(x)); its gradients are exactly what linear_backward gives for dy = r. */
static double probe(const float *x, const float *w, const float *b, const float *r, int n, int in,
		    int out)
{
	float y[64];
	double s = 0;

	ops->linear_forward(NULL, y, x, w, b, n, in, out, 0);
	for (int i = 0; i < n * out; i++)
		s += (double)r[i] * y[i];
	return s;
}

static void test_linear_backward_matches_finite_differences(void **state)
{
	enum { N = 3, IN = 4, OUT = 2 };
	float x[N * IN], w[OUT * IN], b[OUT], r[N * OUT], dx[N * IN], dw[OUT * IN], db[OUT];
	const float eps = 1e-2f;
	float *vars[3] = {x, w, b}, *grads[3] = {dx, dw, db};
	int sizes[3] = {N * IN, OUT * IN, OUT};

	fill(x, N * IN, 4);
	fill(w, OUT * IN, 5);
	fill(b, OUT, 6);
	fill(r, N * OUT, 7);
	ops->linear_backward(NULL, dx, dw, db, r, x, w, N, IN, OUT, 1.0f, 0);
	for (int v = 0; v < 3; v++)
		for (int i = 0; i < sizes[v]; i++) {
			float keep = vars[v][i];
			double up, down;

			vars[v][i] = keep + eps;
			up = probe(x, w, b, r, N, IN, OUT);
			vars[v][i] = keep - eps;
			down = probe(x, w, b, r, N, IN, OUT);
			vars[v][i] = keep;
			assert_float_equal(grads[v][i], (up - down) / (2 * eps), 1e-4);
		}
}

static void test_linear_backward_accumulates_weight_and_bias_gradients(void **state)
{
	enum { N = 2, IN = 2, OUT = 2 };
	float x[N * IN], w[OUT * IN], r[N * OUT], dw1[OUT * IN], db1[OUT], dw2[OUT * IN], db2[OUT];

	fill(x, N * IN, 8);
	fill(w, OUT * IN, 9);
	fill(r, N * OUT, 10);
	ops->linear_backward(NULL, NULL, dw1, db1, r, x, w, N, IN, OUT, 1.0f, 0);
	memcpy(dw2, dw1, sizeof dw1);
	memcpy(db2, db1, sizeof db1);
	ops->linear_backward(NULL, NULL, dw2, db2, r, x, w, N, IN, OUT, 1.0f, 1);
	for (int i = 0; i < OUT * IN; i++)
		assert_float_equal(dw2[i], 2 * dw1[i], 1e-6);
	for (int i = 0; i < OUT; i++)
		assert_float_equal(db2[i], 2 * db1[i], 1e-6);
}

/* gscale multiplies the weight and bias gradients, never dx: in float32 as SGEMM's alpha
 * (within rounding), in bf16 each bf16 result times gscale in float32, bit for bit, set
 * and then added to. A third is not a power of two: the same factor in dy, before the
 * bf16 roundings, gives other values (the case is not vacuous). */
static void test_linear_backward_scales_weight_gradients_after_bf16_rounding(void **state)
{
	enum { N = 6, IN = 5, OUT = 7 };
	const float third = 1.0f / 3.0f;
	float x[N * IN], w[OUT * IN], dy[N * OUT], dy3[N * OUT];
	float dx[2][N * IN], dw[3][OUT * IN], db[3][OUT];
	int differ = 0;

	fill(x, N * IN, 31);
	fill(w, OUT * IN, 32);
	fill(dy, N * OUT, 33);
	for (int i = 0; i < N * OUT; i++)
		dy3[i] = third * dy[i];
	for (int p = 0; p < 2; p++) {
		struct backend be;
		struct backend_config cfg = {.precision = p ? PRECISION_BF16 : PRECISION_FP32};
		struct diag d = {0};

		assert_int_equal(backend_init(&be, ops, &cfg, &d), ST_OK);
		ops->linear_backward(be.ctx, dx[0], dw[0], db[0], dy, x, w, N, IN, OUT, 1.0f, 0);
		ops->linear_backward(be.ctx, dx[1], dw[1], db[1], dy, x, w, N, IN, OUT, third, 0);
		assert_memory_equal(dx[0], dx[1], sizeof dx[0]);
		for (int i = 0; i < OUT * IN + OUT; i++) {
			float a = i < OUT * IN ? dw[0][i] : db[0][i - OUT * IN];
			float b = i < OUT * IN ? dw[1][i] : db[1][i - OUT * IN];

			if (p)
				assert_true(b == third * a);
			else
				assert_float_equal(b, third * a, 1e-6);
		}
		/* accumulating: the scaled gradient added in float32 */
		memcpy(dw[2], dw[1], sizeof dw[1]);
		memcpy(db[2], db[1], sizeof db[1]);
		ops->linear_backward(be.ctx, NULL, dw[2], db[2], dy, x, w, N, IN, OUT, third, 1);
		for (int i = 0; i < OUT * IN; i++)
			assert_float_equal(dw[2][i], dw[1][i] + dw[1][i], p ? 0 : 1e-6);
		for (int i = 0; i < OUT; i++)
			assert_float_equal(db[2][i], db[1][i] + db[1][i], p ? 0 : 1e-6);
		if (p) { /* the third in the seed instead */
			ops->linear_backward(be.ctx, NULL, dw[2], db[2], dy3, x, w, N, IN, OUT, 1.0f,
					     0);
			for (int i = 0; i < OUT * IN; i++)
				differ += dw[2][i] != dw[1][i];
			assert_true(differ > 0);
		}
		backend_free(&be);
	}
}

/* What the progress hook saw: dw's rows reported in increasing order, without gaps. */
struct seen {
	float *dw;
	size_t next; /* floats of dw reported so far */
	int calls, gaps;
};

static void record(void *arg, float *done, size_t n)
{
	struct seen *s = arg;

	s->calls++;
	if (n == 0)
		return;
	if (done != s->dw + s->next)
		s->gaps++;
	s->next += n;
}

/* Backward with panels against backward whole: dw's rows and dx's rows in panels, each
 * element the same dot product as the whole product's (depth n for dw, out for dx). Bit
 * for bit where the BLAS gives panels the whole product's bits; where it does not (say,
 * OpenBLAS's Haswell kernels on an AVX-512 CPU), each element within blas_dot_gap: the
 * same sums in another order. db is the backend's own loop, bit for bit either way. */
static void test_linear_backward_in_panels_matches_whole_and_reports_rows_in_order(void **state)
{
	enum { N = 64, IN = 512, OUT = 512 }; /* long enough for panels (2 N IN OUT > 32 MFLOP) */
	struct backend be;
	struct backend_config cfg = {0};
	struct diag d = {0};
	float *x = malloc(sizeof(float) * N * IN), *w = malloc(sizeof(float) * OUT * IN),
	      *dy = malloc(sizeof(float) * N * OUT);
	float *dx[2], *dw[2], *db[2];
	struct seen s = {0};
	char why[512];

	assert_int_equal(backend_init(&be, ops, &cfg, &d), ST_OK);
	assert_non_null(ops->set_progress);
	for (int k = 0; k < 2; k++) {
		dx[k] = malloc(sizeof(float) * N * IN);
		dw[k] = malloc(sizeof(float) * OUT * IN);
		db[k] = malloc(sizeof(float) * OUT);
	}
	fill(x, N * IN, 11);
	fill(w, OUT * IN, 12);
	fill(dy, N * OUT, 13);
	ops->linear_backward(be.ctx, dx[0], dw[0], db[0], dy, x, w, N, IN, OUT, 1.0f, 0);
	s.dw = dw[1];
	ops->set_progress(be.ctx, record, &s, 16e6);
	ops->linear_backward(be.ctx, dx[1], dw[1], db[1], dy, x, w, N, IN, OUT, 1.0f, 0);
	ops->set_progress(be.ctx, NULL, NULL, 0);
	assert_true(s.calls > 2); /* it did split */
	assert_int_equal(s.gaps, 0);
	assert_int_equal(s.next, (size_t)OUT * IN);
	assert_memory_equal(db[0], db[1], sizeof(float) * OUT);
	if (blas_rows_exact(why, sizeof why, NULL) == 1) {
		assert_memory_equal(dw[0], dw[1], sizeof(float) * OUT * IN);
		assert_memory_equal(dx[0], dx[1], sizeof(float) * N * IN);
	} else {
		size_t nd[2];
		double worst[2];

		/* dw = dy^T x: A(o, i) = dy[i * OUT + o]; dx = dy w: A(i, o) = dy[i * OUT + o] */
		assert_int_equal(blas_beyond_gap(dw[1], dw[0], OUT, IN, N, dy, 1, OUT, x, IN, &nd[0], &worst[0]), 0);
		assert_int_equal(blas_beyond_gap(dx[1], dx[0], N, IN, OUT, dy, OUT, 1, w, IN, &nd[1], &worst[1]), 0);
		print_message("# panels checked within float rounding, not bit for bit (%zu of dw's and %zu of dx's "
			      "floats differ, at most %.2g and %.2g of the bound): %s\n",
			      nd[0], nd[1], worst[0], worst[1], why);
	}
	for (int k = 0; k < 2; k++) {
		free(dx[k]);
		free(dw[k]);
		free(db[k]);
	}
	free(x);
	free(w);
	free(dy);
	backend_free(&be);
}

static void test_relu_forward_and_backward(void **state)
{
	float y[5] = {-2, -0.0f, 0.5f, 3, -1e-30f}, dy[5] = {1, 2, 3, 4, 5};
	const float want_y[5] = {0, 0, 0.5f, 3, 0}, want_dy[5] = {0, 0, 3, 4, 0};

	ops->relu_forward(NULL, y, 5);
	assert_memory_equal(y, want_y, sizeof y);
	ops->relu_backward(NULL, dy, y, 5);
	assert_memory_equal(dy, want_dy, sizeof dy);
}

/* torch.relu(nan) is nan and its backward (threshold_backward) passes the gradient on:
 * a NaN must not be hidden as 0. */
static void test_relu_propagates_nan_like_torch(void **state)
{
	float y[2] = {NAN, -1}, dy[2] = {7, 8}, x[1] = {NAN}, w[1] = {1}, b[1] = {0}, yl[1];

	ops->relu_forward(NULL, y, 2);
	assert_true(isnan(y[0]));
	assert_true(y[1] == 0.0f);
	ops->relu_backward(NULL, dy, y, 2);
	assert_true(dy[0] == 7.0f);
	assert_true(dy[1] == 0.0f);
	ops->linear_forward(NULL, yl, x, w, b, 1, 1, 1, 1);
	assert_true(isnan(yl[0]));
}

static void test_sumsq_and_clip_match_clip_grad_norm(void **state)
{
	/* Two tensors [3] and [4]: norm 5; clip_grad_norm_(max_norm=1) scales by
	 * 1 / (5 + 1e-6); max_norm=10 leaves them alone (the coefficient is clamped to 1). */
	float a[1] = {3.0f}, b[1] = {4.0f}, norm[1] = {99.0f};

	ops->sumsq(NULL, norm, a, 1, 0);
	ops->sumsq(NULL, norm, b, 1, 1);
	assert_float_equal(norm[0], 25.0, 0);
	ops->clip(NULL, a, 1, norm, 10.0f);
	assert_float_equal(a[0], 3.0, 0);
	ops->clip(NULL, a, 1, norm, 1.0f);
	ops->clip(NULL, b, 1, norm, 1.0f);
	assert_float_equal(a[0], 3.0 / (5.0 + 1e-6), 1e-7);
	assert_float_equal(b[0], 4.0 / (5.0 + 1e-6), 1e-7);
}

/* The replica check's digest (core/hash64.h) of x numbered from first. */
static uint64_t digest(const float *x, size_t n, uint64_t first)
{
	float out[2];
	uint64_t h;

	ops->hash64(NULL, out, x, n, first);
	memcpy(&h, out, sizeof h);
	return h;
}

static void test_hash64_is_splitmix64_summed_over_index_and_bits(void **state)
{
	const float x[3] = {1.0f, -0.0f, 0.0f};

	/* splitmix64's first output from state 0 (Vigna's reference splitmix64.c) */
	assert_true(hash64_mix(0) == 0xe220a8397b1dcdafULL);
	/* {1, -0, 0}: the terms of (index << 32 | bits) summed mod 2^64, computed apart (Python's
	 * integers) */
	assert_true(digest(x, 3, 0) == 0x3a9566a59bcd2116ULL);
}

static void test_hash64_sees_one_bit_and_order_and_splits_by_first(void **state)
{
	enum { N = 1000 };
	float x[N], y[N];
	uint64_t whole;
	uint32_t bits;

	fill(x, N, 5);
	whole = digest(x, N, 0);
	/* pieces numbered from where they start add up to the whole, in any order */
	assert_true(digest(x, 377, 0) + digest(x + 377, N - 377, 377) == whole);
	assert_true(digest(x + 377, N - 377, 377) + digest(x, 377, 0) == whole);
	/* the lowest bit of one element, two elements swapped, -0 for 0: each seen */
	memcpy(y, x, sizeof y);
	memcpy(&bits, &y[500], sizeof bits);
	bits ^= 1;
	memcpy(&y[500], &bits, sizeof bits);
	assert_true(digest(y, N, 0) != whole);
	memcpy(y, x, sizeof y);
	y[3] = x[4];
	y[4] = x[3];
	assert_true(x[3] != x[4] && digest(y, N, 0) != whole);
	y[0] = 0.0f;
	x[0] = -0.0f;
	assert_true(digest(y, 1, 0) != digest(x, 1, 0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_linear_forward_matches_naive_loops),
		cmocka_unit_test(test_linear_forward_fuses_relu),
		cmocka_unit_test(test_linear_backward_matches_finite_differences),
		cmocka_unit_test(test_linear_backward_accumulates_weight_and_bias_gradients),
		cmocka_unit_test(test_linear_backward_scales_weight_gradients_after_bf16_rounding),
		cmocka_unit_test(test_linear_backward_in_panels_matches_whole_and_reports_rows_in_order),
		cmocka_unit_test(test_relu_forward_and_backward),
		cmocka_unit_test(test_relu_propagates_nan_like_torch),
		cmocka_unit_test(test_sumsq_and_clip_match_clip_grad_norm),
		cmocka_unit_test(test_hash64_is_splitmix64_summed_over_index_and_bits),
		cmocka_unit_test(test_hash64_sees_one_bit_and_order_and_splits_by_first),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
