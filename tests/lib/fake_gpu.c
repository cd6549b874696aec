/*
 * fake_gpu.c - a test double of the CUDA module (ddptrain-cuda.so), built only for
 * make check and loaded through DDPTRAIN_CUDA_MODULE, so that the GPU path's logic
 * runs on every machine: the struct gpu_module ABI (src/backend/gpu.h) on the CPU.
 *
 * A "device" is host memory, and each stream is a queue of its own: the compute stream
 * of every backend instance, and the communicator's stream. An operation is recorded
 * and runs (through the CPU backend's math) only when the host waits for it -- to_host,
 * sync, host_wait on its mark, a full queue -- as work queued on a GPU runs later. The
 * queues are ordered with each other only by the events the code records and waits on
 * (the module's own: a bucket's all-reduce waits for the compute stream, the compute
 * stream for the all-reduces; copy_peer for the source device), and a wait runs exactly
 * what it waits for, so a read that comes too early gives stale numbers. Memory from
 * alloc holds NaN until its zeroing, queued on the compute stream, has run. A graph is
 * the operations of both streams recorded between graph_begin and graph_end, with their
 * events, queued again by graph_launch. The communicator is MPI over a duplicate of
 * MPI_COMM_WORLD whose collectives run when their stream reaches them, as NCCL's do:
 * the all-reduce, the reduce-scatter (which leaves NaN outside the rank's own part: the
 * rest of the buffer is undefined) and the all-gather over the caller's cuts, and the
 * broadcast; wait_first orders the compute stream after the k-th only. COMM_WIRE
 * collectives sum in the communicator's 16-bit type (round16.h: each value rounded to
 * nearest even, the sum in rank order with every partial sum rounded, widened back),
 * which at 2 ranks is PyTorch's compress hook exactly.
 *
 * It enforces what CUDA and NCCL require and fails loudly when the caller breaks it:
 * an error "fake-gpu: rule: ..." that every later wait returns (never cleared), or, in
 * a teardown function that returns nothing, that line on stderr and exit status 1.
 *   CUDA:
 *   - a host read or host synchronisation inside a capture, or a wait on a mark recorded
 *     inside one (it invalidates the capture);
 *   - an allocation or free, of device or pinned memory, inside a capture (cudaMalloc,
 *     cudaFree, cudaHostAlloc, cudaFreeHost are not permitted while capturing);
 *   - the legacy default stream used while a capture is in progress (bench_sgemm, which
 *     runs there; cudaErrorStreamCaptureImplicit);
 *   - a capture that the communicator's stream joined (a captured all-reduce) and was not
 *     joined back into (no wait_all before graph_end: cudaErrorStreamCaptureUnjoined);
 *   - a pinned host buffer rewritten while its queued copy to the device has not run
 *     (from pageable memory CUDA stages the data before it returns, and so does the fake);
 *   - a read into pageable host memory behind a queued collective (the copy blocks in
 *     the driver, out of reach of the asynchronous-error poll and the timeout);
 *   - an operation issued from a thread that never selected a device (cudaSetDevice);
 *   - the first cuBLAS use, or the first all-reduce, of an instance inside a capture
 *     (both set up lazily, with allocations a capture cannot record);
 *   - the backend (its streams) destroyed while a communicator still uses it.
 *   NCCL:
 *   - collectives that differ across ranks, in kind, count, root, cuts, wire type or
 *     order (NCCL matches
 *     them by their order on the communicator), or that are replayed from a CUDA graph
 *     on some ranks and issued eagerly on others (capture must be uniform over ranks);
 *   - a communicator used after it was destroyed, or destroyed twice;
 *   - a communicator destroyed with work in flight: all-reduces started and never waited
 *     for (wait_all), or while a graph that recorded its collective still exists
 *     (ncclCommDestroy would wait for that graph forever).
 *
 * Faults, from the environment (ranks of MPI_COMM_WORLD):
 *   DDPT_FAKE_GPUS=N              devices the probe reports (default 4)
 *   DDPT_FAKE_CAPTURE_FAIL=R      every capture on rank R fails at graph_end
 *   DDPT_FAKE_COMM_ERROR=K        the communicator reports an asynchronous error once
 *                                 the all-reduces of its K-th step have run (every rank)
 *   DDPT_FAKE_COPY_ERROR=N[@D]    the N-th asynchronous copy from pinned memory (host_alloc)
 *                                 that runs (on device D) fails, and the device with it
 *                                 (a sticky error); ddp copies 3 per step, so N = 3K - 2
 *                                 is step K's first, on every rank
 *   DDPT_FAKE_INIT_FAIL=R         rank R's communicator set-up fails before the init
 *   DDPT_FAKE_HOST_ALLOC_FAIL=N@R the N-th host_alloc (cudaHostAlloc) on rank R returns
 *                                 NULL: out of pinned memory, the device still fine
 *   DDPT_FAKE_ALLOC_FAIL=N@R      the N-th alloc (cudaMalloc) on rank R returns NULL: out
 *                                 of device memory
 *   DDPT_FAKE_LAUNCH_FAIL=N[@D]   the N-th kernel launch issued outside a capture (on
 *                                 device D) fails (too many resources requested): the
 *                                 instance's error, reported by its next wait
 *   DDPT_FAKE_SIGNAL=N[@R]        the N-th call into the device (on rank R) -- a copy, kernel
 *                                 launch, collective, mark, capture, graph launch or host wait
 *                                 -- raises SIGUSR1 in the process first: a stop signal that
 *                                 lands at a known point of a step (stats' entries counts them)
 *   DDPT_FAKE_STATS=DIR           at exit, write DIR/stats.RANK: captures, replays, ..., host_waits
 *                                 (every synchronisation, blocking copy and event wait), entries
 */
#include <cblas.h>
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h" /* struct backend_ops, backend_cpu_ops (the math) */
#include "comm/comm.h"    /* struct comm_ops */
#include "round16.h"      /* the 16-bit wire: round16_from_float, round16_to_float */
#include "backend/gpu.h"     /* struct gpu_module */
#include "mpi_rank.h"        /* mpi_world_rank */

#define QUEUE_FLUSH 4096 /* ops queued before the "launch queue" is full and drains */
#define MAX_CUTSETS 64   /* distinct cuts a communicator's collectives used */
#define MAX_DEAD 16      /* destroyed communicators kept to recognise a later use */

enum fk_kind {
	K_TO_DEVICE, K_TO_HOST, K_COPY, K_MEMSET,
	K_ADD, K_LIN_FWD, K_LIN_BWD, K_LIN_ROWS, K_RELU_FWD, K_RELU_BWD, K_MSE, K_AXPBZ, K_XENT, K_ADAMW,
	K_SYNTH, K_SUMSQ, K_HASH64, K_CLIP, /* K_ADD..K_CLIP: kernel launches (K_SYNTH: its indices' copy too) */
	K_ALLREDUCE, K_RSCATTER, K_AGATHER, K_BCAST, /* K_ALLREDUCE..K_BCAST: collectives */
	K_STEP_END, K_TIMER, K_RECORD, K_WAIT,
};

struct fk_ctx;
struct fk_comm;
struct fk_queue;

/* A point in a queue: passed once the queue has run seq operations. */
struct fk_pos {
	struct fk_queue *q;
	long seq;
};

/* One recorded operation; which fields mean what depends on k (see the fk_* entries). */
struct fk_op {
	enum fk_kind k;
	float *dst, *o2, *o3;
	const float *s1, *s2, *s3;
	size_t n;
	int rows, in, out, flag;
	int r0, r1;           /* K_LIN_ROWS: the gradient rows */
	float scale, a, b;    /* K_MSE, K_XENT: a is dscale; K_LIN_BWD, K_LIN_ROWS: scale is gscale */
	struct adamw_hparams ah;
	struct synth_spec sp; /* K_SYNTH: the generator; s1 its sample indices (pinned, rows) */
	struct fk_comm *comm;
	struct fk_pos at;     /* K_WAIT in a queue: what the queue waits for */
	int qi;               /* in a capture: 0 the compute stream, 1 the communicator's */
	int ev;               /* in a capture: the graph's event K_RECORD sets and K_WAIT reads */
	float *staged;        /* K_TO_DEVICE from pageable memory: the staged data, freed when run */
	uint64_t sum;         /* K_TO_DEVICE: checksum of the source when it entered the queue */
	uint64_t first;       /* K_HASH64: the number of the first element */
	int graph;            /* entered the queue through a graph launch */
	int cutset;           /* K_RSCATTER, K_AGATHER: the comm's cutset[cutset] */
	enum comm_wire wire;  /* a collective's type on the wire */
};

struct fk_list {
	struct fk_op *op;
	size_t n, cap;
};

/* A stream: pending operations op[head..n), which are numbers ran+1..issued. */
struct fk_queue {
	struct fk_ctx *dev;   /* its device: a lost device runs nothing more */
	struct fk_op *op;
	size_t head, n, cap;
	long issued, ran;
};

struct fk_graph {
	struct fk_list ops;   /* both streams' operations, in the order they were issued */
	int nev;              /* events recorded inside it */
};

struct fk_ctx {
	int device;
	struct fk_queue q;                   /* the compute stream */
	/* the capture in progress */
	int capturing;
	struct fk_list cap;
	int cap_events;
	int cap_comm;                        /* the communicator's stream joined it */
	size_t cap_comm_last;                /* cap.n after its last operation on that stream */
	size_t cap_rejoined;                 /* cap.n after the compute stream last waited on it */
	struct fk_graph graph[BACKEND_GRAPHS];
	int has_graph[BACKEND_GRAPHS];
	struct fk_pos mark[BACKEND_MARKS];   /* host_mark's events */
	int mark_captured[BACKEND_MARKS];    /* recorded inside a capture: no host wait on it */
	double timer[BACKEND_TIMERS];        /* host clock when each timer mark ran, or -1 */
	int blas_warm;                       /* cuBLAS used outside a capture */
	struct diag err;                     /* sticky: the device is lost */
	size_t allocated;
	long launches;                       /* kernel launches issued outside a capture */
	struct fk_comm *comm;                /* the communicator ordered with this stream */
	void *cpu;                           /* the CPU backend's context: the products' precision */
};

struct fk_comm {
	MPI_Comm mc;
	struct fk_ctx *be;
	struct fk_queue q;                   /* the communicator's stream */
	int warm;                            /* an all-reduce ran outside a capture */
	long steps;                          /* step ends that ran */
	long collectives;                    /* collectives that ran */
	int started;                         /* eager collectives started since the last wait_all */
	int count;                           /* collectives (eager or captured) since then */
	struct fk_pos fin[COMM_MAX_INFLIGHT];/* eager: where collective i ends on q */
	int fin_ev[COMM_MAX_INFLIGHT];       /* captured: the event recorded after collective i */
	int rank, size;
	enum comm_wire wire;                 /* struct comm.wire at init */
	size_t *cutset[MAX_CUTSETS];         /* (size + 1) each: the cuts collectives used, copied */
	int ncutsets;
	int failed;                          /* an error was seen: abort, not destroy */
	int destroyed;                       /* ncclCommDestroy ran; kept to name a later use */
	struct diag async;                   /* ncclCommGetAsyncError */
};

/* Process-wide: the first broken rule (reported by every instance), faults, counters.
 * Every queue is pushed and run under run_mu (one device engine for the process: a wait
 * may run another device's queue); G.mu guards the rest and is taken inside run_mu. */
static struct {
	pthread_mutex_t mu;
	struct diag rule;
	long copies, copies_on[64];
	long h2d_floats;      /* floats copied from host to device memory (to_device), as run */
	long synth_rows;      /* samples the synth op made in device memory, as run */
	long captures, replays, eager_allreduces, graph_allreduces, failed_captures;
	long host_allocs, allocs, launches;
	long host_waits;                     /* synchronisations, blocking copies, event waits */
	long entries;                        /* calls into the device (enter): DDPT_FAKE_SIGNAL */
	int capturing;                       /* instances capturing now */
	struct { const float *p; size_t n; } pinned[256]; /* host_alloc's blocks */
	int npinned;
	struct fk_comm *dead[MAX_DEAD];
	int ndead;
	int atexit_set, exit_fail;
} G = {.mu = PTHREAD_MUTEX_INITIALIZER};
static pthread_mutex_t run_mu = PTHREAD_MUTEX_INITIALIZER;

/* The device this thread selected, as cudaSetDevice. Initial-exec: in the static TLS block
 * glibc keeps for dlopened objects, read without __tls_get_addr. The dynamic model's blocks
 * are what GCC 12's LeakSanitizer cannot place under glibc 2.36 ("__tls_get_addr: Can't
 * guess glibc version" at verbosity 2): its tracer then scanned a range it made up at exit
 * and died ("Tracer caught signal 11", in 4 of 4 runs of this module's script test in
 * .ci/run's sanitizer build). */
static __thread int fk_current __attribute__((tls_model("initial-exec"))) = -1;

static long env_long(const char *name, long dflt)
{
	const char *v = getenv(name);

	return v != NULL && *v != '\0' ? strtol(v, NULL, 10) : dflt;
}

/* A fault "N@W" (or "N" where at_optional): is this the N-th event, counted in count
 * (of where = W, or anywhere without "@W")? */
static int fault_hits(const char *name, long count, long count_at, int where, int at_optional)
{
	const char *v = getenv(name);
	const char *at = v != NULL ? strchr(v, '@') : NULL;
	long want = v != NULL ? strtol(v, NULL, 10) : 0;

	if (want <= 0 || (at == NULL && !at_optional))
		return 0;
	return at == NULL ? count == want : atoi(at + 1) == where && count_at == want;
}

static void write_stats(void)
{
	const char *dir = getenv("DDPT_FAKE_STATS");
	char path[4200];
	FILE *f;

	if (dir == NULL)
		return;
	snprintf(path, sizeof path, "%s/stats.%d", dir, (int)env_long("OMPI_COMM_WORLD_RANK", 0));
	f = fopen(path, "w");
	if (f == NULL)
		return;
	fprintf(f, "captures %ld\nfailed_captures %ld\nreplays %ld\neager_allreduces %ld\ngraph_allreduces %ld\ncopies %ld\nhost_allocs %ld\nallocs %ld\nlaunches %ld\nh2d_floats %ld\nsynth_rows %ld\nhost_waits %ld\nentries %ld\n",
		G.captures, G.failed_captures, G.replays, G.eager_allreduces, G.graph_allreduces,
		G.copies, G.host_allocs, G.allocs, G.launches, G.h2d_floats, G.synth_rows, G.host_waits,
		G.entries);
	fclose(f);
}

static void at_exit(void)
{
	write_stats();
	for (int i = 0; i < G.ndead; i++)
		free(G.dead[i]);
	G.ndead = 0;
	if (G.exit_fail) {
		fflush(stdout);
		_exit(1);
	}
}

static void register_exit(void)
{
	pthread_mutex_lock(&G.mu);
	if (!G.atexit_set)
		atexit(at_exit);
	G.atexit_set = 1;
	pthread_mutex_unlock(&G.mu);
}

/* A broken rule: remembered process-wide, and returned by every later wait. */
static void rule(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void rule(const char *fmt, ...)
{
	char msg[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&G.mu);
	diag_set(&G.rule, ST_RUNTIME, "fake-gpu: rule: %s", msg);
	pthread_mutex_unlock(&G.mu);
}

/* A broken rule where no status can be returned: say so now and fail the process. */
static void rule_at_teardown(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void rule_at_teardown(const char *fmt, ...)
{
	char msg[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	fprintf(stderr, "fake-gpu: rule: %s\n", msg);
	fflush(stderr);
	G.exit_fail = 1;
}

static uint64_t checksum(const float *p, size_t n)
{
	uint64_t h = 1469598103934665603ull;
	const unsigned char *b = (const unsigned char *)p;

	for (size_t i = 0; i < n * sizeof(float); i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

static int list_push(struct fk_list *l, const struct fk_op *op)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		struct fk_op *p = realloc(l->op, cap * sizeof *p);

		if (p == NULL)
			return 0;
		l->op = p;
		l->cap = cap;
	}
	l->op[l->n++] = *op;
	return 1;
}

static void list_free(struct fk_list *l)
{
	free(l->op);
	memset(l, 0, sizeof *l);
}

static const struct backend_ops *const cpu = &backend_cpu_ops;

static int is_pinned(const float *p)
{
	int yes = 0;

	pthread_mutex_lock(&G.mu);
	for (int i = 0; i < G.npinned && !yes; i++)
		yes = p >= G.pinned[i].p && p < G.pinned[i].p + G.pinned[i].n;
	pthread_mutex_unlock(&G.mu);
	return yes;
}

/* ---- the streams ------------------------------------------------------------------ */

static void run_until(struct fk_queue *q, long seq);

/* A checksum of cutset i (0 when there is none), for matching it over ranks. */
static int cuts_hash(const struct fk_comm *m, int i)
{
	uint64_t h = 1469598103934665603ull;

	if (i < 0 || i >= m->ncutsets)
		return 0;
	for (int q = 0; q <= m->size; q++)
		h = (h ^ (uint64_t)m->cutset[i][q]) * 1099511628211ull;
	return (int)(h & 0x0fffffff) | 1;
}

/* The sum over ranks of buf[0..n) in the wire's 16-bit type (PyTorch's compress hooks):
 * each rank's values rounded, the sum taken in rank order with every partial sum rounded,
 * widened back into sum[0..n). At 2 ranks: round16(round16(a) + round16(b)). */
static int wire_sum(struct fk_comm *m, const float *buf, float *sum, size_t n, enum comm_wire w)
{
	enum round16_type t = w == COMM_WIRE_F16 ? ROUND16_F16 : ROUND16_BF16;
	uint16_t *mine = calloc(n + 1, sizeof *mine), *all = calloc(n * (size_t)m->size + 1, sizeof *all);

	if (mine == NULL || all == NULL) {
		free(mine);
		free(all);
		rule("fake-gpu: out of memory for a 16-bit sum");
		return 1;
	}
	for (size_t i = 0; i < n; i++)
		mine[i] = round16_from_float(t, buf[i]);
	MPI_Allgather(mine, (int)n, MPI_UINT16_T, all, (int)n, MPI_UINT16_T, m->mc);
	for (size_t i = 0; i < n; i++) {
		float acc = round16_to_float(t, all[i]);

		for (int q = 1; q < m->size; q++)
			acc = round16(t, acc + round16_to_float(t, all[(size_t)q * n + i]));
		sum[i] = acc;
	}
	free(mine);
	free(all);
	return 0;
}

/* The reduce-scatter and the all-gather over cutset o->cutset. A reduce-scatter leaves
 * the sum in this rank's part and NaN in the rest, which comm_ops calls undefined: a
 * caller that reads it sees it. */
static void run_sharded(struct fk_comm *m, struct fk_op *o)
{
	const size_t *cuts = m->cutset[o->cutset];
	size_t lo = cuts[m->rank], hi = cuts[m->rank + 1];

	if (o->k == K_RSCATTER) {
		float *sum = malloc(o->n * sizeof *sum + 1);

		if (sum == NULL) {
			rule("fake-gpu: out of memory for a reduce-scatter");
			return;
		}
		if (o->wire != COMM_WIRE_F32)
			wire_sum(m, o->dst, sum, o->n, o->wire);
		else
			MPI_Allreduce(o->dst, sum, (int)o->n, MPI_FLOAT, MPI_SUM, m->mc);
		for (size_t i = 0; i < o->n; i++)
			o->dst[i] = i >= lo && i < hi ? sum[i] : NAN;
		free(sum);
		return;
	}
	{
		int *counts = malloc(sizeof *counts * (size_t)m->size), *displs = malloc(sizeof *displs * (size_t)m->size);

		if (counts == NULL || displs == NULL) {
			free(counts);
			free(displs);
			rule("fake-gpu: out of memory for an all-gather");
			return;
		}
		for (int q = 0; q < m->size; q++) {
			counts[q] = (int)(cuts[q + 1] - cuts[q]);
			displs[q] = (int)cuts[q];
		}
		MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, o->dst, counts, displs, MPI_FLOAT, m->mc);
		free(counts);
		free(displs);
	}
}

/* NCCL's collectives must match over ranks: a side channel compares this one with every
 * other rank's before the data moves (and neither moves when they differ). */
static int collective_matches(struct fk_comm *m, const struct fk_op *o)
{
	const char *kind = o->k == K_ALLREDUCE ? "an all-reduce" : o->k == K_RSCATTER ? "a reduce-scatter" :
			   o->k == K_AGATHER ? "an all-gather" : "a broadcast";
	int n = (int)o->n, cs = o->k == K_RSCATTER || o->k == K_AGATHER ? cuts_hash(m, o->cutset) : 0;
	int mine[12] = {o->graph, -o->graph, (int)o->k, -(int)o->k, n, -n, o->flag, -o->flag,
			cs ^ (int)o->wire << 28, -(cs ^ (int)o->wire << 28), 0, 0}, all[12];

	m->collectives++;
	MPI_Allreduce(mine, all, 12, MPI_INT, MPI_MAX, m->mc);
	if (all[0] != -all[1])
		rule("an all-reduce was replayed from a CUDA graph on some ranks and issued eagerly on others (this rank: %s): NCCL requires capture to be uniform over ranks",
		     o->graph ? "graph" : "eager");
	else if (all[2] != -all[3])
		rule("collective %ld of the communicator is %s here and another kind on another rank: NCCL matches collectives by their order, so every rank must issue the same ones in the same order",
		     m->collectives, kind);
	else if (all[4] != -all[5])
		rule("collective %ld of the communicator (%s) has %d floats here, and between %d and %d across ranks: NCCL requires the same count on every rank",
		     m->collectives, kind, n, -all[5], all[4]);
	else if (all[6] != -all[7])
		rule("collective %ld of the communicator (broadcast) has root %d here and between %d and %d across ranks",
		     m->collectives, o->flag, -all[7], all[6]);
	else if (all[8] != -all[9])
		rule("collective %ld of the communicator (%s) has other cuts or another wire type here than on another rank: the parts of a reduce-scatter or all-gather, and the type of the sum, must be the same on every rank",
		     m->collectives, kind);
	else
		return 1;
	return 0;
}

/* A pinned copy that runs: counted, and maybe the injected copy fault. */
static int copy_fault(struct fk_ctx *c, const struct fk_op *o)
{
	long nth = 0, on = 0;

	pthread_mutex_lock(&G.mu);
	for (int i = 0; i < G.npinned; i++)
		if (o->s1 >= G.pinned[i].p && o->s1 < G.pinned[i].p + G.pinned[i].n) {
			nth = ++G.copies;
			on = c->device < 64 ? ++G.copies_on[c->device] : 0;
			break;
		}
	pthread_mutex_unlock(&G.mu);
	if (nth == 0 || !fault_hits("DDPT_FAKE_COPY_ERROR", nth, on, c->device, 1))
		return 0;
	diag_set(&c->err, ST_RUNTIME,
		 "GPU %d: cudaMemcpyAsync failed: an illegal memory access was encountered (fake-gpu fault DDPT_FAKE_COPY_ERROR=%s)",
		 c->device, getenv("DDPT_FAKE_COPY_ERROR"));
	return 1;
}

/* Run one queued operation (the device executing it); the caller holds run_mu. */
static void run_op(struct fk_queue *q, struct fk_op *o)
{
	struct fk_ctx *c = q->dev;

	if (c->err.st != ST_OK && o->k != K_TIMER) {
		free(o->staged); /* a lost device runs nothing more */
		return;
	}
	if (o->k == K_TO_DEVICE || o->k == K_SYNTH) {
		pthread_mutex_lock(&G.mu);
		G.h2d_floats += o->k == K_TO_DEVICE ? (long)o->n : 0;
		G.synth_rows += o->k == K_SYNTH ? (long)o->rows : 0;
		pthread_mutex_unlock(&G.mu);
	}
	switch (o->k) {
	case K_TO_DEVICE:
		if (o->staged != NULL) {
			memcpy(o->dst, o->staged, o->n * sizeof(float));
			free(o->staged);
			break;
		}
		if (checksum(o->s1, o->n) != o->sum)
			rule("host buffer %p (%zu floats) was rewritten while its copy to device %d was still queued: cudaMemcpyAsync reads it when the copy runs (wait for the copy first)",
			     (const void *)o->s1, o->n, c->device);
		if (!copy_fault(c, o))
			memcpy(o->dst, o->s1, o->n * sizeof(float));
		break;
	case K_TO_HOST:
	case K_COPY:
		memmove(o->dst, o->s1, o->n * sizeof(float));
		break;
	case K_MEMSET:
		memset(o->dst, 0, o->n * sizeof(float));
		break;
	case K_ADD:
		cpu->add(NULL, o->dst, o->s1, o->n);
		break;
	case K_LIN_FWD:
		cpu->linear_forward(c->cpu, o->dst, o->s1, o->s2, o->s3, o->rows, o->in, o->out, o->flag);
		cpu->sync(c->cpu, &c->err);
		break;
	case K_LIN_BWD:
		cpu->linear_backward(c->cpu, o->dst, o->o2, o->o3, o->s1, o->s2, o->s3, o->rows, o->in,
				     o->out, o->scale, o->flag);
		cpu->sync(c->cpu, &c->err);
		break;
	case K_LIN_ROWS:
		cpu->linear_grad_rows(c->cpu, o->dst, o->o2, o->s1, o->s2, o->rows, o->in, o->out, o->r0,
				      o->r1, o->scale);
		cpu->sync(c->cpu, &c->err); /* bf16: its scratch could not grow (sticky) */
		break;
	case K_RELU_FWD:
		cpu->relu_forward(NULL, o->dst, o->n);
		break;
	case K_RELU_BWD:
		cpu->relu_backward(NULL, o->dst, o->s1, o->n);
		break;
	case K_MSE:
		cpu->mse(NULL, o->dst, o->o2, o->s1, o->s2, o->rows, o->out, o->scale, o->a, o->flag);
		break;
	case K_AXPBZ:
		cpu->axpbz(NULL, o->dst, o->a, o->scale, o->s1, o->b, o->s2, o->n);
		break;
	case K_XENT:
		cpu->cross_entropy(NULL, o->dst, o->o2, o->s1, o->s2, o->rows, o->out, o->scale, o->a,
				   o->flag);
		break;
	case K_ADAMW:
		cpu->adamw(NULL, o->dst, o->s1, o->o2, o->o3, o->n, &o->ah);
		break;
	case K_SYNTH:
		if (checksum(o->s1, o->n) != o->sum)
			rule("host buffer %p (%zu sample indices) was rewritten while the synth op's copy to device %d was still queued: it is read when the copy runs (wait for it first)",
			     (const void *)o->s1, o->n, c->device);
		if (!copy_fault(c, o)) /* the indices' copy, counted and faulted as to_device's */
			cpu->synth(NULL, o->dst, o->o2, &o->sp, (const uint32_t *)o->s1, o->rows);
		break;
	case K_SUMSQ:
		cpu->sumsq(NULL, o->dst, o->s1, o->n, o->flag);
		break;
	case K_HASH64:
		cpu->hash64(NULL, o->dst, o->s1, o->n, o->first);
		break;
	case K_CLIP:
		cpu->clip(NULL, o->dst, o->n, o->s1, o->scale);
		break;
	case K_ALLREDUCE:
	case K_RSCATTER:
	case K_AGATHER:
	case K_BCAST: {
		struct fk_comm *m = o->comm;

		if (m->destroyed) {
			rule("a collective of a destroyed communicator ran (queued or replayed from a graph after ncclCommDestroy)");
			return;
		}
		if (m->async.st != ST_OK || m->failed)
			return; /* a failed communicator launches nothing */
		if (!collective_matches(m, o))
			return;
		if (o->k == K_BCAST) {
			MPI_Bcast(o->dst, (int)o->n, MPI_FLOAT, o->flag, m->mc);
			break;
		}
		if (o->k == K_RSCATTER || o->k == K_AGATHER) {
			run_sharded(m, o);
			break;
		}
		pthread_mutex_lock(&G.mu);
		if (o->graph)
			G.graph_allreduces++;
		else
			G.eager_allreduces++;
		pthread_mutex_unlock(&G.mu);
		if (o->wire != COMM_WIRE_F32)
			wire_sum(m, o->dst, o->dst, o->n, o->wire);
		else
			MPI_Allreduce(MPI_IN_PLACE, o->dst, (int)o->n, MPI_FLOAT, MPI_SUM, m->mc);
		break;
	}
	case K_STEP_END: {
		struct fk_comm *m = o->comm;
		long k = env_long("DDPT_FAKE_COMM_ERROR", 0);

		if (++m->steps == k && m->async.st == ST_OK)
			diag_set(&m->async, ST_RUNTIME,
				 "NCCL all-reduce failed: unhandled system error (remote process exited or there was a network error) (fake-gpu fault DDPT_FAKE_COMM_ERROR=%ld)",
				 k);
		break;
	}
	case K_TIMER: {
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		c->timer[o->flag] = 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
		break;
	}
	case K_WAIT: /* cudaStreamWaitEvent: what the event marks runs first */
		run_until(o->at.q, o->at.seq);
		break;
	case K_RECORD:
		break; /* only in captures: graph_launch turns it into a position */
	}
}

/* The device runs q's operations until seq of them have run (the caller holds run_mu). */
static void run_until(struct fk_queue *q, long seq)
{
	while (q->ran < seq && q->head < q->n) {
		struct fk_op o = q->op[q->head++];

		q->ran++;
		run_op(q, &o);
	}
	if (q->head == q->n)
		q->head = q->n = 0;
}

static void run_all(struct fk_queue *q)
{
	run_until(q, q->issued);
}

/* Append o to q as it is (the caller holds run_mu); a full queue drains. */
static void queue_push(struct fk_queue *q, const struct fk_op *o)
{
	if (q->n == q->cap) {
		size_t cap = q->cap ? 2 * q->cap : 256;
		struct fk_op *p;

		if (q->head > 0) { /* reuse the room of the operations that ran */
			memmove(q->op, q->op + q->head, (q->n - q->head) * sizeof *q->op);
			q->n -= q->head;
			q->head = 0;
		}
		if (q->n == q->cap) {
			p = realloc(q->op, cap * sizeof *p);
			if (p == NULL) {
				rule("fake-gpu: out of memory for the queue");
				return;
			}
			q->op = p;
			q->cap = cap;
		}
	}
	q->op[q->n++] = *o;
	q->issued++;
	if (q->n - q->head >= QUEUE_FLUSH)
		run_all(q);
}

/* Drop what is left in q (its device is gone). */
static void queue_free(struct fk_queue *q)
{
	for (size_t i = q->head; i < q->n; i++)
		free(q->op[i].staged);
	free(q->op);
	memset(q, 0, sizeof *q);
}

/* Stream qi of instance c: 0 its compute stream, 1 its communicator's. */
static struct fk_queue *stream_of(struct fk_ctx *c, int qi)
{
	return qi == 0 ? &c->q : c->comm != NULL ? &c->comm->q : NULL;
}

/* Does stream qi take part in c's capture in progress? */
static int in_capture(const struct fk_ctx *c, int qi)
{
	return c->capturing && (qi == 0 || c->cap_comm);
}

/* Queue o on stream qi of c, or record it into the capture when that stream is in one
 * (the caller holds run_mu). */
static void push(struct fk_ctx *c, int qi, struct fk_op *o)
{
	if (in_capture(c, qi)) {
		o->qi = qi;
		list_push(&c->cap, o);
		if (qi == 1)
			c->cap_comm_last = c->cap.n;
		return;
	}
	queue_push(stream_of(c, qi), o);
}

/* Stream `to` waits for the work queued so far on stream `from`: cudaEventRecord on one,
 * cudaStreamWaitEvent on the other (the caller holds run_mu). Inside a capture the pair
 * is recorded, and a stream that waits on a captured event joins the capture. */
static void stream_wait(struct fk_ctx *c, int from, int to)
{
	struct fk_op w = {.k = K_WAIT, .ev = -1};

	if (in_capture(c, from)) {
		struct fk_op rec = {.k = K_RECORD, .qi = from, .ev = c->cap_events++};

		list_push(&c->cap, &rec);
		w.qi = to;
		w.ev = rec.ev;
		list_push(&c->cap, &w);
		if (to == 1) {
			c->cap_comm = 1;
			c->cap_comm_last = c->cap.n;
		} else {
			c->cap_rejoined = c->cap.n;
		}
		return;
	}
	w.at = (struct fk_pos){stream_of(c, from), stream_of(c, from)->issued};
	push(c, to, &w);
}

/* ---- the device ------------------------------------------------------------------ */

/* The status a host wait returns: a broken rule, the device's error, the comm's. */
static enum status wait_status(struct fk_ctx *c, struct diag *d)
{
	struct diag r;

	pthread_mutex_lock(&G.mu);
	r = G.rule;
	pthread_mutex_unlock(&G.mu);
	if (r.st != ST_OK)
		return diag_set(d, r.st, "%s", r.msg);
	if (c->err.st != ST_OK) {
		if (c->comm != NULL)
			c->comm->failed = 1;
		return diag_set(d, c->err.st, "%s", c->err.msg);
	}
	if (c->comm != NULL && c->comm->async.st != ST_OK) {
		c->comm->failed = 1;
		return diag_set(d, c->comm->async.st, "%s", c->comm->async.msg);
	}
	return ST_OK;
}

/* The checks every operation's issue makes, then the device becomes current (as the
 * CUDA backend's cudaSetDevice in each operation); DDPT_FAKE_SIGNAL's count. */
static void enter(struct fk_ctx *c, const char *what)
{
	long n;

	pthread_mutex_lock(&G.mu);
	n = ++G.entries;
	pthread_mutex_unlock(&G.mu);
	/* raise: the handler has run when it returns, so the stop lands exactly here */
	if (getenv("DDPT_FAKE_SIGNAL") != NULL && fault_hits("DDPT_FAKE_SIGNAL", n, n, mpi_world_rank(), 1))
		raise(SIGUSR1);
	if (fk_current < 0)
		rule("%s on device %d from a thread that never selected a device (cudaSetDevice): the thread's work would go to the wrong GPU",
		     what, c->device);
	fk_current = c->device;
}

/* Issue operation o on c's compute stream. */
static void issue(struct fk_ctx *c, struct fk_op *o, const char *what)
{
	enter(c, what);
	pthread_mutex_lock(&run_mu);
	if (o->k == K_LIN_FWD || o->k == K_LIN_BWD || o->k == K_LIN_ROWS) {
		if (c->capturing && !c->blas_warm)
			rule("first cuBLAS use of device %d inside a stream capture (%s): cuBLAS sets itself up lazily with allocations a capture cannot record; run a step eagerly first",
			     c->device, what);
		if (!c->capturing)
			c->blas_warm = 1;
	}
	if (o->k >= K_ADD && o->k <= K_CLIP && !c->capturing) {
		long all, on;

		pthread_mutex_lock(&G.mu);
		all = ++G.launches;
		on = ++c->launches;
		pthread_mutex_unlock(&G.mu);
		if (fault_hits("DDPT_FAKE_LAUNCH_FAIL", all, on, c->device, 1)) {
			diag_set(&c->err, ST_RUNTIME,
				 "GPU %d: %s failed: too many resources requested for launch (fake-gpu fault DDPT_FAKE_LAUNCH_FAIL=%s)",
				 c->device, what, getenv("DDPT_FAKE_LAUNCH_FAIL"));
			pthread_mutex_unlock(&run_mu);
			return;
		}
	}
	if ((o->k == K_TO_DEVICE && o->staged == NULL) || o->k == K_SYNTH)
		o->sum = checksum(o->s1, o->n);
	push(c, 0, o);
	pthread_mutex_unlock(&run_mu);
}

/* A host wait until pos has passed: refused inside a capture. */
static enum status host_wait_for(struct fk_ctx *c, struct fk_pos pos, const char *what,
				 struct diag *d)
{
	enter(c, what);
	pthread_mutex_lock(&run_mu);
	pthread_mutex_lock(&G.mu);
	G.host_waits++;
	pthread_mutex_unlock(&G.mu);
	if (c->capturing)
		rule("%s on device %d inside a stream capture: a host synchronisation invalidates the capture",
		     what, c->device);
	else if (pos.q != NULL)
		run_until(pos.q, pos.seq);
	pthread_mutex_unlock(&run_mu);
	return wait_status(c, d);
}

/* The whole compute stream. */
static enum status host_wait_all(struct fk_ctx *c, const char *what, struct diag *d)
{
	return host_wait_for(c, (struct fk_pos){&c->q, c->q.issued}, what, d);
}

/* Allocation calls are not permitted while the instance captures (they would break the
 * capture); cudaFree and cudaFreeHost also wait for the device. */
static int alloc_in_capture(struct fk_ctx *c, const char *what)
{
	if (!c->capturing)
		return 0;
	rule("%s on device %d inside a stream capture: allocating or freeing memory is not permitted while capturing (CUDA invalidates the capture); allocate before the first step",
	     what, c->device);
	return 1;
}

/* ---- the backend --------------------------------------------------------------- */

static enum status fk_init(void **out, const struct backend_config *cfg, struct diag *d)
{
	struct fk_ctx *c = calloc(1, sizeof *c);
	int n = (int)env_long("DDPT_FAKE_GPUS", 4);

	*out = NULL;
	if (cfg->device < 0 || cfg->device >= n) {
		free(c);
		return diag_set(d, ST_RUNTIME, "cudaSetDevice(%d): invalid device ordinal (fake-gpu has %d)",
				cfg->device, n);
	}
	if (c == NULL)
		return diag_set(d, ST_RUNTIME, "fake-gpu: out of memory");
	if (cpu->init(&c->cpu, cfg, d) != ST_OK) {
		free(c);
		return ST_RUNTIME;
	}
	c->device = cfg->device;
	c->q.dev = c;
	fk_current = c->device; /* cudaSetDevice in the creating thread */
	register_exit();
	*out = c;
	return ST_OK;
}

static void fk_fini(void *ctx)
{
	struct fk_ctx *c = ctx;

	if (c == NULL)
		return;
	if (c->comm != NULL)
		rule_at_teardown("the CUDA backend of device %d was destroyed while its communicator still uses it (its streams and events): destroy the communicator first",
				 c->device);
	pthread_mutex_lock(&run_mu);
	if (!c->capturing)
		run_all(&c->q);
	if (c->comm != NULL)
		c->comm->be = NULL;
	queue_free(&c->q);
	pthread_mutex_unlock(&run_mu);
	list_free(&c->cap);
	for (int i = 0; i < BACKEND_GRAPHS; i++)
		list_free(&c->graph[i].ops);
	cpu->fini(c->cpu);
	free(c);
}

static enum status fk_bind(void *ctx, struct diag *d)
{
	fk_current = ((struct fk_ctx *)ctx)->device;
	return ST_OK;
}

/* cudaMalloc, then cudaMemsetAsync on the compute stream: until that runs, the memory
 * holds NaN (what a read that is not ordered after the zeroing would find). */
static float *fk_alloc(void *ctx, size_t n)
{
	struct fk_ctx *c = ctx;
	size_t len = n ? n : 1;
	float *p;
	long nth;

	pthread_mutex_lock(&G.mu);
	nth = ++G.allocs;
	pthread_mutex_unlock(&G.mu);
	if (alloc_in_capture(c, "cudaMalloc") ||
	    fault_hits("DDPT_FAKE_ALLOC_FAIL", nth, nth, mpi_world_rank(), 0))
		return NULL;
	p = malloc(len * sizeof(float));
	if (p == NULL)
		return NULL;
	for (size_t i = 0; i < len; i++)
		p[i] = NAN;
	c->allocated += len * sizeof(float);
	pthread_mutex_lock(&run_mu);
	queue_push(&c->q, &(struct fk_op){.k = K_MEMSET, .dst = p, .n = len});
	pthread_mutex_unlock(&run_mu);
	return p;
}

/* cudaFree waits for the device first. */
static void fk_free(void *ctx, float *p)
{
	struct fk_ctx *c = ctx;

	if (p == NULL || alloc_in_capture(c, "cudaFree"))
		return;
	pthread_mutex_lock(&run_mu);
	run_all(&c->q);
	if (c->comm != NULL)
		run_all(&c->comm->q);
	pthread_mutex_unlock(&run_mu);
	free(p);
}

static float *fk_host_alloc(void *ctx, size_t n)
{
	long calls;
	float *p;

	if (alloc_in_capture(ctx, "cudaHostAlloc"))
		return NULL;
	pthread_mutex_lock(&G.mu);
	calls = ++G.host_allocs;
	pthread_mutex_unlock(&G.mu);
	if (fault_hits("DDPT_FAKE_HOST_ALLOC_FAIL", calls, calls, mpi_world_rank(), 0))
		return NULL;
	p = calloc(n ? n : 1, sizeof(float));

	pthread_mutex_lock(&G.mu);
	if (p != NULL && G.npinned < 256) {
		G.pinned[G.npinned].p = p;
		G.pinned[G.npinned++].n = n ? n : 1;
	}
	pthread_mutex_unlock(&G.mu);
	return p;
}

/* cudaFreeHost waits for the device first. */
static void fk_host_free(void *ctx, float *p)
{
	struct fk_ctx *c = ctx;

	if (p == NULL || alloc_in_capture(c, "cudaFreeHost"))
		return;
	pthread_mutex_lock(&run_mu);
	run_all(&c->q);
	pthread_mutex_unlock(&run_mu);
	pthread_mutex_lock(&G.mu);
	for (int i = 0; i < G.npinned; i++)
		if (G.pinned[i].p == p) {
			G.pinned[i] = G.pinned[--G.npinned];
			break;
		}
	pthread_mutex_unlock(&G.mu);
	free(p);
}

/* From pinned memory the copy is queued and reads src when it runs; from pageable memory
 * CUDA stages src before it returns and the copy runs in stream order, as here. */
static void fk_to_device(void *ctx, float *dst, const float *src, size_t n)
{
	struct fk_ctx *c = ctx;
	struct fk_op o = {.k = K_TO_DEVICE, .dst = dst, .s1 = src, .n = n};

	if (is_pinned(src)) {
		issue(c, &o, "cudaMemcpyAsync(host to device)");
		return;
	}
	if (c->capturing) {
		enter(c, "cudaMemcpyAsync(pageable host to device)");
		rule("cudaMemcpyAsync from pageable host memory on device %d inside a stream capture", c->device);
		return;
	}
	o.staged = malloc((n ? n : 1) * sizeof(float));
	if (o.staged == NULL) {
		diag_set(&c->err, ST_RUNTIME, "GPU %d: cudaMemcpyAsync failed: out of host memory", c->device);
		return;
	}
	memcpy(o.staged, src, n * sizeof(float));
	o.s1 = o.staged;
	issue(c, &o, "cudaMemcpyAsync(pageable host to device)");
}

/* cudaMemcpyAsync device to host: into pinned memory only (into pageable memory it is a
 * blocking copy). Until the copy runs dst holds NaN, so a read before the host knows the
 * copy has run (host_poll or host_wait on a mark after it) gives NaN, not the data. */
static void fk_to_host_async(void *ctx, float *dst, const float *src, size_t n)
{
	struct fk_ctx *c = ctx;

	if (!is_pinned(dst)) {
		enter(c, "cudaMemcpyAsync(device to host)");
		rule("cudaMemcpyAsync device to host into pageable memory %p on device %d: the copy is not asynchronous (host_alloc the destination)",
		     (void *)dst, c->device);
		return;
	}
	for (size_t i = 0; i < n; i++)
		dst[i] = NAN;
	issue(c, &(struct fk_op){.k = K_TO_HOST, .dst = dst, .s1 = src, .n = n}, "cudaMemcpyAsync(device to host)");
}

/* The CUDA backend copies the indices into device memory (cudaMemcpyAsync on the compute
 * stream) and launches the generator's kernels: one op here, the copy checked as
 * to_device's is. Pinned indices only, as the loader's are. */
static void fk_synth(void *ctx, float *x, float *y, const struct synth_spec *s, const uint32_t *idx, int n)
{
	struct fk_ctx *c = ctx;
	struct fk_op o = {.k = K_SYNTH, .dst = x, .o2 = y, .s1 = (const float *)idx, .n = (size_t)n, .rows = n,
			  .sp = *s};

	if (n > 0 && !is_pinned(o.s1)) {
		enter(c, "cudaMemcpyAsync(synth indices)");
		rule("synth: sample indices %p on device %d are not from host_alloc (pinned)", (const void *)idx,
		     c->device);
		return;
	}
	if (x == NULL && y == NULL) { /* room for the indices only: the fake's device needs none */
		enter(c, "cudaMalloc(synth indices)");
		if (c->capturing)
			rule("cudaMalloc (the synth op's index room) on device %d inside a stream capture", c->device);
		return;
	}
	issue(c, &o, "k_synth");
}

/* A collective queued on c's stream and not yet run. */
static int collective_queued(struct fk_ctx *c)
{
	int yes = 0;

	pthread_mutex_lock(&run_mu);
	if (c->comm != NULL)
		for (size_t i = c->comm->q.head; i < c->comm->q.n && !yes; i++)
			yes = c->comm->q.op[i].k >= K_ALLREDUCE && c->comm->q.op[i].k <= K_BCAST;
	pthread_mutex_unlock(&run_mu);
	return yes;
}

/* Into pageable memory the copy blocks inside the driver until the stream drains: behind
 * a collective, a dead peer then hangs the rank where no error or timeout is watched. */
static enum status fk_to_host(void *ctx, float *dst, const float *src, size_t n, struct diag *d)
{
	enum status st;

	if (!is_pinned(dst) && collective_queued(ctx))
		rule("cudaMemcpyAsync device to host into pageable memory %p (%zu floats) on device %d behind a queued collective: the copy blocks inside the driver until the collective ends, where neither NCCL's asynchronous error nor the timeout is watched; read into pinned memory (host_alloc)",
		     (void *)dst, n, ((struct fk_ctx *)ctx)->device);
	st = host_wait_all(ctx, "cudaMemcpy(device to host)", d);

	if (st == ST_OK)
		memcpy(dst, src, n * sizeof(float));
	return st;
}

static void fk_copy(void *ctx, float *dst, const float *src, size_t n)
{
	struct fk_op o = {.k = K_COPY, .dst = dst, .s1 = src, .n = n};

	issue(ctx, &o, "cudaMemcpyAsync(device to device)");
}

/* Ordered after the source instance's queued work by an event on its stream. */
static void fk_copy_peer(void *ctx, float *dst, void *src_ctx, const float *src, size_t n)
{
	struct fk_ctx *c = ctx, *s = src_ctx;
	struct fk_op o = {.k = K_COPY, .dst = dst, .s1 = src, .n = n};

	if (s != c) {
		pthread_mutex_lock(&run_mu);
		if (s->capturing)
			rule("copy_peer from device %d while it captures", s->device);
		else
			push(c, 0, &(struct fk_op){.k = K_WAIT, .ev = -1, .at = {&s->q, s->q.issued}});
		pthread_mutex_unlock(&run_mu);
	}
	issue(c, &o, "cudaMemcpyPeerAsync");
}

static void fk_add(void *ctx, float *dst, const float *src, size_t n)
{
	struct fk_op o = {.k = K_ADD, .dst = dst, .s1 = src, .n = n};

	issue(ctx, &o, "k_add");
}

static void fk_linear_forward(void *ctx, float *y, const float *x, const float *w, const float *b,
			      int n, int in, int out, int relu)
{
	struct fk_op o = {.k = K_LIN_FWD, .dst = y, .s1 = x, .s2 = w, .s3 = b, .rows = n, .in = in,
			  .out = out, .flag = relu};

	issue(ctx, &o, "cublasSgemm(forward)");
}

static void fk_linear_backward(void *ctx, float *dx, float *dw, float *db, const float *dy,
			       const float *x, const float *w, int n, int in, int out, float gscale,
			       int accumulate)
{
	struct fk_op o = {.k = K_LIN_BWD, .dst = dx, .o2 = dw, .o3 = db, .s1 = dy, .s2 = x, .s3 = w,
			  .rows = n, .in = in, .out = out, .scale = gscale, .flag = accumulate};

	issue(ctx, &o, "cublasSgemm(backward)");
}

static void fk_linear_grad_rows(void *ctx, float *dw, float *db, const float *dy, const float *x,
				int n, int in, int out, int r0, int r1, float gscale)
{
	struct fk_op o = {.k = K_LIN_ROWS, .dst = dw, .o2 = db, .s1 = dy, .s2 = x, .rows = n,
			  .in = in, .out = out, .r0 = r0, .r1 = r1, .scale = gscale};

	issue(ctx, &o, "cublasSgemm(weight grad rows)");
}

static void fk_relu_forward(void *ctx, float *y, size_t n)
{
	struct fk_op o = {.k = K_RELU_FWD, .dst = y, .n = n};

	issue(ctx, &o, "k_relu");
}

static void fk_relu_backward(void *ctx, float *dy, const float *y, size_t n)
{
	struct fk_op o = {.k = K_RELU_BWD, .dst = dy, .s1 = y, .n = n};

	issue(ctx, &o, "k_relu_bwd");
}

static void fk_mse(void *ctx, float *dy, float *loss, const float *y, const float *t, int n,
		   int width, float scale, float dscale, int accumulate)
{
	struct fk_op o = {.k = K_MSE, .dst = dy, .o2 = loss, .s1 = y, .s2 = t, .rows = n,
			  .out = width, .scale = scale, .a = dscale, .flag = accumulate};

	issue(ctx, &o, "k_mse");
}

static void fk_axpbz(void *ctx, float *y, float a, float c, const float *x, float b,
		     const float *z, size_t n)
{
	struct fk_op o = {.k = K_AXPBZ, .dst = y, .a = a, .scale = c, .s1 = x, .b = b, .s2 = z,
			  .n = n};

	issue(ctx, &o, "k_axpbz");
}

static void fk_cross_entropy(void *ctx, float *dy, float *out, const float *z,
			     const float *labels, int n, int classes, float scale, float dscale,
			     int accumulate)
{
	struct fk_op o = {.k = K_XENT, .dst = dy, .o2 = out, .s1 = z, .s2 = labels, .rows = n,
			  .out = classes, .scale = scale, .a = dscale, .flag = accumulate};

	issue(ctx, &o, "k_cross_entropy");
}

static void fk_adamw(void *ctx, float *p, const float *g, float *m, float *v, size_t n,
		     const struct adamw_hparams *h)
{
	struct fk_op o = {.k = K_ADAMW, .dst = p, .s1 = g, .o2 = m, .o3 = v, .n = n, .ah = *h};

	issue(ctx, &o, "k_adamw");
}

static void fk_sumsq(void *ctx, float *out, const float *x, size_t n, int accumulate)
{
	struct fk_op o = {.k = K_SUMSQ, .dst = out, .s1 = x, .n = n, .flag = accumulate};

	issue(ctx, &o, "k_sumsq");
}

static void fk_hash64(void *ctx, float *out, const float *x, size_t n, uint64_t first)
{
	struct fk_op o = {.k = K_HASH64, .dst = out, .s1 = x, .n = n, .first = first};

	issue(ctx, &o, "k_hash64");
}

static void fk_clip(void *ctx, float *x, size_t n, const float *sumsq, float max_norm)
{
	struct fk_op o = {.k = K_CLIP, .dst = x, .n = n, .s1 = sumsq, .scale = max_norm};

	issue(ctx, &o, "k_clip");
}

static enum status fk_sync(void *ctx, struct diag *d)
{
	return host_wait_all(ctx, "cudaStreamSynchronize", d);
}

static size_t fk_mem_used(void *ctx)
{
	return ((struct fk_ctx *)ctx)->allocated;
}

static enum status fk_graph_begin(void *ctx, struct diag *d)
{
	struct fk_ctx *c = ctx;

	enter(c, "cudaStreamBeginCapture");
	if (c->capturing)
		return diag_set(d, ST_RUNTIME, "cudaStreamBeginCapture: the stream is already capturing");
	pthread_mutex_lock(&run_mu);
	c->capturing = 1;
	c->cap.n = 0;
	c->cap_events = 0;
	c->cap_comm = 0;
	c->cap_comm_last = c->cap_rejoined = 0;
	pthread_mutex_unlock(&run_mu);
	pthread_mutex_lock(&G.mu);
	G.capturing++;
	pthread_mutex_unlock(&G.mu);
	return ST_OK;
}

static enum status fk_graph_end(void *ctx, int slot, struct diag *d)
{
	struct fk_ctx *c = ctx;
	long fail = env_long("DDPT_FAKE_CAPTURE_FAIL", -1);
	enum status st;

	enter(c, "cudaStreamEndCapture");
	if (!c->capturing)
		return diag_set(d, ST_RUNTIME, "cudaStreamEndCapture: the stream is not capturing");
	pthread_mutex_lock(&run_mu);
	c->capturing = 0;
	if (c->cap_comm && c->cap_rejoined < c->cap_comm_last)
		rule("the communicator's stream joined the capture on device %d (a captured all-reduce) and was not joined back into it: cudaStreamEndCapture fails (cudaErrorStreamCaptureUnjoined); wait_all must follow the captured all-reduces",
		     c->device);
	pthread_mutex_unlock(&run_mu);
	pthread_mutex_lock(&G.mu);
	G.capturing--;
	pthread_mutex_unlock(&G.mu);
	st = wait_status(c, d);
	if (st == ST_OK && fail == mpi_world_rank())
		st = diag_set(d, ST_RUNTIME,
			      "CUDA graph capture: operation not permitted when stream is capturing (fake-gpu fault DDPT_FAKE_CAPTURE_FAIL=%ld)",
			      fail);
	pthread_mutex_lock(&G.mu);
	if (st == ST_OK)
		G.captures++;
	else
		G.failed_captures++;
	pthread_mutex_unlock(&G.mu);
	if (st != ST_OK) {
		c->cap.n = 0; /* nothing recorded runs */
		return st;
	}
	list_free(&c->graph[slot].ops);
	c->graph[slot].ops = c->cap;
	c->graph[slot].nev = c->cap_events;
	memset(&c->cap, 0, sizeof c->cap);
	c->has_graph[slot] = 1;
	return ST_OK;
}

/* The graph's operations go to their streams again, its events becoming positions; the
 * graph as a whole comes after the compute stream's earlier work, and the compute
 * stream's later work after the whole graph (cudaGraphLaunch's ordering). */
static enum status fk_graph_launch(void *ctx, int slot, struct diag *d)
{
	struct fk_ctx *c = ctx;
	struct fk_graph *g = &c->graph[slot];
	struct fk_pos *ev;
	const long before = c->q.issued;
	int comm_used = 0;

	enter(c, "cudaGraphLaunch");
	if (!c->has_graph[slot])
		return diag_set(d, ST_RUNTIME, "internal: no CUDA graph in slot %d", slot);
	if (c->err.st != ST_OK)
		return diag_set(d, c->err.st, "%s", c->err.msg);
	ev = calloc((size_t)g->nev + 1, sizeof *ev);
	if (ev == NULL)
		return diag_set(d, ST_RUNTIME, "fake-gpu: out of memory");
	pthread_mutex_lock(&run_mu);
	for (size_t i = 0; i < g->ops.n; i++) {
		struct fk_op o = g->ops.op[i];
		struct fk_queue *q = stream_of(c, o.qi);

		if (q == NULL) {
			rule("a CUDA graph holding a collective was launched on device %d after its communicator was destroyed",
			     c->device);
			break;
		}
		if (o.k == K_RECORD) {
			ev[o.ev] = (struct fk_pos){q, q->issued};
			continue;
		}
		if (o.k == K_WAIT && o.ev >= 0)
			o.at = ev[o.ev];
		if (o.qi == 1 && !comm_used) {
			queue_push(q, &(struct fk_op){.k = K_WAIT, .ev = -1, .at = {&c->q, before}});
			comm_used = 1;
		}
		o.graph = 1;
		if (o.k == K_TO_DEVICE || o.k == K_SYNTH)
			o.sum = checksum(o.s1, o.n); /* a graph reads its host buffers when it runs */
		queue_push(q, &o);
	}
	if (comm_used && c->comm != NULL)
		queue_push(&c->q, &(struct fk_op){.k = K_WAIT, .ev = -1, .at = {&c->comm->q, c->comm->q.issued}});
	pthread_mutex_unlock(&run_mu);
	free(ev);
	pthread_mutex_lock(&G.mu);
	G.replays++;
	pthread_mutex_unlock(&G.mu);
	return ST_OK;
}

static void fk_graph_reset(void *ctx)
{
	struct fk_ctx *c = ctx;

	for (int i = 0; i < BACKEND_GRAPHS; i++) {
		list_free(&c->graph[i].ops);
		c->has_graph[i] = 0;
	}
}

static void fk_host_mark(void *ctx, int slot)
{
	struct fk_ctx *c = ctx;

	enter(c, "cudaEventRecord");
	pthread_mutex_lock(&run_mu);
	c->mark_captured[slot] = c->capturing;
	c->mark[slot] = (struct fk_pos){&c->q, c->q.issued};
	pthread_mutex_unlock(&run_mu);
}

/* cudaEventQuery on the slot's event: runs what comes before the mark, nothing after. */
static enum status fk_host_wait(void *ctx, int slot, struct diag *d)
{
	struct fk_ctx *c = ctx;

	if (c->mark_captured[slot])
		rule("a host wait on device %d for an event recorded inside a stream capture: a captured event stands for no work that runs",
		     c->device);
	return host_wait_for(c, c->mark[slot], "cudaEventSynchronize", d);
}

/* cudaEventQuery on the slot's event, which never blocks: the fake's device runs only when
 * the host asks, so a query runs what comes before the mark (a device that has kept up
 * with the host) and says done; it is not a host wait. */
static enum status fk_host_poll(void *ctx, int slot, int *done, struct diag *d)
{
	struct fk_ctx *c = ctx;

	enter(c, "cudaEventQuery");
	pthread_mutex_lock(&run_mu);
	if (c->mark_captured[slot])
		rule("a query on device %d of an event recorded inside a stream capture: a captured event stands for no work that runs",
		     c->device);
	else if (c->capturing)
		rule("cudaEventQuery on device %d inside a stream capture", c->device);
	else if (c->mark[slot].q != NULL)
		run_until(c->mark[slot].q, c->mark[slot].seq);
	pthread_mutex_unlock(&run_mu);
	*done = 1;
	return wait_status(c, d);
}

static void fk_timer_mark(void *ctx, int id)
{
	struct fk_ctx *c = ctx;
	struct fk_op o = {.k = K_TIMER, .flag = id};

	c->timer[id] = -1.0;
	issue(c, &o, "cudaEventRecord(timer)");
}

static double fk_timer_ms(void *ctx, int a, int b)
{
	struct fk_ctx *c = ctx;

	if (c->capturing || c->timer[a] < 0 || c->timer[b] < 0)
		return -1.0; /* cudaEventElapsedTime: cudaErrorNotReady */
	return c->timer[b] - c->timer[a];
}

static const struct backend_ops fake_backend = {
	.name = "cuda",
	.host_memory = 0,
	.init = fk_init,
	.fini = fk_fini,
	.bind = fk_bind,
	.alloc = fk_alloc,
	.free = fk_free,
	.host_alloc = fk_host_alloc,
	.host_free = fk_host_free,
	.to_device = fk_to_device,
	.synth = fk_synth,
	.to_host = fk_to_host,
	.to_host_async = fk_to_host_async,
	.copy = fk_copy,
	.copy_peer = fk_copy_peer,
	.add = fk_add,
	.linear_forward = fk_linear_forward,
	.linear_backward = fk_linear_backward,
	.linear_grad_rows = fk_linear_grad_rows,
	.relu_forward = fk_relu_forward,
	.relu_backward = fk_relu_backward,
	.mse = fk_mse,
	.axpbz = fk_axpbz,
	.cross_entropy = fk_cross_entropy,
	.adamw = fk_adamw,
	.sumsq = fk_sumsq,
	.hash64 = fk_hash64,
	.clip = fk_clip,
	.sync = fk_sync,
	.mem_used = fk_mem_used,
	.graph_begin = fk_graph_begin,
	.graph_end = fk_graph_end,
	.graph_launch = fk_graph_launch,
	.graph_reset = fk_graph_reset,
	.host_mark = fk_host_mark,
	.host_wait = fk_host_wait,
	.host_poll = fk_host_poll,
	.timer_mark = fk_timer_mark,
	.timer_ms = fk_timer_ms,
};

/* ---- the communicator ----------------------------------------------------------- */

/* Every entry first: a destroyed communicator is a use after free in NCCL (the rule is
 * the status). */
static int comm_dead(const struct fk_comm *m, const char *what, struct diag *d)
{
	struct diag r;

	if (!m->destroyed)
		return 0;
	rule("%s on a communicator that was destroyed (ncclCommDestroy): a use after free", what);
	pthread_mutex_lock(&G.mu);
	r = G.rule;
	pthread_mutex_unlock(&G.mu);
	if (d != NULL)
		diag_set(d, r.st, "%s", r.msg);
	return 1;
}

/* Queue collective o on the communicator's stream after the compute stream's work (the
 * bucket is ready), and mark its end for wait_first: a position on the stream, or in a
 * capture an event recorded after it. */
static enum status start(struct fk_comm *m, struct fk_op *o, const char *what, struct diag *d)
{
	struct fk_ctx *c = m->be;

	if (comm_dead(m, what, d))
		return d->st;
	enter(c, what);
	if (m->count == COMM_MAX_INFLIGHT)
		return diag_set(d, ST_RUNTIME, "internal: more than %d collectives in flight", COMM_MAX_INFLIGHT);
	pthread_mutex_lock(&run_mu);
	if (c->capturing && !m->warm)
		rule("first %s of the communicator inside a stream capture: NCCL connects lazily on first use; run a step eagerly first",
		     what);
	if (!c->capturing)
		m->warm = 1;
	stream_wait(c, 0, 1); /* the bucket is ready */
	o->comm = m;
	push(c, 1, o);
	if (in_capture(c, 1)) {
		struct fk_op rec = {.k = K_RECORD, .qi = 1, .ev = c->cap_events++};

		list_push(&c->cap, &rec);
		m->fin_ev[m->count] = rec.ev;
	} else {
		m->fin[m->count] = (struct fk_pos){&m->q, m->q.issued};
		m->started++; /* in flight until wait_all (a captured one is the graph's) */
	}
	m->count++;
	pthread_mutex_unlock(&run_mu);
	return ST_OK;
}

/* The wire type of a collective started with flags. */
static enum comm_wire wire_of(const struct fk_comm *m, unsigned flags)
{
	return flags & COMM_WIRE ? m->wire : COMM_WIRE_F32;
}

static enum status fc_allreduce_start(void *ctx, float *buf, size_t n, unsigned flags, struct diag *d)
{
	struct fk_comm *m = ctx;
	struct fk_op o = {.k = K_ALLREDUCE, .dst = buf, .n = n, .wire = wire_of(m, flags)};

	return start(m, &o, "ncclAllReduce", d);
}

/* The copy of cuts this communicator keeps (graphs replay it after the caller's is
 * gone), checked against comm_ops' rules; its index, or -1 with d set. */
static int keep_cuts(struct fk_comm *m, size_t n, const size_t *cuts, struct diag *d)
{
	size_t *k;

	if (cuts[0] != 0 || cuts[m->size] != n) {
		diag_set(d, ST_RUNTIME, "internal: cuts run from %zu to %zu, not 0 to %zu", cuts[0],
			 cuts[m->size], n);
		return -1;
	}
	for (int q = 0; q < m->size; q++)
		if (cuts[q + 1] < cuts[q]) {
			diag_set(d, ST_RUNTIME, "internal: cuts decrease at part %d", q);
			return -1;
		}
	for (int i = 0; i < m->ncutsets; i++)
		if (memcmp(m->cutset[i], cuts, sizeof *cuts * (size_t)(m->size + 1)) == 0)
			return i;
	if (m->ncutsets == MAX_CUTSETS || (k = malloc(sizeof *k * (size_t)(m->size + 1))) == NULL) {
		diag_set(d, ST_RUNTIME, "fake-gpu: more than %d distinct cuts", MAX_CUTSETS);
		return -1;
	}
	memcpy(k, cuts, sizeof *k * (size_t)(m->size + 1));
	m->cutset[m->ncutsets] = k;
	return m->ncutsets++;
}

static enum status fc_reduce_scatter_start(void *ctx, float *buf, size_t n, const size_t *cuts,
					   unsigned flags, struct diag *d)
{
	struct fk_comm *m = ctx;
	struct fk_op o = {.k = K_RSCATTER, .dst = buf, .n = n, .wire = wire_of(m, flags)};

	if (comm_dead(m, "ncclReduceScatter", d))
		return d->st;
	o.cutset = keep_cuts(m, n, cuts, d);
	return o.cutset < 0 ? d->st : start(m, &o, "ncclReduceScatter", d);
}

static enum status fc_all_gather_start(void *ctx, float *buf, size_t n, const size_t *cuts,
				       struct diag *d)
{
	struct fk_comm *m = ctx;
	struct fk_op o = {.k = K_AGATHER, .dst = buf, .n = n};

	if (comm_dead(m, "ncclAllGather", d))
		return d->st;
	o.cutset = keep_cuts(m, n, cuts, d);
	return o.cutset < 0 ? d->st : start(m, &o, "ncclAllGather", d);
}

/* The compute stream waits for the end of the k-th collective only (an event recorded
 * after it on the communicator's stream): later ones may still be queued. */
static enum status fc_wait_first(void *ctx, int k, struct diag *d)
{
	struct fk_comm *m = ctx;
	struct fk_ctx *c;

	if (comm_dead(m, "wait_first", d))
		return d->st;
	if (k <= 0)
		return ST_OK;
	if (k > m->count)
		return diag_set(d, ST_RUNTIME, "internal: wait_first(%d) with %d collectives started", k,
				m->count);
	c = m->be;
	enter(c, "cudaStreamWaitEvent(first collectives done)");
	pthread_mutex_lock(&run_mu);
	if (in_capture(c, 1)) {
		struct fk_op w = {.k = K_WAIT, .qi = 0, .ev = m->fin_ev[k - 1]};

		list_push(&c->cap, &w);
	} else {
		struct fk_op w = {.k = K_WAIT, .ev = -1, .at = m->fin[k - 1]};

		push(c, 0, &w);
	}
	pthread_mutex_unlock(&run_mu);
	return m->async.st == ST_OK ? ST_OK : diag_set(d, m->async.st, "%s", m->async.msg);
}

static void fc_progress(void *ctx)
{
	comm_dead(ctx, "progress", NULL);
}

static enum status fc_wait_all(void *ctx, struct diag *d)
{
	struct fk_comm *m = ctx;
	struct fk_op o = {.k = K_STEP_END, .comm = m};

	if (comm_dead(m, "wait_all", d))
		return d->st;
	enter(m->be, "cudaStreamWaitEvent(all-reduces done)");
	pthread_mutex_lock(&run_mu);
	push(m->be, 1, &o);
	stream_wait(m->be, 1, 0); /* the compute stream waits for the all-reduces */
	if (!m->be->capturing)
		m->started = 0;
	m->count = 0;
	pthread_mutex_unlock(&run_mu);
	return m->async.st == ST_OK ? ST_OK : diag_set(d, m->async.st, "%s", m->async.msg);
}

/* Ordered after the compute stream's queued work (the zeroing of fresh memory, rank 0's
 * weights), and waited for on the host. */
static enum status fc_bcast(void *ctx, float *buf, size_t n, int root, struct diag *d)
{
	struct fk_comm *m = ctx;
	struct fk_op o = {.k = K_BCAST, .dst = buf, .n = n, .flag = root, .comm = m};
	struct fk_pos end;

	if (comm_dead(m, "ncclBroadcast", d))
		return d->st;
	enter(m->be, "ncclBroadcast");
	pthread_mutex_lock(&run_mu);
	stream_wait(m->be, 0, 1);
	push(m->be, 1, &o);
	end = (struct fk_pos){&m->q, m->q.issued};
	pthread_mutex_unlock(&run_mu);
	return host_wait_for(m->be, end, "ncclBroadcast (waited for)", d);
}

static void fc_fini(void *ctx)
{
	struct fk_comm *m = ctx;
	struct fk_ctx *be;

	if (m == NULL)
		return;
	if (m->destroyed) {
		rule_at_teardown("ncclCommDestroy on a communicator already destroyed");
		return;
	}
	be = m->be;
	if (!m->failed && be != NULL)
		for (int s = 0; s < BACKEND_GRAPHS; s++)
			for (size_t i = 0; be->has_graph[s] && i < be->graph[s].ops.n; i++)
				if (be->graph[s].ops.op[i].k >= K_ALLREDUCE && be->graph[s].ops.op[i].k <= K_AGATHER &&
				    be->graph[s].ops.op[i].comm == m) {
					rule_at_teardown("ncclCommDestroy while a CUDA graph holding its all-reduce still exists: NCCL waits for that graph to be destroyed, which this thread would only do later (a hang at exit); destroy the graphs first");
					s = BACKEND_GRAPHS;
					break;
				}
	if (!m->failed && m->started > 0)
		rule_at_teardown("ncclCommDestroy with work in flight (collectives started and never waited for with wait_all: %d): destroy waits for it, and peers that moved on never complete it",
				 m->started);
	pthread_mutex_lock(&run_mu);
	if (!m->failed)
		run_all(&m->q); /* cudaStreamSynchronize on its stream, then ncclCommDestroy */
	queue_free(&m->q);
	if (be != NULL)
		be->comm = NULL;
	pthread_mutex_unlock(&run_mu);
	if (m->mc != MPI_COMM_NULL)
		MPI_Comm_free(&m->mc);
	for (int i = 0; i < m->ncutsets; i++)
		free(m->cutset[i]);
	m->ncutsets = 0;
	m->destroyed = 1;
	pthread_mutex_lock(&G.mu);
	if (G.ndead < MAX_DEAD)
		G.dead[G.ndead++] = m;
	else
		free(m); /* (never: one communicator per run) */
	pthread_mutex_unlock(&G.mu);
}

static void fc_describe(void *ctx, char *buf, size_t len)
{
	snprintf(buf, len, "nccl");
}

static const struct comm_ops fake_comm = {
	.name = "nccl",
	.capturable = 1,
	.allreduce_start = fc_allreduce_start,
	.reduce_scatter_start = fc_reduce_scatter_start,
	.all_gather_start = fc_all_gather_start,
	.progress = fc_progress,
	.wait_first = fc_wait_first,
	.wait_all = fc_wait_all,
	.bcast = fc_bcast,
	.fini = fc_fini,
	.describe = fc_describe,
};

static enum status fc_unique_id(unsigned char id[GPU_NCCL_ID_BYTES], struct diag *d)
{
	memset(id, 0x5a, GPU_NCCL_ID_BYTES);
	return ST_OK;
}

static enum status fc_init(struct comm *out, struct backend *be,
			   const unsigned char id[GPU_NCCL_ID_BYTES], int rank, int size, int timeout_s,
			   int (*ready)(void *arg, int ok), void *arg, int (*peer_failed)(void *peer_arg),
			   void *peer_arg, struct diag *d)
{
	struct fk_comm *m = calloc(1, sizeof *m);
	enum status st = ST_OK;

	/* The fake's collectives run as their queue drains, each a blocking MPI call that a
	 * peer which never joins holds for ever: no wait of the fake polls while one is in
	 * flight, so a peer's failure cannot end one early, and peer_failed is not asked. */
	(void)peer_failed;
	(void)peer_arg;
	out->ops = NULL;
	out->ctx = NULL;
	if (m == NULL || env_long("DDPT_FAKE_INIT_FAIL", -1) == rank)
		st = diag_set(d, ST_RUNTIME,
			      "nccl: stream and event set-up failed: out of memory (fake-gpu fault DDPT_FAKE_INIT_FAIL)");
	if (ready != NULL && !ready(arg, st == ST_OK)) {
		free(m);
		return st != ST_OK ? st : ST_STOP; /* another rank failed, and reports it */
	}
	if (st != ST_OK) {
		free(m);
		return st;
	}
	m->be = be->ctx;
	m->q.dev = m->be;
	m->rank = rank;
	m->size = size;
	m->wire = out->wire;
	m->mc = MPI_COMM_NULL;
	/* ncclCommInitRank: blocks until every rank has called it. */
	if (MPI_Comm_dup(MPI_COMM_WORLD, &m->mc) != MPI_SUCCESS) {
		free(m);
		return diag_set(d, ST_RUNTIME, "ncclCommInitRank failed");
	}
	m->be->comm = m;
	out->ops = &fake_comm;
	out->ctx = m;
	return ST_OK;
}

/* ---- the module ----------------------------------------------------------------- */

static enum status fk_probe(int *count, char *info, size_t len, struct diag *d)
{
	const char *vis = getenv("CUDA_VISIBLE_DEVICES");

	*count = (int)env_long("DDPT_FAKE_GPUS", 4);
	if (vis != NULL) { /* entries, as the runtime counts them (no validation here) */
		int listed = *vis != '\0';

		for (const char *p = vis; *p != '\0'; p++)
			listed += *p == ',';
		*count = listed < *count ? listed : *count;
	}
	snprintf(info, len, "fake-gpu: %d CPU-backed devices (test double)", *count);
	return ST_OK;
}

static enum status fk_device_info(int dev, unsigned char uuid[GPU_UUID_BYTES], char *name,
				  size_t len, struct diag *d)
{
	memset(uuid, 0, GPU_UUID_BYTES);
	uuid[0] = 0xfa;
	uuid[1] = (unsigned char)dev;
	snprintf(name, len, "Fake GPU %d", dev);
	return ST_OK;
}

/* The CPU's SGEMM, timed the same way (median of iters after a warm-up), so that
 * scripts/gpu-check.sh can be tried here end to end. The module's runs on the legacy
 * default stream, which no capture may be in progress beside. */
static enum status fk_bench_sgemm(int dev, int trans_a, int trans_b, int m, int n, int k,
				  int tf32, int iters, double *tflops, struct diag *d)
{
	float *a = calloc((size_t)m * k, sizeof *a), *b = calloc((size_t)k * n, sizeof *b);
	float *c = calloc((size_t)m * n, sizeof *c);
	double best = 0.0;
	int capturing;

	*tflops = 0.0;
	pthread_mutex_lock(&G.mu);
	capturing = G.capturing;
	pthread_mutex_unlock(&G.mu);
	if (capturing > 0)
		rule("bench_sgemm (the legacy default stream) while a stream capture is in progress: cudaErrorStreamCaptureImplicit, and the capture is invalidated");
	if (a == NULL || b == NULL || c == NULL) {
		free(a);
		free(b);
		free(c);
		return diag_set(d, ST_RUNTIME, "fake-gpu: bench_sgemm: out of memory");
	}
	for (int i = -1; i < iters; i++) {
		struct timespec t0, t1;
		double s;

		clock_gettime(CLOCK_MONOTONIC, &t0);
		cblas_sgemm(CblasColMajor, trans_a ? CblasTrans : CblasNoTrans,
			    trans_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, trans_a ? k : m, b,
			    trans_b ? n : k, 0.0f, c, m);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
		if (i >= 0 && (best == 0.0 || s < best))
			best = s; /* the fastest: a loaded test machine makes medians noisy */
	}
	*tflops = best > 0 ? 2.0 * m * n * (double)k / best / 1e12 : 0.0;
	free(a);
	free(b);
	free(c);
	pthread_mutex_lock(&G.mu);
	if (G.rule.st != ST_OK)
		diag_set(d, G.rule.st, "%s", G.rule.msg);
	pthread_mutex_unlock(&G.mu);
	return d->st == ST_OK ? ST_OK : d->st;
}

static const struct gpu_module module = {
	.abi = GPU_MODULE_ABI,
	.probe = fk_probe,
	.device_info = fk_device_info,
	.backend = &fake_backend,
	.nccl_unique_id = fc_unique_id,
	.nccl_comm_init = fc_init,
	.bench_sgemm = fk_bench_sgemm,
};

const struct gpu_module *ddptrain_gpu_module(void); /* found by dlsym, as in the real one */

const struct gpu_module *ddptrain_gpu_module(void)
{
	return &module;
}
