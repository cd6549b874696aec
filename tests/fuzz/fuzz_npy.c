/*
 * fuzz_npy.c - libFuzzer target for the .npy reader (built by scripts/fuzz.sh).
 *
 * Feeds the bytes to npy_parse as a whole file. Whatever it accepts, every
 * row must then be readable inside the buffer (ASan checks), and whatever it
 * refuses must come with a one-line message.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h" /* npy_parse, npy_read_row */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct npy a;
	struct diag d = {0};
	float *row;

	memset(&a, 0, sizeof a);
	if (npy_parse(&a, data, size, "fuzz", &d) != ST_OK) {
		if (d.st == ST_OK || d.msg[0] == '\0' || strchr(d.msg, '\n') != NULL)
			abort(); /* a refusal without a one-line message */
		return 0;
	}
	if (a.rows == 0 || a.cols == 0 || a.data < data ||
	    a.data + a.rows * a.cols * (size_t)a.itemsize != data + size)
		abort(); /* accepted, but the array is not exactly the rest of the file */
	row = malloc(a.cols * sizeof *row);
	if (row == NULL)
		return 0;
	for (size_t r = 0; r < a.rows; r++)
		npy_read_row(&a, r, row);
	free(row);
	return 0;
}
