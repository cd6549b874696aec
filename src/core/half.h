/*
 * half.h - 16-bit floats for gradients on the wire: float32 to IEEE fp16 and
 * to bfloat16 (round to nearest even, NaN stays NaN, overflow to infinity,
 * fp16 subnormals kept), widening back, and the 16-bit sum.
 *
 * The sum of two 16-bit values is taken in float32 and rounded once: float32
 * has 24 >= 2 x 11 + 2 significand bits, so that is exactly the 16-bit sum
 * (the result of rounding the exact sum), for fp16 and bf16 alike.
 *
 * On x86-64 every loop runs at memory speed (measured: 3.6-4.5 Gfloat/s
 * narrowing or widening, a plain float copy 3.7): fp16 through the F16C
 * instructions, bf16 (integer arithmetic on the bits) vectorised for AVX2,
 * each where the CPU has it (asked at run time). Elsewhere portable
 * branch-free loops give the same bits, bf16 at about half that speed and
 * fp16 at a tenth (the compiler does not vectorise its float tricks).
 *
 * Core floor: knows nothing of MPI or of the wire's options.
 */
#ifndef DDPT_HALF_H
#define DDPT_HALF_H

#include <stddef.h>
#include <stdint.h>

enum half_type { HALF_F16, HALF_BF16 };

/* dst[i] = src[i] rounded to t (nearest even), i < n. */
void half_narrow(uint16_t *dst, const float *src, size_t n, enum half_type t);
/* dst[i] = src[i] widened from t to float32 (exact), i < n. */
void half_widen(float *dst, const uint16_t *src, size_t n, enum half_type t);
/* dst[i] = round_t(dst[i] + src[i]), i < n: the 16-bit sum. */
void half_sum(uint16_t *dst, const uint16_t *src, size_t n, enum half_type t);

/* One value: round_t(x), and x widened. */
uint16_t half_round(float x, enum half_type t);
float half_value(uint16_t x, enum half_type t);

/* Whether the loops use F16C and AVX2: 1 if the CPU has F16C and it is allowed. use = 0
 * forbids both (the portable loops run), 1 allows them again; returns what now holds.
 * For the tests, which compare the two. */
int half_fast(int use);

#endif
