/* test_schedule.c - the lr multipliers against values worked out by hand from
 * transformers' get_*_schedule_with_warmup (checked with Python's math module). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>

#include "model/schedule.h"

#define NEAR(a, b) assert_true(fabs((a) - (b)) < 1e-15)

static void test_schedule_warmup_is_k_over_warmup_from_zero(void **state)
{
	for (int kind = SCHED_CONSTANT; kind <= SCHED_COSINE; kind++) {
		NEAR(schedule_multiplier(kind, 0, 4, 20), 0.0); /* the first step has lr 0 */
		NEAR(schedule_multiplier(kind, 1, 4, 20), 0.25);
		NEAR(schedule_multiplier(kind, 3, 4, 20), 0.75);
		NEAR(schedule_multiplier(kind, 4, 4, 20), 1.0); /* the peak, in every schedule */
	}
}

static void test_schedule_constant_stays_at_one(void **state)
{
	NEAR(schedule_multiplier(SCHED_CONSTANT, 0, 0, 10), 1.0);
	NEAR(schedule_multiplier(SCHED_CONSTANT, 9, 0, 10), 1.0);
	NEAR(schedule_multiplier(SCHED_CONSTANT, 500, 2, 10), 1.0);
}

/* linear, warmup 4, total 20: (20 - k) / 16 after the warmup, floored at 0. */
static void test_schedule_linear_falls_to_zero_at_total(void **state)
{
	NEAR(schedule_multiplier(SCHED_LINEAR, 5, 4, 20), 15.0 / 16.0);
	NEAR(schedule_multiplier(SCHED_LINEAR, 12, 4, 20), 0.5);
	NEAR(schedule_multiplier(SCHED_LINEAR, 19, 4, 20), 1.0 / 16.0);
	NEAR(schedule_multiplier(SCHED_LINEAR, 20, 4, 20), 0.0);
	NEAR(schedule_multiplier(SCHED_LINEAR, 25, 4, 20), 0.0);
	/* no warmup: (10 - k) / 10 */
	NEAR(schedule_multiplier(SCHED_LINEAR, 0, 0, 10), 1.0);
	NEAR(schedule_multiplier(SCHED_LINEAR, 3, 0, 10), 0.7);
}

/* cosine, warmup 2, total 10: 0.5 (1 + cos(pi (k - 2) / 8)). */
static void test_schedule_cosine_is_half_a_cosine(void **state)
{
	NEAR(schedule_multiplier(SCHED_COSINE, 2, 2, 10), 1.0);
	NEAR(schedule_multiplier(SCHED_COSINE, 4, 2, 10), 0.5 * (1.0 + sqrt(0.5))); /* cos(pi/4) */
	NEAR(schedule_multiplier(SCHED_COSINE, 6, 2, 10), 0.5);                     /* cos(pi/2) */
	NEAR(schedule_multiplier(SCHED_COSINE, 8, 2, 10), 0.5 * (1.0 - sqrt(0.5)));
	NEAR(schedule_multiplier(SCHED_COSINE, 10, 2, 10), 0.0);
	/* past the end the cosine comes back up; transformers floors only at 0, so it does too */
	NEAR(schedule_multiplier(SCHED_COSINE, 12, 2, 10), 0.5 * (1.0 - sqrt(0.5)));
}

/* A warmup as long as the run, or a run of one step: no division by zero. */
static void test_schedule_degenerate_lengths(void **state)
{
	NEAR(schedule_multiplier(SCHED_LINEAR, 5, 5, 5), 0.0);
	NEAR(schedule_multiplier(SCHED_COSINE, 5, 5, 5), 1.0);
	NEAR(schedule_multiplier(SCHED_LINEAR, 0, 0, 1), 1.0);
	NEAR(schedule_multiplier(SCHED_COSINE, 0, 0, 1), 1.0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_schedule_warmup_is_k_over_warmup_from_zero),
		cmocka_unit_test(test_schedule_constant_stays_at_one),
		cmocka_unit_test(test_schedule_linear_falls_to_zero_at_total),
		cmocka_unit_test(test_schedule_cosine_is_half_a_cosine),
		cmocka_unit_test(test_schedule_degenerate_lengths),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
