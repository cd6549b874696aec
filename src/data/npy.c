/*
 * npy.c - the .npy header parser and the mapped reader.
 *
 * The header is a Python dict literal, not JSON, so it gets a small scanner
 * of its own that accepts exactly the keys NumPy writes and nothing else.
 * The file is untrusted: the scanner never reads past the header's length
 * (the header is not NUL-terminated), and every size taken from the file is
 * checked against the file's real length before it is used. Big-endian and
 * Fortran-order arrays are converted once, at load, so every read after that
 * is of a little-endian C-order array.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/filemap.h"
#include "data/npy.h"

static const char *skip_ws(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
		p++;
	return p;
}

#define NPY_MAX_DIM (1ull << 40)

/* Read a decimal dimension without reading past end; values over NPY_MAX_DIM
 * saturate above it instead of wrapping. NULL if p is not at a digit. */
static const char *scan_dim(const char *p, const char *end, unsigned long long *v)
{
	unsigned long long x = 0;

	if (p >= end || !isdigit((unsigned char)*p))
		return NULL;
	for (; p < end && isdigit((unsigned char)*p); p++)
		if (x <= NPY_MAX_DIM)
			x = x * 10 + (unsigned)(*p - '0');
	*v = x;
	return p;
}

/* Read a quoted Python string ('...' or "...") into buf. A NUL byte is refused:
 * it would end the C string early, so "<f4\0junk" would pass as '<f4'. */
static const char *scan_str(const char *p, const char *end, char *buf, size_t len)
{
	char q;
	size_t n = 0;

	if (p >= end || (*p != '\'' && *p != '"'))
		return NULL;
	q = *p++;
	while (p < end && *p != q) {
		if (n + 1 >= len || *p == '\0')
			return NULL;
		buf[n++] = *p++;
	}
	if (p >= end)
		return NULL;
	buf[n] = '\0';
	return p + 1;
}

/* A dtype string: byte order ('<', '>', '|' for single bytes, '=' native), kind and size. */
static int parse_descr(struct npy *a, const char *v)
{
	char order = v[0], kind = order ? v[1] : 0;
	int size = kind ? v[2] - '0' : 0;

	if (strlen(v) != 3 || strchr("<>|=", order) == NULL || size < 1 || size > 8)
		return 0;
	if (kind == 'f' && size != 4 && size != 8)
		return 0;
	if ((kind == 'i' || kind == 'u') && size != 1 && size != 2 && size != 4 && size != 8)
		return 0;
	if (kind != 'f' && kind != 'i' && kind != 'u')
		return 0;
	if (order == '|' && size != 1)
		return 0; /* '|' is "not applicable", only right for one-byte types */
	a->kind = kind;
	a->itemsize = size;
	a->big_endian = order == '>' && size > 1;
	snprintf(a->descr, sizeof a->descr, "%s", v);
	return 1;
}

/* A dtype the caller cannot use, and what it needs instead. */
static enum status refuse_dtype(const char *descr, enum npy_want want, const char *what, struct diag *d)
{
	if (want == NPY_WANT_FLOATS)
		return diag_set(d, ST_RUNTIME, "%s: dtype '%s' is not supported (need '<f4' or '<f8')", what, descr);
	if (want == NPY_WANT_LABELS)
		return diag_set(d, ST_RUNTIME,
				"%s: dtype '%s' is not supported for class labels (need integers: int64, int32, uint8, ...)",
				what, descr);
	return diag_set(d, ST_RUNTIME, "%s: dtype '%s' is not supported (need a float or integer type: f4, f8, i1..i8, u1..u8)",
			what, descr);
}

enum status npy_parse_header(const char *h, size_t len, struct npy *a, enum npy_want want,
			     const char *what, struct diag *d)
{
	const char *p = h, *end = h + len;
	int have_descr = 0, have_order = 0, have_shape = 0;
	size_t dims[8];
	int ndim = 0;

	p = skip_ws(p, end);
	if (p >= end || *p++ != '{')
		return diag_set(d, ST_RUNTIME, "%s: malformed .npy header (no dict)", what);
	for (;;) {
		char key[32], val[32];

		p = skip_ws(p, end);
		if (p >= end)
			return diag_set(d, ST_RUNTIME, "%s: malformed .npy header (no closing '}')", what);
		if (*p == '}')
			break;
		p = scan_str(p, end, key, sizeof key);
		if (p == NULL)
			return diag_set(d, ST_RUNTIME, "%s: malformed .npy header (bad key)", what);
		p = skip_ws(p, end);
		if (p >= end || *p++ != ':')
			return diag_set(d, ST_RUNTIME, "%s: malformed .npy header (no ':')", what);
		p = skip_ws(p, end);
		if (strcmp(key, "descr") == 0) {
			if (have_descr++)
				return diag_set(d, ST_RUNTIME, "%s: duplicate key 'descr' in .npy header", what);
			p = scan_str(p, end, val, sizeof val);
			if (p == NULL)
				return diag_set(d, ST_RUNTIME, "%s: malformed .npy header (descr)", what);
			if (!parse_descr(a, val))
				return refuse_dtype(diag_quote(val, sizeof val, val), want, what, d);
		} else if (strcmp(key, "fortran_order") == 0) {
			if (have_order++)
				return diag_set(d, ST_RUNTIME, "%s: duplicate key 'fortran_order' in .npy header",
						what);
			if ((size_t)(end - p) >= 5 && strncmp(p, "False", 5) == 0) {
				a->fortran = 0;
				p += 5;
			} else if ((size_t)(end - p) >= 4 && strncmp(p, "True", 4) == 0) {
				a->fortran = 1;
				p += 4;
			} else {
				return diag_set(d, ST_RUNTIME, "%s: malformed .npy header (fortran_order)", what);
			}
		} else if (strcmp(key, "shape") == 0) {
			if (have_shape++)
				return diag_set(d, ST_RUNTIME, "%s: duplicate key 'shape' in .npy header", what);
			if (p >= end || *p++ != '(')
				return diag_set(d, ST_RUNTIME, "%s: malformed .npy header (shape)", what);
			for (;;) {
				unsigned long long v;

				p = skip_ws(p, end);
				if (p < end && *p == ')') {
					p++;
					break;
				}
				if (ndim >= 8)
					return diag_set(d, ST_RUNTIME, "%s: malformed .npy header (shape)", what);
				p = scan_dim(p, end, &v);
				if (p == NULL)
					return diag_set(d, ST_RUNTIME, "%s: malformed .npy header (shape)", what);
				if (v > NPY_MAX_DIM)
					return diag_set(d, ST_RUNTIME, "%s: .npy dimension too large", what);
				dims[ndim++] = (size_t)v;
				p = skip_ws(p, end);
				if (p < end && *p == ',') {
					p++;
				} else if (p < end && *p == ')') {
					p++;
					break;
				} else {
					return diag_set(d, ST_RUNTIME, "%s: malformed .npy header (shape)", what);
				}
			}
		} else {
			return diag_set(d, ST_RUNTIME, "%s: unexpected key '%s' in .npy header", what,
					diag_quote(key, sizeof key, key));
		}
		/* Each value ends the dict or is followed by a comma. */
		p = skip_ws(p, end);
		if (p < end && *p == ',')
			p++;
		else if (p >= end || *p != '}')
			return diag_set(d, ST_RUNTIME, "%s: malformed .npy header (no ',' after '%s')", what, key);
	}
	/* NumPy pads the dict with spaces and a newline; anything else is not a .npy header. */
	if (skip_ws(p + 1, end) != end)
		return diag_set(d, ST_RUNTIME, "%s: malformed .npy header (text after the dict)", what);
	if (!have_descr || !have_order || !have_shape)
		return diag_set(d, ST_RUNTIME, "%s: .npy header lacks %s", what,
				!have_descr ? "descr" : !have_order ? "fortran_order" : "shape");
	if (ndim != 1 && ndim != 2)
		return diag_set(d, ST_RUNTIME, "%s: array has %d dimensions, need 2 (rows, columns)",
				what, ndim);
	a->ndim = ndim;
	a->rows = dims[0];
	a->cols = ndim == 2 ? dims[1] : 1;
	return ST_OK;
}

/* The little-endian C-order copy of a big-endian or Fortran-order array, made once. */
static enum status convert(struct npy *a, const char *what, struct diag *d)
{
	const size_t n = a->rows * a->cols, sz = (size_t)a->itemsize;

	a->conv = malloc(n * sz);
	if (a->conv == NULL)
		return diag_set(d, ST_RUNTIME, "%s: out of memory converting the %s array (%zu bytes)",
				what, a->fortran ? "Fortran-order" : "big-endian", n * sz);
	for (size_t r = 0; r < a->rows; r++) {
		for (size_t c = 0; c < a->cols; c++) {
			const unsigned char *src = a->raw + sz * (a->fortran ? c * a->rows + r : r * a->cols + c);
			unsigned char *dst = a->conv + sz * (r * a->cols + c);

			for (size_t b = 0; b < sz; b++)
				dst[b] = src[a->big_endian ? sz - 1 - b : b];
		}
	}
	a->data = a->conv;
	return ST_OK;
}

enum status npy_check(const struct npy *a, enum npy_want want, const char *what, struct diag *d)
{
	if ((want == NPY_WANT_FLOATS && a->kind != 'f') || (want == NPY_WANT_LABELS && a->kind == 'f'))
		return refuse_dtype(a->descr, want, what, d);
	if (want == NPY_WANT_FLOATS && a->ndim != 2)
		return diag_set(d, ST_RUNTIME, "%s: array has %d dimensions, need 2 (rows, columns)",
				what, a->ndim);
	if (want == NPY_WANT_LABELS && a->cols != 1)
		return diag_set(d, ST_RUNTIME,
				"%s: class labels need shape (N,) or (N, 1), not %zu x %zu", what, a->rows,
				a->cols);
	return ST_OK;
}

enum status npy_parse(struct npy *a, const unsigned char *buf, size_t len, enum npy_want want,
		      const char *what, struct diag *d)
{
	size_t hlen, hstart, avail, need;
	enum status st;

	memset(a, 0, sizeof *a);
	if (len < 10)
		return diag_set(d, ST_RUNTIME, "%s: too short to be a .npy file (%zu bytes)", what, len);
	if (memcmp(buf, "\x93NUMPY", 6) != 0)
		return diag_set(d, ST_RUNTIME, "%s: not a .npy file (bad magic)", what);
	if (buf[6] == 1 && buf[7] == 0) {
		hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
		hstart = 10;
	} else if ((buf[6] == 2 || buf[6] == 3) && buf[7] == 0) {
		if (len < 12)
			return diag_set(d, ST_RUNTIME, "%s: truncated .npy header (%zu bytes)", what, len);
		hlen = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
		hstart = 12;
	} else {
		return diag_set(d, ST_RUNTIME, "%s: unsupported .npy format version %d.%d", what, buf[6],
				buf[7]);
	}
	if (hlen > len - hstart)
		return diag_set(d, ST_RUNTIME,
				"%s: truncated .npy header: header length %zu runs past the end of the file (%zu bytes)",
				what, hlen, len);
	st = npy_parse_header((const char *)buf + hstart, hlen, a, want, what, d);
	if (st != ST_OK)
		return st;
	/* Each dimension is at most 2^40, so the product can still wrap: check before multiplying. */
	if (a->cols != 0 && a->rows > SIZE_MAX / (size_t)a->itemsize / a->cols)
		return diag_set(d, ST_RUNTIME, "%s: shape %zu x %zu is too large", what, a->rows, a->cols);
	need = a->rows * a->cols * (size_t)a->itemsize;
	avail = len - hstart - hlen;
	if (avail < need)
		return diag_set(d, ST_RUNTIME, "%s: truncated: header says %zu x %zu but the file holds %zu of %zu data bytes",
				what, a->rows, a->cols, avail, need);
	/* NumPy ignores bytes after the array; a file that holds more than its header
	 * describes was not written by np.save, so it is refused rather than guessed at. */
	if (avail > need)
		return diag_set(d, ST_RUNTIME, "%s: %zu bytes of trailing data after the %zu x %zu array",
				what, avail - need, a->rows, a->cols);
	if (a->rows == 0 || a->cols == 0)
		return diag_set(d, ST_RUNTIME, "%s: empty array (%zu x %zu)", what, a->rows, a->cols);
	a->raw = a->data = buf + hstart + hlen;
	/* A Fortran-order array with one row or one column is laid out as in C order. */
	if (a->big_endian || (a->fortran && a->rows > 1 && a->cols > 1))
		return convert(a, what, d);
	return ST_OK;
}

enum status npy_open(struct npy *a, const char *path, const char *flag, enum npy_want want,
		     struct diag *d)
{
	char what[DIAG_WHAT_LEN];
	enum status st;
	size_t map_len;
	void *map;

	memset(a, 0, sizeof *a);
	snprintf(what, sizeof what, "%s: %s", flag, path);
	st = filemap_open(path, what, 10, ".npy", &map, &map_len, d);
	if (st != ST_OK)
		return st;
	st = npy_parse(a, map, map_len, want, what, d);
	a->map = map;
	a->map_len = map_len;
	if (st == ST_OK)
		st = npy_check(a, want, what, d);
	/* With a converted copy the mapping stays for the file's fingerprint (data.c), but
	 * training reads only the copy. */
	if (st != ST_OK)
		npy_close(a);
	return st;
}

/* Element at p (little-endian, a's dtype) as an integer. */
static long long int_at(const struct npy *a, const unsigned char *p)
{
	unsigned long long u = 0;
	int bits = 8 * a->itemsize;

	for (int b = a->itemsize - 1; b >= 0; b--)
		u = u << 8 | p[b];
	if (a->kind == 'i' && bits < 64 && (u >> (bits - 1)) & 1)
		u |= ~0ull << bits; /* sign-extend */
	return (long long)u;
}

void npy_read_row(const struct npy *a, size_t r, float *out)
{
	const unsigned char *src = a->data + r * a->cols * (size_t)a->itemsize;

	if (a->kind == 'f' && a->itemsize == 4) {
		memcpy(out, src, a->cols * sizeof(float));
	} else if (a->kind == 'f') {
		for (size_t j = 0; j < a->cols; j++) {
			double v;

			memcpy(&v, src + j * 8, 8);
			out[j] = (float)v;
		}
	} else {
		for (size_t j = 0; j < a->cols; j++)
			out[j] = (float)int_at(a, src + j * (size_t)a->itemsize);
	}
}

/* Does any of the n elements at p fail to be a finite float32? No early exit, so the loop
 * vectorizes; the caller finds the element only in a block that has one. */
static int block_has_nonfinite(const unsigned char *p, size_t n, int itemsize)
{
	int bad = 0;

	if (itemsize == 4) {
		for (size_t i = 0; i < n; i++) {
			uint32_t u;

			memcpy(&u, p + 4 * i, 4);
			bad |= (u & 0x7f800000u) == 0x7f800000u;
		}
	} else {
		for (size_t i = 0; i < n; i++) {
			double v;

			memcpy(&v, p + 8 * i, 8);
			bad |= !isfinite((float)v);
		}
	}
	return bad;
}

int npy_find_nonfinite(const struct npy *a, size_t row0, size_t nrows, size_t *row, size_t *col,
		       double *value)
{
	const size_t block = 16384, is = (size_t)a->itemsize;
	size_t first = row0 * a->cols, end = (row0 + nrows) * a->cols;

	if (a->kind != 'f')
		return 0; /* an integer is always finite */

	for (size_t b = first; b < end; b += block) {
		size_t n = end - b < block ? end - b : block;

		if (!block_has_nonfinite(a->data + b * is, n, a->itemsize))
			continue;
		for (size_t i = b; i < b + n; i++) {
			if (block_has_nonfinite(a->data + i * is, 1, a->itemsize)) {
				float f;

				if (is == 4) {
					memcpy(&f, a->data + i * is, 4);
					*value = f;
				} else {
					memcpy(value, a->data + i * is, 8);
				}
				*row = i / a->cols;
				*col = i % a->cols;
				return 1;
			}
		}
	}
	return 0;
}

long long npy_read_int(const struct npy *a, size_t r)
{
	return int_at(a, a->data + r * a->cols * (size_t)a->itemsize);
}

void npy_close(struct npy *a)
{
	filemap_close(a->map, a->map_len);
	free(a->conv);
	a->map = NULL;
	a->conv = NULL;
	a->raw = NULL;
	a->data = NULL;
}
