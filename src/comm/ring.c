/*
 * ring.c - pipelined ring all-reduce over non-blocking MPI point-to-point
 * (see ring.h for the why and the numerics).
 *
 * Block k of the sequence uses tags (k mod tag_slots) * steps + step. Blocks
 * retire in order, so a neighbour is never more than 2 windows ahead and
 * tag_slots >= 4 windows keeps the tags of blocks in flight apart.
 */
#include <stdlib.h>
#include <string.h>

#include "core/half.h"   /* half_sum: the 16-bit partial sums */
#include "comm/ring.h"
#include "comm/world.h" /* world_mpi_error */

static int wrap(const struct ring *r, int i)
{
	return ((i % r->size) + r->size) % r->size;
}

/* Piece i of block b, elements of b->buf: [*lo, *hi). */
static void piece(const struct ring *r, const struct ring_block *b, int i, size_t *lo, size_t *hi)
{
	size_t plo, plen;
	int j;

	if (b->kind == RING_ALLREDUCE) {
		*lo = b->pos + (size_t)i * b->len / (size_t)r->size;
		*hi = b->pos + (size_t)(i + 1) * b->len / (size_t)r->size;
		return;
	}
	/* Piece i is part i-1: its owner after the reduce-scatter phase is rank i-1. */
	j = wrap(r, i - 1);
	plo = b->lo[j];
	plen = b->hi[j] - plo;
	*lo = plo + (b->pos < plen ? b->pos : plen);
	*hi = plo + (b->pos + b->len < plen ? b->pos + b->len : plen);
}

static size_t elem_bytes(enum comm_wire t)
{
	return t == COMM_WIRE_F32 ? sizeof(float) : sizeof(uint16_t);
}

/* Post slot k's current step: the send to the next rank, the receive from the previous. */
static void post(struct ring *r, int k)
{
	struct ring_block *b = &r->slot[k];
	const int p = r->size, s = b->step;
	int send, recv, rc;
	size_t slo, shi, rlo, rhi, e = elem_bytes(b->type);
	MPI_Datatype type = b->type == COMM_WIRE_F32 ? MPI_FLOAT : MPI_UINT16_T;
	char *dst;

	if (s < p - 1) { /* reduce-scatter: the partial sum of piece rank-s goes on */
		send = wrap(r, r->rank - s);
		recv = wrap(r, r->rank - s - 1);
	} else {         /* all-gather: the finished piece rank+1-t goes on */
		send = wrap(r, r->rank + 1 - (s - (p - 1)));
		recv = wrap(r, r->rank - (s - (p - 1)));
	}
	piece(r, b, send, &slo, &shi);
	piece(r, b, recv, &rlo, &rhi);
	dst = s < p - 1 ? (char *)(r->scratch + (size_t)k * r->chunk) : b->buf + rlo * e;
	rc = MPI_Irecv(dst, (int)(rhi - rlo), type, wrap(r, r->rank - 1), b->tag + s, r->comm,
		       &r->req[2 * k + 1]);
	if (rc == MPI_SUCCESS)
		rc = MPI_Isend(b->buf + slo * e, (int)(shi - slo), type, wrap(r, r->rank + 1),
			       b->tag + s, r->comm, &r->req[2 * k]);
	if (rc != MPI_SUCCESS && r->err == MPI_SUCCESS) {
		r->err = rc;
		r->err_call = "MPI_Isend/MPI_Irecv(ring all-reduce)";
	}
}

/* Start blocks from the queue while the window has room. */
static void fill(struct ring *r)
{
	const int steps = 2 * (r->size - 1);

	while (r->active < r->window && r->qhead < r->nq && r->err == MPI_SUCCESS) {
		int k = (r->oldest + r->active) % r->window;
		struct ring_block *b = &r->slot[k];
		const struct ring_coll *c = &r->q[r->qhead].c;
		size_t left = r->q[r->qhead].n - r->q[r->qhead].next;
		size_t cap = r->chunk * (c->kind == RING_ALLREDUCE ? (size_t)r->size : 1);

		b->buf = c->buf;
		b->kind = c->kind;
		b->type = c->type;
		b->lo = c->lo;
		b->hi = c->hi;
		b->pos = r->q[r->qhead].next;
		b->len = left < cap ? left : cap;
		b->step = c->kind == RING_ALL_GATHER ? r->size - 1 : 0;
		b->end = c->kind == RING_REDUCE_SCATTER ? r->size - 1 : steps;
		b->tag = (int)(r->seq++ % (unsigned)r->tag_slots) * steps;
		r->q[r->qhead].next += b->len;
		b->last = r->q[r->qhead].next == r->q[r->qhead].n;
		if (b->last)
			r->qhead++;
		r->active++;
		post(r, k);
	}
	if (r->qhead == r->nq)
		r->nq = r->qhead = 0;
}

/* Advance every slot whose step has completed; retire finished blocks in order. Returns
 * the number of steps taken. */
static int advance(struct ring *r)
{
	const int p = r->size;
	int moved = 0;

	for (int i = 0; i < r->active; i++) {
		int k = (r->oldest + i) % r->window;
		struct ring_block *b = &r->slot[k];

		if (b->step < 0 || r->req[2 * k] != MPI_REQUEST_NULL ||
		    r->req[2 * k + 1] != MPI_REQUEST_NULL)
			continue;
		if (b->step < p - 1) {
			size_t lo, hi;

			piece(r, b, wrap(r, r->rank - b->step - 1), &lo, &hi);
			if (b->type == COMM_WIRE_F32) {
				float *restrict dst = (float *)b->buf + lo;
				const float *restrict src = r->scratch + (size_t)k * r->chunk;

				for (size_t j = 0; j < hi - lo; j++)
					dst[j] += src[j];
			} else {
				half_sum((uint16_t *)b->buf + lo, (const uint16_t *)(r->scratch + (size_t)k * r->chunk),
					 hi - lo, b->type == COMM_WIRE_BF16 ? HALF_BF16 : HALF_F16);
			}
		}
		moved++;
		if (++b->step == b->end)
			b->step = -1;
		else
			post(r, k);
	}
	while (r->active > 0 && r->slot[r->oldest].step < 0) {
		r->finished += (unsigned)r->slot[r->oldest].last;
		r->oldest = (r->oldest + 1) % r->window;
		r->active--;
	}
	fill(r);
	return moved;
}

enum status ring_init(struct ring *r, MPI_Comm comm, size_t chunk, int window, struct diag *d)
{
	int rc, flag = 0, *ub = NULL;

	memset(r, 0, sizeof *r);
	r->comm = MPI_COMM_NULL;
	r->err = MPI_SUCCESS;
	if (chunk == 0 || chunk > (size_t)1 << 28 || window < 1 || window > RING_WINDOW)
		return diag_set(d, ST_RUNTIME, "internal: ring chunk %zu, window %d", chunk, window);
	rc = MPI_Comm_dup(comm, &r->comm);
	if (rc != MPI_SUCCESS) {
		r->comm = MPI_COMM_NULL;
		return world_mpi_error(d, rc, "MPI_Comm_dup(ring all-reduce)");
	}
	/* MPI_TAG_UB is an attribute of MPI_COMM_WORLD (a split communicator has none). */
	if ((rc = MPI_Comm_rank(r->comm, &r->rank)) != MPI_SUCCESS ||
	    (rc = MPI_Comm_size(r->comm, &r->size)) != MPI_SUCCESS ||
	    (rc = MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag)) != MPI_SUCCESS) {
		ring_free(r);
		return world_mpi_error(d, rc, "MPI_Comm_rank/MPI_Comm_size/MPI_Comm_get_attr(ring all-reduce)");
	}
	r->chunk = chunk;
	r->window = window;
	r->tag_slots = 4 * window;
	if (r->size > 1 && (!flag || *ub / (2 * (r->size - 1)) < r->tag_slots)) {
		ring_free(r);
		return diag_set(d, ST_RUNTIME, "ring all-reduce: MPI_TAG_UB %d is too small for %d ranks",
				flag ? *ub : 0, r->size);
	}
	r->scratch = malloc((size_t)window * chunk * sizeof *r->scratch);
	if (r->scratch == NULL) {
		ring_free(r);
		return diag_set(d, ST_RUNTIME, "ring all-reduce: out of memory for %d x %zu floats",
				window, chunk);
	}
	for (int i = 0; i < 2 * RING_WINDOW; i++)
		r->req[i] = MPI_REQUEST_NULL;
	for (int k = 0; k < RING_WINDOW; k++)
		r->slot[k].step = -1;
	return ST_OK;
}

enum status ring_start(struct ring *r, float *buf, size_t n, struct diag *d)
{
	struct ring_coll c = {buf, n, RING_ALLREDUCE, COMM_WIRE_F32, NULL, NULL};

	return ring_start_coll(r, &c, d);
}

enum status ring_start_coll(struct ring *r, const struct ring_coll *c, struct diag *d)
{
	size_t n = c->n;

	/* Not the doors' in-flight limit (comm.c): the queue empties only when the ring is
	 * idle, and shm.c's hierarchical all-reduce queues here too, so it counts its own. */
	if (r->nq == RING_BUCKETS)
		return diag_set(d, ST_RUNTIME, "internal: more than %d ring all-reduces queued",
				RING_BUCKETS);
	if (c->kind != RING_ALLREDUCE) { /* blocks run along the longest part */
		n = 0;
		for (int i = 0; i < r->size; i++) {
			if (c->hi[i] < c->lo[i] || c->hi[i] > c->n)
				return diag_set(d, ST_RUNTIME, "internal: bad parts for the ring");
			n = c->hi[i] - c->lo[i] > n ? c->hi[i] - c->lo[i] : n;
		}
	}
	if (r->size < 2 || n == 0)
		return ST_OK;
	r->started++;
	r->q[r->nq].c = *c;
	r->q[r->nq].n = n;
	r->q[r->nq].next = 0;
	r->nq++;
	fill(r);
	ring_progress(r);
	return ST_OK;
}

void ring_progress(struct ring *r)
{
	int outcount, idx[2 * RING_WINDOW];

	while (r->active > 0 && r->err == MPI_SUCCESS) {
		int rc = MPI_Testsome(2 * r->window, r->req, &outcount, idx, MPI_STATUSES_IGNORE);

		if (rc != MPI_SUCCESS) {
			r->err = rc;
			r->err_call = "MPI_Testsome(ring all-reduce)";
			return;
		}
		if (outcount == 0 || outcount == MPI_UNDEFINED || advance(r) == 0)
			return;
	}
}

int ring_busy(const struct ring *r)
{
	return r->active > 0 || r->qhead < r->nq;
}

enum status ring_wait(struct ring *r, struct diag *d)
{
	return ring_wait_upto(r, r->started, d);
}

enum status ring_wait_upto(struct ring *r, unsigned long long count, struct diag *d)
{
	int outcount, idx[2 * RING_WINDOW];

	while (r->finished < count && ring_busy(r) && r->err == MPI_SUCCESS) {
		int rc;

		fill(r);
		rc = MPI_Waitsome(2 * r->window, r->req, &outcount, idx, MPI_STATUSES_IGNORE);
		if (rc != MPI_SUCCESS) {
			r->err = rc;
			r->err_call = "MPI_Waitsome(ring all-reduce)";
			break;
		}
		advance(r);
	}
	if (r->err != MPI_SUCCESS) {
		int rc = r->err;

		r->err = MPI_SUCCESS;
		r->active = r->nq = r->qhead = 0;
		return world_mpi_error(d, rc, r->err_call);
	}
	return ST_OK;
}

void ring_free(struct ring *r)
{
	free(r->scratch);
	r->scratch = NULL;
	if (r->comm != MPI_COMM_NULL)
		(void)MPI_Comm_free(&r->comm); /* teardown: nobody to tell of a failure */
	r->comm = MPI_COMM_NULL;
}
