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
	uint64_t kt = rng_key(seed, RNG_TEACHER);
	size_t taps = (size_t)out * DATA_TAPS;

	memset(ds, 0, sizeof *ds);
	ds->n = n;
	ds->in = in;
	ds->out = classify ? 1 : out;
	ds->classes = classify ? out : 0;
	ds->synthetic = 1;
	ds->first = first;
	ds->key_data = rng_key(seed, RNG_DATA);
	ds->tap_idx = malloc(taps * sizeof *ds->tap_idx);
	ds->tap_w = malloc(taps * sizeof *ds->tap_w);
	if (ds->tap_idx == NULL || ds->tap_w == NULL) {
		data_free(ds);
		return diag_set(d, ST_RUNTIME, "data: out of memory");
	}
	/* Each target is a weighted sum of DATA_TAPS inputs: cheap, and learnable. */
	for (size_t k = 0; k < taps; k++) {
		ds->tap_idx[k] = (int)(rng_u01(kt, 2 * k) * (float)in) % in;
		ds->tap_w[k] = (2.0f * rng_u01(kt, 2 * k + 1) - 1.0f);
	}
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

/* Every label in [0, classes): a label out of range would index past the logits. */
static enum status check_labels(const struct npy *y, int classes, const char *flag,
				const char *path, struct diag *d)
{
	for (size_t r = 0; r < y->rows; r++) {
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
		st = check_labels(&ds->y, out, yflag, ypath, d);
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

/* Synthetic sample i: x uniform in [-sqrt3, sqrt3) (unit variance), y = teacher(x) + noise;
 * for classification y[0] is the index of the largest of those outputs. */
static void synth_sample(const struct dataset *ds, uint64_t i, float *x, float *y)
{
	const float a = 1.7320508f; /* sqrt(3) */
	const int outs = ds->classes ? ds->classes : ds->out;
	uint64_t base = (ds->first + i) * (uint64_t)(ds->in + outs);
	float best = 0.0f;

	for (int j = 0; j < ds->in; j++)
		x[j] = a * (2.0f * rng_u01(ds->key_data, base + (uint64_t)j) - 1.0f);
	for (int k = 0; k < outs; k++) {
		const int *ti = ds->tap_idx + (size_t)k * DATA_TAPS;
		const float *tw = ds->tap_w + (size_t)k * DATA_TAPS;
		float s = 0.0f, v;

		for (int t = 0; t < DATA_TAPS; t++)
			s += tw[t] * x[ti[t]];
		v = s + 0.1f * (2.0f * rng_u01(ds->key_data, base + (uint64_t)(ds->in + k)) - 1.0f);
		if (!ds->classes)
			y[k] = v;
		else if (k == 0 || v > best)
			best = v, y[0] = (float)k;
	}
}

void data_fill(const struct dataset *ds, const uint32_t *idx, size_t count, float *x, float *y)
{
	for (size_t s = 0; s < count; s++) {
		float *xs = x + s * (size_t)ds->in, *ys = y + s * (size_t)ds->out;

		if (ds->synthetic) {
			synth_sample(ds, idx[s], xs, ys);
		} else {
			npy_read_row(&ds->x, idx[s], xs);
			npy_read_row(&ds->y, idx[s], ys);
		}
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
