/* test_half.c - fp16 and bf16 on the wire: every 16-bit pattern survives the round trip,
 * ties round to even, known values, the 16-bit sum is the exact sum rounded once, and the
 * F16C path gives the portable path's bits. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/half.h"

static uint32_t bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof u);
	return u;
}

static float fl(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof f);
	return f;
}

static int is_nan16(uint16_t h, enum half_type t)
{
	return t == HALF_BF16 ? (h & 0x7FFF) > 0x7F80 : (h & 0x7FFF) > 0x7C00;
}

/* Every pattern, through the array loops and the scalar ones, on both paths. */
static void round_trip(enum half_type t)
{
	const size_t n = 65536;
	uint16_t *h = malloc(n * sizeof *h), *back = malloc(n * sizeof *back);
	float *f = malloc(n * sizeof *f);

	for (size_t i = 0; i < n; i++)
		h[i] = (uint16_t)i;
	for (int fast = 1; fast >= 0; fast--) {
		half_fast(fast);
		half_widen(f, h, n, t);
		half_narrow(back, f, n, t);
		for (size_t i = 0; i < n; i++) {
			if (is_nan16(h[i], t)) {
				assert_true(isnan(f[i]));
				assert_true(is_nan16(back[i], t));
				assert_int_equal(back[i] & 0x8000, h[i] & 0x8000);
			} else {
				assert_int_equal(back[i], h[i]);
				assert_int_equal(half_round(half_value(h[i], t), t), h[i]);
				assert_int_equal(bits(half_value(h[i], t)), bits(f[i]));
			}
		}
	}
	half_fast(1);
	free(h);
	free(back);
	free(f);
}

static void test_every_fp16_pattern_widens_and_narrows_back_to_itself(void **state)
{
	round_trip(HALF_F16);
}

static void test_every_bf16_pattern_widens_and_narrows_back_to_itself(void **state)
{
	round_trip(HALF_BF16);
}

static void test_known_values(void **state)
{
	static const struct { float x; uint16_t f16, bf16; } k[] = {
		{0.0f, 0x0000, 0x0000},
		{-0.0f, 0x8000, 0x8000},
		{1.0f, 0x3C00, 0x3F80},
		{-2.0f, 0xC000, 0xC000},
		{0.5f, 0x3800, 0x3F00},
		{65504.0f, 0x7BFF, 0x4780}, /* fp16's largest; bf16 rounds 65504 to 65536 */
		{65520.0f, 0x7C00, 0x4780}, /* halfway to 2^16: fp16 overflows to Inf */
		{1e10f, 0x7C00, 0x5015},
		{INFINITY, 0x7C00, 0x7F80},
		{-INFINITY, 0xFC00, 0xFF80},
		{0x1p-24f, 0x0001, 0x3380},    /* fp16's smallest subnormal */
		{0x1p-25f, 0x0000, 0x3300},    /* half of it: a tie, to even (0) */
		{0x1.8p-24f, 0x0002, 0x33C0},  /* 1.5 x the smallest: tie, to even (2) */
		{0x1p-14f, 0x0400, 0x3880},    /* fp16's smallest normal */
		{0x1.ffcp-15f, 0x0400, 0x3880}, /* the largest subnormal and a half: tie, to even */
		{3.14159265f, 0x4248, 0x4049},
		{0.1f, 0x2E66, 0x3DCD},
	};

	for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
		for (int fast = 1; fast >= 0; fast--) {
			uint16_t a, b;

			half_fast(fast);
			half_narrow(&a, &k[i].x, 1, HALF_F16);
			half_narrow(&b, &k[i].x, 1, HALF_BF16);
			assert_int_equal(a, k[i].f16);
			assert_int_equal(b, k[i].bf16);
			assert_int_equal(half_round(k[i].x, HALF_F16), k[i].f16);
		}
	}
	half_fast(1);
	assert_true(isnan(half_value(half_round(NAN, HALF_F16), HALF_F16)));
	assert_true(isnan(half_value(half_round(-NAN, HALF_BF16), HALF_BF16)));
	assert_true(half_value(0x0001, HALF_F16) == 0x1p-24f);
	assert_true(half_value(0x3F80, HALF_BF16) == 1.0f);
}

static void test_ties_round_to_even(void **state)
{
	for (uint32_t h = 0; h < 0x7C00; h++) { /* fp16: every gap between neighbours */
		float lo = half_value((uint16_t)h, HALF_F16), hi = half_value((uint16_t)(h + 1), HALF_F16);
		float mid = (float)(((double)lo + (double)hi) / 2); /* exact in float */
		uint16_t want = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;

		if (h + 1 == 0x7C00)
			want = 0x7C00; /* above the largest: the tie goes to Inf (its even neighbour) */
		for (int fast = 1; fast >= 0; fast--) {
			uint16_t got;

			half_fast(fast);
			half_narrow(&got, &mid, 1, HALF_F16);
			assert_int_equal(got, want);
		}
	}
	half_fast(1);
	for (uint32_t h = 0; h < 0x7F80; h += 7) { /* bf16: the midpoints are float32 values */
		float mid = fl((h << 16) | 0x8000u);
		uint16_t want = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;

		assert_int_equal(half_round(mid, HALF_BF16), want);
		assert_int_equal(half_round(fl((h << 16) | 0x8001u), HALF_BF16), h + 1);
		assert_int_equal(half_round(fl((h << 16) | 0x7FFFu), HALF_BF16), h);
	}
}

/* The exact sum in double (exact: both are 16-bit values), rounded once to t with
 * double arithmetic: to a multiple of the unit in the last place of its binade (nearbyint
 * rounds ties to even), past the largest value to Inf. */
static uint16_t sum_ref(uint16_t a, uint16_t b, enum half_type t)
{
	const int p = t == HALF_F16 ? 11 : 8, emin = t == HALF_F16 ? -14 : -126;
	const double max = t == HALF_F16 ? 65504.0 : (double)0x1.fep127f;
	double s = (double)half_value(a, t) + (double)half_value(b, t), ulp, r;
	int e;

	if (isinf(s) || s == 0)
		return half_round((float)s, t);
	(void)frexp(s, &e);
	e = e - 1 < emin ? emin : e - 1;
	ulp = ldexp(1.0, e - p + 1);
	r = nearbyint(s / ulp) * ulp;
	if (fabs(r) > max)
		r = r > 0 ? INFINITY : -INFINITY;
	return half_round((float)r, t); /* r is a 16-bit value: exact */
}

static void check_sums(enum half_type t)
{
	enum { N = 4096 };
	uint16_t a[N], b[N], fast[N], slow[N];
	uint32_t x = 12345;

	for (int round = 0; round < 64; round++) {
		for (int i = 0; i < N; i++) {
			x = x * 1664525u + 1013904223u;
			a[i] = (uint16_t)(x >> 16);
			x = x * 1664525u + 1013904223u;
			/* half the time a value near a: cancellation and ties */
			b[i] = (i & 1) ? (uint16_t)(x >> 16) : (uint16_t)((a[i] ^ 0x8000) + (x >> 29) - 3);
		}
		memcpy(fast, a, sizeof a);
		memcpy(slow, a, sizeof a);
		half_fast(1);
		half_sum(fast, b, N, t);
		half_fast(0);
		half_sum(slow, b, N, t);
		half_fast(1);
		for (int i = 0; i < N; i++) {
			int nan = is_nan16(a[i], t) || is_nan16(b[i], t) ||
				  isnan(half_value(a[i], t) + half_value(b[i], t));

			if (nan) {
				assert_true(is_nan16(fast[i], t) && is_nan16(slow[i], t));
				continue;
			}
			assert_int_equal(fast[i], slow[i]);
			if (fast[i] != sum_ref(a[i], b[i], t))
				fail_msg("%04x + %04x: %04x, want %04x", a[i], b[i], fast[i],
					 sum_ref(a[i], b[i], t));
		}
	}
}

static void test_fp16_sum_is_the_exact_sum_rounded_once(void **state)
{
	check_sums(HALF_F16);
}

static void test_bf16_sum_is_the_exact_sum_rounded_once(void **state)
{
	check_sums(HALF_BF16);
}

static void test_fast_path_gives_the_portable_bits(void **state)
{
	enum { N = 1 << 16 };
	float *f = malloc(N * sizeof *f), *wa = malloc(N * sizeof *wa), *wb = malloc(N * sizeof *wb);
	uint16_t *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
	uint32_t x = 7;

	for (int i = 0; i < N; i++) { /* every exponent, every payload: NaNs included */
		x = x * 1664525u + 1013904223u;
		f[i] = fl(x);
	}
	half_fast(1);
	half_narrow(a, f, N, HALF_F16);
	half_fast(0);
	half_narrow(b, f, N, HALF_F16);
	assert_memory_equal(a, b, N * sizeof *a);
	for (int i = 0; i < N; i++)
		a[i] = (uint16_t)i;
	half_fast(1);
	half_widen(wa, a, N, HALF_F16);
	half_fast(0);
	half_widen(wb, a, N, HALF_F16);
	for (int i = 0; i < N; i++)
		if (!isnan(wa[i]))
			assert_int_equal(bits(wa[i]), bits(wb[i]));
		else
			assert_true(isnan(wb[i]));
	half_fast(1);
	free(f);
	free(wa);
	free(wb);
	free(a);
	free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_fp16_pattern_widens_and_narrows_back_to_itself),
		cmocka_unit_test(test_every_bf16_pattern_widens_and_narrows_back_to_itself),
		cmocka_unit_test(test_known_values),
		cmocka_unit_test(test_ties_round_to_even),
		cmocka_unit_test(test_fp16_sum_is_the_exact_sum_rounded_once),
		cmocka_unit_test(test_bf16_sum_is_the_exact_sum_rounded_once),
		cmocka_unit_test(test_fast_path_gives_the_portable_bits),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
