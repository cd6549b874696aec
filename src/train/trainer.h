/*
 * trainer.h - the training loops. Both take a model whose replicas already
 * hold identical weights, and run the epochs the options ask for.
 *
 * The train/ wing (floor 4, above observe/ and store/): the gradient plan, the
 * gradient-sync strategies, the two training loops and the replica check (replicas.h),
 * over the model/ wing's model, loss, optimizer and schedule. It knows no files and no options: the loops
 * take configurations and callbacks (struct train_config, struct train_ctl).
 *
 * ddp: this rank trains on its DistributedSampler shard; each micro-batch's
 * gradients are summed into the model's gradient buffer and, on the last
 * micro-batch of an optimizer step, the gradient-sync strategy (sync.h) starts
 * each bucket's collective as soon as backward has finished its layers,
 * overlapping the rest of backward.
 *
 * dp: PyTorch's DataParallel in one process: every micro-batch is scattered
 * in torch.chunk pieces over worker threads, replica 0's weights are copied
 * to the others, the outputs are gathered onto replica 0 for the loss, the
 * output gradient is scattered back, and the replicas' gradients are summed
 * onto replica 0, which alone takes the optimizer step.
 */
#ifndef DDPT_TRAINER_H
#define DDPT_TRAINER_H

#include <stdint.h>

#include "comm/comm.h"      /* struct comm */
#include "comm/world.h"     /* struct world */
#include "data/data.h"      /* struct dataset */
#include "data/loader.h"    /* struct batch */
#include "model/loss.h"      /* struct loss */
#include "model/model.h"     /* struct model */
#include "model/optimizer.h" /* struct optimizer */
#include "train/plan.h"      /* struct grad_plan */
#include "observe/prometheus.h" /* struct prometheus */
#include "observe/report.h"    /* struct report, struct replica_stats, struct bucket_stats */
#include "model/schedule.h"  /* enum lr_schedule */
#include "observe/straggler.h" /* struct straggler */
#include "observe/trace.h"     /* struct trace */
#include "comm/world.h"     /* struct world */

#define TRAIN_MAX_REPLICAS 64 /* dp worker threads */

/* What a training loop needs to know of the run (main fills it from the options). */
struct train_config {
	long batch_size;  /* samples per replica per micro-batch */
	long epochs;
	long max_steps;   /* optimizer steps; 0 = no limit */
	long grad_accum;  /* micro-batches per optimizer step */
	long log_every;   /* optimizer steps between progress lines; 0 = none */
	uint64_t seed;    /* shuffling */
	int shuffle, drop_last;
	int overlap;      /* ddp: all-reduce buckets during backward */
	double bucket_mb; /* ddp: bucket cap */
	int graphs;       /* ddp: steps may be replayed as device graphs (off with
			   * DDPTRAIN_CUDA_GRAPHS=0, to time one against the other) */
	struct loss loss;
	enum lr_schedule schedule; /* the lr multiplier of each step (schedule.h) */
	long warmup_steps;
	double clip_grad_norm;     /* clip_grad_norm_ before each step; 0 = off */
	long eval_every;           /* evaluate the validation set every N steps too; 0 = epochs */
	int zero;                  /* ddp: ZeRO stage: 0 off, 1 optimizer state sharded (the
				    * optimizer was made with the rank's zero_plan), 2 gradients too */
	int compress;              /* ddp: gradients travel in the communicator's wire type */
	int compress_fp16;         /* ... and that is fp16, whose range ends at 65504: a
				    * non-finite loss is then most likely its overflow */
	long check_replicas;       /* ddp: compare the replicas every N optimizer steps, and before
				    * anything writes weights (replicas.h); 0 = off */
	long schedule_steps;       /* the lr schedule's length in optimizer steps as a resumed
				    * checkpoint wrote it (kept at another world size, as
				    * LambdaLR's would be); 0: the run's own total */
	int mean_after_backward;   /* the mean over ranks and micro-batches is taken on the
				    * float32 gradients after the backward (bf16 autocast), not
				    * in the loss's seed: trainer_mean_scales */
};

struct train_result {
	long steps;         /* optimizer steps taken */
	long total;         /* the step training was to end at (0 if it never began) */
	long epochs;        /* epochs started */
	double seconds;     /* training loop wall time */
	double samples;     /* samples consumed, all ranks */
	double first_loss, final_loss;
	double wait_s;      /* this rank's time blocked completing all-reduces */
	int nreplicas;      /* dp: replicas in rep[]; ddp: 1 (this rank) */
	struct replica_stats rep[TRAIN_MAX_REPLICAS];
	int nbuckets;       /* ddp: gradient buckets, each all-reduced once per step */
	struct bucket_stats buckets[MODEL_MAX_LAYERS];
	const char *untimed; /* ddp: why no bucket's all-reduce is timed, or NULL (they are) */
};

/* What the caller asks of a training loop beyond the options: where to start (a resumed
 * run), and how to write a checkpoint. */
struct train_ctl {
	long start_step, start_epoch, start_mb; /* position to begin at (0, 0, 0 when fresh) */
	const struct dataset *val;              /* the validation set, or NULL */
	/* After each evaluation (collective in ddp mode: every rank calls it), e.g. to keep the
	 * best weights; NULL for none. */
	enum status (*evaluated)(void *arg, long step, long epoch, double loss, struct diag *d);
	long every;                             /* checkpoint every N steps; 0 = none periodic */
	/* Write a checkpoint after `step` steps, the next micro-batch being next_mb of epoch,
	 * in a run whose lr schedule is schedule_steps long (trainer_schedule_steps)
	 * (collective in ddp mode: every rank calls it); NULL when there is no --checkpoint. */
	enum status (*checkpoint)(void *arg, long step, long epoch, long next_mb, long schedule_steps,
				  struct diag *d);
	void *arg;
	struct trace *trace;         /* --trace, or NULL */
	struct straggler *straggler; /* ddp: step-time samples and the live check, or NULL */
	struct prometheus *prom;     /* rank 0 with --prometheus, or NULL */
};

/* dp: G replicas on worker threads; the replica-0 model m0 holds the weights to train
 * (and is the one saved), and opt steps it; replica i is created here on an instance of
 * m0's backend on device cfg->device + i. w's watchdog watches the waits for the
 * replicas (world_watch_thread) and w->step names the step. */
enum status trainer_dp(const struct train_config *tc, int replicas, struct world *w, struct model *m0,
		       struct optimizer *opt, const struct backend_config *cfg,
		       const struct dataset *ds, const struct train_ctl *ctl, struct report *r,
		       struct train_result *res, struct diag *d);

/* ddp: this rank's replica m, stepped by opt, gradients summed over c as plan p says (m's
 * memory made for it: model_init_shard with what grad_plan_shard says). */
enum status trainer_ddp(const struct train_config *tc, const struct grad_plan *p, struct world *w,
			struct model *m, struct optimizer *opt, struct comm *c, const struct dataset *ds,
			const struct train_ctl *ctl, struct report *r, struct train_result *res,
			struct diag *d);

/* Micro-batch mb of an epoch of nmicro, in accumulation groups of grad_accum: its place
 * in its group (*gi, 0-based), and the group's size, which the last group of an epoch may
 * have fewer of. The step's gradient is the mean over the group's micro-batches. */
long trainer_group(long mb, long nmicro, long grad_accum, long *gi);
/* The gradient buckets' caps in floats for --bucket-mb (the gradient plan, plan.h): *cap for
 * all, *first_cap for the first (PyTorch's 1 MiB), each at least 1. */
void trainer_bucket_caps(double bucket_mb, size_t *cap, size_t *first_cap);
/* Optimizer steps in an epoch of nmicro micro-batches. */
long trainer_steps_per_epoch(long nmicro, long grad_accum);
/* The loader a training loop reads through: ddp's rank `rank` of `replicas` ranks, or
 * dp's one loader of batches for all `replicas` threads (rank 0). */
struct loader_config trainer_loader_config(const struct train_config *tc, int dp, int replicas, int rank);
/* The loader trainer_ddp starts on rank `rank` of `replicas`, whose node runs node_ranks
 * of them, or the one trainer_dp starts (dp: node_ranks unused). */
struct loader_config trainer_run_loader_config(const struct train_config *tc, int dp, int replicas, int rank,
					       int node_ranks);

/* The step number training ends at: the resumed position plus the steps left in its epoch
 * and the epochs after it, capped by max_steps (0: no cap). */
long trainer_total_steps(const struct train_ctl *ctl, long nmicro, long grad_accum, long epochs,
			 long max_steps);
/* With --grad-compress=fp16, what a non-finite loss or non-finite weights after a step
 * most likely mean and what to do (one text for every message that reports them); NULL
 * otherwise (then: training diverged; lower --lr). */
const char *trainer_fp16_overflow(const struct train_config *tc);
/* The lr schedule's length: the one a resumed checkpoint fixed (tc->schedule_steps), else
 * the run's total. */
long trainer_schedule_steps(const struct train_config *tc, long total);
/* A micro-batch whose gradient is `share` of the step's (1 / (ranks x micro-batches) in
 * ddp, 1 / micro-batches in dp): the factor of the loss's seed (*dscale, for loss_apply)
 * and of the weight gradients (*gscale, for model_backward). One of them is share, the
 * other 1 (backend.h says where each precision takes the mean, and why). */
void trainer_mean_scales(const struct train_config *tc, float share, float *dscale, float *gscale);

/* The optimizer step both loops take once the gradient of step `step` (0-based) of
 * `total` is complete in the model's gradients: clip_grad_norm_ over the trainable
 * parameters if asked, then opt's step at its lr times the schedule's multiplier, the lr
 * used in *lr. Frozen layers are not touched. With a sharded optimizer (ZeRO) the norm is
 * the sum of the shards' over c (one scalar all-reduce, collective); c NULL: unsharded. */
enum status trainer_optimizer_step(const struct train_config *tc, struct optimizer *opt, long step,
				   long total, struct comm *c, double *lr, struct diag *d);
/* Whether a step's device work is the same every step (no per-step host scalars), so that
 * it may be recorded once as a device graph and replayed. */
int trainer_step_is_fixed(const struct train_config *tc, const struct optimizer *opt);

/* The progress bookkeeping both loops share. */
struct step_clock {
	double t0, t_last;        /* start of the loop, of the current progress interval */
	double t_step;            /* end of the previous step */
	double wait_step;         /* all-reduce wait counted up to the end of the previous step */
	double consumed_at_last;  /* samples (all replicas) at the last progress line */
	double waited_at_last;    /* the loader's wait for data (batch.waited_s) at that line */
	double loss_sum, acc_sum; /* losses and accuracies since the last progress line */
	long loss_count;
};

/* What both training loops hand to the work after each optimizer step: set once, before
 * the first step. */
struct train_loop {
	const struct train_ctl *ctl;
	const struct train_config *tc;
	struct train_result *res;
	struct report *r;
	struct step_clock *clk;
	long total;   /* the step training ends at */
	long nmicro;  /* micro-batches per epoch */
	/* Evaluate the validation set (this rank's or replica's part), or NULL. */
	enum status (*eval)(void *eval_arg, long step, long epoch);
	void *eval_arg;
	/* Complete what is still changing the weights (ZeRO's all-gathers of the updated
	 * parameters, both stages) before anything reads them outside the next forward:
	 * evaluation, a checkpoint; or NULL. */
	enum status (*settle)(void *eval_arg);
	/* The training data, scanned again for a non-finite number when the loss is not finite
	 * (a file rewritten in place after the scan at start-up), and ddp's ranks, which share
	 * what one of them finds (dp: NULL); ds NULL: no scan. */
	const struct dataset *ds;
	struct world *w;
	/* Compare the replicas after step `step` (--check-replicas; the weights settled first),
	 * or NULL: no check runs (dp, one rank, nothing replicated, off). */
	enum status (*check)(void *eval_arg, long step);
};

/* What one optimizer step ended with. */
struct step_end {
	const struct batch *b; /* its last micro-batch */
	float loss, acc;       /* mean over replicas and micro-batches (acc: cross-entropy) */
	double lr;             /* the learning rate it was taken at */
	double consumed;       /* samples so far, all replicas */
	int stop;              /* a stop was asked for */
};

/* Whether the work after step `step` (counted from 1), whose last micro-batch was b,
 * reads the weights as that step left them (evaluation, a replica check or a checkpoint
 * is due, or it is the last): its loss must be read before the next step is queued. */
int trainer_step_reads_weights(const struct train_loop *lp, long step, const struct batch *b);
/* After an optimizer step: refuse a non-finite loss, count the step (*step), keep first
 * and final losses, print progress when due, compare the replicas when due (every
 * check_replicas steps, and before the weights are written: a checkpoint, --save-best's
 * evaluation, the last step), evaluate the validation set when due (every eval_every
 * steps, at the end of an epoch and of training), write the checkpoint that is due (every
 * ctl->every steps, at the last step, or when stopping) and say whether to stop:
 * ST_INTERRUPTED when e->stop is set. */
enum status trainer_after_step(const struct train_loop *lp, long *step, const struct step_end *e,
			       struct diag *d);

/* Evaluate m on this replica's share of the validation set val -- rows
 * [rank V / world, (rank + 1) V / world) in micro-batches of up to m->max_batch rows --
 * and, with a communicator, sum the shares over the ranks: the exact mean loss over all
 * V rows (and the accuracy) in *loss and *acc (NaN without one). Uses act, target, dbuf
 * and the gradient slots as scratch: call it between steps. Collective when c is set.
 * Each batch is progress for w's watchdog (w may be NULL). h: forward's hooks (NULL:
 * none; with sharded parameters, the ones that gather them). */
enum status trainer_evaluate(const struct train_config *tc, struct model *m, const struct dataset *val,
			     int rank, int world, struct comm *c, struct world *w, const struct model_hooks *h,
			     double *loss, double *acc, struct diag *d);

/* Write the --prometheus file (rank 0): progress, throughput since the start, the
 * all-reduce wait share and each bucket's bus bandwidth so far (res->buckets), and
 * exit_code: -1 while training, the run's exit status in its last write. A write that
 * fails is r's warning and a lost output (report_output_failed), not the run's failure:
 * training goes on, and the next write tries again. */
void trainer_prometheus(const struct train_ctl *ctl, struct report *r, const struct train_result *res,
			long step, long total, double loss, double samples_per_s, double wait_share,
			int exit_code, int nranks);

#endif
