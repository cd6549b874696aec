/* rng.c - MT19937 (as torch's CPU generator) and a SplitMix64-style counter hash. */
#include "core/rng.h"

void mt19937_seed(struct mt19937 *mt, uint64_t seed)
{
	mt->state[0] = (uint32_t)(seed & 0xffffffffu);
	for (int j = 1; j < 624; j++)
		mt->state[j] = 1812433253u * (mt->state[j - 1] ^ (mt->state[j - 1] >> 30)) + (uint32_t)j;
	mt->index = 624;
}

static void mt19937_twist(struct mt19937 *mt)
{
	uint32_t *s = mt->state;

	for (int i = 0; i < 624; i++) {
		uint32_t y = (s[i] & 0x80000000u) | (s[(i + 1) % 624] & 0x7fffffffu);
		s[i] = s[(i + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
	}
	mt->index = 0;
}

uint32_t mt19937_next(struct mt19937 *mt)
{
	uint32_t y;

	if (mt->index >= 624)
		mt19937_twist(mt);
	y = mt->state[mt->index++];
	y ^= y >> 11;
	y ^= (y << 7) & 0x9d2c5680u;
	y ^= (y << 15) & 0xefc60000u;
	y ^= y >> 18;
	return y;
}

uint64_t rng_key(uint64_t seed, uint64_t domain)
{
	return rng_mix64(rng_mix64(seed + 0x9e3779b97f4a7c15ull) ^ (domain * 0xd1b54a32d192ed03ull));
}
