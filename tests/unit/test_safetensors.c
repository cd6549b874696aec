/* test_safetensors.c - round trip, atomic writes and malformed headers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/safetensors.h"
#include "lib/slurp.h"

static char dir[64], path[128];

static int make_dir(void **state)
{
	strcpy(dir, "/tmp/test_st.XXXXXX");
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/w.safetensors", dir);
	return 0;
}

static int remove_dir(void **state)
{
	DIR *dp = opendir(dir);
	struct dirent *e;
	char p[400];

	while (dp && (e = readdir(dp)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
		unlink(p);
	}
	if (dp)
		closedir(dp);
	rmdir(dir);
	return 0;
}

static int count_files(void)
{
	DIR *dp = opendir(dir);
	struct dirent *e;
	int n = 0;

	while ((e = readdir(dp)) != NULL)
		n += e->d_name[0] != '.';
	closedir(dp);
	return n;
}

static void test_st_round_trip_keeps_names_shapes_and_values(void **state)
{
	float w[6] = {1, 2, 3, 4, 5, 6}, b[2] = {-1, 0.5f}, out[6];
	struct st_entry e[2] = {
		{"net1.weight", 2, {2, 3}, w},
		{"net1.bias", 1, {2}, b},
	};
	const char *meta[] = {"format", "pt"};
	struct st_file f;
	struct diag d = {0};
	const struct st_tensor *t;
	struct stat sb;

	assert_int_equal(st_save(path, "--save", e, 2, meta, 1, NULL, &d), ST_OK);
	assert_int_equal(count_files(), 1); /* no temporary file left */
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_size % 8, 0); /* header padded to 8, data 32 bytes */
	assert_int_equal(st_open(&f, path, "--init", &d), ST_OK);
	assert_int_equal(f.n, 2);
	t = st_find(&f, "net1.weight");
	assert_non_null(t);
	assert_int_equal(t->ndim, 2);
	assert_int_equal(t->shape[0], 2);
	assert_int_equal(t->shape[1], 3);
	assert_string_equal(t->dtype, "F32");
	assert_int_equal(st_read_f32(&f, t, out, 6, "x", &d), ST_OK);
	assert_memory_equal(out, w, sizeof w);
	t = st_find(&f, "net1.bias");
	assert_int_equal(st_read_f32(&f, t, out, 2, "x", &d), ST_OK);
	assert_memory_equal(out, b, sizeof b);
	assert_null(st_find(&f, "net2.weight"));
	st_close(&f);
	st_close(&f);
}

static void test_st_save_into_missing_directory_fails_and_leaves_nothing(void **state)
{
	float w[1] = {1};
	struct st_entry e[1] = {{"a", 1, {1}, w}};
	struct diag d = {0};
	char bad[200];

	snprintf(bad, sizeof bad, "%s/no/such/dir/w.safetensors", dir);
	assert_int_equal(st_save(bad, "--save", e, 1, NULL, 0, NULL, &d), ST_RUNTIME);
	assert_non_null(strstr(d.msg, "--save"));
	assert_int_equal(count_files(), 0);
}

static void test_st_save_replaces_an_existing_file_whole(void **state)
{
	float a[2] = {1, 2}, b[2] = {3, 4}, out[2];
	struct st_entry e[1] = {{"t", 1, {2}, a}};
	struct st_file f;
	struct diag d = {0};

	assert_int_equal(st_save(path, "--save", e, 1, NULL, 0, NULL, &d), ST_OK);
	e[0].data = b;
	assert_int_equal(st_save(path, "--save", e, 1, NULL, 0, NULL, &d), ST_OK);
	assert_int_equal(count_files(), 1);
	assert_int_equal(st_open(&f, path, "--init", &d), ST_OK);
	assert_int_equal(st_read_f32(&f, st_find(&f, "t"), out, 2, "x", &d), ST_OK);
	assert_memory_equal(out, b, sizeof b);
	st_close(&f);
}

/* Parse a header text followed by `data` bytes of zeros. */
static enum status parse_text(const char *json, size_t data, struct diag *d)
{
	size_t hl = strlen(json), len = 8 + hl + data;
	unsigned char *buf = calloc(1, len);
	struct st_file f;
	enum status st;

	for (int b = 0; b < 8; b++)
		buf[b] = (unsigned char)(hl >> (8 * b));
	memcpy(buf + 8, json, hl);
	memset(d, 0, sizeof *d);
	st = st_parse(&f, buf, len, "--init: x", d);
	if (st == ST_OK)
		free(f.t);
	free(buf);
	return st;
}

static void test_st_accepts_a_valid_header_with_metadata(void **state)
{
	struct diag d;

	assert_int_equal(parse_text("{\"__metadata__\":{\"a\":\"b\"},\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, &d), ST_OK);
	assert_int_equal(parse_text("{}", 0, &d), ST_OK);
}

static void test_st_rejects_malformed_headers(void **state)
{
	struct { const char *json; size_t data; const char *why; } bad[] = {
		{"{\"x\":", 0, "not valid JSON"},
		{"[1,2]", 0, "not a JSON object"},
		{"{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}", 8, "outside the file"},
		{"{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "shape needs"},
		{"{\"x\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype"},
		{"{\"x\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "bad shape"},
		{"{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "run backwards"},
		{"{\"x\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "malformed"},
		{"{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "overlaps"},
		{"{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "gap"},
		{"{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "4 bytes of trailing data"},
		{"{\"x\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776],\"data_offsets\":[0,0]}}", 0, "too large"},
		{"{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}", 8, "overlaps"},
		{"{\"__metadata__\":{\"lr\":0.1}}", 0, "__metadata__ value 'lr' is not a string"},
		{"{\"__metadata__\":{\"lr\":NaN}}", 0, "not valid JSON"},
		{"{\"a\\nb\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor name 'a?b' contains a control character"},
		{"{\"__metadata__\":[1]}", 0, "__metadata__"},
		{"{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "names a tensor twice"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct diag d;

		assert_int_equal(parse_text(bad[i].json, bad[i].data, &d), ST_RUNTIME);
		if (strstr(d.msg, bad[i].why) == NULL)
			fail_msg("case %zu: '%s' lacks '%s'", i, d.msg, bad[i].why);
	}
}

static void test_st_rejects_bad_header_length(void **state)
{
	unsigned char buf[16] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, '{', '}'};
	struct st_file f;
	struct diag d = {0};

	assert_int_equal(st_parse(&f, buf, sizeof buf, "x", &d), ST_RUNTIME);
	assert_non_null(strstr(d.msg, "header length"));
	memset(&d, 0, sizeof d);
	assert_int_equal(st_parse(&f, buf, 5, "x", &d), ST_RUNTIME);
	assert_non_null(strstr(d.msg, "too short"));
}

/* Every st-* file of tests/corpus is refused by st_parse with a one-line message,
 * except the few that are well-formed files refused later, by --init's checks
 * against the model (names, shapes, dtypes, values); every tensor of a file that
 * parses is read. Under --enable-sanitizers this runs the corpus through ASan. */
static int st_well_formed(const char *name)
{
	static const char *const well_formed[] = {
		"good.safetensors", "st-dtype-int.safetensors", "st-missing-name.safetensors",
		"st-wrong-shape.safetensors", "st-nan-weights.safetensors",
	};

	for (size_t k = 0; k < sizeof well_formed / sizeof well_formed[0]; k++)
		if (strcmp(name, well_formed[k]) == 0)
			return 1;
	return 0;
}

/* st_parse, then (a file that parses) every tensor read. */
static enum status st_parse_and_read(const char *name, unsigned char *buf, size_t len, struct diag *d)
{
	struct st_file f;
	enum status st;

	memset(&f, 0, sizeof f);
	st = st_parse(&f, buf, len, name, d);
	if (st != ST_OK)
		return st;
	for (size_t k = 0; k < f.n; k++) {
		size_t count = (f.t[k].end - f.t[k].begin) / 4;
		float *out = malloc(count * sizeof *out + 1);

		st_read_f32(&f, &f.t[k], out, count, name, d);
		free(out);
	}
	free(f.t);
	return st;
}

static void test_st_parse_refuses_every_hostile_corpus_file(void **state)
{
	int good, bad;

	corpus_each(".safetensors", st_well_formed, st_parse_and_read, &good, &bad);
	assert_int_equal(good, 5);
	assert_true(bad >= 20);
}

static void test_st_reads_f64_by_converting(void **state)
{
	const char *json = "{\"x\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}";
	size_t hl = strlen(json);
	unsigned char buf[256] = {0};
	double v[2] = {1.5, -2.25};
	float out[2];
	struct st_file f;
	struct diag d = {0};

	buf[0] = (unsigned char)hl;
	memcpy(buf + 8, json, hl);
	memcpy(buf + 8 + hl, v, sizeof v);
	assert_int_equal(st_parse(&f, buf, 8 + hl + 16, "x", &d), ST_OK);
	assert_int_equal(st_read_f32(&f, st_find(&f, "x"), out, 2, "x", &d), ST_OK);
	assert_true(out[0] == 1.5f && out[1] == -2.25f);
	free(f.t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_st_round_trip_keeps_names_shapes_and_values, make_dir, remove_dir),
		cmocka_unit_test_setup_teardown(test_st_save_into_missing_directory_fails_and_leaves_nothing, make_dir, remove_dir),
		cmocka_unit_test_setup_teardown(test_st_save_replaces_an_existing_file_whole, make_dir, remove_dir),
		cmocka_unit_test(test_st_accepts_a_valid_header_with_metadata),
		cmocka_unit_test(test_st_rejects_malformed_headers),
		cmocka_unit_test(test_st_rejects_bad_header_length),
		cmocka_unit_test(test_st_reads_f64_by_converting),
		cmocka_unit_test(test_st_parse_refuses_every_hostile_corpus_file),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
