/*
 * tracebuf.h - the recording side of --trace: one thread's buffer of spans and
 * the inline recorders the trainers, the model and the CUDA module call.
 *
 * Each recording thread appends fixed-size events to its own struct trace_buf,
 * so recording takes no lock and makes no system call beyond the clock read
 * (clock_now, the program's one clock). A NULL buffer means "not traced": every
 * recorder is then one predictable NULL test. On a GPU, a buffer may carry a
 * device clock (struct trace_dev, from the CUDA module): spans are then pairs of
 * markers on the stream that runs the work, and trace_resolve turns them into
 * times once that work has finished.
 *
 * It is not the trace file: observe/trace.h aligns the ranks' clocks, merges the
 * buffers and writes the file. This header is here, in core, because the layers
 * below the observers (the model, the backends) record into it.
 */
#ifndef DDPT_TRACEBUF_H
#define DDPT_TRACEBUF_H

#include <stdint.h>
#include <stdlib.h>

#include "core/clock.h" /* clock_now: every event's clock */

#ifdef __cplusplus
extern "C" {
#endif

/* What a span is; trace_what_names gives the text ("forward", "allreduce", ...). */
enum trace_what {
	TR_LOAD,        /* the batch: host loader and copy to the device */
	TR_FORWARD,     /* idx: layer */
	TR_LOSS,
	TR_BACKWARD,    /* idx: layer */
	TR_ALLREDUCE,   /* async, idx: bucket; from launch to completion */
	TR_WAIT,        /* waiting for the step's last all-reduces */
	TR_OPTIMIZER,
	TR_VALIDATION,
	TR_CHECKPOINT,
	TR_STOP,        /* instant: asked to stop */
	TR_SCATTER,     /* dp: the chunks and the output gradient to the replicas */
	TR_REPLICATE,   /* dp: replica 0's weights to replica i */
	TR_GATHER,      /* dp: outputs onto replica 0 */
	TR_REDUCE,      /* dp: gradients summed onto replica 0 */
	TR_CHECK,       /* the replica check (--check-replicas) */
	TR_REDUCE_SCATTER, /* async, idx: bucket; ZeRO's gradients, launch to completion */
	TR_ALL_GATHER,  /* async, idx: layer (ZeRO-3) or -1; ZeRO's parameters */
	TR_NWHAT
};
extern const char *const trace_what_names[TR_NWHAT];

enum trace_kind { TRACE_SPAN, TRACE_ASYNC, TRACE_INSTANT };

/* One recorded span. Times are seconds on this process's monotonic clock; with a device
 * clock, m0/m1 hold its markers (>= 0) until trace_resolve fills t0/t1. */
struct trace_event {
	double t0, t1;
	double bytes;   /* all-reduce payload, else 0 */
	int32_t step;   /* optimizer step in progress (1-based) */
	int32_t m0, m1; /* device-clock markers, or -1 */
	int16_t what;   /* enum trace_what */
	int16_t idx;    /* layer or bucket, or -1 */
	int16_t tid;    /* thread: dp replica, or 0 */
	int8_t kind;    /* enum trace_kind */
	int8_t open;    /* begun, not yet ended */
};

/* A device clock (the CUDA module's): mark records an event on the compute stream (and
 * opens or closes an NVTX range named name); time returns a marker's time on the host's
 * monotonic clock, waiting for it if needed; reset recycles every marker. */
struct trace_dev {
	int (*mark)(void *ctx, const char *name, int begin);
	double (*time)(void *ctx, int marker);
	void (*reset)(void *ctx);
};

/* One thread's events. */
struct trace_buf {
	struct trace_event *ev; /* (cap) */
	size_t n, cap, max;     /* max: the bound; further events are counted in dropped */
	size_t resolved;        /* events before this one have times */
	size_t dropped;
	int tid;
	int32_t step;
	const struct trace_dev *dev; /* NULL: host times */
	void *dev_ctx;
};

/* Append an event; returns its index, or -1 (no buffer, bound reached, out of memory). */
static inline long trace_add(struct trace_buf *b, int what, int idx, int kind)
{
	struct trace_event *e;

	if (b == NULL)
		return -1;
	if (b->n == b->cap) {
		size_t cap = b->cap ? 2 * b->cap : 1024;
		struct trace_event *p;

		if (b->n >= b->max || (p = (struct trace_event *)realloc(b->ev, cap * sizeof *p)) == NULL) {
			b->dropped++;
			return -1;
		}
		b->ev = p;
		b->cap = cap;
	}
	e = &b->ev[b->n];
	e->t0 = e->t1 = 0.0;
	e->bytes = 0.0;
	e->step = b->step;
	e->m0 = e->m1 = -1;
	e->what = (int16_t)what;
	e->idx = (int16_t)idx;
	e->tid = (int16_t)b->tid;
	e->kind = (int8_t)kind;
	e->open = 1;
	return (long)b->n++;
}

/* Begin a span on the thread's own work (the compute stream with a device clock). */
static inline long trace_begin(struct trace_buf *b, int what, int idx)
{
	long i = trace_add(b, what, idx, TRACE_SPAN);

	if (i >= 0) {
		if (b->dev != NULL)
			b->ev[i].m0 = b->dev->mark(b->dev_ctx, trace_what_names[what], 1);
		else
			b->ev[i].t0 = clock_now();
	}
	return i;
}

/* End span i (from trace_begin; -1 is ignored). */
static inline void trace_end(struct trace_buf *b, long i)
{
	if (b == NULL || i < 0)
		return;
	if (b->dev != NULL)
		b->ev[i].m1 = b->dev->mark(b->dev_ctx, trace_what_names[b->ev[i].what], 0);
	else
		b->ev[i].t1 = clock_now();
	b->ev[i].open = 0;
}

/* A moment (e.g. the stop signal seen). */
static inline void trace_instant(struct trace_buf *b, int what)
{
	long i = trace_add(b, what, -1, TRACE_INSTANT);

	if (i >= 0) {
		b->ev[i].t0 = b->ev[i].t1 = clock_now();
		b->ev[i].open = 0;
	}
}

/* A finished span with known times (async: an all-reduce from launch to completion). */
static inline void trace_record(struct trace_buf *b, int what, int idx, int kind, double t0,
				double t1, double bytes)
{
	long i = trace_add(b, what, idx, kind);

	if (i >= 0) {
		b->ev[i].t0 = t0;
		b->ev[i].t1 = t1;
		b->ev[i].bytes = bytes;
		b->ev[i].open = 0;
	}
}

/* Resolve device-clock markers of events recorded since the last call (after the work
 * they mark has been queued; waits for it). No-op without a device clock. */
void trace_resolve(struct trace_buf *b);

#ifdef __cplusplus
}
#endif

#endif
