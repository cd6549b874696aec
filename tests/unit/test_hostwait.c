/* test_hostwait.c - the CUDA module's host wait (src/cuda/hostwait.c), with a scripted
 * device: how long the work stays unfinished, what the communicator's poll says and
 * when, and the clock running out. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "cuda/hostwait.h"

/* The scripted device and communicator. */
struct script {
	int busy;        /* queries that answer "not yet" before "done"; < 0: never done */
	int fail_query;  /* the query fails instead of answering done */
	int poll_fails;  /* the poll reports an error from its poll_fails-th call on (1-based) */
	int queries, polls;
};

static int query(void *arg, struct diag *d)
{
	struct script *s = arg;

	s->queries++;
	if (s->busy < 0 || s->queries <= s->busy)
		return 0;
	if (s->fail_query) {
		diag_set(d, ST_RUNTIME, "GPU 0: cudaStreamQuery failed: an illegal memory access");
		return -1;
	}
	return 1;
}

static enum status poll(void *arg, struct diag *d)
{
	struct script *s = arg;

	s->polls++;
	if (s->poll_fails > 0 && s->polls >= s->poll_fails)
		return diag_set(d, ST_RUNTIME, "NCCL all-reduce failed: remote process exited");
	return ST_OK;
}

static struct hostwait waiting_on(struct script *s, int timeout_s)
{
	return (struct hostwait){"cudaStreamSynchronize", 3, query, s, poll, s, timeout_s};
}

static void test_hostwait_returns_once_the_work_is_done(void **state)
{
	struct script s = {.busy = 3};
	struct hostwait w = waiting_on(&s, 0);
	struct diag d = {0};

	assert_int_equal(hostwait(&w, &d), ST_OK);
	assert_int_equal(s.queries, 4);
	assert_true(s.polls >= 3); /* the communicator is watched while the work runs */
	assert_int_equal(d.st, ST_OK);
}

static void test_hostwait_reports_the_poll_error_seen_while_waiting(void **state)
{
	struct script s = {.busy = -1, .poll_fails = 2};
	struct hostwait w = waiting_on(&s, 0);
	struct diag d = {0};

	assert_int_equal(hostwait(&w, &d), ST_RUNTIME);
	assert_string_equal(d.msg, "NCCL all-reduce failed: remote process exited");
	assert_int_equal(s.polls, 2);
}

/* A replayed graph's all-reduce is waited for only here (no wait_all runs): an error NCCL
 * reports once the stream has drained, or a stream already drained when the host comes to
 * wait, must still be seen, so the poll runs after the work is known complete too. */
static void test_hostwait_polls_once_more_after_the_work_is_done(void **state)
{
	struct script s = {.busy = 0, .poll_fails = 1};
	struct hostwait w = waiting_on(&s, 0);
	struct diag d = {0};

	assert_int_equal(hostwait(&w, &d), ST_RUNTIME);
	assert_string_equal(d.msg, "NCCL all-reduce failed: remote process exited");
	assert_int_equal(s.queries, 1);
	assert_int_equal(s.polls, 1);
}

static void test_hostwait_reports_a_failed_query(void **state)
{
	struct script s = {.busy = 1, .fail_query = 1};
	struct hostwait w = waiting_on(&s, 0);
	struct diag d = {0};

	assert_int_equal(hostwait(&w, &d), ST_RUNTIME);
	assert_string_equal(d.msg, "GPU 0: cudaStreamQuery failed: an illegal memory access");
}

static void test_hostwait_without_a_communicator_only_queries(void **state)
{
	struct script s = {.busy = 2};
	struct hostwait w = {"cudaEventQuery(host buffer copied)", 0, query, &s, NULL, NULL, 0};
	struct diag d = {0};

	assert_int_equal(hostwait(&w, &d), ST_OK);
	assert_int_equal(s.queries, 3);
}

/* A stalled peer: the work never finishes and the poll sees nothing; the timeout (1 s
 * here) ends the wait with the GPU and the call in the message. */
static void test_hostwait_gives_up_after_the_timeout(void **state)
{
	struct script s = {.busy = -1};
	struct hostwait w = waiting_on(&s, 1);
	struct diag d = {0};

	assert_int_equal(hostwait(&w, &d), ST_RUNTIME);
	assert_string_equal(d.msg,
			    "GPU 3: cudaStreamSynchronize: no progress for 1 s: a peer rank is gone or stalled");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hostwait_returns_once_the_work_is_done),
		cmocka_unit_test(test_hostwait_reports_the_poll_error_seen_while_waiting),
		cmocka_unit_test(test_hostwait_polls_once_more_after_the_work_is_done),
		cmocka_unit_test(test_hostwait_reports_a_failed_query),
		cmocka_unit_test(test_hostwait_without_a_communicator_only_queries),
		cmocka_unit_test(test_hostwait_gives_up_after_the_timeout),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
