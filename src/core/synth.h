/*
 * synth.h - the synthetic data set's generator: sample i as a pure function of
 * (seed, i), written once for the host (synth.c: the loader's threads, the CPU
 * backend's op) and the device (cuda/synth.cu), so that both make the same bytes.
 * In core/, beside rng.h, because the backends (floor 1) take it as an operation's
 * argument; data/data.h is the data set built on it.
 *
 * Sample i, counter base c = (first + i) * (in + outs):
 *   x[j] = sqrt3 * (2 u(c + j) - 1)                      j < in
 *   v[k] = (((w0 x[t0] + w1 x[t1]) + w2 x[t2]) + w3 x[t3]) + 0.1 (2 u(c + in + k) - 1)
 *   y[k] = v[k] (regression), or y[0] = the first k of the largest v[k] (classes)
 * with u = rng_u01(key_data, .) and the teacher's taps (t, w) of output k from
 * rng_u01(key_teacher, 2 (4k + t)) and (.. + 1). Every float operation is one IEEE
 * rounding in that order: 2u - 1 is exact, and no multiply is fused with an add
 * (synth.c compiles this with contraction off; the device uses __fmul_rn and
 * __fadd_rn, which nvcc never contracts, in a file built with -fmad=false). Not a
 * data set: no storage, no shuffling.
 */
#ifndef DDPT_SYNTH_H
#define DDPT_SYNTH_H

#include <stddef.h>
#include <stdint.h>

#include "core/rng.h" /* rng_u01, RNG_FN */

#define SYNTH_TAPS 4 /* inputs each synthetic target depends on */

/* The whole generator: six numbers, the same on every rank and device. */
struct synth_spec {
	uint64_t key_data;    /* rng_key(seed, RNG_DATA): inputs and noise */
	uint64_t key_teacher; /* rng_key(seed, RNG_TEACHER): the taps */
	uint64_t first;       /* generator index of sample 0 */
	int in;               /* inputs per sample */
	int outs;             /* teacher outputs: regression targets, or classes */
	int classes;          /* classification: outs (one label per sample); 0: regression */
};

#ifdef __CUDA_ARCH__ /* nvcc's device pass; its host pass and every C compiler: plain */
#define SYNTH_MUL(a, b) __fmul_rn(a, b)
#define SYNTH_ADD(a, b) __fadd_rn(a, b)
#else
#define SYNTH_MUL(a, b) ((a) * (b))
#define SYNTH_ADD(a, b) ((a) + (b))
#endif

/* The first counter of sample i. */
RNG_FN uint64_t synth_base(const struct synth_spec *s, uint64_t i)
{
	return (s->first + i) * (uint64_t)(s->in + s->outs);
}

/* Input j of the sample whose counters start at base: uniform, unit variance. */
RNG_FN float synth_input(uint64_t key, uint64_t base, int j)
{
	return SYNTH_MUL(1.7320508f, 2.0f * rng_u01(key, base + (uint64_t)j) - 1.0f); /* sqrt(3) */
}

/* Tap t of teacher output k: its input column and weight. */
RNG_FN int synth_tap_idx(const struct synth_spec *s, int k, int t)
{
	uint64_t n = (uint64_t)k * SYNTH_TAPS + (uint64_t)t;

	return (int)SYNTH_MUL(rng_u01(s->key_teacher, 2 * n), (float)s->in) % s->in;
}

RNG_FN float synth_tap_w(const struct synth_spec *s, int k, int t)
{
	uint64_t n = (uint64_t)k * SYNTH_TAPS + (uint64_t)t;

	return 2.0f * rng_u01(s->key_teacher, 2 * n + 1) - 1.0f;
}

/* Teacher output k plus its noise, from the taps' inputs xt (SYNTH_TAPS) and weights tw. */
RNG_FN float synth_output(uint64_t key, uint64_t base, int in, int k, const float *xt, const float *tw)
{
	float s = 0.0f;

	for (int t = 0; t < SYNTH_TAPS; t++)
		s = SYNTH_ADD(s, SYNTH_MUL(tw[t], xt[t]));
	return SYNTH_ADD(s, SYNTH_MUL(0.1f, 2.0f * rng_u01(key, base + (uint64_t)(in + k)) - 1.0f));
}

/* Target k (teacher output plus noise) of the sample whose counters start at base: the
 * taps' inputs recomputed from their hashes, no row of inputs needed. */
RNG_FN float synth_target(const struct synth_spec *s, uint64_t base, int k)
{
	float xt[SYNTH_TAPS], tw[SYNTH_TAPS];

	for (int t = 0; t < SYNTH_TAPS; t++) {
		xt[t] = synth_input(s->key_data, base, synth_tap_idx(s, k, t));
		tw[t] = synth_tap_w(s, k, t);
	}
	return synth_output(s->key_data, base, s->in, k, xt, tw);
}

#ifndef __CUDACC__
/* The host's generator (synth.c). The teacher: tap_idx, tap_w (outs, SYNTH_TAPS). */
void synth_teacher(const struct synth_spec *s, int *tap_idx, float *tap_w);
/* Samples idx[0..n) into x (n, in) and y (n, classes ? 1 : outs), either may be NULL
 * (not written), with the teacher from synth_teacher; scratch: (in + 2 outs) floats. The inputs' hashes run as wide as
 * this CPU allows (AVX-512, AVX2 or plain x86-64, chosen at load time); the same bytes
 * as synth_reference. */
void synth_fill(const struct synth_spec *s, const int *tap_idx, const float *tap_w,
		const uint32_t *idx, size_t n, float *x, float *y, float *scratch);
/* One sample, element by element: the definition synth_fill is tested against; x (in) or
 * y (classes ? 1 : outs) may be NULL. */
void synth_reference(const struct synth_spec *s, uint64_t i, float *x, float *y);
/* synth_fill with its teacher and scratch allocated here, or (no memory) synth_reference
 * sample by sample: the same bytes either way. */
void synth_batch(const struct synth_spec *s, const uint32_t *idx, size_t n, float *x, float *y);
#endif

#endif
