/* test_trace.c - the --trace recorder, its step window, the clock-offset estimate and the JSON it writes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "observe/trace.h"

static void test_trace_steps_parse_ranges_and_refuse_nonsense(void **state)
{
	struct diag d = {0};
	long lo, hi;

	assert_int_equal(trace_parse_steps("5:9", &lo, &hi, &d), ST_OK);
	assert_int_equal(lo, 5);
	assert_int_equal(hi, 9);
	assert_int_equal(trace_parse_steps(":20", &lo, &hi, &d), ST_OK);
	assert_int_equal(lo, 1);
	assert_int_equal(hi, 20);
	assert_int_equal(trace_parse_steps("3:", &lo, &hi, &d), ST_OK);
	assert_int_equal(lo, 3);
	assert_int_equal(hi, 0);
	assert_int_equal(trace_parse_steps("9:5", &lo, &hi, &d), ST_USAGE);
	assert_non_null(strstr(d.msg, "--trace-steps"));
	memset(&d, 0, sizeof d);
	assert_int_equal(trace_parse_steps("7", &lo, &hi, &d), ST_USAGE);
	memset(&d, 0, sizeof d);
	assert_int_equal(trace_parse_steps("0:4", &lo, &hi, &d), ST_USAGE);
	memset(&d, 0, sizeof d);
	assert_int_equal(trace_parse_steps("a:b", &lo, &hi, &d), ST_USAGE);
}

static void test_clock_offset_is_remote_minus_midpoint_with_half_round_trip_error(void **state)
{
	double err;
	/* Sent at 10.0, answered at 10.4: the remote read 110.3 at (we assume) 10.2. */
	double off = trace_clock_offset(10.0, 110.3, 10.4, &err);

	assert_float_equal(off, 100.1, 1e-9);
	assert_float_equal(err, 0.2, 1e-9);
}

static void test_recording_without_a_buffer_does_nothing(void **state)
{
	struct trace t;
	struct diag d = {0};
	long i;

	assert_int_equal(trace_init(&t, NULL, 1, 0, 1, 0, 100, &d), ST_OK);
	assert_null(trace_buf_for(&t, 0, 1));
	assert_null(trace_buf_for(NULL, 0, 1));
	i = trace_begin(NULL, TR_FORWARD, 0);
	assert_int_equal(i, -1);
	trace_end(NULL, i);
	trace_record(NULL, TR_ALLREDUCE, 0, TRACE_ASYNC, 1.0, 2.0, 4.0);
	trace_free(&t);
}

static void test_only_steps_inside_the_window_are_recorded(void **state)
{
	struct trace t;
	struct diag d = {0};

	assert_int_equal(trace_init(&t, "unused.json", 3, 4, 2, 1, 100, &d), ST_OK);
	assert_null(trace_buf_for(&t, 0, 2));
	assert_non_null(trace_buf_for(&t, 0, 3));
	assert_non_null(trace_buf_for(&t, 1, 4));
	assert_null(trace_buf_for(&t, 1, 5));
	trace_free(&t);
}

static void test_spans_carry_step_thread_and_order_and_the_bound_drops(void **state)
{
	struct trace t;
	struct diag d = {0};
	struct trace_buf *b;
	long i, j;

	assert_int_equal(trace_init(&t, "unused.json", 1, 0, 2, 1, 1024, &d), ST_OK);
	b = trace_buf_for(&t, 1, 7);
	i = trace_begin(b, TR_BACKWARD, 2);
	j = trace_begin(b, TR_LOSS, -1);
	trace_end(b, j);
	trace_end(b, i);
	assert_int_equal(b->n, 2);
	assert_int_equal(b->ev[0].step, 7);
	assert_int_equal(b->ev[0].tid, 1);
	assert_int_equal(b->ev[0].idx, 2);
	assert_false(b->ev[0].open);
	assert_true(b->ev[0].t0 <= b->ev[1].t0 && b->ev[1].t1 <= b->ev[0].t1);
	for (int k = 0; k < 2000; k++)
		trace_record(b, TR_OPTIMIZER, -1, TRACE_SPAN, 0.0, 1.0, 0.0);
	assert_int_equal(b->n, 1024);
	assert_int_equal(b->dropped, 2000 - 1022);
	trace_free(&t);
	trace_free(&t);
}

/* A fake device clock: marker k happened at 100 + k seconds. */
static int fake_marks;
static int fake_resets;
static int fake_mark(void *ctx, const char *name, int begin) { return fake_marks++; }
static double fake_time(void *ctx, int marker) { return 100.0 + marker; }
static void fake_reset(void *ctx) { fake_resets++; fake_marks = 0; }

static void test_device_markers_become_times_when_resolved(void **state)
{
	static const struct trace_dev dev = {fake_mark, fake_time, fake_reset};
	struct trace t;
	struct diag d = {0};
	struct trace_buf *b;
	long i;

	assert_int_equal(trace_init(&t, "unused.json", 1, 0, 1, 0, 100, &d), ST_OK);
	b = trace_buf_for(&t, 0, 1);
	b->dev = &dev;
	fake_marks = fake_resets = 0;
	i = trace_begin(b, TR_FORWARD, 0);
	trace_end(b, i);
	assert_int_equal(b->ev[0].m0, 0);
	assert_int_equal(b->ev[0].m1, 1);
	trace_resolve(b);
	assert_float_equal(b->ev[0].t0, 100.0, 0);
	assert_float_equal(b->ev[0].t1, 101.0, 0);
	assert_int_equal(b->ev[0].m0, -1);
	assert_int_equal(fake_resets, 1);
	trace_free(&t);
}

static json_t *find_event(json_t *events, const char *name, const char *ph, int pid)
{
	size_t i;
	json_t *e;

	json_array_foreach(events, i, e) {
		if (strcmp(json_string_value(json_object_get(e, "name")), name) == 0 &&
		    strcmp(json_string_value(json_object_get(e, "ph")), ph) == 0 &&
		    json_integer_value(json_object_get(e, "pid")) == pid)
			return e;
	}
	return NULL;
}

static void test_file_is_chrome_json_with_spans_async_pairs_and_metadata(void **state)
{
	struct trace_event r0[2], r1[1];
	const struct trace_event *ev[2] = {r0, r1};
	const size_t n[2] = {2, 1};
	const char *names[2] = {"rank 0 (a)", "rank 1 (b)"};
	const char *meta[] = {"mode=ddp", NULL};
	char path[] = "/tmp/test_trace.XXXXXX";
	struct diag d = {0};
	json_error_t jerr;
	json_t *root, *events, *e;
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	close(fd);
	memset(r0, 0, sizeof r0);
	memset(r1, 0, sizeof r1);
	r0[0] = (struct trace_event){.t0 = 10.001, .t1 = 10.003, .step = 1, .m0 = -1, .m1 = -1,
				     .what = TR_BACKWARD, .idx = 1, .kind = TRACE_SPAN};
	r0[1] = (struct trace_event){.t0 = 10.002, .t1 = 10.005, .bytes = 4096, .step = 1, .m0 = -1,
				     .m1 = -1, .what = TR_ALLREDUCE, .idx = 0, .kind = TRACE_ASYNC};
	r1[0] = (struct trace_event){.t0 = 10.004, .t1 = 10.004, .step = 1, .m0 = -1, .m1 = -1,
				     .what = TR_STOP, .idx = -1, .kind = TRACE_INSTANT};
	assert_int_equal(trace_write_file(path, ev, n, names, 2, 0, 10.0, meta, &d), ST_OK);
	root = json_load_file(path, 0, &jerr);
	unlink(path);
	assert_non_null(root);
	events = json_object_get(root, "traceEvents");
	assert_true(json_is_array(events));
	e = find_event(events, "backward layer 2", "X", 0); /* idx 1: layers count from 1, as --freeze */
	assert_non_null(e);
	assert_float_equal(json_number_value(json_object_get(e, "ts")), 1000.0, 1e-6);
	assert_float_equal(json_number_value(json_object_get(e, "dur")), 2000.0, 1e-6);
	assert_non_null(find_event(events, "allreduce bucket 0", "b", 0));
	e = find_event(events, "allreduce bucket 0", "e", 0);
	assert_non_null(e);
	assert_float_equal(json_number_value(json_object_get(e, "ts")), 5000.0, 1e-6);
	assert_non_null(find_event(events, "stop", "i", 1));
	e = find_event(events, "process_name", "M", 1);
	assert_string_equal(json_string_value(json_object_get(json_object_get(e, "args"), "name")),
			    "rank 1 (b)");
	assert_string_equal(json_string_value(json_object_get(json_object_get(root, "otherData"), "mode")),
			    "ddp");
	json_decref(root);
}

static void test_unwritable_path_is_an_error_naming_the_flag(void **state)
{
	const struct trace_event *ev[1] = {NULL};
	const size_t n[1] = {0};
	const char *names[1] = {"rank 0"};
	struct diag d = {0};

	assert_int_equal(trace_write_file("/nonexistent-dir/t.json", ev, n, names, 1, 0, 0.0, NULL, &d),
			 ST_RUNTIME);
	assert_non_null(strstr(d.msg, "--trace"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_trace_steps_parse_ranges_and_refuse_nonsense),
		cmocka_unit_test(test_clock_offset_is_remote_minus_midpoint_with_half_round_trip_error),
		cmocka_unit_test(test_recording_without_a_buffer_does_nothing),
		cmocka_unit_test(test_only_steps_inside_the_window_are_recorded),
		cmocka_unit_test(test_spans_carry_step_thread_and_order_and_the_bound_drops),
		cmocka_unit_test(test_device_markers_become_times_when_resolved),
		cmocka_unit_test(test_file_is_chrome_json_with_spans_async_pairs_and_metadata),
		cmocka_unit_test(test_unwritable_path_is_an_error_naming_the_flag),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
