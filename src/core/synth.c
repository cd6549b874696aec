/* synth.c - the synthetic generator on the host: fast, and its element-by-element definition. */

/* Every float operation in this file, and in the headers it inlines, rounds on its own, as
 * the device's __fmul_rn and __fadd_rn do: nothing is contracted into an FMA, whatever the
 * target (GCC contracts across statements by default where the target has FMA -- the
 * x86-64-v4 copies below, any aarch64 --, clang within one expression). Set before the
 * includes, so that rng.h's and synth.h's inline functions are compiled under it too. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <stdlib.h>

#include "core/synth.h"

/* GCC and clang build one copy of a function per listed target and pick the widest this
 * CPU runs when the program loads (an ifunc): the 64-bit multiplies of the hash are one
 * instruction for 8 lanes with AVX-512DQ. The float steps keep synth.h's order and
 * rounding in every copy (above). */
#if defined(__x86_64__) && defined(__linux__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define SYNTH_WIDE __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
#endif
#ifndef SYNTH_WIDE
#define SYNTH_WIDE
#endif
/* v[j] = a * (2 u(key, base + j) - 1) for j < n. */
SYNTH_WIDE static void uniform_row(uint64_t key, uint64_t base, size_t n, float a, float *v)
{
	for (size_t j = 0; j < n; j++)
		v[j] = a * (2.0f * rng_u01(key, base + j) - 1.0f);
}

void synth_teacher(const struct synth_spec *s, int *tap_idx, float *tap_w)
{
	for (int k = 0; k < s->outs; k++)
		for (int t = 0; t < SYNTH_TAPS; t++) {
			tap_idx[k * SYNTH_TAPS + t] = synth_tap_idx(s, k, t);
			tap_w[k * SYNTH_TAPS + t] = synth_tap_w(s, k, t);
		}
}

/* Teacher output plus noise of each of the outs outputs, from one sample's inputs x (in)
 * and its outputs' noise draws e (outs), in synth_output's order. */
SYNTH_WIDE static void outputs(const int *restrict tap_idx, const float *restrict tap_w, const float *restrict x,
				       const float *restrict e, int outs, float *restrict v)
{
	for (int k = 0; k < outs; k++) {
		const int *ti = tap_idx + (size_t)k * SYNTH_TAPS;
		const float *tw = tap_w + (size_t)k * SYNTH_TAPS;
		float acc = 0.0f;

		acc += tw[0] * x[ti[0]];
		acc += tw[1] * x[ti[1]];
		acc += tw[2] * x[ti[2]];
		acc += tw[3] * x[ti[3]];
		v[k] = acc + 0.1f * e[k];
	}
}

/* One sample's targets: outputs, or the label of the first largest. v: (outs) scratch. */
static void targets(const struct synth_spec *s, const int *tap_idx, const float *tap_w,
		    const float *x, const float *e, float *v, float *y)
{
	int best = 0;

	outputs(tap_idx, tap_w, x, e, s->outs, s->classes ? v : y);
	if (!s->classes)
		return;
	for (int k = 1; k < s->outs; k++)
		if (v[k] > v[best])
			best = k;
	y[0] = (float)best;
}

void synth_fill(const struct synth_spec *s, const int *tap_idx, const float *tap_w,
		const uint32_t *idx, size_t n, float *x, float *y, float *scratch)
{
	const size_t ydim = s->classes ? 1 : (size_t)s->outs;
	float *e = scratch + s->in, *v = e + s->outs;

	for (size_t r = 0; r < n; r++) {
		uint64_t base = synth_base(s, idx[r]);
		float *xr = x != NULL ? x + r * (size_t)s->in : scratch;

		uniform_row(s->key_data, base, (size_t)s->in, 1.7320508f, xr);
		if (y == NULL)
			continue;
		/* 1 * (2u - 1) is exact: e is the draw 0.1 scales in synth_output. */
		uniform_row(s->key_data, base + (uint64_t)s->in, (size_t)s->outs, 1.0f, e);
		targets(s, tap_idx, tap_w, xr, e, v, y + r * ydim);
	}
}

void synth_reference(const struct synth_spec *s, uint64_t i, float *x, float *y)
{
	uint64_t base = synth_base(s, i);
	float best = 0.0f;

	for (int j = 0; j < s->in && x != NULL; j++)
		x[j] = synth_input(s->key_data, base, j);
	for (int k = 0; k < s->outs && y != NULL; k++) {
		float v = synth_target(s, base, k);

		if (!s->classes)
			y[k] = v;
		else if (k == 0 || v > best)
			best = v, y[0] = (float)k;
	}
}

void synth_batch(const struct synth_spec *s, const uint32_t *idx, size_t n, float *x, float *y)
{
	const size_t taps = (size_t)s->outs * SYNTH_TAPS, ydim = s->classes ? 1 : (size_t)s->outs;
	int *tap_idx = malloc(taps * sizeof *tap_idx);
	float *tap_w = malloc(taps * sizeof *tap_w);
	float *scratch = malloc(((size_t)s->in + 2 * (size_t)s->outs) * sizeof *scratch);

	if (tap_idx != NULL && tap_w != NULL && scratch != NULL) {
		synth_teacher(s, tap_idx, tap_w);
		synth_fill(s, tap_idx, tap_w, idx, n, x, y, scratch);
	} else {
		for (size_t r = 0; r < n; r++)
			synth_reference(s, idx[r], x != NULL ? x + r * (size_t)s->in : NULL,
					y != NULL ? y + r * ydim : NULL);
	}
	free(tap_idx);
	free(tap_w);
	free(scratch);
}
