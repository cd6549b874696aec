/*
 * report.h - what rank 0 tells the user: a '#' header, one progress line per
 * --log-every optimizer steps, a '#' summary, and the --metrics JSON Lines
 * file (written beside its final name and renamed into place only when the
 * run succeeds, so a failed run leaves no partial file).
 *
 * Every function is a no-op on ranks other than 0.
 */
#ifndef DDPT_REPORT_H
#define DDPT_REPORT_H

#include <stdio.h>

#include "status.h"
#include "world.h" /* struct world, world_gather */

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
	double bytes_in, bytes_out; /* data moved into and out of this replica's memory */
	size_t state_bytes;         /* backend memory held: weights, grads, optimizer, activations */
};

struct report {
	int root;           /* this rank prints */
	int quiet;
	FILE *out;          /* progress and summary (stdout) */
	FILE *metrics;      /* JSON Lines, or NULL */
	char *metrics_path; /* final name */
	char *metrics_tmp;  /* name while the run lasts */
	int header_done;
	int tty;            /* stdout is a terminal: one progress line, redrawn in place */
	int line_open;      /* a redrawn line awaits its newline */
};

/* Open the metrics file if asked; root is 1 on the rank that reports. */
enum status report_init(struct report *r, int root, int quiet, const char *metrics_path,
			struct diag *d);
/* A '#' line (printf-style) on the terminal, unless quiet. */
void report_note(struct report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One logged optimizer step: epoch of epochs, step of total, the loss and accuracy (means
 * since the last line; accuracy NaN when the loss has none), the step's lr, samples/s,
 * elapsed seconds and the steps this run has taken (for the ETA). */
void report_step(struct report *r, long epoch, long epochs, long step, long total, double loss,
		 double acc, double lr, double samples_per_s, double elapsed, long steps_here);
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
};

/* One "#" line per rank (nccl-tests style), gathered onto rank 0: pid, host and node-local
 * rank (found here), and what the caller says of the rank: its device ("cpu", "GPU 0 of
 * 2 (...)") and its gradient path ("mpi", "mpi, staged ..."). Collective over w. */
void report_ranks(struct report *r, struct world *w, const char *device, const char *path);

/* Peak resident memory of this process in MiB. */
double report_peak_rss_mib(void);

/* Print the per-replica (dp) or per-rank (ddp) table and the summary, write the metrics
 * summary object and move the metrics file into place (success) or remove it (failure). */
enum status report_finish(struct report *r, const struct report_summary *s, int success,
			  struct diag *d);
/* Safe to call twice; removes an unfinished metrics file. */
void report_free(struct report *r);

#endif
