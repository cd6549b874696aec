/*
 * gpurules - break one rule of CUDA or NCCL through the GPU module's ABI (backend/gpu.h),
 * so that a test can check that the module loaded from DDPTRAIN_CUDA_MODULE -- the fake
 * GPU (tests/lib/fake_gpu.c) or the real module linked against the stub libraries
 * (tests/lib/cuda_stub.c) -- names it.
 *
 *   mpirun -np NP gpurules SCENARIO
 *
 * Each rank drives device `rank` with a small step: a pinned batch copied in, one linear
 * layer forward and backward, its weight gradient all-reduced. "clean" keeps every rule
 * (a warm-up step, a captured step replayed twice, the teardown in order) and must exit
 * 0 with nothing on stderr; every other scenario breaks the one rule its name says. A
 * "collectives" (any number of ranks) runs the reduce-scatter and the all-gather over
 * equal parts, uneven parts and an empty part, and wait_first, on exact integer data;
 * "wire-fp16" and "wire-bf16" (1 or 2 ranks) the 16-bit all-reduce and reduce-scatter, whose
 * every element must be round16(round16(a) + round16(b)) (round16.h, PyTorch's compress
 * hooks at 2 ranks); "sharded-graph" (1 or 2 ranks) a 16-bit reduce-scatter, an
 * all-gather and wait_first eagerly, then captured and replayed; each prints the first
 * element that differs and exits 1. "wire-regrow-in-capture" (any ranks) captures a
 * 16-bit all-reduce larger than the eager one before it (its wire buffer would grow
 * inside the capture). "kernel-past-end" and "sgemm-past-end" (the stub only) run a
 * kernel and a product one element and one row past their buffers' ends.
 * A status the module returns is printed as "gpurules: SCENARIO: MESSAGE" and makes the
 * exit status 1; a rule broken at teardown is the module's own line on stderr and exit
 * status. Exit 77 (skip) if the module cannot be loaded.
 */
#include <dlfcn.h> /* dlsym: the stub NCCL's own calls (raw_inplace) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h" /* struct backend, backend_init, backend_free */
#include "backend/gpu.h"     /* gpu_load, struct gpu_module */
#include "comm/comm.h"       /* struct comm, comm_free */
#include "round16.h"          /* round16: the 16-bit wire's closed form */

enum { N = 4, IN = 8, OUT = 8 }; /* rows, inputs, outputs of the layer */
enum { CUTS_MAX = 65, COLL_MAX = 64 }; /* ranks + 1; floats in a collective scenario's buffers */

struct rig {
	const char *name;
	int rank, size;
	struct gpu mod;
	struct backend be;
	struct comm c;
	const struct backend_ops *ops;
	void *bc;
	float *hx;                 /* (N, IN) pinned */
	float *x, *w, *b, *y, *dw; /* device: x (N, IN), w (OUT, IN), b (OUT), y (N, OUT), dw (OUT, IN) + db (OUT) */
	float *a, *bb, *h;         /* the collective scenarios' device buffers (COLL_MAX) and pinned (COLL_MAX) */
	int failed;
};

/* A status from the module: printed, and the run's exit status becomes 1. */
static int check(struct rig *r, enum status st, const struct diag *d)
{
	if (st == ST_OK)
		return 0;
	printf("gpurules: %s: %s\n", r->name, d->msg);
	fflush(stdout);
	r->failed = 1;
	return 1;
}

/* The ranks agree that the communicator can be set up (the ready collective). */
static int ready(void *arg, int ok)
{
	int all = 0;

	MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	return all;
}

/* Queue one step: batch in, forward, backward, the gradient all-reduce (and its wait
 * unless without_wait). */
static int step(struct rig *r, int without_wait, struct diag *d)
{
	r->ops->to_device(r->bc, r->x, r->hx, (size_t)N * IN);
	r->ops->linear_forward(r->bc, r->y, r->x, r->w, r->b, N, IN, OUT, 1);
	r->ops->linear_backward(r->bc, NULL, r->dw, r->dw + OUT * IN, r->y, r->x, r->w, N, IN, OUT, 1.0f, 0);
	if (check(r, comm_allreduce_start(&r->c, r->dw, OUT * IN + OUT, COMM_LAST, d), d))
		return 1;
	return !without_wait && check(r, comm_wait_all(&r->c, d), d);
}

/* A captured step in graph slot 0 (after an eager one: cuBLAS and NCCL set up lazily). */
static int capture(struct rig *r, struct diag *d)
{
	return check(r, r->ops->graph_begin(r->bc, d), d) || step(r, 0, d) ||
	       check(r, r->ops->graph_end(r->bc, 0, d), d);
}

static int finish(struct rig *r, struct diag *d)
{
	return check(r, r->ops->sync(r->bc, d), d);
}

static int setup(struct rig *r, struct diag *d)
{
	const struct backend_config cfg = {.device = r->rank, .precision = PRECISION_FP32};
	unsigned char id[GPU_NCCL_ID_BYTES] = {0};
	int count = 0;
	char info[256];

	if (gpu_load(&r->mod, d) != ST_OK || r->mod.mod->probe(&count, info, sizeof info, d) != ST_OK)
		return 77;
	if (check(r, backend_init(&r->be, r->mod.mod->backend, &cfg, d), d))
		return 1;
	r->ops = r->be.ops;
	r->bc = r->be.ctx;
	if (r->rank == 0 && check(r, r->mod.mod->nccl_unique_id(id, d), d))
		return 1;
	MPI_Bcast(id, GPU_NCCL_ID_BYTES, MPI_BYTE, 0, MPI_COMM_WORLD);
	/* the wire type is the caller's, set before the communicator opens */
	r->c.wire = strcmp(r->name, "wire-fp16") == 0 || strcmp(r->name, "sharded-graph") == 0 ? COMM_WIRE_F16 :
		    strcmp(r->name, "wire-bf16") == 0 || strcmp(r->name, "wire-regrow-in-capture") == 0 ? COMM_WIRE_BF16 :
		    COMM_WIRE_F32;
	r->c.size = r->size; /* as comm_open sets it: the doors check cuts against it */
	if (check(r, r->mod.mod->nccl_comm_init(&r->c, &r->be, id, r->rank, r->size, 60, ready, NULL, NULL, NULL, d), d))
		return 1;
	r->hx = r->ops->host_alloc(r->bc, (size_t)N * IN);
	r->x = r->ops->alloc(r->bc, (size_t)N * IN);
	r->w = r->ops->alloc(r->bc, (size_t)OUT * IN);
	r->b = r->ops->alloc(r->bc, OUT);
	r->y = r->ops->alloc(r->bc, (size_t)N * OUT);
	r->dw = r->ops->alloc(r->bc, (size_t)OUT * IN + OUT);
	r->a = r->ops->alloc(r->bc, COLL_MAX);
	r->bb = r->ops->alloc(r->bc, COLL_MAX);
	r->h = r->ops->host_alloc(r->bc, COLL_MAX);
	if (!r->hx || !r->x || !r->w || !r->b || !r->y || !r->dw || !r->a || !r->bb || !r->h) {
		printf("gpurules: %s: out of memory\n", r->name);
		return 1;
	}
	for (int i = 0; i < N * IN; i++)
		r->hx[i] = (float)(i % 7) - 3.0f;
	/* rank 0's weights to every rank, as a run starts (rank 0 writes and waits for them) */
	if (r->rank == 0) {
		float w0[OUT * IN];

		for (int i = 0; i < OUT * IN; i++)
			w0[i] = (float)(i % 5) * 0.1f;
		r->ops->to_device(r->bc, r->w, w0, (size_t)OUT * IN);
		if (finish(r, d))
			return 1;
	}
	return check(r, comm_bcast(&r->c, r->w, (size_t)OUT * IN, 0, d), d) ||
	       step(r, 0, d) || finish(r, d) ? 1 : 0;
}

/* The teardown in order: graphs, memory, communicator, backend. */
static void teardown(struct rig *r)
{
	if (r->ops == NULL)
		return;
	if (r->ops->graph_reset != NULL)
		r->ops->graph_reset(r->bc);
	r->ops->host_free(r->bc, r->hx);
	r->ops->free(r->bc, r->x);
	r->ops->free(r->bc, r->w);
	r->ops->free(r->bc, r->b);
	r->ops->free(r->bc, r->y);
	r->ops->free(r->bc, r->dw);
	r->ops->free(r->bc, r->a);
	r->ops->free(r->bc, r->bb);
	r->ops->host_free(r->bc, r->h);
	comm_free(&r->c);
	backend_free(&r->be);
}

/* ---- the sharded and compressed collectives, checked against closed forms ---------- */

/* cuts of n floats over size ranks: equal (n = size * 5), uneven (a quarter-ish to
 * rank 0's side), or with rank 0's part empty. */
enum cut_kind { CUT_EQUAL, CUT_UNEVEN, CUT_EMPTY };

static size_t make_cuts(size_t *cuts, int size, enum cut_kind k)
{
	size_t n = k == CUT_EQUAL ? 5 * (size_t)size : 10 + 3 * (size_t)size;

	for (int q = 0; q <= size; q++)
		cuts[q] = k == CUT_EQUAL ? 5 * (size_t)q : size == 1 ? (size_t)q * n :
			  k == CUT_UNEVEN ? (size_t)q * (size_t)q * n / ((size_t)size * size) :
			  q == 0 || (q == 1 && size > 1) ? 0 : n * (size_t)(q - 1) / (size_t)(size - 1);
	cuts[size] = n;
	return n;
}

/* A rank's float32 data: exact integers, so every sum is exact in any order. */
static float x32(int rank, size_t i)
{
	return (float)(1000 * (rank + 1)) + (float)i;
}

static float sum32(int size, size_t i)
{
	return (float)(1000 * size * (size + 1) / 2) + (float)(size * (long)i);
}

/* A rank's data for the 16-bit wire: values near 1 and 1.5 with bits below both types'
 * precision, so each rounding shows. */
static float x16(int rank, size_t i)
{
	return 1.0f + 0.5f * (float)rank + (float)((i * 7 + (size_t)rank * 5) % 64) / 4096.0f;
}

/* Fill a device buffer with f(rank, i), via pinned memory; waits. */
static int fill(struct rig *r, float *dev, size_t n, float (*f)(int, size_t), struct diag *d)
{
	for (size_t i = 0; i < n; i++)
		r->h[i] = f(r->rank, i);
	r->ops->to_device(r->bc, dev, r->h, n);
	return finish(r, d);
}

/* Read a device buffer into r->h (pinned) after what the compute stream waits for. */
static int readback(struct rig *r, const float *dev, size_t n, struct diag *d)
{
	return check(r, r->ops->to_host(r->bc, r->h, dev, n, d), d);
}

/* Compare r->h[lo..hi) with want(i); print the first difference. The verdict is agreed
 * over the ranks, so that none goes on to a collective the others left. */
static int expect(struct rig *r, const char *what, size_t lo, size_t hi, float (*want)(struct rig *, size_t))
{
	int bad = 0, any = 0;

	for (size_t i = lo; i < hi && !bad; i++)
		if (r->h[i] != want(r, i)) {
			printf("gpurules: %s: rank %d: %s: element %zu is %.9g, want %.9g\n", r->name,
			       r->rank, what, i, (double)r->h[i], (double)want(r, i));
			fflush(stdout);
			bad = 1;
		}
	MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	r->failed |= any;
	return any;
}

static float want_sum32(struct rig *r, size_t i)
{
	return sum32(r->size, i);
}

static float want_own32(struct rig *r, size_t i)
{
	(void)r;
	return x32(0, i) * 2.0f + 1.0f; /* what each owner wrote before the all-gather */
}

/* Before an all-gather: rank r's own part holds the gathered values, the rest garbage. */
static float gather_src(int rank, size_t i)
{
	(void)rank;
	return x32(0, i) * 2.0f + 1.0f;
}

static enum round16_type wire16(const struct rig *r)
{
	return r->c.wire == COMM_WIRE_F16 ? ROUND16_F16 : ROUND16_BF16;
}

/* PyTorch's hook at 2 ranks: each rounded, their sum rounded once (at 1 rank: the
 * value rounded). */
static float want_wire(struct rig *r, size_t i)
{
	enum round16_type t = wire16(r);

	if (r->size == 1)
		return round16(t, x16(0, i));
	return round16(t, round16(t, x16(0, i)) + round16(t, x16(1, i)));
}

static float want_f32_of16(struct rig *r, size_t i)
{
	return r->size == 1 ? x16(0, i) : x16(0, i) + x16(1, i);
}

/* Reduce-scatter then all-gather over each cut kind, every part checked. */
static int rs_ag(struct rig *r, struct diag *d)
{
	static const char *names[] = {"equal parts", "uneven parts", "an empty part"};
	size_t cuts[CUTS_MAX];

	for (int k = CUT_EQUAL; k <= CUT_EMPTY; k++) {
		size_t n = make_cuts(cuts, r->size, (enum cut_kind)k);
		size_t lo = cuts[r->rank], hi = cuts[r->rank + 1];
		char what[64];

		snprintf(what, sizeof what, "reduce-scatter, %s", names[k]);
		if (fill(r, r->a, n, x32, d) ||
		    check(r, comm_reduce_scatter_start(&r->c, r->a, n, cuts, COMM_LAST, d), d) ||
		    check(r, comm_wait_all(&r->c, d), d) || readback(r, r->a, n, d) ||
		    expect(r, what, lo, hi, want_sum32))
			return 1;
		/* all-gather: the owner's part set, the others' garbage */
		for (size_t i = 0; i < n; i++)
			r->h[i] = i >= lo && i < hi ? gather_src(r->rank, i) : -7.0f;
		r->ops->to_device(r->bc, r->a, r->h, n);
		snprintf(what, sizeof what, "all-gather, %s", names[k]);
		if (finish(r, d) || check(r, comm_all_gather_start(&r->c, r->a, n, cuts, d), d) ||
		    check(r, comm_wait_all(&r->c, d), d) || readback(r, r->a, n, d) ||
		    expect(r, what, 0, n, want_own32))
			return 1;
	}
	return 0;
}

/* wait_first(1) orders the compute stream after the first of two collectives only:
 * reading the first's buffer is then safe; with `early` the second's is read too, before
 * wait_all: a race (the stub names it) or stale data (the fake GPU runs only what was
 * waited for). */
static int wait_first(struct rig *r, int early, struct diag *d)
{
	size_t cuts[CUTS_MAX], n = make_cuts(cuts, r->size, CUT_UNEVEN);
	size_t lo = cuts[r->rank], hi = cuts[r->rank + 1];

	for (size_t i = 0; i < n; i++) /* the all-gather's input: this rank's part */
		r->h[i] = i >= lo && i < hi ? gather_src(r->rank, i) : -7.0f;
	r->ops->to_device(r->bc, r->bb, r->h, n);
	if (finish(r, d) || fill(r, r->a, n, x32, d) ||
	    check(r, comm_reduce_scatter_start(&r->c, r->a, n, cuts, 0, d), d) ||
	    check(r, comm_all_gather_start(&r->c, r->bb, n, cuts, d), d) ||
	    check(r, comm_wait_first(&r->c, 1, d), d))
		return 1;
	if (early && (readback(r, r->bb, n, d) ||
		      expect(r, "all-gather read after wait_first(1), before wait_all", 0, n, want_own32)))
		return 1;
	if (readback(r, r->a, n, d) || expect(r, "reduce-scatter after wait_first(1)", lo, hi, want_sum32) ||
	    check(r, comm_wait_all(&r->c, d), d) || readback(r, r->bb, n, d))
		return 1;
	return expect(r, "all-gather after wait_all", 0, n, want_own32);
}

/* The 16-bit wire at 2 ranks (or 1: the rounding alone, for a machine with one GPU):
 * all-reduce and reduce-scatter (equal and uneven) in PyTorch's hook arithmetic,
 * exactly; without COMM_WIRE the same communicator sums in float32. */
static int wire(struct rig *r, struct diag *d)
{
	size_t cuts[CUTS_MAX], n = 37, rounded = 0;

	if (r->size > 2) {
		printf("gpurules: %s: needs 1 or 2 ranks (the closed form is one rounding of a sum of two)\n",
		       r->name);
		return 2;
	}
	for (size_t i = 0; i < n; i++)
		rounded += want_wire(r, i) != want_f32_of16(r, i);
	if (rounded < n / 2) { /* the data must tell 16 bits from 32 */
		printf("gpurules: %s: only %zu of %zu sums differ in 16 bits\n", r->name, rounded, n);
		return 1;
	}
	if (fill(r, r->a, n, x16, d) ||
	    check(r, comm_allreduce_start(&r->c, r->a, n, COMM_WIRE | COMM_LAST, d), d) ||
	    check(r, comm_wait_all(&r->c, d), d) || readback(r, r->a, n, d) ||
	    expect(r, "16-bit all-reduce", 0, n, want_wire))
		return 1;
	for (int k = CUT_EQUAL; k <= CUT_UNEVEN; k++) {
		size_t m = make_cuts(cuts, r->size, (enum cut_kind)k);

		/* uneven: read after wait_first(1), which must cover the widening too */
		if (fill(r, r->a, m, x16, d) ||
		    check(r, comm_reduce_scatter_start(&r->c, r->a, m, cuts, COMM_WIRE, d), d) ||
		    check(r, k == CUT_EQUAL ? comm_wait_all(&r->c, d) :
			     comm_wait_first(&r->c, 1, d), d) ||
		    readback(r, r->a, m, d) ||
		    (k != CUT_EQUAL && check(r, comm_wait_all(&r->c, d), d)) ||
		    expect(r, k == CUT_EQUAL ? "16-bit reduce-scatter, equal parts" :
			   "16-bit reduce-scatter, uneven parts", cuts[r->rank], cuts[r->rank + 1], want_wire))
			return 1;
	}
	return fill(r, r->a, n, x16, d) ||
	       check(r, comm_allreduce_start(&r->c, r->a, n, COMM_LAST, d), d) ||
	       check(r, comm_wait_all(&r->c, d), d) || readback(r, r->a, n, d) ||
	       expect(r, "float32 all-reduce beside the 16-bit wire", 0, n, want_f32_of16);
}

/* NCCL's in-place rule broken on purpose, below the module: ncclReduceScatter called
 * directly (the stub NCCL's own symbol in the loaded module; the fake GPU has none:
 * skip) with recvbuff one float past sendbuff + rank * recvcount. This file is built
 * without NCCL's headers: the calls are typed here from nccl.h (ncclUniqueId is 128
 * bytes, ncclFloat32 7, ncclSum 0). */
enum { NCCL_ID_BYTES = 128 };
static int raw_inplace(struct rig *r, struct diag *d)
{
	int (*get_id)(unsigned char *) = (int (*)(unsigned char *))dlsym(r->mod.handle, "ncclGetUniqueId");
	void *init = dlsym(r->mod.handle, "ncclCommInitRank");
	void *rs = dlsym(r->mod.handle, "ncclReduceScatter");
	void *sync = dlsym(r->mod.handle, "cudaDeviceSynchronize");
	void *destroy = dlsym(r->mod.handle, "ncclCommDestroy");
	unsigned char id[NCCL_ID_BYTES] = {0};
	void *comm = NULL;
	size_t c = 4;

	if (get_id == NULL || init == NULL || rs == NULL || sync == NULL || destroy == NULL) {
		printf("SKIP: %s: the module is not linked against the stub NCCL\n", r->name);
		return 77;
	}
	if (fill(r, r->a, c * (size_t)r->size, x32, d))
		return 1;
	if (r->rank == 0)
		get_id(id);
	MPI_Bcast(id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
	{
		struct nccl_id { unsigned char b[NCCL_ID_BYTES]; } u;
		int rc;

		memcpy(u.b, id, sizeof u.b);
		rc = ((int (*)(void **, int, struct nccl_id, int))init)(&comm, r->size, u, r->rank);
		if (rc != 0) {
			printf("gpurules: %s: ncclCommInitRank: %d\n", r->name, rc);
			return 1;
		}
	}
	/* recvbuff = sendbuff + rank * recvcount + 1: overlapping, not in place */
	((int (*)(const void *, void *, size_t, int, int, void *, void *))rs)(
		r->a, r->a + (size_t)r->rank * c + 1, c - 1, 7 /* ncclFloat32 */, 0 /* ncclSum */, comm, NULL);
	((int (*)(void))sync)();
	((int (*)(void *))destroy)(comm);
	return 0;
}

/* One step of sharded, compressed exchange: a 16-bit reduce-scatter of a over uneven
 * cuts, a float32 all-gather of bb over them, the compute stream waiting for the first
 * (wait_first) then for both (wait_all). */
static int sharded_step(struct rig *r, const size_t *cuts, size_t n, struct diag *d)
{
	return check(r, comm_reduce_scatter_start(&r->c, r->a, n, cuts, COMM_WIRE, d), d) ||
	       check(r, comm_all_gather_start(&r->c, r->bb, n, cuts, d), d) ||
	       check(r, comm_wait_first(&r->c, 1, d), d) ||
	       check(r, comm_wait_all(&r->c, d), d);
}

/* Inputs of sharded_step: a = x16, bb = this rank's part of the gathered values. */
static int sharded_inputs(struct rig *r, const size_t *cuts, size_t n, struct diag *d)
{
	for (size_t i = 0; i < n; i++)
		r->h[i] = i >= cuts[r->rank] && i < cuts[r->rank + 1] ? gather_src(r->rank, i) : -7.0f;
	r->ops->to_device(r->bc, r->bb, r->h, n);
	return finish(r, d) || fill(r, r->a, n, x16, d);
}

/* Its results; `values` 0 where they are not computed. */
static int sharded_check(struct rig *r, const size_t *cuts, size_t n, const char *when,
			 int values, struct diag *d)
{
	char what[96];

	if (readback(r, r->a, n, d))
		return 1;
	snprintf(what, sizeof what, "16-bit reduce-scatter, %s", when);
	if (values && expect(r, what, cuts[r->rank], cuts[r->rank + 1], want_wire))
		return 1;
	if (readback(r, r->bb, n, d))
		return 1;
	snprintf(what, sizeof what, "all-gather, %s", when);
	return values && expect(r, what, 0, n, want_own32);
}

/* The sharded step eagerly (which sets up NCCL and the wire's buffers), then captured
 * into a CUDA graph and replayed twice: each replay must give the eager results, and
 * keep every rule (a group, events and the wire's kernels inside a capture). */
static int sharded_graph(struct rig *r, struct diag *d)
{
	size_t cuts[CUTS_MAX], n = make_cuts(cuts, r->size, CUT_UNEVEN);
	int values = 1; /* the stub NCCL, too, moves the data when a graph is replayed */

	if (r->size > 2) {
		printf("gpurules: %s: needs 1 or 2 ranks (the 16-bit closed form)\n", r->name);
		return 2;
	}
	if (sharded_inputs(r, cuts, n, d) || sharded_step(r, cuts, n, d) ||
	    sharded_check(r, cuts, n, "eager", 1, d))
		return 1;
	if (sharded_inputs(r, cuts, n, d) || check(r, r->ops->graph_begin(r->bc, d), d) ||
	    sharded_step(r, cuts, n, d) || check(r, r->ops->graph_end(r->bc, 0, d), d))
		return 1;
	for (int k = 0; k < 2; k++)
		if (sharded_inputs(r, cuts, n, d) || check(r, r->ops->graph_launch(r->bc, 0, d), d) ||
		    sharded_check(r, cuts, n, k == 0 ? "first replay" : "second replay", values, d))
			return 1;
	return finish(r, d);
}

static int scenario(struct rig *r, struct diag *d)
{
	const char *s = r->name;
	double tf = 0.0;

	if (strcmp(s, "clean") == 0) {
		if (capture(r, d))
			return 1;
		for (int i = 0; i < 2; i++)
			if (check(r, r->ops->graph_launch(r->bc, 0, d), d))
				return 1;
		r->ops->host_mark(r->bc, 0);
		if (check(r, r->ops->host_wait(r->bc, 0, d), d))
			return 1;
		return finish(r, d);
	}
	/* the sharded and compressed collectives */
	if (strcmp(s, "collectives") == 0)
		return rs_ag(r, d) || wait_first(r, 0, d) || finish(r, d);
	if (strcmp(s, "wait-first-short") == 0) /* reads the second collective's buffer after wait_first(1) */
		return wait_first(r, 1, d) || finish(r, d);
	if (strcmp(s, "wire-fp16") == 0 || strcmp(s, "wire-bf16") == 0)
		return wire(r, d) || finish(r, d);
	if (strcmp(s, "sharded-graph") == 0)
		return sharded_graph(r, d);
	if (strcmp(s, "nccl-inplace-offset") == 0)
		return raw_inplace(r, d);
	/* Out of bounds (the stub only: the fake's kernels would overrun host memory): a
	 * kernel over one float more than y holds, and a product of one row more than x
	 * and y hold. */
	if (strcmp(s, "kernel-past-end") == 0) {
		r->ops->relu_forward(r->bc, r->y, (size_t)N * OUT + 1);
		return finish(r, d);
	}
	if (strcmp(s, "sgemm-past-end") == 0) {
		r->ops->linear_forward(r->bc, r->y, r->x, r->w, r->b, N + 1, IN, OUT, 0);
		return finish(r, d);
	}
	if (strcmp(s, "wire-regrow-in-capture") == 0) {
		/* A 16-bit all-reduce eagerly, then a larger one captured: its wire buffer would
		 * have to grow (cudaMalloc) inside the capture. The module must refuse it by name
		 * (or the stub names the allocation); replaying a graph whose buffer was freed
		 * and reallocated would read freed memory. */
		size_t n = COLL_MAX / 2;

		if (fill(r, r->a, COLL_MAX, x16, d) ||
		    check(r, r->c.ops->allreduce_start(r->c.ctx, r->a, n, COMM_WIRE | COMM_LAST, d), d) ||
		    check(r, r->c.ops->wait_all(r->c.ctx, d), d) || finish(r, d) ||
		    check(r, r->ops->graph_begin(r->bc, d), d))
			return 1;
		if (check(r, r->c.ops->allreduce_start(r->c.ctx, r->a, COLL_MAX, COMM_WIRE | COMM_LAST, d), d) ||
		    check(r, r->c.ops->wait_all(r->c.ctx, d), d)) {
			r->ops->graph_end(r->bc, 0, d);
			return 1;
		}
		return check(r, r->ops->graph_end(r->bc, 0, d), d) || finish(r, d);
	}
	/* CUDA: what a capture forbids */
	if (strcmp(s, "alloc-in-capture") == 0 || strcmp(s, "free-in-capture") == 0 ||
	    strcmp(s, "host-alloc-in-capture") == 0 || strcmp(s, "host-free-in-capture") == 0 ||
	    strcmp(s, "sync-in-capture") == 0 || strcmp(s, "legacy-stream-in-capture") == 0) {
		float *p = r->ops->alloc(r->bc, 16), *h = r->ops->host_alloc(r->bc, 16);

		if (check(r, r->ops->graph_begin(r->bc, d), d))
			return 1;
		if (strcmp(s, "alloc-in-capture") == 0)
			r->ops->alloc(r->bc, 16);
		else if (strcmp(s, "free-in-capture") == 0)
			r->ops->free(r->bc, p);
		else if (strcmp(s, "host-alloc-in-capture") == 0)
			r->ops->host_alloc(r->bc, 16);
		else if (strcmp(s, "host-free-in-capture") == 0)
			r->ops->host_free(r->bc, h);
		else if (strcmp(s, "sync-in-capture") == 0)
			check(r, r->ops->sync(r->bc, d), d);
		else
			check(r, r->mod.mod->bench_sgemm(r->rank, 0, 0, 8, 8, 8, 0, 1, &tf, d), d);
		r->ops->relu_forward(r->bc, r->y, (size_t)N * OUT);
		return check(r, r->ops->graph_end(r->bc, 0, d), d) || finish(r, d);
	}
	if (strcmp(s, "unjoined-capture") == 0) /* a captured all-reduce, no wait_all */
		return check(r, r->ops->graph_begin(r->bc, d), d) || step(r, 1, d) ||
		       check(r, r->ops->graph_end(r->bc, 0, d), d) || finish(r, d);
	if (strcmp(s, "mark-before-copy") == 0) {
		/* The batch buffer's mark is recorded before its copy: waiting on the mark does
		 * not make the copy safe to overwrite. */
		r->ops->host_mark(r->bc, 0);
		r->ops->to_device(r->bc, r->x, r->hx, (size_t)N * IN);
		if (check(r, r->ops->host_wait(r->bc, 0, d), d))
			return 1;
		r->hx[0] += 1.0f; /* the loader refills the buffer */
		return finish(r, d);
	}
	/* NCCL */
	if (strcmp(s, "count-mismatch") == 0) {
		if (check(r, comm_allreduce_start(&r->c, r->dw, (size_t)OUT * IN + (size_t)r->rank, COMM_LAST, d), d) ||
		    check(r, comm_wait_all(&r->c, d), d))
			return 1;
		return finish(r, d);
	}
	if (strcmp(s, "order-mismatch") == 0) { /* rank 0: all-reduce, broadcast; the others: broadcast, all-reduce */
		for (int k = 0; k < 2; k++) {
			if ((k == 0) == (r->rank == 0)) {
				if (step(r, 0, d) || finish(r, d))
					return 1;
			} else if (check(r, comm_bcast(&r->c, r->w, (size_t)OUT * IN, 0, d), d)) {
				return 1;
			}
		}
		return 0;
	}
	if (strcmp(s, "graph-eager-mix") == 0) { /* rank 0 replays the step, the others run it eagerly */
		if (r->rank == 0 ? capture(r, d) || check(r, r->ops->graph_launch(r->bc, 0, d), d)
				 : step(r, 0, d))
			return 1;
		return finish(r, d);
	}
	if (strcmp(s, "comm-after-destroy") == 0) {
		struct comm keep = r->c;

		comm_free(&r->c);
		r->c = keep; /* a copy of the communicator outlived it */
		step(r, 0, d);
		r->c.ops = NULL;
		return finish(r, d);
	}
	if (strcmp(s, "destroy-in-flight") == 0) { /* all-reduce started, never waited for */
		step(r, 1, d);
		comm_free(&r->c);
		return 0;
	}
	if (strcmp(s, "graph-outlives-comm") == 0) { /* the graph holds a collective at destroy */
		if (capture(r, d) || check(r, r->ops->graph_launch(r->bc, 0, d), d) || finish(r, d))
			return 1;
		comm_free(&r->c);
		return 0;
	}
	if (strcmp(s, "backend-before-comm") == 0) {
		struct comm keep = r->c;

		r->ops->graph_reset(r->bc);
		backend_free(&r->be);
		comm_free(&keep);
		r->ops = NULL;
		return 0;
	}
	printf("gpurules: unknown scenario %s\n", s);
	return 2;
}

int main(int argc, char **argv)
{
	struct rig r = {0};
	struct diag d = {0};
	int rc;

	if (argc != 2) {
		fprintf(stderr, "usage: gpurules SCENARIO\n");
		return 2;
	}
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &r.rank);
	MPI_Comm_size(MPI_COMM_WORLD, &r.size);
	r.name = argv[1];
	rc = setup(&r, &d);
	if (rc == 77) {
		printf("SKIP: %s\n", d.msg);
		MPI_Finalize();
		return 77;
	}
	if (rc == 0)
		rc = scenario(&r, &d);
	if (rc == 77) {
		teardown(&r);
		MPI_Finalize();
		return 77;
	}
	if (rc == 0 && r.failed)
		rc = 1;
	teardown(&r);
	MPI_Finalize();
	return rc;
}
