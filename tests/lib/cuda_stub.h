/*
 * cuda_stub.h - what the stub CUDA runtime (cuda_stub.c), cuBLAS (cublas_stub.c) and
 * NCCL (nccl_stub.c) share: streams with vector clocks, events, captures and graphs,
 * the memory they touch, the rules and the injected faults.
 *
 * The stubs take the place of libcudart, libcublas and libnccl in a test build of the
 * real CUDA module (tests/lib/cuda-stub.so: src/cuda's objects as the module is built,
 * linked against these instead), so that the module's own code -- its stream use, its
 * teardown order, its error returns, its arithmetic -- runs in make check without a GPU.
 * They compute what the module asks, when an operation is issued (an order its streams'
 * clocks allow) or each time a graph that captured it is replayed: copies and memsets
 * move bytes; a kernel is the module's own, compiled for the host (kernels_host.cc,
 * cuda_host.h) and run over its grid (cuda_stub_grid.c); an SGEMM goes through the CPU's
 * BLAS; collectives sum in their type (nccl_stub.c). They also check what CUDA and NCCL
 * require of their caller, and they say so, "cuda-stub: rule: ...", on stderr, and fail
 * the process at exit, where the real libraries would hang, return an error the module
 * might swallow, or give wrong numbers without a word:
 *   - two operations on different streams that touch the same memory, one writing,
 *     with no event or host synchronisation ordering them (a data race on the GPU): every
 *     operation carries its stream's vector clock; memcpy, memset, cuBLAS and NCCL know
 *     their extent, a kernel its pointer arguments' first element (from its signature);
 *   - the legacy default stream, which non-blocking streams are not ordered with, used
 *     by a thread while it captures (cudaErrorStreamCaptureImplicit);
 *   - what a capture forbids (thread-local or global mode): allocation and free
 *     (cudaMalloc, cudaFree, cudaHostAlloc, cudaFreeHost), synchronising or querying a
 *     capturing stream or a captured event, a forked stream not joined back by the end
 *     (cudaErrorStreamCaptureUnjoined), cuBLAS without a workspace of its own;
 *   - a launch on a stream of another device than the current one, with an empty grid;
 *   - timing read from events created without timing;
 *   - collectives that differ across ranks in kind, count, root, type, operation or
 *     order, or that are replayed from a graph on some ranks and issued eagerly on others;
 *     a buffer that is not the communicator's device memory or runs past its block, an
 *     overlap of send and receive buffers other than NCCL's in-place placement, a type
 *     or operation NCCL does not have, a group left open or closed twice (nccl_stub.c);
 *   - ncclCommDestroy while a graph (or executable graph) holding one of its collectives
 *     exists (it waits for the graph: a hang), or before the host knows its collectives
 *     complete (work in flight), a communicator used after destroy or abort;
 *   - a kernel's access past the end (or before the start) of an allocation (each ends at
 *     a guard page), an SGEMM operand that its shape and leading dimension carry past
 *     its allocation;
 *   - a pinned buffer rewritten by the host before it waited for an event or
 *     synchronisation covering a copy from it (tests/lib/fake_gpu.c's rule), an event
 *     recorded on a legacy stream where the process issued no work (it covers none);
 *   - teardown: a stream destroyed while a live communicator issues there, and, at exit
 *     after the module tore down, any stream, graph, allocation or communicator left.
 *
 * Faults, from the environment: DDPT_STUB_FAIL=CALL[:N][@R] -- the N-th call (default the
 * first) of CALL on world rank R (default every rank) fails with that call's usual error
 * (CALL: cudaMalloc, cudaHostAlloc, cudaMemcpyAsync, cudaMemsetAsync, cudaStreamCreate,
 * cudaEventRecord, cudaGraphInstantiate, cudaGraphLaunch, launch (a kernel),
 * cublasSgemm, ncclCommInitRank, and each collective by its name (ncclAllReduce,
 * ncclReduceScatter, ncclAllGather, ncclReduce, ncclBroadcast); ncclAsyncError: the N-th all-reduce that
 * runs, eagerly or replayed, fails asynchronously, ncclCommGetAsyncError reporting a
 * system error from then on); DDPT_STUB_HANG=N[@R]: the N-th all-reduce never completes
 * until its communicator is aborted (a dead peer);
 * DDPT_STUB_GPUS=N devices (default 2).
 *
 * Stop, DDPT_STUB_SIGNAL=N[@R]: the N-th call into the device (an operation issued,
 * captured or replayed -- a copy, memset, kernel, SGEMM or collective --, a stream or event
 * query, a host wait) on world rank R (default every rank) raises SIGUSR1 in the process
 * first, as a stop signal landing exactly there would (tests/failures/stops.sh sweeps N).
 *
 * Lag, DDPT_STUB_LAG=1: the device runs behind the host, as a real one does. A query of
 * work the host does not know is done (its vector clock: what it waited for or was told
 * of, and all that came before that on any stream) -- a stream's newest operations, an
 * event -- answers cudaErrorNotReady once, then cudaSuccess; cudaEventElapsedTime of an
 * event the host does not know is done answers cudaErrorNotReady. (The work itself
 * still runs when it is issued.) For code that asks before it waits.
 *
 * Counts, DDPT_STUB_STATS=DIR: at exit each rank writes DIR/stats.RANK, host_waits (every
 * host wait for the device: a stream, event or device synchronisation, a blocking copy
 * or memset, a free) and the count of each kind, and calls (DDPT_STUB_SIGNAL's count).
 */
#ifndef DDPT_CUDA_STUB_H
#define DDPT_CUDA_STUB_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus /* kernels_host.cc */
#define _Alignas(a) alignas(a)
extern "C" {
#endif

#define STUB_STREAMS 64 /* streams a process may create (the vector clocks' width) */

struct stub_vc {
	unsigned c[STUB_STREAMS];
};

struct stub_capture;

struct CUstream_st {
	int id;                     /* its index in every vector clock */
	int device;
	int blocking;               /* ordered with the legacy stream (not cudaStreamNonBlocking) */
	int legacy;                 /* the legacy default stream of its device */
	int destroyed;
	struct stub_vc vc;          /* what its next operation comes after */
	unsigned stuck;             /* its operations from number `stuck` on never complete (0: none) */
	void *stuck_comm;           /* ...until this communicator is aborted */
	struct stub_capture *cap;   /* the capture it takes part in, or NULL */
	size_t cap_last;            /* nodes of cap when it last added one */
	size_t cap_joined;          /* nodes of cap when the origin last waited on it */
	unsigned lag_asked;         /* DDPT_STUB_LAG: the count a query last answered "not ready" for */
};

struct CUevent_st {
	int device;
	int timing;
	int recorded;
	struct stub_vc vc;          /* the position it marks */
	cudaStream_t stream;        /* where it was recorded */
	unsigned seq;               /* that stream's operations before it */
	struct stub_capture *cap;   /* recorded inside this capture, or NULL */
	size_t cap_nodes;           /* the capture's nodes then */
	double t;                   /* host clock when recorded (the "GPU time") */
	int lag_asked;              /* DDPT_STUB_LAG: a query answered "not ready" since recorded */
};

/* One place an operation reads or writes. */
struct stub_touch {
	uintptr_t lo, hi;
	int write;
};

#define STUB_TOUCHES 8

#define STUB_ARGBYTES 256 /* what an operation keeps of its arguments to run again */

/* One operation recorded in a capture: replayed on the launch stream. */
struct stub_node {
	const char *what;
	struct stub_touch touch[STUB_TOUCHES];
	int ntouch;
	void *comm;                 /* a collective: its communicator */
	int coll_kind, coll_root, coll_type;
	size_t coll_count;
	/* What it computes, run on every replay from arg (a copy of its arguments, taken
	 * when captured, as CUDA takes a kernel's parameters and cuBLAS its alpha and beta). */
	void (*run)(const struct stub_node *);
	_Alignas(16) unsigned char arg[STUB_ARGBYTES];
};

struct stub_capture {
	cudaStream_t origin;
	int mode;                   /* enum cudaStreamCaptureMode */
	int invalidated;
	int ended;                  /* cudaStreamEndCapture ran (kept for its events) */
	cudaError_t why;
	struct stub_node *node;
	size_t n, cap;
	struct stub_capture *kept; /* the next in the list of every capture (never freed) */
};

struct CUgraph_st {
	struct stub_node *node;
	size_t n;
	int destroyed;
};

struct CUgraphExec_st {
	struct stub_node *node;
	size_t n;
	int destroyed;
};

/* cuda_stub.c: the model the three libraries share. */
void stub_rule(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int stub_fault(const char *call);            /* is this call of `call` to fail? */
int stub_rank(void);
int stub_current_device(void);
cudaStream_t stub_stream(cudaStream_t s);     /* NULL: the current device's legacy stream */
/* The calling thread's capture in a mode that forbids unsafe calls, or NULL. */
struct stub_capture *stub_thread_capture(void);
/* An unsafe call while the thread captures: the capture is invalidated with err. */
cudaError_t stub_unsafe(const char *what, cudaError_t err);
/* Issue an operation on stream s touching t[0..n): recorded into s's capture, or ordered
 * on s (its clock advanced) and checked against every earlier unordered touch. Returns
 * its number on s (0 when captured). */
unsigned stub_issue(cudaStream_t s, const char *what, const struct stub_touch *t, int n,
		    const struct stub_node *coll);
/* Has operation `seq` of s completed (a hung collective before it: no)? */
int stub_done(cudaStream_t s, unsigned seq);
/* Does the host know that s's operations up to seq completed (it waited for them)? */
int stub_host_has(cudaStream_t s, unsigned seq);
/* Streams stuck behind a hung collective of comm complete now (ncclCommAbort). */
void stub_unstick(void *comm);
void stub_stick(cudaStream_t s, unsigned seq, void *comm);
/* p[0..bytes) in one device block: its device, or -1 (not device memory: pinned, pageable
 * or freed) or -2 (it runs past the end of its block). */
int stub_device_span(const void *p, size_t bytes);
/* Graph bookkeeping for ncclCommDestroy: does any live graph hold a collective of comm? */
int stub_graph_holds(void *comm);

/* Issue an operation that computes: node->run(node) runs now if s does not capture (after
 * the operation is ordered and checked), or at each replay of the graph it is captured
 * into. node->touch is ignored (t[0..n) are its touches). Returns as stub_issue. */
unsigned stub_issue_run(cudaStream_t s, const char *what, const struct stub_touch *t, int n,
			struct stub_node *node);

/* ---- the module's kernels on the host (kernels_host.cc, cuda_stub_grid.c) ---- */

#define STUB_KPARAMS 16

/* A kernel compiled for the host: call(args) is one thread's run of its body. */
struct stub_host_kernel {
	const char *name;
	int npar;
	size_t size[STUB_KPARAMS];  /* bytes of each parameter */
	void (*call)(void **args);
};

/* The host body of the kernel named name ("k_add"), or NULL. */
const struct stub_host_kernel *stub_host_kernel(const char *name);

/* The thread a grid's host run is in: what cuda_host.h's threadIdx ... read. */
struct stub_kthread {
	uint3 thread, block;
	dim3 bdim, gdim;
};
extern struct stub_kthread stub_kt __attribute__((visibility("hidden"))); /* the one launch that runs (cuda_stub_grid.c) */
void stub_syncthreads(void);

/* Run kernel hk over grid x block on the host: the blocks in order, each block's
 * threads in order, each thread until it ends or reaches __syncthreads (then the next
 * thread runs; all at the barrier, the first goes on). *barriers: 1 if the kernel is
 * known to reach __syncthreads (then every thread gets a fiber), 0 if it is known not
 * to, -1 if not known yet (set from this run). An access past the end of a block of
 * the stub's memory is a rule naming the kernel, the thread and the index. */
void stub_grid_run(const struct stub_host_kernel *hk, dim3 grid, dim3 block, void **args,
		   int *barriers);

/* cuda_stub.c: which block of the stub's memory a fault at addr touched just outside
 * of (its guard pages): 1 and its extent in *lo, *hi, or 0. */
int stub_guard_hit(uintptr_t addr, uintptr_t *lo, uintptr_t *hi, int *device);

/* nccl_stub.c: a collective replayed from a graph, matched with the other ranks. */
void stub_nccl_replay(const struct stub_node *node, cudaStream_t s);
/* Communicators not destroyed or aborted; does one of them issue its collectives on s? */
int stub_nccl_live(void);
int stub_nccl_uses(cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
