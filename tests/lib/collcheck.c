/*
 * collcheck - the MPI communicator's host collectives against closed-form sums
 * (tests/comm/collectives.sh). Run under mpirun; DDPTRAIN_ALLREDUCE and the
 * DDPTRAIN_RING_* settings choose the algorithm as they do for ddptrain.
 *
 *   collcheck [--wire=fp32|fp16|bf16] [--device=fake]
 *
 * --device=fake: the buffers are device memory of the CUDA module that
 * DDPTRAIN_CUDA_MODULE names (the tests' fake GPU), so the communicator stages
 * them through its pinned host mirror (or, with DDPTRAIN_MPI_CUDA_AWARE=1, hands
 * the last float32 all-reduce the device pointer).
 *
 * Every value is a pure function of (rank, index, step). Three steps each start,
 * with several collectives in flight at once: all-reduces (one with COMM_LAST),
 * reduce-scatters with uneven parts (an empty one; one rank's part the whole
 * bucket; a blocking one), small buckets (the ring hands them to MPI), and
 * all-gathers of a separate buffer; wait_first(k) is checked for the first k
 * while later ones are still in flight, then wait_all for the rest.
 *
 * fp32: the values are small integers, so every sum is exact in any order.
 * fp16/bf16: each result must be exactly the algorithm's stated order of 16-bit
 * partial sums, computed serially here (the ring: piece j from rank j to rank j-1,
 * part i from rank i+1 to rank i; the window: rank order); MPI's own order at more
 * than 2 ranks is Open MPI's, so there the result must be a 16-bit value within
 * 2 x ranks roundings (unit roundoff x the sum of magnitudes) of the exact sum. Exit 0 if
 * every rank agrees, 1 if not.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/gpu.h"
#include "core/half.h"
#include "comm/comm.h"
#include "comm/comm_mpi.h"
#include "comm/world.h"

#define G 24000      /* floats of the gradient buffer */
#define M 6000       /* floats of the all-gathered buffer */
#define STEPS 3

enum alg { ALG_MPI, ALG_RING, ALG_SHM, ALG_HIER };

static int rank, size, wire16, errors;
static enum comm_wire wire = COMM_WIRE_F32;
static enum alg alg;
static size_t ring_chunk, ring_min; /* floats */
static struct backend be;
static int on_device;
/* the buffers' host copies (the buffers themselves where not on_device) */
static float *hgrads, *hgath;
/* hierarchical: ranks per node, nodes; by world rank: its node-local rank and its node's
 * first world rank */
static int nl, nn, lrank[64], node[64];

/* A gradient's value on rank r, index i, in step s. */
static float x(int r, size_t i, int s)
{
	size_t k = i + (size_t)s * 7919;

	if (!wire16)
		return (float)((int)((k * 7 + (size_t)r * 13) % 41) - 20);
	return (float)((k * 2654435761u + (size_t)r * 40503u) % 20001) / 1000.0f - 10.0f;
}

static enum half_type ht(void)
{
	return wire == COMM_WIRE_BF16 ? HALF_BF16 : HALF_F16;
}

static float r16(float v)
{
	return half_value(half_round(v, ht()), ht());
}

/* The 16-bit sum over the ranks starting at rank `first`, in ring order. */
static float sum16(size_t i, int s, int first)
{
	float t = r16(x(first, i, s));

	for (int k = 1; k < size; k++)
		t = r16(t + r16(x((first + k) % size, i, s)));
	return t;
}

/* Node k's (by its first world rank) 16-bit sum of element i, in node-local rank order. */
static float node_sum(size_t i, int s, int k)
{
	float t = 0;
	int started = 0;

	for (int l = 0; l < nl; l++)
		for (int r = 0; r < size; r++)
			if (node[r] == k && lrank[r] == l) {
				t = started ? r16(t + r16(x(r, i, s))) : r16(x(r, i, s));
				started = 1;
			}
	return t;
}

/* The world rank of local rank l's peer number j (peers in world rank order). */
static int peer(int l, int j)
{
	for (int r = 0; r < size; r++)
		if (lrank[r] == l && j-- == 0)
			return r;
	return -1;
}

/* Hierarchical: the node sums of element i on local rank l's peers, added along the ring
 * from peer j. */
static float hier_sum(size_t i, int s, int l, int j)
{
	float t = node_sum(i, s, node[peer(l, j)]);

	for (int k = 1; k < nn; k++)
		t = r16(t + node_sum(i, s, node[peer(l, (j + k) % nn)]));
	return t;
}

/* The piece of offset o in a ring all-reduce of m floats over p ranks. */
static int ring_piece(size_t m, size_t o, int p)
{
	size_t cap = ring_chunk * (size_t)p, pos = o / cap * cap, len = m - pos < cap ? m - pos : cap;

	for (int j = 0; j < p; j++)
		if (o - pos >= (size_t)j * len / (size_t)p && o - pos < (size_t)(j + 1) * len / (size_t)p)
			return j;
	return -1;
}

/* Check buf[i] (index i of the buffer it sits in) against its sum; `first` is the rank the
 * algorithm starts that element's sum at, -1: MPI's own order, -2: `want` is it. */
static void expect_sum_as(const char *what, float got, size_t i, int s, int first, float want16);

static void expect_sum(const char *what, float got, size_t i, int s, int first)
{
	expect_sum_as(what, got, i, s, first, 0);
}

static void expect_sum_as(const char *what, float got, size_t i, int s, int first, float want16)
{
	double exact = 0, mag = 0;
	float want;

	for (int r = 0; r < size; r++) {
		exact += x(r, i, s);
		mag += fabs(x(r, i, s));
	}
	if (!wire16) {
		want = (float)exact;
	} else if (first == -2) {
		want = want16;
	} else if (first >= 0 || size <= 2) {
		want = sum16(i, s, first >= 0 ? first : 0);
	} else { /* MPI's order: a 16-bit value near the exact sum */
		double tol = 2 * size * mag * (wire == COMM_WIRE_BF16 ? 0x1p-8 : 0x1p-11);

		if (r16(got) != got || fabs(got - exact) > tol) {
			if (errors++ < 5)
				fprintf(stderr, "collcheck: rank %d step %d %s [%zu]: %.9g, want %.9g within %.3g\n",
					rank, s, what, i, got, exact, tol);
		}
		return;
	}
	if (memcmp(&got, &want, sizeof got) != 0 && errors++ < 5)
		fprintf(stderr, "collcheck: rank %d step %d %s [%zu]: %.9g, want %.9g\n", rank, s, what, i,
			got, want);
}

/* Whether a collective over n floats runs on the ring (else on MPI's own, or the window). */
static int on_ring(size_t n)
{
	return alg == ALG_RING && n >= ring_min;
}

/* The rank whose value starts element e's sum in an all-reduce of n floats. */
static int ar_first(size_t n, size_t e)
{
	size_t cap, pos, len, o;

	if (alg == ALG_SHM)
		return 0;
	if (!on_ring(n))
		return -1;
	cap = ring_chunk * (size_t)size;
	pos = e / cap * cap;
	len = n - pos < cap ? n - pos : cap;
	o = e - pos;
	for (int j = 0; j < size; j++)
		if (o >= (size_t)j * len / (size_t)size && o < (size_t)(j + 1) * len / (size_t)size)
			return j;
	return -2; /* not reached */
}

/* One collective of a step. */
struct coll {
	const char *what;
	int kind;         /* 0: all-reduce, 1: reduce-scatter, 2: all-gather */
	size_t off, n;    /* in the gradient (kinds 0, 1) or the gathered buffer (2) */
	unsigned flags;
	size_t cuts[65];
};

static void check(const struct coll *c, const float *dgrads, const float *dgath, int s)
{
	const float *grads = hgrads, *gath = hgath;

	if (on_device) { /* the whole collective's range comes back */
		struct diag d = {0};

		if (be.ops->to_host(be.ctx, c->kind == 2 ? hgath + c->off : hgrads + c->off,
				    (c->kind == 2 ? dgath : dgrads) + c->off, c->n, &d) != ST_OK &&
		    errors++ < 5)
			fprintf(stderr, "collcheck: rank %d: %s\n", rank, d.msg);
	}
	if (alg == ALG_HIER && c->kind == 0) { /* node slice of local rank l, then the ring */
		for (size_t e = 0; e < c->n; e++) {
			int l = 0;
			size_t lo, hi;

			while ((size_t)(l + 1) * c->n / (size_t)nl <= e)
				l++;
			lo = (size_t)l * c->n / (size_t)nl;
			hi = (size_t)(l + 1) * c->n / (size_t)nl;
			expect_sum_as(c->what, grads[c->off + e], c->off + e, s, -2,
				      wire16 ? hier_sum(c->off + e, s, l, ring_piece(hi - lo, e - lo, nn)) : 0);
		}
		return;
	}
	if (alg == ALG_HIER && c->kind == 1) { /* this rank's part: node sums, then peers from mine + 1 */
		int me = 0;

		while (peer(lrank[rank], me) != rank)
			me++;
		for (size_t e = c->cuts[rank]; e < c->cuts[rank + 1]; e++)
			expect_sum_as(c->what, grads[c->off + e], c->off + e, s, -2,
				      wire16 ? hier_sum(c->off + e, s, lrank[rank], (me + 1) % nn) : 0);
		return;
	}
	if (c->kind == 0) {
		for (size_t e = 0; e < c->n; e++)
			expect_sum(c->what, grads[c->off + e], c->off + e, s, ar_first(c->n, e));
	} else if (c->kind == 1) {
		int first = alg == ALG_SHM ? 0 : on_ring(c->n) ? (rank + 1) % size : -1;

		for (size_t e = c->cuts[rank]; e < c->cuts[rank + 1]; e++)
			expect_sum(c->what, grads[c->off + e], c->off + e, s, first);
	} else {
		for (int q = 0; q < size; q++)
			for (size_t e = c->cuts[q]; e < c->cuts[q + 1]; e++) {
				float want = x(q, 100000 + c->off + e, s);

				if (gath[c->off + e] != want && errors++ < 5)
					fprintf(stderr, "collcheck: rank %d step %d %s [%zu]: %.9g, want %.9g\n",
						rank, s, c->what, e, gath[c->off + e], want);
			}
	}
}

/* Parts of n: even (0), uneven with rank 1's empty (1: rank q weighs q^2 + 1), all on the
 * last rank (2). */
static void cut(struct coll *c, int how)
{
	size_t wsum = 0, acc = 0;

	for (int q = 0; q < size; q++)
		wsum += q == 1 ? 0 : (size_t)q * (size_t)q + 1;
	c->cuts[0] = 0;
	for (int q = 0; q < size; q++) {
		acc += q == 1 ? 0 : (size_t)q * (size_t)q + 1;
		if (how == 0)
			c->cuts[q + 1] = (size_t)(q + 1) * c->n / (size_t)size;
		else if (how == 1)
			c->cuts[q + 1] = acc * c->n / wsum;
		else
			c->cuts[q + 1] = q == size - 1 ? c->n : 0;
	}
}

static enum status start(struct comm *cm, struct coll *c, float *grads, float *gath, int s,
			 struct diag *d)
{
	if (c->kind == 2) { /* own part set; the others' left as garbage */
		for (size_t e = 0; e < c->n; e++)
			hgath[c->off + e] = e >= c->cuts[rank] && e < c->cuts[rank + 1] ?
						    x(rank, 100000 + c->off + e, s) : -12345.0f;
		if (on_device)
			be.ops->to_device(be.ctx, gath + c->off, hgath + c->off, c->n);
		return comm_all_gather_start(cm, gath + c->off, c->n, c->cuts, d);
	}
	for (size_t e = 0; e < c->n; e++)
		hgrads[c->off + e] = x(rank, c->off + e, s);
	if (on_device)
		be.ops->to_device(be.ctx, grads + c->off, hgrads + c->off, c->n);
	if (c->kind == 0)
		return comm_allreduce_start(cm, grads + c->off, c->n, c->flags, d);
	return comm_reduce_scatter_start(cm, grads + c->off, c->n, c->cuts, c->flags, d);
}

static size_t env_kb(const char *var, size_t def)
{
	const char *v = getenv(var);

	return (v != NULL && *v != '\0' ? (size_t)atol(v) : def) * 256;
}

int main(int argc, char **argv)
{
	struct world w = {0};
	struct backend_config cfg = {0};
	struct gpu g = {0};
	struct comm cm = {0};
	struct diag d = {0};
	char desc[256] = "";
	float *base, *grads, *gath;
	enum status st;
	int total;

	for (int i = 1; i < argc; i++) {
		int k;

		if (strcmp(argv[i], "--device=fake") == 0) {
			on_device = 1;
			continue;
		}
		for (k = 0; comm_wire_names[k] != NULL; k++)
			if (strncmp(argv[i], "--wire=", 7) == 0 && strcmp(argv[i] + 7, comm_wire_names[k]) == 0)
				break;
		if (comm_wire_names[k] == NULL) {
			fprintf(stderr, "usage: collcheck [--wire=fp32|fp16|bf16] [--device=fake]\n");
			return 2;
		}
		wire = (enum comm_wire)k;
	}
	wire16 = wire != COMM_WIRE_F32;
	ring_chunk = env_kb("DDPTRAIN_RING_CHUNK_KB", 1024);
	ring_min = env_kb("DDPTRAIN_RING_MIN_KB", 64);
	st = world_init(&w, &argc, &argv, &d);
	if (st != ST_OK) {
		fprintf(stderr, "collcheck: %s\n", d.msg);
		return 1;
	}
	rank = w.rank;
	size = w.size;
	if (size > 64) {
		fprintf(stderr, "collcheck: at most 64 ranks\n");
		return 1;
	}
	hgrads = malloc(G * sizeof *hgrads);
	hgath = malloc(M * sizeof *hgath);
	if (on_device)
		st = gpu_load(&g, &d);
	if (st == ST_OK)
		st = backend_init(&be, on_device ? g.mod->backend : &backend_cpu_ops, &cfg, &d);
	if (st == ST_OK && on_device) {
		base = be.ops->alloc(be.ctx, G);
		gath = be.ops->alloc(be.ctx, M);
	} else {
		base = hgrads;
		gath = hgath;
	}
	cm.wire = wire;
	cm.size = w.size; /* as comm_open sets it: the doors check cuts against it */
	if (st == ST_OK)
		st = comm_mpi_init(&cm, &w, &be, base, G, 0, &d);
	if (st != ST_OK) {
		fprintf(stderr, "collcheck: rank %d: %s\n", rank, d.msg);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	grads = cm.grads != NULL ? cm.grads : base;
	if (!on_device)
		hgrads = grads; /* the window, for shm */
	comm_describe(&cm, desc, sizeof desc);
	alg = strstr(desc, "ring") != NULL && strstr(desc, "hierarchical") == NULL ? ALG_RING :
	      strstr(desc, "shared-memory") != NULL ? ALG_SHM : ALG_MPI;
	if (strstr(desc, "hierarchical") != NULL) { /* who is where */
		int mine[2] = {w.local_rank, 0}, all[128];

		MPI_Allreduce(&w.rank, &mine[1], 1, MPI_INT, MPI_MIN, w.local);
		MPI_Allgather(mine, 2, MPI_INT, all, 2, MPI_INT, MPI_COMM_WORLD);
		for (int r = 0; r < size; r++) {
			lrank[r] = all[2 * r];
			node[r] = all[2 * r + 1];
		}
		alg = ALG_HIER;
		nl = w.local_size;
		nn = size / nl;
	}
	if (rank == 0)
		printf("# collcheck: %d ranks, %s, wire %s, ring pieces %zu floats, smallest ring bucket %zu\n",
		       size, desc, comm_wire_names[wire], ring_chunk, ring_min);

	for (int s = 0; s < STEPS && st == ST_OK; s++) {
		unsigned wf = wire16 ? COMM_WIRE : 0;
		struct coll c[] = {
			{"all-reduce", 0, 0, 3000, wf, {0}},
			{"reduce-scatter uneven", 1, 3000, 6000, wf, {0}},
			{"small all-reduce", 0, 9000, 100, wf, {0}},
			{"small reduce-scatter, one part whole", 1, 9100, 100, wf, {0}},
			{"all-gather uneven", 2, 0, 4000, 0, {0}},
			{"reduce-scatter, one part whole", 1, 9200, 2800, wf, {0}},
			{"all-gather, one part whole", 2, 4000, 1500, 0, {0}},
			{"small all-gather", 2, 5500, 100, 0, {0}},
			{"reduce-scatter even, last", 1, 12000, 5000, wf | COMM_LAST, {0}},
			{"all-reduce, last", 0, 17000, 7000, wf | COMM_LAST, {0}},
		};
		const int nc = (int)(sizeof c / sizeof c[0]);
		const int firsts[] = {2, 5, 9};

		cut(&c[1], 1);
		cut(&c[3], 2);
		cut(&c[4], 1);
		cut(&c[5], 2);
		cut(&c[6], 2);
		cut(&c[7], 0);
		cut(&c[8], 0);
		if (s == 1) /* the same buckets, parts the other way round */
			for (int q = 0; q <= size; q++)
				c[5].cuts[q] = q == 0 ? 0 : c[5].n;
		for (int k = 0; k < nc && st == ST_OK; k++)
			st = start(&cm, &c[k], grads, gath, s, &d);
		/* The first k complete while the later ones may still be in flight. */
		for (int f = 0, done = 0; f < 3 && st == ST_OK; f++) {
			st = comm_wait_first(&cm, firsts[f], &d);
			for (; done < firsts[f] && st == ST_OK; done++)
				check(&c[done], grads, gath, s);
			comm_progress(&cm);
		}
		if (st == ST_OK)
			st = comm_wait_all(&cm, &d);
		if (st == ST_OK)
			check(&c[nc - 1], grads, gath, s);
	}
	if (st != ST_OK) {
		fprintf(stderr, "collcheck: rank %d: %s\n", rank, d.msg);
		errors++;
	}
	total = errors;
	MPI_Allreduce(MPI_IN_PLACE, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0)
		printf("# collcheck: %s: %d wrong value%s over %d ranks\n", total ? "FAIL" : "ok", total,
		       total == 1 ? "" : "s", size);
	comm_free(&cm);
	if (on_device) {
		be.ops->free(be.ctx, base);
		be.ops->free(be.ctx, gath);
		free(hgrads);
		free(hgath);
	} else {
		free(base);
		free(gath);
	}
	backend_free(&be);
	world_free(&w);
	return total ? 1 : 0;
}
