/* data.c - synthetic samples from a counter-based generator, or rows of .npy files. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "core/digest.h"
#include "core/rng.h"

enum status data_init_synthetic(struct dataset *ds, uint64_t seed, uint64_t first, size_t n,
				int in, int out, int classify, struct diag *d)
{
	size_t taps = (size_t)out * DATA_TAPS;

	memset(ds, 0, sizeof *ds);
	ds->n = n;
	ds->in = in;
	ds->out = classify ? 1 : out;
	ds->classes = classify ? out : 0;
	ds->synthetic = 1;
	ds->synth = (struct synth_spec){.key_data = rng_key(seed, RNG_DATA), .key_teacher = rng_key(seed, RNG_TEACHER),
				    .first = first, .in = in, .outs = out, .classes = ds->classes};
	ds->tap_idx = malloc(taps * sizeof *ds->tap_idx);
	ds->tap_w = malloc(taps * sizeof *ds->tap_w);
	if (ds->tap_idx == NULL || ds->tap_w == NULL) {
		data_free(ds);
		return diag_set(d, ST_RUNTIME, "data: out of memory");
	}
	/* Each target is a weighted sum of DATA_TAPS inputs: cheap, and learnable. */
	synth_teacher(&ds->synth, ds->tap_idx, ds->tap_w);
	return ST_OK;
}

/* One file's fingerprint (see data.h). */
static int fingerprint(const struct npy *a, char *out, size_t len)
{
	const void *bufs[DATA_SAMPLE_BLOCKS + 1];
	size_t lens[DATA_SAMPLE_BLOCKS + 1];
	size_t head = (size_t)(a->raw - (const unsigned char *)a->map), body = a->map_len - head;
	char sha[DIGEST_HEX];
	int n = 0;

	bufs[n] = a->map; /* magic, version and header dict: dtype and shape as written */
	lens[n++] = head;
	if (body <= DATA_HASH_ALL) {
		bufs[n] = a->raw;
		lens[n++] = body;
	} else {
		for (size_t i = 0; i < DATA_SAMPLE_BLOCKS; i++) {
			bufs[n] = a->raw + i * (body - DATA_SAMPLE_BYTES) / (DATA_SAMPLE_BLOCKS - 1);
			lens[n++] = DATA_SAMPLE_BYTES;
		}
	}
	if (!digest_sha256_hex(bufs, lens, n, sha))
		return 0;
	snprintf(out, len, "%c%d (%zu, %zu), %zu bytes, sha256 %.16s%s", a->kind, a->itemsize, a->rows, a->cols,
		 a->map_len, sha, body > DATA_HASH_ALL ? " (sampled)" : "");
	return 1;
}

/* Every label of rows [first, end) in [0, classes): a label out of range would index past
 * the logits. */
static enum status check_labels(const struct npy *y, int classes, const char *flag,
				const char *path, size_t first, size_t end, struct diag *d)
{
	for (size_t r = first; r < end; r++) {
		long long v = npy_read_int(y, r);
		char text[24];

		if (v >= 0 && v < classes)
			continue;
		/* A uint64 label past 2^63 reads as negative: print the stored value. */
		if (y->kind == 'u')
			snprintf(text, sizeof text, "%llu", (unsigned long long)v);
		else
			snprintf(text, sizeof text, "%lld", v);
		return diag_set(d, ST_RUNTIME,
				"%s: %s: row %zu has label %s, outside [0, %d) (--layers ends with %d classes)",
				flag, path, r, text, classes, classes);
	}
	return ST_OK;
}

enum status data_init_npy(struct dataset *ds, const char *xpath, const char *ypath, int val,
			  int in, int out, int classify, struct diag *d)
{
	const char *xflag = val ? "--val-inputs" : "--inputs", *yflag = val ? "--val-targets" : "--targets";
	enum status st;

	memset(ds, 0, sizeof *ds);
	st = npy_open(&ds->x, xpath, xflag, NPY_WANT_FLOATS, d);
	if (st != ST_OK)
		return st;
	st = npy_open(&ds->y, ypath, yflag, classify ? NPY_WANT_LABELS : NPY_WANT_FLOATS, d);
	if (st != ST_OK)
		goto out_x;
	if (ds->x.rows != ds->y.rows) {
		st = diag_set(d, ST_RUNTIME, "%s: %s has %zu rows but %s %s has %zu", yflag,
			      ypath, ds->y.rows, xflag, xpath, ds->x.rows);
		goto out_y;
	}
	if (ds->x.cols != (size_t)in) {
		st = diag_set(d, ST_RUNTIME, "%s: %s has %zu columns but --layers starts with width %d",
			      xflag, xpath, ds->x.cols, in);
		goto out_y;
	}
	if (!classify && ds->y.cols != (size_t)out) {
		st = diag_set(d, ST_RUNTIME, "%s: %s has %zu columns but --layers ends with width %d",
			      yflag, ypath, ds->y.cols, out);
		goto out_y;
	}
	if (ds->x.rows > (1ul << 31)) {
		st = diag_set(d, ST_RUNTIME, "%s: %s has %zu rows, more than 2^31", xflag, xpath, ds->x.rows);
		goto out_y;
	}
	if (!fingerprint(&ds->x, ds->fingerprint[0], sizeof ds->fingerprint[0]) ||
	    !fingerprint(&ds->y, ds->fingerprint[1], sizeof ds->fingerprint[1])) {
		st = diag_set(d, ST_RUNTIME, "%s: SHA-256 failed", xflag);
		goto out_y;
	}
	if (classify) {
		st = check_labels(&ds->y, out, yflag, ypath, 0, ds->y.rows, d);
		if (st != ST_OK)
			goto out_y;
	}
	ds->n = ds->x.rows;
	ds->path[0] = xpath;
	ds->path[1] = ypath;
	ds->flag[0] = xflag;
	ds->flag[1] = yflag;
	ds->in = in;
	ds->out = classify ? 1 : out;
	ds->classes = classify ? out : 0;
	return ST_OK;

out_y:
	npy_close(&ds->y);
out_x:
	npy_close(&ds->x);
	return st;
}

enum status data_check_finite(const struct dataset *ds, size_t first, size_t count, struct diag *d)
{
	const struct npy *f[2] = {&ds->x, &ds->y};
	size_t row, col;
	double v;

	for (int k = 0; k < 2 && !ds->synthetic; k++)
		if (npy_find_nonfinite(f[k], first, count, &row, &col, &v))
			return diag_set(d, ST_RUNTIME, "%s: %s: row %zu, column %zu (counting from 0) is %g%s: ddptrain refuses non-finite data",
					ds->flag[k], ds->path[k], row, col, v,
					isfinite(v) ? ", beyond float32's range" : "");
	return ST_OK;
}

enum status data_check_finite_share(const struct dataset *ds, int part, int parts, struct diag *d)
{
	size_t first = ds->n * (size_t)part / (size_t)parts;
	size_t end = ds->n * (size_t)(part + 1) / (size_t)parts;
	enum status st = data_check_finite(ds, first, end - first, d);

	/* the labels too: one rewritten out of range is a NaN loss (the loss kernels' rule) */
	if (st == ST_OK && !ds->synthetic && ds->classes > 0)
		st = check_labels(&ds->y, ds->classes, ds->flag[1], ds->path[1], first, end, d);
	return st;
}

void data_fill(const struct dataset *ds, const uint32_t *idx, size_t count, float *x, float *y)
{
	float *scratch;

	if (ds->synthetic) {
		scratch = malloc(((size_t)ds->in + 2 * (size_t)ds->synth.outs) * sizeof *scratch);
		if (scratch != NULL)
			synth_fill(&ds->synth, ds->tap_idx, ds->tap_w, idx, count, x, y, scratch);
		for (size_t s = 0; s < count && scratch == NULL; s++) /* the same bytes, slower */
			synth_reference(&ds->synth, idx[s], x + s * (size_t)ds->in, y + s * (size_t)ds->out);
		free(scratch);
		return;
	}
	for (size_t s = 0; s < count; s++) {
		npy_read_row(&ds->x, idx[s], x + s * (size_t)ds->in);
		npy_read_row(&ds->y, idx[s], y + s * (size_t)ds->out);
	}
}

void data_free(struct dataset *ds)
{
	free(ds->tap_idx);
	free(ds->tap_w);
	ds->tap_idx = NULL;
	ds->tap_w = NULL;
	npy_close(&ds->x);
	npy_close(&ds->y);
}
