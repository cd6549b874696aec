/* test_gpu.c - the host side of the GPU path: finding GPUs without CUDA, placing ranks,
 * spotting ranks that would share a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/gpu.h"
#include "run/placement.h"

static char dir[64];

/* A fake /proc/driver/nvidia/gpus with four GPUs. */
static int make_proc(void **state)
{
	char p[128];

	strcpy(dir, "/tmp/test_gpu.XXXXXX");
	assert_non_null(mkdtemp(dir));
	for (int i = 0; i < 4; i++) {
		snprintf(p, sizeof p, "%s/0000:0%d:00.0", dir, i);
		assert_int_equal(mkdir(p, 0755), 0);
	}
	return 0;
}

static int remove_proc(void **state)
{
	char p[128];

	for (int i = 0; i < 4; i++) {
		snprintf(p, sizeof p, "%s/0000:0%d:00.0", dir, i);
		rmdir(p);
	}
	rmdir(dir);
	return 0;
}

static void test_visible_count_follows_cuda_visible_devices(void **state)
{
	assert_int_equal(gpu_visible_count(dir, NULL), 4);
	assert_int_equal(gpu_visible_count(dir, ""), 0);
	assert_int_equal(gpu_visible_count(dir, "-1"), 0);
	assert_int_equal(gpu_visible_count(dir, "none"), 0);
	assert_int_equal(gpu_visible_count(dir, "2"), 1);
	assert_int_equal(gpu_visible_count(dir, "0,2"), 2);
	assert_int_equal(gpu_visible_count(dir, "3,2,1,0"), 4);
	/* The runtime stops at the first invalid entry. */
	assert_int_equal(gpu_visible_count(dir, "1,7,2"), 1);
	assert_int_equal(gpu_visible_count(dir, "GPU-8e3b6c1a-0000-0000-0000-000000000000"), 1);
	assert_int_equal(gpu_visible_count(dir, "0,1,2,3,0,1"), 4);
}

static void test_no_driver_means_no_gpu(void **state)
{
	assert_int_equal(gpu_visible_count("/nonexistent/driver/nvidia/gpus", NULL), 0);
	assert_int_equal(gpu_visible_count("/nonexistent/driver/nvidia/gpus", "0,1"), 0);
}

static void test_ranks_take_gpus_round_robin(void **state)
{
	assert_int_equal(placement_gpu_for(0, 4), 0);
	assert_int_equal(placement_gpu_for(3, 4), 3);
	assert_int_equal(placement_gpu_for(5, 4), 1);
	assert_int_equal(placement_gpu_for(1, 1), 0);
	assert_int_equal(placement_gpu_for(2, 0), 0);
}

static void test_shared_gpu_is_found(void **state)
{
	unsigned char u[4][GPU_UUID_BYTES];
	int a = -1, b = -1;

	memset(u, 0, sizeof u);
	for (int i = 0; i < 4; i++)
		u[i][0] = (unsigned char)(i + 1);
	assert_int_equal(gpu_find_duplicate((const unsigned char (*)[GPU_UUID_BYTES])u, 4, &a, &b), 0);
	u[3][0] = 2; /* rank 3 on rank 1's GPU */
	assert_int_equal(gpu_find_duplicate((const unsigned char (*)[GPU_UUID_BYTES])u, 4, &a, &b), 1);
	assert_int_equal(a, 1);
	assert_int_equal(b, 3);
}

static void test_missing_module_is_a_clear_error(void **state)
{
	struct gpu g;
	struct diag d = {0};

	setenv("DDPTRAIN_CUDA_MODULE", "/nonexistent/ddptrain-cuda.so", 1);
	assert_int_equal(gpu_load(&g, &d), ST_RUNTIME);
	assert_non_null(strstr(d.msg, "cannot load the CUDA module"));
	assert_non_null(strstr(d.msg, "/nonexistent/ddptrain-cuda.so"));
	unsetenv("DDPTRAIN_CUDA_MODULE");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_visible_count_follows_cuda_visible_devices, make_proc, remove_proc),
		cmocka_unit_test(test_no_driver_means_no_gpu),
		cmocka_unit_test(test_ranks_take_gpus_round_robin),
		cmocka_unit_test(test_shared_gpu_is_found),
		cmocka_unit_test(test_missing_module_is_a_clear_error),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
