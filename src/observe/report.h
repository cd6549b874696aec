/*
 * report.h - what rank 0 tells the user: a '#' header, a progress line every
 * --log-every optimizer steps and, between them, once --log-seconds have passed
 * without one (on a terminal the line is redrawn in place at least every 0.5 s),
 * a '#' summary, and the --metrics JSON Lines file (a "step" record per
 * --log-every steps only, so its records do not depend on timing).
 *
 * The observe/ wing (floor 3, above data/ and comm/): what the run tells the
 * world while and after it trains: this report, --trace, the straggler check and
 * --prometheus. Observers never decide what is trained.
 *
 * The metrics file is streamed: each record is one whole line, written with
 * one write() as it happens, so `tail -f` follows a run and a stopped, failed
 * or killed run keeps every record it wrote (whole lines only). Each attempt
 * starts with a "start" record (version, start time, configuration); a resumed
 * run appends to the file. Every record has the wall-clock "time".
 *
 * Standard output is line-buffered. When a write to it fails the report stops
 * printing; a closed pipe is not an error, any other write error is reported
 * by report_finish.
 *
 * An observer's output that cannot be written (--metrics, --trace, --prometheus)
 * costs the run a record of itself, not the run: the report says so at once in one
 * warning line on standard error and remembers it, training goes on, and the run
 * ends with ST_INCOMPLETE (exit 4) once its weights are saved.
 *
 * Every function is a no-op on ranks other than 0.
 */
#ifndef DDPT_REPORT_H
#define DDPT_REPORT_H

#include <stdio.h>

#include "core/status.h"
#include "observe/straggler.h" /* struct straggler_rank */
#include "comm/world.h" /* struct world, world_gather */

struct json_t; /* jansson's */

/* Phases of a DataParallel step, as the dp report names them. */
enum dp_phase {
	DP_SCATTER, DP_REPLICATE, DP_FORWARD, DP_GATHER, DP_LOSS, DP_BACKWARD, DP_REDUCE, DP_STEP,
	DP_NPHASES
};
extern const char *const dp_phase_names[DP_NPHASES];

/* What one replica did over the whole run. */
struct replica_stats {
	double seconds[DP_NPHASES]; /* dp: time spent in each phase */
	double compute_s;           /* ddp: training-loop time not spent waiting for all-reduces */
	double wait_s;              /* ddp: time blocked completing all-reduces */
	double data_wait_s;         /* time the loop waited for its batches (the loader's count) */
	double bytes_in, bytes_out; /* data moved into and out of this replica's memory (ddp: what
	                             * its collectives sent, as a ring sends it) */
	size_t state_bytes;         /* backend memory held: weights, grads, optimizer, activations */
	/* ddp: four parts of state_bytes: the parameters (ZeRO-3: the rank's window), the
	 * gradients (ZeRO-2/3: the shard; and the slots), the optimizer state (ZeRO: the
	 * shard's) and the working set the collectives go through (ZeRO-2/3's two gradient
	 * buffers, ZeRO-3's gathered layers) */
	size_t param_bytes, grad_bytes, optim_bytes, work_bytes;
	double flops;               /* the matrix products' floating-point operations, all steps */
	size_t dev_peak_bytes;      /* a GPU's peak device memory allocated by the backend (as
				     * torch.cuda.max_memory_allocated); 0 on the CPU */
};

/* One gradient bucket's all-reduces over the run, as this rank saw them: from launch to
 * completion, so with overlap they include time the collective waited for other ranks'
 * backward (a lower bound on what the link can do, like a busy nccl-tests run). */
struct bucket_stats {
	int lo, hi;     /* the layers it holds */
	double bytes;   /* payload per all-reduce */
	long count;
	double sum_s;   /* total launch-to-completion time */
	double min_s;   /* the fastest one */
};

/* nccl-tests' bus bandwidth of an all-reduce over n ranks: algbw x 2(n-1)/n. */
static inline double report_busbw(double algbw, int n)
{
	return n > 1 ? algbw * 2.0 * (double)(n - 1) / (double)n : 0.0;
}

/* The observers' outputs, as bits of report.lost. */
enum report_output {
	REPORT_METRICS = 1,
	REPORT_TRACE = 2,
	REPORT_PROMETHEUS = 4,
};

struct report {
	int root;           /* this rank prints */
	int quiet;
	FILE *out;          /* progress and summary (stdout) */
	int metrics_fd;     /* JSON Lines, or -1 (not opened yet, or not asked for) */
	char *metrics_path; /* or NULL: no --metrics */
	int metrics_append; /* open for appending (resume), else start afresh */
	struct json_t *metrics_start; /* the "start" record, until the file is opened */
	int metrics_err;    /* errno of the first failed metrics write; no more are tried */
	int out_err;        /* errno of the first failed write to out; printing stopped */
	int finished;       /* the summary record is written */
	int ended;          /* the end record is written */
	unsigned lost;      /* REPORT_* outputs incomplete now */
	unsigned warned;    /* REPORT_* outputs already warned about */
	int header_done;
	int tty;            /* stdout is a terminal: one progress line, redrawn in place */
	int line_open;      /* a redrawn line awaits its newline */
	double every_s;     /* seconds after which a progress line is due between --log-every
			     * steps (0: never): --log-seconds, on a terminal at most 0.5 */
	double last_line;   /* clock_now() of the last progress line, or of training's start */
};

/* On a terminal the progress line is redrawn at least this often (tqdm's way). */
#define REPORT_TTY_SECONDS 0.5

/* One progress line: where training is, and the means since the last --log-every line. */
struct report_progress {
	long epoch, epochs;   /* 1-based epoch of epochs */
	long step, total;     /* optimizer steps done, of total */
	double loss, acc;     /* means since the last logged line; acc NaN when the loss has none */
	double lr;            /* the step's learning rate */
	double samples_per_s; /* since the last logged line */
	double data_wait_s;   /* mean wait per step for the data, since the last logged line */
	double elapsed;       /* seconds since the loop started */
	long steps_here;      /* steps this run has taken (a resumed run's ETA) */
};

/* Start reporting; root is 1 on the rank that reports. log_seconds: a progress line is
 * due after that many seconds without one (0: only every --log-every steps); on a
 * terminal after REPORT_TTY_SECONDS, or log_seconds if shorter. */
void report_init(struct report *r, int root, int quiet, double log_seconds);
/* Prepare the metrics file if asked (append: keep the records already there, as a
 * resumed run does; else start it afresh) and its "start" record, whose "config" object
 * has a key for each "--flag=value" line of config. The file is opened and the record
 * written when training starts (report_training_starts) or with the first record after
 * it, so a run refused before that (exit 2) leaves a previous file alone. */
enum status report_open_metrics(struct report *r, const char *metrics_path, int append,
				const char *config, struct diag *d);
/* Training begins (the trainers call it once their own checks passed): the metrics file
 * is opened now and its "start" record written, so even a run killed before its first
 * logged step leaves its attempt on record; the time to the first progress line counts
 * from now. */
void report_training_starts(struct report *r);
/* A '#' line (printf-style) on the terminal, unless quiet. */
void report_note(struct report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Output out could not be written (why: the message, escaped): warn at once on standard
 * error, once per output, quiet or not, and count it lost. The run goes on. */
void report_output_failed(struct report *r, enum report_output out, const char *why);
/* Output out was written whole again (--prometheus, rewritten at each update): not lost. */
void report_output_ok(struct report *r, enum report_output out);
/* How many outputs are lost; their flags in names ("--metrics and --trace") when not NULL. */
int report_lost(const struct report *r, char *names, size_t len);
/* Is a progress line due now by time alone? Only on the reporting rank, not quiet, once
 * every_s has passed since the last line; elsewhere it answers without reading the clock. */
int report_due(const struct report *r);
/* A progress line. logged: a --log-every step (or the last), which also writes the
 * metrics "step" record; otherwise a line due by time (report_due), printed only. */
void report_step(struct report *r, const struct report_progress *p, int logged);
/* One evaluation of the validation set of n samples after `step` steps, in epoch (1-based):
 * its mean loss and accuracy (NaN when the loss has none). */
void report_eval(struct report *r, long step, long epoch, double loss, double acc, size_t n);

struct report_summary {
	long steps;
	long epochs;
	double seconds;
	double samples_per_s;
	double first_loss, final_loss;
	double comm_wait_share; /* fraction of step time this rank waited for all-reduces */
	const char *mode;       /* "ddp" or "dp" */
	int replicas;           /* ranks (ddp) or worker threads (dp) */
	double state_mib;       /* largest per-replica state, MiB */
	/* dp: each replica's phases, bytes and memory; ddp: each rank's compute, all-reduce
	 * wait, bytes, memory and (rss_mib) peak resident memory. */
	const struct replica_stats *rep;
	const double *rss_mib;  /* ddp only, one per rank */
	int nbuckets;           /* ddp: rank 0's all-reduce figures per bucket */
	const char *untimed;    /* ddp: why there are none, or NULL */
	const struct bucket_stats *buckets;
	const struct straggler_rank *strag; /* ddp: each rank's step-time percentiles, or NULL */
};

/* One "#" line per rank (nccl-tests style), gathered onto rank 0: pid, host and node-local
 * rank (found here), and what the caller says of the rank: its device ("cpu", "GPU 0 of
 * 2 (...)") and its gradient path ("mpi", "mpi, staged ..."). Collective over w. */
void report_ranks(struct report *r, struct world *w, const char *device, const char *path);

/* Peak resident memory of this process in MiB. */
double report_peak_rss_mib(void);

/* Print the per-replica (dp) or per-rank (ddp) table and the summary, write the metrics
 * summary record and sync the file. Fails if standard output could not be written (a
 * closed standard output excepted); a metrics file that could not be written is lost
 * (report_lost), not a failure. */
enum status report_finish(struct report *r, const struct report_summary *s, int success,
			  struct diag *d);
/* A run that did not end as its summary said: its last metrics record,
 * {"type":"end","exit_code":...,"reason":why (may be NULL),"step":step (the optimizer
 * steps done, counted from the first run: after a stop, the checkpoint's; left out where
 * step < 0, training not begun)}. Nothing for exit 0 after report_finish, nothing twice. */
void report_end(struct report *r, int exit_code, const char *why, long step);
/* Safe to call twice. */
void report_free(struct report *r);

#endif
