/*
 * fill.h - for the cmocka tests of the kernels and the model: fill a buffer with
 * values in [-1, 1) that are a pure function of (key, i), so a case is the same on
 * every run and every machine.
 */
#ifndef DDPT_TESTS_FILL_H
#define DDPT_TESTS_FILL_H

#include <stddef.h> /* size_t */
#include <stdint.h> /* uint64_t */

#include "core/rng.h" /* rng_u01 */

static void fill(float *v, size_t n, uint64_t key)
{
	for (size_t i = 0; i < n; i++)
		v[i] = 2.0f * rng_u01(key, i) - 1.0f;
}

#endif
