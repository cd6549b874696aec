/*
 * options.c - the option table, getopt_long parsing, value checks and --help.
 *
 * Every flag appears exactly once, in opt_table: its spelling, argument, default, help
 * text, and what its value is: a row's type (switch, integer, number, choice of names,
 * text or file), its field in struct options (offsetof, checked against the type when
 * compiled) and its bounds. getopt_long's table, the defaults in effect, the --help text
 * and the "--flag=value" settings text (run header, checkpoints, the cross-rank check)
 * are all generated from it: one generic parse (parse_plain) and one generic format
 * (format_value) serve every row. Only the structured flags bring hooks of their own:
 * --layers, --betas, --freeze (its format), --trace-steps, --replicas ("auto"), and
 * --straggler-warn (its "0 or above 1" on top of the generic parse).
 *
 * Adding a plain numeric flag is one row here, plus its field in struct options and its
 * entry in man/ddptrain.1.in (doc/ARCHITECTURE.md, "a plain numeric flag").
 * tests/unit/test_options checks that each default --help shows is the one in effect,
 * and tests/cli/manpage.sh that man/ddptrain.1 lists the same flags with the same defaults.
 *
 * A number on the command line is written without white space, for every numeric flag:
 * strtol and strtod skip it in front and stop at it behind, so " 1" is refused as "1 "
 * always was, in the same words.
 *
 * Long flags may be abbreviated to a unique prefix (getopt_long's rule, kept
 * and documented); a prefix of several flags is refused, naming them.
 */
#include <ctype.h>
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
const char *const options_precision_names[] = {"fp32", "tf32", "bf16", NULL};

/* What a row's value is, and so how the generic parse and format treat its field. */
enum opt_type {
	OPT_HOOKS,  /* only the row's own parse and format hooks (no field) */
	OPT_SWITCH, /* int: set to the row's `on` value when given; no argument */
	OPT_INT,    /* int, a whole number in [lo, hi] */
	OPT_LONG,   /* long, a whole number in [lo, hi] */
	OPT_U64,    /* uint64_t, a whole number in [lo, hi] */
	OPT_REAL,   /* double, a finite number in [flo, fhi], or (flo, fhi] when open */
	OPT_CHOICE, /* an enum: the index of one of names */
	OPT_TEXT,   /* const char *: the argument as given (argv storage) */
};

struct opt_def;
/* A structured flag's own parse of arg into o, and its value in o as the text that
 * would set it again. */
typedef enum status opt_parse_fn(struct options *o, const struct opt_def *od, const char *arg,
				 struct diag *d);
typedef void opt_format_fn(const struct options *o, const struct opt_def *od, char *buf,
			   size_t len);

struct opt_def {
	const char *name;    /* long flag without dashes */
	const char *arg;     /* metavariable, or NULL for a switch */
	const char *def;     /* default as printed by --help and the man page, or NULL */
	const char *help;
	int scope;           /* OPT_SCOPE_*: in the resume and/or configuration text */
	enum opt_type type;
	size_t field;        /* offsetof the value in struct options (not OPT_HOOKS) */
	long lo, hi;         /* OPT_INT, OPT_LONG, OPT_U64: the bounds */
	double flo, fhi;     /* OPT_REAL: the bounds */
	int open;            /* OPT_REAL: flo itself is refused */
	int on;              /* OPT_SWITCH: the value giving the flag sets */
	const char *const *names; /* OPT_CHOICE: NULL-terminated, in the enum's order */
	enum opt_path path;  /* OPT_TEXT: a file, and what it holds (OPT_PATH_NONE: not a file) */
	opt_parse_fn *parse; /* instead of the generic parse, or NULL */
	opt_format_fn *format; /* instead of the generic format, or NULL */
	char short_name;     /* -h, -V; 0 for none */
};

static opt_parse_fn parse_layers, parse_betas, parse_replicas, parse_trace_steps,
	parse_straggler_warn, parse_size;
static opt_format_fn format_layers, format_betas, format_frozen, format_replicas,
	format_trace_steps, format_size;

#define R OPT_SCOPE_RESUME
#define C OPT_SCOPE_RUN
/* In the resume text only with a schedule, whose shape depends on the run's length. */
#define S OPT_SCOPE_SCHEDULE
/* Not a setting of its own (--no-shuffle is --shuffle's value; --help, --version): not
 * even in the full record. A bit past the OPT_SCOPE_* masks callers pass. */
#define OPT_NOT_A_SETTING 0x100
#define X OPT_NOT_A_SETTING
/* The member's offset; a member of another type than the row says does not compile. */
#define FIELD(m, T) _Generic(((struct options *)0)->m, T: offsetof(struct options, m))
#define ENUM_FIELD(m) (offsetof(struct options, m) + \
		       0 * sizeof(char[sizeof(((struct options *)0)->m) == sizeof(int) ? 1 : -1]))
#define SWITCH(m, v) .type = OPT_SWITCH, .field = FIELD(m, int), .on = (v)
#define INT(m, l, h) .type = OPT_INT, .field = FIELD(m, int), .lo = (l), .hi = (h)
#define LONG(m, l, h) .type = OPT_LONG, .field = FIELD(m, long), .lo = (l), .hi = (h)
#define U64(m, l, h) .type = OPT_U64, .field = FIELD(m, uint64_t), .lo = (l), .hi = (h)
#define REAL(m, l, h) .type = OPT_REAL, .field = FIELD(m, double), .flo = (l), .fhi = (h)
#define REAL_ABOVE(m, l, h) REAL(m, l, h), .open = 1
#define CHOICE(m, n) .type = OPT_CHOICE, .field = ENUM_FIELD(m), .names = (n)
#define TEXT(m) .type = OPT_TEXT, .field = FIELD(m, const char *)
#define FILE_(m, kind) TEXT(m), .path = (kind)
#define HOOKS(p, f) .parse = (p), .format = (f)

/* --check-replicas' default: its row's text, and what --mode=dp leaves alone */
#define CHECK_REPLICAS_DEFAULT 1000
#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)

static const struct opt_def opt_table[] = {
	{"layers", "W0,W1,...", "10,10,5", "MLP widths: Linear layers with ReLU between them", R, HOOKS(parse_layers, format_layers)},
	{"batch-size", "N", "20", "samples per replica per step", R, LONG(batch_size, 1, 1L << 24)},
	{"epochs", "N", "50", "passes over the data set", C | S, LONG(epochs, 1, 1L << 30)},
	{"max-steps", "N", "0", "stop after N optimizer steps (0 = no limit)", C | S, LONG(max_steps, 0, LONG_MAX)},
	{"loss", "mse|cross-entropy", "mse", "mean squared error, or softmax cross-entropy on the last layer's logits against integer class labels", R, CHOICE(loss, loss_names)},
	{"optimizer", "sgd|adamw", "sgd", "torch.optim.SGD or torch.optim.AdamW", R, CHOICE(optimizer, optimizer_names)},
	/* 0 as in PyTorch: the pipeline runs, the weights stay (AdamW's decay is lr x F). */
	{"lr", "F", "0.001", "peak learning rate", R, REAL(lr, 0, 1e6)},
	{"momentum", "F", "0", "SGD momentum (dampening 0)", R, REAL(momentum, 0, 1)},
	{"nesterov", NULL, NULL, "SGD with Nesterov momentum (needs --momentum; default: off)", R, SWITCH(nesterov, 1)},
	{"weight-decay", "F", "0", "SGD: L2 penalty added to the gradient; AdamW: decoupled decay", R, REAL(weight_decay, 0, 1e6)},
	{"betas", "B1,B2", "0.9,0.999", "AdamW's moment decay rates", R, HOOKS(parse_betas, format_betas)},
	{"eps", "F", "1e-08", "AdamW's denominator term", R, REAL_ABOVE(eps, 0, 1)},
	{"lr-schedule", "constant|linear|cosine", "constant", "lr multiplier after the warmup: 1, a line to 0, or half a cosine to 0 at the last step", R, CHOICE(schedule, schedule_names)},
	{"warmup-steps", "K", "0", "lr rises linearly from 0 over the first K optimizer steps", R, LONG(warmup_steps, 0, LONG_MAX)},
	{"clip-grad-norm", "MAX", "0", "scale the gradient to a 2-norm of at most MAX before each step (0 = off)", R, REAL(clip_grad_norm, 0, 1e30)},
	/* Kept as given: the layers it names are checked against --layers, given or not. */
	{"freeze", "L1,L2,...", NULL, "layers (1-based) not trained: no update, no optimizer state, not all-reduced", R, TEXT(freeze_arg), .format = format_frozen},
	{"grad-accum", "K", "1", "micro-batches per optimizer step (all-reduce every K)", R, LONG(grad_accum, 1, 1L << 20)},
	{"seed", "N", "0", "seed for weight init, synthetic data and shuffling", R, U64(seed, 0, LONG_MAX)},
	{"samples", "N", "4000", "size of the synthetic data set", 0, LONG(samples, 1, 1L << 31)},
	{"inputs", "X.npy", NULL, "train on these inputs (2-D float32 or float64)", 0, FILE_(inputs, OPT_PATH_IN)},
	{"targets", "Y.npy", NULL, "targets for --inputs, one row per input row (cross-entropy: integer labels, shape (N,))", 0, FILE_(targets, OPT_PATH_IN)},
	{"val-inputs", "X.npy", NULL, "validation inputs, evaluated every epoch, every --eval-every steps and at the end", 0, FILE_(val_inputs, OPT_PATH_IN)},
	{"val-targets", "Y.npy", NULL, "targets for --val-inputs", 0, FILE_(val_targets, OPT_PATH_IN)},
	{"val-samples", "N", "0", "size of the synthetic validation set (0 = none)", C, LONG(val_samples, 0, 1L << 31)},
	{"eval-every", "N", "0", "also evaluate every N optimizer steps (0 = at epoch ends only)", C, LONG(eval_every, 0, LONG_MAX)},
	{"save-best", "FILE", NULL, "write the weights with the best validation loss as safetensors", C, FILE_(save_best, OPT_PATH_BEST)},
	{"shuffle", NULL, "on", "reshuffle the data every epoch (DistributedSampler)", R, SWITCH(shuffle, 1)},
	{"no-shuffle", NULL, NULL, "keep the data in file order", X, SWITCH(shuffle, 0)},
	{"drop-last", NULL, "off", "drop the tail that does not divide evenly over the ranks", R, SWITCH(drop_last, 1)},
	{"init", "FILE", NULL, "start from these safetensors weights instead of random init", C, FILE_(init, OPT_PATH_IN)},
	{"save", "FILE", NULL, "write the final weights as safetensors (rank 0, atomically)", C, FILE_(save, OPT_PATH_SAVE)},
	{"checkpoint", "FILE", NULL, "write a checkpoint here (at the end, every --checkpoint-every steps, on a stop signal)", C, FILE_(checkpoint, OPT_PATH_CHECKPOINT)},
	{"checkpoint-every", "N", "0", "optimizer steps between checkpoints (0 = only at the end and on a stop)", C, LONG(checkpoint_every, 0, LONG_MAX)},
	{"keep-checkpoints", "K", "0", "also keep the last K checkpoints as FILE.step-NNNNNNNN (0 = none)", C, LONG(keep_checkpoints, 0, 1000000)},
	{"resume", "FILE", NULL, "continue from this checkpoint: weights, momentum, step and data position", C, FILE_(resume, OPT_PATH_IN)},
	/* Not a file ddptrain reads or writes: only whether it exists (the batch scripts' stop). */
	{"stop-file", "FILE", NULL, "stop as on SIGUSR1 (checkpoint, exit 3) once FILE exists; looked for once a second", 0, TEXT(stop_file)},
	{"timeout", "SECONDS", "600", "give up after this long without progress: a collective (or a dp replica) waited for, a step that does not end; each evaluation batch or piece of a file written is progress (0 = never)", 0, REAL(timeout, 0, 1e9)},
	{"mode", "ddp|dp", "ddp", "ddp: one process per replica; dp: threads in one process", R, CHOICE(mode, options_mode_names)},
	{"replicas", "G", "auto", "--mode=dp worker threads, one replica each (auto: one per GPU, else 2)", C, INT(replicas, 1, OPT_MAX_REPLICAS), HOOKS(parse_replicas, format_replicas)},
	{"device", "auto|cpu|cuda", "auto", "where the model runs (auto: a GPU if one is visible, else the CPU)", C, CHOICE(device, options_device_names)},
	{"backend", "auto|mpi|nccl", "auto", "how gradients are all-reduced (auto: nccl on GPUs, mpi on the CPU or on a GPU ranks share)", C, CHOICE(comm, options_comm_names)},
	{"precision", "fp32|tf32|bf16", "fp32", "matrix products in float32, TF32 (cuBLAS only) or bf16 autocast (bf16 operands and activations, float32 sums, loss, weights and optimizer)", C, CHOICE(precision, options_precision_names)},
	/* --precision=tf32 by its old name: that row's value, not a setting of its own. */
	{"tf32", NULL, "off", "let cuBLAS use TF32 tensor cores (faster; results no longer match float32)", X, .type = OPT_SWITCH, .field = ENUM_FIELD(precision), .on = PRECISION_TF32},
	{"bucket-mb", "F", "25", "gradient bucket cap in MiB", C, REAL_ABOVE(bucket_mb, 0, 1 << 20)},
	{"zero", "0|1|2|3", "0", "ZeRO: shard the optimizer state over the ranks (1), the gradients too (2), and the parameters too (3)", C, INT(zero, 0, 3)},
	{"max-memory", "SIZE", "0", "refuse to start when a rank's model memory (parameters, gradients, optimizer state, activations, ZeRO-3's working set) exceeds SIZE bytes (K, M, G, T suffixes: powers of 1024; 0 = no bound)", C, U64(max_memory, 0, LONG_MAX), HOOKS(parse_size, format_size)},
	{"grad-compress", "none|fp16|bf16", "none", "all-reduce the gradients in 16 bits (PyTorch's fp16/bf16 compress hooks)", C, CHOICE(grad_compress, options_compress_names)},
	/* On by default: silent data corruption is about one device in a thousand in large
	 * fleets, and a check every 1000 steps costs far below 0.1% of a step (bench.sh). */
	{"check-replicas", "N", STRINGIFY(CHECK_REPLICAS_DEFAULT), "every N optimizer steps (and before any checkpoint and --save) compare the ranks' replicated state bit for bit; stop naming the ranks that differ (0 = off)", C, LONG(check_replicas, 0, LONG_MAX)},
	{"no-overlap", NULL, NULL, "all-reduce only after the whole backward", C, SWITCH(overlap, 0)},
	{"log-every", "N", "250", "optimizer steps between progress lines (0 = none)", C, LONG(log_every, 0, LONG_MAX)},
	{"log-seconds", "SECONDS", "30", "also a progress line after SECONDS without one (0 = by steps only); on a terminal the line is redrawn at least every 0.5 s", C, REAL(log_seconds, 0, 1e9)},
	{"quiet", NULL, NULL, "print errors only", C, SWITCH(quiet, 1)},
	{"metrics", "FILE", NULL, "write JSON Lines metrics (one object per logged step)", C, FILE_(metrics, OPT_PATH_LOG)},
	{"trace", "FILE", NULL, "write a Chrome trace-event timeline of every rank (Perfetto, chrome://tracing)", C, FILE_(trace, OPT_PATH_LOG)},
	{"trace-steps", "A:B", "all", "trace only optimizer steps A to B", C, HOOKS(parse_trace_steps, format_trace_steps)},
	{"straggler-warn", "F", "0", "warn when a rank computes F times slower than the median (0 = off)", C, REAL(straggler_warn, 0, 1e6), .parse = parse_straggler_warn},
	{"prometheus", "FILE", NULL, "keep a Prometheus textfile of the run's progress up to date", 0, FILE_(prometheus, OPT_PATH_LOG)},
	{"prometheus-every", "SECONDS", "10", "seconds between rewrites of the --prometheus file", C, REAL_ABOVE(prometheus_every, 0, 1e6)},
	{"help", NULL, NULL, "show this help and exit", X, SWITCH(help, 1), .short_name = 'h'},
	{"version", NULL, NULL, "show the version and exit", X, SWITCH(version, 1), .short_name = 'V'},
};
#undef R
#undef C
#undef S
#undef X
#undef FIELD
#undef ENUM_FIELD
#undef SWITCH
#undef INT
#undef LONG
#undef U64
#undef REAL
#undef REAL_ABOVE
#undef CHOICE
#undef TEXT
#undef FILE_
#undef HOOKS
#define N_OPTS (sizeof opt_table / sizeof opt_table[0])
/* getopt_long's value for a row without a short name: past every char. */
#define OPT_VAL_BASE 256

/* The row getopt_long's value val stands for, or NULL. */
static const struct opt_def *def_of_val(int val)
{
	if (val >= OPT_VAL_BASE && (size_t)(val - OPT_VAL_BASE) < N_OPTS)
		return &opt_table[val - OPT_VAL_BASE];
	for (size_t i = 0; i < N_OPTS; i++)
		if (val != 0 && opt_table[i].short_name == val)
			return &opt_table[i];
	return NULL;
}

/* The row's value in o. */
static void *field_of(struct options *o, const struct opt_def *od)
{
	return (char *)o + od->field;
}

/* The row's value in o, read only. */
static const void *cfield_of(const struct options *o, const struct opt_def *od)
{
	return (const char *)o + od->field;
}

/* The file a file flag names in o, or NULL. */
static const char *path_of(const struct options *o, const struct opt_def *od)
{
	return *(const char *const *)cfield_of(o, od);
}

/* A whole decimal integer in [lo, hi] into the row's int, long or uint64_t; no white
 * space (see the top). */
static enum status parse_integer(struct options *o, const struct opt_def *od, const char *s,
				 struct diag *d)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (*s == '\0' || isspace((unsigned char)*s) || *end != '\0')
		return diag_set(d, ST_USAGE, "--%s: '%s' is not an integer", od->name, s);
	if (errno == ERANGE || v < od->lo || v > od->hi)
		return diag_set(d, ST_USAGE, "--%s: %s is out of range [%ld, %ld]", od->name, s, od->lo, od->hi);
	if (od->type == OPT_INT)
		*(int *)field_of(o, od) = (int)v;
	else if (od->type == OPT_U64)
		*(uint64_t *)field_of(o, od) = (uint64_t)v;
	else
		*(long *)field_of(o, od) = v;
	return ST_OK;
}

/* A finite number in [flo, fhi] (or (flo, fhi] when open) into the row's double; no white
 * space. */
static enum status parse_real(struct options *o, const struct opt_def *od, const char *s,
			      struct diag *d)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (*s == '\0' || isspace((unsigned char)*s) || *end != '\0' || !isfinite(v))
		return diag_set(d, ST_USAGE, "--%s: '%s' is not a finite number", od->name, s);
	if (v < od->flo || (od->open && v == od->flo) || v > od->fhi)
		return diag_set(d, ST_USAGE, "--%s: %s is out of range %s%g, %g]", od->name, s,
				od->open ? "(" : "[", od->flo, od->fhi);
	/* -0 is 0: one spelling in the settings the ranks compare */
	*(double *)field_of(o, od) = v == 0 ? 0.0 : v;
	return ST_OK;
}

static enum status parse_choice(struct options *o, const struct opt_def *od, const char *s,
				struct diag *d)
{
	for (int i = 0; od->names[i] != NULL; i++) {
		if (strcmp(s, od->names[i]) == 0) {
			*(int *)field_of(o, od) = i;
			return ST_OK;
		}
	}
	return diag_set(d, ST_USAGE, "--%s: '%s' is not one of %s", od->name, s, od->arg);
}

/* The generic parse: the row's type says what arg is and where it goes (arg is NULL for
 * a switch). */
static enum status parse_plain(struct options *o, const struct opt_def *od, const char *arg,
			       struct diag *d)
{
	switch (od->type) {
	case OPT_SWITCH: *(int *)field_of(o, od) = od->on; return ST_OK;
	case OPT_INT:
	case OPT_LONG:
	case OPT_U64: return parse_integer(o, od, arg, d);
	case OPT_REAL: return parse_real(o, od, arg, d);
	case OPT_CHOICE: return parse_choice(o, od, arg, d);
	case OPT_TEXT: *(const char **)field_of(o, od) = arg; return ST_OK;
	case OPT_HOOKS: break;
	}
	return diag_set(d, ST_USAGE, "internal: --%s has no parse", od->name);
}

/* Set the row's value from arg: its own hook, or the generic parse. */
static enum status apply(struct options *o, const struct opt_def *od, const char *arg,
			 struct diag *d)
{
	return od->parse ? od->parse(o, od, arg, d) : parse_plain(o, od, arg, d);
}

/* "10,10,5" -> widths; at least two widths (one layer), each in [1, 2^20], no white space. */
static enum status parse_layers(struct options *o, const struct opt_def *od, const char *s,
				struct diag *d)
{
	int n = 0;
	const char *p = s;

	while (*p != '\0') {
		char *end;
		long w;

		errno = 0;
		w = strtol(p, &end, 10);
		if (end == p || isspace((unsigned char)*p) || (*end != ',' && *end != '\0'))
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

/* "0.9,0.999": two numbers in [0, 1), no white space. */
static enum status parse_betas(struct options *o, const struct opt_def *od, const char *s,
			       struct diag *d)
{
	char *end, *end2;
	double b1, b2;

	errno = 0;
	b1 = strtod(s, &end);
	if (end == s || isspace((unsigned char)*s) || *end != ',' || isspace((unsigned char)end[1]))
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

/* "1,3" -> frozen[0], frozen[2]: 1-based layer numbers, as in net1, within --layers; no
 * white space. */
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
		if (end == p || isspace((unsigned char)*p) || (*end != ',' && *end != '\0') ||
		    (*end == ',' && end[1] == '\0'))
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

/* --replicas: "auto" (0: one per GPU, else 2) or a count, as the generic parse takes it. */
static enum status parse_replicas(struct options *o, const struct opt_def *od, const char *s,
				  struct diag *d)
{
	if (strcmp(s, "auto") == 0) {
		o->replicas = 0;
		return ST_OK;
	}
	return parse_plain(o, od, s, d);
}

/* --max-memory: bytes, or a number with K, M, G or T after it (powers of 1024: Slurm's and
 * PyTorch's sizes), within the row's bounds. */
static enum status parse_size(struct options *o, const struct opt_def *od, const char *s, struct diag *d)
{
	static const char units[] = "KMGT";
	unsigned long long v, mult = 1;
	const char *u;
	char *end;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (end == s || !isdigit((unsigned char)*s))
		return diag_set(d, ST_USAGE, "--%s: '%s' is not a size (a whole number of bytes, or one with K, M, G or T)", od->name, s);
	if (*end != '\0') {
		u = strchr(units, toupper((unsigned char)*end));
		if (u == NULL || end[1] != '\0')
			return diag_set(d, ST_USAGE, "--%s: '%s' is not a size (a whole number of bytes, or one with K, M, G or T)", od->name, s);
		mult = 1ULL << (10 * (u - units + 1));
	}
	if (errno == ERANGE || v > (unsigned long long)od->hi / mult)
		return diag_set(d, ST_USAGE, "--%s: '%s' is out of range (at most %ld bytes)", od->name, s, od->hi);
	o->max_memory = (uint64_t)(v * mult);
	return ST_OK;
}

void options_format_size(uint64_t bytes, char *buf, size_t len)
{
	static const char units[] = "KMGT";
	uint64_t v = bytes;
	int u = 0;

	while (v != 0 && u < 4 && v % 1024 == 0) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%llu", (unsigned long long)v);
	else
		snprintf(buf, len, "%llu%c", (unsigned long long)v, units[u - 1]);
}

static void format_size(const struct options *o, const struct opt_def *od, char *buf, size_t len)
{
	options_format_size(o->max_memory, buf, len);
}

/* --trace-steps: "all" or trace_parse_steps' A:B, whose numbers take no white space. */
static enum status parse_trace_steps(struct options *o, const struct opt_def *od, const char *s,
				     struct diag *d)
{
	enum status st;

	if (strcmp(s, "all") == 0) {
		o->trace_lo = 1;
		o->trace_hi = 0;
		return ST_OK;
	}
	st = trace_parse_steps(s, &o->trace_lo, &o->trace_hi, d);
	for (const char *p = s; st == ST_OK && *p != '\0'; p++)
		if (isspace((unsigned char)*p)) /* strtol took " 3:5" */
			return diag_set(d, ST_USAGE, "--trace-steps: '%s': the steps are whole numbers, without spaces", s);
	return st;
}

/* --straggler-warn: a number, as the generic parse takes it, that is 0 or above 1. */
static enum status parse_straggler_warn(struct options *o, const struct opt_def *od,
					const char *s, struct diag *d)
{
	enum status st = parse_plain(o, od, s, d);

	if (st == ST_OK && o->straggler_warn != 0 && o->straggler_warn <= 1)
		return diag_set(d, ST_USAGE, "--straggler-warn: %s must be above 1 (a ratio to the median rank), or 0 for off", s);
	return st;
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
			(void)apply(o, od, od->def, &d);
		else if (strcmp(od->def, "on") == 0)
			(void)apply(o, od, NULL, &d);
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
	if (o->stop_file != NULL && o->stop_file[0] == '\0')
		return diag_set(d, ST_USAGE, "--stop-file: empty file name");
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
	/* DataParallel copies replica 0's weights to the others before every forward: nothing
	 * is kept apart to drift, nothing to compare. The default (on) is left alone there, as
	 * --bucket-mb's is; a value asked for is refused. */
	if (o->mode == MODE_DP && o->check_replicas != 0 && o->check_replicas != CHECK_REPLICAS_DEFAULT)
		return diag_set(d, ST_USAGE, "--check-replicas applies to --mode=ddp (DataParallel copies replica 0's weights to the other replicas every step: there are no replicas kept apart to compare)");
	if (o->zero >= 2 && !o->overlap)
		return diag_set(d, ST_USAGE, "--zero=%d reduce-scatters each bucket as backward finishes it, into two reused buffers: it cannot wait for the whole backward (--no-overlap); use --zero=1",
				o->zero);
	return ST_OK;
}

/* getopt_long said no to bad: an unknown short option, a switch given a value, a prefix
 * that abbreviates several long options, or an unknown long option. */
static enum status refuse(const char *bad, struct diag *d)
{
	const struct opt_def *od = def_of_val(optopt);
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
	char shorts[2 * N_OPTS + 2] = ":"; /* ":hV": a missing value is ':', not '?' */
	size_t ns = 1;
	enum status st;
	int c, idx;

	set_defaults(o);
	for (size_t i = 0; i < N_OPTS; i++) {
		const struct opt_def *od = &opt_table[i];

		lopts[i].name = od->name;
		lopts[i].has_arg = od->arg ? required_argument : no_argument;
		lopts[i].flag = NULL;
		lopts[i].val = od->short_name ? od->short_name : OPT_VAL_BASE + (int)i;
		if (od->short_name) {
			shorts[ns++] = od->short_name;
			if (od->arg)
				shorts[ns++] = ':';
		}
	}
	shorts[ns] = '\0';
	memset(&lopts[N_OPTS], 0, sizeof lopts[N_OPTS]);

	optind = 0; /* full re-initialisation, so tests may parse twice */
	opterr = 0;
	for (;;) {
		int prev = optind ? optind : 1;

		idx = -1;
		c = getopt_long(argc, argv, shorts, lopts, &idx);
		if (c == -1)
			break;
		if (c == '?')
			return refuse(argv[prev], d);
		if (c == ':')
			return diag_set(d, ST_USAGE, "%s needs a value (see ddptrain --help)", argv[prev]);
		st = apply(o, def_of_val(c), optarg, d);
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

/* --layers: the widths, as options_format_widths writes them. */
static void format_layers(const struct options *o, const struct opt_def *od, char *buf,
			  size_t len)
{
	options_format_widths(o, buf, len);
}

/* --freeze: the frozen layers as it takes them ("1,3"); "" for none. */
static void format_frozen(const struct options *o, const struct opt_def *od, char *buf,
			  size_t len)
{
	size_t used = 0;

	buf[0] = '\0';
	for (int l = 0; l < o->nlayers && used < len; l++)
		if (o->frozen[l])
			used += (size_t)snprintf(buf + used, len - used, "%s%d", used ? "," : "", l + 1);
}

static void format_betas(const struct options *o, const struct opt_def *od, char *buf,
			 size_t len)
{
	snprintf(buf, len, "%.9g,%.9g", o->beta1, o->beta2);
}

static void format_replicas(const struct options *o, const struct opt_def *od, char *buf,
			    size_t len)
{
	if (o->replicas == 0)
		snprintf(buf, len, "auto");
	else
		snprintf(buf, len, "%d", o->replicas);
}

/* trace_parse_steps' spelling: hi 0 is an open end. */
static void format_trace_steps(const struct options *o, const struct opt_def *od, char *buf,
			       size_t len)
{
	if (o->trace_hi == 0 && o->trace_lo == 1)
		snprintf(buf, len, "all");
	else if (o->trace_hi == 0)
		snprintf(buf, len, "%ld:", o->trace_lo);
	else
		snprintf(buf, len, "%ld:%ld", o->trace_lo, o->trace_hi);
}

/* The row's value in o as the text that would set it again ("0.001", "1"): its own hook,
 * or the generic format by type (a switch: 1 when giving it would change nothing). */
static void format_value(const struct options *o, const struct opt_def *od, char *buf,
			 size_t len)
{
	const void *p = cfield_of(o, od);

	if (od->format != NULL) {
		od->format(o, od, buf, len);
		return;
	}
	switch (od->type) {
	case OPT_SWITCH: snprintf(buf, len, "%d", *(const int *)p == od->on); return;
	case OPT_INT: snprintf(buf, len, "%d", *(const int *)p); return;
	case OPT_LONG: snprintf(buf, len, "%ld", *(const long *)p); return;
	case OPT_U64: snprintf(buf, len, "%llu", (unsigned long long)*(const uint64_t *)p); return;
	case OPT_REAL: snprintf(buf, len, "%.9g", *(const double *)p); return;
	case OPT_CHOICE: snprintf(buf, len, "%s", od->names[*(const int *)p]); return;
	case OPT_TEXT: snprintf(buf, len, "%s", path_of(o, od) ? path_of(o, od) : ""); return;
	case OPT_HOOKS: break;
	}
	snprintf(buf, len, "?");
}

void options_format_settings(const struct options *o, int scope, char *buf, size_t len)
{
	size_t used = strlen(buf);

	for (size_t i = 0; i < N_OPTS && used < len; i++) {
		const struct opt_def *od = &opt_table[i];
		char value[4200]; /* a path */
		int in = od->scope & scope;

		/* A schedule's multipliers depend on the run's length: with one, a resumed run
		 * must have the same --epochs and --max-steps. */
		if ((od->scope & OPT_SCOPE_SCHEDULE) && (scope & OPT_SCOPE_RESUME) &&
		    (o->schedule != SCHED_CONSTANT || o->warmup_steps > 0))
			in = 1;
		/* Only rank 0 writes: every rank must name the same outputs, or another rank's
		 * --save would silently come to nothing. */
		if ((scope & OPT_SCOPE_RUN) && od->path != OPT_PATH_NONE && od->path != OPT_PATH_IN)
			in = 1;
		/* OPT_SCOPE_ALL: every setting (--no-shuffle is --shuffle's value) */
		if ((scope & OPT_SCOPE_ALL) && !(od->scope & OPT_NOT_A_SETTING))
			in = 1;
		if (!in)
			continue;
		format_value(o, od, value, sizeof value);
		/* Nothing frozen: no --freeze, as on the command line, except in the full
		 * record, which names every setting. */
		if (od->format == format_frozen && value[0] == '\0' && !(scope & OPT_SCOPE_ALL))
			continue;
		used += (size_t)snprintf(buf + used, len - used, "--%s=%s\n", od->name, value);
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
