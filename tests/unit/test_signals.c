/* test_signals.c - what a bus error (SIGBUS) says before the process ends: a mapping named
 * to the handler gives its own reason; any other names /dev/shm, where MPI's shared memory
 * lives (issue 30: a full /dev/shm killed a rank with SIGBUS and no line at all). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/signals.h"

/* In a child: map a page of a file, cut the file to nothing, name the mapping to the
 * handler (named) or not, and touch it. Returns the child's wait status; its standard
 * error goes to err (len bytes). */
static int touch_lost_page(int named, char *err, size_t len)
{
	char path[] = "/tmp/test_signals.XXXXXX";
	int fd = mkstemp(path), pipefd[2], status = 0;
	pid_t pid;
	ssize_t n;
	size_t got = 0;

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 4096), 0);
	assert_int_equal(pipe(pipefd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		volatile char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

		dup2(pipefd[1], STDERR_FILENO);
		if (p == MAP_FAILED || ftruncate(fd, 0) != 0)
			_exit(99);
		signals_install();
		if (named)
			signals_map_note((const void *)p, 4096, "the shared-memory all-reduce's window",
					 "a page of it could not be had");
		p[0] = 1; /* SIGBUS: the page is past the file's end */
		_exit(98);
	}
	close(pipefd[1]);
	while (got < len - 1 && (n = read(pipefd[0], err + got, len - 1 - got)) > 0)
		got += (size_t)n;
	err[got] = '\0';
	close(pipefd[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	close(fd);
	unlink(path);
	return status;
}

static void test_a_named_mapping_says_what_it_was_and_exits_1(void **state)
{
	char err[1024];
	int status = touch_lost_page(1, err, sizeof err);

	(void)state;
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 1);
	assert_string_equal(err, "ddptrain: the shared-memory all-reduce's window: a page of it could not be had; giving up\n");
}

static void test_an_unknown_bus_error_names_dev_shm_before_it_dies(void **state)
{
	char err[1024];
	int status = touch_lost_page(0, err, sizeof err);

	(void)state;
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGBUS);
	assert_non_null(strstr(err, "ddptrain: bus error (SIGBUS)"));
	assert_non_null(strstr(err, "/dev/shm"));
	assert_int_equal(strchr(err, '\n') - err + 1, (long)strlen(err)); /* one line */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_a_named_mapping_says_what_it_was_and_exits_1),
		cmocka_unit_test(test_an_unknown_bus_error_names_dev_shm_before_it_dies),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
