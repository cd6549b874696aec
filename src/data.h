/*
 * data.h - the training data: a synthetic regression task or two .npy files.
 *
 * Synthetic sample i is a pure function of (seed, i): inputs uniform with
 * unit variance, targets from a fixed sparse linear "teacher" of the inputs
 * plus a little noise, so the loss can fall. Nothing is stored per sample.
 * With .npy files the data is memory-mapped and only the rows a rank asks
 * for are touched.
 */
#ifndef DDPT_DATA_H
#define DDPT_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "npy.h"
#include "status.h"

#define DATA_TAPS 4 /* inputs each synthetic target depends on */

struct dataset {
	size_t n;            /* samples */
	int in, out;         /* widths of one input row and one target row */
	int synthetic;
	uint64_t key_data;   /* synthetic: counter-generator key for inputs and noise */
	int *tap_idx;        /* synthetic: (out, DATA_TAPS) input columns of each target */
	float *tap_w;        /* synthetic: (out, DATA_TAPS) teacher weights */
	struct npy x, y;     /* files: inputs (n, in), targets (n, out) */
};

/* A synthetic data set of n samples. */
enum status data_init_synthetic(struct dataset *ds, uint64_t seed, size_t n, int in, int out,
				struct diag *d);
/* Map the two files and check their shapes against each other and the widths. */
enum status data_init_npy(struct dataset *ds, const char *xpath, const char *ypath, int in,
			  int out, struct diag *d);
/* Gather samples idx[0..count) into x (count, in) and y (count, out). */
void data_fill(const struct dataset *ds, const uint32_t *idx, size_t count, float *x, float *y);
/* Safe to call twice. */
void data_free(struct dataset *ds);

#endif
