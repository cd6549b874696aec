/* test_outfile.c - the one atomic writer: where its temporary goes, what a commit and an
 * abort leave, links, and that every exit removes the temporary (it is registered); the
 * claim on an output (its lock file) and which temporaries are a dead run's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/outfile.h"
#include "core/signals.h"

/* A fresh directory for one test, and paths in it. */
static char dir[64];

static int setup(void **state)
{
	strcpy(dir, "/tmp/test_outfile.XXXXXX");
	return mkdtemp(dir) == NULL ? -1 : 0;
}

static int teardown(void **state)
{
	char cmd[128];

	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static const char *in_dir(const char *name)
{
	static char bufs[4][PATH_MAX];
	static int next;
	char *p = bufs[next++ % 4];

	snprintf(p, PATH_MAX, "%s/%s", dir, name);
	return p;
}

/* How many files under dir (one level of subdirectories too) hold ".tmp.". */
static int temporaries(const char *where)
{
	DIR *dp = opendir(where);
	struct dirent *e;
	int n = 0;

	while (dp != NULL && (e = readdir(dp)) != NULL) {
		char sub[PATH_MAX];
		struct stat sb;

		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		snprintf(sub, sizeof sub, "%s/%s", where, e->d_name);
		if (lstat(sub, &sb) == 0 && S_ISDIR(sb.st_mode))
			n += temporaries(sub);
		else if (strstr(e->d_name, ".tmp.") != NULL)
			n++;
	}
	if (dp != NULL)
		closedir(dp);
	return n;
}

static void assert_file_holds(const char *path, const char *want)
{
	char buf[256] = "";
	FILE *f = fopen(path, "r");
	size_t n;

	assert_non_null(f);
	n = fread(buf, 1, sizeof buf - 1, f);
	buf[n] = '\0';
	fclose(f);
	assert_string_equal(buf, want);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void test_commit_puts_the_bytes_in_place_and_leaves_no_temporary(void **state)
{
	struct outfile of;
	struct diag d = {0};

	write_file(in_dir("out"), "old\n");
	assert_int_equal(outfile_open(&of, in_dir("out"), "--trace", &d), ST_OK);
	fputs("new\n", of.f);
	assert_int_equal(temporaries(dir), 1);
	assert_file_holds(in_dir("out"), "old\n"); /* untouched until the rename */
	assert_int_equal(outfile_commit(&of, &d), ST_OK);
	assert_file_holds(in_dir("out"), "new\n");
	assert_int_equal(temporaries(dir), 0);
	outfile_abort(&of); /* after a commit: nothing to do */
	assert_file_holds(in_dir("out"), "new\n");
}

/* A write's progress, counted (struct progress's tick). */
static void count_tick(void *arg)
{
	++*(int *)arg;
}

static void test_a_long_write_tells_its_progress_after_each_piece_and_the_fsync(void **state)
{
	const size_t len = 2 * OUTFILE_PIECE + 5; /* three pieces */
	char *buf = calloc(len, 1);
	int ticks = 0;
	const struct progress pr = {count_tick, &ticks};
	struct outfile of;
	struct diag d = {0};
	struct stat sb;

	assert_non_null(buf);
	assert_int_equal(outfile_open(&of, in_dir("big"), "--checkpoint", &d), ST_OK);
	of.progress = &pr;
	assert_int_equal(outfile_write(&of, buf, len, &d), ST_OK);
	assert_int_equal(ticks, 3);
	assert_int_equal(outfile_commit(&of, &d), ST_OK);
	assert_int_equal(ticks, 4); /* and once the bytes are on disk */
	assert_int_equal(stat(in_dir("big"), &sb), 0);
	assert_int_equal((size_t)sb.st_size, len);
	free(buf);
}

static void test_abort_removes_the_temporary_and_keeps_the_previous_file(void **state)
{
	struct outfile of;
	struct diag d = {0};

	write_file(in_dir("out"), "old\n");
	assert_int_equal(outfile_open(&of, in_dir("out"), "--prometheus", &d), ST_OK);
	fputs("half", of.f);
	outfile_abort(&of);
	outfile_abort(&of);
	assert_file_holds(in_dir("out"), "old\n");
	assert_int_equal(temporaries(dir), 0);
}

static void test_a_missing_directory_names_the_flag_and_leaves_nothing(void **state)
{
	struct outfile of;
	struct diag d = {0};
	char want[PATH_MAX + 64];

	assert_int_equal(outfile_open(&of, in_dir("no/out"), "--trace", &d), ST_RUNTIME);
	snprintf(want, sizeof want, "--trace: %s: cannot create a file beside it: No such file or directory",
		 in_dir("no/out"));
	assert_string_equal(d.msg, want);
	outfile_abort(&of);
}

/* A link is kept and the file it names is replaced, written through a temporary beside
 * that file, even when it does not exist yet (a dangling link). */
static void test_writes_through_a_link_and_a_dangling_link_and_keeps_both(void **state)
{
	struct outfile of;
	struct diag d = {0};
	struct stat sb;

	assert_int_equal(mkdir(in_dir("real"), 0777), 0);
	write_file(in_dir("real/a"), "old\n");
	assert_int_equal(symlink("real/a", in_dir("link")), 0);
	assert_int_equal(symlink("real/b", in_dir("dangling")), 0);
	assert_int_equal(outfile_open(&of, in_dir("link"), "--trace", &d), ST_OK);
	fputs("through the link\n", of.f);
	assert_int_equal(temporaries(in_dir("real")), 1);
	assert_int_equal(outfile_commit(&of, &d), ST_OK);
	assert_int_equal(outfile_open(&of, in_dir("dangling"), "--prometheus", &d), ST_OK);
	fputs("through the dangling link\n", of.f);
	assert_int_equal(outfile_commit(&of, &d), ST_OK);

	assert_int_equal(lstat(in_dir("link"), &sb), 0);
	assert_true(S_ISLNK(sb.st_mode));
	assert_int_equal(lstat(in_dir("dangling"), &sb), 0);
	assert_true(S_ISLNK(sb.st_mode));
	assert_file_holds(in_dir("real/a"), "through the link\n");
	assert_file_holds(in_dir("real/b"), "through the dangling link\n");
	assert_int_equal(temporaries(dir), 0);
}

/* A second stop signal ends the process at once (signals.h): the temporary it was
 * writing goes with it, like every exit the handlers make. */
static void test_a_second_stop_signal_removes_the_temporary(void **state)
{
	int status;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		struct outfile of;
		struct diag d = {0};

		signals_install();
		if (outfile_open(&of, in_dir("trace.json"), "--trace", &d) != ST_OK)
			_exit(10);
		fputs("{\"traceEvents\":[", of.f);
		fflush(of.f);
		if (temporaries(dir) != 1)
			_exit(11);
		raise(SIGTERM); /* the graceful stop's flag */
		raise(SIGTERM); /* ends the process */
		_exit(12);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 128 + SIGTERM);
	assert_int_equal(temporaries(dir), 0);
	assert_int_equal(access(in_dir("trace.json"), F_OK), -1);
}

/* The watchdog's exit (world.c) removes what signals_tmp_cleanup knows of. */
static void test_the_cleanup_every_fatal_exit_runs_removes_the_temporary(void **state)
{
	struct outfile of;
	struct diag d = {0};

	assert_int_equal(outfile_open(&of, in_dir("metrics.prom"), "--prometheus", &d), ST_OK);
	assert_int_equal(temporaries(dir), 1);
	signals_tmp_cleanup();
	assert_int_equal(temporaries(dir), 0);
	outfile_abort(&of);
}

/* A second claim on an output whose lock is held (here by this process's first claim: flock
 * locks belong to the open file) is refused naming the holder, and leaves the holder's
 * temporary alone; once the holder gives its claim up, a new claim removes a temporary it
 * left (a dead writer's) and the lock file goes with the claim. */
static void test_a_held_output_is_refused_naming_the_holder_and_its_temporary_kept(void **state)
{
	struct outfile_lock first = {0}, second = {0};
	struct diag d = {0};
	char want[400], host[256] = "";

	assert_int_equal(outfile_check(in_dir("c.st"), "--checkpoint", 0, &first, &d), ST_OK);
	assert_non_null(first.path);
	write_file(in_dir("c.st.tmp.XyZ789"), "the holder's, in flight\n");
	assert_int_equal(outfile_check(in_dir("c.st"), "--checkpoint", 0, &second, &d), ST_USAGE);
	assert_null(second.path);
	gethostname(host, sizeof host - 1);
	snprintf(want, sizeof want, "--checkpoint: %s: another ddptrain is writing it (host %s, pid %ld)",
		 in_dir("c.st"), host, (long)getpid());
	assert_non_null(strstr(d.msg, want));
	assert_int_equal(access(in_dir("c.st.tmp.XyZ789"), F_OK), 0);
	outfile_release(&first);
	outfile_release(&first); /* safe twice */
	assert_int_equal(access(in_dir("c.st.lock"), F_OK), -1);
	d = (struct diag){0};
	assert_int_equal(outfile_check(in_dir("c.st"), "--checkpoint", 0, &second, &d), ST_OK);
	assert_int_equal(temporaries(dir), 0);
	outfile_release(&second);
	assert_int_equal(access(in_dir("c.st.lock"), F_OK), -1);
}

/* A claim left by a killed run (its lock file, no process holding it) is taken over. */
static void test_a_dead_runs_lock_file_is_taken_over(void **state)
{
	struct outfile_lock l = {0};
	struct diag d = {0};

	write_file(in_dir("w.st.lock"), "elsewhere 999999\n");
	write_file(in_dir("w.st.tmp.Qq1234"), "a dead writer's\n");
	assert_int_equal(outfile_check(in_dir("w.st"), "--save", 0, &l, &d), ST_OK);
	assert_int_equal(temporaries(dir), 0);
	outfile_release(&l);
	assert_int_equal(access(in_dir("w.st.lock"), F_OK), -1);
}

/* What sits at c.st.lock, and what the refusal says about it. */
struct squatter {
	const char *why;   /* the reason the message gives */
	void (*make)(void); /* puts it at c.st.lock */
};

static void make_hard_link(void)
{
	write_file(in_dir("victim.txt"), "precious\n");
	assert_int_equal(link(in_dir("victim.txt"), in_dir("c.st.lock")), 0);
}
static void make_weights_file(void) { write_file(in_dir("c.st.lock"), "an earlier run's --save=c.st.lock\n"); }
static void make_symlink(void)
{
	write_file(in_dir("victim.txt"), "precious\n");
	assert_int_equal(symlink("victim.txt", in_dir("c.st.lock")), 0);
}
static void make_dangling_link(void) { assert_int_equal(symlink("nowhere", in_dir("c.st.lock")), 0); }
static void make_directory(void) { assert_int_equal(mkdir(in_dir("c.st.lock"), 0755), 0); }
static void make_fifo(void) { assert_int_equal(mkfifo(in_dir("c.st.lock"), 0644), 0); }

/* A name where the lock goes that holds something which is not one of ddptrain's lock
 * files (issue 30: a hard link was truncated to "host pid" and written through, a file
 * named like a lock was overwritten and deleted, a link gave "cannot create a file beside
 * it" with exit 1) is refused as bad input naming c.st.lock and why, and is left exactly as
 * it was: not written, not removed. */
static void test_a_lock_name_that_holds_no_lock_of_ours_is_refused_and_left_alone(void **state)
{
	const struct squatter cases[] = {
		{"is a hard link to another file", make_hard_link},
		{"is not a ddptrain lock file (it holds other data)", make_weights_file},
		{"is a symbolic link", make_symlink},
		{"is a dangling symbolic link", make_dangling_link},
		{"is a directory", make_directory},
		{"is not a regular file", make_fifo},
	};

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct outfile_lock l = {0};
		struct diag d = {0};
		struct stat before, after;
		char want[PATH_MAX + 200], cmd[PATH_MAX];

		cases[i].make();
		assert_int_equal(lstat(in_dir("c.st.lock"), &before), 0);
		assert_int_equal(outfile_check(in_dir("c.st"), "--checkpoint", 0, &l, &d), ST_USAGE);
		assert_null(l.path);
		snprintf(want, sizeof want, "--checkpoint: %s %s, ", in_dir("c.st.lock"), cases[i].why);
		if (strstr(d.msg, want) == NULL)
			fail_msg("case %zu: want \"%s\" in \"%s\"", i, want, d.msg);
		assert_non_null(strstr(d.msg, "remove it or give --checkpoint another name"));
		assert_int_equal(lstat(in_dir("c.st.lock"), &after), 0);
		assert_int_equal(after.st_ino, before.st_ino);
		assert_int_equal(after.st_size, before.st_size);
		assert_int_equal(after.st_mtime, before.st_mtime);
		if (access(in_dir("victim.txt"), F_OK) == 0)
			assert_file_holds(in_dir("victim.txt"), "precious\n");
		assert_int_equal(temporaries(dir), 0);
		snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", in_dir("c.st.lock"), in_dir("victim.txt"));
		assert_int_equal(system(cmd), 0);
	}
}

/* An empty file at the lock's name (made by a run killed before it signed it) is a lock. */
static void test_an_empty_lock_file_is_taken_over(void **state)
{
	struct outfile_lock l = {0};
	struct diag d = {0};

	write_file(in_dir("e.st.lock"), "");
	assert_int_equal(outfile_check(in_dir("e.st"), "--save", 0, &l, &d), ST_OK);
	assert_non_null(l.path);
	outfile_release(&l);
	assert_int_equal(access(in_dir("e.st.lock"), F_OK), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_commit_puts_the_bytes_in_place_and_leaves_no_temporary, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_long_write_tells_its_progress_after_each_piece_and_the_fsync, setup, teardown),
		cmocka_unit_test_setup_teardown(test_abort_removes_the_temporary_and_keeps_the_previous_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_missing_directory_names_the_flag_and_leaves_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_writes_through_a_link_and_a_dangling_link_and_keeps_both, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_second_stop_signal_removes_the_temporary, setup, teardown),
		cmocka_unit_test_setup_teardown(test_the_cleanup_every_fatal_exit_runs_removes_the_temporary, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_held_output_is_refused_naming_the_holder_and_its_temporary_kept, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_dead_runs_lock_file_is_taken_over, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_lock_name_that_holds_no_lock_of_ours_is_refused_and_left_alone, setup, teardown),
		cmocka_unit_test_setup_teardown(test_an_empty_lock_file_is_taken_over, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
