/*
 * rng.h - the two random generators ddptrain needs.
 *
 * mt19937: the Mersenne Twister exactly as torch.Generator's CPU engine
 * (seeded with the low 32 bits), so the sampler reproduces torch.randperm.
 * rng_u01: a counter-based generator: a pure function of (key, counter), so
 * any rank can compute any synthetic sample or initial weight on its own.
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

/* Uniform float in [0, 1), a pure function of (key, counter). 24 random bits. */
float rng_u01(uint64_t key, uint64_t counter);

/* Domains, so init, data and teacher never share a stream. */
enum rng_domain {
	RNG_INIT = 1,    /* initial weights */
	RNG_DATA = 2,    /* synthetic inputs and noise */
	RNG_TEACHER = 3, /* synthetic teacher function */
};

#endif
