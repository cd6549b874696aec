/* straggler.c - step-time samples, their percentiles and the live straggler warning. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "observe/straggler.h"
#include "comm/world.h"     /* struct world, world_watch_begin/end */

enum status straggler_init(struct straggler *s, struct world *w, double warn, const char *host,
			   struct diag *d)
{
	const char *hook = getenv("DDPTRAIN_TEST_SLOW_RANK");
	const int rank = w->rank, size = w->size;
	char mine[64];
	enum status st;

	memset(s, 0, sizeof *s);
	s->warn = warn;
	s->rank = rank;
	s->size = size;
	s->stride = 1;
	s->slow_rank = -1;
	if (hook != NULL && sscanf(hook, "%d:%lf", &s->slow_rank, &s->slow_s) != 2)
		s->slow_rank = -1;
	s->cap = 1024;
	s->step_s = malloc(s->cap * sizeof *s->step_s);
	s->busy_s = malloc(s->cap * sizeof *s->busy_s);
	s->all = calloc((size_t)size, sizeof *s->all);
	if (rank == 0) {
		s->strikes = calloc((size_t)size, sizeof *s->strikes);
		s->warned = calloc((size_t)size, sizeof *s->warned);
		s->hosts = calloc((size_t)size, sizeof *s->hosts);
	}
	if (s->step_s == NULL || s->busy_s == NULL || s->all == NULL ||
	    (rank == 0 && (s->strikes == NULL || s->warned == NULL || s->hosts == NULL)))
		st = diag_set(d, ST_RUNTIME, "out of memory for the step-time samples");
	else
		st = ST_OK;
	/* Everyone takes part in the gather; rank 0's buffer exists if st is ST_OK there. */
	snprintf(mine, sizeof mine, "%s", host);
	if (world_all(w, st == ST_OK))
		st = world_gather(w, mine, sizeof mine, s->hosts, d);
	else if (st == ST_OK)
		st = diag_set(d, ST_RUNTIME, "another rank ran out of memory for the step-time samples");
	if (st != ST_OK)
		straggler_free(s);
	return st;
}

/* Keep a sample; past the bound, halve what is kept and take every other step from then on. */
static void keep(struct straggler *s, double step_s, double busy_s)
{
	if (s->skip > 0) {
		s->skip--;
		return;
	}
	s->skip = s->stride - 1;
	if (s->n == s->cap && s->cap < STRAGGLER_MAX_SAMPLES) {
		double *a = realloc(s->step_s, 2 * s->cap * sizeof *a), *b;

		if (a != NULL)
			s->step_s = a;
		b = a != NULL ? realloc(s->busy_s, 2 * s->cap * sizeof *b) : NULL;
		if (b != NULL) {
			s->busy_s = b;
			s->cap *= 2;
		}
	}
	if (s->n == s->cap) {
		for (size_t i = 0; i < s->n / 2; i++) {
			s->step_s[i] = s->step_s[2 * i];
			s->busy_s[i] = s->busy_s[2 * i];
		}
		s->n /= 2;
		s->stride *= 2;
		s->skip = s->stride - 1;
	}
	s->step_s[s->n] = step_s;
	s->busy_s[s->n] = busy_s;
	s->n++;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double straggler_quantile(double *x, size_t n, double q)
{
	double pos, frac;
	size_t i;

	if (n == 0)
		return 0.0;
	qsort(x, n, sizeof *x, cmp_double);
	pos = q * (double)(n - 1);
	i = (size_t)pos;
	frac = pos - (double)i;
	return i + 1 < n ? x[i] + frac * (x[i + 1] - x[i]) : x[n - 1];
}

/* The median rank, the lower one of an even count: with two ranks, the other one. */
static double lower_median(double *x, int n)
{
	qsort(x, (size_t)n, sizeof *x, cmp_double);
	return x[(n - 1) / 2];
}

enum status straggler_step(struct straggler *s, struct world *w, long step, double step_s,
			   double busy_s, void (*say)(void *arg, const char *line), void *arg,
			   struct diag *d)
{
	double median, mine, *sorted;
	char line[512];
	int rc;

	keep(s, step_s, busy_s);
	if (s->rank == s->slow_rank && s->slow_s > 0) {
		struct timespec ts = {(time_t)s->slow_s, (long)(fmod(s->slow_s, 1.0) * 1e9)};

		nanosleep(&ts, NULL);
	}
	if (s->warn <= 0 || s->size < 2)
		return ST_OK;
	s->win[s->win_steps] = busy_s;
	if (++s->win_steps < STRAGGLER_WINDOW)
		return ST_OK;
	mine = straggler_quantile(s->win, STRAGGLER_WINDOW, 0.5);
	world_watch_begin(w, "the straggler check");
	rc = MPI_Allgather(&mine, 1, MPI_DOUBLE, s->all, 1, MPI_DOUBLE, w->comm);
	world_watch_end(w);
	if (rc != MPI_SUCCESS)
		return world_mpi_error(d, rc, "MPI_Allgather(straggler check)");
	s->win_steps = 0;
	if (s->rank != 0)
		return ST_OK;
	sorted = malloc((size_t)s->size * sizeof *sorted);
	if (sorted == NULL)
		return ST_OK; /* the warning is advice: skip this window */
	memcpy(sorted, s->all, (size_t)s->size * sizeof *sorted);
	median = lower_median(sorted, s->size);
	free(sorted);
	for (int k = 0; k < s->size; k++) {
		double ratio = median > 0 ? s->all[k] / median : 0.0;

		if (ratio <= s->warn) {
			s->strikes[k] = 0;
			s->warned[k] = 0;
			continue;
		}
		if (++s->strikes[k] >= STRAGGLER_STRIKES && !s->warned[k]) {
			s->warned[k] = 1;
			snprintf(line, sizeof line, "warning: straggler: rank %d on %s computes %.2fx the median rank's time per step (median %.3f ms against %.3f ms over steps %ld-%ld; --straggler-warn=%g)",
				 k, s->hosts[k], ratio, 1e3 * s->all[k], 1e3 * median,
				 step - STRAGGLER_WINDOW + 1, step, s->warn);
			say(arg, line);
		}
	}
	return ST_OK;
}

void straggler_mine(const struct straggler *s, const char *host, struct straggler_rank *out)
{
	double *x = malloc((s->n ? s->n : 1) * sizeof *x);

	memset(out, 0, sizeof *out);
	snprintf(out->host, sizeof out->host, "%s", host);
	if (x == NULL)
		return;
	memcpy(x, s->step_s, s->n * sizeof *x);
	out->step_p50 = straggler_quantile(x, s->n, 0.5);
	out->step_p99 = straggler_quantile(x, s->n, 0.99);
	out->step_max = straggler_quantile(x, s->n, 1.0);
	memcpy(x, s->busy_s, s->n * sizeof *x);
	out->busy_p50 = straggler_quantile(x, s->n, 0.5);
	free(x);
}

int straggler_slowest(const struct straggler_rank *all, int n, double *ratio)
{
	double *b = malloc((size_t)(n > 0 ? n : 1) * sizeof *b), median;
	int worst = 0;

	*ratio = 1.0;
	if (b == NULL || n < 1) {
		free(b);
		return 0;
	}
	for (int k = 0; k < n; k++) {
		b[k] = all[k].busy_p50;
		if (all[k].busy_p50 > all[worst].busy_p50)
			worst = k;
	}
	median = lower_median(b, n);
	*ratio = median > 0 ? all[worst].busy_p50 / median : 1.0;
	free(b);
	return worst;
}

void straggler_free(struct straggler *s)
{
	free(s->step_s);
	free(s->busy_s);
	free(s->all);
	free(s->strikes);
	free(s->warned);
	free(s->hosts);
	s->step_s = s->busy_s = s->all = NULL;
	s->strikes = s->warned = NULL;
	s->hosts = NULL;
	s->n = s->cap = 0;
}
