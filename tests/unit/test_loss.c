/*
 * test_loss.c - the losses loss_apply queues (model/loss.h): the CPU backend's MSE
 * and cross-entropy kernels against hand-computed values, scaled and accumulated.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/backend.h"

static const struct backend_ops *ops = &backend_cpu_ops;

static void test_mse_matches_hand_computed_values(void **state)
{
	/* y - t = {1, -2, 0, 3}: MSE = 14/4 = 3.5; grad = 2 (y - t) / 4. */
	const float y[4] = {2, 0, 1, 4}, t[4] = {1, 2, 1, 1};
	float dy[4], loss = 100.0f;

	ops->mse(NULL, dy, &loss, y, t, 2, 2, 1.0f, 1.0f, 0);
	assert_float_equal(loss, 3.5, 1e-6);
	assert_float_equal(dy[0], 0.5, 1e-7);
	assert_float_equal(dy[1], -1.0, 1e-7);
	assert_float_equal(dy[2], 0.0, 1e-7);
	assert_float_equal(dy[3], 1.5, 1e-7);
	/* scaled and accumulated: loss += 0.25 * 3.5 */
	ops->mse(NULL, dy, &loss, y, t, 2, 2, 0.25f, 0.25f, 1);
	assert_float_equal(loss, 3.5 + 0.875, 1e-6);
	assert_float_equal(dy[3], 0.375, 1e-7);
	/* the seed's scale apart from the value's (bf16 takes the mean after its backward) */
	ops->mse(NULL, dy, &loss, y, t, 2, 2, 0.25f, 1.0f, 0);
	assert_float_equal(loss, 0.875, 1e-6);
	assert_float_equal(dy[3], 1.5, 1e-7);
}

/* Two rows of 3 logits: [1, 2, 3] with label 2 (right) and [0, 0, 0] with label 1 (wrong:
 * argmax takes the first of equal logits, 0). scale 0.5:
 *   row 1: lse = 3 + log(1 + e^-1 + e^-2) = 3.40760596; loss 0.40760596
 *   row 2: lse = log 3 = 1.09861229; loss 1.09861229
 *   loss = 0.5 * (0.40760596 + 1.09861229) / 2 = 0.37655456; accuracy 0.5 * 1/2 = 0.25
 *   dy = 0.5 / 2 * (softmax - onehot): softmax row 1 = [0.09003057, 0.24472847, 0.66524096],
 *   row 2 = [1/3, 1/3, 1/3] (torch.nn.functional.cross_entropy gives the same). */
static void test_cross_entropy_matches_hand_computed_values(void **state)
{
	const float z[6] = {1, 2, 3, 0, 0, 0}, labels[2] = {2, 1};
	const double want[6] = {0.25 * 0.09003057, 0.25 * 0.24472847, 0.25 * (0.66524096 - 1),
				0.25 / 3, 0.25 * (1.0 / 3 - 1), 0.25 / 3};
	float dy[6], out[2] = {7, 7};

	ops->cross_entropy(NULL, dy, out, z, labels, 2, 3, 0.5f, 0.5f, 0);
	assert_float_equal(out[0], 0.37655456, 1e-7);
	assert_float_equal(out[1], 0.25, 1e-7);
	for (int i = 0; i < 6; i++)
		assert_float_equal(dy[i], want[i], 1e-7);
	ops->cross_entropy(NULL, dy, out, z, labels, 2, 3, 0.5f, 0.5f, 1); /* accumulates */
	assert_float_equal(out[0], 2 * 0.37655456, 2e-7);
	assert_float_equal(out[1], 0.5, 1e-7);
	ops->cross_entropy(NULL, dy, out, z, labels, 2, 3, 0.5f, 1.0f, 0); /* the seed unscaled */
	assert_float_equal(out[0], 0.37655456, 1e-7);
	for (int i = 0; i < 6; i++)
		assert_float_equal(dy[i], 2 * want[i], 2e-7);
}

/* One class, as torch.nn.functional.cross_entropy takes it: the softmax of one logit is 1,
 * so every row's loss is exactly 0 and so is its gradient, whatever the logit, and every
 * row is right (torch 1.13: loss 0.0, grad [0.0, ...]). */
static void test_cross_entropy_of_one_class_is_zero_with_zero_gradients(void **state)
{
	const float z[3] = {-3.5f, 0.0f, 1e30f}, labels[3] = {0, 0, 0};
	float dy[3] = {7, 7, 7}, out[2] = {7, 7};

	ops->cross_entropy(NULL, dy, out, z, labels, 3, 1, 1.0f, 1.0f, 0);
	assert_true(out[0] == 0.0f);
	assert_true(out[1] == 1.0f);
	for (int i = 0; i < 3; i++)
		assert_true(dy[i] == 0.0f);
}

/* A large logit does not overflow: the max is taken out before exp. */
static void test_cross_entropy_is_stable_for_large_logits(void **state)
{
	const float z[2] = {1000, 0}, labels[1] = {1};
	float dy[2], out[2];

	ops->cross_entropy(NULL, dy, out, z, labels, 1, 2, 1.0f, 1.0f, 0);
	assert_float_equal(out[0], 1000.0, 1e-3);
	assert_float_equal(out[1], 0.0, 0);
	assert_float_equal(dy[0], 1.0, 1e-7);
	assert_float_equal(dy[1], -1.0, 1e-7);
}

/* A label outside [0, classes) (a file rewritten under the run), or not a number: the loss
 * is NaN, so the trainer looks for the row, and nothing past the row's logits is read
 * (the row after holds a logit that would give a finite loss). */
static void test_cross_entropy_of_a_label_out_of_range_is_nan(void **state)
{
	static const float bad[] = {2.0f, -1.0f, 1e9f, NAN};
	const float z[4] = {0.5f, -0.5f, 3.0f, 4.0f};
	float dy[4], out[2];

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		const float labels[2] = {bad[i], 0};

		ops->cross_entropy(NULL, dy, out, z, labels, 1, 2, 1.0f, 1.0f, 0);
		assert_true(isnan(out[0]));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mse_matches_hand_computed_values),
		cmocka_unit_test(test_cross_entropy_matches_hand_computed_values),
		cmocka_unit_test(test_cross_entropy_is_stable_for_large_logits),
		cmocka_unit_test(test_cross_entropy_of_one_class_is_zero_with_zero_gradients),
		cmocka_unit_test(test_cross_entropy_of_a_label_out_of_range_is_nan),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
