/*
 * slurp.h - for the cmocka tests that parse the hostile-file corpus: read a whole
 * file into a buffer of exactly its size, so AddressSanitizer sees any overread.
 * Include after cmocka.h.
 */
#ifndef DDPT_TESTS_SLURP_H
#define DDPT_TESTS_SLURP_H

#include <stdio.h>
#include <stdlib.h>

static unsigned char *slurp(const char *file, size_t *len)
{
	FILE *f = fopen(file, "rb");
	unsigned char *buf;
	long n;

	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = malloc(n > 0 ? (size_t)n : 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return buf;
}

#endif
