/* data.c - synthetic samples from a counter-based generator, or rows of .npy files. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "digest.h"
#include "rng.h"

enum status data_init_synthetic(struct dataset *ds, uint64_t seed, size_t n, int in, int out,
				struct diag *d)
{
	uint64_t kt = rng_key(seed, RNG_TEACHER);
	size_t taps = (size_t)out * DATA_TAPS;

	memset(ds, 0, sizeof *ds);
	ds->n = n;
	ds->in = in;
	ds->out = out;
	ds->synthetic = 1;
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
	size_t head = (size_t)(a->data - (const unsigned char *)a->map), body = a->map_len - head;
	char sha[DIGEST_HEX];
	int n = 0;

	bufs[n] = a->map; /* magic, version and header dict: dtype and shape as written */
	lens[n++] = head;
	if (body <= DATA_HASH_ALL) {
		bufs[n] = a->data;
		lens[n++] = body;
	} else {
		for (size_t i = 0; i < DATA_SAMPLE_BLOCKS; i++) {
			bufs[n] = a->data + i * (body - DATA_SAMPLE_BYTES) / (DATA_SAMPLE_BLOCKS - 1);
			lens[n++] = DATA_SAMPLE_BYTES;
		}
	}
	if (!digest_sha256_hex(bufs, lens, n, sha))
		return 0;
	snprintf(out, len, "f%d (%zu, %zu), %zu bytes, sha256 %.16s%s", a->itemsize, a->rows, a->cols,
		 a->map_len, sha, body > DATA_HASH_ALL ? " (sampled)" : "");
	return 1;
}

enum status data_init_npy(struct dataset *ds, const char *xpath, const char *ypath, int in,
			  int out, struct diag *d)
{
	enum status st;

	memset(ds, 0, sizeof *ds);
	st = npy_open(&ds->x, xpath, "--inputs", NPY_WANT_FLOATS, d);
	if (st != ST_OK)
		return st;
	st = npy_open(&ds->y, ypath, "--targets", NPY_WANT_FLOATS, d);
	if (st != ST_OK)
		goto out_x;
	if (ds->x.rows != ds->y.rows) {
		st = diag_set(d, ST_RUNTIME, "--targets: %s has %zu rows but --inputs %s has %zu",
			      ypath, ds->y.rows, xpath, ds->x.rows);
		goto out_y;
	}
	if (ds->x.cols != (size_t)in) {
		st = diag_set(d, ST_RUNTIME, "--inputs: %s has %zu columns but --layers starts with width %d",
			      xpath, ds->x.cols, in);
		goto out_y;
	}
	if (ds->y.cols != (size_t)out) {
		st = diag_set(d, ST_RUNTIME, "--targets: %s has %zu columns but --layers ends with width %d",
			      ypath, ds->y.cols, out);
		goto out_y;
	}
	if (ds->x.rows > (1ul << 31)) {
		st = diag_set(d, ST_RUNTIME, "--inputs: %s has %zu rows, more than 2^31", xpath, ds->x.rows);
		goto out_y;
	}
	if (!fingerprint(&ds->x, ds->fingerprint[0], sizeof ds->fingerprint[0]) ||
	    !fingerprint(&ds->y, ds->fingerprint[1], sizeof ds->fingerprint[1])) {
		st = diag_set(d, ST_RUNTIME, "--inputs: SHA-256 failed");
		goto out_y;
	}
	ds->n = ds->x.rows;
	ds->path[0] = xpath;
	ds->path[1] = ypath;
	ds->in = in;
	ds->out = out;
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
	const char *flag[2] = {"--inputs", "--targets"};
	size_t row, col;
	double v;

	for (int k = 0; k < 2 && !ds->synthetic; k++)
		if (npy_find_nonfinite(f[k], first, count, &row, &col, &v))
			return diag_set(d, ST_RUNTIME, "%s: %s: row %zu, column %zu (counting from 0) is %g%s: ddptrain refuses non-finite data",
					flag[k], ds->path[k], row, col, v,
					isfinite(v) ? ", beyond float32's range" : "");
	return ST_OK;
}

/* Synthetic sample i: x uniform in [-sqrt3, sqrt3) (unit variance), y = teacher(x) + noise. */
static void synth_sample(const struct dataset *ds, uint64_t i, float *x, float *y)
{
	const float a = 1.7320508f; /* sqrt(3) */
	uint64_t base = i * (uint64_t)(ds->in + ds->out);

	for (int j = 0; j < ds->in; j++)
		x[j] = a * (2.0f * rng_u01(ds->key_data, base + (uint64_t)j) - 1.0f);
	for (int k = 0; k < ds->out; k++) {
		const int *ti = ds->tap_idx + (size_t)k * DATA_TAPS;
		const float *tw = ds->tap_w + (size_t)k * DATA_TAPS;
		float s = 0.0f;

		for (int t = 0; t < DATA_TAPS; t++)
			s += tw[t] * x[ti[t]];
		y[k] = s + 0.1f * (2.0f * rng_u01(ds->key_data, base + (uint64_t)(ds->in + k)) - 1.0f);
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
