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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_diag_keeps_the_first_failure),
		cmocka_unit_test(test_diag_escapes_control_characters),
		cmocka_unit_test(test_diag_prefix_and_append_add_context_and_keep_the_status),
		cmocka_unit_test(test_diag_prefix_cuts_a_long_message_at_its_length),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
