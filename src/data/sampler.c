/* sampler.c - DistributedSampler's index lists. */
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "data/sampler.h"

void sampler_randperm(uint32_t *out, size_t n, uint64_t seed)
{
	struct mt19937 mt;

	for (size_t i = 0; i < n; i++)
		out[i] = (uint32_t)i;
	if (n < 2)
		return;
	mt19937_seed(&mt, seed);
	/* aten randperm_cpu: for i in [0, n-1): z = random() % (n - i); swap(r[i], r[i + z]). */
	for (size_t i = 0; i + 1 < n; i++) {
		size_t z = mt19937_next(&mt) % (n - i);
		uint32_t t = out[i];

		out[i] = out[i + z];
		out[i + z] = t;
	}
}

size_t sampler_num_samples(size_t n, int world, int drop_last)
{
	if (drop_last && n % (size_t)world != 0)
		return n / (size_t)world; /* ceil((n - W) / W) */
	return (n + (size_t)world - 1) / (size_t)world;
}

enum status sampler_init(struct sampler *s, size_t n, int world, int rank, int shuffle,
			 int drop_last, uint64_t seed, struct diag *d)
{
	memset(s, 0, sizeof *s);
	s->n = n;
	s->world = world;
	s->rank = rank;
	s->shuffle = shuffle;
	s->drop_last = drop_last;
	s->seed = seed;
	s->num_samples = sampler_num_samples(n, world, drop_last);
	s->total_size = s->num_samples * (size_t)world;
	if (s->num_samples == 0)
		return diag_set(d, ST_USAGE, "--drop-last: %zu samples leave none for each of %d ranks",
				n, world);
	s->perm = malloc(n * sizeof *s->perm);
	s->indices = malloc(s->num_samples * sizeof *s->indices);
	if (s->perm == NULL || s->indices == NULL) {
		sampler_free(s);
		return diag_set(d, ST_RUNTIME, "sampler: out of memory for %zu indices", n);
	}
	return ST_OK;
}

void sampler_set_epoch(struct sampler *s, uint64_t epoch)
{
	if (s->shuffle) {
		sampler_randperm(s->perm, s->n, s->seed + epoch);
	} else {
		for (size_t i = 0; i < s->n; i++)
			s->perm[i] = (uint32_t)i;
	}
	/* Position p of the padded list is perm[p % n]; rank r takes p = r + k*W. */
	for (size_t k = 0; k < s->num_samples; k++)
		s->indices[k] = s->perm[(k * (size_t)s->world + (size_t)s->rank) % s->n];
}

void sampler_free(struct sampler *s)
{
	free(s->perm);
	free(s->indices);
	s->perm = NULL;
	s->indices = NULL;
}
