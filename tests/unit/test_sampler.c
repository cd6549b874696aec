/* test_sampler.c - DistributedSampler index lists against PyTorch's outputs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "core/rng.h"
#include "data/sampler.h"

static void test_mt19937_matches_reference_stream(void **state)
{
	/* std::mt19937 seeded with 5489: the 10000th output is 4123659995 (C++11 [rand.predef]). */
	struct mt19937 mt;
	uint32_t v = 0;

	mt19937_seed(&mt, 5489);
	for (int i = 0; i < 10000; i++)
		v = mt19937_next(&mt);
	assert_int_equal(v, 4123659995u);
}

static void test_randperm_matches_torch_seed0_n10(void **state)
{
	/* torch.randperm(10, generator=torch.Generator().manual_seed(0)): the published value */
	const uint32_t want[10] = {4, 1, 7, 5, 3, 9, 0, 8, 6, 2};
	uint32_t got[10];

	sampler_randperm(got, 10, 0);
	assert_memory_equal(got, want, sizeof want);
}

static void test_randperm_matches_torch_for_other_seeds(void **state)
{
	/* torch 1.13: torch.randperm(n, generator=torch.Generator().manual_seed(s)) */
	const uint32_t s1[10] = {5, 6, 1, 2, 0, 8, 9, 3, 7, 4};
	const uint32_t s42[17] = {13, 4, 3, 15, 8, 16, 9, 11, 12, 10, 6, 2, 1, 7, 14, 0, 5};
	const uint32_t s7[12] = {615, 284, 599, 580, 347, 92, 383, 891, 452, 41, 998, 773};
	static uint32_t got[1000];

	sampler_randperm(got, 10, 1);
	assert_memory_equal(got, s1, sizeof s1);
	sampler_randperm(got, 17, 42);
	assert_memory_equal(got, s42, sizeof s42);
	sampler_randperm(got, 1000, 7);
	assert_memory_equal(got, s7, sizeof s7);
}

static void test_sampler_matches_torch_distributed_sampler(void **state)
{
	/* list(DistributedSampler(range(10), num_replicas=3, rank=r, shuffle=True, seed=0,
	 * drop_last=D)) after set_epoch(1), from torch 1.13. */
	const uint32_t pad[3][4] = {{5, 2, 9, 4}, {6, 0, 3, 5}, {1, 8, 7, 6}};
	const uint32_t drop[3][3] = {{5, 2, 9}, {6, 0, 3}, {1, 8, 7}};
	struct sampler s;
	struct diag d = {0};

	for (int r = 0; r < 3; r++) {
		assert_int_equal(sampler_init(&s, 10, 3, r, 1, 0, 0, &d), ST_OK);
		sampler_set_epoch(&s, 1);
		assert_int_equal(s.num_samples, 4);
		assert_memory_equal(s.indices, pad[r], sizeof pad[r]);
		sampler_free(&s);
		assert_int_equal(sampler_init(&s, 10, 3, r, 1, 1, 0, &d), ST_OK);
		sampler_set_epoch(&s, 1);
		assert_int_equal(s.num_samples, 3);
		assert_memory_equal(s.indices, drop[r], sizeof drop[r]);
		sampler_free(&s);
	}
}

static void test_randperm_is_a_permutation(void **state)
{
	uint32_t p[1000];
	int seen[1000] = {0};

	sampler_randperm(p, 1000, 123);
	for (int i = 0; i < 1000; i++) {
		assert_true(p[i] < 1000);
		seen[p[i]]++;
	}
	for (int i = 0; i < 1000; i++)
		assert_int_equal(seen[i], 1);
}

static void test_sampler_without_shuffle_strides_over_ranks(void **state)
{
	struct sampler s;
	struct diag d = {0};
	/* n=10, W=4: padded to 12 by wrapping (0,1); rank r takes r, r+4, r+8. */
	const uint32_t want[4][3] = {{0, 4, 8}, {1, 5, 9}, {2, 6, 0}, {3, 7, 1}};

	for (int r = 0; r < 4; r++) {
		assert_int_equal(sampler_init(&s, 10, 4, r, 0, 0, 0, &d), ST_OK);
		sampler_set_epoch(&s, 0);
		assert_int_equal(s.num_samples, 3);
		assert_memory_equal(s.indices, want[r], sizeof want[r]);
		sampler_free(&s);
	}
}

static void test_sampler_pads_by_wrapping_the_shuffled_list(void **state)
{
	struct sampler s;
	struct diag d = {0};
	uint32_t perm[10];

	/* n=10, W=3, epoch 1, seed 0: list = randperm(10, seed 1) + its first 2 entries. */
	sampler_randperm(perm, 10, 1);
	for (int r = 0; r < 3; r++) {
		assert_int_equal(sampler_init(&s, 10, 3, r, 1, 0, 0, &d), ST_OK);
		sampler_set_epoch(&s, 1);
		assert_int_equal(s.num_samples, 4);
		for (size_t k = 0; k < 4; k++)
			assert_int_equal(s.indices[k], perm[(k * 3 + (size_t)r) % 10]);
		sampler_free(&s);
	}
}

static void test_sampler_drop_last_drops_the_tail(void **state)
{
	struct sampler s;
	struct diag d = {0};
	uint32_t perm[10];

	sampler_randperm(perm, 10, 0);
	assert_int_equal(sampler_init(&s, 10, 3, 2, 1, 1, 0, &d), ST_OK);
	sampler_set_epoch(&s, 0);
	assert_int_equal(s.num_samples, 3); /* 9 of the 10 used */
	assert_int_equal(s.indices[0], perm[2]);
	assert_int_equal(s.indices[1], perm[5]);
	assert_int_equal(s.indices[2], perm[8]);
	sampler_free(&s);
}

static void test_sampler_ranks_cover_the_data_once_when_divisible(void **state)
{
	struct sampler s;
	struct diag d = {0};
	int seen[24] = {0};

	for (int r = 0; r < 4; r++) {
		assert_int_equal(sampler_init(&s, 24, 4, r, 1, 0, 5, &d), ST_OK);
		sampler_set_epoch(&s, 3);
		for (size_t k = 0; k < s.num_samples; k++)
			seen[s.indices[k]]++;
		sampler_free(&s);
	}
	for (int i = 0; i < 24; i++)
		assert_int_equal(seen[i], 1);
}

static void test_sampler_epoch_changes_the_order(void **state)
{
	struct sampler s;
	struct diag d = {0};
	uint32_t e0[50];

	assert_int_equal(sampler_init(&s, 50, 1, 0, 1, 0, 0, &d), ST_OK);
	sampler_set_epoch(&s, 0);
	memcpy(e0, s.indices, sizeof e0);
	sampler_set_epoch(&s, 1);
	assert_memory_not_equal(e0, s.indices, sizeof e0);
	sampler_set_epoch(&s, 0);
	assert_memory_equal(e0, s.indices, sizeof e0);
	sampler_free(&s);
	sampler_free(&s); /* safe twice */
}

static void test_sampler_drop_last_with_fewer_samples_than_ranks_is_refused(void **state)
{
	struct sampler s;
	struct diag d = {0};

	assert_int_equal(sampler_init(&s, 3, 4, 0, 1, 1, 0, &d), ST_USAGE);
	assert_non_null(strstr(d.msg, "--drop-last"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mt19937_matches_reference_stream),
		cmocka_unit_test(test_randperm_matches_torch_seed0_n10),
		cmocka_unit_test(test_randperm_matches_torch_for_other_seeds),
		cmocka_unit_test(test_sampler_matches_torch_distributed_sampler),
		cmocka_unit_test(test_randperm_is_a_permutation),
		cmocka_unit_test(test_sampler_without_shuffle_strides_over_ranks),
		cmocka_unit_test(test_sampler_pads_by_wrapping_the_shuffled_list),
		cmocka_unit_test(test_sampler_drop_last_drops_the_tail),
		cmocka_unit_test(test_sampler_ranks_cover_the_data_once_when_divisible),
		cmocka_unit_test(test_sampler_epoch_changes_the_order),
		cmocka_unit_test(test_sampler_drop_last_with_fewer_samples_than_ranks_is_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
