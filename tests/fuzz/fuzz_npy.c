/*
 * fuzz_npy.c - libFuzzer target for the .npy reader (built by scripts/fuzz.sh).
 *
 * Feeds the bytes to npy_parse as a whole file, twice: in libFuzzer's buffer
 * (ASan's redzones around it) and in a copy that ends at an inaccessible page
 * (guard.h). Whatever it accepts, every row must then be readable inside the
 * buffer, and whatever it refuses must come with a one-line message.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "guard.h" /* fuzz_at_guard */
#include "data/npy.h"   /* npy_parse, npy_read_row, npy_read_int, npy_close */

static void check(const uint8_t *data, size_t size)
{
	struct npy a;
	struct diag d = {0};
	float *row;

	memset(&a, 0, sizeof a);
	if (npy_parse(&a, data, size, NPY_WANT_ANY, "fuzz", &d) != ST_OK) {
		if (d.st == ST_OK || d.msg[0] == '\0' || strchr(d.msg, '\n') != NULL)
			abort(); /* a refusal without a one-line message */
		return;
	}
	if (a.rows == 0 || a.cols == 0 || a.raw < data ||
	    a.raw + a.rows * a.cols * (size_t)a.itemsize != data + size)
		abort(); /* accepted, but the array is not exactly the rest of the file */
	row = malloc(a.cols * sizeof *row);
	if (row == NULL) {
		npy_close(&a);
		return;
	}
	for (size_t r = 0; r < a.rows; r++) {
		npy_read_row(&a, r, row);
		if (a.kind != 'f')
			(void)npy_read_int(&a, r);
	}
	free(row);
	npy_close(&a); /* the converted copy of a big-endian or Fortran-order array */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check(data, size);
	check(fuzz_at_guard(data, size), size);
	return 0;
}
