/* test_status.c - struct diag: setting a message once, escaping it, and the context a
 * caller adds before or after a callee's message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "core/status.h"

static void test_diag_keeps_the_first_failure(void **state)
{
	struct diag d = {0};

	assert_int_equal(diag_set(&d, ST_RUNTIME, "first %d", 1), ST_RUNTIME);
	assert_int_equal(diag_set(&d, ST_USAGE, "second"), ST_USAGE);
	assert_int_equal(d.st, ST_RUNTIME);
	assert_string_equal(d.msg, "first 1");
}

static void test_diag_escapes_control_characters(void **state)
{
	struct diag d = {0};

	diag_set(&d, ST_RUNTIME, "a\nb\x1b[31m");
	assert_string_equal(d.msg, "a\\nb\\x1b[31m");
}

static void test_diag_prefix_and_append_add_context_and_keep_the_status(void **state)
{
	struct diag d = {0};

	diag_prefix(&d, "nothing to prefix: ");
	diag_append(&d, " (nor to append)");
	assert_int_equal(d.st, ST_OK);
	assert_string_equal(d.msg, "");
	diag_set(&d, ST_USAGE, "no CUDA device");
	diag_prefix(&d, "--device=%s: ", "cuda");
	diag_append(&d, " (%s)", "--batch-size x --replicas");
	assert_int_equal(d.st, ST_USAGE);
	assert_string_equal(d.msg, "--device=cuda: no CUDA device (--batch-size x --replicas)");
	/* The added text is escaped like any message. */
	diag_prefix(&d, "a\tb ");
	assert_non_null(strstr(d.msg, "a\\tb --device=cuda"));
}

static void test_diag_prefix_cuts_a_long_message_at_its_length(void **state)
{
	struct diag d = {0};
	char big[sizeof d.msg * 2];

	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	diag_set(&d, ST_RUNTIME, "%s", big);
	diag_prefix(&d, "context: ");
	assert_int_equal(strlen(d.msg), sizeof d.msg - 1);
	assert_int_equal(strncmp(d.msg, "context: xxx", 12), 0);
	diag_append(&d, " tail");
	assert_int_equal(strlen(d.msg), sizeof d.msg - 1);
}

/* A message too long for msg keeps its start (what failed) and its end (why), the cut
 * marked "..." (before: a path cut silently after about 400 characters, and the reason
 * kept as if it were about the shorter path). */
static void test_diag_cuts_a_long_message_in_the_middle_with_a_marker(void **state)
{
	struct diag d = {0};
	char path[3000];
	const char *why = ": No such file or directory";
	size_t n;

	memset(path, 'p', sizeof path - 1);
	path[0] = '/';
	path[sizeof path - 1] = '\0';
	diag_set(&d, ST_RUNTIME, "--save: %s%s", path, why);
	n = strlen(d.msg);
	assert_int_equal(n, sizeof d.msg - 1);
	assert_int_equal(strncmp(d.msg, "--save: /ppp", 12), 0);
	assert_string_equal(d.msg + n - strlen(why), why);
	assert_non_null(strstr(d.msg, "p...p"));
	/* diag_errno names its subject in full before the cut too. */
	memset(&d, 0, sizeof d);
	diag_errno(&d, 2, "--inputs: %s", path);
	assert_string_equal(d.msg + strlen(d.msg) - strlen(why), why);
	assert_non_null(strstr(d.msg, "..."));
}

/* The cut falls between whole escapes and whole UTF-8 characters. */
static void test_diag_cut_keeps_escapes_and_characters_whole(void **state)
{
	struct diag d = {0};
	char text[2000];
	const char *mark;

	for (size_t i = 0; i + 1 < sizeof text; i++)
		text[i] = i % 2 ? '\x01' : 'a'; /* each \x01 is 4 characters escaped */
	text[sizeof text - 1] = '\0';
	diag_set(&d, ST_RUNTIME, "%s", text);
	mark = strstr(d.msg, "...");
	assert_non_null(mark);
	for (const char *p = d.msg; *p != '\0'; p++)
		if (*p == '\\')
			assert_true(p[1] == 'x' && p[2] == '0' && p[3] == '1');
	memset(&d, 0, sizeof d);
	for (size_t i = 0; i + 1 < sizeof text; i += 2) { /* "é" (0xc3 0xa9), 999 times */
		text[i] = (char)0xc3;
		text[i + 1] = (char)0xa9;
	}
	text[sizeof text - 2] = '\0';
	diag_set(&d, ST_RUNTIME, "%s", text);
	mark = strstr(d.msg, "...");
	assert_non_null(mark);
	assert_int_equal((mark - d.msg) % 2, 0);
	assert_int_equal(strlen(mark + 3) % 2, 0);
	assert_int_equal((unsigned char)mark[3], 0xc3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_diag_keeps_the_first_failure),
		cmocka_unit_test(test_diag_escapes_control_characters),
		cmocka_unit_test(test_diag_prefix_and_append_add_context_and_keep_the_status),
		cmocka_unit_test(test_diag_prefix_cuts_a_long_message_at_its_length),
		cmocka_unit_test(test_diag_cuts_a_long_message_in_the_middle_with_a_marker),
		cmocka_unit_test(test_diag_cut_keeps_escapes_and_characters_whole),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
