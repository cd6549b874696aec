/* test_checkpoint.c - the state dict in files: checkpoints round-trip, are verified
 * (configuration, checksum, finiteness), and --init / --save use the same names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/checkpoint.h"
#include "model/optimizer.h"

#define LINEAGE "0123456789abcdef0123456789abcdef"

static char dir[] = "/tmp/test_checkpoint.XXXXXX";
static struct backend be;

static int setup(void **state)
{
	struct backend_config cfg = {0, 0};
	struct diag d = {0};

	if (mkdtemp(dir) == NULL)
		return -1;
	return backend_init(&be, &backend_cpu_ops, &cfg, &d) == ST_OK ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[128];

	backend_free(&be);
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static const char *path_in_dir(const char *name)
{
	static char buf[4][128];
	static int i;

	i = (i + 1) % 4;
	snprintf(buf[i], sizeof buf[i], "%s/%s", dir, name);
	return buf[i];
}

/* A model of these widths with SGD state (momentum adds an arena), and host room for its
 * whole state dict filled with a pattern. */
struct rig {
	struct model m;
	struct optimizer opt;
	float *host;
};

static void rig_init(struct rig *r, const int *widths, int nlayers, float momentum, float base)
{
	struct optimizer_hparams h = {OPTIM_SGD, 0.1f, momentum, 0.0f};
	struct diag d = {0};
	size_t n;

	assert_int_equal(model_init(&r->m, &be, widths, nlayers, 1, &d), ST_OK);
	assert_int_equal(optimizer_init(&r->opt, &r->m, &h, NULL, &d), ST_OK);
	n = model_state_floats(&r->m, 0, r->m.narenas);
	r->host = calloc(n, sizeof *r->host);
	assert_non_null(r->host);
	for (size_t i = 0; i < n; i++)
		r->host[i] = base + 0.25f * (float)i;
}

static void rig_free(struct rig *r)
{
	free(r->host);
	model_free(&r->m);
}

static const int widths[3] = {4, 3, 2};
static const char *config = "--layers=4,3,2\n--lr=0.1\n--momentum=0.9\n";

static void test_checkpoint_round_trips_weights_momentum_and_position(void **state)
{
	struct rig a, b;
	struct ckpt_pos pos = {7, 1, 3, 2, LINEAGE}, got = {0};
	struct diag d = {0};
	const char *path = path_in_dir("ck.st");

	pos.schedule_steps = 264; /* the lr schedule's length goes with the position */
	rig_init(&a, widths, 2, 0.9f, 1.0f);
	rig_init(&b, widths, 2, 0.9f, -5.0f);
	assert_int_equal(a.m.narenas, 2);
	assert_int_equal(checkpoint_save(path, NULL, &a.m, a.host, &pos, config, NULL, &d), ST_OK);
	assert_int_equal(checkpoint_load(path, &b.m, config, b.host, &got, &d), ST_OK);
	assert_memory_equal(b.host, a.host, a.m.nparams * 2 * sizeof(float));
	assert_int_equal(got.step, 7);
	assert_int_equal(got.epoch, 1);
	assert_int_equal(got.next_mb, 3);
	assert_int_equal(got.world, 2);
	assert_int_equal(got.schedule_steps, 264);
	assert_string_equal(got.lineage, LINEAGE);
	rig_free(&a);
	rig_free(&b);
}

static void test_checkpoint_without_momentum_loads_zero_momentum(void **state)
{
	struct rig a, b;
	struct ckpt_pos pos = {1, 0, 1, 1, LINEAGE}, got = {0};
	struct diag d = {0};
	const char *path = path_in_dir("plain.st");

	rig_init(&a, widths, 2, 0.0f, 1.0f);
	rig_init(&b, widths, 2, 0.9f, -5.0f);
	assert_int_equal(checkpoint_save(path, NULL, &a.m, a.host, &pos, config, NULL, &d), ST_OK);
	assert_int_equal(checkpoint_load(path, &b.m, config, b.host, &got, &d), ST_OK);
	assert_memory_equal(b.host, a.host, a.m.nparams * sizeof(float));
	for (size_t i = 0; i < b.m.nparams; i++)
		assert_true(b.host[b.m.nparams + i] == 0.0f);
	rig_free(&a);
	rig_free(&b);
}

static void test_checkpoint_refuses_another_configuration_naming_the_flag(void **state)
{
	struct rig a;
	struct ckpt_pos pos = {1, 0, 1, 1, LINEAGE}, got = {0};
	struct diag d = {0};
	const char *path = path_in_dir("cfg.st");

	rig_init(&a, widths, 2, 0.9f, 1.0f);
	assert_int_equal(checkpoint_save(path, NULL, &a.m, a.host, &pos, config, NULL, &d), ST_OK);
	assert_int_equal(checkpoint_load(path, &a.m, "--layers=4,3,2\n--lr=0.2\n", a.host, &got, &d),
			 ST_USAGE);
	assert_non_null(strstr(d.msg, "was written with --lr=0.1; this run has --lr=0.2"));
	rig_free(&a);
}

static void test_checkpoint_detects_corrupt_tensor_data(void **state)
{
	struct rig a;
	struct ckpt_pos pos = {1, 0, 1, 1, LINEAGE}, got = {0};
	struct diag d = {0};
	const char *path = path_in_dir("bad.st");
	FILE *f;
	long size;

	rig_init(&a, widths, 2, 0.9f, 1.0f);
	assert_int_equal(checkpoint_save(path, NULL, &a.m, a.host, &pos, config, NULL, &d), ST_OK);
	f = fopen(path, "r+b");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	fseek(f, size - 3, SEEK_SET); /* inside the last tensor */
	fputc(0x55, f);
	fclose(f);
	assert_int_equal(checkpoint_load(path, &a.m, config, a.host, &got, &d), ST_RUNTIME);
	assert_non_null(strstr(d.msg, "checksum mismatch"));
	rig_free(&a);
}

static void test_checkpoint_is_not_written_from_non_finite_state(void **state)
{
	struct rig a;
	struct ckpt_pos pos = {3, 0, 1, 1, LINEAGE};
	struct diag d = {0};
	const char *path = path_in_dir("nan.st");

	rig_init(&a, widths, 2, 0.9f, 1.0f);
	a.host[a.m.nparams + 2] = NAN; /* in the momentum buffer */
	assert_int_equal(checkpoint_save(path, NULL, &a.m, a.host, &pos, config, NULL, &d), ST_RUNTIME);
	assert_non_null(strstr(d.msg, "training diverged: the weights are not finite after step 3"));
	assert_int_equal(access(path, F_OK), -1);
	rig_free(&a);
}

static void test_checkpoint_keeps_the_last_k_numbered_copies(void **state)
{
	struct rig a;
	struct diag d = {0};
	const char *path = path_in_dir("keep.st");
	struct ckpt_rotation rot = {.keep = 2};

	rig_init(&a, widths, 2, 0.0f, 1.0f);
	for (long s = 1; s <= 3; s++) {
		struct ckpt_pos pos = {s, 0, s, 1, LINEAGE};

		assert_int_equal(checkpoint_save(path, &rot, &a.m, a.host, &pos, config, NULL, &d), ST_OK);
	}
	checkpoint_rotation_free(&rot);
	checkpoint_rotation_free(&rot); /* safe twice */
	assert_int_equal(access(path_in_dir("keep.st.step-00000001"), F_OK), -1);
	assert_int_equal(access(path_in_dir("keep.st.step-00000002"), F_OK), 0);
	assert_int_equal(access(path_in_dir("keep.st.step-00000003"), F_OK), 0);
	rig_free(&a);
}

/* check_position's verdict on (step, epoch, next_mb) for epochs of 10 micro-batches at the
 * checkpoint's world size, 10 at the longest, in steps of accum. */
static enum status position(long step, long epoch, long next_mb, long accum, struct diag *d)
{
	const struct ckpt_pos pos = {step, epoch, next_mb, 1, LINEAGE};

	*d = (struct diag){0};
	return checkpoint_check_position(&pos, 10, 10, accum, "c.st", d);
}

/* A position is one a run can write: its micro-batch inside the epoch at the start of a
 * step, and as many steps as the epochs before (1 to 10 each, by world size) and the
 * micro-batches before it in this one take; the extremes of the ranges do not overflow. */
static void test_position_fits_the_epochs_length_and_itself(void **state)
{
	struct diag d;
	const struct ckpt_pos far = {CKPT_MAX_STEP, CKPT_MAX_EPOCH, 0, 1, LINEAGE};

	assert_int_equal(position(4, 0, 4, 1, &d), ST_OK);
	assert_int_equal(position(0, 0, 0, 1, &d), ST_OK);
	assert_int_equal(position(34, 3, 4, 1, &d), ST_OK); /* one world size throughout */
	assert_int_equal(position(7, 3, 4, 1, &d), ST_OK);  /* a world size with 1 step an epoch */
	assert_int_equal(position(5 + 3, 3, 4, 2, &d), ST_OK); /* 3 epochs of 1 to 5 steps, then 2 */
	assert_int_equal(position(4, 0, 10, 1, &d), ST_RUNTIME);
	assert_string_equal(d.msg, "--resume: c.st: next_micro_batch 10 is past the end of an epoch of 10 micro-batches (world size 1)");
	assert_int_equal(position(4, 0, 2147483647, 1, &d), ST_RUNTIME);
	assert_int_equal(position(1, 0, 3, 2, &d), ST_RUNTIME);
	assert_string_equal(d.msg, "--resume: c.st: next_micro_batch 3 does not begin a step of --grad-accum=2 micro-batches");
	assert_int_equal(position(3, 0, 4, 1, &d), ST_RUNTIME);
	assert_string_equal(d.msg, "--resume: c.st: step 3 contradicts epoch 0 and next_micro_batch 4: those take 4 steps (an epoch takes 1 to 10 steps, by world size)");
	assert_int_equal(position(6, 3, 4, 1, &d), ST_RUNTIME);
	assert_int_equal(position(35, 3, 4, 1, &d), ST_RUNTIME);
	assert_non_null(strstr(d.msg, "those take 7 to 34 steps"));
	assert_int_equal(position(17 + 3, 3, 4, 2, &d), ST_RUNTIME); /* 3 x 5 + 2 = 17 at most */
	/* The largest values the range checks let through: no product overflows. */
	d = (struct diag){0};
	assert_int_equal(checkpoint_check_position(&far, 1, 1L << 40, 1, "c.st", &d), ST_OK);
	d = (struct diag){0};
	assert_int_equal(checkpoint_check_position(&far, 1, 1, 1, "c.st", &d), ST_RUNTIME);
}

/* The test links with --wrap=st_open: every file checkpoint.c opens is counted. */
static int opened;
enum status __real_st_open(struct st_file *f, const char *path, const char *flag, struct diag *d);
enum status __wrap_st_open(struct st_file *f, const char *path, const char *flag, struct diag *d);
enum status __wrap_st_open(struct st_file *f, const char *path, const char *flag, struct diag *d)
{
	opened++;
	return __real_st_open(f, path, flag, d);
}

/* --keep-checkpoints reads the directory's kept checkpoints once, at the run's first
 * checkpoint (a resumed run has earlier ones of its lineage), and then keeps the list in
 * memory: the checkpoints after it open no file (reopening every kept one at every
 * checkpoint made a run with --checkpoint-every=1 quadratic in its steps). */
static void test_rotation_reads_the_kept_checkpoints_once(void **state)
{
	struct rig a;
	struct diag d = {0};
	const char *path = path_in_dir("once.st");
	struct ckpt_rotation rot = {.keep = 5};
	char name[160];

	rig_init(&a, widths, 2, 0.0f, 1.0f);
	for (long s = 1; s <= 3; s++) { /* an earlier attempt of this run: step-1 to step-3 */
		struct ckpt_pos pos = {s, 0, s, 1, LINEAGE};

		assert_int_equal(checkpoint_save(path, NULL, &a.m, a.host, &pos, config, NULL, &d), ST_OK);
		snprintf(name, sizeof name, "%s.step-%08ld", path, s);
		assert_int_equal(link(path, name), 0);
	}
	opened = 0;
	for (long s = 4; s <= 30; s++) {
		struct ckpt_pos pos = {s, 0, s, 1, LINEAGE};

		assert_int_equal(checkpoint_save(path, &rot, &a.m, a.host, &pos, config, NULL, &d), ST_OK);
		if (s == 4)
			assert_int_equal(opened, 3); /* the three before (the new one is this run's) */
	}
	assert_int_equal(opened, 3);
	for (long s = 1; s <= 30; s++) {
		snprintf(name, sizeof name, "%s.step-%08ld", path, s);
		assert_int_equal(access(name, F_OK), s > 25 ? 0 : -1);
	}
	checkpoint_rotation_free(&rot);
	rig_free(&a);
}

/* A file under the rotation name of a step the run may write that is not its lineage's
 * (another run's checkpoint, any other file) is never replaced: refused at the start,
 * naming the lowest such step's file, and at a checkpoint if it appeared since. Other
 * names (another digit count) and steps out of the run's range are no obstacle. */
static void test_rotation_never_replaces_another_runs_file(void **state)
{
	struct rig a;
	struct diag d = {0};
	struct ckpt_rotation rot = {.keep = 5};
	char path[160], name[160], text[32] = "";
	FILE *f;

	snprintf(path, sizeof path, "%s", path_in_dir("own.st")); /* path_in_dir's buffers turn over */
	rig_init(&a, widths, 2, 0.0f, 1.0f);
	for (long s = 1; s <= 2; s++) { /* another run's kept checkpoints of steps 1 and 2 */
		struct ckpt_pos pos = {s, 0, s, 1, "fedcba9876543210fedcba9876543210"};

		assert_int_equal(checkpoint_save(path, NULL, &a.m, a.host, &pos, config, NULL, &d), ST_OK);
		snprintf(name, sizeof name, "%s.step-%08ld", path, s);
		assert_int_equal(link(path, name), 0);
	}
	f = fopen(path_in_dir("own.st.step-00000003"), "w"); /* a file of the user's */
	assert_non_null(f);
	fputs("notes\n", f);
	fclose(f);
	f = fopen(path_in_dir("own.st.step-4"), "w"); /* not the name step 4 is written under */
	assert_non_null(f);
	fclose(f);
	assert_int_equal(checkpoint_rotation_start(&rot, path, LINEAGE, 3, 10, &d), ST_USAGE);
	assert_non_null(strstr(d.msg, "--keep-checkpoints: "));
	assert_non_null(strstr(d.msg, "/own.st.step-00000003 is not this run's (not a ddptrain checkpoint): this run's checkpoint of step 3 would replace it, and the rotation remove it; move it away or give --checkpoint another name"));
	checkpoint_rotation_free(&rot);
	d = (struct diag){0};
	assert_int_equal(checkpoint_rotation_start(&rot, path, LINEAGE, 1, 10, &d), ST_USAGE);
	assert_non_null(strstr(d.msg, "/own.st.step-00000001 (and 2 more such files) is not this run's (another run's checkpoint): this run's checkpoint of step 1 would replace it, and the rotation remove it; move it away or give --checkpoint another name, or --resume that run"));
	checkpoint_rotation_free(&rot);
	d = (struct diag){0};
	assert_int_equal(checkpoint_rotation_start(&rot, path, LINEAGE, 4, 10, &d), ST_OK);
	/* Made since the start, under a step's name: the checkpoint is written, the file kept. */
	for (long s = 4; s <= 5; s++) {
		struct ckpt_pos pos = {s, 0, s, 1, LINEAGE};

		if (s == 5) {
			f = fopen(path_in_dir("own.st.step-00000005"), "w");
			assert_non_null(f);
			fputs("made now\n", f);
			fclose(f);
		}
		assert_int_equal(checkpoint_save(path, &rot, &a.m, a.host, &pos, config, NULL, &d), s == 4 ? ST_OK : ST_RUNTIME);
	}
	assert_non_null(strstr(d.msg, "/own.st.step-00000005 appeared during the run and is not this run's: not replaced"));
	f = fopen(path_in_dir("own.st.step-00000005"), "r");
	assert_non_null(f);
	assert_non_null(fgets(text, sizeof text, f));
	fclose(f);
	assert_string_equal(text, "made now\n");
	for (long s = 1; s <= 4; s++) { /* every file as it was; step 4 this run's */
		snprintf(name, sizeof name, "%s.step-%08ld", path, s);
		assert_int_equal(access(name, F_OK), 0);
	}
	assert_int_equal(access(path_in_dir("own.st.step-4"), F_OK), 0);
	f = fopen(path_in_dir("own.st.step-00000003"), "r");
	assert_non_null(f);
	assert_non_null(fgets(text, sizeof text, f));
	fclose(f);
	assert_string_equal(text, "notes\n");
	checkpoint_rotation_free(&rot);
	rig_free(&a);
}

/* Rotation names parse whatever their digit count; other names are not rotation names. */
static void test_numbered_step_parses_any_digit_count(void **state)
{
	assert_int_equal(checkpoint_numbered_step("k.st.step-00000060", "k.st"), 60);
	assert_int_equal(checkpoint_numbered_step("k.st.step-123456789", "k.st"), 123456789);
	assert_int_equal(checkpoint_numbered_step("k.st.step-7", "k.st"), 7);
	assert_int_equal(checkpoint_numbered_step("k.st.step-", "k.st"), -1);
	assert_int_equal(checkpoint_numbered_step("k.st.step-12x", "k.st"), -1);
	assert_int_equal(checkpoint_numbered_step("k.st.tmp.abc", "k.st"), -1);
	assert_int_equal(checkpoint_numbered_step("other.step-5", "k.st"), -1);
}

static void test_init_reads_the_weights_of_save_and_of_a_checkpoint(void **state)
{
	struct rig a, b;
	struct ckpt_pos pos = {1, 0, 1, 1, LINEAGE};
	struct diag d = {0};

	rig_init(&a, widths, 2, 0.9f, 1.0f);
	rig_init(&b, widths, 2, 0.0f, -5.0f);
	assert_int_equal(checkpoint_write_weights(path_in_dir("w.st"), "--save", &a.m, a.host, NULL, &d), ST_OK);
	assert_int_equal(checkpoint_read_weights(path_in_dir("w.st"), &b.m, b.host, &d), ST_OK);
	assert_memory_equal(b.host, a.host, a.m.nparams * sizeof(float));
	/* A checkpoint's momentum buffers are not weights: skipped, not refused. */
	assert_int_equal(checkpoint_save(path_in_dir("c.st"), NULL, &a.m, a.host, &pos, config, NULL, &d), ST_OK);
	memset(b.host, 0, b.m.nparams * sizeof(float));
	assert_int_equal(checkpoint_read_weights(path_in_dir("c.st"), &b.m, b.host, &d), ST_OK);
	assert_memory_equal(b.host, a.host, a.m.nparams * sizeof(float));
	rig_free(&a);
	rig_free(&b);
}

static void test_init_is_strict_about_names_and_shapes(void **state)
{
	const int deeper[4] = {4, 3, 2, 2}, wider[3] = {4, 5, 2};
	struct rig a, deep, wide;
	struct diag d = {0};

	rig_init(&a, widths, 2, 0.0f, 1.0f);
	rig_init(&deep, deeper, 3, 0.0f, 1.0f);
	rig_init(&wide, wider, 2, 0.0f, 1.0f);
	assert_int_equal(checkpoint_write_weights(path_in_dir("deep.st"), "--save", &deep.m, deep.host, NULL, &d), ST_OK);
	assert_int_equal(checkpoint_read_weights(path_in_dir("deep.st"), &a.m, a.host, &d), ST_RUNTIME);
	assert_non_null(strstr(d.msg, "unexpected tensor 'net3.weight': --layers has net1 to net2"));
	memset(&d, 0, sizeof d); /* a diag keeps its first message */
	assert_int_equal(checkpoint_read_weights(path_in_dir("w.st"), &deep.m, deep.host, &d), ST_RUNTIME);
	assert_non_null(strstr(d.msg, "no tensor 'net3.weight'"));
	memset(&d, 0, sizeof d);
	assert_int_equal(checkpoint_read_weights(path_in_dir("w.st"), &wide.m, wide.host, &d), ST_RUNTIME);
	assert_non_null(strstr(d.msg, "tensor 'net1.weight' has the wrong shape; --layers needs [5, 4]"));
	rig_free(&a);
	rig_free(&deep);
	rig_free(&wide);
}

static void test_config_diff_names_every_differing_or_missing_line_flags_first(void **state)
{
	char h[64], w[64];

	assert_int_equal(checkpoint_config_diff("--a=1\n--b=2\n", "--b=2\n--a=1\n", h, w, sizeof h), 0);
	assert_int_equal(checkpoint_config_diff("--a=1\n--b=2\n", "--a=1\n--b=3\n", h, w, sizeof h), 1);
	assert_string_equal(h, "--b=2");
	assert_string_equal(w, "--b=3");
	assert_int_equal(checkpoint_config_diff("--a=1\n", "--a=1\n--c=4\n", h, w, sizeof h), 1);
	assert_string_equal(h, "(no --c)");
	assert_string_equal(w, "--c=4");
	/* A changed --loss changes the data line's target width: the flag comes first. */
	assert_int_equal(checkpoint_config_diff("data=synthetic 40 x (10, 5)\n--loss=mse\n--lr=1\n",
						"data=synthetic 40 x (10, 1)\n--loss=cross-entropy\n--lr=1\n",
						h, w, sizeof h), 2);
	assert_string_equal(h, "--loss=mse, data=synthetic 40 x (10, 5)");
	assert_string_equal(w, "--loss=cross-entropy, data=synthetic 40 x (10, 1)");
	/* What does not fit ends the list with ", ...". */
	assert_int_equal(checkpoint_config_diff("--a=1\n--b=2\n", "--a=1111111111\n--b=2222222222\n", h, w, 20),
			 2);
	assert_string_equal(w, "--a=1111111111, ...");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_checkpoint_round_trips_weights_momentum_and_position),
		cmocka_unit_test(test_checkpoint_without_momentum_loads_zero_momentum),
		cmocka_unit_test(test_checkpoint_refuses_another_configuration_naming_the_flag),
		cmocka_unit_test(test_checkpoint_detects_corrupt_tensor_data),
		cmocka_unit_test(test_checkpoint_is_not_written_from_non_finite_state),
		cmocka_unit_test(test_checkpoint_keeps_the_last_k_numbered_copies),
		cmocka_unit_test(test_numbered_step_parses_any_digit_count),
		cmocka_unit_test(test_position_fits_the_epochs_length_and_itself),
		cmocka_unit_test(test_rotation_reads_the_kept_checkpoints_once),
		cmocka_unit_test(test_rotation_never_replaces_another_runs_file),
		cmocka_unit_test(test_init_reads_the_weights_of_save_and_of_a_checkpoint),
		cmocka_unit_test(test_init_is_strict_about_names_and_shapes),
		cmocka_unit_test(test_config_diff_names_every_differing_or_missing_line_flags_first),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
