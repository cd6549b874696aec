/*
 * loader.h - the stream of micro-batches a trainer consumes, prepared one
 * ahead into two host buffers from the backend's host_alloc (pinned memory
 * on a GPU), so that filling batch k+1 overlaps the device working on batch
 * k. The data a step sees is the same whatever the backend.
 */
#ifndef DDPT_LOADER_H
#define DDPT_LOADER_H

#include "backend/backend.h"
#include "data/data.h"
#include "data/sampler.h"
#include "core/status.h"

struct batch {
	long epoch;       /* 0-based */
	long mb;          /* micro-batch index within the epoch */
	int n;            /* rows */
	const float *x;   /* (n, in) host */
	const float *y;   /* (n, out) host */
	int buf;          /* the loader's host buffer holding x and y (0 or 1) */
};

#define LOADER_MAX_USERS 64 /* backends that may read one host buffer (dp: one per replica) */

struct loader {
	const struct dataset *ds;
	struct backend *be;  /* owns the host buffers (borrowed) */
	struct sampler s;
	long batch;          /* rows per micro-batch */
	long nmicro;         /* micro-batches per epoch */
	long epochs;
	float *hx[2], *hy[2];
	struct batch ready;  /* the prepared batch, if have_ready */
	int have_ready;
	int buf;             /* buffer the next prepared batch goes into */
	long next_epoch, next_mb;
	int fresh_epoch;     /* the sampler has not been set for next_epoch yet */
	/* Backends with copies from buffer i queued (loader_copied), waited for before it is
	 * refilled: a pinned buffer is read by the device when the copy runs, not when it is
	 * queued. */
	struct backend *users[2][LOADER_MAX_USERS];
	int nusers[2];
};

/* Batches of `batch` rows over this rank's DistributedSampler(world, rank) shard; with
 * drop_short the last, short batch of each epoch is dropped. */
struct loader_config {
	int world, rank;       /* the sampler's replicas, and which one this loader serves */
	int shuffle;           /* reshuffle every epoch (DistributedSampler's shuffle) */
	int sampler_drop_last; /* the sampler drops the tail that does not divide over world */
	uint64_t seed;
	long batch;            /* rows per micro-batch */
	int drop_short;        /* drop each epoch's last micro-batch if it is short */
	long epochs;
};
enum status loader_init(struct loader *l, const struct dataset *ds, const struct loader_config *cfg,
			struct backend *be, struct diag *d);
/* Micro-batches per epoch of n samples under cfg (the loader's nmicro); 0: none. */
long loader_epoch_length(size_t n, const struct loader_config *cfg);
/* Begin at micro-batch mb of epoch (a resumed run); before the first loader_next. */
void loader_seek(struct loader *l, long epoch, long mb);
/* The next batch (prepared earlier or now); 0 when all epochs are done. Valid until the
 * call after next of loader_next. */
int loader_next(struct loader *l, struct batch *b);
/* Say that be has queued copies from b's host buffers: before that buffer is refilled,
 * the loader waits until be's device has run them. */
void loader_copied(struct loader *l, const struct batch *b, struct backend *be);
/* Prepare the batch after the one loader_next returned last, into the other buffer, once
 * the copies queued from it have run; an error of that wait is returned. */
enum status loader_prefetch(struct loader *l, struct diag *d);
/* Safe to call twice. */
void loader_free(struct loader *l);

#endif
