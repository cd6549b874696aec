/*
 * nccl_stub.c - a stub of NCCL for the test build of the real CUDA module (see
 * cuda_stub.h): a communicator is a duplicate of MPI_COMM_WORLD. When a collective is
 * issued (or replayed from a graph) the ranks compare it over that communicator --
 * kind, count, root, type, operation, and whether it came from a graph -- as NCCL
 * would match it, and it is an operation on its stream like any other: its buffers are
 * checked for races, its completion is what a host wait learns. Issued eagerly it also
 * moves the data, when issued (as the stub's copies do): the sum is taken in rank order
 * in the collective's type, every partial sum rounded to it (float, half, bfloat16:
 * round16.h), which at 2 ranks is the one rounding any order gives; NCCL's own order
 * at more ranks is its ring's or tree's. Replayed from a graph it moves the data again,
 * with the buffers and count it was captured with.
 *
 * NCCL's rules it holds the caller to, from NCCL's user guide (docs.nvidia.com/
 * deeplearning/nccl/user-guide/docs): "Collective Communication Functions" (api/
 * colls.html) and nccl.h -- the count is per rank, recvcount for ncclReduceScatter and
 * sendcount for ncclAllGather, whose other buffer holds nranks times as many; recvbuff
 * may be NULL except at the root of ncclReduce; "In-place Operations" (usage/
 * inplace.html) -- in place is sendbuff == recvbuff for ncclAllReduce, ncclReduce and
 * ncclBroadcast, recvbuff == sendbuff + rank * recvcount for ncclReduceScatter and
 * sendbuff == recvbuff + rank * sendcount for ncclAllGather, and any other overlap is an
 * out-of-place call on overlapping buffers (its result undefined); "Group Calls"
 * (usage/groups.html) -- between ncclGroupStart and ncclGroupEnd nothing is enqueued on
 * a stream, ncclGroupEnd launches the group's operations together, groups nest, and an
 * end without a start is invalid usage; "Creating a Communicator" / "CUDA Stream
 * Semantics" -- a collective's buffers are device memory of the communicator's device
 * and its stream is of that device; the data types (ncclFloat16 = ncclHalf, ncclBfloat16)
 * and operations (ncclSum ... ncclAvg) are nccl.h's enums.
 */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

#include "cuda_stub.h"
#include "round16.h" /* the 16-bit types' rounding */

enum { COLL_ALLREDUCE = 1, COLL_BCAST, COLL_REDUCE, COLL_REDUCE_SCATTER, COLL_ALLGATHER };

#define GROUP_MAX 256 /* calls one group may hold */

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

/* Every communicator made (kept after destroy, to recognise a later use). */
static struct {
	pthread_mutex_t mu;
	ncclComm_t c[64];
	int n;
} comms = {.mu = PTHREAD_MUTEX_INITIALIZER};

int stub_nccl_live(void)
{
	int live = 0;

	pthread_mutex_lock(&comms.mu);
	for (int i = 0; i < comms.n; i++)
		live += !comms.c[i]->gone;
	pthread_mutex_unlock(&comms.mu);
	return live;
}

int stub_nccl_uses(cudaStream_t s)
{
	int uses = 0;

	pthread_mutex_lock(&comms.mu);
	for (int i = 0; i < comms.n; i++)
		uses |= !comms.c[i]->gone && comms.c[i]->last_stream == s;
	pthread_mutex_unlock(&comms.mu);
	return uses;
}

/* One collective call, as issued or held in a group until ncclGroupEnd. */
struct call {
	const char *what;
	int kind, root;
	const void *send;
	void *recv;
	size_t count;               /* per rank, as the call's own count argument */
	ncclDataType_t type;
	ncclRedOp_t op;
	ncclComm_t comm;
	cudaStream_t stream;
};

/* The calling thread's group (NCCL's groups are per thread). */
static __thread struct {
	int depth;
	struct call call[GROUP_MAX];
	int n;
} tl_group;

static const char *kind_name(int kind)
{
	switch (kind) {
	case COLL_ALLREDUCE: return "an all-reduce";
	case COLL_BCAST: return "a broadcast";
	case COLL_REDUCE: return "a reduce";
	case COLL_REDUCE_SCATTER: return "a reduce-scatter";
	default: return "an all-gather";
	}
}

/* Bytes of one value of t, 0 for a type the stub does not sum (NCCL has it). */
static size_t type_bytes(ncclDataType_t t)
{
	return t == ncclFloat32 ? 4 : t == ncclFloat16 || t == ncclBfloat16 ? 2 : 0;
}

/* Match a collective with every rank's (the side channel NCCL's order stands for);
 * 1 if it matches (then the data may move: every rank knows the same). */
static int match(ncclComm_t c, int graph, int kind, size_t count, int root, int type, int op)
{
	int n = (int)count;
	int mine[12] = {graph, -graph, kind, -kind, n, -n, root, -root, type, -type, op, -op},
	    all[12];

	c->ncoll++;
	MPI_Allreduce(mine, all, 12, MPI_INT, MPI_MAX, c->mc);
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
		stub_rule("collective %ld (%s) has root %d here, and between %d and %d across ranks",
			  c->ncoll, kind_name(kind), root, -all[7], all[6]);
	else if (all[8] != -all[9])
		stub_rule("collective %ld (%s) has data type %d here, and between %d and %d across ranks: NCCL requires the same type on every rank",
			  c->ncoll, kind_name(kind), type, -all[9], all[8]);
	else if (all[10] != -all[11])
		stub_rule("collective %ld (%s) has reduction %d here, and between %d and %d across ranks",
			  c->ncoll, kind_name(kind), op, -all[11], all[10]);
	else
		return 1;
	return 0;
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

/* The sum over ranks of m values of every rank's x, into out (may be x), in rank order,
 * each partial sum rounded to type t (a collective: every rank calls it). */
static void sum_ranks(ncclComm_t c, const void *x, void *out, size_t m, ncclDataType_t t)
{
	size_t es = type_bytes(t);
	unsigned char *all = malloc(m * es * (size_t)c->size + 1);

	if (all == NULL) {
		stub_rule("nccl-stub: out of memory for a %zu-value sum", m);
		return;
	}
	MPI_Allgather(x, (int)(m * es), MPI_BYTE, all, (int)(m * es), MPI_BYTE, c->mc);
	for (size_t i = 0; i < m; i++) {
		if (t == ncclFloat32) {
			float acc = ((const float *)(const void *)all)[i];

			for (int q = 1; q < c->size; q++)
				acc += ((const float *)(const void *)all)[(size_t)q * m + i];
			((float *)out)[i] = acc;
		} else {
			enum round16_type r = t == ncclFloat16 ? ROUND16_F16 : ROUND16_BF16;
			const uint16_t *v = (const uint16_t *)(const void *)all;
			float acc = round16_to_float(r, v[i]);

			for (int q = 1; q < c->size; q++)
				acc = round16(r, acc + round16_to_float(r, v[(size_t)q * m + i]));
			((uint16_t *)out)[i] = round16_from_float(r, acc);
		}
	}
	free(all);
}

/* An eagerly issued collective's data, moved when issued (every rank calls it). */
static void move(const struct call *k)
{
	ncclComm_t c = k->comm;
	size_t es = type_bytes(k->type), m = k->count, whole = m * (size_t)c->size;
	unsigned char *tmp;

	if (es == 0 || m == 0)
		return;
	tmp = malloc(whole * es);
	if (tmp == NULL) {
		stub_rule("nccl-stub: out of memory moving %s", k->what);
		return;
	}
	switch (k->kind) {
	case COLL_ALLREDUCE:
		sum_ranks(c, k->send, tmp, m, k->type);
		memcpy(k->recv, tmp, m * es);
		break;
	case COLL_REDUCE:
		sum_ranks(c, k->send, tmp, m, k->type);
		if (c->rank == k->root)
			memcpy(k->recv, tmp, m * es);
		break;
	case COLL_REDUCE_SCATTER: /* sendbuff holds nranks * recvcount */
		sum_ranks(c, k->send, tmp, whole, k->type);
		memmove(k->recv, tmp + (size_t)c->rank * m * es, m * es);
		break;
	case COLL_ALLGATHER: /* recvbuff holds nranks * sendcount */
		MPI_Allgather(k->send, (int)(m * es), MPI_BYTE, tmp, (int)(m * es), MPI_BYTE, c->mc);
		memcpy(k->recv, tmp, whole * es);
		break;
	case COLL_BCAST:
		if (c->rank == k->root)
			memcpy(tmp, k->send, m * es);
		MPI_Bcast(tmp, (int)(m * es), MPI_BYTE, k->root, c->mc);
		memcpy(k->recv, tmp, m * es);
		break;
	}
	free(tmp);
}

/* The extents of a call's buffers, in bytes: what it reads and what it writes. */
static void extents(const struct call *k, size_t *send_bytes, size_t *recv_bytes)
{
	size_t es = type_bytes(k->type) ? type_bytes(k->type) : 4, m = k->count * es;

	*send_bytes = k->kind == COLL_REDUCE_SCATTER ? m * (size_t)k->comm->size : m;
	*recv_bytes = k->kind == COLL_ALLGATHER ? m * (size_t)k->comm->size : m;
	if (k->kind == COLL_BCAST && k->comm->rank != k->root)
		*send_bytes = 0; /* sendbuff is only used on the root */
	if (k->kind == COLL_REDUCE && k->comm->rank != k->root)
		*recv_bytes = 0; /* recvbuff may be NULL except at the root */
}

/* Issue a checked call on its stream: into its capture, or matched and its data moved. */
static void issue(const struct call *k)
{
	ncclComm_t c = k->comm;
	cudaStream_t s = stub_stream(k->stream);
	struct stub_node node = {.comm = c, .coll_kind = k->kind, .coll_root = k->root,
				 .coll_count = k->count, .coll_type = (int)k->type};
	struct stub_touch t[2];
	size_t sb, rb;
	int n = 0;

	extents(k, &sb, &rb);
	if (rb > 0)
		t[n++] = (struct stub_touch){(uintptr_t)k->recv, (uintptr_t)k->recv + rb, 1};
	if (sb > 0 && k->send != k->recv)
		t[n++] = (struct stub_touch){(uintptr_t)k->send, (uintptr_t)k->send + sb, 0};
	if (s->cap != NULL) {
		_Static_assert(sizeof *k <= sizeof node.arg, "a call fits a node");
		memcpy(node.arg, k, sizeof *k); /* replayed with the same buffers and count */
		stub_issue(s, k->what, t, n, &node);
		return;
	}
	if (match(c, 0, k->kind, k->count, k->root, (int)k->type, (int)k->op))
		move(k);
	ran(c, k->kind, s, stub_issue(s, k->what, t, n, NULL));
}

/* Does [a, a + an) overlap [b, b + bn)? */
static int overlap(const void *a, size_t an, const void *b, size_t bn)
{
	uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;

	return an > 0 && bn > 0 && x < y + bn && y < x + an;
}

/* The rules NCCL states for one call's arguments (see the top): an error NCCL returns,
 * or a rule line for what NCCL would silently get wrong; then the call is issued, or
 * held in the thread's group. */
static ncclResult_t collective(struct call k)
{
	ncclComm_t c = k.comm;
	cudaStream_t s;
	size_t es = type_bytes(k.type), sb, rb;
	int sd, rd;

	if (c == NULL) {
		stub_rule("%s with a NULL communicator: NCCL returns ncclInvalidArgument", k.what);
		return ncclInvalidArgument;
	}
	if (!alive(c, k.what))
		return ncclInvalidUsage;
	if ((int)k.type < 0 || k.type >= ncclNumTypes || (int)k.op < 0 || k.op >= ncclNumOps) {
		stub_rule("%s with data type %d and reduction %d: not NCCL's (ncclNumTypes %d, ncclNumOps %d): ncclInvalidArgument",
			  k.what, (int)k.type, (int)k.op, (int)ncclNumTypes, (int)ncclNumOps);
		return ncclInvalidArgument;
	}
	if (es == 0 || k.op != ncclSum) {
		stub_rule("%s with data type %d and reduction %d: the stub sums only float32, float16 and bfloat16 with ncclSum",
			  k.what, (int)k.type, (int)k.op);
		return ncclInvalidArgument;
	}
	if ((k.kind == COLL_BCAST || k.kind == COLL_REDUCE) && (k.root < 0 || k.root >= c->size)) {
		stub_rule("%s with root %d on a communicator of %d ranks: ncclInvalidArgument", k.what,
			  k.root, c->size);
		return ncclInvalidArgument;
	}
	s = stub_stream(k.stream);
	if (s->device != c->device)
		stub_rule("%s on stream %d of device %d with a communicator of device %d", k.what, s->id,
			  s->device, c->device);
	extents(&k, &sb, &rb);
	sd = sb > 0 ? stub_device_span(k.send, sb) : c->device;
	rd = rb > 0 ? stub_device_span(k.recv, rb) : c->device;
	if (sd != c->device || rd != c->device) {
		int bad = sd != c->device ? sd : rd;

		stub_rule("%s: %s (%zu bytes at %p) %s: NCCL's buffers are device memory of the communicator's device (%d); ncclInvalidArgument or an illegal memory access",
			  k.what, sd != c->device ? "sendbuff" : "recvbuff", sd != c->device ? sb : rb,
			  sd != c->device ? k.send : (const void *)k.recv,
			  bad == -2 ? "runs past the end of its allocation" :
			  bad == -1 ? "is not device memory" : "is another device's memory", c->device);
		return ncclInvalidArgument;
	}
	if (overlap(k.send, sb, k.recv, rb)) {
		const char *rule = NULL;
		size_t off = (size_t)c->rank * k.count * es;

		if (k.kind == COLL_REDUCE_SCATTER && (const char *)k.recv != (const char *)k.send + off)
			rule = "in place is recvbuff == sendbuff + rank * recvcount";
		else if (k.kind == COLL_ALLGATHER && (const char *)k.send != (const char *)k.recv + off)
			rule = "in place is sendbuff == recvbuff + rank * sendcount";
		else if (k.kind != COLL_REDUCE_SCATTER && k.kind != COLL_ALLGATHER && k.send != k.recv)
			rule = "in place is sendbuff == recvbuff";
		if (rule != NULL)
			stub_rule("%s on rank %d: sendbuff %p and recvbuff %p overlap and are not NCCL's in-place placement (%s, an offset of %zu bytes; here %td): an out-of-place call on overlapping buffers, whose result is undefined",
				  k.what, c->rank, k.send, (void *)k.recv, rule,
				  k.kind == COLL_REDUCE_SCATTER || k.kind == COLL_ALLGATHER ? off : 0,
				  k.kind == COLL_ALLGATHER ? (const char *)k.send - (const char *)k.recv :
				  (const char *)k.recv - (const char *)k.send);
	}
	if (stub_fault(k.what))
		return ncclUnhandledCudaError;
	if (tl_group.depth > 0) {
		if (tl_group.n == GROUP_MAX) {
			stub_rule("more than %d calls in one NCCL group (the stub's limit)", GROUP_MAX);
			return ncclInternalError;
		}
		tl_group.call[tl_group.n++] = k;
		return ncclSuccess;
	}
	issue(&k);
	return ncclSuccess;
}

void stub_nccl_replay(const struct stub_node *node, cudaStream_t s)
{
	ncclComm_t c = node->comm;

	if (!alive(c, "a collective replayed from a CUDA graph"))
		return;
	if (match(c, 1, node->coll_kind, node->coll_count, node->coll_root, node->coll_type, ncclSum))
		move((const struct call *)(const void *)node->arg);
	ran(c, node->coll_kind, s, stub_issue(s, node->what, node->touch, node->ntouch, NULL));
}

/* nccl.h declares these without a prototype: here, with one. */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

/* Nothing is enqueued until the outermost ncclGroupEnd (groups nest). */
ncclResult_t ncclGroupStart(void)
{
	tl_group.depth++;
	return ncclSuccess;
}

/* The outermost end issues the group's calls together, in the order made. */
ncclResult_t ncclGroupEnd(void)
{
	if (tl_group.depth == 0) {
		stub_rule("ncclGroupEnd without ncclGroupStart: ncclInvalidUsage");
		return ncclInvalidUsage;
	}
	if (--tl_group.depth > 0)
		return ncclSuccess;
	for (int i = 0; i < tl_group.n; i++)
		if (alive(tl_group.call[i].comm, tl_group.call[i].what))
			issue(&tl_group.call[i]);
	tl_group.n = 0;
	return ncclSuccess;
}

/* A group still open when the communicator goes: its calls were never enqueued. */
static void group_open(ncclComm_t c, const char *what)
{
	for (int i = 0; i < tl_group.n; i++)
		if (tl_group.call[i].comm == c) {
			stub_rule("%s with a group still open (ncclGroupStart without ncclGroupEnd): its %d held calls were never enqueued",
				  what, tl_group.n);
			return;
		}
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
	pthread_mutex_lock(&comms.mu);
	if (comms.n < 64)
		comms.c[comms.n++] = c;
	pthread_mutex_unlock(&comms.mu);
	*out = c;
	return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
			   ncclRedOp_t op, ncclComm_t c, cudaStream_t stream)
{
	return collective((struct call){"ncclAllReduce", COLL_ALLREDUCE, 0, send, recv, count, type,
					op, c, stream});
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type,
			   int root, ncclComm_t c, cudaStream_t stream)
{
	return collective((struct call){"ncclBroadcast", COLL_BCAST, root, send, recv, count, type,
					ncclSum, c, stream});
}

ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
			ncclRedOp_t op, int root, ncclComm_t c, cudaStream_t stream)
{
	return collective((struct call){"ncclReduce", COLL_REDUCE, root, send, recv, count, type, op,
					c, stream});
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount,
			       ncclDataType_t type, ncclRedOp_t op, ncclComm_t c,
			       cudaStream_t stream)
{
	return collective((struct call){"ncclReduceScatter", COLL_REDUCE_SCATTER, 0, send, recv,
					recvcount, type, op, c, stream});
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t type,
			   ncclComm_t c, cudaStream_t stream)
{
	return collective((struct call){"ncclAllGather", COLL_ALLGATHER, 0, send, recv, sendcount,
					type, ncclSum, c, stream});
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
	group_open(c, "ncclCommDestroy");
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
