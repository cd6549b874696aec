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
 * status the module returns is printed as "gpurules: SCENARIO: MESSAGE" and makes the
 * exit status 1; a rule broken at teardown is the module's own line on stderr and exit
 * status. Exit 77 (skip) if the module cannot be loaded.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h" /* struct backend, backend_init, backend_free */
#include "backend/gpu.h"     /* gpu_load, struct gpu_module */
#include "dist/comm.h"       /* struct comm, comm_free */

enum { N = 4, IN = 8, OUT = 8 }; /* rows, inputs, outputs of the layer */

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
	r->ops->linear_backward(r->bc, NULL, r->dw, r->dw + OUT * IN, r->y, r->x, r->w, N, IN, OUT, 0);
	if (check(r, r->c.ops->allreduce_start(r->c.ctx, r->dw, OUT * IN + OUT, 1, d), d))
		return 1;
	return !without_wait && check(r, r->c.ops->wait_all(r->c.ctx, d), d);
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
	const struct backend_config cfg = {.device = r->rank, .tf32 = 0};
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
	if (check(r, r->mod.mod->nccl_comm_init(&r->c, &r->be, id, r->rank, r->size, 60, ready, NULL, d), d))
		return 1;
	r->hx = r->ops->host_alloc(r->bc, (size_t)N * IN);
	r->x = r->ops->alloc(r->bc, (size_t)N * IN);
	r->w = r->ops->alloc(r->bc, (size_t)OUT * IN);
	r->b = r->ops->alloc(r->bc, OUT);
	r->y = r->ops->alloc(r->bc, (size_t)N * OUT);
	r->dw = r->ops->alloc(r->bc, (size_t)OUT * IN + OUT);
	if (!r->hx || !r->x || !r->w || !r->b || !r->y || !r->dw) {
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
	return check(r, r->c.ops->bcast(r->c.ctx, r->w, (size_t)OUT * IN, 0, d), d) ||
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
	comm_free(&r->c);
	backend_free(&r->be);
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
		if (check(r, r->c.ops->allreduce_start(r->c.ctx, r->dw, (size_t)OUT * IN + (size_t)r->rank, 1, d), d) ||
		    check(r, r->c.ops->wait_all(r->c.ctx, d), d))
			return 1;
		return finish(r, d);
	}
	if (strcmp(s, "order-mismatch") == 0) { /* rank 0: all-reduce, broadcast; the others: broadcast, all-reduce */
		for (int k = 0; k < 2; k++) {
			if ((k == 0) == (r->rank == 0)) {
				if (step(r, 0, d) || finish(r, d))
					return 1;
			} else if (check(r, r->c.ops->bcast(r->c.ctx, r->w, (size_t)OUT * IN, 0, d), d)) {
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
	if (rc == 0 && r.failed)
		rc = 1;
	teardown(&r);
	MPI_Finalize();
	return rc;
}
