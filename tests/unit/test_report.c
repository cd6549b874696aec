/* test_report.c - the --metrics stream: every record is one line of valid JSON whatever
 * bytes the paths and messages in it hold; an output that cannot be written is one
 * warning, said at once, and a lost output, not a failed run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "observe/report.h"

static char dir[64], path[128];

static int setup(void **state)
{
	strcpy(dir, "/tmp/test_report.XXXXXX");
	if (mkdtemp(dir) == NULL)
		return -1;
	snprintf(path, sizeof path, "%s/m.jsonl", dir);
	return 0;
}

static int teardown(void **state)
{
	unlink(path);
	return rmdir(dir);
}

/* The records of the metrics file, each parsed (jansson refuses text that is not UTF-8);
 * fails the test on a line that is not JSON. Returns how many, up to max. */
static int read_records(json_t **rec, int max)
{
	FILE *f = fopen(path, "r");
	char line[8192];
	int n = 0;

	assert_non_null(f);
	while (n < max && fgets(line, sizeof line, f) != NULL) {
		json_error_t err;

		rec[n] = json_loads(line, 0, &err);
		if (rec[n] == NULL)
			fail_msg("line %d is not JSON (%s): %s", n + 1, err.text, line);
		n++;
	}
	fclose(f);
	return n;
}

static const char *text_at(json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);

	if (!json_is_string(v))
		fail_msg("no string \"%s\"", key);
	return json_string_value(v);
}

/* A byte that is no part of a UTF-8 character (\xff, or a character cut short: \xc3
 * before '.') is kept as the text \xHH; valid characters stay as they are. Before,
 * jansson gave no string: the start record lost the key, the end record was dropped. */
static void test_report_records_are_json_whatever_bytes_the_paths_hold(void **state)
{
	const char *config = "--checkpoint=c\xff.st\n--save=w\xc3.st\n--val-inputs=caf\xc3\xa9.npy\n--seed=7\n";
	struct report r;
	json_t *rec[8], *cfg;
	int n;

	report_init(&r, 1, 1, 0);
	assert_int_equal(report_open_metrics(&r, path, 0, config, NULL), ST_OK);
	report_training_starts(&r);
	report_end(&r, 1, "--checkpoint: c\xff.st: write: No space left on device (cut: caf\xc3", 12);
	report_free(&r);

	n = read_records(rec, 8);
	assert_int_equal(n, 2);
	assert_string_equal(text_at(rec[0], "type"), "start");
	cfg = json_object_get(rec[0], "config");
	assert_string_equal(text_at(cfg, "checkpoint"), "c\\xff.st");
	assert_string_equal(text_at(cfg, "save"), "w\\xc3.st");
	assert_string_equal(text_at(cfg, "val-inputs"), "caf\xc3\xa9.npy");
	assert_string_equal(text_at(cfg, "seed"), "7");
	assert_string_equal(text_at(rec[1], "type"), "end");
	assert_int_equal(json_integer_value(json_object_get(rec[1], "exit_code")), 1);
	assert_string_equal(text_at(rec[1], "reason"),
			    "--checkpoint: c\\xff.st: write: No space left on device (cut: caf\\xc3");
	assert_int_equal(json_integer_value(json_object_get(rec[1], "step")), 12);
	for (int i = 0; i < n; i++)
		json_decref(rec[i]);
}

/* Overlong forms and UTF-16 surrogates are not UTF-8 either. */
static void test_report_refuses_overlong_forms_and_surrogates(void **state)
{
	struct report r;
	json_t *rec[4];

	report_init(&r, 1, 1, 0);
	assert_int_equal(report_open_metrics(&r, path, 0, "--save=\xc0\xaf\xed\xa0\x80\xf4\x90\x80\x80\n", NULL),
			 ST_OK);
	report_end(&r, 1, NULL, -1);
	report_free(&r);
	assert_int_equal(read_records(rec, 4), 2);
	assert_string_equal(text_at(json_object_get(rec[0], "config"), "save"),
			    "\\xc0\\xaf\\xed\\xa0\\x80\\xf4\\x90\\x80\\x80");
	assert_true(json_is_null(json_object_get(rec[1], "reason"))); /* as before: no reason, null */
	assert_null(json_object_get(rec[1], "step")); /* training never began: no step */
	json_decref(rec[0]);
	json_decref(rec[1]);
}

/* Standard error into a file of dir while f runs on r; returns what was written. */
static char *stderr_of(void (*f)(struct report *), struct report *r)
{
	static char text[4096];
	char errpath[160];
	int saved = dup(2), fd;
	FILE *in;
	size_t n;

	snprintf(errpath, sizeof errpath, "%s/stderr", dir);
	fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(saved >= 0 && fd >= 0);
	fflush(stderr);
	dup2(fd, 2);
	close(fd);
	f(r);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	in = fopen(errpath, "r");
	assert_non_null(in);
	n = fread(text, 1, sizeof text - 1, in);
	text[n] = '\0';
	fclose(in);
	unlink(errpath);
	return text;
}

static void three_steps(struct report *r)
{
	report_training_starts(r);
	for (long s = 1; s <= 3; s++)
		report_step(r,
			    &(struct report_progress){.epoch = 1, .epochs = 1, .step = s, .total = 3, .loss = 0.5,
						      .acc = NAN, .lr = 0.1, .samples_per_s = 100.0,
						      .elapsed = 0.1 * (double)s, .steps_here = s},
			    1);
}

static void finish(struct report *r)
{
	static struct replica_stats rep; /* zero */
	static double rss; /* zero */
	struct report_summary sum = {.mode = "ddp", .replicas = 1, .rss_mib = &rss, .rep = &rep};
	struct diag d = {0};

	assert_int_equal(report_finish(r, &sum, 1, &d), ST_OK);
}

/* A metrics file that takes no more bytes (/dev/full: ENOSPC on every write): one warning
 * line at the first record, not one per record and not at the end, and report_finish
 * does not fail the run: the output is lost (before: silent until report_finish, which
 * failed the run, and the caller then wrote no --save). */
static void test_report_warns_once_when_metrics_fail_and_the_run_goes_on(void **state)
{
	struct report r;
	char names[64];
	const char *err;

	report_init(&r, 1, 1, 0);
	assert_int_equal(report_open_metrics(&r, "/dev/full", 0, "--seed=1\n", NULL), ST_OK);
	err = stderr_of(three_steps, &r);
	assert_string_equal(err, "ddptrain: warning: --metrics: /dev/full: write: No space left on device; "
				 "training goes on without its records\n");
	assert_int_equal(report_lost(&r, names, sizeof names), 1);
	assert_string_equal(names, "--metrics");
	assert_string_equal(stderr_of(finish, &r), "");
	report_end(&r, 4, "lost", -1); /* nothing more is tried */
	report_free(&r);
}

/* The closing line names every lost output; --prometheus written again is not lost. */
static void test_report_names_the_lost_outputs(void **state)
{
	struct report r;
	char names[64];

	report_init(&r, 1, 1, 0);
	report_output_failed(&r, REPORT_PROMETHEUS, "--prometheus: p: write: EIO");
	assert_int_equal(report_lost(&r, names, sizeof names), 1);
	report_output_ok(&r, REPORT_PROMETHEUS);
	assert_int_equal(report_lost(&r, names, sizeof names), 0);
	report_output_failed(&r, REPORT_TRACE, "--trace: t: write: EIO");
	report_output_failed(&r, REPORT_METRICS, "--metrics: m: write: EIO");
	report_output_failed(&r, REPORT_PROMETHEUS, "--prometheus: p: write: EIO");
	assert_int_equal(report_lost(&r, names, sizeof names), 3);
	assert_string_equal(names, "--metrics, --trace and --prometheus");
	report_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_report_records_are_json_whatever_bytes_the_paths_hold,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_report_refuses_overlong_forms_and_surrogates, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_report_warns_once_when_metrics_fail_and_the_run_goes_on,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_report_names_the_lost_outputs, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
