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

/* Stands in for every entry: the check never calls one. */
static void entry_stub(void)
{
}

/* Set every pointer of table from byte from to byte to (one past the struct) to the stub:
 * the struct walked as the slots it is, not as a list of its members, so that a member
 * the check's rows miss is found. */
static void fill(void *table, size_t from, size_t to)
{
	void (*f)(void) = entry_stub;

	for (size_t o = from; o < to; o += sizeof f)
		memcpy((char *)table + o, &f, sizeof f);
}

static void clear(void *table, size_t off)
{
	void (*f)(void) = NULL;

	memcpy((char *)table + off, &f, sizeof f);
}

/* A module with every entry set passes; with any one of them NULL it is refused with a
 * message of its own, but for the optional entries that go alone (backend.h) -- host_poll,
 * set_progress, trace_dev -- and a group's entry refuses while the rest of it is set. */
static void test_module_check_refuses_each_missing_entry(void **state)
{
	enum { SLOTS = (sizeof(struct gpu_module) + sizeof(struct backend_ops)) / sizeof(void *) };
	static char msgs[SLOTS][sizeof(((struct diag *)0)->msg)];
	struct gpu_module m;
	struct backend_ops be;
	struct diag d = {0};
	int nmsg = 0;

	memset(&m, 0, sizeof m);
	memset(&be, 0, sizeof be);
	m.abi = GPU_MODULE_ABI;
	fill(&m, offsetof(struct gpu_module, probe), sizeof m);
	fill(&be, offsetof(struct backend_ops, init), sizeof be);
	m.backend = &be;
	assert_int_equal(gpu_module_check(&m, &d), ST_OK);
	for (size_t o = offsetof(struct gpu_module, probe); o < sizeof m; o += sizeof(void *)) {
		struct gpu_module one = m;

		clear(&one, o);
		memset(&d, 0, sizeof d);
		assert_int_equal(gpu_module_check(&one, &d), ST_RUNTIME);
		assert_non_null(strstr(d.msg, "its entry "));
		snprintf(msgs[nmsg++], sizeof msgs[0], "%s", d.msg);
	}
	for (size_t o = offsetof(struct backend_ops, init); o < sizeof be; o += sizeof(void *)) {
		struct backend_ops one = be;

		m.backend = &one;
		clear(&one, o);
		memset(&d, 0, sizeof d);
		if (o == offsetof(struct backend_ops, host_poll) || o == offsetof(struct backend_ops, set_progress) ||
		    o == offsetof(struct backend_ops, trace_dev)) {
			assert_int_equal(gpu_module_check(&m, &d), ST_OK);
			continue;
		}
		assert_int_equal(gpu_module_check(&m, &d), ST_RUNTIME);
		assert_non_null(strstr(d.msg, "its entry backend."));
		snprintf(msgs[nmsg++], sizeof msgs[0], "%s", d.msg);
	}
	/* each names its own entry */
	for (int i = 0; i < nmsg; i++)
		for (int j = i + 1; j < nmsg; j++)
			if (strcmp(msgs[i], msgs[j]) == 0)
				fail_msg("two entries, one message: %s", msgs[i]);
}

/* The optional groups may be absent whole: the CPU backend has no graphs, marks, timers or
 * device clock, and a module with its table passes. A NULL module, or another ABI's, is
 * refused before its tables are read. */
static void test_module_check_takes_absent_groups_and_refuses_no_module(void **state)
{
	struct gpu_module m;
	struct diag d = {0};

	memset(&m, 0, sizeof m);
	m.abi = GPU_MODULE_ABI;
	fill(&m, offsetof(struct gpu_module, probe), sizeof m);
	m.backend = &backend_cpu_ops;
	assert_int_equal(gpu_module_check(&m, &d), ST_OK);
	assert_int_equal(gpu_module_check(NULL, &d), ST_RUNTIME);
	assert_string_equal(d.msg, "ddptrain_gpu_module() returned NULL");
	m.abi = GPU_MODULE_ABI - 1;
	m.backend = NULL;
	memset(&d, 0, sizeof d);
	assert_int_equal(gpu_module_check(&m, &d), ST_RUNTIME);
	assert_non_null(strstr(d.msg, "not a ddptrain"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_visible_count_follows_cuda_visible_devices, make_proc, remove_proc),
		cmocka_unit_test(test_no_driver_means_no_gpu),
		cmocka_unit_test(test_ranks_take_gpus_round_robin),
		cmocka_unit_test(test_shared_gpu_is_found),
		cmocka_unit_test(test_missing_module_is_a_clear_error),
		cmocka_unit_test(test_module_check_refuses_each_missing_entry),
		cmocka_unit_test(test_module_check_takes_absent_groups_and_refuses_no_module),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
