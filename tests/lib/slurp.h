/*
 * slurp.h - for the cmocka tests that parse the hostile-file corpus: read a whole
 * file into a buffer of exactly its size, so AddressSanitizer sees any overread.
 * corpus_each runs a parser over the corpus. Include after cmocka.h.
 */
#ifndef DDPT_TESTS_SLURP_H
#define DDPT_TESTS_SLURP_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

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

/* Every tests/corpus file whose name ends with suffix, read whole (slurp) and given to
 * parse: a file good() names must be accepted (ST_OK), any other refused with ST_RUNTIME
 * and a one-line message. *good_n and *bad_n count them. Skips the test when TOP_SRCDIR
 * is not set (the test run outside make check). */
static void corpus_each(const char *suffix, int (*good)(const char *name),
			enum status (*parse)(const char *name, unsigned char *buf, size_t len, struct diag *d),
			int *good_n, int *bad_n)
{
	const char *top = getenv("TOP_SRCDIR");
	char dir[512], file[1024];
	struct dirent *e;
	DIR *dp;

	*good_n = *bad_n = 0;
	if (top == NULL)
		skip();
	snprintf(dir, sizeof dir, "%s/tests/corpus", top);
	dp = opendir(dir);
	assert_non_null(dp);
	while ((e = readdir(dp)) != NULL) {
		size_t n = strlen(e->d_name), k = strlen(suffix), len;
		struct diag d = {0};
		unsigned char *buf;
		enum status st;

		if (n < k || strcmp(e->d_name + n - k, suffix) != 0)
			continue;
		snprintf(file, sizeof file, "%s/%s", dir, e->d_name);
		buf = slurp(file, &len);
		st = parse(e->d_name, buf, len, &d);
		if (good(e->d_name)) {
			if (st != ST_OK)
				fail_msg("%s refused: %s", e->d_name, d.msg);
			++*good_n;
		} else {
			if (st != ST_RUNTIME || strchr(d.msg, '\n') != NULL)
				fail_msg("%s: status %d, message '%s'", e->d_name, st, d.msg);
			++*bad_n;
		}
		free(buf);
	}
	closedir(dp);
}

#endif
