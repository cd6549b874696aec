/*
 * npy.h - read-only, memory-mapped NumPy .npy matrices.
 *
 * Accepts format versions 1.0, 2.0 and 3.0, 2-D arrays in C order with dtype
 * '<f4' or '<f8' (converted to float32 row by row). The file is mapped, not
 * read, so each rank only touches the rows it trains on.
 *
 * The file must be exactly what np.save writes: magic, header, and the
 * rows x cols elements, nothing after them. NumPy's own reader ignores
 * trailing bytes; this one refuses them, since a file longer than its header
 * says was not written by np.save and its data cannot be trusted to mean
 * what the header claims.
 */
#ifndef DDPT_NPY_H
#define DDPT_NPY_H

#include <stddef.h>

#include "status.h"

struct npy {
	void *map;           /* whole file, or NULL */
	size_t map_len;
	const unsigned char *data; /* first element */
	size_t rows, cols;
	int itemsize;        /* 4 ('<f4') or 8 ('<f8') */
};

/* Validate an in-memory .npy image of len bytes (used by npy_open and the fuzz target):
 * fills rows, cols and itemsize; a->data points into buf. Never reads outside buf. */
enum status npy_parse(struct npy *a, const unsigned char *buf, size_t len, const char *what,
		      struct diag *d);
/* Map path and check its header. ST_RUNTIME naming `flag` and the file on failure. */
enum status npy_open(struct npy *a, const char *path, const char *flag, struct diag *d);
/* Copy row r into out (cols floats), converting from float64 if needed. */
void npy_read_row(const struct npy *a, size_t r, float *out);
/* The first element of rows [row0, row0 + nrows) that is not a finite float32 (NaN, an
 * infinity, or a float64 beyond float32's range): returns 1 and sets *row, *col (0-based)
 * and *value (as stored); 0 if all are finite. Reads every element once, branch-free per
 * block, so a scan runs at memory speed. */
int npy_find_nonfinite(const struct npy *a, size_t row0, size_t nrows, size_t *row, size_t *col,
		       double *value);
/* Parse a header dict (the text after the length field). Exposed for tests. */
enum status npy_parse_header(const char *h, size_t len, int *itemsize, size_t *rows,
			     size_t *cols, const char *what, struct diag *d);
/* Safe to call twice. */
void npy_close(struct npy *a);

#endif
