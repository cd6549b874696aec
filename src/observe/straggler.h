/*
 * straggler.h - which rank sets the pace: each rank's step times, their
 * percentiles at the end, and a warning during the run when one rank is
 * persistently slower than the others (--straggler-warn).
 *
 * In synchronous data parallelism every rank's step lasts as long as the
 * slowest rank's, so step times alone cannot name a straggler: the others
 * spend the difference waiting in the all-reduce. What differs is the compute
 * time, the step less that wait, and that is what the warning compares, against
 * the median rank's (the lower median, so with two ranks: against the other).
 *
 * Each window is summed up by its median step (robust to the odd step a busy
 * machine stretches); the live check costs one MPI_Allgather of that one
 * double per rank every STRAGGLER_WINDOW steps, and only with --straggler-warn; the samples cost
 * 16 bytes per step (at most 2^20 kept: beyond that every other one is
 * dropped and the stride doubles, which keeps the percentiles representative).
 *
 * Test hook: DDPTRAIN_TEST_SLOW_RANK=R:SECONDS makes rank R sleep that long
 * after every step (tests/straggler.sh), so a straggler can be made on demand.
 */
#ifndef DDPT_STRAGGLER_H
#define DDPT_STRAGGLER_H

#include <stddef.h>

#include "core/status.h"

#define STRAGGLER_WINDOW 20  /* steps per comparison */
#define STRAGGLER_STRIKES 2  /* consecutive slow windows before a warning */
#define STRAGGLER_MAX_SAMPLES ((size_t)1 << 20)

struct world;

/* One rank's figures, gathered on rank 0 for the summary. */
struct straggler_rank {
	double step_p50, step_p99, step_max; /* seconds per optimizer step */
	double busy_p50;                     /* compute seconds per step (less the all-reduce wait) */
	char host[64];
};

struct straggler {
	double warn;            /* ratio to the median that warns; 0: no live check */
	double *step_s, *busy_s; /* (cap) samples kept */
	size_t n, cap, stride, skip;
	double win[STRAGGLER_WINDOW]; /* compute seconds of the current window's steps */
	long win_steps;
	int *strikes;           /* rank 0: consecutive slow windows per rank */
	int *warned;            /* rank 0: warned about this rank (until it recovers) */
	char (*hosts)[64];      /* rank 0: each rank's host name */
	double *all;            /* (size) the window's gather */
	int rank, size;
	int slow_rank;          /* test hook, or -1 */
	double slow_s;
};

/* Collective: rank 0 learns every rank's host name (host: this rank's), for the warning. */
enum status straggler_init(struct straggler *s, struct world *w, double warn, const char *host,
			   struct diag *d);
/* After each optimizer step: its wall time and the part not spent waiting for the
 * all-reduce. Collective every STRAGGLER_WINDOW steps when warn > 0 (every rank calls it
 * for every step); rank 0 hands each warning, one line, to say(arg, line). */
enum status straggler_step(struct straggler *s, struct world *w, long step, double step_s,
			   double busy_s, void (*say)(void *arg, const char *line), void *arg,
			   struct diag *d);
/* This rank's percentiles (host: its name). */
void straggler_mine(const struct straggler *s, const char *host, struct straggler_rank *out);
/* The q-quantile (0..1) of x[0..n) by linear interpolation, as numpy's default; x is
 * sorted in place. 0 when n is 0. */
double straggler_quantile(double *x, size_t n, double q);
/* Index of the slowest of n ranks by compute p50, and its ratio to the median rank (the
 * lower median: with two ranks, the other one). */
int straggler_slowest(const struct straggler_rank *all, int n, double *ratio);
/* Safe to call twice. */
void straggler_free(struct straggler *s);

#endif
