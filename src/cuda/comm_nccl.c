/*
 * comm_nccl.c - gradient all-reduce over NCCL, on a communication stream of
 * its own: each bucket waits for an event recorded on the compute stream
 * when its gradients are ready, and the compute stream waits for the last
 * all-reduce before the optimizer step. No host synchronisation; the whole
 * exchange can be captured into a CUDA graph.
 *
 * NCCL failures are looked for with ncclCommGetAsyncError wherever the host
 * waits, while it waits and once more when the work is done (cuda/hostwait.c)
 * -- here, and in every wait of the backend (its poll hook), which is where a
 * replayed graph's all-reduce is waited for -- and a wait longer than
 * the timeout aborts the communicator, so a failed or missing peer ends the
 * run with a message instead of a hang. Once an error was seen the teardown
 * aborts the communicator (ncclCommAbort) rather than destroying it, which
 * could wait for peers that will never come.
 *
 * Observed (comm_ops.observe: --trace and the bandwidth table), each
 * all-reduce is bracketed by two timing events on the communication stream
 * and an NVTX range; their times are read at the start of the next step
 * (when the host has long waited for them) or when the observer leaves.
 * Steps captured into a CUDA graph are not observed.
 */
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvtx3/nvToolsExt.h>

#include "core/clock.h"
#include "dist/comm.h"
#include "cuda_ctx.h"
#include "cuda_module.h" /* nccl_unique_id, nccl_comm_init as module.c sees them */
#include "cuda/hostwait.h" /* hostwait: the broadcast's wait */
#include "backend/gpu.h"

struct nccl_ctx {
	ncclComm_t comm;
	struct cuda_ctx *cu;          /* the compute backend (borrowed) */
	cudaStream_t stream;          /* communication */
	cudaEvent_t ready[COMM_MAX_INFLIGHT];
	cudaEvent_t done;
	int n;                        /* all-reduces since the last wait_all */
	int timeout_s;
	int failed;                   /* an error was seen: abort at teardown */
	struct comm_observer obs;     /* obs.done NULL: not observed */
	cudaEvent_t t0[COMM_MAX_INFLIGHT], t1[COMM_MAX_INFLIGHT]; /* observed: each one's span */
	size_t len[COMM_MAX_INFLIGHT];
	int pending;                  /* observed spans not yet reported */
	cudaEvent_t ref;              /* recorded at host time ref_host on the idle stream */
	double ref_host;
};

/* Abort the communicator: kernels waiting for a dead peer return, nothing waits. */
static void nccl_abort(struct nccl_ctx *c)
{
	c->failed = 1;
	if (c->comm != NULL)
		ncclCommAbort(c->comm);
	c->comm = NULL;
}

/* Tell the observer of the spans recorded so far (waiting for them). */
static void report_pending(struct nccl_ctx *c)
{
	for (int i = 0; i < c->pending; i++) {
		float a = 0.0f, b = 0.0f;

		if (cudaEventSynchronize(c->t1[i]) != cudaSuccess ||
		    cudaEventElapsedTime(&a, c->ref, c->t0[i]) != cudaSuccess ||
		    cudaEventElapsedTime(&b, c->ref, c->t1[i]) != cudaSuccess)
			continue;
		c->obs.done(c->obs.arg, i, c->len[i], c->ref_host + 1e-3 * a, c->ref_host + 1e-3 * b);
	}
	c->pending = 0;
}

/* Before an observed step's first all-reduce: report the last step's, and take a new
 * reference (elapsed times are float milliseconds, so the reference must stay near). */
static void observe_step(struct nccl_ctx *c)
{
	report_pending(c);
	cudaStreamSynchronize(c->stream); /* idle by now: the previous step was waited for */
	c->ref_host = clock_now();
	cudaEventRecord(c->ref, c->stream);
}

static enum status nccl_fail(struct diag *d, ncclResult_t r, const char *call)
{
	return diag_set(d, ST_RUNTIME, "%s failed: %s (%s)", call, ncclGetErrorString(r),
			ncclGetLastError(NULL));
}

static enum status cuda_fail(struct diag *d, cudaError_t rc, const char *call)
{
	return diag_set(d, ST_RUNTIME, "%s failed: %s", call, cudaGetErrorString(rc));
}

/* hostwait's query: whether the communication stream is idle. */
static int stream_query(void *arg, struct diag *d)
{
	struct nccl_ctx *c = arg;
	cudaError_t q = cudaStreamQuery(c->stream);

	if (q == cudaSuccess || q == cudaErrorNotReady)
		return q == cudaSuccess;
	cuda_fail(d, q, "cudaStreamQuery(communication stream)");
	return -1;
}

/* The backend's poll hook: an asynchronous error aborts the communicator and is the
 * error of the wait that saw it. */
static enum status nccl_poll(void *arg, struct diag *d)
{
	struct nccl_ctx *c = arg;
	ncclResult_t async = ncclSuccess;

	if (c->comm == NULL)
		return c->failed ? diag_set(d, ST_RUNTIME, "NCCL communicator aborted after an error") : ST_OK;
	if (ncclCommGetAsyncError(c->comm, &async) == ncclSuccess &&
	    (async == ncclSuccess || async == ncclInProgress))
		return ST_OK;
	nccl_abort(c);
	return nccl_fail(d, async, "NCCL all-reduce (ncclCommGetAsyncError)");
}

/* Wait for the communication stream, watching NCCL's asynchronous errors and the clock;
 * a wait that failed leaves the communicator aborted. */
static enum status wait_stream(struct nccl_ctx *c, const char *what, struct diag *d)
{
	const struct hostwait w = {what, c->cu->device, stream_query, c, nccl_poll, c, c->timeout_s};
	enum status st = hostwait(&w, d);

	if (st != ST_OK)
		nccl_abort(c);
	return st;
}

/* The communication stream waits for the work queued on the compute stream so far. */
static cudaError_t after_compute(struct nccl_ctx *c, cudaEvent_t ev)
{
	cudaError_t rc = cudaEventRecord(ev, c->cu->stream);

	return rc == cudaSuccess ? cudaStreamWaitEvent(c->stream, ev, 0) : rc;
}

static enum status nccl_allreduce_start(void *ctx, float *buf, size_t n, unsigned flags,
					struct diag *d)
{
	struct nccl_ctx *c = ctx;
	ncclResult_t r;
	cudaError_t rc;
	int observed = 0;

	if (c->n == COMM_MAX_INFLIGHT)
		return diag_set(d, ST_RUNTIME, "internal: more than %d all-reduces in flight",
				COMM_MAX_INFLIGHT);
	rc = after_compute(c, c->ready[c->n]);
	if (rc != cudaSuccess)
		return cuda_fail(d, rc, "cudaStreamWaitEvent(bucket ready)");
	if (c->obs.done != NULL) {
		enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;

		cudaStreamIsCapturing(c->cu->stream, &cap);
		observed = cap == cudaStreamCaptureStatusNone;
	}
	if (observed) {
		char name[48];

		if (c->n == 0)
			observe_step(c);
		snprintf(name, sizeof name, "allreduce bucket %d", c->n);
		nvtxRangePushA(name);
		cudaEventRecord(c->t0[c->n], c->stream);
	}
	/* Gradients are pre-scaled by 1/world in the loss seed, so a sum is the mean. */
	r = ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, c->comm, c->stream);
	if (observed) {
		cudaEventRecord(c->t1[c->n], c->stream);
		nvtxRangePop();
		c->len[c->n] = n;
		c->pending = c->n + 1;
	}
	if (r != ncclSuccess && r != ncclInProgress)
		return nccl_fail(d, r, "ncclAllReduce");
	c->n++;
	return ST_OK;
}

static void nccl_progress(void *ctx)
{
}

static enum status nccl_wait_all(void *ctx, struct diag *d)
{
	struct nccl_ctx *c = ctx;
	ncclResult_t async = ncclSuccess;
	cudaError_t rc;

	c->n = 0;
	rc = cudaEventRecord(c->done, c->stream);
	if (rc == cudaSuccess)
		rc = cudaStreamWaitEvent(c->cu->stream, c->done, 0);
	if (rc != cudaSuccess)
		return cuda_fail(d, rc, "cudaStreamWaitEvent(all-reduces done)");
	if (ncclCommGetAsyncError(c->comm, &async) == ncclSuccess && async != ncclSuccess &&
	    async != ncclInProgress) {
		nccl_abort(c);
		return nccl_fail(d, async, "NCCL all-reduce");
	}
	return ST_OK;
}

static enum status nccl_bcast(void *ctx, float *buf, size_t n, int root, struct diag *d)
{
	struct nccl_ctx *c = ctx;
	ncclResult_t r;
	cudaError_t rc;

	/* After what the compute stream did to buf: the zeroing of the weights (alloc's
	 * cudaMemsetAsync) on every rank, rank 0's copy of its initial weights. No all-reduce
	 * is in flight outside a step, so the first bucket's event is free. */
	rc = after_compute(c, c->ready[0]);
	if (rc != cudaSuccess)
		return cuda_fail(d, rc, "cudaStreamWaitEvent(weights ready)");
	r = ncclBroadcast(buf, buf, n, ncclFloat, root, c->comm, c->stream);
	if (r != ncclSuccess && r != ncclInProgress)
		return nccl_fail(d, r, "ncclBroadcast");
	return wait_stream(c, "ncclBroadcast(weights)", d);
}

/* comm_ops.observe: timing events are made on first use. */
static void nccl_observe(void *ctx, const struct comm_observer *obs)
{
	struct nccl_ctx *c = ctx;
	cudaError_t rc = cudaSuccess;

	if (obs == NULL) {
		if (c->obs.done != NULL && c->pending > 0) {
			cudaStreamSynchronize(c->stream);
			report_pending(c);
		}
		c->obs.done = NULL;
		return;
	}
	if (c->ref == NULL)
		rc = cudaEventCreate(&c->ref);
	for (int i = 0; i < COMM_MAX_INFLIGHT && rc == cudaSuccess; i++) {
		if (c->t0[i] == NULL)
			rc = cudaEventCreate(&c->t0[i]);
		if (rc == cudaSuccess && c->t1[i] == NULL)
			rc = cudaEventCreate(&c->t1[i]);
	}
	if (rc == cudaSuccess) /* without its events the observer is simply not told */
		c->obs = *obs;
}

static void nccl_fini(void *ctx)
{
	struct nccl_ctx *c = ctx;

	if (c == NULL)
		return;
	for (int i = 0; i < COMM_MAX_INFLIGHT; i++) {
		if (c->t0[i] != NULL)
			cudaEventDestroy(c->t0[i]);
		if (c->t1[i] != NULL)
			cudaEventDestroy(c->t1[i]);
	}
	if (c->ref != NULL)
		cudaEventDestroy(c->ref);
	if (c->cu != NULL) {
		/* ncclCommDestroy waits until every graph holding one of its collectives is
		 * destroyed: they go first (the trainer normally did this already). */
		cudaSetDevice(c->cu->device);
		for (int i = 0; i < BACKEND_GRAPHS; i++)
			if (c->cu->exec[i] != NULL) {
				cudaGraphExecDestroy(c->cu->exec[i]);
				c->cu->exec[i] = NULL;
			}
		if (c->cu->err.st != ST_OK)
			c->failed = 1; /* the device failed: peers may be stuck in a collective */
		c->cu->poll = NULL;
		c->cu->poll_arg = NULL;
	}
	if (c->comm != NULL && c->failed) {
		nccl_abort(c);
	} else if (c->comm != NULL) {
		cudaStreamSynchronize(c->stream);
		ncclCommDestroy(c->comm);
	}
	for (int i = 0; i < COMM_MAX_INFLIGHT; i++)
		if (c->ready[i] != NULL)
			cudaEventDestroy(c->ready[i]);
	if (c->done != NULL)
		cudaEventDestroy(c->done);
	if (c->stream != NULL)
		cudaStreamDestroy(c->stream);
	free(c);
}

/* comm_ops.describe: NCCL picks its algorithms itself; the table says only "nccl". */
static void nccl_describe(void *ctx, char *buf, size_t len)
{
	snprintf(buf, len, "nccl");
}

static const struct comm_ops comm_nccl_ops = {
	.name = "nccl",
	.capturable = 1,
	.allreduce_start = nccl_allreduce_start,
	.progress = nccl_progress,
	.wait_all = nccl_wait_all,
	.bcast = nccl_bcast,
	.fini = nccl_fini,
	.observe = nccl_observe,
	.describe = nccl_describe,
};

enum status nccl_unique_id(unsigned char id[GPU_NCCL_ID_BYTES], struct diag *d)
{
	ncclUniqueId u;
	ncclResult_t r = ncclGetUniqueId(&u);

	if (r != ncclSuccess)
		return nccl_fail(d, r, "ncclGetUniqueId");
	memcpy(id, &u, sizeof u < GPU_NCCL_ID_BYTES ? sizeof u : GPU_NCCL_ID_BYTES);
	return ST_OK;
}

enum status nccl_comm_init(struct comm *out, struct backend *be,
			   const unsigned char id[GPU_NCCL_ID_BYTES], int rank, int size,
			   int timeout_s, int (*ready)(void *arg, int ok), void *arg,
			   struct diag *d)
{
	struct nccl_ctx *c = calloc(1, sizeof *c);
	ncclUniqueId u;
	ncclResult_t r;
	cudaError_t rc = cudaSuccess;
	enum status st = ST_OK;

	out->ops = NULL;
	out->ctx = NULL;
	if (c == NULL) {
		st = diag_set(d, ST_RUNTIME, "nccl: out of memory");
	} else {
		c->timeout_s = timeout_s;
		rc = cudaSetDevice(((struct cuda_ctx *)be->ctx)->device);
		if (rc == cudaSuccess)
			rc = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
		for (int i = 0; i < COMM_MAX_INFLIGHT && rc == cudaSuccess; i++)
			rc = cudaEventCreateWithFlags(&c->ready[i], cudaEventDisableTiming);
		if (rc == cudaSuccess)
			rc = cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming);
		if (rc != cudaSuccess)
			st = cuda_fail(d, rc, "nccl: stream and event set-up");
	}
	/* Every rank reaches this point, failed or not: the init below blocks until all
	 * ranks are in it, so a rank that cannot get there must stop the others first. */
	if (!ready(arg, st == ST_OK)) {
		nccl_fini(c);
		return st != ST_OK ? st : ST_STOP;
	}
	if (st != ST_OK) {
		nccl_fini(c);
		return st;
	}
	memcpy(&u, id, sizeof u);
	r = ncclCommInitRank(&c->comm, size, u, rank);
	if (r != ncclSuccess) {
		c->comm = NULL;
		nccl_fini(c);
		return nccl_fail(d, r, "ncclCommInitRank");
	}
	c->cu = be->ctx;
	c->cu->poll = nccl_poll;
	c->cu->poll_arg = c;
	c->cu->timeout_s = timeout_s;
	out->ops = &comm_nccl_ops;
	out->ctx = c;
	return ST_OK;
}
