/* test_nvtx_record.c - the NVTX recorder (tests/lib/nvtx_record.c) that gpu-check uses to
 * see --trace's NVTX ranges on a GPU machine: loaded by NVTX itself through
 * NVTX_INJECTION64_PATH, it writes each push and pop, in order, from each thread. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>
#include <nvtx3/nvToolsExt.h>

static void test_nvtx_record_writes_each_push_and_pop_in_order(void **state)
{
	const char *dir = getenv("TESTS_BUILDDIR");
	char lib[4200], prefix[] = "/tmp/nvtx-record-test.XXXXXX", path[4300], want[256], got[4096];
	long tid = (long)syscall(SYS_gettid);
	size_t n;
	FILE *f;
	int fd = mkstemp(prefix);

	assert_true(fd >= 0);
	close(fd);
	unlink(prefix);
	snprintf(lib, sizeof lib, "%s/lib/nvtx-record.so", dir != NULL ? dir : "tests");
	/* Before the first NVTX call: that is when NVTX looks for an injection library. */
	setenv("NVTX_INJECTION64_PATH", lib, 1);
	setenv("NVTX_RECORD", prefix, 1);
	nvtxRangePushA("wait");
	nvtxRangePushA("allreduce bucket 0");
	nvtxRangePop();
	nvtxRangePop();
	snprintf(path, sizeof path, "%s.%ld", prefix, (long)getpid());
	f = fopen(path, "r");
	assert_non_null(f);
	n = fread(got, 1, sizeof got - 1, f);
	got[n] = '\0';
	fclose(f);
	unlink(path);
	snprintf(want, sizeof want, "%ld push wait\n%ld push allreduce bucket 0\n%ld pop\n%ld pop\n", tid,
		 tid, tid, tid);
	assert_string_equal(got, want);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_nvtx_record_writes_each_push_and_pop_in_order),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
