/*
 * trace.h - --trace: a timeline of every rank's steps as a Chrome trace-event
 * JSON file (loads in Perfetto, chrome://tracing and Nsight's importers).
 *
 * Each recording thread appends fixed-size events to its own struct
 * trace_buf (ddp: one per rank; dp: one per replica thread), so recording
 * takes no lock and makes no system call beyond the clock read (clock_now,
 * the program's one clock). When tracing
 * is off, or the step lies outside --trace-steps, the trainers hold a NULL
 * buffer and every recording call is one predictable NULL test.
 *
 * At start-up rank 0 measures each rank's clock offset by MPI ping-pong
 * (the round trip with the smallest delay wins; half of it bounds the error,
 * written to the trace's metadata). At the end every rank sends its events
 * to rank 0, which shifts them onto its own clock and writes one file,
 * atomically (a temporary beside the final name, renamed into place).
 *
 * On a GPU, a buffer may carry a device clock (struct trace_dev, from the
 * CUDA module): spans are then pairs of CUDA events on the stream that runs
 * the work, also pushed as NVTX ranges, and trace_resolve turns them into
 * times once the step's work has finished. This module itself never calls
 * CUDA; the inline recorders below are all the CUDA module uses of it.
 *
 * It is not a profiler: it records only the spans the trainers mark.
 */
#ifndef DDPT_TRACE_H
#define DDPT_TRACE_H

#include <stdint.h>
#include <stdlib.h>

#include "core/status.h"
#include "core/tracebuf.h" /* struct trace_buf, trace_event, the recorders */

#ifdef __cplusplus
extern "C" {
#endif

struct world;

#define TRACE_MAX_THREADS 64 /* OPT_MAX_REPLICAS: one buffer per dp replica thread */

/* The whole run's trace: one buffer per recording thread. */
struct trace {
	const char *path;     /* --trace, or NULL: off */
	long lo, hi;          /* steps recorded, 1-based inclusive (hi 0: to the end) */
	int nbuf;
	int dp;               /* one process, buffers are replica threads */
	struct trace_buf buf[TRACE_MAX_THREADS];
	double *offset;       /* rank 0: each rank's clock minus rank 0's, seconds */
	double residual;      /* rank 0: the largest error bound of those offsets */
	double origin;        /* rank 0's clock at start-up: time 0 of the file */
	int rank, size;
};

/* Parse "A:B", "A:" or ":B" (steps, 1-based, inclusive) into lo, hi (0: no end). */
enum status trace_parse_steps(const char *s, long *lo, long *hi, struct diag *d);

/* Prepare nbuf (1..TRACE_MAX_THREADS) buffers of at most max_events each (dp: nbuf replica
 * threads of one process); path NULL leaves tracing off. */
enum status trace_init(struct trace *t, const char *path, long lo, long hi, int nbuf, int dp,
		       size_t max_events, struct diag *d);

/* Buffer tid for the step about to run, or NULL when tracing is off or the step lies
 * outside --trace-steps. Sets the buffer's step so its events carry it. */
static inline struct trace_buf *trace_buf_for(struct trace *t, int tid, long step)
{
	if (t == NULL || t->path == NULL || step < t->lo || (t->hi > 0 && step > t->hi))
		return NULL;
	t->buf[tid].step = (int32_t)step;
	return &t->buf[tid];
}

/* Offset of a remote clock from one ping-pong: we sent at t0 and received at t1 the
 * remote's reading tr. Returns tr - midpoint; *err gets the bound (half the round trip). */
double trace_clock_offset(double t0, double tr, double t1, double *err);

/* Collective: rank 0 measures every rank's clock offset. */
enum status trace_sync_clocks(struct trace *t, struct world *w, struct diag *d);

/* Collective: rank 0 gathers every rank's events and writes the file. meta: extra
 * "key=value" strings for the metadata (NULL-terminated), e.g. mode and version.
 * host: this rank's host name. */
enum status trace_write(struct trace *t, struct world *w, const char *const *meta,
			const char *host, struct diag *d);

/* Write events (already on one clock, seconds) of nranks processes as a Chrome trace to
 * path, atomically. ev[r], n[r]: rank r's events; names[r]: its process name. Exposed for
 * the unit tests; trace_write calls it on rank 0. */
enum status trace_write_file(const char *path, const struct trace_event *const *ev,
			     const size_t *n, const char *const *names, int nranks, int dp,
			     double origin, const char *const *meta, struct diag *d);

/* Safe to call twice. */
void trace_free(struct trace *t);

#ifdef __cplusplus
}
#endif

#endif
