/*
 * round16.h - IEEE half (fp16) and bfloat16 in plain C for the test doubles (the fake
 * GPU module, the stub NCCL) and the tests that check them: float32 rounded to nearest,
 * ties to even -- what __float2half_rn / __float2bfloat16_rn and torch's .half() /
 * .bfloat16() do -- and widened back exactly. Overflow rounds to infinity, NaN stays a
 * (quiet) NaN, half's subnormals are kept. Written from the formats' definitions, not
 * taken from CUDA, so a test that compares the real module with these checks one
 * against the other.
 */
#ifndef DDPT_ROUND16_H
#define DDPT_ROUND16_H

#include <stdint.h>
#include <string.h>

enum round16_type { ROUND16_F16, ROUND16_BF16 };

static inline uint32_t r16_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof u);
	return u;
}

static inline float r16_float(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof f);
	return f;
}

/* float32 -> bfloat16, nearest even: the top 16 bits after adding half an ulp of bf16
 * (plus the kept bit's parity for ties). */
static inline uint16_t bf16_from_float(float f)
{
	uint32_t u = r16_bits(f);

	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40u); /* NaN, kept quiet */
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

static inline float bf16_to_float(uint16_t h)
{
	return r16_float((uint32_t)h << 16);
}

/* float32 -> IEEE half, nearest even, with half's subnormals and infinity. */
static inline uint16_t f16_from_float(float f)
{
	uint32_t u = r16_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
	uint32_t mant, shift, q, rem, halfway;
	int e;

	if (a > 0x7f800000u)
		return (uint16_t)(sign | 0x7e00u); /* NaN */
	if (a >= 0x477ff000u)                   /* >= 65520: rounds to infinity */
		return (uint16_t)(sign | 0x7c00u);
	e = (int)(a >> 23) - 127;
	if (e >= -14) { /* normal in half: 10 of the 23 mantissa bits kept */
		q = ((uint32_t)(e + 15) << 10) | ((a >> 13) & 0x3ffu);
		rem = a & 0x1fffu;
		if (rem > 0x1000u || (rem == 0x1000u && (q & 1u)))
			q++; /* may carry into the exponent: still right */
		return (uint16_t)(sign | q);
	}
	if (e < -25) /* below half the smallest subnormal (2^-25): zero */
		return (uint16_t)sign;
	/* subnormal: value / 2^-24, rounded to an integer */
	mant = (a & 0x7fffffu) | 0x800000u; /* value = mant * 2^(e-23) */
	shift = (uint32_t)(-1 - e);          /* mant * 2^(e-23) / 2^-24 = mant >> (-1 - e) */
	q = mant >> shift;
	rem = mant & ((1u << shift) - 1u);
	halfway = 1u << (shift - 1);
	if (rem > halfway || (rem == halfway && (q & 1u)))
		q++;
	return (uint16_t)(sign | q);
}

static inline float f16_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;

	if (e == 0x1f)
		return r16_float(sign | 0x7f800000u | (m << 13));
	if (e != 0)
		return r16_float(sign | ((e + 112u) << 23) | (m << 13));
	{
		float v = (float)m * (1.0f / 16777216.0f); /* m * 2^-24, exact */

		return sign ? -v : v;
	}
}

static inline uint16_t round16_from_float(enum round16_type t, float f)
{
	return t == ROUND16_F16 ? f16_from_float(f) : bf16_from_float(f);
}

static inline float round16_to_float(enum round16_type t, uint16_t h)
{
	return t == ROUND16_F16 ? f16_to_float(h) : bf16_to_float(h);
}

/* x rounded to the type and back. */
static inline float round16(enum round16_type t, float x)
{
	return round16_to_float(t, round16_from_float(t, x));
}

#endif
