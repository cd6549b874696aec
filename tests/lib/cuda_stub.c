/*
 * cuda_stub.c - a stub of the CUDA runtime (libcudart) for the test build of the real
 * CUDA module: the calls src/cuda makes, and the ones nvcc's host code makes to register
 * and launch kernels, with CUDA's rules (see cuda_stub.h). Memory is host memory (each
 * block its own mapping, ending at a guard page); copies and memsets move their bytes
 * when issued (fresh memory holds 0xff bytes, a NaN, until something writes it); a
 * kernel runs its host compilation over its grid when issued (cuda_stub_grid.c); a
 * graph's replay runs each captured operation again from its arguments. What is also
 * modelled is the ordering: each stream's operations carry a vector clock, events carry
 * a stream's, a host wait makes the host know what it waited for, and a new operation
 * comes after what its stream and the host know. Two touches of the same memory, one a
 * write, that neither comes after is a race the real GPU would run in either order.
 */
#define _GNU_SOURCE /* memmem */
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cuda_stub.h"
#include "mpi_rank.h"

/* nvcc's host code calls these (crt/host_runtime.h declares them for C++ only). */
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFatBinaryEnd(void **handle);
void __cudaUnregisterFatBinary(void **handle);
void __cudaRegisterFunction(void **handle, const char *hostFun, char *deviceFun,
			    const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid,
			    dim3 *bDim, dim3 *gDim, int *wSize);
cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun);
unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
				     struct CUstream_st *stream);
cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
				       void *stream);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
			       size_t sharedMem, cudaStream_t stream);
/* libstdc++ (the module links it for nvcc's objects): a kernel's parameter types. */
char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

#define STUB_RING 8192     /* touches remembered for the race check */
#define STUB_KERNELS 128
#define STUB_BLOCKS 4096
#define STUB_GRAPHS 256
#define STUB_DEVICES 16
#define STUB_PENDING 128   /* copies from pinned memory the host has not waited for */

/* A touch remembered: by which operation, on which stream, at which of its clock ticks. */
struct rec {
	uintptr_t lo, hi;
	int write, sid;
	unsigned seq;
	const char *what;
};

/* A block of memory from cudaMalloc or cudaHostAlloc: [lo, hi) in a mapping of its own
 * whose pages before lo and from hi on are inaccessible (hi is a page boundary), so a
 * kernel that runs past its end faults (cuda_stub_grid.c names it). */
struct block {
	uintptr_t lo, hi;
	void *map;          /* the mapping: a guard page, the block's pages, a guard page */
	size_t maplen;
	int device;         /* -1: pinned host memory */
	int live;
};

struct kernel {
	const void *host;   /* the host stub nvcc made */
	char name[64];      /* the kernel's name */
	int npar;
	unsigned ptr, konst; /* bit i: parameter i is a pointer / a pointer to const */
	const struct stub_host_kernel *hk; /* its body compiled for the host (kernels_host.cc) */
	int barriers;       /* for stub_grid_run: reaches __syncthreads (-1: not known yet) */
};

/* A copy from pinned host memory the host does not know to have run: until it does, the
 * buffer may be neither rewritten nor copied from again (the GPU reads it when the copy
 * runs, not when it is issued). sum: the bytes as they were copied. */
struct pending {
	uintptr_t lo, hi;
	int sid;
	unsigned seq;
	uint64_t sum;
};

/* The kinds of host waits DDPT_STUB_STATS counts (wait_name names them). */
enum wait_kind { WAIT_STREAM, WAIT_EVENT, WAIT_DEVICE, WAIT_COPY, WAIT_FREE, WAIT_KINDS };

static struct {
	pthread_mutex_t mu;
	cudaStream_t stream[STUB_STREAMS];
	int nstreams;
	cudaStream_t legacy[STUB_DEVICES];
	struct stub_vc host;          /* what the host knows to have completed */
	struct rec ring[STUB_RING];
	long nring;
	struct block block[STUB_BLOCKS];
	int nblocks;
	struct kernel kernel[STUB_KERNELS];
	int nkernels;
	void *graph[STUB_GRAPHS];     /* live cudaGraph_t and cudaGraphExec_t */
	int graph_exec[STUB_GRAPHS];
	int ngraphs;
	unsigned char peer[STUB_DEVICES][STUB_DEVICES];
	struct pending pend[STUB_PENDING];
	int npend;
	int legacy_work;              /* an operation was issued on a legacy stream */
	int teardown;                 /* a stream was destroyed: the module tears down */
	cudaError_t sticky;           /* an error that every later call returns */
	char said[32][200];           /* rules already printed (each once), their start */
	int nsaid, exit_fail, atexit_set;
	long host_waits;              /* DDPT_STUB_STATS: the host's waits for the device, */
	long waits_by[WAIT_KINDS];    /* and by kind (wait_name) */
	long calls;                   /* calls into the device (signal_tick): DDPT_STUB_SIGNAL */
	int stats_set;
	struct stub_capture *captures; /* every capture, kept to the end: events recorded in one
					* point at it (a list, so leak checkers see them held) */
} S = {.mu = PTHREAD_MUTEX_INITIALIZER};

static __thread int tl_dev;                     /* cudaSetDevice */
static __thread cudaError_t tl_last;            /* cudaGetLastError */
static __thread struct stub_capture *tl_cap;    /* this thread's capture (not relaxed) */
static __thread struct { dim3 grid, block; size_t shmem; cudaStream_t stream; } tl_launch;

static void at_exit(void)
{
	if (S.exit_fail) {
		fflush(stdout);
		_exit(1);
	}
}

/* The host waits for the device, as DDPT_STUB_STATS=DIR counts them into DIR/stats.RANK
 * at exit: each synchronisation (stream, event, device), each blocking copy or memset
 * (the legacy stream's), each free (CUDA's frees wait for the device). */
static const char *const wait_name[WAIT_KINDS] = {"cudaStreamSynchronize", "cudaEventSynchronize",
						  "cudaDeviceSynchronize", "cudaMemcpy/cudaMemset",
						  "cudaFree/cudaFreeHost"};

static void write_stats(void)
{
	const char *dir = getenv("DDPT_STUB_STATS");
	char path[4200];
	FILE *f;

	snprintf(path, sizeof path, "%s/stats.%d", dir, stub_rank());
	f = fopen(path, "w");
	if (f == NULL)
		return;
	fprintf(f, "host_waits %ld\n", S.host_waits);
	for (int i = 0; i < WAIT_KINDS; i++)
		fprintf(f, "%s %ld\n", wait_name[i], S.waits_by[i]);
	fprintf(f, "calls %ld\n", S.calls);
	fclose(f);
}

/* One more call into the device -- an operation issued, captured or replayed, a query, a
 * host wait -- counted; DDPT_STUB_SIGNAL=N[@R]'s N-th (on rank R) raises SIGUSR1 first,
 * whose handler has run when raise returns: a stop that lands at a known point of a step.
 * Called without S.mu. */
static void signal_tick(void)
{
	const char *v = getenv("DDPT_STUB_SIGNAL"), *at;
	long n;

	pthread_mutex_lock(&S.mu);
	n = ++S.calls;
	pthread_mutex_unlock(&S.mu);
	if (v == NULL || n != strtol(v, NULL, 10))
		return;
	at = strchr(v, '@');
	if (at == NULL || atoi(at + 1) == stub_rank())
		raise(SIGUSR1);
}

static void count_wait(enum wait_kind kind)
{
	signal_tick();
	pthread_mutex_lock(&S.mu);
	S.host_waits++;
	S.waits_by[kind]++;
	if (!S.stats_set && getenv("DDPT_STUB_STATS") != NULL) {
		S.stats_set = 1;
		atexit(write_stats);
	}
	pthread_mutex_unlock(&S.mu);
}

/* DDPT_STUB_LAG (cuda_stub.h). */
static int lag_on(void)
{
	const char *v = getenv("DDPT_STUB_LAG");

	return v != NULL && *v != '\0' && strcmp(v, "0") != 0;
}

/* Under DDPT_STUB_LAG, whether a query of s's first seq operations (done on the stub),
 * not asked before (asked 0), answers "not ready": the host does not know them done. */
static int lagging(cudaStream_t s, unsigned seq, int asked)
{
	int lag;

	if (!lag_on() || asked)
		return 0;
	pthread_mutex_lock(&S.mu);
	lag = S.host.c[s->id] < seq;
	pthread_mutex_unlock(&S.mu);
	return lag;
}

void stub_rule(const char *fmt, ...)
{
	char msg[600];
	va_list ap;
	int seen = 0;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&S.mu);
	for (int i = 0; i < S.nsaid && !seen; i++)
		seen = strncmp(S.said[i], msg, sizeof S.said[i] - 1) == 0;
	if (!seen && S.nsaid < 32) {
		memcpy(S.said[S.nsaid], msg, sizeof S.said[0] - 1); /* the start is enough to compare */
		S.said[S.nsaid++][sizeof S.said[0] - 1] = '\0';
	}
	if (!S.atexit_set)
		atexit(at_exit);
	S.atexit_set = 1;
	S.exit_fail = 1;
	pthread_mutex_unlock(&S.mu);
	if (!seen) {
		fprintf(stderr, "cuda-stub: rule: %s\n", msg);
		fflush(stderr);
	}
}

int stub_rank(void)
{
	return mpi_world_rank();
}

int stub_fault(const char *call)
{
	static struct { char call[40]; long n; } count[32];
	static int ncount;
	const char *v = getenv("DDPT_STUB_FAIL");
	size_t len = strlen(call);
	const char *p, *at;
	long want = 1, n = 0;
	int hit;

	if (v == NULL || strncmp(v, call, len) != 0 || (v[len] != '\0' && v[len] != ':' && v[len] != '@'))
		return 0;
	p = v + len;
	if (*p == ':')
		want = strtol(p + 1, NULL, 10);
	at = strchr(p, '@');
	if (at != NULL && atoi(at + 1) != stub_rank())
		return 0;
	pthread_mutex_lock(&S.mu);
	for (int i = 0; i < ncount; i++)
		if (strcmp(count[i].call, call) == 0)
			n = ++count[i].n;
	if (n == 0 && ncount < 32) {
		snprintf(count[ncount].call, sizeof count[0].call, "%s", call);
		n = count[ncount++].n = 1;
	}
	hit = n == want;
	pthread_mutex_unlock(&S.mu);
	return hit;
}

int stub_current_device(void)
{
	return tl_dev;
}

static int ndevices(void)
{
	const char *v = getenv("DDPT_STUB_GPUS");
	int n = v != NULL && *v != '\0' ? atoi(v) : 2;

	return n < 0 ? 0 : n > STUB_DEVICES ? STUB_DEVICES : n;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static cudaError_t ret(cudaError_t e)
{
	if (e != cudaSuccess)
		tl_last = e;
	return e;
}

/* Every call: an earlier sticky error is this call's too. */
#define STICKY() do { if (S.sticky != cudaSuccess) return ret(S.sticky); } while (0)

static void vc_join(struct stub_vc *a, const struct stub_vc *b)
{
	for (int i = 0; i < STUB_STREAMS; i++)
		a->c[i] = b->c[i] > a->c[i] ? b->c[i] : a->c[i];
}

/* The caller holds S.mu. */
static cudaStream_t new_stream(int device, int blocking, int legacy)
{
	cudaStream_t s;

	if (S.nstreams == STUB_STREAMS)
		return NULL;
	s = calloc(1, sizeof *s);
	if (s == NULL)
		return NULL;
	s->id = S.nstreams;
	s->device = device;
	s->blocking = blocking;
	s->legacy = legacy;
	S.stream[S.nstreams++] = s;
	return s;
}

cudaStream_t stub_stream(cudaStream_t s)
{
	int d = tl_dev;

	if (s != NULL && s != (cudaStream_t)0x1 && s != (cudaStream_t)0x2)
		return s;
	pthread_mutex_lock(&S.mu);
	if (S.legacy[d] == NULL)
		S.legacy[d] = new_stream(d, 1, 1);
	s = S.legacy[d];
	pthread_mutex_unlock(&S.mu);
	return s;
}

struct stub_capture *stub_thread_capture(void)
{
	return tl_cap != NULL && tl_cap->mode != cudaStreamCaptureModeRelaxed ? tl_cap : NULL;
}

static void invalidate(struct stub_capture *c, cudaError_t why)
{
	if (c != NULL && !c->invalidated) {
		c->invalidated = 1;
		c->why = why;
	}
}

cudaError_t stub_unsafe(const char *what, cudaError_t err)
{
	struct stub_capture *c = stub_thread_capture();

	if (c == NULL)
		return cudaSuccess;
	stub_rule("%s while this thread captures stream %d (a capture in global or thread-local mode): not permitted (%s), and the capture is invalidated",
		  what, c->origin->id, cudaGetErrorString(err));
	invalidate(c, err);
	return ret(err);
}

/* The start of every call on a stream: an earlier sticky error, or the legacy stream
 * used while this thread captures (it would synchronise with the capture). */
static cudaError_t stream_call(cudaStream_t s, const char *what)
{
	char msg[160];

	if (S.sticky != cudaSuccess)
		return ret(S.sticky);
	if (!s->legacy || stub_thread_capture() == NULL)
		return cudaSuccess;
	snprintf(msg, sizeof msg, "%s on the legacy default stream", what);
	return stub_unsafe(msg, cudaErrorStreamCaptureImplicit);
}

static struct block *find_block(uintptr_t p)
{
	for (int i = 0; i < S.nblocks; i++)
		if (S.block[i].live && p >= S.block[i].lo && p < S.block[i].hi)
			return &S.block[i];
	return NULL;
}

/* Forget the touches of [lo, hi) (freed memory may come back from the next malloc). */
static void forget(uintptr_t lo, uintptr_t hi)
{
	long n = S.nring < STUB_RING ? S.nring : STUB_RING;

	for (long i = 0; i < n; i++)
		if (S.ring[i].lo < hi && lo < S.ring[i].hi)
			S.ring[i].hi = S.ring[i].lo; /* empty */
}

/* Check a touch of operation `what` (number seq on s) against the remembered ones. */
static void check_touch(cudaStream_t s, unsigned seq, const char *what, const struct stub_touch *t)
{
	long n = S.nring < STUB_RING ? S.nring : STUB_RING;
	struct rec *r;

	for (long i = 0; i < n; i++) {
		const struct rec *o = &S.ring[i];
		struct block *b;

		if (o->lo >= t->hi || t->lo >= o->hi || !(o->write || t->write) || o->sid == s->id ||
		    s->vc.c[o->sid] >= o->seq)
			continue;
		b = find_block(t->lo);
		pthread_mutex_unlock(&S.mu);
		stub_rule("%s on stream %d (device %d) and %s on stream %d touch the same memory (%s at byte %zu of a %zu-byte %s block), %s, with nothing ordering them: no event wait or host synchronisation between the two streams",
			  what, s->id, s->device, o->what, o->sid,
			  t->write && o->write ? "both write" : "one writes",
			  b != NULL ? (size_t)((o->lo > t->lo ? o->lo : t->lo) - b->lo) : (size_t)0,
			  b != NULL ? (size_t)(b->hi - b->lo) : (size_t)0,
			  b != NULL && b->device < 0 ? "pinned host" : "device",
			  S.stream[o->sid]->legacy ? "the earlier one on the legacy default stream, which a non-blocking stream is not ordered with" :
			  "the streams run concurrently");
		pthread_mutex_lock(&S.mu);
		break;
	}
	r = &S.ring[S.nring++ % STUB_RING];
	*r = (struct rec){t->lo, t->hi, t->write, s->id, seq, what};
}

unsigned stub_issue(cudaStream_t s, const char *what, const struct stub_touch *t, int n,
		    const struct stub_node *coll)
{
	unsigned seq;

	signal_tick();
	pthread_mutex_lock(&S.mu);
	if (s->cap != NULL) {
		struct stub_capture *c = s->cap;
		struct stub_node node = {.what = what};

		if (coll != NULL)
			node = *coll;
		node.what = what;
		node.ntouch = 0;
		for (int i = 0; i < n && i < STUB_TOUCHES; i++)
			if (t[i].hi > t[i].lo)
				node.touch[node.ntouch++] = t[i];
		if (c->n == c->cap) {
			size_t cap = c->cap ? 2 * c->cap : 64;
			struct stub_node *p = realloc(c->node, cap * sizeof *p);

			if (p == NULL) {
				invalidate(c, cudaErrorMemoryAllocation);
				pthread_mutex_unlock(&S.mu);
				return 0;
			}
			c->node = p;
			c->cap = cap;
		}
		c->node[c->n++] = node;
		s->cap_last = c->n;
		pthread_mutex_unlock(&S.mu);
		return 0;
	}
	vc_join(&s->vc, &S.host); /* issued after what the host has waited for */
	if (s->legacy) {
		S.legacy_work = 1;
		for (int i = 0; i < S.nstreams; i++)
			if (S.stream[i]->blocking && S.stream[i]->device == s->device)
				vc_join(&s->vc, &S.stream[i]->vc);
	} else if (s->blocking && S.legacy[s->device] != NULL) {
		vc_join(&s->vc, &S.legacy[s->device]->vc);
	}
	seq = ++s->vc.c[s->id];
	for (int i = 0; i < n; i++)
		if (t[i].hi > t[i].lo)
			check_touch(s, seq, what, &t[i]);
	pthread_mutex_unlock(&S.mu);
	return seq;
}

unsigned stub_issue_run(cudaStream_t s, const char *what, const struct stub_touch *t, int n,
			struct stub_node *node)
{
	unsigned seq;

	node->comm = NULL;
	seq = stub_issue(s, what, t, n, node);
	if (s->cap == NULL)
		node->run(node);
	return seq;
}

int stub_done(cudaStream_t s, unsigned seq)
{
	int done;

	pthread_mutex_lock(&S.mu);
	done = s->stuck == 0 || seq < s->stuck;
	pthread_mutex_unlock(&S.mu);
	return done;
}

static uint64_t checksum(uintptr_t lo, uintptr_t hi)
{
	uint64_t h = 1469598103934665603ull;

	for (const unsigned char *p = (const unsigned char *)lo; p < (const unsigned char *)hi; p++)
		h = (h ^ *p) * 1099511628211ull;
	return h;
}

/* The pinned-buffer rule (tests/lib/fake_gpu.c's, on the vector clocks), checked when the
 * host learns that copies ran and when it issues a new copy from [lo, hi) (lo < hi): a
 * copy whose bytes changed before the host knew it had run was rewritten under it. (The
 * same bytes copied again are no breach: the GPU reads what the host wrote either way.) */
static void pinned_check(uintptr_t lo, uintptr_t hi, const char *what)
{
	char msg[400] = "";

	pthread_mutex_lock(&S.mu);
	for (int i = 0; i < S.npend; i++) {
		struct pending *q = &S.pend[i];
		int known = S.host.c[q->sid] >= q->seq, again = lo < hi && q->lo < hi && lo < q->hi;
		int changed;

		if (!known && !again)
			continue;
		changed = checksum(q->lo, q->hi) != q->sum;
		if (changed && msg[0] == '\0')
			snprintf(msg, sizeof msg,
				 "pinned host buffer %#lx (%zu bytes), copied to the device on stream %d, %s before the host waited for an event or synchronisation covering that copy: the GPU reads a pinned buffer when the copy runs, not when it is issued (record an event after the copy and wait on it first)",
				 (unsigned long)q->lo, (size_t)(q->hi - q->lo), q->sid,
				 known ? "was rewritten" : what);
		if (known || changed) /* settled (a breach is said once) */
			S.pend[i--] = S.pend[--S.npend];
	}
	pthread_mutex_unlock(&S.mu);
	if (msg[0] != '\0')
		stub_rule("%s", msg);
}

/* A copy from [p, p + bytes) was issued as operation seq of s: if p is pinned memory, the
 * host must now wait for it before it rewrites the buffer or copies from it again. */
static void pinned_copied(cudaStream_t s, unsigned seq, const void *p, size_t bytes)
{
	struct block *b;

	pthread_mutex_lock(&S.mu);
	b = find_block((uintptr_t)p);
	if (b == NULL || b->device >= 0 || bytes == 0) {
		pthread_mutex_unlock(&S.mu);
		return;
	}
	pthread_mutex_unlock(&S.mu);
	pinned_check((uintptr_t)p, (uintptr_t)p + bytes, "was rewritten and copied from again");
	pthread_mutex_lock(&S.mu);
	if (S.npend < STUB_PENDING)
		S.pend[S.npend++] = (struct pending){(uintptr_t)p, (uintptr_t)p + bytes, s->id, seq,
						     checksum((uintptr_t)p, (uintptr_t)p + bytes)};
	pthread_mutex_unlock(&S.mu);
}

/* The device wrote [p, p + bytes) (a copy into pinned memory, ordered on its stream):
 * not a host rewrite, so pending copies from there take the new bytes as theirs. */
static void pinned_device_wrote(const void *p, size_t bytes)
{
	uintptr_t lo = (uintptr_t)p, hi = lo + bytes;

	pthread_mutex_lock(&S.mu);
	for (int i = 0; i < S.npend; i++)
		if (S.pend[i].lo < hi && lo < S.pend[i].hi)
			S.pend[i].sum = checksum(S.pend[i].lo, S.pend[i].hi);
	pthread_mutex_unlock(&S.mu);
}

static void host_learns(const struct stub_vc *vc)
{
	pthread_mutex_lock(&S.mu);
	vc_join(&S.host, vc);
	pthread_mutex_unlock(&S.mu);
	pinned_check(0, 0, NULL);
}

int stub_host_has(cudaStream_t s, unsigned seq)
{
	int has;

	pthread_mutex_lock(&S.mu);
	has = S.host.c[s->id] >= seq;
	pthread_mutex_unlock(&S.mu);
	return has;
}

void stub_stick(cudaStream_t s, unsigned seq, void *comm)
{
	pthread_mutex_lock(&S.mu);
	if (s->stuck == 0) {
		s->stuck = seq;
		s->stuck_comm = comm;
	}
	pthread_mutex_unlock(&S.mu);
}

void stub_unstick(void *comm)
{
	pthread_mutex_lock(&S.mu);
	for (int i = 0; i < S.nstreams; i++)
		if (S.stream[i]->stuck_comm == comm) {
			S.stream[i]->stuck = 0;
			S.stream[i]->stuck_comm = NULL;
		}
	pthread_mutex_unlock(&S.mu);
}

/* Block while operation seq of s cannot complete (a hung collective: only an abort from
 * another thread ends it, as on a GPU). */
static void block_until_done(cudaStream_t s, unsigned seq)
{
	while (!stub_done(s, seq))
		usleep(10000);
}

/* Wait for everything issued on s. */
static void sync_stream(cudaStream_t s)
{
	unsigned seq;
	struct stub_vc vc;

	pthread_mutex_lock(&S.mu);
	seq = s->vc.c[s->id];
	pthread_mutex_unlock(&S.mu);
	block_until_done(s, seq);
	pthread_mutex_lock(&S.mu);
	vc = s->vc;
	pthread_mutex_unlock(&S.mu);
	host_learns(&vc);
}

/* cudaFree and cudaFreeHost wait for the whole device (every device for pinned memory). */
static void sync_device(int device)
{
	for (int i = 0; i < S.nstreams; i++)
		if (device < 0 || S.stream[i]->device == device)
			sync_stream(S.stream[i]);
}

int stub_graph_holds(void *comm)
{
	int holds = 0;

	pthread_mutex_lock(&S.mu);
	for (int i = 0; i < S.ngraphs && !holds; i++) {
		const struct stub_node *node = S.graph_exec[i] ? ((cudaGraphExec_t)S.graph[i])->node
							       : ((cudaGraph_t)S.graph[i])->node;
		size_t n = S.graph_exec[i] ? ((cudaGraphExec_t)S.graph[i])->n : ((cudaGraph_t)S.graph[i])->n;

		for (size_t k = 0; k < n && !holds; k++)
			holds = node[k].comm == comm;
	}
	pthread_mutex_unlock(&S.mu);
	return holds;
}

static void graph_add(void *g, int exec)
{
	pthread_mutex_lock(&S.mu);
	if (S.ngraphs < STUB_GRAPHS) {
		S.graph[S.ngraphs] = g;
		S.graph_exec[S.ngraphs++] = exec;
	}
	pthread_mutex_unlock(&S.mu);
}

static int graph_remove(void *g)
{
	int found = 0;

	pthread_mutex_lock(&S.mu);
	for (int i = 0; i < S.ngraphs; i++)
		if (S.graph[i] == g) {
			S.graph[i] = S.graph[S.ngraphs - 1];
			S.graph_exec[i] = S.graph_exec[--S.ngraphs];
			found = 1;
			break;
		}
	pthread_mutex_unlock(&S.mu);
	return found;
}

/* A tracked pointer's touch of n bytes (nothing for untracked, pageable memory). */
static int touch(struct stub_touch *t, const void *p, size_t n, int write)
{
	int tracked;

	pthread_mutex_lock(&S.mu);
	tracked = p != NULL && n > 0 && find_block((uintptr_t)p) != NULL;
	pthread_mutex_unlock(&S.mu);
	if (!tracked)
		return 0;
	*t = (struct stub_touch){(uintptr_t)p, (uintptr_t)p + n, write};
	return 1;
}

static int is_pinned(const void *p)
{
	struct block *b;
	int pinned;

	pthread_mutex_lock(&S.mu);
	b = find_block((uintptr_t)p);
	pinned = b != NULL && b->device < 0;
	pthread_mutex_unlock(&S.mu);
	return pinned;
}

int stub_device_span(const void *p, size_t bytes)
{
	struct block *b;
	int dev;

	pthread_mutex_lock(&S.mu);
	b = p != NULL ? find_block((uintptr_t)p) : NULL;
	dev = b == NULL || b->device < 0 ? -1 : (uintptr_t)p + bytes > b->hi ? -2 : b->device;
	pthread_mutex_unlock(&S.mu);
	return dev;
}

/* ---- devices and errors ---------------------------------------------------------- */

const char *cudaGetErrorString(cudaError_t e)
{
	switch (e) {
	case cudaSuccess: return "no error";
	case cudaErrorInvalidValue: return "invalid argument";
	case cudaErrorMemoryAllocation: return "out of memory";
	case cudaErrorInvalidConfiguration: return "invalid configuration argument";
	case cudaErrorNoDevice: return "no CUDA-capable device is detected";
	case cudaErrorInvalidDevice: return "invalid device ordinal";
	case cudaErrorInvalidResourceHandle: return "invalid resource handle";
	case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
	case cudaErrorNotReady: return "device not ready";
	case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
	case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
	case cudaErrorPeerAccessAlreadyEnabled: return "peer access is already enabled";
	case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
	case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
	case cudaErrorStreamCaptureUnjoined: return "capture sequence contains a fork that was not joined to the primary stream";
	case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
	default: return "unknown error (cuda-stub)";
	}
}

cudaError_t cudaGetLastError(void)
{
	cudaError_t e = S.sticky != cudaSuccess ? S.sticky : tl_last;

	tl_last = cudaSuccess;
	return e;
}

cudaError_t cudaPeekAtLastError(void)
{
	return S.sticky != cudaSuccess ? S.sticky : tl_last;
}

cudaError_t cudaRuntimeGetVersion(int *v)
{
	*v = CUDART_VERSION;
	return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v)
{
	*v = CUDART_VERSION;
	return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *n)
{
	*n = ndevices();
	return *n > 0 ? cudaSuccess : ret(cudaErrorNoDevice);
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int dev)
{
	if (dev < 0 || dev >= ndevices())
		return ret(cudaErrorInvalidDevice);
	memset(p, 0, sizeof *p);
	snprintf(p->name, sizeof p->name, "Stub GPU %d", dev);
	p->uuid.bytes[0] = (char)0x5b;
	p->uuid.bytes[1] = (char)dev;
	return cudaSuccess;
}

cudaError_t cudaSetDevice(int dev)
{
	STICKY();
	if (dev < 0 || dev >= ndevices())
		return ret(cudaErrorInvalidDevice);
	tl_dev = dev;
	return cudaSuccess;
}

cudaError_t cudaGetDevice(int *dev)
{
	*dev = tl_dev;
	return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int *can, int dev, int peer)
{
	*can = dev != peer && dev >= 0 && peer >= 0 && dev < ndevices() && peer < ndevices();
	return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags)
{
	int already;

	STICKY();
	if (peer < 0 || peer >= ndevices() || peer == tl_dev)
		return ret(cudaErrorInvalidDevice);
	pthread_mutex_lock(&S.mu);
	already = S.peer[tl_dev][peer];
	S.peer[tl_dev][peer] = 1;
	pthread_mutex_unlock(&S.mu);
	return already ? ret(cudaErrorPeerAccessAlreadyEnabled) : cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
	cudaError_t e = stub_unsafe("cudaDeviceSynchronize", cudaErrorStreamCaptureUnsupported);

	STICKY();
	if (e != cudaSuccess)
		return e;
	count_wait(WAIT_DEVICE);
	sync_device(tl_dev);
	return cudaSuccess;
}

/* ---- memory --------------------------------------------------------------------- */

/* A block of `bytes` that ends where a guard page begins; its start is 4-byte aligned
 * (floats), not CUDA's 256 bytes: the end is what an off-by-one bound runs past. */
static cudaError_t new_block(void **p, size_t bytes, int device)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), n = (bytes ? bytes : 1), len;
	unsigned char *map, *m;

	n = (n + 3) & ~(size_t)3;
	len = (n + page - 1) / page * page + 2 * page;
	map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (map == MAP_FAILED)
		return ret(cudaErrorMemoryAllocation);
	mprotect(map, page, PROT_NONE);
	mprotect(map + len - page, page, PROT_NONE);
	m = map + len - page - n;
	memset(m, 0xff, n); /* NaN until written */
	pthread_mutex_lock(&S.mu);
	for (int i = 0; i <= S.nblocks && i < STUB_BLOCKS; i++)
		if (i == S.nblocks || !S.block[i].live) {
			S.block[i] = (struct block){(uintptr_t)m, (uintptr_t)m + n, map, len, device, 1};
			if (i == S.nblocks)
				S.nblocks++;
			break;
		}
	pthread_mutex_unlock(&S.mu);
	*p = m;
	return cudaSuccess;
}

int stub_guard_hit(uintptr_t addr, uintptr_t *lo, uintptr_t *hi, int *device)
{
	int hit = 0;

	pthread_mutex_lock(&S.mu);
	for (int i = 0; i < S.nblocks && !hit; i++) {
		const struct block *b = &S.block[i];

		if (b->live && addr >= (uintptr_t)b->map && addr < (uintptr_t)b->map + b->maplen &&
		    (addr < b->lo || addr >= b->hi)) {
			*lo = b->lo;
			*hi = b->hi;
			*device = b->device;
			hit = 1;
		}
	}
	pthread_mutex_unlock(&S.mu);
	return hit;
}

static cudaError_t free_block(void *p, int pinned, const char *what)
{
	struct block *b;
	int ok;

	if (p == NULL)
		return cudaSuccess;
	sync_device(pinned ? -1 : tl_dev); /* an implicit synchronisation */
	pthread_mutex_lock(&S.mu);
	b = find_block((uintptr_t)p);
	ok = b != NULL && b->lo == (uintptr_t)p && (b->device < 0) == pinned;
	if (ok) {
		forget(b->lo, b->hi);
		b->live = 0;
		munmap(b->map, b->maplen);
	}
	pthread_mutex_unlock(&S.mu);
	if (!ok) {
		stub_rule("%s(%p): not a pointer from %s", what, p, pinned ? "cudaHostAlloc" : "cudaMalloc");
		return ret(cudaErrorInvalidValue);
	}
	return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
	cudaError_t e;

	STICKY();
	*p = NULL;
	e = stub_unsafe("cudaMalloc", cudaErrorStreamCaptureUnsupported);
	if (e != cudaSuccess)
		return e;
	if (stub_fault("cudaMalloc"))
		return ret(cudaErrorMemoryAllocation);
	return new_block(p, bytes, tl_dev);
}

cudaError_t cudaFree(void *p)
{
	cudaError_t e;

	STICKY();
	e = stub_unsafe("cudaFree", cudaErrorStreamCaptureUnsupported);
	if (e != cudaSuccess)
		return e;
	count_wait(WAIT_FREE);
	return free_block(p, 0, "cudaFree");
}

cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags)
{
	cudaError_t e;

	STICKY();
	*p = NULL;
	e = stub_unsafe("cudaHostAlloc", cudaErrorStreamCaptureUnsupported);
	if (e != cudaSuccess)
		return e;
	if (stub_fault("cudaHostAlloc"))
		return ret(cudaErrorMemoryAllocation);
	e = new_block(p, bytes, -1);
	if (e == cudaSuccess)
		memset(*p, 0, bytes);
	return e;
}

cudaError_t cudaMallocHost(void **p, size_t bytes)
{
	return cudaHostAlloc(p, bytes, 0);
}

cudaError_t cudaFreeHost(void *p)
{
	cudaError_t e;

	STICKY();
	e = stub_unsafe("cudaFreeHost", cudaErrorStreamCaptureUnsupported);
	if (e != cudaSuccess)
		return e;
	count_wait(WAIT_FREE);
	return free_block(p, 1, "cudaFreeHost");
}

/* A copy or memset as a graph keeps it. */
struct bytes_op {
	void *dst;
	const void *src;   /* NULL: a memset */
	size_t bytes;
	int value;
};

static void run_bytes(const struct stub_node *node)
{
	const struct bytes_op *o = (const struct bytes_op *)(const void *)node->arg;

	if (o->src != NULL)
		memmove(o->dst, o->src, o->bytes);
	else
		memset(o->dst, o->value, o->bytes);
	pinned_device_wrote(o->dst, o->bytes);
}

static struct stub_node bytes_node(void *dst, const void *src, size_t bytes, int value)
{
	struct stub_node node = {.run = run_bytes};
	struct bytes_op o = {dst, src, bytes, value};

	memcpy(node.arg, &o, sizeof o);
	return node;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
			    cudaStream_t stream)
{
	cudaStream_t s = stub_stream(stream);
	struct stub_touch t[2];
	int n = 0, to_pageable;
	unsigned seq;
	cudaError_t e;
	struct stub_node node = bytes_node(dst, src, bytes, 0);

	e = stream_call(s, "cudaMemcpyAsync");
	if (e != cudaSuccess)
		return e;
	if (stub_fault("cudaMemcpyAsync")) {
		S.sticky = cudaErrorIllegalAddress; /* the device is lost */
		return ret(S.sticky);
	}
	n += touch(&t[n], src, bytes, 0);
	n += touch(&t[n], dst, bytes, 1);
	to_pageable = kind == cudaMemcpyDeviceToHost && !is_pinned(dst);
	seq = stub_issue(s, kind == cudaMemcpyDeviceToHost ? "cudaMemcpyAsync(device to host)" :
			 kind == cudaMemcpyHostToDevice ? "cudaMemcpyAsync(host to device)" :
			 "cudaMemcpyAsync(device to device)", t, n, &node);
	if (s->cap != NULL)
		return cudaSuccess;
	pinned_copied(s, seq, src, bytes);
	/* Into pageable memory the call returns once the copy has run: the stream drains. */
	if (to_pageable)
		sync_stream(s);
	memmove(dst, src, bytes);
	pinned_device_wrote(dst, bytes);
	return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind)
{
	cudaError_t e = stub_unsafe("cudaMemcpy (synchronous, the legacy stream)", cudaErrorStreamCaptureImplicit);

	if (e != cudaSuccess)
		return e;
	e = cudaMemcpyAsync(dst, src, bytes, kind, NULL);
	if (e == cudaSuccess) {
		count_wait(WAIT_COPY);
		sync_stream(stub_stream(NULL));
	}
	return e;
}

cudaError_t cudaMemcpyPeerAsync(void *dst, int dst_dev, const void *src, int src_dev, size_t bytes,
				cudaStream_t stream)
{
	cudaStream_t s = stub_stream(stream);
	struct stub_touch t[2];
	struct stub_node node = bytes_node(dst, src, bytes, 0);
	int n = 0;

	STICKY();
	n += touch(&t[n], src, bytes, 0);
	n += touch(&t[n], dst, bytes, 1);
	stub_issue_run(s, "cudaMemcpyPeerAsync", t, n, &node);
	return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t stream)
{
	cudaStream_t s = stub_stream(stream);
	struct stub_touch t;
	struct stub_node node = bytes_node(p, NULL, bytes, v);
	int n;
	cudaError_t e;

	e = stream_call(s, "cudaMemsetAsync");
	if (e != cudaSuccess)
		return e;
	if (stub_fault("cudaMemsetAsync"))
		return ret(cudaErrorInvalidValue);
	n = touch(&t, p, bytes, 1);
	stub_issue_run(s, s->legacy ? "cudaMemset (legacy default stream)" : "cudaMemsetAsync", &t, n,
		       &node);
	return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int v, size_t bytes)
{
	cudaError_t e = stub_unsafe("cudaMemset (the legacy default stream)", cudaErrorStreamCaptureImplicit);

	if (e != cudaSuccess)
		return e;
	count_wait(WAIT_COPY); /* on the legacy stream, which the next operation anywhere waits for */
	return cudaMemsetAsync(p, v, bytes, NULL);
}

/* ---- streams and events ------------------------------------------------------------ */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
	STICKY();
	*s = NULL;
	if (stub_fault("cudaStreamCreate"))
		return ret(cudaErrorMemoryAllocation);
	pthread_mutex_lock(&S.mu);
	*s = new_stream(tl_dev, !(flags & cudaStreamNonBlocking), 0);
	pthread_mutex_unlock(&S.mu);
	return *s != NULL ? cudaSuccess : ret(cudaErrorMemoryAllocation);
}

cudaError_t cudaStreamCreate(cudaStream_t *s)
{
	return cudaStreamCreateWithFlags(s, cudaStreamDefault);
}

/* At the end of a run whose module tore down (it destroyed a stream), what it left: the
 * teardown of an ordinary training run is checked, not only gpurules' scenarios. */
static void teardown_left(void)
{
	int streams = 0, graphs, dev = 0, pinned = 0, comms = stub_nccl_live();
	size_t dev_bytes = 0;

	if (!S.teardown || S.exit_fail || S.sticky != cudaSuccess)
		return; /* no teardown to check, a run that already failed a rule, or a lost
			 * device (every call fails: nothing can be freed) */
	for (int i = 0; i < S.nstreams; i++)
		streams += !S.stream[i]->legacy && !S.stream[i]->destroyed;
	graphs = S.ngraphs;
	for (int i = 0; i < S.nblocks; i++)
		if (S.block[i].live) {
			dev += S.block[i].device >= 0;
			pinned += S.block[i].device < 0;
			dev_bytes += S.block[i].device >= 0 ? S.block[i].hi - S.block[i].lo : 0;
		}
	if (streams + graphs + dev + pinned + comms == 0)
		return;
	fprintf(stderr, "cuda-stub: rule: at exit the module's teardown left %d stream(s), %d CUDA graph(s), %d device block(s) (%zu bytes), %d pinned block(s) and %d NCCL communicator(s) undestroyed or unfreed\n",
		streams, graphs, dev, dev_bytes, pinned, comms);
	fflush(stdout);
	fflush(stderr);
	_exit(1);
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	if (s == NULL)
		return cudaSuccess;
	if (s->cap != NULL) {
		stub_rule("cudaStreamDestroy of stream %d while it captures", s->id);
		return ret(cudaErrorStreamCaptureUnsupported);
	}
	if (stub_nccl_uses(s))
		stub_rule("cudaStreamDestroy of stream %d while a live NCCL communicator issues its collectives there: destroy the communicator (ncclCommDestroy) before the stream it runs on",
			  s->id);
	pthread_mutex_lock(&S.mu);
	if (!S.teardown)
		atexit(teardown_left);
	S.teardown = 1;
	s->destroyed = 1; /* kept: its clock stays in everyone's */
	pthread_mutex_unlock(&S.mu);
	return cudaSuccess;
}

/* Querying or synchronising a stream that captures is not permitted; it invalidates. */
static cudaError_t capturing_stream(cudaStream_t s, const char *what)
{
	if (s->cap == NULL)
		return cudaSuccess;
	stub_rule("%s on stream %d while it captures: not permitted, and the capture is invalidated",
		  what, s->id);
	invalidate(s->cap, cudaErrorStreamCaptureUnsupported);
	return ret(cudaErrorStreamCaptureUnsupported);
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	cudaStream_t s = stub_stream(stream);
	cudaError_t e;

	e = stream_call(s, "cudaStreamSynchronize");
	if (e == cudaSuccess)
		e = capturing_stream(s, "cudaStreamSynchronize");
	if (e != cudaSuccess)
		return e;
	count_wait(WAIT_STREAM);
	sync_stream(s);
	return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
	cudaStream_t s = stub_stream(stream);
	cudaError_t e;
	struct stub_vc vc;

	STICKY();
	signal_tick();
	e = capturing_stream(s, "cudaStreamQuery");
	if (e != cudaSuccess)
		return e;
	pthread_mutex_lock(&S.mu);
	vc = s->vc;
	pthread_mutex_unlock(&S.mu);
	if (!stub_done(s, vc.c[s->id]))
		return cudaErrorNotReady;
	if (lagging(s, vc.c[s->id], s->lag_asked == vc.c[s->id])) {
		s->lag_asked = vc.c[s->id];
		return cudaErrorNotReady;
	}
	host_learns(&vc);
	return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
	STICKY();
	*e = calloc(1, sizeof **e);
	if (*e == NULL)
		return ret(cudaErrorMemoryAllocation);
	(*e)->device = tl_dev;
	(*e)->timing = !(flags & cudaEventDisableTiming);
	return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e)
{
	return cudaEventCreateWithFlags(e, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
	free(e);
	return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream)
{
	cudaStream_t s = stub_stream(stream);
	cudaError_t err;

	err = stream_call(s, "cudaEventRecord");
	if (err != cudaSuccess)
		return err;
	if (e == NULL)
		return ret(cudaErrorInvalidResourceHandle);
	if (e->device != s->device) {
		stub_rule("cudaEventRecord: an event of device %d recorded on stream %d of device %d",
			  e->device, s->id, s->device);
		return ret(cudaErrorInvalidResourceHandle);
	}
	if (stub_fault("cudaEventRecord"))
		return ret(cudaErrorInvalidResourceHandle);
	if (s->legacy && !S.legacy_work && S.nstreams > 1)
		stub_rule("cudaEventRecord on the legacy default stream of device %d, where this process issues no work: its work is on its own non-blocking streams, which the legacy stream is not ordered with, so the event covers none of it (record it on the stream whose work it marks)",
			  s->device);
	pthread_mutex_lock(&S.mu);
	e->recorded = 1;
	e->stream = s;
	e->cap = s->cap;
	e->lag_asked = 0;
	if (s->cap != NULL) {
		e->cap_nodes = s->cap->n;
	} else {
		vc_join(&s->vc, &S.host);
		e->vc = s->vc;
		e->seq = s->vc.c[s->id];
		e->t = now();
	}
	pthread_mutex_unlock(&S.mu);
	return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t e, unsigned flags)
{
	cudaStream_t s = stub_stream(stream);
	cudaError_t err;

	err = stream_call(s, "cudaStreamWaitEvent");
	if (err != cudaSuccess)
		return err;
	if (e == NULL)
		return ret(cudaErrorInvalidResourceHandle);
	if (!e->recorded)
		return cudaSuccess;
	pthread_mutex_lock(&S.mu);
	if (e->cap != NULL && e->cap->ended) {
		/* recorded in a capture that has ended: it stands for no work */
	} else if (e->cap != NULL) {
		struct stub_capture *c = e->cap;

		if (s->cap == NULL) { /* a fork: s joins the capture */
			s->cap = c;
			s->cap_last = s->cap_joined = c->n;
		} else if (s == c->origin && e->stream != s && e->stream->cap == c) {
			if (e->cap_nodes > e->stream->cap_joined)
				e->stream->cap_joined = e->cap_nodes; /* joined back */
		}
	} else if (s->cap == NULL) {
		vc_join(&s->vc, &e->vc);
		if (e->stream->stuck != 0 && e->seq >= e->stream->stuck && s->stuck == 0) {
			s->stuck = s->vc.c[s->id] + 1; /* what comes next waits for a hung collective */
			s->stuck_comm = e->stream->stuck_comm;
		}
	}
	pthread_mutex_unlock(&S.mu);
	return cudaSuccess;
}

static cudaError_t captured_event(cudaEvent_t e, const char *what)
{
	if (e->cap == NULL || e->cap->ended)
		return cudaSuccess;
	stub_rule("%s on an event recorded inside a capture: not permitted (it stands for no work that runs)", what);
	invalidate(e->cap, cudaErrorStreamCaptureUnsupported);
	return ret(cudaErrorStreamCaptureUnsupported);
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
	cudaError_t err;

	STICKY();
	signal_tick();
	if (e == NULL)
		return ret(cudaErrorInvalidResourceHandle);
	if (!e->recorded)
		return cudaSuccess;
	err = captured_event(e, "cudaEventQuery");
	if (err != cudaSuccess || e->cap != NULL)
		return err;
	if (!stub_done(e->stream, e->seq))
		return cudaErrorNotReady;
	if (lagging(e->stream, e->seq, e->lag_asked)) {
		e->lag_asked = 1;
		return cudaErrorNotReady;
	}
	host_learns(&e->vc);
	return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
	cudaError_t err;

	STICKY();
	if (e == NULL)
		return ret(cudaErrorInvalidResourceHandle);
	if (!e->recorded)
		return cudaSuccess;
	err = captured_event(e, "cudaEventSynchronize");
	if (err == cudaSuccess)
		err = stub_unsafe("cudaEventSynchronize", cudaErrorStreamCaptureUnsupported);
	if (err != cudaSuccess || e->cap != NULL)
		return err;
	count_wait(WAIT_EVENT);
	block_until_done(e->stream, e->seq);
	host_learns(&e->vc);
	return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
	STICKY();
	if (a == NULL || b == NULL || !a->recorded || !b->recorded || a->cap != NULL || b->cap != NULL)
		return ret(cudaErrorInvalidResourceHandle);
	if (!a->timing || !b->timing) {
		stub_rule("cudaEventElapsedTime on an event created with cudaEventDisableTiming: there is no time to read");
		return ret(cudaErrorInvalidResourceHandle);
	}
	if (!stub_done(a->stream, a->seq) || !stub_done(b->stream, b->seq))
		return ret(cudaErrorNotReady);
	if (lagging(a->stream, a->seq, 0) || lagging(b->stream, b->seq, 0))
		return ret(cudaErrorNotReady);
	*ms = (float)(1e3 * (b->t - a->t));
	return cudaSuccess;
}

/* ---- capture and graphs ----------------------------------------------------------- */

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
	cudaStream_t s = stub_stream(stream);
	struct stub_capture *c;

	STICKY();
	if (s->legacy)
		return ret(cudaErrorStreamCaptureUnsupported);
	if (s->cap != NULL)
		return ret(cudaErrorIllegalState);
	c = calloc(1, sizeof *c);
	if (c == NULL)
		return ret(cudaErrorMemoryAllocation);
	c->origin = s;
	c->mode = mode;
	pthread_mutex_lock(&S.mu);
	c->kept = S.captures;
	S.captures = c;
	s->cap = c;
	s->cap_last = s->cap_joined = 0;
	pthread_mutex_unlock(&S.mu);
	if (mode != cudaStreamCaptureModeRelaxed)
		tl_cap = c;
	return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *g)
{
	cudaStream_t s = stub_stream(stream);
	struct stub_capture *c = s->cap;
	cudaError_t e = cudaSuccess;
	int unjoined = -1;

	*g = NULL;
	if (c == NULL || c->origin != s)
		return ret(cudaErrorIllegalState);
	pthread_mutex_lock(&S.mu);
	for (int i = 0; i < S.nstreams; i++) {
		cudaStream_t x = S.stream[i];

		if (x->cap != c)
			continue;
		if (x != s && x->cap_last > x->cap_joined)
			unjoined = x->id;
		x->cap = NULL;
	}
	pthread_mutex_unlock(&S.mu);
	if (tl_cap == c)
		tl_cap = NULL;
	if (unjoined >= 0 && !c->invalidated) {
		stub_rule("cudaStreamEndCapture on stream %d: stream %d joined the capture (waited on one of its events) and its last work was not joined back into the origin stream (cudaErrorStreamCaptureUnjoined)",
			  s->id, unjoined);
		invalidate(c, cudaErrorStreamCaptureUnjoined);
	}
	c->ended = 1;
	if (c->invalidated) {
		e = c->why == cudaErrorStreamCaptureUnjoined ? c->why : cudaErrorStreamCaptureInvalidated;
		free(c->node);
	} else {
		cudaGraph_t graph = calloc(1, sizeof *graph);

		if (graph == NULL) {
			free(c->node);
			e = cudaErrorMemoryAllocation;
		} else {
			graph->node = c->node;
			graph->n = c->n;
			graph_add(graph, 0);
			*g = graph;
		}
	}
	c->node = NULL;
	c->n = c->cap = 0; /* kept (not freed): events recorded inside it still point here */
	return ret(e);
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *st)
{
	cudaStream_t s = stub_stream(stream);

	*st = s->cap == NULL ? cudaStreamCaptureStatusNone :
	      s->cap->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
	return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *x, cudaGraph_t g, unsigned long long flags)
{
	cudaGraphExec_t exec;

	STICKY();
	*x = NULL;
	if (g == NULL || g->destroyed)
		return ret(cudaErrorInvalidValue);
	if (stub_fault("cudaGraphInstantiate"))
		return ret(cudaErrorInvalidValue);
	exec = calloc(1, sizeof *exec);
	if (exec == NULL || (exec->node = malloc((g->n ? g->n : 1) * sizeof *g->node)) == NULL) {
		free(exec);
		return ret(cudaErrorMemoryAllocation);
	}
	memcpy(exec->node, g->node, g->n * sizeof *g->node);
	exec->n = g->n;
	graph_add(exec, 1);
	*x = exec;
	return cudaSuccess;
}

/* A graph or an executable graph, and its nodes. */
static cudaError_t graph_destroy(void *g, struct stub_node *node)
{
	if (g == NULL || !graph_remove(g))
		return ret(cudaErrorInvalidValue);
	free(node);
	free(g);
	return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
	return graph_destroy(g, g != NULL ? g->node : NULL);
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x)
{
	return graph_destroy(x, x != NULL ? x->node : NULL);
}

/* The graph's work comes after the stream's earlier work and before its later work; here
 * in the order it was captured, on the launch stream. */
cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t stream)
{
	cudaStream_t s = stub_stream(stream);
	cudaError_t e;

	e = stream_call(s, "cudaGraphLaunch");
	if (e != cudaSuccess)
		return e;
	if (x == NULL)
		return ret(cudaErrorInvalidValue);
	if (stub_fault("cudaGraphLaunch"))
		return ret(cudaErrorLaunchOutOfResources);
	for (size_t i = 0; i < x->n; i++) {
		if (x->node[i].comm != NULL) {
			stub_nccl_replay(&x->node[i], s);
		} else {
			unsigned seq = stub_issue(s, x->node[i].what, x->node[i].touch, x->node[i].ntouch, NULL);

			if (x->node[i].run == run_bytes) {
				const struct bytes_op *o = (const struct bytes_op *)(const void *)x->node[i].arg;

				if (o->src != NULL)
					pinned_copied(s, seq, o->src, o->bytes);
			}
			if (x->node[i].run != NULL)
				x->node[i].run(&x->node[i]);
		}
	}
	return cudaSuccess;
}

/* ---- kernels: nvcc's registration and launch ------------------------------------------ */

void **__cudaRegisterFatBinary(void *fatCubin)
{
	static void *handle[16];
	static int n;

	return &handle[n < 15 ? n++ : 15];
}

void __cudaRegisterFatBinaryEnd(void **handle)
{
}

void __cudaUnregisterFatBinary(void **handle)
{
}

/* A kernel's parameters from its demangled name, "k_add(float*, float const*, unsigned
 * long)": which are pointers, and which of those point to const. */
static void parse_params(struct kernel *k, const char *mangled)
{
	int status = 0;
	char *d = __cxa_demangle(mangled, NULL, NULL, &status);
	const char *p = d != NULL ? strchr(d, '(') : NULL;
	int depth = 0, i = 0;
	const char *start;

	snprintf(k->name, sizeof k->name, "%s", mangled);
	if (p == NULL) {
		free(d);
		return;
	}
	snprintf(k->name, sizeof k->name, "%.*s", (int)(p - d), d);
	start = ++p;
	for (; *p != '\0' && i < 32; p++) {
		if (*p == '(' || *p == '<')
			depth++;
		else if ((*p == ')' || *p == '>') && depth > 0)
			depth--;
		else if ((*p == ',' || *p == ')') && depth == 0) {
			const char *e = p;

			while (e > start && e[-1] == ' ')
				e--;
			if (e > start && e[-1] == '*') {
				k->ptr |= 1u << i;
				/* "float const*": the pointee is const (not "float* const") */
				if (e - start >= 7 && memmem(start, (size_t)(e - start), "const*", 6) != NULL)
					k->konst |= 1u << i;
			}
			if (e > start)
				i++;
			start = p + 1;
			while (*start == ' ')
				start++;
			if (*p == ')')
				break;
		}
	}
	k->npar = i;
	free(d);
}

void __cudaRegisterFunction(void **handle, const char *hostFun, char *deviceFun,
			    const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid,
			    dim3 *bDim, dim3 *gDim, int *wSize)
{
	struct kernel *k;

	pthread_mutex_lock(&S.mu);
	k = S.nkernels < STUB_KERNELS ? &S.kernel[S.nkernels++] : NULL;
	pthread_mutex_unlock(&S.mu);
	if (k == NULL)
		return;
	k->host = hostFun;
	parse_params(k, deviceName);
	k->hk = stub_host_kernel(k->name);
	k->barriers = -1;
	if (k->hk != NULL && k->hk->npar != k->npar) {
		stub_rule("kernel %s: %d parameters in the module, %d in its host compilation (kernels_host.cc)",
			  k->name, k->npar, k->hk->npar);
		k->hk = NULL;
	}
}

cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun)
{
	for (int i = 0; i < S.nkernels; i++)
		if (S.kernel[i].host == hostFun) {
			*kernel = (cudaKernel_t)(void *)&S.kernel[i];
			return cudaSuccess;
		}
	*kernel = NULL;
	return ret(cudaErrorInvalidValue);
}

unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
				     struct CUstream_st *stream)
{
	tl_launch.grid = gridDim;
	tl_launch.block = blockDim;
	tl_launch.shmem = sharedMem;
	tl_launch.stream = stream;
	return 0;
}

cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
				       void *stream)
{
	*gridDim = tl_launch.grid;
	*blockDim = tl_launch.block;
	*sharedMem = tl_launch.shmem;
	*(cudaStream_t *)stream = tl_launch.stream;
	return cudaSuccess;
}

/* A launch as a graph keeps it: the kernel, its grid and a copy of its arguments. */
struct launch_op {
	struct kernel *k;
	dim3 grid, block;
	unsigned char off[STUB_KPARAMS]; /* where each argument's copy starts in val */
	_Alignas(16) unsigned char val[STUB_ARGBYTES - 64];
};
_Static_assert(sizeof(struct launch_op) <= STUB_ARGBYTES, "a launch's copy fits a node");

static void run_launch(const struct stub_node *node)
{
	struct launch_op *o = (struct launch_op *)(void *)((struct stub_node *)node)->arg;
	void *args[STUB_KPARAMS];

	for (int i = 0; i < o->k->hk->npar; i++)
		args[i] = o->val + o->off[i];
	stub_grid_run(o->k->hk, o->grid, o->block, args, &o->k->barriers);
}

/* A launch: its pointer arguments' first elements are its touches (a kernel's extent is
 * its own business; where two streams meet on a buffer, its first element is touched);
 * its body runs on the host over its grid (cuda_stub_grid.c), when issued or replayed. */
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void **args,
			       size_t sharedMem, cudaStream_t stream)
{
	struct kernel *k = (struct kernel *)(void *)kernel;
	cudaStream_t s = stub_stream(stream);
	struct stub_touch t[STUB_TOUCHES];
	struct stub_node node = {.run = run_launch};
	struct launch_op *o = (struct launch_op *)(void *)node.arg;
	size_t off = 0;
	int n = 0;
	cudaError_t e;

	if (k == NULL)
		return ret(cudaErrorInvalidValue);
	e = stream_call(s, k->name);
	if (e != cudaSuccess)
		return e;
	if (s->device != tl_dev) {
		stub_rule("%s launched on stream %d of device %d while device %d is current: a launch goes to the current device's streams only",
			  k->name, s->id, s->device, tl_dev);
		return ret(cudaErrorInvalidResourceHandle);
	}
	if ((unsigned long)grid.x * grid.y * grid.z == 0 || (unsigned long)block.x * block.y * block.z == 0 ||
	    (unsigned long)block.x * block.y * block.z > 1024)
		return ret(cudaErrorInvalidConfiguration);
	if (stub_fault("launch"))
		return ret(cudaErrorLaunchOutOfResources);
	if (k->hk == NULL) {
		stub_rule("kernel %s has no host compilation (kernels_host.cc finds the kernels by their `__global__ void NAME(` lines)",
			  k->name);
		return ret(cudaErrorInvalidDeviceFunction);
	}
	o->k = k;
	o->grid = grid;
	o->block = block;
	for (int i = 0; i < k->hk->npar; i++) {
		o->off[i] = (unsigned char)off;
		if (off + k->hk->size[i] > sizeof o->val) {
			stub_rule("kernel %s: more than %zu bytes of arguments (the stub's limit)", k->name,
				  sizeof o->val);
			return ret(cudaErrorInvalidValue);
		}
		memcpy(o->val + off, args[i], k->hk->size[i]);
		off = (off + k->hk->size[i] + 15) & ~(size_t)15;
	}
	for (int i = 0; i < k->npar && n < STUB_TOUCHES; i++)
		if (k->ptr >> i & 1)
			n += touch(&t[n], *(void **)args[i], sizeof(float), !(k->konst >> i & 1));
	stub_issue_run(s, k->name, t, n, &node);
	return cudaSuccess;
}
