/*
 * ddp.h - one ddp rank's training state and the phases of its step, shared by the
 * loop (trainer_ddp.c) and the step (ddp_step.c). Private to train/.
 *
 * A step reads as its phases: load (the batch onto the device), forward (with the
 * loss), backward (the gradient sync strategy's hooks start the collectives as layers
 * finish), optimizer (then the strategy's after-step: ZeRO's all-gathers), and the
 * after-step work of the loop (the step's read of the slots, progress, evaluation,
 * checkpoints, the stop).
 */
#ifndef DDPT_DDP_H
#define DDPT_DDP_H

#include "train/replicas.h"
#include "train/sync.h"
#include "train/trainer.h"

#define DDP_MARK 3 /* host_mark slots 3, 4: the step reads (0 .. 2 are the loader's) */
/* What rank 0 adds to a step's stop slot (the ranks' stop flags, summed) when it will write
 * --prometheus once it has read that step: every rank then knows that rank 0 is busy
 * outside the step, and a pending stop waits for it (exact in float32 beside any count of
 * stop flags below 2^23). */
#define DDP_OBSERVE 1048576.0f

struct ddp {
	const struct train_config *tc;
	struct world *w;
	struct model *m;
	struct optimizer *opt;
	struct comm *c;
	const struct train_ctl *ctl;
	struct report *r;
	struct train_result *res;
	struct diag *d;
	struct grad_sync sync;      /* the gradient-sync strategy (sync.h) */
	struct replicas rep;        /* --check-replicas (replicas.h) */
	long step, total;           /* the step being taken (0-based), and the run's last */
	double lr;                  /* the lr of the last optimizer step */
	double flops;               /* the products' floating-point operations so far (model_flops) */
	double sent0;               /* the communicator's sent_bytes when training began */
	int ydim;                   /* target columns: the output width, or 1 (class labels) */
	/* (LOADER_BUFFERS) pinned, by the step's loader buffer, whose captured step reads the
	 * same one (and whose reuse waits for its copies): 1 if this rank was asked to stop */
	float *stop_host;
	float *slots;               /* (2, MODEL_SLOTS) pinned, by step parity: the steps' slots */
	/* The step-late read (a device backend: host_mark): an ordinary step's slots are read
	 * at the end of the next step, once that one is queued, so the host never waits for
	 * the step it is queuing. */
	int pending;                /* the step in `late` is queued, its slots not yet read */
	struct ddp_late {
		struct batch b;         /* its last micro-batch */
		double consumed, lr;
		struct trace_buf *tb;
		int ring;               /* its parity: slots[ring], mark DDP_MARK + ring */
	} late;
	int stop_seen;              /* a read step asked to stop: the next one stops, read at once */
	int observe_planned;        /* rank 0: a queued step carries DDP_OBSERVE, not read yet */
	long busy_until;            /* not rank 0: rank 0 writes --prometheus; every wait is patient
				     * until the read of this step, the first it queued after the
				     * write (0: none) */
	int graphs;                 /* steps may be device graphs */
	const char *graphs_why;     /* the strategy's reason why they may not, where all else allows */
	int graph_off;              /* no (more) graphs: unsupported, or a capture failed */
	int graph_buf[LOADER_BUFFERS]; /* the loader's buffer i has a captured step (graph slot i) */
};

/* Set up t (its tc, w, m, opt, c, ctl, r, res, d, ydim filled in) for plan p: the pinned
 * read-back buffers, the gradient sync, graphs or not; on every rank or on none (a rank
 * that cannot start must not leave the others waiting in step 1's all-reduce). */
enum status ddp_setup(struct ddp *t, const struct grad_plan *p);
/* The run header's notes on the plan. */
void ddp_describe(const struct ddp *t, long steps_per_epoch);
/* train_loop's callbacks (arg: the struct ddp): evaluate the validation set; complete what
 * still changes the weights; compare the replicas (NULL in the loop where they are not:
 * replicas_on). */
enum status ddp_eval(void *arg, long step, long epoch);
enum status ddp_settle(void *arg);
enum status ddp_check(void *arg, long step);
/* The end: the weights settled, the device idle, the graphs released; then the result of
 * `step` steps in `seconds` over `consumed` samples of this rank; then free (safe twice). */
enum status ddp_teardown(struct ddp *t, enum status st);
void ddp_result(const struct ddp *t, long step, double seconds, double consumed);
void ddp_free(struct ddp *t);

/* The value this rank puts in the stop slot of the micro-batch it queues (the step's when
 * sync): 1 if asked to stop, plus on rank 0 DDP_OBSERVE when --prometheus is due after
 * the step. */
float ddp_stop_slot(struct ddp *t, int sync);
/* One micro-batch: load, forward, backward; on the step's last (sync) also the optimizer.
 * accumulate: the gradients add to the last micro-batch's; scale: the loss seed's. */
enum status ddp_micro(struct ddp *t, const struct batch *b, int accumulate, int sync, float scale);
/* A whole step as a device graph where the backend and communicator allow it; *done = 0
 * when the step must run eagerly (ddp_micro). ran: steps taken since this run started. */
enum status ddp_graph_step(struct ddp *t, const struct batch *b, float scale, long ran, int *done);
/* after-step, once per optimizer step: the step's slots start for the host; the step
 * before it, if its read was left for now, is read and its work done (trainer_after_step,
 * then stragglers and Prometheus); this step's read is left for the next step's end unless
 * its work reads the weights as they are now (evaluation, a checkpoint, the last step), it
 * is traced, a stop was asked for, or the backend has no marks (the CPU). consumed:
 * samples so far, all ranks. */
enum status ddp_after(struct ddp *t, const struct train_loop *loop, long *step, const struct batch *b,
		      double consumed);
/* At the loop's end: the step whose read was left, if any, read and its work done. */
enum status ddp_after_last(struct ddp *t, const struct train_loop *loop, long *step);

#endif
