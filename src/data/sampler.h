/*
 * sampler.h - torch.utils.data.distributed.DistributedSampler, index for index.
 *
 * With shuffle, epoch e's order is torch.randperm(n) from a generator seeded
 * with seed + e (MT19937, forward Fisher-Yates). The list is padded by
 * wrapping around to a multiple of the world size (or its tail dropped with
 * drop_last), and rank r takes positions r, r+W, r+2W, ...
 */
#ifndef DDPT_SAMPLER_H
#define DDPT_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

struct sampler {
	size_t n;           /* data set size */
	int world, rank;
	int shuffle, drop_last;
	uint64_t seed;
	size_t num_samples; /* indices this rank sees per epoch */
	size_t total_size;  /* num_samples * world */
	uint32_t *perm;     /* (n) scratch: the epoch's permutation */
	uint32_t *indices;  /* (num_samples) this rank's indices for the current epoch */
};

/* Indices each of `world` ranks sees per epoch of n samples (0: none). */
size_t sampler_num_samples(size_t n, int world, int drop_last);
/* Set up for n samples on `world` ranks. ST_USAGE if a rank would get no sample. */
enum status sampler_init(struct sampler *s, size_t n, int world, int rank, int shuffle,
			 int drop_last, uint64_t seed, struct diag *d);
/* Fill s->indices for this epoch (PyTorch's set_epoch + __iter__). */
void sampler_set_epoch(struct sampler *s, uint64_t epoch);
/* torch.randperm(n) with a generator seeded with `seed`: out has n entries. */
void sampler_randperm(uint32_t *out, size_t n, uint64_t seed);
/* Safe to call twice. */
void sampler_free(struct sampler *s);

#endif
