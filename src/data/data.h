/*
 * data.h - the training or validation data: a synthetic task or two .npy files.
 *
 * The data/ wing (floor 2, above backend/): data sets, DistributedSampler and
 * the loader that feeds micro-batches to a backend. It knows no model and no MPI.
 *
 * Synthetic sample i is a pure function of (seed, i): inputs uniform with
 * unit variance, targets from a fixed sparse linear "teacher" of the inputs
 * plus a little noise, so the loss can fall. For classification the label
 * is the teacher's largest output (its argmax). Nothing is stored per sample.
 * A synthetic validation set is samples n..n+V-1 of the same generator: the
 * same teacher, never trained on.
 *
 * Classification targets are one column holding the class index as a float
 * (exact below 2^24); the loss reads it back as an index.
 * With .npy files the data is memory-mapped and only the rows a rank asks
 * for are touched.
 */
#ifndef DDPT_DATA_H
#define DDPT_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "data/npy.h"
#include "core/synth.h" /* struct synth_spec, SYNTH_TAPS: the generator, host and device */
#include "core/status.h"

#define DATA_TAPS SYNTH_TAPS /* inputs each synthetic target depends on */

/* A file's fingerprint hashes its header and all its data up to DATA_HASH_ALL bytes;
 * above that, DATA_SAMPLE_BLOCKS blocks of DATA_SAMPLE_BYTES spread evenly from the first
 * byte to the last (16 MiB read, whatever the file's size: cheap for 100 GB), plus the
 * size, dtype and shape. Two files that differ only outside the sample look the same. */
#define DATA_HASH_ALL (64ul << 20)
#define DATA_SAMPLE_BLOCKS 256
#define DATA_SAMPLE_BYTES (64ul << 10)

struct dataset {
	size_t n;            /* samples */
	int in, out;         /* widths of one input row and one target row (1 for labels) */
	int classes;         /* classification: labels in [0, classes); 0 for regression */
	int synthetic;
	struct synth_spec synth; /* synthetic: the generator (synth.h), all a device needs */
	int *tap_idx;        /* synthetic: (out, DATA_TAPS) input columns of each target */
	float *tap_w;        /* synthetic: (out, DATA_TAPS) teacher weights */
	struct npy x, y;     /* files: inputs (n, in), targets (n, out) */
	const char *path[2]; /* files: the --inputs and --targets names (the caller's strings) */
	const char *flag[2]; /* files: "--inputs", "--targets" (or --val-inputs, --val-targets) */
	char fingerprint[2][128]; /* files: "f4 (rows, cols), BYTES bytes, sha256 HEX16" each */
};

/* A synthetic data set of n samples, generator samples first..first+n-1, with `out`
 * regression targets or (classify) labels of `out` classes. */
enum status data_init_synthetic(struct dataset *ds, uint64_t seed, uint64_t first, size_t n,
				int in, int out, int classify, struct diag *d);
/* Map the two files and check their shapes against each other and the widths; with
 * classify, ypath holds integer labels, each checked to be in [0, out). Messages name
 * --inputs/--targets, or --val-inputs/--val-targets when val is set. */
enum status data_init_npy(struct dataset *ds, const char *xpath, const char *ypath, int val,
			  int in, int out, int classify, struct diag *d);
/* Refuse a non-finite value in rows [first, first + count) of either file, naming the
 * file, the row and the column (synthetic data: always ST_OK). Ranks each check a share. */
enum status data_check_finite(const struct dataset *ds, size_t first, size_t count, struct diag *d);
/* data_check_finite over share `part` of `parts` equal shares of the rows, and with labels
 * each label of the share in [0, classes): a rank's share of the scan at start-up (part:
 * its rank, parts: the ranks), or all of them (0 of 1). */
enum status data_check_finite_share(const struct dataset *ds, int part, int parts, struct diag *d);
/* Gather samples idx[0..count) into x (count, in) and y (count, out). Safe to call from
 * several threads at once on disjoint outputs. */
void data_fill(const struct dataset *ds, const uint32_t *idx, size_t count, float *x, float *y);
/* Safe to call twice. */
void data_free(struct dataset *ds);

#endif
