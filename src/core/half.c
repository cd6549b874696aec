/*
 * half.c - float32 <-> fp16 / bf16 conversion and the 16-bit sum (see half.h).
 *
 * The portable fp16 conversions are the bit-exact float tricks of
 * Maratyszcza's FP16 library (they need round-to-nearest and no flush to
 * zero, the C default); NaNs keep their sign and top payload bits and come out
 * quiet, as F16C's vcvtps2ph makes them, so both paths give the same bits.
 */
#include <string.h>

#include "core/half.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HALF_F16C 1 /* the run-time choice of F16C and AVX2 */
#include <immintrin.h> /* _mm256_cvtps_ph, _mm256_cvtph_ps */
#else
#define HALF_F16C 0
#endif

#define TILE 256 /* floats converted at a time by the sums' portable path */

static inline uint32_t bits_of(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof u);
	return u;
}

static inline float float_of(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof f);
	return f;
}

/* float32 -> fp16, nearest even, branch-free. */
static inline uint16_t f16_from(float f)
{
	const uint32_t w = bits_of(f), w2 = w + w, sign = w & 0x80000000u;
	/* Scaled up then down, the value is rounded at fp16's precision by the FPU; bias
	 * brings subnormals to their fixed point. */
	float base = (__builtin_fabsf(f) * 0x1.0p+112f) * 0x1.0p-110f;
	uint32_t bias = w2 & 0xFF000000u, b, nonsign, nan;

	bias = bias < 0x71000000u ? 0x71000000u : bias;
	base = float_of((bias >> 1) + 0x07800000u) + base;
	b = bits_of(base);
	nonsign = ((b >> 13) & 0x7C00u) + (b & 0x0FFFu);
	nan = 0x7E00u | ((w >> 13) & 0x03FFu); /* quiet, top payload kept */
	return (uint16_t)((sign >> 16) | (w2 > 0xFF000000u ? nan : nonsign));
}

/* fp16 -> float32, exact, branch-free. */
static inline float f16_to(uint16_t h)
{
	const uint32_t w = (uint32_t)h << 16, sign = w & 0x80000000u, w2 = w + w;
	const float normal = float_of((w2 >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
	const float sub = float_of((w2 >> 17) | (126u << 23)) - 0.5f;

	return float_of(sign | (w2 < (1u << 27) ? bits_of(sub) : bits_of(normal)));
}

/* float32 -> bf16, nearest even; a NaN keeps its top bits, made quiet. */
static inline uint16_t bf16_from(float f)
{
	const uint32_t w = bits_of(f);
	const uint32_t r = (w + 0x7FFFu + ((w >> 16) & 1u)) >> 16;

	return (uint16_t)((w & 0x7FFFFFFFu) > 0x7F800000u ? (w >> 16) | 0x40u : r);
}

static inline float bf16_to(uint16_t h)
{
	return float_of((uint32_t)h << 16);
}

#if HALF_F16C
static int f16c_allowed = 1;

static int f16c_on(void)
{
	return f16c_allowed && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
}

__attribute__((target("avx,f16c"))) static void f16c_narrow(uint16_t *dst, const float *src,
								size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm_storeu_si128((__m128i *)(dst + i),
				 _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
	for (; i < n; i++)
		dst[i] = f16_from(src[i]);
}

__attribute__((target("avx,f16c"))) static void f16c_widen(float *dst, const uint16_t *src,
							       size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
	for (; i < n; i++)
		dst[i] = f16_to(src[i]);
}

__attribute__((target("avx,f16c"))) static void f16c_sum(uint16_t *dst, const uint16_t *src,
							     size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(dst + i)));
		__m256 b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i)));

		_mm_storeu_si128((__m128i *)(dst + i),
				 _mm256_cvtps_ph(_mm256_add_ps(a, b), _MM_FROUND_TO_NEAREST_INT));
	}
	for (; i < n; i++)
		dst[i] = f16_from(f16_to(dst[i]) + f16_to(src[i]));
}

static int avx2_on(void)
{
	return f16c_allowed && __builtin_cpu_supports("avx2");
}

/* bf16 is integer work on the bits: the same loops, vectorised 8 wide. */
__attribute__((target("avx2"))) static void avx2_bf16_narrow(uint16_t *restrict dst,
								  const float *restrict src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = bf16_from(src[i]);
}

__attribute__((target("avx2"))) static void avx2_bf16_widen(float *restrict dst,
								 const uint16_t *restrict src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = bf16_to(src[i]);
}

__attribute__((target("avx2"))) static void avx2_bf16_sum(uint16_t *restrict dst,
							       const uint16_t *restrict src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = bf16_from(bf16_to(dst[i]) + bf16_to(src[i]));
}
#endif

int half_fast(int use)
{
#if HALF_F16C
	f16c_allowed = use;
	return f16c_on();
#else
	(void)use;
	return 0;
#endif
}

uint16_t half_round(float x, enum half_type t)
{
	return t == HALF_BF16 ? bf16_from(x) : f16_from(x);
}

float half_value(uint16_t x, enum half_type t)
{
	return t == HALF_BF16 ? bf16_to(x) : f16_to(x);
}

void half_narrow(uint16_t *restrict dst, const float *restrict src, size_t n, enum half_type t)
{
	if (t == HALF_BF16) {
#if HALF_F16C
		if (avx2_on()) {
			avx2_bf16_narrow(dst, src, n);
			return;
		}
#endif
		for (size_t i = 0; i < n; i++)
			dst[i] = bf16_from(src[i]);
		return;
	}
#if HALF_F16C
	if (f16c_on()) {
		f16c_narrow(dst, src, n);
		return;
	}
#endif
	for (size_t i = 0; i < n; i++)
		dst[i] = f16_from(src[i]);
}

void half_widen(float *restrict dst, const uint16_t *restrict src, size_t n, enum half_type t)
{
	if (t == HALF_BF16) {
#if HALF_F16C
		if (avx2_on()) {
			avx2_bf16_widen(dst, src, n);
			return;
		}
#endif
		for (size_t i = 0; i < n; i++)
			dst[i] = bf16_to(src[i]);
		return;
	}
#if HALF_F16C
	if (f16c_on()) {
		f16c_widen(dst, src, n);
		return;
	}
#endif
	for (size_t i = 0; i < n; i++)
		dst[i] = f16_to(src[i]);
}

void half_sum(uint16_t *restrict dst, const uint16_t *restrict src, size_t n, enum half_type t)
{
	if (t == HALF_BF16) {
#if HALF_F16C
		if (avx2_on()) {
			avx2_bf16_sum(dst, src, n);
			return;
		}
#endif
		for (size_t i = 0; i < n; i++)
			dst[i] = bf16_from(bf16_to(dst[i]) + bf16_to(src[i]));
		return;
	}
#if HALF_F16C
	if (f16c_on()) {
		f16c_sum(dst, src, n);
		return;
	}
#endif
	/* In tiles through float buffers: each of the three loops vectorises alone. */
	for (size_t a = 0; a < n; a += TILE) {
		size_t len = n - a < TILE ? n - a : TILE;
		float x[TILE], y[TILE];

		for (size_t i = 0; i < len; i++)
			x[i] = f16_to(dst[a + i]);
		for (size_t i = 0; i < len; i++)
			y[i] = f16_to(src[a + i]);
		for (size_t i = 0; i < len; i++)
			dst[a + i] = f16_from(x[i] + y[i]);
	}
}
