/*
 * collspan.h - the observer of a communication stream's collectives (comm_ops.observe
 * on NCCL: --trace and the bucket table), timed by device events and read without
 * waiting. The NCCL communicator (comm_nccl.c) owns one and brackets each observed
 * collective with collspan_begin / collspan_end; how to wait, when it must, is the
 * communicator's (struct collspan_waits).
 */
#ifndef DDPT_COLLSPAN_H
#define DDPT_COLLSPAN_H

#include <cuda_runtime.h>
#include <stddef.h>

#include "comm/comm.h"

/* Span sets in turn: a step has one to three groups of collectives between two waits
 * (buckets, the clipping norm, ZeRO's all-gathers). */
#define OBS_SETS 8

/* The spans of one group, until they are told. */
struct span_set {
	cudaEvent_t ref;      /* on the communication stream before the first span */
	double ref_host;      /* ref on clock_now's clock, once known (anchored) */
	int anchored;
	int recorded;         /* ref was recorded: the next set's time may come from it */
	struct comm_tag tag[COMM_MAX_INFLIGHT]; /* the observer's tag when each started */
	cudaEvent_t t0[COMM_MAX_INFLIGHT], t1[COMM_MAX_INFLIGHT];
	size_t len[COMM_MAX_INFLIGHT];
	int n;                /* spans recorded and not yet told */
};

/* The communicator's waits, each under its timeout and never after an error. */
struct collspan_waits {
	int (*event)(void *arg, cudaEvent_t ev); /* until ev has passed; whether it did */
	int (*stream)(void *arg);                /* until the stream is idle; whether it is */
	void *arg;
};

struct collspan {
	struct comm_observer to;  /* to.done NULL: not observed */
	cudaStream_t stream;      /* the communication stream (borrowed) */
	struct collspan_waits w;
	struct span_set set[OBS_SETS]; /* observed groups' spans, in turn */
	int cur;                  /* the set of the group being observed */
};

/* Observe the collectives queued on stream (o zeroed before: nothing observed yet). */
void collspan_init(struct collspan *o, cudaStream_t stream, const struct collspan_waits *w);
/* comm_ops.observe: the observer that leaves is told what is left (waiting for it); the
 * next (NULL: none) begins with a fresh reference. Its events are made on first use;
 * without them it is simply not told. */
void collspan_observe(struct collspan *o, const struct comm_observer *obs);
/* Collective i of a group (0: the group's first), a kind ("allreduce"), is queued next
 * (its NVTX range opens) / was queued, n floats (the range closes). */
void collspan_begin(struct collspan *o, int i, const char *kind);
void collspan_end(struct collspan *o, int i, size_t n);
/* Destroy the events; the stream's work is done or abandoned. */
void collspan_free(struct collspan *o);

#endif
