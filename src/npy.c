/*
 * npy.c - the .npy header parser and the mapped reader.
 *
 * The header is a Python dict literal, not JSON, so it gets a small scanner
 * of its own that accepts exactly the keys NumPy writes and nothing else.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "npy.h"

static const char *skip_ws(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
		p++;
	return p;
}

/* Read a quoted Python string ('...' or "...") into buf. */
static const char *scan_str(const char *p, const char *end, char *buf, size_t len)
{
	char q;
	size_t n = 0;

	if (p >= end || (*p != '\'' && *p != '"'))
		return NULL;
	q = *p++;
	while (p < end && *p != q) {
		if (n + 1 >= len)
			return NULL;
		buf[n++] = *p++;
	}
	if (p >= end)
		return NULL;
	buf[n] = '\0';
	return p + 1;
}

enum status npy_parse_header(const char *h, size_t len, int *itemsize, size_t *rows,
			     size_t *cols, const char *what, struct diag *d)
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
		if (p < end && *p == '}')
			break;
		p = scan_str(p, end, key, sizeof key);
		if (p == NULL)
			return diag_set(d, ST_RUNTIME, "%s: malformed .npy header (bad key)", what);
		p = skip_ws(p, end);
		if (p >= end || *p++ != ':')
			return diag_set(d, ST_RUNTIME, "%s: malformed .npy header (no ':')", what);
		p = skip_ws(p, end);
		if (strcmp(key, "descr") == 0) {
			p = scan_str(p, end, val, sizeof val);
			if (p == NULL)
				return diag_set(d, ST_RUNTIME, "%s: malformed .npy header (descr)", what);
			if (strcmp(val, "<f4") == 0)
				*itemsize = 4;
			else if (strcmp(val, "<f8") == 0)
				*itemsize = 8;
			else
				return diag_set(d, ST_RUNTIME,
						"%s: dtype '%s' is not supported (need '<f4' or '<f8')", what, val);
			have_descr = 1;
		} else if (strcmp(key, "fortran_order") == 0) {
			if ((size_t)(end - p) >= 5 && strncmp(p, "False", 5) == 0) {
				p += 5;
			} else if ((size_t)(end - p) >= 4 && strncmp(p, "True", 4) == 0) {
				return diag_set(d, ST_RUNTIME,
						"%s: Fortran-order arrays are not supported (save with C order)", what);
			} else {
				return diag_set(d, ST_RUNTIME, "%s: malformed .npy header (fortran_order)", what);
			}
			have_order = 1;
		} else if (strcmp(key, "shape") == 0) {
			if (p >= end || *p++ != '(')
				return diag_set(d, ST_RUNTIME, "%s: malformed .npy header (shape)", what);
			for (;;) {
				char *e;
				unsigned long long v;

				p = skip_ws(p, end);
				if (p < end && *p == ')') {
					p++;
					break;
				}
				if (p >= end || !isdigit((unsigned char)*p) || ndim >= 8)
					return diag_set(d, ST_RUNTIME, "%s: malformed .npy header (shape)", what);
				errno = 0;
				v = strtoull(p, &e, 10);
				if (errno == ERANGE || e > end || v > (1ull << 40))
					return diag_set(d, ST_RUNTIME, "%s: .npy dimension too large", what);
				dims[ndim++] = (size_t)v;
				p = skip_ws(e, end);
				if (p < end && *p == ',')
					p++;
			}
			have_shape = 1;
		} else {
			return diag_set(d, ST_RUNTIME, "%s: unexpected key '%s' in .npy header", what, key);
		}
		p = skip_ws(p, end);
		if (p < end && *p == ',')
			p++;
	}
	if (!have_descr || !have_order || !have_shape)
		return diag_set(d, ST_RUNTIME, "%s: .npy header lacks %s", what,
				!have_descr ? "descr" : !have_order ? "fortran_order" : "shape");
	if (ndim != 2)
		return diag_set(d, ST_RUNTIME, "%s: array has %d dimensions, need 2 (rows, columns)",
				what, ndim);
	*rows = dims[0];
	*cols = dims[1];
	return ST_OK;
}

enum status npy_open(struct npy *a, const char *path, const char *flag, struct diag *d)
{
	char what[600];
	struct stat sb;
	const unsigned char *m;
	size_t hlen, hstart, need;
	enum status st;
	int fd;

	memset(a, 0, sizeof *a);
	snprintf(what, sizeof what, "%s: %s", flag, path);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return diag_errno(d, errno, "%s", what);
	if (fstat(fd, &sb) != 0) {
		close(fd);
		return diag_errno(d, errno, "%s", what);
	}
	if (!S_ISREG(sb.st_mode)) {
		close(fd);
		return diag_set(d, ST_RUNTIME, "%s: not a regular file", what);
	}
	a->map_len = (size_t)sb.st_size;
	if (a->map_len < 10) {
		close(fd);
		return diag_set(d, ST_RUNTIME, "%s: too short to be a .npy file (%zu bytes)", what,
				a->map_len);
	}
	a->map = mmap(NULL, a->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (a->map == MAP_FAILED) {
		a->map = NULL;
		return diag_errno(d, errno, "%s: mmap", what);
	}
	m = a->map;
	if (memcmp(m, "\x93NUMPY", 6) != 0) {
		st = diag_set(d, ST_RUNTIME, "%s: not a .npy file (bad magic)", what);
		goto out_unmap;
	}
	if (m[6] == 1) {
		hlen = (size_t)m[8] | (size_t)m[9] << 8;
		hstart = 10;
	} else if (m[6] == 2 || m[6] == 3) {
		if (a->map_len < 12) {
			st = diag_set(d, ST_RUNTIME, "%s: truncated .npy header", what);
			goto out_unmap;
		}
		hlen = (size_t)m[8] | (size_t)m[9] << 8 | (size_t)m[10] << 16 | (size_t)m[11] << 24;
		hstart = 12;
	} else {
		st = diag_set(d, ST_RUNTIME, "%s: unsupported .npy format version %d.%d", what, m[6], m[7]);
		goto out_unmap;
	}
	if (hlen > a->map_len - hstart) {
		st = diag_set(d, ST_RUNTIME, "%s: truncated .npy header", what);
		goto out_unmap;
	}
	st = npy_parse_header((const char *)m + hstart, hlen, &a->itemsize, &a->rows, &a->cols, what, d);
	if (st != ST_OK)
		goto out_unmap;
	need = a->rows * a->cols * (size_t)a->itemsize;
	if (a->map_len - hstart - hlen < need) {
		st = diag_set(d, ST_RUNTIME, "%s: truncated: header says %zu x %zu but the file holds %zu of %zu data bytes",
			      what, a->rows, a->cols, a->map_len - hstart - hlen, need);
		goto out_unmap;
	}
	if (a->rows == 0 || a->cols == 0) {
		st = diag_set(d, ST_RUNTIME, "%s: empty array (%zu x %zu)", what, a->rows, a->cols);
		goto out_unmap;
	}
	a->data = m + hstart + hlen;
	return ST_OK;

out_unmap:
	npy_close(a);
	return st;
}

void npy_read_row(const struct npy *a, size_t r, float *out)
{
	const unsigned char *src = a->data + r * a->cols * (size_t)a->itemsize;

	if (a->itemsize == 4) {
		memcpy(out, src, a->cols * sizeof(float));
	} else {
		for (size_t j = 0; j < a->cols; j++) {
			double v;

			memcpy(&v, src + j * 8, 8);
			out[j] = (float)v;
		}
	}
}

void npy_close(struct npy *a)
{
	if (a->map != NULL)
		munmap(a->map, a->map_len);
	a->map = NULL;
	a->data = NULL;
}
