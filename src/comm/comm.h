/*
 * comm.h - the communication interface: asynchronous in-place collectives on float
 * slices (sum all-reduce, sum reduce-scatter, all-gather), progressed between layers
 * and completed in the order started (all, or the first k), plus the broadcast of the
 * initial weights. Callers go through the comm_* doors below, which check each call's
 * arguments once, never through the ops table directly.
 *
 * The comm/ wing (floor 2, above backend/): the MPI world (start-up, agreement,
 * watchdog), this communicator interface, the MPI communicator with its host
 * collective algorithms (comm/hostcoll.h) and the opening of either. Only comm/
 * names an MPI algorithm; it knows no model and no options.
 *
 * Implementations: MPI (comm_mpi.h, in ddptrain) and NCCL (in the CUDA
 * module); the trainer only calls through struct comm_ops.
 */
#ifndef DDPT_COMM_H
#define DDPT_COMM_H

#include <stddef.h>

#include "core/half.h"   /* enum half_type: what a 16-bit wire type is */
#include "core/status.h"

#define COMM_MAX_INFLIGHT 64

/* Which communicator a run uses (--backend). */
enum comm_kind { COMM_AUTO, COMM_MPI, COMM_NCCL };

/* The type gradients travel in (--grad-compress): float32, or PyTorch's compress hooks'
 * arithmetic: each float rounded to the 16-bit type, the sum taken in that type (every
 * partial sum rounded to it, in the algorithm's order), the result widened back. */
enum comm_wire { COMM_WIRE_F32, COMM_WIRE_F16, COMM_WIRE_BF16 };
extern const char *const comm_wire_names[]; /* "fp32", "fp16", "bf16", NULL */

/* The 16-bit type of wire type w (COMM_WIRE_F16 or COMM_WIRE_BF16). */
static inline enum half_type comm_wire_half(enum comm_wire w)
{
	return w == COMM_WIRE_BF16 ? HALF_BF16 : HALF_F16;
}

/* The flags of a collective's start. */
#define COMM_LAST 1u /* nothing is left to overlap with: complete it by the fastest path */
#define COMM_WIRE 2u /* it travels in the communicator's wire type (struct comm.wire) */

/* What a collective is, as its observer's tag says. */
enum comm_coll { COMM_ALLREDUCE, COMM_REDUCE_SCATTER, COMM_ALL_GATHER };

/* An observer's own marks, as they stood when a collective started (the communicator
 * copies them then and gives them back with it). */
struct comm_tag {
	long step;           /* the trainer's: its step, or -1 (validation) */
	int item;            /* the trainer's: the bucket it carries, or -1 */
	enum comm_coll kind; /* the trainer's: what it started */
};

/* Told when a collective has completed: *tag as it was when it started (a communicator
 * may tell of it steps later: NCCL's reads its device's clock without waiting), its
 * order among the collectives started since the last wait (0: the first), its length in
 * floats, and when it started and when it completed, in seconds on clock_now's clock.
 * tag NULL: every tag is {0, -1}. */
struct comm_observer {
	void (*done)(void *arg, struct comm_tag tag, int index, size_t n, double t0, double t1);
	void *arg;
	const struct comm_tag *tag;
};

/* What a communicator copies when a collective starts: *o->tag, or {0, -1}. */
static inline struct comm_tag comm_observer_tag(const struct comm_observer *o)
{
	return o->tag != NULL ? *o->tag : (struct comm_tag){0, -1, COMM_ALLREDUCE};
}

struct comm_ops {
	const char *name;
	int capturable; /* its collectives can be recorded into a device graph (NCCL) */
	/* the longest collective it takes, in floats (MPI's counts are int), or 0: any; the
	 * broadcast is not bound by it */
	size_t max_floats;
	/* Start summing buf[0..n) over all ranks, in place. flags: COMM_LAST (nothing is left
	 * to overlap with: backward is done, so the communicator may complete it at once by
	 * whatever path is fastest), COMM_WIRE (in the wire type; else float32). */
	enum status (*allreduce_start)(void *ctx, float *buf, size_t n, unsigned flags,
				       struct diag *d);
	/* Start the sum of buf[0..n) over all ranks of which each rank keeps its part: once
	 * complete, buf[cuts[rank] .. cuts[rank + 1]) holds the sum and the rest of buf is
	 * undefined. cuts has size + 1 entries (cuts[0] = 0, cuts[size] = n, never
	 * decreasing; a part may be empty), the same on every rank, and must stay unchanged
	 * until the collective completes. flags as allreduce_start's. */
	enum status (*reduce_scatter_start)(void *ctx, float *buf, size_t n, const size_t *cuts,
					    unsigned flags, struct diag *d);
	/* Start the in-place all-gather of buf[0..n): rank q's part buf[cuts[q] .. cuts[q + 1])
	 * (cuts as reduce_scatter_start's) goes to every rank's buf. Always float32. */
	enum status (*all_gather_start)(void *ctx, float *buf, size_t n, const size_t *cuts,
					struct diag *d);
	/* Let outstanding collectives advance; never blocks. */
	void (*progress)(void *ctx);
	/* Complete the first k collectives (of every kind, in the order started) since
	 * wait_all last returned; later ones stay in flight. With device memory the work
	 * queued on the backend after this call is ordered after them. */
	enum status (*wait_first)(void *ctx, int k, struct diag *d);
	/* Complete every outstanding collective. */
	enum status (*wait_all)(void *ctx, struct diag *d);
	/* Broadcast buf[0..n) from root. */
	enum status (*bcast)(void *ctx, float *buf, size_t n, int root, struct diag *d);
	void (*fini)(void *ctx);
	/* Optional (NULL: not supported). Report each later all-reduce's times to obs, or
	 * stop with obs NULL (reporting what is pending first). A communicator that reads
	 * device events may report a step's times during the next step. */
	void (*observe)(void *ctx, const struct comm_observer *obs);
	/* The per-rank table's text for this communicator, after the device: its name and,
	 * where it has a choice, how it all-reduces ("mpi, ring all-reduce", "nccl"). */
	void (*describe)(void *ctx, char *buf, size_t len);
};

struct comm {
	const struct comm_ops *ops;
	void *ctx;
	/* 1: this instance's all-reduces move while the caller computes (the MPI ring), so
	 * the trainer streams gradient regions as backward finishes them */
	int stream;
	/* with stream: FLOP per panel of backward's products between progress calls (0: whole
	 * products, progress between layers) */
	double panel_flops;
	/* non-NULL: the gradients must live here (the shared-memory all-reduce reads every
	 * rank's directly); the caller moves them with model_move_grads */
	float *grads;
	/* the gradients' wire type for COMM_WIRE collectives: set by the caller before
	 * comm_open, read by the communicator's init */
	enum comm_wire wire;
	/* floats outside the gradients that collectives may have in flight at once (ZeRO's
	 * all-gathers of the parameters; 0: none beyond the gradients' size): set by the
	 * caller before comm_open; the MPI communicator stages that much for device memory,
	 * taken in turn as a ring (collectives complete in order): a caller whose collectives
	 * of up to L floats start while one is in flight gives room for three */
	size_t outside;
	/* why the all-reduce chosen by default could not be had and what stands in (the same
	 * on every rank), or "" */
	char notice[640];
	int size;     /* the ranks it spans (comm_open): cuts have size + 1 entries */
	int inflight; /* collectives started since comm_wait_all last returned (comm.c) */
	unsigned long rounds; /* times comm_wait_all has returned (comm.c): tickets' round */
	double sent_bytes;    /* what the collectives started so far make this rank send, as a
			       * ring sends it (comm.c; the broadcast not counted) */
};

/* A collective's place among those in flight, taken just after it started: a later wait
 * for it (comm_wait_ticket) stays right whoever completes everything in between. */
struct comm_ticket {
	unsigned long round; /* c->rounds when it started */
	int k;               /* its number since that round began (1: the first); 0: none */
};

/* The doors to the collectives: every caller goes through these, never through
 * c->ops directly. Each checks its arguments once, here and nowhere else: at most
 * COMM_MAX_INFLIGHT collectives in flight, n within ops->max_floats, only the flags
 * COMM_LAST and COMM_WIRE, cuts as struct comm_ops says (size + 1 entries from 0 to n,
 * never decreasing), wait_first's k within what is in flight. A refused call is an
 * "internal:" error (the caller's bug, the same on every rank) and never reaches the
 * communicator, so the communicators and their algorithms may rely on all of that.
 * Semantics as struct comm_ops says. */
enum status comm_allreduce_start(struct comm *c, float *buf, size_t n, unsigned flags,
				 struct diag *d);
enum status comm_reduce_scatter_start(struct comm *c, float *buf, size_t n, const size_t *cuts,
				      unsigned flags, struct diag *d);
enum status comm_all_gather_start(struct comm *c, float *buf, size_t n, const size_t *cuts,
				  struct diag *d);
void comm_progress(struct comm *c);
enum status comm_wait_first(struct comm *c, int k, struct diag *d);
enum status comm_wait_all(struct comm *c, struct diag *d);
enum status comm_bcast(struct comm *c, float *buf, size_t n, int root, struct diag *d);
/* obs NULL: stop observing. No-op for a communicator that cannot observe. */
void comm_observe(struct comm *c, const struct comm_observer *obs);
/* The ticket of the collective started last. */
struct comm_ticket comm_ticket(const struct comm *c);
/* 1 if the ticket's collective has completed for certain: a comm_wait_all returned since
 * it started (or it names none). */
int comm_ticket_done(const struct comm *c, struct comm_ticket t);
/* Complete the ticket's collective (and those started before it), unless it is done. */
enum status comm_wait_ticket(struct comm *c, struct comm_ticket t, struct diag *d);
/* 1 if the communicator has reduce-scatter, all-gather and wait_first (ZeRO needs them). */
int comm_can_shard(const struct comm *c);
/* Collectives started since comm_wait_all last returned. */
int comm_inflight(const struct comm *c);
/* The per-rank table's text for the communicator (comm_ops.describe). */
void comm_describe(const struct comm *c, char *buf, size_t len);

/* Whether ops, a table from outside the program (the CUDA module's NCCL communicator), has
 * every entry the doors call without looking (the others may be NULL: the doors say "not
 * supported"). ST_RUNTIME naming the first missing one ("its entry comm.bcast is NULL"). */
enum status comm_ops_check(const struct comm_ops *ops, struct diag *d);
/* Safe to call twice. */
void comm_free(struct comm *c);

#endif
