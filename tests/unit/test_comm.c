/* test_comm.c - the doors to the collectives (comm.c): a call with good arguments reaches
 * the communicator once, with its arguments unchanged, and is counted in flight until
 * comm_wait_all; each bad argument (too many in flight, a collective too long, an unknown
 * flag or wire type, bad cuts, wait_first beyond what is in flight) is refused with its
 * one "internal:" line and never reaches the communicator. The communicator here is a
 * fake that records what it was asked. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "comm/comm.h"

/* What the fake communicator was asked. */
static struct {
	int calls;        /* entries reached, of any kind */
	const char *last; /* the last entry's name */
	float *buf;
	size_t n;
	const size_t *cuts;
	unsigned flags;
	int k;
	enum status answer; /* what each start and wait returns */
} rec;

static enum status note(const char *what, float *buf, size_t n, const size_t *cuts, unsigned flags,
			int k)
{
	rec.calls++;
	rec.last = what;
	rec.buf = buf;
	rec.n = n;
	rec.cuts = cuts;
	rec.flags = flags;
	rec.k = k;
	return rec.answer;
}

static enum status fake_allreduce(void *ctx, float *buf, size_t n, unsigned flags, struct diag *d)
{
	return note("allreduce", buf, n, NULL, flags, 0);
}

static enum status fake_reduce_scatter(void *ctx, float *buf, size_t n, const size_t *cuts,
				       unsigned flags, struct diag *d)
{
	return note("reduce_scatter", buf, n, cuts, flags, 0);
}

static enum status fake_all_gather(void *ctx, float *buf, size_t n, const size_t *cuts,
				   struct diag *d)
{
	return note("all_gather", buf, n, cuts, 0, 0);
}

static void fake_progress(void *ctx)
{
	note("progress", NULL, 0, NULL, 0, 0);
}

static enum status fake_wait_first(void *ctx, int k, struct diag *d)
{
	return note("wait_first", NULL, 0, NULL, 0, k);
}

static enum status fake_wait_all(void *ctx, struct diag *d)
{
	return note("wait_all", NULL, 0, NULL, 0, 0);
}

static enum status fake_bcast(void *ctx, float *buf, size_t n, int root, struct diag *d)
{
	return note("bcast", buf, n, NULL, 0, root);
}

static void fake_fini(void *ctx)
{
	note("fini", NULL, 0, NULL, 0, 0);
}

static void fake_describe(void *ctx, char *buf, size_t len)
{
	note("describe", NULL, 0, NULL, 0, 0);
	strncpy(buf, "fake", len);
}

static const struct comm_ops fake_ops = {
	.name = "fake",
	.max_floats = 1000,
	.allreduce_start = fake_allreduce,
	.reduce_scatter_start = fake_reduce_scatter,
	.all_gather_start = fake_all_gather,
	.progress = fake_progress,
	.wait_first = fake_wait_first,
	.wait_all = fake_wait_all,
	.bcast = fake_bcast,
	.fini = fake_fini,
	.describe = fake_describe,
};

/* A communicator over 3 ranks with the fake behind it; nothing recorded yet. */
static struct comm fake(void)
{
	memset(&rec, 0, sizeof rec);
	rec.answer = ST_OK;
	return (struct comm){.ops = &fake_ops, .size = 3, .wire = COMM_WIRE_F32};
}

/* d holds an "internal:" error with want in it, and the fake was not reached. */
static void refused(const struct diag *d, enum status st, const char *want)
{
	assert_int_equal(st, ST_RUNTIME);
	assert_int_equal(d->st, ST_RUNTIME);
	assert_true(strncmp(d->msg, "internal: ", 10) == 0);
	assert_non_null(strstr(d->msg, want));
	assert_null(strchr(d->msg, '\n'));
	assert_int_equal(rec.calls, 0);
}

static void test_comm_forwards_good_calls_unchanged(void **state)
{
	struct comm c = fake();
	struct diag d = {0};
	float buf[12];
	const size_t cuts[4] = {0, 4, 4, 12}; /* an empty part is allowed */
	char text[16];

	assert_int_equal(comm_allreduce_start(&c, buf, 12, COMM_LAST | COMM_WIRE, &d), ST_OK);
	assert_string_equal(rec.last, "allreduce");
	assert_ptr_equal(rec.buf, buf);
	assert_int_equal(rec.n, 12);
	assert_int_equal(rec.flags, COMM_LAST | COMM_WIRE);
	assert_int_equal(comm_reduce_scatter_start(&c, buf, 12, cuts, COMM_WIRE, &d), ST_OK);
	assert_string_equal(rec.last, "reduce_scatter");
	assert_ptr_equal(rec.cuts, cuts);
	assert_int_equal(rec.flags, COMM_WIRE);
	assert_int_equal(comm_all_gather_start(&c, buf, 12, cuts, &d), ST_OK);
	assert_string_equal(rec.last, "all_gather");
	assert_int_equal(comm_inflight(&c), 3);
	assert_int_equal(comm_wait_first(&c, 3, &d), ST_OK);
	assert_int_equal(rec.k, 3);
	assert_int_equal(comm_wait_first(&c, 0, &d), ST_OK);
	assert_int_equal(rec.k, 0);
	comm_progress(&c);
	assert_string_equal(rec.last, "progress");
	assert_int_equal(comm_wait_all(&c, &d), ST_OK);
	assert_string_equal(rec.last, "wait_all");
	assert_int_equal(comm_inflight(&c), 0);
	assert_int_equal(comm_bcast(&c, buf, 5000, 2, &d), ST_OK); /* not bound by max_floats */
	assert_int_equal(rec.n, 5000);
	assert_int_equal(rec.k, 2);
	comm_describe(&c, text, sizeof text);
	assert_string_equal(text, "fake");
	comm_observe(&c, NULL); /* the fake cannot observe: nothing happens */
	assert_string_equal(rec.last, "describe");
	assert_int_equal(rec.calls, 9);
	assert_int_equal(d.st, ST_OK);
	assert_true(comm_can_shard(&c));
	comm_free(&c);
	assert_string_equal(rec.last, "fini");
	assert_null(c.ops);
	comm_free(&c); /* twice is safe */
	assert_int_equal(rec.calls, 10);
}

static void test_comm_counts_only_what_started(void **state)
{
	struct comm c = fake();
	struct diag d = {0};
	float buf[4];

	rec.answer = ST_RUNTIME;
	assert_int_equal(comm_allreduce_start(&c, buf, 4, 0, &d), ST_RUNTIME);
	assert_int_equal(comm_inflight(&c), 0);
	rec.answer = ST_OK;
	assert_int_equal(comm_allreduce_start(&c, buf, 4, 0, &d), ST_OK);
	assert_int_equal(comm_inflight(&c), 1);
	rec.answer = ST_RUNTIME; /* a failed wait still ends what was in flight */
	assert_int_equal(comm_wait_all(&c, &d), ST_RUNTIME);
	assert_int_equal(comm_inflight(&c), 0);
}

static void test_comm_refuses_more_than_the_limit_in_flight(void **state)
{
	struct comm c = fake();
	struct diag d = {0};
	const size_t cuts[4] = {0, 1, 2, 3};
	float buf[3];

	for (int i = 0; i < COMM_MAX_INFLIGHT; i++)
		assert_int_equal(comm_allreduce_start(&c, buf, 3, 0, &d), ST_OK);
	rec.calls = 0;
	refused(&d, comm_allreduce_start(&c, buf, 3, 0, &d), "more than 64 collectives in flight");
	d = (struct diag){0};
	refused(&d, comm_reduce_scatter_start(&c, buf, 3, cuts, 0, &d), "more than 64 collectives");
	d = (struct diag){0};
	refused(&d, comm_all_gather_start(&c, buf, 3, cuts, &d), "more than 64 collectives");
	assert_int_equal(comm_inflight(&c), COMM_MAX_INFLIGHT);
	assert_int_equal(comm_wait_all(&c, &d), ST_OK);
	assert_int_equal(comm_allreduce_start(&c, buf, 3, 0, &d), ST_OK);
}

static void test_comm_refuses_a_collective_too_long(void **state)
{
	struct comm c = fake();
	struct diag d = {0};
	static float buf[1001];
	size_t cuts[4] = {0, 500, 1000, 1001};

	refused(&d, comm_allreduce_start(&c, buf, 1001, 0, &d),
		"a collective of 1001 floats is too large");
	d = (struct diag){0};
	refused(&d, comm_reduce_scatter_start(&c, buf, 1001, cuts, 0, &d), "1001 floats is too large");
	d = (struct diag){0};
	refused(&d, comm_all_gather_start(&c, buf, 1001, cuts, &d), "1001 floats is too large");
	cuts[3] = 1000;
	assert_int_equal(comm_allreduce_start(&c, buf, 1000, 0, &d), ST_OK);
	assert_int_equal(comm_all_gather_start(&c, buf, 1000, cuts, &d), ST_OK);
}

static void test_comm_refuses_unknown_flags_and_wire_types(void **state)
{
	struct comm c = fake();
	struct diag d = {0};
	const size_t cuts[4] = {0, 1, 2, 3};
	float buf[3];

	refused(&d, comm_allreduce_start(&c, buf, 3, 4u, &d), "unknown collective flags 0x4");
	d = (struct diag){0};
	refused(&d, comm_reduce_scatter_start(&c, buf, 3, cuts, COMM_LAST | 8u, &d),
		"unknown collective flags 0x9");
	d = (struct diag){0};
	c.wire = (enum comm_wire)7;
	refused(&d, comm_allreduce_start(&c, buf, 3, COMM_WIRE, &d), "unknown wire type 7");
	/* without COMM_WIRE the wire type is not used; COMM_WIRE on a float32 wire is fine */
	assert_int_equal(comm_allreduce_start(&c, buf, 3, COMM_LAST, &d), ST_OK);
	c.wire = COMM_WIRE_F32;
	assert_int_equal(comm_allreduce_start(&c, buf, 3, COMM_WIRE, &d), ST_OK);
	c.wire = COMM_WIRE_BF16;
	assert_int_equal(comm_reduce_scatter_start(&c, buf, 3, cuts, COMM_WIRE | COMM_LAST, &d), ST_OK);
	assert_int_equal(rec.calls, 3);
}

static void test_comm_refuses_bad_cuts(void **state)
{
	static const struct {
		size_t cuts[4];
		const char *want;
	} bad[] = {
		{{1, 2, 3, 10}, "cuts run from 1 to 10, not 0 to 10"},
		{{0, 2, 3, 9}, "cuts run from 0 to 9, not 0 to 10"},
		{{0, 2, 3, 11}, "cuts run from 0 to 11, not 0 to 10"},
		{{0, 5, 4, 10}, "cuts decrease at part 1"},
		{{0, 11, 4, 10}, "cuts decrease at part 1"},
	};
	float buf[10];

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct comm c = fake();
		struct diag d = {0};

		refused(&d, comm_reduce_scatter_start(&c, buf, 10, bad[i].cuts, 0, &d), bad[i].want);
		d = (struct diag){0};
		refused(&d, comm_all_gather_start(&c, buf, 10, bad[i].cuts, &d), bad[i].want);
		assert_int_equal(comm_inflight(&c), 0);
	}
	{
		struct comm c = fake();
		struct diag d = {0};

		refused(&d, comm_all_gather_start(&c, buf, 10, NULL, &d), "without cuts");
	}
}

static void test_comm_refuses_wait_first_beyond_what_is_in_flight(void **state)
{
	struct comm c = fake();
	struct diag d = {0};
	float buf[3];

	assert_int_equal(comm_allreduce_start(&c, buf, 3, 0, &d), ST_OK);
	assert_int_equal(comm_allreduce_start(&c, buf, 3, 0, &d), ST_OK);
	rec.calls = 0;
	refused(&d, comm_wait_first(&c, 3, &d), "wait_first(3) with 2 collectives started");
	d = (struct diag){0};
	refused(&d, comm_wait_first(&c, -1, &d), "wait_first(-1) with 2 collectives started");
	assert_int_equal(comm_wait_first(&c, 2, &d), ST_OK);
	assert_int_equal(rec.k, 2);
}

static void test_comm_refuses_what_the_communicator_lacks(void **state)
{
	struct comm_ops plain = fake_ops;
	struct comm c = fake();
	struct diag d = {0};
	const size_t cuts[4] = {0, 1, 2, 3};
	float buf[3];

	plain.reduce_scatter_start = NULL;
	plain.all_gather_start = NULL;
	plain.wait_first = NULL;
	c.ops = &plain;
	assert_false(comm_can_shard(&c));
	refused(&d, comm_reduce_scatter_start(&c, buf, 3, cuts, 0, &d),
		"the fake communicator has no reduce-scatter");
	d = (struct diag){0};
	refused(&d, comm_all_gather_start(&c, buf, 3, cuts, &d), "the fake communicator has no all-gather");
	d = (struct diag){0};
	refused(&d, comm_wait_first(&c, 0, &d), "the fake communicator cannot wait for some");
}

/* A communicator's table from outside the program (the CUDA module's) is checked entry by
 * entry, the struct walked as its slots: each entry the doors call without looking refuses
 * with a line of its own when NULL; the ones they check first (reduce-scatter, all-gather,
 * wait_first, observe) may be NULL. */
static void test_comm_ops_check_refuses_each_missing_entry(void **state)
{
	char first[sizeof(((struct diag *)0)->msg)] = "";
	struct diag d = {0};
	int refused = 0;

	assert_int_equal(comm_ops_check(&fake_ops, &d), ST_OK);
	for (size_t o = offsetof(struct comm_ops, allreduce_start); o < sizeof fake_ops; o += sizeof(void *)) {
		struct comm_ops one = fake_ops;
		void (*none)(void) = NULL;

		memcpy((char *)&one + o, &none, sizeof none);
		memset(&d, 0, sizeof d);
		if (o == offsetof(struct comm_ops, reduce_scatter_start) ||
		    o == offsetof(struct comm_ops, all_gather_start) ||
		    o == offsetof(struct comm_ops, wait_first) || o == offsetof(struct comm_ops, observe)) {
			assert_int_equal(comm_ops_check(&one, &d), ST_OK);
			continue;
		}
		assert_int_equal(comm_ops_check(&one, &d), ST_RUNTIME);
		assert_non_null(strstr(d.msg, "its entry comm."));
		assert_string_not_equal(d.msg, first); /* each names its own (in order: the last) */
		snprintf(first, sizeof first, "%s", d.msg);
		refused++;
	}
	assert_int_equal(refused, 6);
	memset(&d, 0, sizeof d);
	assert_int_equal(comm_ops_check(NULL, &d), ST_RUNTIME);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_comm_forwards_good_calls_unchanged),
		cmocka_unit_test(test_comm_counts_only_what_started),
		cmocka_unit_test(test_comm_refuses_more_than_the_limit_in_flight),
		cmocka_unit_test(test_comm_refuses_a_collective_too_long),
		cmocka_unit_test(test_comm_refuses_unknown_flags_and_wire_types),
		cmocka_unit_test(test_comm_refuses_bad_cuts),
		cmocka_unit_test(test_comm_refuses_wait_first_beyond_what_is_in_flight),
		cmocka_unit_test(test_comm_refuses_what_the_communicator_lacks),
		cmocka_unit_test(test_comm_ops_check_refuses_each_missing_entry),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
