/*
 * collspan.c - the NCCL communicator's collectives timed for --trace and the bucket
 * table, from device events read without waiting. Each observed collective is
 * bracketed by two timing events on the communication stream and an NVTX range, into
 * the span set of its group (the collectives between two waits: one of OBS_SETS, in
 * turn).
 *
 * Their times are read without waiting: at the start of each observed group, every
 * set whose last event the device has passed is told (oldest first), each collective
 * with the observer's tag from when it started; the rest wait for a later step, or for
 * the observer to leave. A set's times are relative to a reference event recorded
 * before its first collective, put on the host's clock when it was recorded on an idle
 * stream, else through the set before it (its reference plus the time between the two
 * events). The host waits only when it runs OBS_SETS groups ahead of the device (it
 * reads a step's results one step late: two steps hold at most six), and once for the
 * first reference. Steps captured into a CUDA graph are not observed (the communicator
 * does not call collspan_begin for them).
 *
 * Not here: how to wait (the communicator's, with its timeout and its error: struct
 * collspan_waits), and what a span means (the observer's: comm_observer.done).
 */
#include <stdio.h>

#include <nvtx3/nvToolsExt.h>

#include "core/clock.h"
#include "cuda_ctx.h"
#include "cuda/collspan.h"

void collspan_init(struct collspan *o, cudaStream_t stream, const struct collspan_waits *w)
{
	o->stream = stream;
	o->w = *w;
}

/* Put set x's reference on the host's clock from the set recorded before it, whose
 * reference still stands (a set is recorded again only once the set after it has its
 * time: observe_group). block: wait for x's reference, else only if the device passed it.
 * Returns whether x's time is known. */
static int set_anchor(struct collspan *o, struct span_set *x, int block)
{
	const struct span_set *p = &o->set[(x - o->set + OBS_SETS - 1) % OBS_SETS];
	float ms = 0.0f;

	if (x->anchored || !x->recorded)
		return x->anchored;
	if (!p->anchored || (block && !o->w.event(o->w.arg, x->ref)) ||
	    cudaEventElapsedTime(&ms, p->ref, x->ref) != cudaSuccess) {
		cudaGetLastError(); /* not ready yet is no error */
		return 0;
	}
	x->ref_host = p->ref_host + 1e-3 * ms;
	x->anchored = 1;
	return 1;
}

/* Tell the observer of set x's spans, once the device is past them: at once, or, block,
 * after waiting for them. Returns whether none is left. */
static int report_set(struct collspan *o, struct span_set *x, int block)
{
	if (x->n == 0)
		return 1;
	if (block ? !o->w.event(o->w.arg, x->t1[x->n - 1]) : cudaEventQuery(x->t1[x->n - 1]) != cudaSuccess) {
		cudaGetLastError();
		return 0;
	}
	if (!set_anchor(o, x, block))
		return 0;
	for (int i = 0; i < x->n; i++) {
		float a = 0.0f, b = 0.0f;

		if (cudaEventElapsedTime(&a, x->ref, x->t0[i]) != cudaSuccess ||
		    cudaEventElapsedTime(&b, x->ref, x->t1[i]) != cudaSuccess) {
			cudaGetLastError();
			continue;
		}
		o->to.done(o->to.arg, x->tag[i], i, x->len[i], x->ref_host + 1e-3 * a,
			   x->ref_host + 1e-3 * b);
	}
	x->n = 0;
	return 1;
}

/* Tell the observer of every set, oldest first, as far as the device has passed them
 * (block: waiting for all of them). */
static void report_sets(struct collspan *o, int block)
{
	for (int k = 1; k <= OBS_SETS; k++)
		if (!report_set(o, &o->set[(o->cur + k) % OBS_SETS], block))
			return;
}

/* Before an observed group's first collective: tell what the device has done, and begin
 * the next set with its reference. */
static void observe_group(struct collspan *o)
{
	struct span_set *x = &o->set[(o->cur + 1) % OBS_SETS];
	struct span_set *after = &o->set[(o->cur + 2) % OBS_SETS]; /* its time comes from x's */
	cudaError_t idle;
	int first = 1;

	report_sets(o, 0);
	report_set(o, x, 1); /* the host is OBS_SETS groups ahead of the device: wait */
	set_anchor(o, after, 1);
	for (int k = 0; k < OBS_SETS; k++)
		first &= !o->set[k].recorded;
	idle = cudaStreamQuery(o->stream);
	if (idle != cudaSuccess) {
		cudaGetLastError();
		/* nothing to take the time from: the first reference waits */
		if (first && o->w.stream(o->w.arg))
			idle = cudaSuccess;
	}
	x->recorded = cudaEventRecord(x->ref, o->stream) == cudaSuccess;
	x->anchored = x->recorded && idle == cudaSuccess;
	if (x->anchored) /* else set_anchor finds it through the set before */
		x->ref_host = clock_now();
	o->cur = (int)(x - o->set);
}

void collspan_begin(struct collspan *o, int i, const char *kind)
{
	char name[48];

	if (i == 0)
		observe_group(o);
	snprintf(name, sizeof name, "%s bucket %d", kind, i);
	nvtxRangePushA(name);
	cudaEventRecord(o->set[o->cur].t0[i], o->stream);
	o->set[o->cur].tag[i] = comm_observer_tag(&o->to);
}

void collspan_end(struct collspan *o, int i, size_t n)
{
	struct span_set *x = &o->set[o->cur];

	cudaEventRecord(x->t1[i], o->stream);
	nvtxRangePop();
	x->len[i] = n;
	x->n = i + 1;
}

void collspan_observe(struct collspan *o, const struct comm_observer *obs)
{
	cudaError_t rc = cudaSuccess;

	if (o->to.done != NULL)
		report_sets(o, 1); /* waits only while no error was seen (collspan_waits) */
	o->to.done = NULL;
	for (int k = 0; k < OBS_SETS; k++)
		o->set[k].recorded = o->set[k].anchored = 0;
	if (obs == NULL)
		return;
	for (int k = 0; k < OBS_SETS && rc == cudaSuccess; k++) {
		rc = cuda_events_create(&o->set[k].ref, 1);
		if (rc == cudaSuccess)
			rc = cuda_events_create(o->set[k].t0, COMM_MAX_INFLIGHT);
		if (rc == cudaSuccess)
			rc = cuda_events_create(o->set[k].t1, COMM_MAX_INFLIGHT);
	}
	if (rc == cudaSuccess)
		o->to = *obs;
}

void collspan_free(struct collspan *o)
{
	for (int k = 0; k < OBS_SETS; k++) {
		cuda_events_destroy(o->set[k].t0, COMM_MAX_INFLIGHT);
		cuda_events_destroy(o->set[k].t1, COMM_MAX_INFLIGHT);
		cuda_events_destroy(&o->set[k].ref, 1);
	}
}
