/*
 * mknpy - write a .npy file for the tests, valid or deliberately broken.
 *
 *   mknpy OUT ROWS COLS [f4|f8] [SEED] [VERSION] [BREAK]
 *
 * Values are uniform in [-1, 1) from the counter generator (SEED, element).
 * VERSION is 1 or 2 (the header-length field width). BREAK makes a bad file:
 * "truncate" (drops the last data bytes), "fortran", "i4" (wrong dtype),
 * "1d", "3d", "magic"; or puts one bad value at row R, column C: "nan:R:C", "inf:R:C",
 * "big:R:C" (1e300: finite in f8, beyond float32); "xSCALE" multiplies every value by SCALE.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"

int main(int argc, char **argv)
{
	const char *out, *dtype = "f4", *brk = "";
	size_t rows, cols, isz;
	unsigned long long seed = 1;
	int version = 1;
	char hdr[256];
	size_t hlen, pre, total;
	FILE *f;
	char kind[8] = "";
	size_t bad = (size_t)-1, br = 0, bc = 0;
	double scale = 1.0;

	if (argc < 4) {
		fprintf(stderr, "usage: mknpy OUT ROWS COLS [f4|f8] [SEED] [VERSION] [BREAK]\n");
		return 2;
	}
	out = argv[1];
	rows = strtoull(argv[2], NULL, 10);
	cols = strtoull(argv[3], NULL, 10);
	if (argc > 4)
		dtype = argv[4];
	if (argc > 5)
		seed = strtoull(argv[5], NULL, 10);
	if (argc > 6)
		version = atoi(argv[6]);
	if (argc > 7)
		brk = argv[7];
	isz = strcmp(dtype, "f8") == 0 ? 8 : 4;
	if (sscanf(brk, "%3[a-z]:%zu:%zu", kind, &br, &bc) == 3)
		bad = br * cols + bc;
	if (brk[0] == 'x')
		scale = strtod(brk + 1, NULL);

	if (strcmp(brk, "1d") == 0)
		snprintf(hdr, sizeof hdr, "{'descr': '<%s', 'fortran_order': False, 'shape': (%zu,), }",
			 dtype, rows * cols);
	else if (strcmp(brk, "3d") == 0)
		snprintf(hdr, sizeof hdr, "{'descr': '<%s', 'fortran_order': False, 'shape': (%zu, %zu, 1), }",
			 dtype, rows, cols);
	else
		snprintf(hdr, sizeof hdr, "{'descr': '<%s', 'fortran_order': %s, 'shape': (%zu, %zu), }",
			 strcmp(brk, "i4") == 0 ? "i4" : dtype,
			 strcmp(brk, "fortran") == 0 ? "True" : "False", rows, cols);
	pre = version == 1 ? 10 : 12;
	hlen = strlen(hdr) + 1; /* newline */
	hlen += (64 - (pre + hlen) % 64) % 64;
	f = fopen(out, "wb");
	if (f == NULL) {
		perror(out);
		return 1;
	}
	fwrite(strcmp(brk, "magic") == 0 ? "\x93NUMPX" : "\x93NUMPY", 1, 6, f);
	fputc(version, f);
	fputc(0, f);
	if (version == 1) {
		fputc((int)(hlen & 0xff), f);
		fputc((int)(hlen >> 8), f);
	} else {
		for (int b = 0; b < 4; b++)
			fputc((int)((hlen >> (8 * b)) & 0xff), f);
	}
	fputs(hdr, f);
	for (size_t i = strlen(hdr) + 1; i < hlen; i++)
		fputc(' ', f);
	fputc('\n', f);
	total = rows * cols;
	if (strcmp(brk, "truncate") == 0)
		total = total > 1 ? total - 1 : 0;
	for (size_t i = 0; i < total; i++) {
		float v = (float)(scale * (2.0f * rng_u01(seed, i) - 1.0f));
		double dv = v;

		if (i == bad) {
			dv = strcmp(kind, "nan") == 0 ? NAN : strcmp(kind, "inf") == 0 ? -INFINITY : 1e300;
			v = (float)dv;
		}
		if (isz == 8)
			fwrite(&dv, 8, 1, f);
		else
			fwrite(&v, 4, 1, f);
	}
	return fclose(f) == 0 ? 0 : 1;
}
