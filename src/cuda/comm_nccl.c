/*
 * comm_nccl.c - gradient collectives over NCCL, on a communication stream of
 * its own: each bucket waits for an event recorded on the compute stream
 * when its gradients are ready, and the compute stream waits for the
 * collectives before the optimizer step (wait_all), or for the first k of them
 * (wait_first: an event recorded after each). No host synchronisation; the whole
 * exchange can be captured into a CUDA graph.
 *
 * The collectives: the all-reduce (ncclAllReduce in place), the reduce-scatter and
 * the all-gather over the caller's cuts. Where every part has the same length c
 * (cuts[q] = q * c) they are NCCL's own, in place by NCCL's rule ("In-place
 * Operations" in NCCL's user guide: ncclReduceScatter(data, data + rank * recvcount,
 * ...), ncclAllGather(data + rank * sendcount, data, ...)); otherwise -- the shard
 * boundaries make the parts uneven, some even empty -- they are one ncclReduce of
 * each non-empty part to its owner, or one ncclBroadcast of each from its owner,
 * fused into one NCCL operation by ncclGroupStart / ncclGroupEnd.
 *
 * COMM_WIRE collectives (struct comm.wire fp16 or bf16, PyTorch's compress hooks'
 * arithmetic) narrow the bucket into a 16-bit mirror on the device (wire.cu: round
 * to nearest even), sum it in ncclFloat16 / ncclBfloat16, and widen the result back
 * into the float buffer, all on the communication stream. NCCL sums the 16-bit
 * values in its own order (ring or tree, chosen by NCCL), each partial sum rounded to
 * the type: at 2 ranks that is one rounding, round16(round16(a) + round16(b)); at more
 * ranks the order is NCCL's and not ours to state.
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
 * Observed (comm_ops.observe: --trace and the bandwidth table), each collective
 * is timed by the span observer (collspan.c), which reads its device events without
 * waiting; it waits, rarely, through this file's waits. Steps captured into a CUDA
 * graph are not observed.
 */
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#include "core/clock.h"
#include "comm/comm.h"
#include "cuda_ctx.h"
#include "cuda/collspan.h"  /* the observer of the collectives' spans */
#include "cuda_module.h" /* comm_nccl_unique_id, comm_nccl_init as module.c sees them */
#include "cuda/hostwait.h" /* hostwait: the broadcast's wait */
#include "cuda/wire.h"     /* wire_narrow, wire_widen: the 16-bit wire's conversions */
#include "backend/gpu.h"

struct nccl_ctx {
	ncclComm_t comm;
	struct cuda_ctx *cu;          /* the compute backend (borrowed) */
	cudaStream_t stream;          /* communication */
	cudaEvent_t ready[COMM_MAX_INFLIGHT];
	cudaEvent_t fin[COMM_MAX_INFLIGHT]; /* on the communication stream after collective i */
	cudaEvent_t done;
	int n;                        /* collectives (every kind) since the last wait_all */
	int rank, size;
	enum comm_wire wire;          /* the type of COMM_WIRE collectives */
	uint16_t *mirror[COMM_MAX_INFLIGHT]; /* (mirror_n[i]) device: collective i's 16-bit wire */
	size_t mirror_n[COMM_MAX_INFLIGHT];
	int timeout_s;
	int failed;                   /* an error was seen: abort at teardown */
	int (*peer_failed)(void *);   /* nccl_comm_init's: 1 + a rank that failed on its own, or 0 */
	void *peer_arg;
	int peer;                     /* what peer_failed answered when it ended this communicator */
	char why[512];                /* the observer's wait that failed, if one did */
	struct collspan obs;          /* obs.to.done NULL: not observed */
};

/* Abort the communicator: kernels waiting for a dead peer return, nothing waits. */
static void nccl_abort(struct nccl_ctx *c)
{
	c->failed = 1;
	if (c->comm != NULL)
		ncclCommAbort(c->comm);
	c->comm = NULL;
}

/* A CUDA call's result as a status; a failure is d's one line: the call, CUDA's message. */
static enum status cuda_result(cudaError_t rc, const char *call, struct diag *d)
{
	if (rc == cudaSuccess)
		return ST_OK;
	return diag_set(d, ST_RUNTIME, "%s failed: %s", call, cudaGetErrorString(rc));
}

/* An NCCL call's result as a status (ncclInProgress is no failure: the work is queued);
 * a failure is d's one line: the call, NCCL's message and its last error's text. */
static enum status nccl_result(ncclResult_t r, const char *call, struct diag *d)
{
	if (r == ncclSuccess || r == ncclInProgress)
		return ST_OK;
	return diag_set(d, ST_RUNTIME, "%s failed: %s (%s)", call, ncclGetErrorString(r),
			ncclGetLastError(NULL));
}

/* Check a CUDA or NCCL call, named in the message as written: ST_OK, or d set. (The
 * first (call) only picks the helper by its result's type; it is not evaluated.) */
#define CHECK(call, d) \
	_Generic((call), cudaError_t: cuda_result, ncclResult_t: nccl_result)((call), #call, (d))

/* hostwait's query: whether the communication stream is idle. */
static int stream_query(void *arg, struct diag *d)
{
	struct nccl_ctx *c = arg;
	cudaError_t q = cudaStreamQuery(c->stream);

	if (q == cudaSuccess || q == cudaErrorNotReady)
		return q == cudaSuccess;
	cuda_result(q, "cudaStreamQuery(communication stream)", d); /* looked at first: named here */
	return -1;
}

/* The backend's poll hook: an asynchronous error aborts the communicator and is the
 * error of the wait that saw it. */
static enum status nccl_poll(void *arg, struct diag *d)
{
	struct nccl_ctx *c = arg;
	ncclResult_t async = ncclSuccess;

	/* A peer that failed on its own will never join what this rank waits for: this rank
	 * ends at once, and the agreement that follows prints that peer's reason, not this. */
	if (c->comm != NULL && c->peer_failed != NULL && (c->peer = c->peer_failed(c->peer_arg)) > 0)
		nccl_abort(c);
	if (c->comm == NULL && c->peer > 0)
		return diag_set(d, ST_PEER, "rank %d failed, so this rank's collectives were aborted", c->peer - 1);
	if (c->comm == NULL && c->why[0] != '\0')
		return diag_set(d, ST_RUNTIME, "%s", c->why);
	if (c->comm == NULL)
		return c->failed ? diag_set(d, ST_RUNTIME, "NCCL communicator aborted after an error") : ST_OK;
	if (ncclCommGetAsyncError(c->comm, &async) == ncclSuccess &&
	    (async == ncclSuccess || async == ncclInProgress))
		return ST_OK;
	nccl_abort(c);
	return nccl_result(async, "NCCL all-reduce (ncclCommGetAsyncError)", d);
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

/* hostwait's query of an observer's timing event. */
static int event_query(void *arg, struct diag *d)
{
	cudaError_t q = cudaEventQuery((cudaEvent_t)arg);

	if (q == cudaSuccess || q == cudaErrorNotReady)
		return q == cudaSuccess;
	cuda_result(q, "cudaEventQuery(all-reduce timing event)", d);
	return -1;
}

/* Wait for an observer's event as the module's other waits do (the communicator polled,
 * under the timeout); whether it completed. Never after an error (the peers may be gone);
 * a failure aborts the communicator, and the next wait of the step names it (c->why). */
static int wait_event(void *arg, cudaEvent_t ev)
{
	struct nccl_ctx *c = arg;
	struct diag d = {0};
	const struct hostwait w = {"the all-reduce observer's timing event", c->cu->device, event_query, ev,
				   nccl_poll, c, c->timeout_s};

	if (c->failed || c->comm == NULL)
		return 0;
	if (hostwait(&w, &d) == ST_OK)
		return 1;
	snprintf(c->why, sizeof c->why, "%s", d.msg);
	nccl_abort(c);
	return 0;
}

/* Wait for the communication stream to be idle, for the observer's first reference
 * (collspan_waits.stream): never after an error; a failure is named by the next wait of
 * the step (c->why). */
static int wait_first_ref(void *arg)
{
	struct nccl_ctx *c = arg;
	struct diag d = {0};

	if (c->failed)
		return 0;
	if (wait_stream(c, "the all-reduce observer's first reference", &d) == ST_OK)
		return 1;
	snprintf(c->why, sizeof c->why, "%s", d.msg);
	return 0;
}

/* The communication stream waits for the work queued on the compute stream so far. */
static enum status after_compute(struct nccl_ctx *c, cudaEvent_t ev, struct diag *d)
{
	enum status st = CHECK(cudaEventRecord(ev, c->cu->stream), d);

	return st == ST_OK ? CHECK(cudaStreamWaitEvent(c->stream, ev, 0), d) : st;
}

/* Before collective c->n: the communication stream waits for the compute stream (the
 * bucket is ready), and an observed one opens its span. Sets *observed. */
static enum status coll_begin(struct nccl_ctx *c, const char *kind, int *observed, struct diag *d)
{
	enum status st;

	*observed = 0; /* c->n < COMM_MAX_INFLIGHT: the doors (comm.c) see to that */
	st = CHECK(cudaSetDevice(c->cu->device), d); /* the wire's kernels launch on this device */
	if (st == ST_OK)
		st = after_compute(c, c->ready[c->n], d);
	if (st != ST_OK)
		return st;
	if (c->obs.to.done != NULL) {
		enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;

		cudaStreamIsCapturing(c->cu->stream, &cap);
		*observed = cap == cudaStreamCaptureStatusNone;
	}
	if (*observed)
		collspan_begin(&c->obs, c->n, kind);
	return ST_OK;
}

/* After collective c->n was queued (st: how that went): close its span, mark its end
 * for wait_first, count it. */
static enum status coll_end(struct nccl_ctx *c, size_t n, int observed, enum status st,
			    struct diag *d)
{
	if (observed)
		collspan_end(&c->obs, c->n, n);
	if (st != ST_OK)
		return st;
	st = CHECK(cudaEventRecord(c->fin[c->n], c->stream), d);
	if (st == ST_OK)
		c->n++;
	return st;
}

/* The 16-bit mirror of collective c->n, at least n values: allocated on first use and
 * grown outside a capture only (the steps a graph records repeat the eager ones, so a
 * capture finds it grown). cudaFree waits for the device, so the old one is idle. */
static enum status wire_mirror(struct nccl_ctx *c, size_t n, uint16_t **out, struct diag *d)
{
	enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
	int i = c->n;
	enum status st;

	*out = c->mirror[i];
	if (c->mirror_n[i] >= n)
		return ST_OK;
	cudaStreamIsCapturing(c->cu->stream, &cap);
	if (cap != cudaStreamCaptureStatusNone)
		return diag_set(d, ST_RUNTIME,
				"internal: collective %d's 16-bit wire buffer (%zu values) must grow to %zu inside a CUDA graph capture",
				i, c->mirror_n[i], n);
	if (c->mirror[i] != NULL) {
		cudaFree(c->mirror[i]);
		c->mirror[i] = NULL;
		c->mirror_n[i] = 0;
	}
	st = CHECK(cudaMalloc((void **)&c->mirror[i], n * sizeof(uint16_t)), d);
	if (st != ST_OK) {
		c->mirror[i] = NULL;
		return st;
	}
	c->mirror_n[i] = n;
	c->cu->allocated += n * sizeof(uint16_t);
	*out = c->mirror[i];
	return ST_OK;
}

/* Does this collective travel in 16 bits? Then narrow buf[0..n) into its mirror (*wbuf)
 * on the communication stream, and say NCCL's type. */
static enum status wire_in(struct nccl_ctx *c, unsigned flags, const float *buf, size_t n,
			   uint16_t **wbuf, ncclDataType_t *type, struct diag *d)
{
	enum status st;

	*wbuf = NULL;
	*type = ncclFloat;
	if (!(flags & COMM_WIRE) || c->wire == COMM_WIRE_F32)
		return ST_OK;
	st = wire_mirror(c, n, wbuf, d);
	if (st != ST_OK)
		return st;
	*type = c->wire == COMM_WIRE_F16 ? ncclFloat16 : ncclBfloat16;
	return CHECK(wire_narrow(*wbuf, buf, n, c->wire, c->stream), d);
}

/* The mirror's [lo, hi) widened back into buf on the communication stream. */
static enum status wire_out(struct nccl_ctx *c, const uint16_t *wbuf, float *buf, size_t lo,
			    size_t hi, struct diag *d)
{
	if (wbuf == NULL)
		return ST_OK;
	return CHECK(wire_widen(buf + lo, wbuf + lo, hi - lo, c->wire, c->stream), d);
}

static enum status nccl_allreduce_start(void *ctx, float *buf, size_t n, unsigned flags,
					struct diag *d)
{
	struct nccl_ctx *c = ctx;
	ncclDataType_t type;
	uint16_t *w;
	int observed;
	enum status st = coll_begin(c, "allreduce", &observed, d);

	if (st != ST_OK)
		return st;
	st = wire_in(c, flags, buf, n, &w, &type, d);
	/* Gradients are pre-scaled by 1/world in the loss seed, so a sum is the mean. */
	if (st == ST_OK && w != NULL)
		st = CHECK(ncclAllReduce(w, w, n, type, ncclSum, c->comm, c->stream), d);
	else if (st == ST_OK)
		st = CHECK(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, c->comm, c->stream), d);
	if (st == ST_OK)
		st = wire_out(c, w, buf, 0, n, d);
	return coll_end(c, n, observed, st, d);
}

/* The part length every rank has, or 0 when they differ (cuts as comm_ops says: the
 * doors, comm.c, checked them). */
static size_t equal_part(const struct nccl_ctx *c, const size_t *cuts)
{
	size_t len = cuts[1] - cuts[0];

	for (int q = 0; q < c->size; q++)
		if (cuts[q + 1] - cuts[q] != len)
			return 0;
	return len;
}

/* Close a group opened by ncclGroupStart whatever happened inside it (an open group would
 * swallow the next calls); st: how the calls inside went, the first failure kept. */
static enum status group_end(enum status st, struct diag *d)
{
	if (st == ST_OK)
		return CHECK(ncclGroupEnd(), d);
	(void)ncclGroupEnd();
	return st;
}

/* Bytes of one value of NCCL type t (of the two this file uses). */
static size_t type_bytes(ncclDataType_t t)
{
	return t == ncclFloat ? sizeof(float) : sizeof(uint16_t);
}

/* comm_ops.reduce_scatter_start: equal parts are one ncclReduceScatter in place
 * (recvbuff = sendbuff + rank * recvcount, NCCL's in-place rule); uneven ones one
 * ncclReduce of each non-empty part to its owner, grouped (each rank's own part in
 * place at its owner, sendbuff == recvbuff). */
static enum status nccl_reduce_scatter_start(void *ctx, float *buf, size_t n, const size_t *cuts,
					     unsigned flags, struct diag *d)
{
	struct nccl_ctx *c = ctx;
	ncclDataType_t type;
	uint16_t *w;
	char *base;
	size_t part = equal_part(c, cuts), es;
	int observed;
	enum status st = coll_begin(c, "reduce-scatter", &observed, d);

	if (st != ST_OK)
		return st;
	st = wire_in(c, flags, buf, n, &w, &type, d);
	base = w != NULL ? (char *)w : (char *)buf;
	es = type_bytes(type);
	if (st == ST_OK && part > 0) {
		st = CHECK(ncclReduceScatter(base, base + (size_t)c->rank * part * es, part, type,
					     ncclSum, c->comm, c->stream), d);
	} else if (st == ST_OK) {
		st = CHECK(ncclGroupStart(), d);
		for (int q = 0; q < c->size && st == ST_OK; q++) {
			char *p = base + cuts[q] * es;

			if (cuts[q + 1] > cuts[q])
				st = CHECK(ncclReduce(p, p, cuts[q + 1] - cuts[q], type, ncclSum, q,
						      c->comm, c->stream), d);
		}
		st = group_end(st, d);
	}
	if (st == ST_OK)
		st = wire_out(c, w, buf, cuts[c->rank], cuts[c->rank + 1], d);
	return coll_end(c, n, observed, st, d);
}

/* comm_ops.all_gather_start (float32): equal parts are one ncclAllGather in place
 * (sendbuff = recvbuff + rank * sendcount); uneven ones one ncclBroadcast of each
 * non-empty part from its owner, in place, grouped. */
static enum status nccl_all_gather_start(void *ctx, float *buf, size_t n, const size_t *cuts,
					 struct diag *d)
{
	struct nccl_ctx *c = ctx;
	size_t part = equal_part(c, cuts);
	int observed;
	enum status st = coll_begin(c, "all-gather", &observed, d);

	if (st != ST_OK)
		return st;
	if (part > 0) {
		st = CHECK(ncclAllGather(buf + (size_t)c->rank * part, buf, part, ncclFloat, c->comm,
					 c->stream), d);
	} else {
		st = CHECK(ncclGroupStart(), d);
		for (int q = 0; q < c->size && st == ST_OK; q++)
			if (cuts[q + 1] > cuts[q])
				st = CHECK(ncclBroadcast(buf + cuts[q], buf + cuts[q], cuts[q + 1] - cuts[q],
							 ncclFloat, q, c->comm, c->stream), d);
		st = group_end(st, d);
	}
	return coll_end(c, n, observed, st, d);
}

static void nccl_progress(void *ctx)
{
}

/* An asynchronous NCCL error seen now aborts the communicator and is the caller's. */
static enum status async_check(struct nccl_ctx *c, struct diag *d)
{
	ncclResult_t async = ncclSuccess;

	if (ncclCommGetAsyncError(c->comm, &async) == ncclSuccess && async != ncclSuccess &&
	    async != ncclInProgress) {
		nccl_abort(c);
		return nccl_result(async, "NCCL all-reduce", d);
	}
	return ST_OK;
}

/* comm_ops.wait_first: the compute stream waits for the event recorded after the k-th
 * collective (the communication stream runs them in order); the host does not wait. */
static enum status nccl_wait_first(void *ctx, int k, struct diag *d)
{
	struct nccl_ctx *c = ctx;
	enum status st;

	if (k == 0) /* 0 <= k <= c->n: the doors (comm.c) see to that */
		return ST_OK;
	st = CHECK(cudaStreamWaitEvent(c->cu->stream, c->fin[k - 1], 0), d);
	return st == ST_OK ? async_check(c, d) : st;
}

static enum status nccl_wait_all(void *ctx, struct diag *d)
{
	struct nccl_ctx *c = ctx;
	enum status st;

	c->n = 0;
	st = CHECK(cudaEventRecord(c->done, c->stream), d);
	if (st == ST_OK)
		st = CHECK(cudaStreamWaitEvent(c->cu->stream, c->done, 0), d);
	return st == ST_OK ? async_check(c, d) : st;
}

static enum status nccl_bcast(void *ctx, float *buf, size_t n, int root, struct diag *d)
{
	struct nccl_ctx *c = ctx;
	enum status st;

	/* After what the compute stream did to buf: the zeroing of the weights (alloc's
	 * cudaMemsetAsync) on every rank, rank 0's copy of its initial weights. No all-reduce
	 * is in flight outside a step, so the first bucket's event is free. */
	st = after_compute(c, c->ready[0], d);
	if (st == ST_OK)
		st = CHECK(ncclBroadcast(buf, buf, n, ncclFloat, root, c->comm, c->stream), d);
	return st == ST_OK ? wait_stream(c, "ncclBroadcast(weights)", d) : st;
}

/* comm_ops.observe */
static void nccl_observe(void *ctx, const struct comm_observer *obs)
{
	collspan_observe(&((struct nccl_ctx *)ctx)->obs, obs);
}

static void nccl_fini(void *ctx)
{
	struct nccl_ctx *c = ctx;

	if (c == NULL)
		return;
	collspan_free(&c->obs);
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
	cuda_events_destroy(c->ready, COMM_MAX_INFLIGHT);
	cuda_events_destroy(c->fin, COMM_MAX_INFLIGHT);
	cuda_events_destroy(&c->done, 1);
	for (int i = 0; i < COMM_MAX_INFLIGHT; i++)
		if (c->mirror[i] != NULL)
			cudaFree(c->mirror[i]);
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
	.reduce_scatter_start = nccl_reduce_scatter_start,
	.all_gather_start = nccl_all_gather_start,
	.progress = nccl_progress,
	.wait_first = nccl_wait_first,
	.wait_all = nccl_wait_all,
	.bcast = nccl_bcast,
	.fini = nccl_fini,
	.observe = nccl_observe,
	.describe = nccl_describe,
};

enum status comm_nccl_unique_id(unsigned char id[GPU_NCCL_ID_BYTES], struct diag *d)
{
	ncclUniqueId u;
	enum status st = CHECK(ncclGetUniqueId(&u), d);

	if (st != ST_OK)
		return st;
	memcpy(id, &u, sizeof u < GPU_NCCL_ID_BYTES ? sizeof u : GPU_NCCL_ID_BYTES);
	return ST_OK;
}

enum status comm_nccl_init(struct comm *out, struct backend *be,
			   const unsigned char id[GPU_NCCL_ID_BYTES], int rank, int size,
			   int timeout_s, int (*ready)(void *arg, int ok), void *arg,
			   int (*peer_failed)(void *peer_arg), void *peer_arg, struct diag *d)
{
	struct nccl_ctx *c = calloc(1, sizeof *c);
	ncclUniqueId u;
	enum status st = ST_OK;

	out->ops = NULL;
	out->ctx = NULL;
	if (c == NULL) {
		st = diag_set(d, ST_RUNTIME, "nccl: out of memory");
	} else {
		c->timeout_s = timeout_s;
		c->peer_failed = peer_failed;
		c->peer_arg = peer_arg;
		c->rank = rank;
		c->size = size;
		c->wire = out->wire;
		st = CHECK(cudaSetDevice(((struct cuda_ctx *)be->ctx)->device), d);
		if (st == ST_OK)
			st = CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), d);
		if (st == ST_OK)
			collspan_init(&c->obs, c->stream, &(struct collspan_waits){wait_event, wait_first_ref, c});
		for (int i = 0; i < COMM_MAX_INFLIGHT && st == ST_OK; i++) {
			st = CHECK(cudaEventCreateWithFlags(&c->ready[i], cudaEventDisableTiming), d);
			if (st == ST_OK)
				st = CHECK(cudaEventCreateWithFlags(&c->fin[i], cudaEventDisableTiming), d);
		}
		if (st == ST_OK)
			st = CHECK(cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming), d);
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
	st = CHECK(ncclCommInitRank(&c->comm, size, u, rank), d);
	if (st != ST_OK) {
		c->comm = NULL;
		nccl_fini(c);
		return st;
	}
	c->cu = be->ctx;
	c->cu->poll = nccl_poll;
	c->cu->poll_arg = c;
	c->cu->timeout_s = timeout_s;
	out->ops = &comm_nccl_ops;
	out->ctx = c;
	return ST_OK;
}
