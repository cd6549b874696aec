/* test_npy.c - the .npy reader: header versions, dtypes, shapes, broken files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/npy.h"
#include "lib/slurp.h"

/* Write a .npy file: version 1 or 2 header `dict`, then `nbytes` of data. */
static void write_npy(const char *path, int version, const char *dict, const void *data,
		      size_t nbytes)
{
	FILE *f = fopen(path, "wb");
	size_t pre = version == 1 ? 10 : 12, hlen = strlen(dict) + 1;

	assert_non_null(f);
	hlen += (64 - (pre + hlen) % 64) % 64;
	fwrite("\x93NUMPY", 1, 6, f);
	fputc(version, f);
	fputc(0, f);
	for (size_t b = 0; b < (version == 1 ? 2u : 4u); b++)
		fputc((int)((hlen >> (8 * b)) & 0xff), f);
	fputs(dict, f);
	for (size_t i = strlen(dict) + 1; i < hlen; i++)
		fputc(' ', f);
	fputc('\n', f);
	fwrite(data, 1, nbytes, f);
	fclose(f);
}

static char path[64];

static int make_path(void **state)
{
	strcpy(path, "/tmp/test_npy.XXXXXX");
	close(mkstemp(path));
	return 0;
}

static int remove_path(void **state)
{
	unlink(path);
	return 0;
}

static void test_npy_reads_v1_float32(void **state)
{
	const float v[6] = {1, 2, 3, 4, 5, 6};
	struct npy a;
	struct diag d = {0};
	float row[3];

	write_npy(path, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", v, sizeof v);
	assert_int_equal(npy_open(&a, path, "--inputs", NPY_WANT_FLOATS, &d), ST_OK);
	assert_int_equal(a.rows, 2);
	assert_int_equal(a.cols, 3);
	npy_read_row(&a, 1, row);
	assert_true(row[0] == 4 && row[1] == 5 && row[2] == 6);
	npy_close(&a);
	npy_close(&a); /* safe twice */
}

static void test_npy_reads_v2_float64_converting(void **state)
{
	const double v[4] = {0.5, -1.25, 3.0, 1e-3};
	struct npy a;
	struct diag d = {0};
	float row[2];

	write_npy(path, 2, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }", v, sizeof v);
	assert_int_equal(npy_open(&a, path, "--inputs", NPY_WANT_FLOATS, &d), ST_OK);
	assert_int_equal(a.itemsize, 8);
	npy_read_row(&a, 1, row);
	assert_true(row[0] == 3.0f && row[1] == (float)1e-3);
	npy_close(&a);
}

static void test_npy_rejects_wrong_dtype(void **state)
{
	const int v[4] = {0};
	struct npy a;
	struct diag d = {0};

	write_npy(path, 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2), }", v, sizeof v);
	assert_int_equal(npy_open(&a, path, "--inputs", NPY_WANT_FLOATS, &d), ST_RUNTIME);
	assert_non_null(strstr(d.msg, "dtype '<i4'"));
	assert_non_null(strstr(d.msg, "--inputs"));
}

/* '>f4' and '>f8', as NumPy writes them on a big-endian machine or with dtype='>f4':
 * converted once on load to the same floats. */
static void test_npy_reads_big_endian_floats(void **state)
{
	const unsigned char f4[8] = {0x3f, 0x80, 0, 0, 0xc0, 0x20, 0, 0}; /* 1.0, -2.5 */
	const unsigned char f8[8] = {0x3f, 0xd0, 0, 0, 0, 0, 0, 0};       /* 0.25 */
	struct npy a;
	struct diag d = {0};
	float row[2];

	write_npy(path, 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (1, 2), }", f4, sizeof f4);
	assert_int_equal(npy_open(&a, path, "--inputs", NPY_WANT_FLOATS, &d), ST_OK);
	npy_read_row(&a, 0, row);
	assert_true(row[0] == 1.0f && row[1] == -2.5f);
	assert_true(a.data == a.conv && a.data != a.raw); /* read from the converted copy */
	npy_close(&a);
	write_npy(path, 1, "{'descr': '>f8', 'fortran_order': False, 'shape': (1, 1), }", f8, sizeof f8);
	assert_int_equal(npy_open(&a, path, "--inputs", NPY_WANT_FLOATS, &d), ST_OK);
	npy_read_row(&a, 0, row);
	assert_true(row[0] == 0.25f);
	npy_close(&a);
	npy_close(&a);
}

static void test_npy_rejects_wrong_rank(void **state)
{
	const float v[8] = {0};
	struct npy a;
	struct diag d = {0};

	write_npy(path, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (8,), }", v, sizeof v);
	assert_int_equal(npy_open(&a, path, "--inputs", NPY_WANT_FLOATS, &d), ST_RUNTIME);
	assert_non_null(strstr(d.msg, "1 dimensions, need 2"));
	memset(&d, 0, sizeof d);
	write_npy(path, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2, 2), }", v, sizeof v);
	assert_int_equal(npy_open(&a, path, "--inputs", NPY_WANT_FLOATS, &d), ST_RUNTIME);
	assert_non_null(strstr(d.msg, "3 dimensions"));
}

/* np.asfortranarray([[1, 2, 3], [4, 5, 6]]) is stored column by column: 1 4 2 5 3 6. */
static void test_npy_reads_fortran_order_transposed(void **state)
{
	const float v[6] = {1, 4, 2, 5, 3, 6};
	struct npy a;
	struct diag d = {0};
	float row[3];

	write_npy(path, 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", v, sizeof v);
	assert_int_equal(npy_open(&a, path, "--inputs", NPY_WANT_FLOATS, &d), ST_OK);
	npy_read_row(&a, 0, row);
	assert_true(row[0] == 1 && row[1] == 2 && row[2] == 3);
	npy_read_row(&a, 1, row);
	assert_true(row[0] == 4 && row[1] == 5 && row[2] == 6);
	npy_close(&a);
}

/* Class labels: int64, uint8, big-endian int16 with a negative value, shape (N,). */
static void test_npy_reads_integer_labels(void **state)
{
	const int64_t i8[3] = {0, 7, 2};
	const uint8_t u1[3] = {9, 0, 255};
	const unsigned char be2[4] = {0x01, 0x02, 0xff, 0xfe}; /* 258, -2 */
	struct npy a;
	struct diag d = {0};

	write_npy(path, 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", i8, sizeof i8);
	assert_int_equal(npy_open(&a, path, "--targets", NPY_WANT_LABELS, &d), ST_OK);
	assert_int_equal(a.rows, 3);
	assert_int_equal(a.cols, 1);
	assert_true(npy_read_int(&a, 0) == 0 && npy_read_int(&a, 1) == 7 && npy_read_int(&a, 2) == 2);
	npy_close(&a);
	write_npy(path, 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }", u1, sizeof u1);
	assert_int_equal(npy_open(&a, path, "--targets", NPY_WANT_LABELS, &d), ST_OK);
	assert_true(npy_read_int(&a, 0) == 9 && npy_read_int(&a, 2) == 255);
	npy_close(&a);
	write_npy(path, 1, "{'descr': '>i2', 'fortran_order': False, 'shape': (2,), }", be2, sizeof be2);
	assert_int_equal(npy_open(&a, path, "--targets", NPY_WANT_LABELS, &d), ST_OK);
	assert_true(npy_read_int(&a, 0) == 258 && npy_read_int(&a, 1) == -2);
	npy_close(&a);
}

/* Each flag refuses what it cannot use, saying what it needs. */
static void test_npy_refuses_what_the_flag_cannot_use(void **state)
{
	const float f[4] = {0};
	const int32_t i[4] = {0};
	struct npy a;
	struct diag d = {0};

	write_npy(path, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", f, sizeof f);
	assert_int_equal(npy_open(&a, path, "--targets", NPY_WANT_LABELS, &d), ST_RUNTIME);
	assert_non_null(strstr(d.msg, "--targets"));
	assert_non_null(strstr(d.msg, "not supported for class labels (need integers"));
	memset(&d, 0, sizeof d);
	write_npy(path, 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2), }", i, sizeof i);
	assert_int_equal(npy_open(&a, path, "--targets", NPY_WANT_LABELS, &d), ST_RUNTIME);
	assert_non_null(strstr(d.msg, "shape (N,) or (N, 1), not 2 x 2"));
	memset(&d, 0, sizeof d);
	write_npy(path, 1, "{'descr': '<i2', 'fortran_order': False, 'shape': (2, 2), }", i, 8);
	assert_int_equal(npy_open(&a, path, "--inputs", NPY_WANT_FLOATS, &d), ST_RUNTIME);
	assert_non_null(strstr(d.msg, "dtype '<i2' is not supported (need '<f4' or '<f8')"));
	memset(&d, 0, sizeof d);
	write_npy(path, 1, "{'descr': '|i2', 'fortran_order': False, 'shape': (2, 2), }", i, 8);
	assert_int_equal(npy_open(&a, path, "--inputs", NPY_WANT_FLOATS, &d), ST_RUNTIME);
	assert_non_null(strstr(d.msg, "dtype '|i2' is not supported"));
	/* A dtype no flag can read (float16) names what this flag needs, not every type the
	 * reader knows (integers are refused for --inputs too). */
	memset(&d, 0, sizeof d);
	write_npy(path, 1, "{'descr': '<f2', 'fortran_order': False, 'shape': (2, 2), }", i, 8);
	assert_int_equal(npy_open(&a, path, "--inputs", NPY_WANT_FLOATS, &d), ST_RUNTIME);
	assert_non_null(strstr(d.msg, "dtype '<f2' is not supported (need '<f4' or '<f8')"));
	assert_null(strstr(d.msg, "i1..i8"));
	memset(&d, 0, sizeof d);
	assert_int_equal(npy_open(&a, path, "--targets", NPY_WANT_LABELS, &d), ST_RUNTIME);
	assert_non_null(strstr(d.msg, "dtype '<f2' is not supported for class labels (need integers"));
}

static void test_npy_rejects_truncated_data(void **state)
{
	const float v[5] = {0};
	struct npy a;
	struct diag d = {0};

	write_npy(path, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", v, sizeof v);
	assert_int_equal(npy_open(&a, path, "--targets", NPY_WANT_FLOATS, &d), ST_RUNTIME);
	assert_non_null(strstr(d.msg, "truncated"));
	assert_non_null(strstr(d.msg, "--targets"));
}

static void test_npy_rejects_truncated_header_and_bad_magic(void **state)
{
	struct npy a;
	struct diag d = {0};
	FILE *f = fopen(path, "wb");

	fwrite("\x93NUMPY\x01\x00\x76\x00{'descr'", 1, 18, f);
	fclose(f);
	assert_int_equal(npy_open(&a, path, "--inputs", NPY_WANT_FLOATS, &d), ST_RUNTIME);
	assert_non_null(strstr(d.msg, "truncated .npy header"));
	memset(&d, 0, sizeof d);
	f = fopen(path, "wb");
	fwrite("PK\x03\x04 this is a zip file", 1, 24, f);
	fclose(f);
	assert_int_equal(npy_open(&a, path, "--inputs", NPY_WANT_FLOATS, &d), ST_RUNTIME);
	assert_non_null(strstr(d.msg, "bad magic"));
}

static void test_npy_rejects_trailing_data(void **state)
{
	const float v[7] = {0};
	struct npy a;
	struct diag d = {0};

	write_npy(path, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", v, sizeof v);
	assert_int_equal(npy_open(&a, path, "--inputs", NPY_WANT_FLOATS, &d), ST_RUNTIME);
	assert_non_null(strstr(d.msg, "4 bytes of trailing data after the 2 x 3 array"));
}

static void test_npy_rejects_a_shape_whose_size_overflows(void **state)
{
	const float none[1] = {0};
	struct npy a;
	struct diag d = {0};

	/* 2^40 x 2^24 float32 is 2^66 bytes: wraps to 0 in 64 bits. */
	write_npy(path, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 16777216), }",
		  none, 0);
	assert_int_equal(npy_open(&a, path, "--inputs", NPY_WANT_FLOATS, &d), ST_RUNTIME);
	assert_non_null(strstr(d.msg, "is too large"));
}

static void test_npy_rejects_other_format_versions(void **state)
{
	unsigned char buf[16] = "\x93NUMPY\x01\x01\x02\x00{}";
	struct npy a;
	struct diag d = {0};

	assert_int_equal(npy_parse(&a, buf, 12, NPY_WANT_ANY, "x", &d), ST_RUNTIME);
	assert_non_null(strstr(d.msg, "unsupported .npy format version 1.1"));
	memset(&d, 0, sizeof d);
	buf[6] = 4;
	buf[7] = 0;
	assert_int_equal(npy_parse(&a, buf, 12, NPY_WANT_ANY, "x", &d), ST_RUNTIME);
	assert_non_null(strstr(d.msg, "version 4.0"));
}

static void test_npy_rejects_header_length_past_the_end(void **state)
{
	const unsigned char buf[16] = "\x93NUMPY\x02\x00\xff\xff\xff\xff{}";
	struct npy a;
	struct diag d = {0};

	assert_int_equal(npy_parse(&a, buf, 14, NPY_WANT_ANY, "x", &d), ST_RUNTIME);
	assert_non_null(strstr(d.msg, "header length 4294967295 runs past the end of the file (14 bytes)"));
}

/* The header is not NUL-terminated: a number running to its last byte must not
 * be read past it (strtoull would). The buffer is exactly the file, so ASan and
 * valgrind see any overread. */
static void test_npy_parse_stops_at_the_end_of_the_header(void **state)
{
	const char *dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 000000000";
	size_t hl = strlen(dict), len = 10 + hl;
	unsigned char *buf = malloc(len);
	struct npy a;
	struct diag d = {0};

	memcpy(buf, "\x93NUMPY\x01\x00", 8);
	buf[8] = (unsigned char)hl;
	buf[9] = 0;
	memcpy(buf + 10, dict, hl);
	assert_int_equal(npy_parse(&a, buf, len, NPY_WANT_ANY, "x", &d), ST_RUNTIME);
	assert_non_null(strstr(d.msg, "malformed .npy header (shape)"));
	free(buf);
}

/* Every npy-* file of tests/corpus is refused as --inputs (by the parser, or for a
 * dtype or shape --inputs cannot use) with a one-line message, and the good ones
 * (some big-endian or in Fortran order) are accepted: under --enable-sanitizers this runs the
 * whole corpus through ASan and UBSan without an mpirun per file. */
static int npy_good(const char *name)
{
	return strncmp(name, "good", 4) == 0;
}

static enum status npy_parse_as_inputs(const char *name, unsigned char *buf, size_t len, struct diag *d)
{
	struct npy a;
	enum status st;

	memset(&a, 0, sizeof a);
	st = npy_parse(&a, buf, len, NPY_WANT_FLOATS, name, d);
	if (st == ST_OK)
		st = npy_check(&a, NPY_WANT_FLOATS, name, d);
	npy_close(&a);
	return st;
}

static void test_npy_parse_refuses_every_hostile_corpus_file(void **state)
{
	int good, bad;

	corpus_each(".npy", npy_good, npy_parse_as_inputs, &good, &bad);
	assert_int_equal(good, 4);
	assert_true(bad >= 20);
}

static void test_npy_missing_file_names_flag_and_path(void **state)
{
	struct npy a;
	struct diag d = {0};

	assert_int_equal(npy_open(&a, "/nonexistent/x.npy", "--inputs", NPY_WANT_FLOATS, &d), ST_RUNTIME);
	assert_string_equal(d.msg, "--inputs: /nonexistent/x.npy: No such file or directory");
}

static void test_npy_header_parser_rejects_garbage(void **state)
{
	const char *bad[] = {
		"", "[]", "{'descr': '<f4'}", "{'descr': <f4, 'fortran_order': False, 'shape': (1, 1)}",
		"{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1, 1)}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (1, x)}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1), 'extra': 1}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1",
		"{'descr': '<f4', 'descr': '<f8', 'fortran_order': False, 'shape': (1, 1)}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1), 'shape': (1, 1)}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1)} x",
		"{'descr': '<f4' 'fortran_order': False, 'shape': (1, 1)}",
		"{'descr': '<f4', 'fortran_order': Falsey, 'shape': (1, 1)}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (1 1)}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (1, -1)}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (1, nan)}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1)}",
	};
	static const char nul[] = "{'descr': '<f4\0junk', 'fortran_order': False, 'shape': (1, 1)}";
	struct diag d = {0};
	struct npy a;

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		memset(&d, 0, sizeof d);
		memset(&a, 0, sizeof a);
		assert_int_equal(npy_parse_header(bad[i], strlen(bad[i]), &a, NPY_WANT_ANY, "x", &d), ST_RUNTIME);
	}
	memset(&d, 0, sizeof d);
	assert_int_equal(npy_parse_header(nul, sizeof nul - 1, &a, NPY_WANT_ANY, "x", &d), ST_RUNTIME);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_npy_reads_v1_float32, make_path, remove_path),
		cmocka_unit_test_setup_teardown(test_npy_reads_v2_float64_converting, make_path, remove_path),
		cmocka_unit_test_setup_teardown(test_npy_rejects_wrong_dtype, make_path, remove_path),
		cmocka_unit_test_setup_teardown(test_npy_reads_big_endian_floats, make_path, remove_path),
		cmocka_unit_test_setup_teardown(test_npy_rejects_wrong_rank, make_path, remove_path),
		cmocka_unit_test_setup_teardown(test_npy_reads_fortran_order_transposed, make_path, remove_path),
		cmocka_unit_test_setup_teardown(test_npy_reads_integer_labels, make_path, remove_path),
		cmocka_unit_test_setup_teardown(test_npy_refuses_what_the_flag_cannot_use, make_path, remove_path),
		cmocka_unit_test_setup_teardown(test_npy_rejects_truncated_data, make_path, remove_path),
		cmocka_unit_test_setup_teardown(test_npy_rejects_truncated_header_and_bad_magic, make_path, remove_path),
		cmocka_unit_test_setup_teardown(test_npy_rejects_trailing_data, make_path, remove_path),
		cmocka_unit_test_setup_teardown(test_npy_rejects_a_shape_whose_size_overflows, make_path, remove_path),
		cmocka_unit_test(test_npy_rejects_other_format_versions),
		cmocka_unit_test(test_npy_rejects_header_length_past_the_end),
		cmocka_unit_test(test_npy_parse_stops_at_the_end_of_the_header),
		cmocka_unit_test(test_npy_parse_refuses_every_hostile_corpus_file),
		cmocka_unit_test(test_npy_missing_file_names_flag_and_path),
		cmocka_unit_test(test_npy_header_parser_rejects_garbage),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
