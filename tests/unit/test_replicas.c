/*
 * test_replicas.c - the replica check's set-up and run-header line: what it compares for
 * each kind of strategy (grad_sync_ops.replicated), that a strategy replicating nothing
 * (ZeRO-3's, to come) turns the check off and says so, and that one rank or N = 0 needs
 * no check. The comparison across ranks and the names of a mismatch are
 * tests/failures/replicas.sh's (it needs ranks).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/optimizer.h"
#include "train/replicas.h"
#include "train/sync.h"

/* The run header's notes replicas_describe prints for x, as text. */
static char *header(const struct replicas *x)
{
	static char *text;
	size_t len = 0;
	struct report r;

	free(text);
	text = NULL;
	report_init(&r, 1, 0, 0);
	r.out = open_memstream(&text, &len);
	assert_non_null(r.out);
	replicas_describe(x, &r);
	fclose(r.out);
	return text;
}

static void test_replicas_compare_what_the_strategy_keeps_replicated(void **state)
{
	const int widths[3] = {4, 3, 2};
	struct backend_config cfg = {0, 0};
	struct optimizer_hparams hp = {.kind = OPTIM_SGD, .lr = 0.1f, .momentum = 0.9f};
	struct world w = {.rank = 0, .size = 3};
	struct backend be;
	struct model m;
	struct optimizer opt;
	struct replicas x;
	struct diag d = {0};

	assert_int_equal(backend_init(&be, &backend_cpu_ops, &cfg, &d), ST_OK);
	assert_int_equal(model_init(&m, &be, widths, 2, 4, &d), ST_OK);
	assert_int_equal(optimizer_init(&opt, &m, &hp, NULL, &d), ST_OK);
	/* plain DDP: the parameters and the momentum buffers, 2 layers x 2 tensors each */
	assert_int_equal(replicas_init(&x, &m, &w, 100, SYNC_SAME_PARAMS | SYNC_SAME_STATE, "buckets", &d), ST_OK);
	assert_true(replicas_on(&x));
	assert_int_equal(x.ntensors, 8);
	assert_string_equal(x.t[4].name, "momentum_buffer.net1.weight");
	assert_string_equal(header(&x), "# replica check: every 100 steps and before any weights are written: the parameters and the optimizer state (8 tensors) hashed where they live and compared bit for bit across the 3 ranks\n");
	replicas_free(&x);
	replicas_free(&x); /* safe twice */
	/* ZeRO-1/2: the parameters; the state is each rank's shard, said so */
	assert_int_equal(replicas_init(&x, &m, &w, 1, SYNC_SAME_PARAMS, "zero1", &d), ST_OK);
	assert_int_equal(x.ntensors, 4);
	assert_non_null(strstr(header(&x), "every step and before any weights are written: the parameters (4 tensors)"));
	assert_non_null(strstr(header(&x), "; the optimizer state is sharded (each rank's own): not compared\n"));
	replicas_free(&x);
	/* nothing persistent replicated (ZeRO-3): no check, and the header says why */
	assert_int_equal(replicas_init(&x, &m, &w, 100, 0, "zero3", &d), ST_OK);
	assert_false(replicas_on(&x));
	assert_null(x.dev);
	assert_string_equal(header(&x), "# replica check: nothing to compare: the zero3 strategy keeps no state on more than one rank between steps (each holds its own shard)\n");
	replicas_free(&x);
	/* off, or one rank: no check, no line */
	assert_int_equal(replicas_init(&x, &m, &w, 0, SYNC_SAME_PARAMS, "buckets", &d), ST_OK);
	assert_false(replicas_on(&x));
	assert_string_equal(header(&x), "");
	w.size = 1;
	assert_int_equal(replicas_init(&x, &m, &w, 100, SYNC_SAME_PARAMS, "buckets", &d), ST_OK);
	assert_false(replicas_on(&x));
	assert_string_equal(header(&x), "");
	model_free(&m);
	backend_free(&be);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_replicas_compare_what_the_strategy_keeps_replicated),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
