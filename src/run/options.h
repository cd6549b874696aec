/*
 * options.h - ddptrain's command line: one table drives getopt_long, --help
 * and the man-page consistency test.
 *
 * Parsing only checks each value and the combinations the flags alone can
 * decide. What depends on the data (widths against .npy columns) or on the
 * world (sample count against world size) is checked where that is known.
 */
#ifndef DDPT_OPTIONS_H
#define DDPT_OPTIONS_H

#include <stdint.h>
#include <stdio.h>

#include "backend/backend.h" /* enum precision */
#include "comm/comm.h"     /* enum comm_kind */
#include "model/loss.h"     /* enum loss_kind, loss_names */
#include "model/optimizer.h" /* enum optimizer_kind, optimizer_names */
#include "model/schedule.h" /* enum lr_schedule, schedule_names */
#include "core/status.h"

#define OPT_MAX_LAYERS 64 /* Linear layers; widths has one more entry */
#define OPT_MAX_REPLICAS 64 /* --mode=dp worker threads */

enum run_mode { MODE_DDP, MODE_DP };
/* What a file flag's file holds (the option table's file column): the outputs first, in
 * the order the collision check reports them, then the inputs. */
enum opt_path {
	OPT_PATH_NONE,       /* not a file */
	OPT_PATH_SAVE,       /* --save: the final weights */
	OPT_PATH_LOG,        /* --metrics, --trace, --prometheus: records, no weights */
	OPT_PATH_CHECKPOINT, /* --checkpoint: weights and optimizer state (and its rotation) */
	OPT_PATH_BEST,       /* --save-best: weights */
	OPT_PATH_IN          /* read: --inputs, --init, --resume, ... */
};
enum device_kind { DEVICE_AUTO, DEVICE_CPU, DEVICE_CUDA };

struct options {
	int widths[OPT_MAX_LAYERS + 1]; /* widths[0] inputs ... widths[nlayers] outputs */
	int nlayers;                    /* number of Linear layers */
	long batch_size;                /* samples per replica per micro-batch */
	long epochs;
	long max_steps;                 /* optimizer steps; 0 = no limit */
	double lr, momentum, weight_decay;
	enum loss_kind loss;
	enum optimizer_kind optimizer;
	double beta1, beta2, eps;       /* AdamW */
	int nesterov;                   /* SGD */
	enum lr_schedule schedule;
	long warmup_steps;
	double clip_grad_norm;          /* 0 = no clipping */
	unsigned char frozen[OPT_MAX_LAYERS]; /* layer l (0-based) is frozen */
	const char *freeze_arg;         /* --freeze as given (checked against --layers) */
	const char *val_inputs, *val_targets; /* validation .npy paths or NULL */
	long val_samples;               /* synthetic validation set size; 0 = none */
	long eval_every;                /* optimizer steps between evaluations; 0 = epochs only */
	const char *save_best;          /* weights with the best validation loss, or NULL */
	long grad_accum;                /* micro-batches per optimizer step */
	uint64_t seed;
	long samples;                   /* synthetic data set size */
	const char *inputs, *targets;   /* .npy paths (argv storage) or NULL */
	int shuffle, drop_last;
	const char *init, *save;        /* safetensors paths or NULL */
	enum run_mode mode;
	enum device_kind device;
	enum comm_kind comm;
	double bucket_mb;
	int overlap;
	long log_every;                 /* optimizer steps between progress lines; 0 = none */
	double log_seconds;             /* also a line after this long without one; 0 = none */
	int quiet;
	const char *metrics;            /* JSON Lines path or NULL */
	int replicas;                   /* --mode=dp worker threads; 0 = auto */
	enum precision precision;       /* the matrix products' arithmetic (--tf32: PRECISION_TF32) */
	const char *checkpoint;         /* checkpoint path or NULL */
	long checkpoint_every;          /* optimizer steps between checkpoints; 0 = end and stop only */
	long keep_checkpoints;          /* numbered checkpoints to keep; 0 = only the latest */
	const char *resume;             /* checkpoint to resume from, or NULL */
	const char *stop_file;          /* a graceful stop once this exists, or NULL */
	double timeout;                 /* seconds a blocking collective may take; 0 = forever */
	const char *trace;              /* Chrome trace path or NULL */
	long trace_lo, trace_hi;        /* optimizer steps traced, 1-based inclusive; hi 0 = to the end */
	double straggler_warn;          /* compute-time ratio to the median that warns; 0 = off */
	const char *prometheus;         /* Prometheus textfile path or NULL */
	double prometheus_every;        /* seconds between its rewrites */
	int zero;                       /* ZeRO stage: 0 off, 1 optimizer state, 2 gradients too, 3
	                                 * parameters too */
	uint64_t max_memory;            /* bytes of a rank's model memory at most (0: no bound) */
	enum comm_wire grad_compress;   /* the gradients' wire type (COMM_WIRE_F32: none) */
	long check_replicas;            /* optimizer steps between replica checks; 0 = off */
	int help, version;              /* asked for --help / --version */
};

#define OPT_MAX_FILES 16 /* file flags in the option table */

/* One file flag: its name without dashes ("save"), the file (NULL: not given), its kind. */
struct opt_file {
	const char *flag;
	const char *path;
	enum opt_path kind;
};

/* Every file flag of the option table into out (OPT_MAX_FILES entries): the outputs by
 * kind, then the inputs. Returns how many. */
int options_paths(const struct options *o, struct opt_file *out);

/* Fill o with the defaults, then parse argv. Returns ST_OK, or ST_USAGE with
 * the message in d. --help and --version only set o->help / o->version. */
enum status options_parse(struct options *o, int argc, char **argv, struct diag *d);

/* Print the --help text (generated from the option table) to f. */
void options_print_help(FILE *f);
/* Print the --version text to f. */
void options_print_version(FILE *f);

/* Print "--layers=10,10,5" style text for the widths into buf. */
void options_format_widths(const struct options *o, char *buf, size_t len);
/* A size in bytes as --max-memory spells it: the largest unit (K, M, G, T: powers of 1024)
 * that writes it exactly ("12M", "1536K", "100"). */
void options_format_size(uint64_t bytes, char *buf, size_t len);

/* Which settings options_format_settings writes. */
#define OPT_SCOPE_RESUME 1 /* must match between a checkpoint and the run resuming it */
#define OPT_SCOPE_RUN 2    /* must also match on every rank of one run: all that shapes the
			    * sequence of collectives or says what is written where */
#define OPT_SCOPE_SCHEDULE 4 /* in the resume text when a learning-rate schedule is set */
#define OPT_SCOPE_ALL 8    /* every setting (the --metrics file's record of the run) */
/* Append "--flag=value" lines of the options in scope (a mask of OPT_SCOPE_*), in table
 * order, to the string in buf (len bytes in all). */
void options_format_settings(const struct options *o, int scope, char *buf, size_t len);

extern const char *const options_mode_names[];
extern const char *const options_device_names[];
extern const char *const options_comm_names[];
extern const char *const options_compress_names[]; /* --grad-compress: "none", "fp16", "bf16" */
extern const char *const options_precision_names[]; /* --precision, in enum precision's order */

#endif
