/* test_trainer.c - the step count and the bookkeeping after each optimizer step. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "train/trainer.h"

static void test_total_steps_fresh_run_rounds_each_epoch_up(void **state)
{
	struct train_ctl ctl = {0};

	/* 10 micro-batches in groups of 3: 4 steps per epoch (the last group is short). */
	assert_int_equal(trainer_total_steps(&ctl, 10, 3, 2, 0), 8);
	assert_int_equal(trainer_total_steps(&ctl, 10, 1, 5, 0), 50);
	assert_int_equal(trainer_total_steps(&ctl, 1, 4, 3, 0), 3);
}

static void test_total_steps_is_capped_by_max_steps(void **state)
{
	struct train_ctl ctl = {0};

	assert_int_equal(trainer_total_steps(&ctl, 10, 3, 2, 5), 5);
	assert_int_equal(trainer_total_steps(&ctl, 10, 3, 2, 100), 8);
}

static void test_total_steps_of_a_resumed_run_match_the_straight_run(void **state)
{
	/* After 2 steps of epoch 0 (micro-batches 0-5), next micro-batch 6. */
	struct train_ctl mid = {.start_step = 2, .start_epoch = 0, .start_mb = 6};
	/* After a whole epoch, the position written at its end (next_mb == nmicro). */
	struct train_ctl end = {.start_step = 4, .start_epoch = 0, .start_mb = 10};
	/* At the start of epoch 1. */
	struct train_ctl next = {.start_step = 4, .start_epoch = 1, .start_mb = 0};
	/* Past the last epoch: nothing left. */
	struct train_ctl done = {.start_step = 8, .start_epoch = 2, .start_mb = 0};

	assert_int_equal(trainer_total_steps(&mid, 10, 3, 2, 0), 8);
	assert_int_equal(trainer_total_steps(&end, 10, 3, 2, 0), 8);
	assert_int_equal(trainer_total_steps(&next, 10, 3, 2, 0), 8);
	assert_int_equal(trainer_total_steps(&done, 10, 3, 2, 0), 8);
}

struct ckpt_log {
	int calls;
	long step[8], epoch[8], next_mb[8];
};

static enum status record_checkpoint(void *arg, long step, long epoch, long next_mb, long schedule_steps,
				     struct diag *d)
{
	(void)schedule_steps;
	struct ckpt_log *log = arg;

	log->step[log->calls] = step;
	log->epoch[log->calls] = epoch;
	log->next_mb[log->calls] = next_mb;
	log->calls++;
	return ST_OK;
}

static void test_after_step_counts_and_checkpoints_when_due(void **state)
{
	struct ckpt_log log = {0};
	struct train_ctl ctl = {.every = 2, .checkpoint = record_checkpoint, .arg = &log};
	struct train_config tc = {.epochs = 2, .log_every = 0};
	struct train_result res = {0};
	struct step_clock clk = {0};
	struct report r;
	struct diag d = {0};
	long step = 0;

	report_init(&r, 0, 1, 0);
	/* 3 micro-batches per epoch, one step each; 6 steps in all. */
	for (long k = 0; k < 6; k++) {
		struct batch b = {.epoch = k / 3, .mb = k % 3};

		assert_int_equal(trainer_after_step(&(struct train_loop){&ctl, &tc, &res, &r, &clk, 6, 3, NULL, NULL}, &step,
						    &(struct step_end){&b, (float)(6 - k), 0.0f, 0.1, 0.0, 0}, &d),
				 ST_OK);
	}
	assert_int_equal(step, 6);
	assert_float_equal(res.first_loss, 6.0, 0);
	assert_float_equal(res.final_loss, 1.0, 0);
	/* Every 2 steps (the last one is both due and final): after steps 2, 4 and 6. */
	assert_int_equal(log.calls, 3);
	assert_int_equal(log.step[0], 2);
	assert_int_equal(log.epoch[0], 0);
	assert_int_equal(log.next_mb[0], 2);
	/* Step 3 ended epoch 0: the position is the start of the next epoch. */
	assert_int_equal(log.step[1], 4);
	assert_int_equal(log.epoch[1], 1);
	assert_int_equal(log.next_mb[1], 1);
	assert_int_equal(log.step[2], 6);
	assert_int_equal(log.epoch[2], 2);
	assert_int_equal(log.next_mb[2], 0);
	report_free(&r);
}

static void test_after_step_stops_with_a_checkpoint_and_refuses_nan(void **state)
{
	struct ckpt_log log = {0};
	struct train_ctl ctl = {.checkpoint = record_checkpoint, .arg = &log};
	struct train_config tc = {.epochs = 1};
	struct train_result res = {0};
	struct step_clock clk = {0};
	struct batch b = {.epoch = 0, .mb = 0};
	struct report r;
	struct diag d = {0};
	long step = 0;

	report_init(&r, 0, 1, 0);
	const struct train_loop lp = {&ctl, &tc, &res, &r, &clk, 10, 10, NULL, NULL};

	assert_int_equal(trainer_after_step(&lp, &step, &(struct step_end){&b, 1.0f, 0.0f, 0.1, 0.0, 1}, &d),
			 ST_INTERRUPTED);
	assert_int_equal(step, 1);
	assert_int_equal(log.calls, 1);
	b.mb = 1;
	assert_int_equal(trainer_after_step(&lp, &step, &(struct step_end){&b, NAN, 0.0f, 0.1, 0.0, 0}, &d),
			 ST_RUNTIME);
	assert_int_equal(step, 1); /* a diverged step is not counted */
	assert_non_null(strstr(d.msg, "training diverged"));
	report_free(&r);
}

/* trainer_after_step's eval hook: records the steps and epochs it is called at. */
struct eval_log {
	int calls;
	long step[16], epoch[16];
};

static enum status record_eval(void *arg, long step, long epoch)
{
	struct eval_log *e = arg;

	e->step[e->calls] = step;
	e->epoch[e->calls++] = epoch;
	return ST_OK;
}

/* With a validation set: after every eval_every steps, at each epoch's end (here 4 steps
 * an epoch) and at the last step (10, cut short by max-steps), once each. */
static void test_after_step_evaluates_every_n_steps_at_epoch_ends_and_at_the_end(void **state)
{
	struct dataset val = {.n = 5};
	struct train_ctl ctl = {.val = &val};
	struct train_config tc = {.epochs = 3, .eval_every = 3};
	struct train_result res = {0};
	struct step_clock clk = {0};
	struct eval_log ev = {0};
	struct report r;
	struct diag d = {0};
	const long want[] = {3, 4, 6, 8, 9, 10};
	long step = 0;

	report_init(&r, 0, 1, 0);
	for (long k = 0; k < 10; k++) {
		struct batch b = {.epoch = k / 4, .mb = k % 4};

		assert_int_equal(trainer_after_step(&(struct train_loop){&ctl, &tc, &res, &r, &clk, 10, 4, record_eval, &ev},
						    &step, &(struct step_end){&b, 1.0f, 0.5f, 0.1, 0.0, 0}, &d),
				 ST_OK);
	}
	assert_int_equal(ev.calls, 6);
	for (int i = 0; i < 6; i++)
		assert_int_equal(ev.step[i], want[i]);
	assert_int_equal(ev.epoch[1], 0); /* step 4 ended epoch 0 (0-based) */
	assert_int_equal(ev.epoch[5], 2);
	report_free(&r);
}

/* The order of the replica checks and checkpoints after each step: "c4" a check after
 * step 4, "k3" a checkpoint after step 3. A check fails after step fail_at. */
struct order_log {
	char seq[128];
	long fail_at;
};

static enum status order_check(void *arg, long step)
{
	struct order_log *o = arg;
	size_t n = strlen(o->seq);

	snprintf(o->seq + n, sizeof o->seq - n, "c%ld ", step);
	return step == o->fail_at ? ST_RUNTIME : ST_OK;
}

static enum status order_checkpoint(void *arg, long step, long epoch, long next_mb, long schedule_steps,
				    struct diag *d)
{
	struct order_log *o = arg;
	size_t n = strlen(o->seq);

	snprintf(o->seq + n, sizeof o->seq - n, "k%ld ", step);
	return ST_OK;
}

/* --check-replicas=4 in a 10-step run that checkpoints every 3: a check every 4 steps, one
 * before each checkpoint (3, 6, 9 and the last, 10), each step with a check reading the
 * weights at once; a check that fails (step 6) stops the work before that step's
 * checkpoint. */
static void test_after_step_checks_replicas_every_n_and_before_each_checkpoint(void **state)
{
	struct order_log o = {.fail_at = -1};
	struct train_ctl ctl = {.every = 3, .checkpoint = order_checkpoint, .arg = &o};
	struct train_config tc = {.epochs = 1, .check_replicas = 4};
	struct train_result res = {0};
	struct step_clock clk = {0};
	struct report r;
	struct diag d = {0};
	long step = 0;

	report_init(&r, 0, 1, 0);
	const struct train_loop lp = {&ctl, &tc, &res, &r, &clk, 10, 10, NULL, &o, NULL, NULL, NULL, order_check};

	for (long k = 0; k < 10; k++) {
		struct batch b = {.epoch = 0, .mb = k};

		assert_int_equal(trainer_step_reads_weights(&lp, k + 1, &b), (k + 1) % 3 == 0 || (k + 1) % 4 == 0 || k == 9);
		assert_int_equal(trainer_after_step(&lp, &step, &(struct step_end){&b, 1.0f, 0.0f, 0.1, 0.0, 0}, &d),
				 ST_OK);
	}
	assert_string_equal(o.seq, "c3 k3 c4 c6 k6 c8 c9 k9 c10 k10 ");
	o = (struct order_log){.fail_at = 6};
	step = 0;
	for (long k = 0; k < 6; k++) {
		struct batch b = {.epoch = 0, .mb = k};

		assert_int_equal(trainer_after_step(&lp, &step, &(struct step_end){&b, 1.0f, 0.0f, 0.1, 0.0, 0}, &d),
				 k < 5 ? ST_OK : ST_RUNTIME);
	}
	assert_string_equal(o.seq, "c3 k3 c4 c6 ");
	report_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_total_steps_fresh_run_rounds_each_epoch_up),
		cmocka_unit_test(test_total_steps_is_capped_by_max_steps),
		cmocka_unit_test(test_total_steps_of_a_resumed_run_match_the_straight_run),
		cmocka_unit_test(test_after_step_counts_and_checkpoints_when_due),
		cmocka_unit_test(test_after_step_stops_with_a_checkpoint_and_refuses_nan),
		cmocka_unit_test(test_after_step_evaluates_every_n_steps_at_epoch_ends_and_at_the_end),
		cmocka_unit_test(test_after_step_checks_replicas_every_n_and_before_each_checkpoint),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
