/*
 * options.c - the option table, getopt_long parsing, value checks and --help.
 *
 * Every flag appears exactly once, in opt_table: its spelling, argument,
 * default and help text. getopt_long's table, the defaults in effect and the
 * --help text are all generated from it; tests/unit/test_options checks that each
 * default --help shows is the one in effect, and tests/manpage.sh that
 * man/ddptrain.1 lists the same flags with the same defaults.
 *
 * Long flags may be abbreviated to a unique prefix (getopt_long's rule, kept
 * and documented); a prefix of several flags is refused, naming them.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "core/build.h"   /* build_print */
#include "run/options.h"
#include "observe/trace.h"  /* trace_parse_steps, TRACE_MAX_THREADS */

_Static_assert(TRACE_MAX_THREADS >= OPT_MAX_REPLICAS, "one trace buffer per dp replica");

const char *const options_mode_names[] = {"ddp", "dp", NULL};
const char *const options_device_names[] = {"auto", "cpu", "cuda", NULL};
const char *const options_comm_names[] = {"auto", "mpi", "nccl", NULL};
/* In enum comm_wire's order: none is float32. */
const char *const options_compress_names[] = {"none", "fp16", "bf16", NULL};

enum opt_key {
	K_HELP = 'h',
	K_VERSION = 'V',
	K_LAYERS = 256,
	K_BATCH, K_EPOCHS, K_MAX_STEPS, K_LR, K_MOMENTUM, K_WD, K_ACCUM,
	K_SEED, K_SAMPLES, K_INPUTS, K_TARGETS, K_SHUFFLE, K_NO_SHUFFLE,
	K_DROP_LAST, K_INIT, K_SAVE, K_MODE, K_DEVICE, K_BACKEND, K_BUCKET,
	K_NO_OVERLAP, K_LOG_EVERY, K_QUIET, K_METRICS, K_REPLICAS, K_TF32,
	K_CHECKPOINT, K_CKPT_EVERY, K_KEEP, K_RESUME, K_TIMEOUT,
	K_LOSS, K_OPTIM, K_BETAS, K_EPS, K_NESTEROV, K_SCHED, K_WARMUP, K_CLIP, K_FREEZE,
	K_VAL_INPUTS, K_VAL_TARGETS, K_VAL_SAMPLES, K_EVAL_EVERY, K_SAVE_BEST,
	K_TRACE, K_TRACE_STEPS, K_STRAGGLER_WARN, K_PROMETHEUS, K_PROM_EVERY, K_LOG_SECONDS,
	K_ZERO, K_COMPRESS,
};

struct opt_def {
	const char *name;    /* long flag without dashes */
	int key;
	const char *arg;     /* metavariable, or NULL for a switch */
	const char *def;     /* default as printed by --help and the man page, or NULL */
	const char *help;
	int scope;           /* OPT_SCOPE_*: in the resume and/or configuration text */
	enum opt_path path;  /* a file: what it holds (OPT_PATH_NONE: not a file) */
	size_t field;        /* a file: offsetof its const char * in struct options */
};

#define R OPT_SCOPE_RESUME
#define C OPT_SCOPE_RUN
/* In the resume text only with a schedule, whose shape depends on the run's length. */
#define S OPT_SCOPE_SCHEDULE
/* A file flag: what the file holds, and where struct options keeps its name. */
#define FILE_(kind, member) kind, offsetof(struct options, member)
#define NOFILE OPT_PATH_NONE, 0

static const struct opt_def opt_table[] = {
	{"layers", K_LAYERS, "W0,W1,...", "10,10,5", "MLP widths: Linear layers with ReLU between them", R, NOFILE},
	{"batch-size", K_BATCH, "N", "20", "samples per replica per step", R, NOFILE},
	{"epochs", K_EPOCHS, "N", "50", "passes over the data set", C | S, NOFILE},
	{"max-steps", K_MAX_STEPS, "N", "0", "stop after N optimizer steps (0 = no limit)", C | S, NOFILE},
	{"loss", K_LOSS, "mse|cross-entropy", "mse", "mean squared error, or softmax cross-entropy on the last layer's logits against integer class labels", R, NOFILE},
	{"optimizer", K_OPTIM, "sgd|adamw", "sgd", "torch.optim.SGD or torch.optim.AdamW", R, NOFILE},
	{"lr", K_LR, "F", "0.001", "peak learning rate", R, NOFILE},
	{"momentum", K_MOMENTUM, "F", "0", "SGD momentum (dampening 0)", R, NOFILE},
	{"nesterov", K_NESTEROV, NULL, NULL, "SGD with Nesterov momentum (needs --momentum; default: off)", R, NOFILE},
	{"weight-decay", K_WD, "F", "0", "SGD: L2 penalty added to the gradient; AdamW: decoupled decay", R, NOFILE},
	{"betas", K_BETAS, "B1,B2", "0.9,0.999", "AdamW's moment decay rates", R, NOFILE},
	{"eps", K_EPS, "F", "1e-08", "AdamW's denominator term", R, NOFILE},
	{"lr-schedule", K_SCHED, "constant|linear|cosine", "constant", "lr multiplier after the warmup: 1, a line to 0, or half a cosine to 0 at the last step", R, NOFILE},
	{"warmup-steps", K_WARMUP, "K", "0", "lr rises linearly from 0 over the first K optimizer steps", R, NOFILE},
	{"clip-grad-norm", K_CLIP, "MAX", "0", "scale the gradient to a 2-norm of at most MAX before each step (0 = off)", R, NOFILE},
	{"freeze", K_FREEZE, "L1,L2,...", NULL, "layers (1-based) not trained: no update, no optimizer state, not all-reduced", R, NOFILE},
	{"grad-accum", K_ACCUM, "K", "1", "micro-batches per optimizer step (all-reduce every K)", R, NOFILE},
	{"seed", K_SEED, "N", "0", "seed for weight init, synthetic data and shuffling", R, NOFILE},
	{"samples", K_SAMPLES, "N", "4000", "size of the synthetic data set", 0, NOFILE},
	{"inputs", K_INPUTS, "X.npy", NULL, "train on these inputs (2-D float32 or float64)", 0, FILE_(OPT_PATH_IN, inputs)},
	{"targets", K_TARGETS, "Y.npy", NULL, "targets for --inputs, one row per input row (cross-entropy: integer labels, shape (N,))", 0, FILE_(OPT_PATH_IN, targets)},
	{"val-inputs", K_VAL_INPUTS, "X.npy", NULL, "validation inputs, evaluated every epoch, every --eval-every steps and at the end", 0, FILE_(OPT_PATH_IN, val_inputs)},
	{"val-targets", K_VAL_TARGETS, "Y.npy", NULL, "targets for --val-inputs", 0, FILE_(OPT_PATH_IN, val_targets)},
	{"val-samples", K_VAL_SAMPLES, "N", "0", "size of the synthetic validation set (0 = none)", C, NOFILE},
	{"eval-every", K_EVAL_EVERY, "N", "0", "also evaluate every N optimizer steps (0 = at epoch ends only)", C, NOFILE},
	{"save-best", K_SAVE_BEST, "FILE", NULL, "write the weights with the best validation loss as safetensors", C, FILE_(OPT_PATH_BEST, save_best)},
	{"shuffle", K_SHUFFLE, NULL, "on", "reshuffle the data every epoch (DistributedSampler)", R, NOFILE},
	{"no-shuffle", K_NO_SHUFFLE, NULL, NULL, "keep the data in file order", 0, NOFILE},
	{"drop-last", K_DROP_LAST, NULL, "off", "drop the tail that does not divide evenly over the ranks", R, NOFILE},
	{"init", K_INIT, "FILE", NULL, "start from these safetensors weights instead of random init", C, FILE_(OPT_PATH_IN, init)},
	{"save", K_SAVE, "FILE", NULL, "write the final weights as safetensors (rank 0, atomically)", C, FILE_(OPT_PATH_SAVE, save)},
	{"checkpoint", K_CHECKPOINT, "FILE", NULL, "write a checkpoint here (at the end, every --checkpoint-every steps, on a stop signal)", C, FILE_(OPT_PATH_CHECKPOINT, checkpoint)},
	{"checkpoint-every", K_CKPT_EVERY, "N", "0", "optimizer steps between checkpoints (0 = only at the end and on a stop)", C, NOFILE},
	{"keep-checkpoints", K_KEEP, "K", "0", "also keep the last K checkpoints as FILE.step-NNNNNNNN (0 = none)", C, NOFILE},
	{"resume", K_RESUME, "FILE", NULL, "continue from this checkpoint: weights, momentum, step and data position", C, FILE_(OPT_PATH_IN, resume)},
	{"timeout", K_TIMEOUT, "SECONDS", "600", "give up when a collective waits this long for another rank (0 = never)", 0, NOFILE},
	{"mode", K_MODE, "ddp|dp", "ddp", "ddp: one process per replica; dp: threads in one process", R, NOFILE},
	{"replicas", K_REPLICAS, "G", "auto", "--mode=dp worker threads, one replica each (auto: one per GPU, else 2)", C, NOFILE},
	{"device", K_DEVICE, "auto|cpu|cuda", "auto", "where the model runs (auto: a GPU if one is visible, else the CPU)", C, NOFILE},
	{"backend", K_BACKEND, "auto|mpi|nccl", "auto", "how gradients are all-reduced (auto: nccl on GPUs, mpi on the CPU or on a GPU ranks share)", C, NOFILE},
	{"tf32", K_TF32, NULL, "off", "let cuBLAS use TF32 tensor cores (faster; results no longer match float32)", C, NOFILE},
	{"bucket-mb", K_BUCKET, "F", "25", "gradient bucket cap in MiB", C, NOFILE},
	{"zero", K_ZERO, "0|1|2", "0", "ZeRO: shard the optimizer state over the ranks (1), and the gradients too (2)", C, NOFILE},
	{"grad-compress", K_COMPRESS, "none|fp16|bf16", "none", "all-reduce the gradients in 16 bits (PyTorch's fp16/bf16 compress hooks)", C, NOFILE},
	{"no-overlap", K_NO_OVERLAP, NULL, NULL, "all-reduce only after the whole backward", C, NOFILE},
	{"log-every", K_LOG_EVERY, "N", "250", "optimizer steps between progress lines (0 = none)", C, NOFILE},
	{"log-seconds", K_LOG_SECONDS, "SECONDS", "30", "also a progress line after SECONDS without one (0 = by steps only); on a terminal the line is redrawn at least every 0.5 s", C, NOFILE},
	{"quiet", K_QUIET, NULL, NULL, "print errors only", C, NOFILE},
	{"metrics", K_METRICS, "FILE", NULL, "write JSON Lines metrics (one object per logged step)", C, FILE_(OPT_PATH_LOG, metrics)},
	{"trace", K_TRACE, "FILE", NULL, "write a Chrome trace-event timeline of every rank (Perfetto, chrome://tracing)", C, FILE_(OPT_PATH_LOG, trace)},
	{"trace-steps", K_TRACE_STEPS, "A:B", "all", "trace only optimizer steps A to B", C, NOFILE},
	{"straggler-warn", K_STRAGGLER_WARN, "F", "0", "warn when a rank computes F times slower than the median (0 = off)", C, NOFILE},
	{"prometheus", K_PROMETHEUS, "FILE", NULL, "keep a Prometheus textfile of the run's progress up to date", 0, FILE_(OPT_PATH_LOG, prometheus)},
	{"prometheus-every", K_PROM_EVERY, "SECONDS", "10", "seconds between rewrites of the --prometheus file", C, NOFILE},
	{"help", K_HELP, NULL, NULL, "show this help and exit", 0, NOFILE},
	{"version", K_VERSION, NULL, NULL, "show the version and exit", 0, NOFILE},
};
#undef R
#undef C
#undef S
#undef FILE_
#undef NOFILE
#define N_OPTS (sizeof opt_table / sizeof opt_table[0])

static const struct opt_def *find_def(int key)
{
	for (size_t i = 0; i < N_OPTS; i++)
		if (opt_table[i].key == key)
			return &opt_table[i];
	return NULL;
}

/* The file a file flag names in o, or NULL. */
static const char *path_of(const struct options *o, const struct opt_def *od)
{
	return *(const char *const *)(const void *)((const char *)o + od->field);
}

/* Parse a whole decimal integer in [lo, hi]. */
static enum status parse_long(const char *flag, const char *s, long lo, long hi, long *out,
			      struct diag *d)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (*s == '\0' || *end != '\0')
		return diag_set(d, ST_USAGE, "--%s: '%s' is not an integer", flag, s);
	if (errno == ERANGE || v < lo || v > hi)
		return diag_set(d, ST_USAGE, "--%s: %s is out of range [%ld, %ld]", flag, s, lo, hi);
	*out = v;
	return ST_OK;
}

/* Parse a finite number in [lo, hi] (or (lo, hi] when lo_open). */
static enum status parse_double(const char *flag, const char *s, double lo, int lo_open,
				double hi, double *out, struct diag *d)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (*s == '\0' || *end != '\0' || !isfinite(v))
		return diag_set(d, ST_USAGE, "--%s: '%s' is not a finite number", flag, s);
	if (v < lo || (lo_open && v == lo) || v > hi)
		return diag_set(d, ST_USAGE, "--%s: %s is out of range %s%g, %g]", flag, s,
				lo_open ? "(" : "[", lo, hi);
	*out = v == 0 ? 0.0 : v; /* -0 is 0: one spelling in the settings the ranks compare */
	return ST_OK;
}

static enum status parse_choice(const struct opt_def *def, const char *s,
				const char *const *names, int *out, struct diag *d)
{
	for (int i = 0; names[i] != NULL; i++) {
		if (strcmp(s, names[i]) == 0) {
			*out = i;
			return ST_OK;
		}
	}
	return diag_set(d, ST_USAGE, "--%s: '%s' is not one of %s", def->name, s, def->arg);
}

/* "10,10,5" -> widths; at least two widths (one layer), each in [1, 2^20]. */
static enum status parse_layers(struct options *o, const char *s, struct diag *d)
{
	int n = 0;
	const char *p = s;

	while (*p != '\0') {
		char *end;
		long w;

		errno = 0;
		w = strtol(p, &end, 10);
		if (end == p || (*end != ',' && *end != '\0'))
			return diag_set(d, ST_USAGE, "--layers: '%s' is not a comma-separated list of widths", s);
		if (errno == ERANGE || w < 1 || w > (1L << 20))
			return diag_set(d, ST_USAGE, "--layers: width %.*s is out of range [1, 1048576]",
					(int)(end - p), p);
		if (n > OPT_MAX_LAYERS)
			return diag_set(d, ST_USAGE, "--layers: at most %d layers (%d widths)",
					OPT_MAX_LAYERS, OPT_MAX_LAYERS + 1);
		o->widths[n++] = (int)w;
		p = *end == ',' ? end + 1 : end;
		if (*end == ',' && *p == '\0')
			return diag_set(d, ST_USAGE, "--layers: '%s' ends with a comma", s);
	}
	if (n < 2)
		return diag_set(d, ST_USAGE, "--layers: '%s' needs at least two widths (inputs and outputs)", s);
	o->nlayers = n - 1;
	return ST_OK;
}

/* "0.9,0.999": two numbers in [0, 1). */
static enum status parse_betas(struct options *o, const char *s, struct diag *d)
{
	char *end, *end2;
	double b1, b2;

	errno = 0;
	b1 = strtod(s, &end);
	if (end == s || *end != ',')
		return diag_set(d, ST_USAGE, "--betas: '%s' is not two numbers B1,B2", s);
	b2 = strtod(end + 1, &end2);
	if (end2 == end + 1 || *end2 != '\0' || errno == ERANGE)
		return diag_set(d, ST_USAGE, "--betas: '%s' is not two numbers B1,B2", s);
	if (!(b1 >= 0.0 && b1 < 1.0) || !(b2 >= 0.0 && b2 < 1.0))
		return diag_set(d, ST_USAGE, "--betas: %s: each must be in [0, 1)", s);
	o->beta1 = b1;
	o->beta2 = b2;
	return ST_OK;
}

/* "1,3" -> frozen[0], frozen[2]: 1-based layer numbers, as in net1, within --layers. */
static enum status parse_freeze(struct options *o, struct diag *d)
{
	const char *s = o->freeze_arg, *p = s;
	int nfrozen = 0;

	memset(o->frozen, 0, sizeof o->frozen);
	while (*p != '\0') {
		char *end;
		long l;

		errno = 0;
		l = strtol(p, &end, 10);
		if (end == p || (*end != ',' && *end != '\0') || (*end == ',' && end[1] == '\0'))
			return diag_set(d, ST_USAGE, "--freeze: '%s' is not a comma-separated list of layer numbers", s);
		if (errno == ERANGE || l < 1 || l > o->nlayers)
			return diag_set(d, ST_USAGE, "--freeze: layer %.*s is not one of the %d layers of --layers (net1 to net%d)",
					(int)(end - p), p, o->nlayers, o->nlayers);
		nfrozen += !o->frozen[l - 1];
		o->frozen[l - 1] = 1;
		p = *end == ',' ? end + 1 : end;
	}
	if (nfrozen == o->nlayers)
		return diag_set(d, ST_USAGE, "--freeze=%s freezes every layer: nothing would be trained", s);
	return ST_OK;
}

static enum status apply(struct options *o, int key, const char *arg, struct diag *d)
{
	const struct opt_def *def = find_def(key);
	const char *f = def->name;
	long l;
	int c;
	enum status st = ST_OK;

	switch (key) {
	case K_LAYERS: return parse_layers(o, arg, d);
	case K_BATCH: return parse_long(f, arg, 1, 1L << 24, &o->batch_size, d);
	case K_EPOCHS: return parse_long(f, arg, 1, 1L << 30, &o->epochs, d);
	case K_MAX_STEPS: return parse_long(f, arg, 0, LONG_MAX, &o->max_steps, d);
	/* 0 as in PyTorch: the pipeline runs, the weights stay (AdamW's decay is lr x F). */
	case K_LR: return parse_double(f, arg, 0, 0, 1e6, &o->lr, d);
	case K_MOMENTUM: return parse_double(f, arg, 0, 0, 1, &o->momentum, d);
	case K_WD: return parse_double(f, arg, 0, 0, 1e6, &o->weight_decay, d);
	case K_ACCUM: return parse_long(f, arg, 1, 1L << 20, &o->grad_accum, d);
	case K_SEED:
		st = parse_long(f, arg, 0, LONG_MAX, &l, d);
		o->seed = (uint64_t)l;
		return st;
	case K_SAMPLES: return parse_long(f, arg, 1, 1L << 31, &o->samples, d);
	case K_INPUTS: o->inputs = arg; return ST_OK;
	case K_TARGETS: o->targets = arg; return ST_OK;
	case K_SHUFFLE: o->shuffle = 1; return ST_OK;
	case K_NO_SHUFFLE: o->shuffle = 0; return ST_OK;
	case K_DROP_LAST: o->drop_last = 1; return ST_OK;
	case K_INIT: o->init = arg; return ST_OK;
	case K_SAVE: o->save = arg; return ST_OK;
	case K_MODE:
		st = parse_choice(def, arg, options_mode_names, &c, d);
		o->mode = (enum run_mode)c;
		return st;
	case K_DEVICE:
		st = parse_choice(def, arg, options_device_names, &c, d);
		o->device = (enum device_kind)c;
		return st;
	case K_BACKEND:
		st = parse_choice(def, arg, options_comm_names, &c, d);
		o->comm = (enum comm_kind)c;
		return st;
	case K_BUCKET: return parse_double(f, arg, 0, 1, 1 << 20, &o->bucket_mb, d);
	case K_NO_OVERLAP: o->overlap = 0; return ST_OK;
	case K_LOG_EVERY: return parse_long(f, arg, 0, LONG_MAX, &o->log_every, d);
	case K_LOG_SECONDS: return parse_double(f, arg, 0, 0, 1e9, &o->log_seconds, d);
	case K_REPLICAS:
		if (strcmp(arg, "auto") == 0) {
			o->replicas = 0;
			return ST_OK;
		}
		st = parse_long(f, arg, 1, OPT_MAX_REPLICAS, &l, d);
		o->replicas = (int)l;
		return st;
	case K_TF32: o->tf32 = 1; return ST_OK;
	case K_CHECKPOINT: o->checkpoint = arg; return ST_OK;
	case K_CKPT_EVERY: return parse_long(f, arg, 0, LONG_MAX, &o->checkpoint_every, d);
	case K_KEEP: return parse_long(f, arg, 0, 1000000, &o->keep_checkpoints, d);
	case K_RESUME: o->resume = arg; return ST_OK;
	case K_TIMEOUT: return parse_double(f, arg, 0, 0, 1e9, &o->timeout, d);
	case K_LOSS:
		st = parse_choice(def, arg, loss_names, &c, d);
		o->loss = (enum loss_kind)c;
		return st;
	case K_OPTIM:
		st = parse_choice(def, arg, optimizer_names, &c, d);
		o->optimizer = (enum optimizer_kind)c;
		return st;
	case K_BETAS: return parse_betas(o, arg, d);
	case K_EPS: return parse_double(f, arg, 0, 1, 1, &o->eps, d);
	case K_NESTEROV: o->nesterov = 1; return ST_OK;
	case K_SCHED:
		st = parse_choice(def, arg, schedule_names, &c, d);
		o->schedule = (enum lr_schedule)c;
		return st;
	case K_WARMUP: return parse_long(f, arg, 0, LONG_MAX, &o->warmup_steps, d);
	case K_CLIP: return parse_double(f, arg, 0, 0, 1e30, &o->clip_grad_norm, d);
	case K_FREEZE: o->freeze_arg = arg; return ST_OK;
	case K_VAL_INPUTS: o->val_inputs = arg; return ST_OK;
	case K_VAL_TARGETS: o->val_targets = arg; return ST_OK;
	case K_VAL_SAMPLES: return parse_long(f, arg, 0, 1L << 31, &o->val_samples, d);
	case K_EVAL_EVERY: return parse_long(f, arg, 0, LONG_MAX, &o->eval_every, d);
	case K_SAVE_BEST: o->save_best = arg; return ST_OK;
	case K_QUIET: o->quiet = 1; return ST_OK;
	case K_METRICS: o->metrics = arg; return ST_OK;
	case K_TRACE: o->trace = arg; return ST_OK;
	case K_TRACE_STEPS:
		if (strcmp(arg, "all") == 0) {
			o->trace_lo = 1;
			o->trace_hi = 0;
			return ST_OK;
		}
		return trace_parse_steps(arg, &o->trace_lo, &o->trace_hi, d);
	case K_STRAGGLER_WARN:
		st = parse_double(f, arg, 0, 0, 1e6, &o->straggler_warn, d);
		if (st == ST_OK && o->straggler_warn != 0 && o->straggler_warn <= 1)
			return diag_set(d, ST_USAGE, "--straggler-warn: %s must be above 1 (a ratio to the median rank), or 0 for off", arg);
		return st;
	case K_PROMETHEUS: o->prometheus = arg; return ST_OK;
	case K_PROM_EVERY: return parse_double(f, arg, 0, 1, 1e6, &o->prometheus_every, d);
	case K_ZERO:
		st = parse_long(f, arg, 0, 2, &l, d);
		o->zero = (int)l;
		return st;
	case K_COMPRESS:
		st = parse_choice(def, arg, options_compress_names, &c, d);
		o->grad_compress = (enum comm_wire)c;
		return st;
	case K_HELP: o->help = 1; return ST_OK;
	case K_VERSION: o->version = 1; return ST_OK;
	}
	return diag_set(d, ST_USAGE, "internal: unhandled option key %d", key);
}

/* The defaults are the table's: each value default is parsed as if given on the command
 * line, so --help shows exactly what is in effect (tests/unit/test_options checks the round
 * trip). A switch whose default is "on" starts on. Only --no-overlap's opposite has no
 * flag of its own. */
static void set_defaults(struct options *o)
{
	struct diag d = {0};

	memset(o, 0, sizeof *o);
	o->overlap = 1; /* --no-overlap turns it off; there is no --overlap */
	for (size_t i = 0; i < N_OPTS; i++) {
		const struct opt_def *od = &opt_table[i];

		if (od->def == NULL)
			continue;
		if (od->arg != NULL)
			(void)apply(o, od->key, od->def, &d);
		else if (strcmp(od->def, "on") == 0)
			(void)apply(o, od->key, NULL, &d);
	}
}

/* Checks that need more than one flag. */
static enum status check_combinations(struct options *o, struct diag *d)
{
	if ((o->inputs == NULL) != (o->targets == NULL))
		return diag_set(d, ST_USAGE, "%s given without %s",
				o->inputs ? "--inputs" : "--targets", o->inputs ? "--targets" : "--inputs");
	for (size_t i = 0; i < N_OPTS; i++) {
		const char *path = opt_table[i].path ? path_of(o, &opt_table[i]) : NULL;

		if (path != NULL && path[0] == '\0')
			return diag_set(d, ST_USAGE, "--%s: empty file name", opt_table[i].name);
	}
	if (o->resume != NULL && o->init != NULL)
		return diag_set(d, ST_USAGE, "--resume and --init both set the starting weights: give one");
	if (o->checkpoint == NULL && (o->checkpoint_every > 0 || o->keep_checkpoints > 0))
		return diag_set(d, ST_USAGE, "%s needs --checkpoint=FILE",
				o->checkpoint_every > 0 ? "--checkpoint-every" : "--keep-checkpoints");
	if (o->freeze_arg != NULL) {
		enum status st = parse_freeze(o, d);

		if (st != ST_OK)
			return st;
	}
	if ((o->val_inputs == NULL) != (o->val_targets == NULL))
		return diag_set(d, ST_USAGE, "%s given without %s",
				o->val_inputs ? "--val-inputs" : "--val-targets",
				o->val_inputs ? "--val-targets" : "--val-inputs");
	if (o->val_inputs != NULL && o->inputs == NULL)
		return diag_set(d, ST_USAGE, "--val-inputs needs --inputs (synthetic data takes --val-samples)");
	if (o->val_samples > 0 && o->inputs != NULL)
		return diag_set(d, ST_USAGE, "--val-samples is for synthetic data; with --inputs give --val-inputs and --val-targets");
	if ((o->save_best != NULL || o->eval_every > 0) && o->val_inputs == NULL && o->val_samples == 0)
		return diag_set(d, ST_USAGE, "%s needs a validation set (--val-inputs and --val-targets, or --val-samples)",
				o->save_best != NULL ? "--save-best" : "--eval-every");
	if (o->loss == LOSS_CROSS_ENTROPY && o->widths[o->nlayers] < 2)
		return diag_set(d, ST_USAGE, "--loss=cross-entropy needs at least 2 classes: --layers ends with width %d",
				o->widths[o->nlayers]);
	if (o->optimizer == OPTIM_ADAMW && o->momentum != 0.0)
		return diag_set(d, ST_USAGE, "--momentum applies to --optimizer=sgd (AdamW takes --betas)");
	if (o->optimizer == OPTIM_ADAMW && o->nesterov)
		return diag_set(d, ST_USAGE, "--nesterov applies to --optimizer=sgd");
	if (o->nesterov && o->momentum == 0.0)
		return diag_set(d, ST_USAGE, "--nesterov needs --momentum greater than 0 (as torch.optim.SGD)");
	if (o->replicas != 0 && o->mode != MODE_DP)
		return diag_set(d, ST_USAGE, "--replicas applies to --mode=dp only (in ddp mode each MPI rank is one replica: mpirun -np G)");
	/* DataParallel is one process with no communication hooks: nothing to shard over,
	 * nothing to compress. */
	if (o->mode == MODE_DP && (o->zero > 0 || o->grad_compress != COMM_WIRE_F32))
		return diag_set(d, ST_USAGE, "%s applies to --mode=ddp (DataParallel is one process: no ranks to shard over, no all-reduce to compress)",
				o->zero > 0 ? "--zero" : "--grad-compress");
	if (o->zero == 2 && !o->overlap)
		return diag_set(d, ST_USAGE, "--zero=2 reduce-scatters each bucket as backward finishes it, into two reused buffers: it cannot wait for the whole backward (--no-overlap); use --zero=1");
	return ST_OK;
}

/* getopt_long said no to bad: an unknown short option, a switch given a value, a prefix
 * that abbreviates several long options, or an unknown long option. */
static enum status refuse(const char *bad, struct diag *d)
{
	const struct opt_def *od = find_def(optopt);
	char cand[512];
	size_t len, used = 0;
	int n = 0;

	if (bad[0] != '-' || bad[1] != '-')
		return diag_set(d, ST_USAGE, "unknown option '-%c' (see ddptrain --help)", optopt);
	if (optopt != 0 && od != NULL)
		return diag_set(d, ST_USAGE, "--%s takes no value (see ddptrain --help)", od->name);
	len = strcspn(bad + 2, "=");
	for (size_t i = 0; i < N_OPTS; i++) {
		if (strncmp(opt_table[i].name, bad + 2, len) != 0 || used >= sizeof cand)
			continue;
		used += (size_t)snprintf(cand + used, sizeof cand - used, "%s--%s", n ? ", " : "",
					 opt_table[i].name);
		n++;
	}
	if (n > 1)
		return diag_set(d, ST_USAGE, "option '--%.*s' is ambiguous: it abbreviates %s (spell it out)",
				(int)len, bad + 2, cand);
	return diag_set(d, ST_USAGE, "unknown option '%s' (see ddptrain --help)", bad);
}

enum status options_parse(struct options *o, int argc, char **argv, struct diag *d)
{
	struct option lopts[N_OPTS + 1];
	enum status st;
	int c, idx;

	set_defaults(o);
	for (size_t i = 0; i < N_OPTS; i++) {
		lopts[i].name = opt_table[i].name;
		lopts[i].has_arg = opt_table[i].arg ? required_argument : no_argument;
		lopts[i].flag = NULL;
		lopts[i].val = opt_table[i].key;
	}
	memset(&lopts[N_OPTS], 0, sizeof lopts[N_OPTS]);

	optind = 0; /* full re-initialisation, so tests may parse twice */
	opterr = 0;
	for (;;) {
		int prev = optind ? optind : 1;

		idx = -1;
		c = getopt_long(argc, argv, ":hV", lopts, &idx);
		if (c == -1)
			break;
		if (c == '?')
			return refuse(argv[prev], d);
		if (c == ':')
			return diag_set(d, ST_USAGE, "%s needs a value (see ddptrain --help)", argv[prev]);
		st = apply(o, c, optarg, d);
		if (st != ST_OK)
			return st;
	}
	if (optind < argc)
		return diag_set(d, ST_USAGE, "unexpected argument '%s' (see ddptrain --help)", argv[optind]);
	return check_combinations(o, d);
}

void options_print_help(FILE *f)
{
	fprintf(f, "Usage: mpirun -np N ddptrain [OPTION]...\n"
		   "       ddptrain --mode=dp [OPTION]...\n"
		   "Train an MLP with distributed data parallelism (one MPI rank per replica).\n\n"
		   "Options:\n");
	for (size_t i = 0; i < N_OPTS; i++) {
		const struct opt_def *od = &opt_table[i];
		char lhs[64];

		snprintf(lhs, sizeof lhs, "--%s%s%s", od->name, od->arg ? "=" : "", od->arg ? od->arg : "");
		fprintf(f, "  %-26s %s", lhs, od->help);
		if (od->def != NULL)
			fprintf(f, " (default: %s)", od->def);
		fputc('\n', f);
	}
	fprintf(f, "\nA long option may be abbreviated to a unique prefix (--epoch=5 is --epochs=5);\n"
		   "scripts should spell options out, as a new option can make a prefix ambiguous.\n"
		   "\nExit status: 0 success, 1 runtime failure, 2 usage error, 3 stopped by a signal\n"
		   "after writing the checkpoint (run again with --resume to continue).\n"
		   "See ddptrain(1) for details.\n");
}

void options_print_version(FILE *f)
{
	build_print(f); /* the version, the build and the licence */
}

void options_format_widths(const struct options *o, char *buf, size_t len)
{
	size_t used = 0;

	buf[0] = '\0';
	for (int i = 0; i <= o->nlayers && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s%d", i ? "," : "", o->widths[i]);
}

/* The frozen layers as --freeze takes them ("1,3"); "" for none. */
static void format_frozen(const struct options *o, char *buf, size_t len)
{
	size_t used = 0;

	buf[0] = '\0';
	for (int l = 0; l < o->nlayers && used < len; l++)
		if (o->frozen[l])
			used += (size_t)snprintf(buf + used, len - used, "%s%d", used ? "," : "", l + 1);
}

/* The value of option `key` in o as the text that would set it again ("0.001", "1"). */
static void format_value(const struct options *o, int key, char *buf, size_t len)
{
	switch (key) {
	case K_LAYERS: options_format_widths(o, buf, len); return;
	case K_BATCH: snprintf(buf, len, "%ld", o->batch_size); return;
	case K_EPOCHS: snprintf(buf, len, "%ld", o->epochs); return;
	case K_MAX_STEPS: snprintf(buf, len, "%ld", o->max_steps); return;
	case K_LR: snprintf(buf, len, "%.9g", o->lr); return;
	case K_MOMENTUM: snprintf(buf, len, "%.9g", o->momentum); return;
	case K_WD: snprintf(buf, len, "%.9g", o->weight_decay); return;
	case K_ACCUM: snprintf(buf, len, "%ld", o->grad_accum); return;
	case K_SEED: snprintf(buf, len, "%llu", (unsigned long long)o->seed); return;
	case K_SHUFFLE: snprintf(buf, len, "%d", o->shuffle); return;
	case K_DROP_LAST: snprintf(buf, len, "%d", o->drop_last); return;
	case K_MODE: snprintf(buf, len, "%s", options_mode_names[o->mode]); return;
	case K_DEVICE: snprintf(buf, len, "%s", options_device_names[o->device]); return;
	case K_BACKEND: snprintf(buf, len, "%s", options_comm_names[o->comm]); return;
	case K_BUCKET: snprintf(buf, len, "%.9g", o->bucket_mb); return;
	case K_NO_OVERLAP: snprintf(buf, len, "%d", !o->overlap); return;
	case K_REPLICAS:
		if (o->replicas == 0)
			snprintf(buf, len, "auto");
		else
			snprintf(buf, len, "%d", o->replicas);
		return;
	case K_TF32: snprintf(buf, len, "%d", o->tf32); return;
	case K_CKPT_EVERY: snprintf(buf, len, "%ld", o->checkpoint_every); return;
	case K_LOSS: snprintf(buf, len, "%s", loss_names[o->loss]); return;
	case K_OPTIM: snprintf(buf, len, "%s", optimizer_names[o->optimizer]); return;
	case K_NESTEROV: snprintf(buf, len, "%d", o->nesterov); return;
	case K_BETAS: snprintf(buf, len, "%.9g,%.9g", o->beta1, o->beta2); return;
	case K_EPS: snprintf(buf, len, "%.9g", o->eps); return;
	case K_SCHED: snprintf(buf, len, "%s", schedule_names[o->schedule]); return;
	case K_WARMUP: snprintf(buf, len, "%ld", o->warmup_steps); return;
	case K_CLIP: snprintf(buf, len, "%.9g", o->clip_grad_norm); return;
	case K_FREEZE: format_frozen(o, buf, len); return;
	case K_VAL_SAMPLES: snprintf(buf, len, "%ld", o->val_samples); return;
	case K_EVAL_EVERY: snprintf(buf, len, "%ld", o->eval_every); return;
	case K_SAMPLES: snprintf(buf, len, "%ld", o->samples); return;
	case K_KEEP: snprintf(buf, len, "%ld", o->keep_checkpoints); return;
	case K_TIMEOUT: snprintf(buf, len, "%.9g", o->timeout); return;
	case K_LOG_EVERY: snprintf(buf, len, "%ld", o->log_every); return;
	case K_LOG_SECONDS: snprintf(buf, len, "%.9g", o->log_seconds); return;
	case K_QUIET: snprintf(buf, len, "%d", o->quiet); return;
	case K_TRACE_STEPS: /* trace_parse_steps' spelling: hi 0 is an open end */
		if (o->trace_hi == 0 && o->trace_lo == 1)
			snprintf(buf, len, "all");
		else if (o->trace_hi == 0)
			snprintf(buf, len, "%ld:", o->trace_lo);
		else
			snprintf(buf, len, "%ld:%ld", o->trace_lo, o->trace_hi);
		return;
	case K_STRAGGLER_WARN: snprintf(buf, len, "%.9g", o->straggler_warn); return;
	case K_PROM_EVERY: snprintf(buf, len, "%.9g", o->prometheus_every); return;
	case K_ZERO: snprintf(buf, len, "%d", o->zero); return;
	case K_COMPRESS: snprintf(buf, len, "%s", options_compress_names[o->grad_compress]); return;
	}
	snprintf(buf, len, "?");
}

void options_format_settings(const struct options *o, int scope, char *buf, size_t len)
{
	size_t used = strlen(buf);

	for (size_t i = 0; i < N_OPTS && used < len; i++) {
		char value[4200]; /* a path */
		int key = opt_table[i].key, in = opt_table[i].scope & scope;

		/* A schedule's multipliers depend on the run's length: with one, a resumed run
		 * must have the same --epochs and --max-steps. */
		if ((opt_table[i].scope & OPT_SCOPE_SCHEDULE) && (scope & OPT_SCOPE_RESUME) &&
		    (o->schedule != SCHED_CONSTANT || o->warmup_steps > 0))
			in = 1;
		/* Only rank 0 writes: every rank must name the same outputs, or another rank's
		 * --save would silently come to nothing. */
		if ((scope & OPT_SCOPE_RUN) && opt_table[i].path != OPT_PATH_NONE &&
		    opt_table[i].path != OPT_PATH_IN)
			in = 1;
		/* OPT_SCOPE_ALL: every setting (--no-shuffle is --shuffle's value) */
		if ((scope & OPT_SCOPE_ALL) && key != K_HELP && key != K_VERSION && key != K_NO_SHUFFLE)
			in = 1;
		if (!in)
			continue;
		if (opt_table[i].path != OPT_PATH_NONE)
			snprintf(value, sizeof value, "%s", path_of(o, &opt_table[i]) ? path_of(o, &opt_table[i]) : "");
		else
			format_value(o, key, value, sizeof value);
		/* Nothing frozen: no --freeze, as on the command line, except in the full
		 * record, which names every setting. */
		if (opt_table[i].key == K_FREEZE && value[0] == '\0' && !(scope & OPT_SCOPE_ALL))
			continue;
		used += (size_t)snprintf(buf + used, len - used, "--%s=%s\n", opt_table[i].name, value);
	}
}

int options_paths(const struct options *o, struct opt_file *out)
{
	int n = 0;

	/* Outputs by what they hold (OPT_PATH_SAVE first), then the inputs; table order within. */
	for (int kind = OPT_PATH_SAVE; kind <= OPT_PATH_IN; kind++)
		for (size_t i = 0; i < N_OPTS; i++)
			if ((int)opt_table[i].path == kind) {
				out[n].flag = opt_table[i].name;
				out[n].path = path_of(o, &opt_table[i]);
				out[n].kind = opt_table[i].path;
				n++;
			}
	return n;
}
