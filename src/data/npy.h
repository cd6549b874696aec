/*
 * npy.h - read-only, memory-mapped NumPy .npy matrices.
 *
 * Accepts format versions 1.0, 2.0 and 3.0, 1-D and 2-D arrays of floats
 * (f4, f8) and integers (i1..i8, u1..u8), either byte order, C or Fortran
 * order, as NumPy and PyTorch read them. A little-endian C-order file is
 * mapped, not read, so each rank only touches the rows it trains on; a
 * big-endian or Fortran-order one is converted once, on load, into a
 * little-endian C-order copy (it costs the file's size in memory). A 1-D
 * array (N,) is read as N rows of one column.
 *
 * What the caller needs (a float matrix of inputs, integer class labels) is
 * checked by npy_open's `want`, so each flag's message says what it accepts.
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

#include "core/status.h"

/* What a caller accepts from npy_open. */
enum npy_want {
	NPY_WANT_ANY,    /* whatever npy_parse accepts */
	NPY_WANT_FLOATS, /* a 2-D float array (inputs, regression targets) */
	NPY_WANT_LABELS, /* integer class indices, shape (N,) or (N, 1) */
};

struct npy {
	void *map;           /* whole file, or NULL */
	size_t map_len;
	const unsigned char *raw;  /* first element as stored in the file (in map) */
	const unsigned char *data; /* first element, C order, little-endian: raw, or conv */
	unsigned char *conv; /* owned converted copy (big-endian or Fortran order), or NULL */
	size_t rows, cols;   /* a 1-D array has cols 1 */
	int ndim;            /* 1 or 2 */
	int itemsize;        /* bytes per element: 4 or 8 for floats, 1, 2, 4 or 8 for integers */
	char kind;           /* 'f' float, 'i' signed or 'u' unsigned integer */
	int big_endian, fortran;
	char descr[8];       /* the dtype as the header spells it, for messages */
};

/* Validate an in-memory .npy image of len bytes (used by npy_open and the fuzz target):
 * fills the shape and dtype; a->raw points into buf, a->data too unless the array needed
 * converting (then into a->conv, freed by npy_close). Never reads outside buf. A dtype it
 * cannot read is refused saying what `want` needs (npy_check then checks the rest). */
enum status npy_parse(struct npy *a, const unsigned char *buf, size_t len, enum npy_want want,
		      const char *what, struct diag *d);
/* Map path, check its header and that it is what `want` asks for. ST_RUNTIME naming
 * `flag` and the file on failure. */
enum status npy_open(struct npy *a, const char *path, const char *flag, enum npy_want want,
		     struct diag *d);
/* Is a parsed array what `want` asks for? ST_RUNTIME naming `what` if not. */
enum status npy_check(const struct npy *a, enum npy_want want, const char *what, struct diag *d);
/* Copy row r into out (cols floats), converting from float64 or an integer if needed. */
void npy_read_row(const struct npy *a, size_t r, float *out);
/* The first element of rows [row0, row0 + nrows) that is not a finite float32 (NaN, an
 * infinity, or a float64 beyond float32's range): returns 1 and sets *row, *col (0-based)
 * and *value (as stored); 0 if all are finite (always, for integers). Reads every element once, branch-free per
 * block, so a scan runs at memory speed. */
int npy_find_nonfinite(const struct npy *a, size_t row0, size_t nrows, size_t *row, size_t *col,
		       double *value);
/* Element r of an integer array's first column (labels: (N,) or (N, 1)). */
long long npy_read_int(const struct npy *a, size_t r);
/* Parse a header dict (the text after the length field) into a's dtype, order and shape.
 * Exposed for tests. */
enum status npy_parse_header(const char *h, size_t len, struct npy *a, enum npy_want want,
			     const char *what, struct diag *d);
/* Unmaps, frees the converted copy. Safe to call twice. */
void npy_close(struct npy *a);

#endif
