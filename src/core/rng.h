/*
 * rng.h - the two random generators ddptrain needs.
 *
 * mt19937: the Mersenne Twister exactly as torch.Generator's CPU engine
 * (seeded with the low 32 bits), so the sampler reproduces torch.randperm.
 * rng_u01: a counter-based generator: a pure function of (key, counter), so
 * any rank can compute any synthetic sample or initial weight on its own. It is
 * inline here, for the host and (under nvcc) the device alike, so that a loop of
 * it vectorizes and a CUDA kernel computes the same bits (src/data/synth.h).
 */
#ifndef DDPT_RNG_H
#define DDPT_RNG_H

#include <stdint.h>

struct mt19937 {
	uint32_t state[624];
	int index;
};

void mt19937_seed(struct mt19937 *mt, uint64_t seed);
uint32_t mt19937_next(struct mt19937 *mt);

/* A 64-bit key for one purpose (domain) of one seed. */
uint64_t rng_key(uint64_t seed, uint64_t domain);

#ifdef __CUDACC__
#define RNG_FN static inline __host__ __device__
#else
#define RNG_FN static inline
#endif

/* SplitMix64's finalizer: a bijection of 64-bit words that mixes every bit. */
RNG_FN uint64_t rng_mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform float in [0, 1), a pure function of (key, counter). 24 random bits, scaled
 * exactly (a multiple of 2^-24). */
RNG_FN float rng_u01(uint64_t key, uint64_t counter)
{
	uint64_t z = rng_mix64(key ^ rng_mix64(counter * 0x9e3779b97f4a7c15ull + 1));

	return (float)(z >> 40) * (1.0f / 16777216.0f);
}

/* Domains, so init, data and teacher never share a stream. */
enum rng_domain {
	RNG_INIT = 1,    /* initial weights */
	RNG_DATA = 2,    /* synthetic inputs and noise */
	RNG_TEACHER = 3, /* synthetic teacher function */
};

#endif
