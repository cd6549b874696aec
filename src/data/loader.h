/*
 * loader.h - the stream of micro-batches a trainer consumes. Worker threads make
 * them ahead of the trainer: the batches after the one in use, two of them, are
 * gathered (.npy rows) or generated (synthetic samples, rows split over the
 * threads) into host buffers from the backend's host_alloc (pinned memory on a
 * GPU), while the device works; the trainer waits only when a batch is not ready,
 * and the loader counts that time. Small batches are made by the caller's thread in
 * loader_prefetch, as the device works (a worker's wake-up would cost more). The data a step sees is the same whatever the
 * backend and however many threads: each batch's sample indices are fixed, in
 * order, before its rows are made. Synthetic data for a device is not made here at
 * all: a batch is its indices, and the backend's synth op makes the rows in device
 * memory (the same bytes).
 */
#ifndef DDPT_LOADER_H
#define DDPT_LOADER_H

#include <pthread.h>

#include "backend/backend.h"
#include "data/data.h"
#include "data/sampler.h"
#include "core/status.h"

#define LOADER_BUFFERS 3 /* the batch in use and two made ahead; at most BACKEND_MARKS */
#define LOADER_THREADS 4 /* at most this many workers making batches */
/* Below this many values (rows x (in + out)) a batch is made by the caller's thread, in
 * loader_prefetch: waking a worker would cost more than the batch (the ToyModel's 300). */
#define LOADER_INLINE_VALUES (1 << 14)
/* A buffer's copies are marked per buffer, and a captured device step reads one buffer. */
_Static_assert(LOADER_BUFFERS <= BACKEND_MARKS && LOADER_BUFFERS <= BACKEND_GRAPHS,
	       "a mark and a graph slot for each loader buffer");

struct batch {
	long epoch;       /* 0-based */
	long mb;          /* micro-batch index within the epoch */
	int n;            /* rows */
	const float *x;   /* (n, in) host */
	const float *y;   /* (n, out) host */
	const uint32_t *idx; /* (n) the samples' indices, host (pinned on a GPU) */
	/* Synthetic data on a device (the backend has synth and its own memory): x and y are
	 * NULL, and the step makes the rows there from idx with this generator; else NULL. */
	const struct synth_spec *synth;
	int buf;          /* the loader's host buffer holding x, y and idx (0..LOADER_BUFFERS-1) */
	double waited_s;  /* the loader's total wait for batches so far, this one's included */
};

#define LOADER_MAX_USERS 64 /* backends that may read one host buffer (dp: one per replica) */

/* A buffer and the batch it holds. */
struct loader_slot {
	float *x, *y;         /* (batch, in), (batch, out) host */
	uint32_t *idx;        /* (batch) host */
	struct batch b;       /* what it holds, once queued */
	long seq;             /* the batch's place in the stream: workers take the oldest first */
	int chunks, taken, done; /* row chunks of the batch; handed to a worker; finished */
	/* Backends with copies from this buffer queued (loader_copied), waited for before it
	 * is refilled: a pinned buffer is read by the device when the copy runs, not when it
	 * is queued. */
	struct backend *users[LOADER_MAX_USERS];
	int nusers;
};

/* Fills rows idx[0..n) of x (n, in) and y (n, out) in place of data_fill (tests: a reader
 * that waits to be let go); called from the loader's threads. */
typedef void loader_fill_fn(void *arg, const struct dataset *ds, const uint32_t *idx, size_t n,
			    float *x, float *y);

struct loader {
	const struct dataset *ds;
	struct backend *be;  /* owns the host buffers (borrowed) */
	struct sampler s;
	long batch;          /* rows per micro-batch */
	long nmicro;         /* micro-batches per epoch */
	long epochs;
	struct loader_slot slot[LOADER_BUFFERS];
	long head, tail;     /* batches handed out, and queued, since the start or the last seek */
	long next_epoch, next_mb; /* the next batch to queue */
	int fresh_epoch;     /* the sampler has not been set for next_epoch yet */
	int end;             /* all epochs are queued */
	double waited_s;     /* time loader_next blocked for a batch not yet made */
	loader_fill_fn *fill;
	void *fill_arg;
	pthread_mutex_t mu;
	pthread_cond_t work; /* a chunk to make, or quit */
	pthread_cond_t made; /* a chunk made */
	pthread_t thread[LOADER_THREADS];
	int nthreads, quit, sync_init;
	int on_device;       /* synthetic rows are made by the backend (batch.synth) */
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
	loader_fill_fn *fill;  /* NULL: data_fill */
	void *fill_arg;
	int threads;           /* workers; 0: loader_workers(node_ranks), or none below LOADER_INLINE_VALUES */
	int node_ranks;        /* processes on this node that may share its CPUs (0: 1) */
};
/* Workers by default: one per CPU this process may run on beyond the trainer's own thread
 * (its affinity mask, shared among node_ranks processes when that mask is the whole node:
 * ranks mpirun did not bind), at least 1 and at most LOADER_THREADS. mpirun binds each
 * rank to one core where it starts two or fewer: there the one worker shares it. */
int loader_workers(int node_ranks);
/* The workers a loader of cfg over ds starts when it makes its rows on the host. */
int loader_threads(const struct dataset *ds, const struct loader_config *cfg);
/* Bytes a loader of cfg over ds maps on the host when it makes its rows there (not on a
 * device): its buffers and its workers' stacks; what an address-space limit must leave
 * room for. */
size_t loader_map_bytes(const struct dataset *ds, const struct loader_config *cfg);
enum status loader_init(struct loader *l, const struct dataset *ds, const struct loader_config *cfg,
			struct backend *be, struct diag *d);
/* Micro-batches per epoch of n samples under cfg (the loader's nmicro); 0: none. */
long loader_epoch_length(size_t n, const struct loader_config *cfg);
/* Begin at micro-batch mb of epoch (a resumed run); before the first loader_next. */
void loader_seek(struct loader *l, long epoch, long mb);
/* The next batch (made ahead, or waited for: b->waited_s counts the wait); 0 when all
 * epochs are done. Valid until the second loader_prefetch after it. */
int loader_next(struct loader *l, struct batch *b);
/* Say that be has queued copies from b's host buffers: before that buffer is refilled,
 * the loader waits until be's device has run them. */
void loader_copied(struct loader *l, const struct batch *b, struct backend *be);
/* Queue the batches after the one loader_next returned last into the buffers free for them
 * (two ahead), each once the copies queued from its buffer have run; an error of that
 * wait is returned. Returns without waiting for the rows to be made. */
enum status loader_prefetch(struct loader *l, struct diag *d);
/* Stops the threads; safe to call twice. */
void loader_free(struct loader *l);

#endif
