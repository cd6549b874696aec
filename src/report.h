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

struct report {
	int root;           /* this rank prints */
	int quiet;
	FILE *out;          /* progress and summary (stdout) */
	FILE *metrics;      /* JSON Lines, or NULL */
	char *metrics_path; /* final name */
	char *metrics_tmp;  /* name while the run lasts */
	int header_done;
};

/* Open the metrics file if asked; root is 1 on the rank that reports. */
enum status report_init(struct report *r, int root, int quiet, const char *metrics_path,
			struct diag *d);
/* A '#' line (printf-style) on the terminal, unless quiet. */
void report_note(struct report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One logged optimizer step. */
void report_step(struct report *r, long epoch, long step, long total, double loss,
		 double samples_per_s, double elapsed);

struct report_summary {
	long steps;
	long epochs;
	double seconds;
	double samples_per_s;
	double first_loss, final_loss;
	double comm_wait_share; /* fraction of step time this rank waited for all-reduces */
};

/* Print the summary, write the metrics summary object and move the metrics file into
 * place (success) or remove it (failure). */
enum status report_finish(struct report *r, const struct report_summary *s, int success,
			  struct diag *d);
/* Safe to call twice; removes an unfinished metrics file. */
void report_free(struct report *r);

#endif
