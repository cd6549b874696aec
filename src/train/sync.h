/*
 * sync.h - gradient sync: how one rank's gradients meet the other ranks' during a ddp
 * step, as a table of strategies (Horovod's one class per strategy, chosen once).
 *
 * Entries, each in its own file:
 * - sync_buckets.c: DDP's buckets, each all-reduced as soon as backward has finished
 *   its layers (in the wire type with --grad-compress);
 * - sync_stream.c: DDP's gradients streamed as regions, where the communicator moves
 *   during compute (the ring): each region starts as soon as backward has finished it;
 * - sync_zero1.c: ZeRO-1, each bucket reduce-scattered, the updated parameters
 *   all-gathered bucket by bucket during the next forward;
 * - sync_zero2.c: ZeRO-2, the gradients written into two pool buffers part by part
 *   (row panels for layers larger than the cap), each part reduce-scattered as soon as
 *   it is written and this rank's share kept; the all-gathers as ZeRO-1's;
 * - sync_zero3.c: ZeRO-3, the parameters sharded too: each layer all-gathered into a
 *   working buffer before its forward and again before its backward, one layer ahead;
 *   the gradients as ZeRO-2's.
 * grad_sync_init runs down the table (sync.c) and takes the first entry that applies to
 * the plan, the communicator and the backend (Horovod's operation manager); the entries'
 * flags and notes say what the trainer and the report need to know of the one chosen,
 * so nothing outside the entries names a strategy.
 *
 * The trainer (trainer_ddp.c, ddp_step.c) calls the strategy at fixed points of a step:
 * begin (before backward), the model's hooks during forward and backward (struct
 * model_hooks: before_layer, before_backward, layer_done, panel_dst, panel_done), finish (after backward:
 * the gradient complete on this rank), after_step (after the optimizer) and settle
 * (before anything reads the weights outside forward). Every wait goes through
 * sync_wait_all or sync_wait_first, which keep the clock, the trace and the watchdog.
 *
 * Not here: the plan (plan.h), the collectives themselves (comm/comm.h).
 */
#ifndef DDPT_SYNC_H
#define DDPT_SYNC_H

#include "comm/comm.h"      /* struct comm */
#include "comm/world.h"     /* struct world */
#include "core/tracebuf.h"  /* struct trace_buf */
#include "model/model.h"    /* struct model, struct model_hooks */
#include "observe/report.h" /* struct report */
#include "train/plan.h"     /* struct grad_plan */

struct grad_sync;
struct train_result;

struct grad_sync_ops {
	const char *name;
	/* 1 if this entry is the one for s (s->p, m, c, w, overlap and wire set; nothing of
	 * the entry's own yet). The table is read in order: the first that applies is run. */
	int (*applies)(const struct grad_sync *s);
	/* Why its steps cannot be recorded into a device graph (the run header says it where
	 * graphs would be used otherwise), or NULL: they can, with a communicator whose
	 * collectives can be. */
	const char *uncapturable;
	/* The communicator's observer counts its collectives into the plan's buckets' figures;
	 * else untimed says why they are left out (the report's line, the whole run long). */
	int times_buckets;
	const char *untimed;
	/* What the run header's buckets line adds ("" for nothing), and the header's further
	 * notes on the strategy (NULL: none). */
	const char *bucket_note;
	void (*describe)(const struct grad_sync *s, struct report *r, double bucket_mb);
	/* What stays the same on every rank between steps, once settled (a mask of
	 * SYNC_SAME_*): what --check-replicas compares (replicas.h). 0: nothing is replicated
	 * (every rank keeps only its shard), and the check says so instead. */
	unsigned replicated;
	/* SYNC_SAME_GATHERED: layer l's parameters whole in this rank's memory (collective:
	 * every rank asks for every layer in the same order), or NULL with s->d set. */
	const float *(*gathered)(struct grad_sync *s, int layer);
	/* Set up what the strategy keeps (s->own); point the model's gradient views. */
	enum status (*init)(struct grad_sync *s);
	/* Before a micro-batch's backward; sync: its gradients are summed over the ranks in
	 * this step (the step's last micro-batch). */
	enum status (*begin)(struct grad_sync *s, int sync);
	/* The model's hooks (NULL: none). */
	enum status (*before_layer)(struct grad_sync *s, int layer);
	enum status (*before_backward)(struct grad_sync *s, int layer);
	enum status (*layer_done)(struct grad_sync *s, int layer);
	float *(*panel_dst)(struct grad_sync *s, int layer, int j);
	enum status (*panel_done)(struct grad_sync *s, int layer, int j);
	/* After backward: with sync, the reduced gradient is complete for the optimizer. */
	enum status (*finish)(struct grad_sync *s, int sync);
	/* After the optimizer step (NULL: nothing). */
	enum status (*after_step)(struct grad_sync *s);
	/* Complete what still changes the weights (NULL: nothing). */
	enum status (*settle)(struct grad_sync *s);
	void (*free)(struct grad_sync *s);
};

#define SYNC_SAME_PARAMS 1u /* the parameters (ZeRO: all-gathered, after settle) */
#define SYNC_SAME_STATE 2u  /* the optimizer state arenas */
/* ZeRO-3: no parameter is kept whole, but each layer's all-gathered copy is the same on
 * every rank (the strategy's gathered gives it) */
#define SYNC_SAME_GATHERED 4u

extern const struct grad_sync_ops sync_buckets_ops, sync_stream_ops, sync_zero1_ops, sync_zero2_ops,
	sync_zero3_ops;

/* What the strategies share. The trainer sets tb and d as it goes (grad_sync_step,
 * grad_sync_validating). */
struct grad_sync {
	const struct grad_sync_ops *ops;
	const struct grad_plan *p;
	struct model *m;
	struct comm *c;
	struct world *w;
	struct train_result *res;  /* per-bucket all-reduce figures */
	struct diag *d;
	struct trace_buf *tb;      /* this step's trace buffer, or NULL (grad_sync_step) */
	struct trace_buf *prev_tb; /* the step before's, or NULL, and its step number: */
	int32_t prev_step, step;   /* a communicator may report a step's spans in the next */
	struct comm_tag tag;       /* the observer's tag of a collective starting now: this step's
				    * step_tag (or -1 in validation), the bucket it carries (or -1) */
	long step_tag;             /* grad_sync_step counts the steps */
	struct model_hooks hooks;  /* the strategy's hooks, for model_forward and model_backward */
	int overlap;               /* the collectives start during backward (else after it) */
	unsigned wire;             /* COMM_WIRE for the buckets with --grad-compress, else 0 */
	int nbuckets;              /* the buckets the report counts: the plan's, or streaming's */
	const struct bucket *bucket;
	double wait;               /* host time blocked completing collectives */
	int accumulate;            /* this micro-batch adds to the gradients of the last */
	int syncing;               /* this backward's collectives start as it goes */
	int gathering;             /* ZeRO: parameter all-gathers may be in flight */
	void *own;                 /* the strategy's own state */
};

/* What grad_sync_init chooses from. */
struct grad_sync_cfg {
	int overlap;  /* --no-overlap off */
	int compress; /* --grad-compress */
};

/* Choose the strategy for p over c and set it up (every rank the same: the plan and the
 * communicator are). Fails (d set) when out of memory or when ZeRO asks for collectives
 * the communicator does not have. */
enum status grad_sync_init(struct grad_sync *s, const struct grad_sync_cfg *cfg, const struct grad_plan *p,
			   struct model *m, struct comm *c, struct world *w, struct train_result *res,
			   struct diag *d);
/* A step begins, traced into tb (NULL: not traced). */
void grad_sync_step(struct grad_sync *s, struct trace_buf *tb);
/* Validation's all-reduces begin (on) or have ended: they are no bucket's. */
void grad_sync_validating(struct grad_sync *s, int on);
/* Stop observing the communicator and free the strategy's state; safe twice. */
void grad_sync_free(struct grad_sync *s);

/* Waits: complete every collective in flight, or the first k since the last complete
 * wait; `what` names it for the watchdog. Timed into s->wait and traced. */
enum status sync_wait_all(struct grad_sync *s, const char *what);
enum status sync_wait_first(struct grad_sync *s, int k, const char *what);
/* Complete the collective of ticket t (comm.h), unless something completed it already. */
enum status sync_wait_ticket(struct grad_sync *s, struct comm_ticket t, const char *what);
/* The next collective is a `kind` carrying bucket k (ZeRO-3's all-gathers: layer k; -1:
 * none); said before it starts, since a blocking one tells the observer from inside its
 * start. */
void sync_next_coll(struct grad_sync *s, int k, enum comm_coll kind);
/* ZeRO's all-gather of n floats of buf (comm_all_gather_start), tagged as carrying item k
 * for its own start only: the tag the trainer set stays for what follows. */
enum status sync_all_gather_start(struct grad_sync *s, int k, float *buf, size_t n, const size_t *cuts);
/* A collective that may complete at once (the last of backward): started with the
 * watchdog watching `what`, timed as waiting. start(s, k) starts it. */
enum status sync_start_last(struct grad_sync *s, enum status (*start)(struct grad_sync *s, int k),
			    int k, const char *what);

/* ZeRO's all-gathers of the updated parameters, the first member of both stages' own
 * state: layer l's forward waits for the all-gather holding it. */
struct zero_gathers {
	int ag_idx[MODEL_MAX_LAYERS]; /* the number of layer l's all-gather (since a wait); 0: none */
	int ag_waited;                /* all-gathers waited for, up to this number */
};

/* ZeRO-2's gradient side (sync_zero2.c), which ZeRO-3 shares: its state is the first
 * member of ZeRO-3's (s->own points at both). */
struct zero2 {
	struct zero_gathers g;   /* first: the all-gathers' state (sync_zero1.c) */
	float *pool;             /* the two buffers, one after the other */
	float *shard;            /* this rank's reduced gradient */
	struct comm_ticket *rs;  /* (nparts) part k's reduce-scatter, while not folded */
	unsigned char *pending;  /* (nparts) part k is reduce-scattered, not yet folded */
	int fold_add;            /* this micro-batch's parts are added to the shard (not copied) */
};
enum status zero2_setup(struct grad_sync *s, struct zero2 *z);
void zero2_release(struct zero2 *z);
enum status zero2_begin(struct grad_sync *s, int sync);
enum status zero2_layer_done(struct grad_sync *s, int layer);
float *zero2_panel_dst(struct grad_sync *s, int l, int j);
enum status zero2_panel_done(struct grad_sync *s, int l, int j);
enum status zero2_finish(struct grad_sync *s, int sync);
/* The run header's note on the layers in row panels, if any. */
void zero2_describe_panels(const struct grad_sync *s, struct report *r, double bucket_mb);

/* Shared by the entries: the buckets' hooks (sync_buckets.c) and ZeRO's all-gathers,
 * requirement and header note (sync_zero1.c). */
enum status buckets_start(struct grad_sync *s, int k, unsigned flags);
enum status buckets_layer_done(struct grad_sync *s, int layer);
enum status buckets_begin(struct grad_sync *s, int sync);
enum status buckets_finish(struct grad_sync *s, int sync);
enum status zero_gather(struct grad_sync *s);
enum status zero_before_layer(struct grad_sync *s, int layer);
enum status zero_settle(struct grad_sync *s);
enum status zero_require_shard(struct grad_sync *s);
void zero_describe(const struct grad_sync *s, struct report *r);

#endif
