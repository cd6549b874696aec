/*
 * nccl_stub.c - a stub of NCCL for the test build of the real CUDA module (see
 * cuda_stub.h): a communicator is a duplicate of MPI_COMM_WORLD, and a collective moves
 * no data. When a collective is issued (or replayed from a graph) the ranks compare it
 * over that communicator -- kind, count, root, and whether it came from a graph -- as
 * NCCL would match it, and it is an operation on its stream like any other: its buffer
 * is checked for races, its completion is what a host wait learns.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

#include "cuda_stub.h"

enum { COLL_ALLREDUCE = 1, COLL_BCAST = 2 };

struct ncclComm {
	MPI_Comm mc;
	int rank, size, device;
	int gone;                   /* destroyed or aborted */
	long ncoll;                 /* collectives matched */
	long nallreduce;            /* all-reduces issued, eagerly or from a graph (DDPT_STUB_HANG) */
	cudaStream_t last_stream;   /* where its last collective ran, and its number there */
	unsigned last_seq;
	int async;                  /* a sticky asynchronous error */
};

static const char *kind_name(int kind)
{
	return kind == COLL_ALLREDUCE ? "an all-reduce" : "a broadcast";
}

/* Match a collective with every rank's (the side channel NCCL's order stands for). */
static void match(ncclComm_t c, int graph, int kind, size_t count, int root)
{
	int n = (int)count;
	int mine[8] = {graph, -graph, kind, -kind, n, -n, root, -root}, all[8];

	c->ncoll++;
	MPI_Allreduce(mine, all, 8, MPI_INT, MPI_MAX, c->mc);
	if (all[0] != -all[1])
		stub_rule("collective %ld: replayed from a CUDA graph on some ranks and issued eagerly on others (this rank: %s): NCCL requires capture to be uniform over ranks",
			  c->ncoll, graph ? "graph" : "eager");
	else if (all[2] != -all[3])
		stub_rule("collective %ld is %s here and another kind on another rank: NCCL matches collectives by their order",
			  c->ncoll, kind_name(kind));
	else if (all[4] != -all[5])
		stub_rule("collective %ld (%s) has %d elements here, and between %d and %d across ranks: NCCL requires the same count on every rank",
			  c->ncoll, kind_name(kind), n, -all[5], all[4]);
	else if (all[6] != -all[7])
		stub_rule("collective %ld (a broadcast) has root %d here, and between %d and %d across ranks",
			  c->ncoll, root, -all[7], all[6]);
}

static int alive(ncclComm_t c, const char *what)
{
	if (c == NULL)
		return 0;
	if (c->gone)
		stub_rule("%s on a communicator that was destroyed or aborted: a use after free", what);
	return !c->gone;
}

/* A collective was issued as operation seq of stream s (eagerly or from a graph): the
 * host must wait for it before destroy. DDPT_STUB_FAIL=ncclAsyncError:N makes the N-th
 * all-reduce fail asynchronously (ncclCommGetAsyncError reports it from then on);
 * DDPT_STUB_HANG=N[@R] makes it one that never completes (a peer that never comes) until
 * the communicator aborts. */
static void ran(ncclComm_t c, int kind, cudaStream_t s, unsigned seq)
{
	const char *h = getenv("DDPT_STUB_HANG");
	const char *at = h != NULL ? strchr(h, '@') : NULL;

	c->last_stream = s;
	c->last_seq = seq;
	if (kind != COLL_ALLREDUCE)
		return;
	c->nallreduce++;
	if (stub_fault("ncclAsyncError"))
		c->async = 1; /* from now on ncclCommGetAsyncError reports it */
	if (h != NULL && atol(h) == c->nallreduce && (at == NULL || atoi(at + 1) == c->rank))
		stub_stick(s, seq, c);
}

/* Issue a collective on stream s: into its capture, or matched with the other ranks. */
static ncclResult_t collective(const char *what, int kind, const void *send, void *recv,
			       size_t count, int root, ncclComm_t c, cudaStream_t stream)
{
	cudaStream_t s = stub_stream(stream);
	struct stub_node node = {.comm = c, .coll_kind = kind, .coll_root = root, .coll_count = count};
	struct stub_touch t[2];
	int n = 0;

	if (!alive(c, what))
		return ncclInvalidUsage;
	if (s->device != c->device)
		stub_rule("%s on stream %d of device %d with a communicator of device %d", what, s->id,
			  s->device, c->device);
	if (kind == COLL_ALLREDUCE && stub_fault("ncclAllReduce"))
		return ncclUnhandledCudaError;
	if (recv != NULL)
		t[n++] = (struct stub_touch){(uintptr_t)recv, (uintptr_t)recv + count * sizeof(float), 1};
	if (send != NULL && send != recv)
		t[n++] = (struct stub_touch){(uintptr_t)send, (uintptr_t)send + count * sizeof(float), 0};
	if (s->cap != NULL) {
		stub_issue(s, what, t, n, &node);
		return ncclSuccess;
	}
	match(c, 0, kind, count, root);
	ran(c, kind, s, stub_issue(s, what, t, n, NULL));
	return ncclSuccess;
}

void stub_nccl_replay(const struct stub_node *node, cudaStream_t s)
{
	ncclComm_t c = node->comm;

	if (!alive(c, "a collective replayed from a CUDA graph"))
		return;
	match(c, 1, node->coll_kind, node->coll_count, node->coll_root);
	ran(c, node->coll_kind, s, stub_issue(s, node->what, node->touch, node->ntouch, NULL));
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
	memset(id, 0x3c, sizeof *id);
	return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank)
{
	ncclComm_t c;

	*out = NULL;
	if (stub_fault("ncclCommInitRank"))
		return ncclSystemError;
	c = calloc(1, sizeof *c);
	if (c == NULL)
		return ncclSystemError;
	c->rank = rank;
	c->size = nranks;
	c->device = stub_current_device();
	/* blocks until every rank has called it, as NCCL's does */
	if (MPI_Comm_dup(MPI_COMM_WORLD, &c->mc) != MPI_SUCCESS) {
		free(c);
		return ncclSystemError;
	}
	*out = c;
	return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
			   ncclRedOp_t op, ncclComm_t c, cudaStream_t stream)
{
	return collective("ncclAllReduce", COLL_ALLREDUCE, send, recv, count, 0, c, stream);
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type,
			   int root, ncclComm_t c, cudaStream_t stream)
{
	return collective("ncclBroadcast", COLL_BCAST, send, recv, count, root, c, stream);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *err)
{
	*err = ncclSuccess;
	if (!alive(c, "ncclCommGetAsyncError"))
		return ncclInvalidUsage;
	if (c->async)
		*err = ncclSystemError;
	return ncclSuccess;
}

/* Kernels waiting for a peer return; nothing is waited for. */
ncclResult_t ncclCommAbort(ncclComm_t c)
{
	if (!alive(c, "ncclCommAbort"))
		return ncclInvalidUsage;
	stub_unstick(c);
	c->gone = 1; /* kept, to recognise a later use; its MPI communicator is left */
	return ncclSuccess;
}

/* Destroy waits for every graph holding one of its collectives, and for its work. */
ncclResult_t ncclCommDestroy(ncclComm_t c)
{
	if (!alive(c, "ncclCommDestroy"))
		return ncclInvalidUsage;
	if (stub_graph_holds(c))
		stub_rule("ncclCommDestroy while a CUDA graph (or executable graph) holding one of its collectives exists: NCCL waits for that graph to be destroyed first (a hang at exit); destroy the graphs, then the communicator");
	if (c->last_stream != NULL && !stub_host_has(c->last_stream, c->last_seq))
		stub_rule("ncclCommDestroy with work in flight: the host has not waited for its last collective (stream %d), which destroy then waits for, and which peers that have moved on never complete",
			  c->last_stream->id);
	c->gone = 1;
	MPI_Comm_free(&c->mc);
	return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r)
{
	switch (r) {
	case ncclSuccess: return "no error";
	case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
	case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
	case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
	case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
	case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
	default: return "unknown result code";
	}
}

const char *ncclGetLastError(ncclComm_t c)
{
	return "cuda-stub";
}
