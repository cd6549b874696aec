/* test_options.c - the command-line contract: defaults, spellings, values, errors. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run/options.h"

/* Parse a NULL-terminated list of arguments (argv[0] added). */
static enum status parse(struct options *o, struct diag *d, ...)
{
	char *argv[64];
	int argc = 0;
	va_list ap;
	char *a;

	argv[argc++] = "ddptrain";
	va_start(ap, d);
	while ((a = va_arg(ap, char *)) != NULL)
		argv[argc++] = a;
	va_end(ap);
	argv[argc] = NULL;
	memset(d, 0, sizeof *d);
	return options_parse(o, argc, argv, d);
}

static void test_options_defaults_are_the_seed_toymodel(void **state)
{
	struct options o;
	struct diag d;

	assert_int_equal(parse(&o, &d, NULL), ST_OK);
	assert_int_equal(o.nlayers, 2);
	assert_int_equal(o.widths[0], 10);
	assert_int_equal(o.widths[1], 10);
	assert_int_equal(o.widths[2], 5);
	assert_int_equal(o.batch_size, 20);
	assert_true(o.lr == 0.001);
	assert_true(o.momentum == 0.0 && o.weight_decay == 0.0);
	assert_int_equal(o.grad_accum, 1);
	assert_int_equal(o.shuffle, 1);
	assert_int_equal(o.drop_last, 0);
	assert_int_equal(o.overlap, 1);
	assert_int_equal(o.mode, MODE_DDP);
	assert_int_equal(o.device, DEVICE_AUTO);
	assert_int_equal(o.comm, COMM_AUTO);
	assert_true(o.bucket_mb == 25.0);
	assert_int_equal(o.max_steps, 0);
}

static void test_options_accept_both_value_spellings(void **state)
{
	struct options o;
	struct diag d;

	assert_int_equal(parse(&o, &d, "--batch-size=7", "--lr", "0.5", "--layers", "3,4,5,6",
			       "--seed=9", "--no-shuffle", "--drop-last", "--no-overlap",
			       "--momentum", "0.9", "--weight-decay=0.01", "--grad-accum", "3",
			       "--mode=ddp", "--device", "cpu", "--backend=mpi", NULL),
			 ST_OK);
	assert_int_equal(o.batch_size, 7);
	assert_true(o.lr == 0.5);
	assert_int_equal(o.nlayers, 3);
	assert_int_equal(o.widths[3], 6);
	assert_int_equal(o.seed, 9);
	assert_int_equal(o.shuffle, 0);
	assert_int_equal(o.drop_last, 1);
	assert_int_equal(o.overlap, 0);
	assert_true(o.momentum == 0.9);
	assert_true(o.weight_decay == 0.01);
	assert_int_equal(o.grad_accum, 3);
	assert_int_equal(o.device, DEVICE_CPU);
	assert_int_equal(o.comm, COMM_MPI);
}

static void test_options_last_shuffle_flag_wins(void **state)
{
	struct options o;
	struct diag d;

	assert_int_equal(parse(&o, &d, "--no-shuffle", "--shuffle", NULL), ST_OK);
	assert_int_equal(o.shuffle, 1);
}

static void test_options_unknown_flag_is_a_usage_error(void **state)
{
	struct options o;
	struct diag d;

	assert_int_equal(parse(&o, &d, "--bogus", NULL), ST_USAGE);
	assert_non_null(strstr(d.msg, "unknown option '--bogus'"));
	assert_int_equal(parse(&o, &d, "-x", NULL), ST_USAGE);
	assert_non_null(strstr(d.msg, "unknown option '-x'"));
}

static void test_options_missing_value_names_the_flag(void **state)
{
	struct options o;
	struct diag d;

	assert_int_equal(parse(&o, &d, "--lr", NULL), ST_USAGE);
	assert_non_null(strstr(d.msg, "--lr"));
	assert_non_null(strstr(d.msg, "needs a value"));
}

/* --lr=0 as PyTorch takes it (a pipeline check that leaves the weights); -0 is 0. */
static void test_options_accept_a_zero_learning_rate(void **state)
{
	struct options o;
	struct diag d;

	assert_int_equal(parse(&o, &d, "--lr=0", NULL), ST_OK);
	assert_true(o.lr == 0.0);
	assert_int_equal(parse(&o, &d, "--lr=-0", NULL), ST_OK);
	assert_true(o.lr == 0.0 && !signbit(o.lr));
}

static void test_options_reject_bad_numbers(void **state)
{
	struct options o;
	struct diag d;

	assert_int_equal(parse(&o, &d, "--batch-size=0", NULL), ST_USAGE);
	assert_non_null(strstr(d.msg, "--batch-size"));
	assert_int_equal(parse(&o, &d, "--batch-size=12x", NULL), ST_USAGE);
	assert_non_null(strstr(d.msg, "not an integer"));
	assert_int_equal(parse(&o, &d, "--lr=-0.001", NULL), ST_USAGE);
	assert_int_equal(parse(&o, &d, "--lr=nan", NULL), ST_USAGE);
	assert_int_equal(parse(&o, &d, "--lr=-1", NULL), ST_USAGE);
	assert_int_equal(parse(&o, &d, "--momentum=1.5", NULL), ST_USAGE);
	assert_int_equal(parse(&o, &d, "--weight-decay=-0.1", NULL), ST_USAGE);
	assert_int_equal(parse(&o, &d, "--epochs=0", NULL), ST_USAGE);
	assert_int_equal(parse(&o, &d, "--grad-accum=0", NULL), ST_USAGE);
	assert_int_equal(parse(&o, &d, "--samples=0", NULL), ST_USAGE);
	assert_int_equal(parse(&o, &d, "--bucket-mb=0", NULL), ST_USAGE);
	assert_int_equal(parse(&o, &d, "--max-steps=-1", NULL), ST_USAGE);
	assert_int_equal(parse(&o, &d, "--seed=99999999999999999999999", NULL), ST_USAGE);
}

static void test_options_reject_bad_layers(void **state)
{
	struct options o;
	struct diag d;

	assert_int_equal(parse(&o, &d, "--layers=10", NULL), ST_USAGE);
	assert_non_null(strstr(d.msg, "at least two widths"));
	assert_int_equal(parse(&o, &d, "--layers=10,,5", NULL), ST_USAGE);
	assert_int_equal(parse(&o, &d, "--layers=10,0,5", NULL), ST_USAGE);
	assert_int_equal(parse(&o, &d, "--layers=10,5,", NULL), ST_USAGE);
	assert_int_equal(parse(&o, &d, "--layers=a,b", NULL), ST_USAGE);
	assert_int_equal(parse(&o, &d, "--layers=", NULL), ST_USAGE);
}

static void test_options_reject_unknown_choices(void **state)
{
	struct options o;
	struct diag d;

	assert_int_equal(parse(&o, &d, "--mode=fsdp", NULL), ST_USAGE);
	assert_non_null(strstr(d.msg, "ddp|dp"));
	assert_int_equal(parse(&o, &d, "--device=tpu", NULL), ST_USAGE);
	assert_int_equal(parse(&o, &d, "--backend=gloo", NULL), ST_USAGE);
}

static void test_options_inputs_need_targets(void **state)
{
	struct options o;
	struct diag d;

	assert_int_equal(parse(&o, &d, "--inputs=x.npy", NULL), ST_USAGE);
	assert_non_null(strstr(d.msg, "--inputs given without --targets"));
	assert_int_equal(parse(&o, &d, "--targets=y.npy", NULL), ST_USAGE);
	assert_int_equal(parse(&o, &d, "--inputs=x.npy", "--targets=y.npy", NULL), ST_OK);
}

static void test_options_stray_argument_is_an_error(void **state)
{
	struct options o;
	struct diag d;

	assert_int_equal(parse(&o, &d, "extra", NULL), ST_USAGE);
	assert_non_null(strstr(d.msg, "unexpected argument 'extra'"));
}

static void test_options_help_and_version_are_flags(void **state)
{
	struct options o;
	struct diag d;

	assert_int_equal(parse(&o, &d, "--help", NULL), ST_OK);
	assert_int_equal(o.help, 1);
	assert_int_equal(parse(&o, &d, "-V", NULL), ST_OK);
	assert_int_equal(o.version, 1);
}

static void test_options_format_widths_round_trips(void **state)
{
	struct options o;
	struct diag d;
	char buf[64];

	assert_int_equal(parse(&o, &d, "--layers=1024,512,3", NULL), ST_OK);
	options_format_widths(&o, buf, sizeof buf);
	assert_string_equal(buf, "1024,512,3");
}

/* Long flags may be abbreviated to a unique prefix (getopt_long's rule, documented in
 * --help and the man page); a prefix of several flags is refused, naming them. */
static void test_options_unique_prefix_means_the_flag(void **state)
{
	struct options o;
	struct diag d;

	assert_int_equal(parse(&o, &d, "--epoch=5", "--batch", "7", "--no-s", NULL), ST_OK);
	assert_int_equal(o.epochs, 5);
	assert_int_equal(o.batch_size, 7);
	assert_int_equal(o.shuffle, 0);
	assert_int_equal(parse(&o, &d, "--che=x", NULL), ST_USAGE);
	assert_string_equal(d.msg, "option '--che' is ambiguous: it abbreviates --checkpoint, --checkpoint-every, --check-replicas (spell it out)");
	assert_int_equal(parse(&o, &d, "--no", NULL), ST_USAGE);
	assert_non_null(strstr(d.msg, "'--no' is ambiguous: it abbreviates --no-shuffle, --no-overlap"));
	/* an exact name wins over the longer flags it is a prefix of */
	assert_int_equal(parse(&o, &d, "--checkpoint=c.st", NULL), ST_OK);
	assert_string_equal(o.checkpoint, "c.st");
}

static void test_options_switch_given_a_value_is_refused(void **state)
{
	struct options o;
	struct diag d;

	assert_int_equal(parse(&o, &d, "--quiet=1", NULL), ST_USAGE);
	assert_string_equal(d.msg, "--quiet takes no value (see ddptrain --help)");
}

/* Every "(default: X)" of --help is what is in effect: giving --flag=X changes nothing,
 * a switch shown "on" is on, one shown "off" changes something when given. */
static void test_options_help_shows_the_defaults_in_effect(void **state)
{
	struct options def, o;
	struct diag d;
	char *text = NULL, *line, *save = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	int checked = 0;

	assert_non_null(f);
	options_print_help(f);
	fclose(f);
	assert_non_null(strstr(text, "3 stopped by a signal"));
	assert_int_equal(parse(&def, &d, NULL), ST_OK);
	for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
		char flag[64], arg[160], *dv = strstr(line, "(default: ");
		int n = 0;

		if (dv == NULL || sscanf(line, " --%63[a-z0-9-]%n", flag, &n) != 1)
			continue;
		dv += strlen("(default: ");
		dv[strcspn(dv, ")")] = '\0';
		if (line[n] == '=') {
			snprintf(arg, sizeof arg, "--%s=%s", flag, dv);
			assert_int_equal(parse(&o, &d, arg, NULL), ST_OK);
			assert_memory_equal(&o, &def, sizeof o);
		} else {
			snprintf(arg, sizeof arg, "--%s", flag);
			assert_int_equal(parse(&o, &d, arg, NULL), ST_OK);
			if (strcmp(dv, "on") == 0)
				assert_memory_equal(&o, &def, sizeof o);
			else
				assert_memory_not_equal(&o, &def, sizeof o);
		}
		checked++;
	}
	assert_true(checked >= 20);
	free(text);
}

static void test_options_settings_text_comes_from_the_table_and_parses_back(void **state)
{
	struct options o, again;
	struct diag d;
	char text[2048] = "", *argv[64], *line;
	int argc = 0;

	assert_int_equal(parse(&o, &d, "--layers=8,4,2", "--lr=0.05", "--momentum=0.9",
			       "--no-shuffle", "--mode=dp", "--epochs=3", NULL), ST_OK);
	options_format_settings(&o, OPT_SCOPE_RESUME, text, sizeof text);
	assert_string_equal(text, "--layers=8,4,2\n--batch-size=20\n--loss=mse\n--optimizer=sgd\n"
				  "--lr=0.05\n--momentum=0.9\n--nesterov=0\n--weight-decay=0\n"
				  "--betas=0.9,0.999\n--eps=1e-08\n--lr-schedule=constant\n"
				  "--warmup-steps=0\n--clip-grad-norm=0\n--grad-accum=1\n--seed=0\n"
				  "--shuffle=0\n--drop-last=0\n--mode=dp\n");
	/* The run scope adds the rest, after what is already in the buffer. */
	options_format_settings(&o, OPT_SCOPE_RUN, text, sizeof text);
	assert_non_null(strstr(text, "--mode=dp\n--epochs=3\n--max-steps=0\n"));
	assert_non_null(strstr(text, "--no-overlap=0\n"));
	/* The resume lines are options: parsed again they give the same settings. */
	text[0] = '\0';
	options_format_settings(&o, OPT_SCOPE_RESUME, text, sizeof text);
	argv[argc++] = "ddptrain";
	for (line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n"))
		if (strncmp(line, "--shuffle=", 10) != 0 && strncmp(line, "--drop-last=", 12) != 0 &&
		    strncmp(line, "--nesterov=", 11) != 0)
			argv[argc++] = line; /* switches: printed as 0/1, set by their own flags */
	argv[argc++] = "--no-shuffle";
	argv[argc] = NULL;
	memset(&d, 0, sizeof d);
	assert_int_equal(options_parse(&again, argc, argv, &d), ST_OK);
	assert_int_equal(again.nlayers, 2);
	assert_true(again.lr == o.lr && again.momentum == o.momentum);
	assert_int_equal(again.mode, MODE_DP);
	assert_int_equal(again.shuffle, 0);
	/* A schedule brings the run's length into the resume text (its shape depends on it);
	 * frozen layers are listed as --freeze takes them. */
	assert_int_equal(parse(&o, &d, "--layers=8,4,4,2", "--lr-schedule=cosine", "--epochs=7",
			       "--freeze=3,1", "--optimizer=adamw", "--betas=0.8,0.99", NULL), ST_OK);
	text[0] = '\0';
	options_format_settings(&o, OPT_SCOPE_RESUME, text, sizeof text);
	assert_non_null(strstr(text, "--epochs=7\n--max-steps=0\n--loss=mse\n--optimizer=adamw\n"));
	assert_non_null(strstr(text, "--betas=0.8,0.99\n"));
	assert_non_null(strstr(text, "--lr-schedule=cosine\n"));
	assert_non_null(strstr(text, "--freeze=1,3\n"));
}

/* The file column of the option table: every file flag's value is in the full settings
 * text (no setting is missing or "?"), every output is in the text the ranks compare, an
 * empty name is refused for any of them, and options_paths lists the outputs first. */
static void test_options_file_flags_come_from_the_table(void **state)
{
	struct options o;
	struct diag d;
	struct opt_file f[OPT_MAX_FILES];
	char text[8192] = "";
	int n;

	assert_int_equal(parse(&o, &d, "--inputs=x.npy", "--targets=y.npy", "--val-inputs=vx.npy",
			       "--val-targets=vy.npy", "--save-best=best.st", "--init=i.st", "--save=s.st",
			       "--checkpoint=c.st", "--metrics=m.jsonl", "--trace=t.json", "--prometheus=p.prom",
			       "--prometheus-every=5", NULL),
			 ST_OK);
	options_format_settings(&o, OPT_SCOPE_ALL, text, sizeof text);
	assert_null(strstr(text, "=?\n"));
	assert_non_null(strstr(text, "--trace=t.json\n"));
	assert_non_null(strstr(text, "--prometheus=p.prom\n--prometheus-every=5\n"));
	assert_non_null(strstr(text, "--val-targets=vy.npy\n"));
	text[0] = '\0';
	options_format_settings(&o, OPT_SCOPE_RUN, text, sizeof text);
	assert_non_null(strstr(text, "--prometheus=p.prom\n"));
	assert_non_null(strstr(text, "--save=s.st\n"));
	assert_null(strstr(text, "--inputs=")); /* inputs are compared by their contents */
	n = options_paths(&o, f);
	assert_int_equal(n, 12);
	assert_string_equal(f[0].flag, "save");
	assert_int_equal(f[0].kind, OPT_PATH_SAVE);
	assert_int_equal(f[1].kind, OPT_PATH_LOG);
	assert_int_equal(f[n - 1].kind, OPT_PATH_IN);
	for (int i = 0; i < n; i++) {
		const char *partner = strcmp(f[i].flag, "inputs") == 0    ? "--targets=y.npy"
				      : strcmp(f[i].flag, "targets") == 0 ? "--inputs=x.npy"
									  : NULL;
		char flag[64];

		snprintf(flag, sizeof flag, "--%s=", f[i].flag);
		assert_int_equal(parse(&o, &d, flag, partner, NULL), ST_USAGE);
		assert_non_null(strstr(d.msg, "empty file name"));
		assert_non_null(strstr(d.msg, f[i].flag));
	}
}

/* The new flags' combinations that the flags alone decide. */
static void test_options_refuse_contradictory_trainer_settings(void **state)
{
	struct options o;
	struct diag d;

	assert_int_equal(parse(&o, &d, "--freeze=2", "--layers=4,4", NULL), ST_USAGE);
	assert_non_null(strstr(d.msg, "--freeze: layer 2 is not one of the 1 layers"));
	assert_int_equal(parse(&o, &d, "--layers=4,4,4", "--freeze=1,2,1", NULL), ST_USAGE);
	assert_non_null(strstr(d.msg, "freezes every layer"));
	assert_int_equal(parse(&o, &d, "--freeze=1,", NULL), ST_USAGE);
	assert_int_equal(parse(&o, &d, "--betas=0.9", NULL), ST_USAGE);
	assert_int_equal(parse(&o, &d, "--eps=0", NULL), ST_USAGE);
	assert_int_equal(parse(&o, &d, "--val-inputs=x.npy", "--inputs=a.npy", "--targets=b.npy", NULL),
			 ST_USAGE);
	assert_non_null(strstr(d.msg, "--val-inputs given without --val-targets"));
	assert_int_equal(parse(&o, &d, "--val-inputs=x.npy", "--val-targets=y.npy", NULL), ST_USAGE);
	assert_non_null(strstr(d.msg, "--val-inputs needs --inputs"));
	assert_int_equal(parse(&o, &d, "--eval-every=5", NULL), ST_USAGE);
	assert_non_null(strstr(d.msg, "--eval-every needs a validation set"));
	assert_int_equal(parse(&o, &d, "--optimizer=adamw", "--nesterov", NULL), ST_USAGE);
	assert_int_equal(parse(&o, &d, "--val-samples=10", "--eval-every=5", "--save-best=b.st",
			       "--loss=cross-entropy", "--freeze=1", "--clip-grad-norm=1", NULL), ST_OK);
	assert_true(o.frozen[0] && !o.frozen[1]);
	/* --check-replicas is on by default (1000), also with --mode=dp, which has nothing to
	 * compare: there it leaves the default alone and refuses another N; 0 is always fine. */
	assert_int_equal(parse(&o, &d, NULL), ST_OK);
	assert_int_equal(o.check_replicas, 1000);
	assert_int_equal(parse(&o, &d, "--mode=dp", NULL), ST_OK);
	assert_int_equal(parse(&o, &d, "--mode=dp", "--check-replicas=1000", NULL), ST_OK);
	assert_int_equal(parse(&o, &d, "--mode=dp", "--check-replicas=0", NULL), ST_OK);
	assert_int_equal(parse(&o, &d, "--mode=dp", "--check-replicas=5", NULL), ST_USAGE);
	assert_non_null(strstr(d.msg, "--check-replicas applies to --mode=ddp"));
	assert_int_equal(parse(&o, &d, "--check-replicas=-1", NULL), ST_USAGE);
	assert_non_null(strstr(d.msg, "--check-replicas: -1 is out of range"));
}

/* One rule for every numeric flag (issue 30): a number is written without white space,
 * before as after. The flags come from the table: each line of the full settings record
 * whose value is a number that parses back (switches, shown 0/1, take no value). The
 * refusal names the flag and says it as "1 " always was said. */
static void test_options_every_numeric_flag_refuses_white_space_around_its_number(void **state)
{
	struct options o;
	struct diag d;
	char text[8192] = "", *line, *save = NULL;
	int checked = 0, saw_zero = 0, saw_log_seconds = 0;

	assert_int_equal(parse(&o, &d, NULL), ST_OK);
	options_format_settings(&o, OPT_SCOPE_ALL, text, sizeof text);
	for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
		static const char *const forms[] = {"%s= %s", "%s=\t%s", "%s=%s "};
		char *eq = strchr(line, '='), *end, flag[64], arg[160], said[3][256];

		if (eq == NULL || eq[1] == '\0')
			continue;
		(void)strtod(eq + 1, &end);
		if (*end != '\0' || parse(&o, &d, line, NULL) != ST_OK)
			continue; /* a choice, a list, a file, or a switch */
		snprintf(flag, sizeof flag, "%.*s", (int)(eq - line), line);
		for (int f = 0; f < 3; f++) {
			char value[80], *tail;

			snprintf(arg, sizeof arg, forms[f], flag, eq + 1);
			assert_int_equal(parse(&o, &d, arg, NULL), ST_USAGE);
			/* diag_set shows a tab as \t: the tail is what must agree */
			snprintf(value, sizeof value, "%s: '%s' is not ", flag, arg + strlen(flag) + 1);
			if (f != 1)
				assert_memory_equal(d.msg, value, strlen(value));
			assert_non_null(tail = strstr(d.msg, "' is not "));
			assert_memory_equal(d.msg, flag, strlen(flag));
			tail += strlen("' is not ");
			assert_true(strcmp(tail, "an integer") == 0 || strcmp(tail, "a finite number") == 0 ||
				    strcmp(tail, "a size (a whole number of bytes, or one with K, M, G or T)") == 0);
			snprintf(said[f], sizeof said[f], "%s", tail);
		}
		assert_string_equal(said[0], said[2]); /* " 1" in the words of "1 " */
		assert_string_equal(said[1], said[2]);
		saw_zero |= strcmp(flag, "--zero") == 0;
		saw_log_seconds |= strcmp(flag, "--log-seconds") == 0;
		checked++;
	}
	assert_true(checked >= 20);
	assert_true(saw_zero && saw_log_seconds);
	/* The cases, and the plain spellings still taken. */
	assert_int_equal(parse(&o, &d, "--zero= 1", NULL), ST_USAGE);
	assert_string_equal(d.msg, "--zero: ' 1' is not an integer");
	assert_int_equal(parse(&o, &d, "--log-seconds= 5", NULL), ST_USAGE);
	assert_string_equal(d.msg, "--log-seconds: ' 5' is not a finite number");
	assert_int_equal(parse(&o, &d, "--zero=1", "--log-seconds=5", NULL), ST_OK);
	assert_int_equal(o.zero, 1);
	assert_true(o.log_seconds == 5.0);
}

/* The structured flags hold numbers too: the same rule inside their lists. */
/* --max-memory: bytes, or K, M, G, T as powers of 1024, written back in the largest unit
 * that is exact; anything else, or too large, refused naming the flag. */
static void test_options_max_memory_takes_binary_units(void **state)
{
	static const struct { const char *arg; uint64_t bytes; const char *back; } ok[] = {
		{"--max-memory=0", 0, "0"}, {"--max-memory=100", 100, "100"},
		{"--max-memory=12M", 12ULL << 20, "12M"}, {"--max-memory=1536k", 1536ULL << 10, "1536K"},
		{"--max-memory=2048M", 2ULL << 30, "2G"}, {"--max-memory=3T", 3ULL << 40, "3T"},
	};
	static const char *const bad[] = {"--max-memory=12Q", "--max-memory=M", "--max-memory=1.5G",
					  "--max-memory=12MB", "--max-memory=-1", "--max-memory=99999999T"};
	struct options o;
	struct diag d;
	char buf[32];

	(void)state;
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		assert_int_equal(parse(&o, &d, ok[i].arg, NULL), ST_OK);
		assert_true(o.max_memory == ok[i].bytes);
		options_format_size(o.max_memory, buf, sizeof buf);
		assert_string_equal(buf, ok[i].back);
	}
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		assert_int_equal(parse(&o, &d, bad[i], NULL), ST_USAGE);
		assert_memory_equal(d.msg, "--max-memory: '", strlen("--max-memory: '"));
	}
}

static void test_options_structured_flags_refuse_white_space_around_their_numbers(void **state)
{
	static const char *const refused[][2] = {
		{"--layers= 10,10,5", "--layers"}, {"--layers=10, 10,5", "--layers"},
		{"--betas= 0.9,0.999", "--betas"}, {"--betas=0.9, 0.999", "--betas"},
		{"--freeze= 1", "--freeze"},       {"--freeze=1, 2", "--freeze"},
		{"--trace-steps= 3:5", "--trace-steps"}, {"--trace-steps=3: 5", "--trace-steps"},
		{"--replicas= 2", "--replicas"},
	};
	struct options o;
	struct diag d;

	for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
		assert_int_equal(parse(&o, &d, "--mode=dp", "--layers=4,4,4,4", refused[i][0], NULL), ST_USAGE);
		assert_memory_equal(d.msg, refused[i][1], strlen(refused[i][1]));
	}
	assert_int_equal(parse(&o, &d, "--mode=dp", "--layers=4,4,4,4", "--betas=0.8,0.9", "--freeze=1,2",
			       "--trace-steps=3:5", "--replicas=2", NULL), ST_OK);
	assert_true(o.frozen[0] && o.frozen[1] && !o.frozen[2]);
	assert_int_equal(o.trace_lo, 3);
	assert_int_equal(o.trace_hi, 5);
	assert_int_equal(o.replicas, 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_options_defaults_are_the_seed_toymodel),
		cmocka_unit_test(test_options_refuse_contradictory_trainer_settings),
		cmocka_unit_test(test_options_accept_both_value_spellings),
		cmocka_unit_test(test_options_last_shuffle_flag_wins),
		cmocka_unit_test(test_options_unknown_flag_is_a_usage_error),
		cmocka_unit_test(test_options_missing_value_names_the_flag),
		cmocka_unit_test(test_options_accept_a_zero_learning_rate),
		cmocka_unit_test(test_options_reject_bad_numbers),
		cmocka_unit_test(test_options_reject_bad_layers),
		cmocka_unit_test(test_options_reject_unknown_choices),
		cmocka_unit_test(test_options_inputs_need_targets),
		cmocka_unit_test(test_options_stray_argument_is_an_error),
		cmocka_unit_test(test_options_help_and_version_are_flags),
		cmocka_unit_test(test_options_format_widths_round_trips),
		cmocka_unit_test(test_options_unique_prefix_means_the_flag),
		cmocka_unit_test(test_options_switch_given_a_value_is_refused),
		cmocka_unit_test(test_options_help_shows_the_defaults_in_effect),
		cmocka_unit_test(test_options_settings_text_comes_from_the_table_and_parses_back),
		cmocka_unit_test(test_options_file_flags_come_from_the_table),
		cmocka_unit_test(test_options_every_numeric_flag_refuses_white_space_around_its_number),
		cmocka_unit_test(test_options_structured_flags_refuse_white_space_around_their_numbers),
		cmocka_unit_test(test_options_max_memory_takes_binary_units),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
