/*
 * main.c - ddptrain: wires the modules together and chooses the exit code.
 *
 * Parse, set up, train, save, tear down. After every phase that can fail on
 * some ranks only, the ranks agree on the outcome (world_agree) before anyone
 * enters the next collective, so all exit together with the same code and
 * the message is printed once, by the lowest rank that saw the problem.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h> /* gethostname, access */

#include "backend/backend.h"    /* backend_cpu_ops, backend_init, backend_free */
#include "store/checkpoint.h" /* checkpoint_save/load, checkpoint_read/write_weights */
#include "dist/comm.h"       /* comm_free */
#include "dist/comm_mpi.h"   /* comm_mpi_path_name */
#include "dist/comm_open.h"  /* comm_open */
#include "config.h"     /* PACKAGE_VERSION */
#include "data/data.h"       /* data_init_synthetic, data_init_npy, data_free */
#include "train/loss.h"       /* struct loss, loss_name */
#include "train/model.h"      /* model_init, model_init_host, model_state_to_host/device, model_free */
#include "train/optimizer.h"  /* optimizer_init, optimizer_state_arenas, optimizer_describe */
#include "run/options.h"    /* options_parse, options_print_help, options_format_settings */
#include "run/placement.h"  /* placement_decide, placement_check_memory */
#include "core/outfile.h"    /* outfile_check, outfile_distinct */
#include "observe/prometheus.h" /* prometheus_init */
#include "observe/report.h"     /* report_init, report_open_metrics, report_finish, report_end */
#include "store/safetensors.h" /* st_commit, st_discard */
#include "core/signals.h"    /* signals_install */
#include "core/status.h"     /* enum status, struct diag, status_exit_code */
#include "observe/straggler.h"  /* straggler_init, straggler_mine, straggler_free */
#include "observe/trace.h"      /* trace_init, trace_sync_clocks, trace_write, trace_free */
#include "train/trainer.h"    /* trainer_ddp, trainer_dp, struct train_config */
#include "dist/world.h"      /* world_init, world_agree, world_check_config, world_free */

_Static_assert(OPT_MAX_LAYERS == MODEL_MAX_LAYERS, "--layers and the model agree on the depth");
_Static_assert(OPT_MAX_REPLICAS == TRAIN_MAX_REPLICAS, "--replicas and the trainer agree");

/* Room for every setting as "--flag=value" lines, paths included. */
#define CONFIG_TEXT_MAX (8 * 4096 + 4096)

struct app {
	struct world w;
	struct options o;
	struct placement pl;
	struct dataset ds;
	struct dataset val;  /* validation set (val.n == 0: none) */
	struct backend_config cfg;
	struct backend be;
	struct comm c;
	struct model m;
	struct optimizer_hparams hp;
	struct optimizer opt;
	struct train_config tc;
	struct report r;
	struct train_result res;
	struct train_ctl ctl;
	struct trace trace;
	struct straggler strag;
	struct prometheus prom;
	float *ckpt_host;   /* rank 0: the whole state dict, for checkpoints (model_state_floats) */
	char lineage[CKPT_LINEAGE]; /* rank 0: this run's id in its checkpoints */
	double best_loss;   /* --save-best: the best validation loss so far */
	int have_best;
	int reported;       /* the current failure was printed already */
	struct diag d;
};

/* All ranks agree on st; the reporting rank prints the message. */
static enum status agree(struct app *a, enum status st)
{
	int reporter = 0;
	enum status all;

	if ((st == ST_RUNTIME || st == ST_USAGE) && a->d.st != ST_OK)
		world_failed(&a->w, a->d.msg);
	all = world_agree(&a->w, st, &reporter);

	if (all != ST_OK && all != ST_STOP && all != ST_INTERRUPTED && reporter && !a->reported) {
		const char *msg = a->d.st != ST_OK ? a->d.msg : "failed";

		if (a->w.rank == 0)
			fprintf(stderr, "ddptrain: %s\n", msg);
		else
			fprintf(stderr, "ddptrain: rank %d: %s\n", a->w.rank, msg);
		fflush(stderr);
	}
	if (all == ST_STOP && reporter && !a->reported) {
		/* --help or --version, answered once, by the lowest rank that asked */
		if (a->o.help)
			options_print_help(stdout);
		else
			options_print_version(stdout);
		fflush(stdout);
	}
	if (all != ST_OK)
		a->reported = 1; /* the same failure, passed up, is not printed again */
	return all;
}

/* Modes, devices and backends this build can run; the rest fail clearly. */
static enum status check_runnable(struct app *a, struct diag *d)
{
	struct options *o = &a->o;

	if (world_check_launch(&a->w, d) != ST_OK)
		return ST_USAGE;
	if (o->mode == MODE_DP && a->w.size > 1)
		return diag_set(d, ST_USAGE, "--mode=dp runs in one process (one thread per replica), but %d MPI ranks were started: run it without mpirun, or use --mode=ddp for one process per replica",
				a->w.size);
	return ST_OK;
}


/* The settings a checkpoint must share with the run that resumes it. */
static void resume_text(const struct app *a, char *buf, size_t len)
{
	snprintf(buf, len, "data=%s %zu x (%d, %d)\n", a->ds.synthetic ? "synthetic" : "npy",
		 a->ds.n, a->ds.in, a->ds.out);
	/* The data's identity: the same shape with other numbers is other data. */
	if (!a->ds.synthetic) {
		size_t used = strlen(buf);

		snprintf(buf + used, len - used, "inputs=%s\ntargets=%s\n", a->ds.fingerprint[0],
			 a->ds.fingerprint[1]);
	}
	options_format_settings(&a->o, OPT_SCOPE_RESUME, buf, len);
}

static int replicas(const struct app *a);

/* "--flag=value" lines of every setting that must be equal on all ranks: those a
 * checkpoint must share, those that shape the run or its sequence of collectives, and
 * those that say what is written where (only rank 0 writes: another rank's different
 * --save would silently come to nothing). all: every setting instead, for the metrics
 * file's record of the run. */
static void config_text(const struct app *a, char *buf, size_t len, int all)
{
	resume_text(a, buf, len);
	if (all) /* the data line, then every flag */
		buf[strcspn(buf, "\n") + 1] = '\0';
	options_format_settings(&a->o, all ? OPT_SCOPE_ALL : OPT_SCOPE_RUN, buf, len);
}

/* train_ctl.checkpoint: rank 0 writes, every rank learns the outcome. */
static enum status write_checkpoint(void *arg, long step, long epoch, long next_mb, struct diag *d)
{
	struct app *a = arg;
	struct ckpt_pos pos = {step, epoch, next_mb, replicas(a), "", a->have_best, a->best_loss};
	enum status st = ST_OK;
	char text[4096];

	memcpy(pos.lineage, a->lineage, sizeof pos.lineage);
	if (a->w.rank == 0) {
		resume_text(a, text, sizeof text);
		st = model_state_to_host(&a->m, 0, a->m.narenas, a->ckpt_host, d);
		if (st == ST_OK)
			st = checkpoint_save(a->o.checkpoint, (int)a->o.keep_checkpoints, &a->m,
					     a->ckpt_host, &pos, text, d);
	}
	/* Waiting for rank 0 to write a big checkpoint is not a stall, even when stopping. */
	world_expect_wait(&a->w, "the checkpoint write on rank 0");
	return agree(a, st);
}

/* --resume: rank 0 reads and checks the checkpoint; every rank gets the position, the
 * optimizer state and (through the weight broadcast that follows) the weights. */
static enum status resume(struct app *a)
{
	struct ckpt_pos pos = {0};
	char want[4096];
	enum status st = ST_OK;

	if (a->w.rank == 0) {
		resume_text(a, want, sizeof want);
		st = checkpoint_load(a->o.resume, &a->m, want, a->ckpt_host, &pos, &a->d);
		if (st == ST_OK && pos.world != replicas(a) && pos.next_mb != 0)
			st = diag_set(&a->d, ST_USAGE,
				      "--resume: %s was written by %d replicas in the middle of epoch %ld (next micro-batch %ld); resume it with %d, or from a checkpoint taken at an epoch boundary",
				      a->o.resume, pos.world, pos.epoch + 1, pos.next_mb, pos.world);
		/* --save-best continues from the checkpoint's best loss while its file holds those
		 * weights; a run without the file starts its best afresh. */
		if (st == ST_OK && pos.have_best && (a->o.save_best == NULL || access(a->o.save_best, F_OK) != 0))
			pos.have_best = 0;
		if (st == ST_OK) {
			memcpy(a->lineage, pos.lineage, sizeof a->lineage); /* the run continues */
			model_state_to_device(&a->m, 0, a->m.narenas, a->ckpt_host);
			st = a->be.ops->sync(a->be.ctx, &a->d);
		}
	}
	world_expect_wait(&a->w, "the checkpoint read on rank 0");
	st = agree(a, st);
	if (st == ST_OK)
		st = agree(a, world_bcast(&a->w, &pos, sizeof pos, 0, &a->d));
	for (int k = 1; k < a->m.narenas && st == ST_OK; k++) /* the optimizer's state */
		st = agree(a, a->c.ops->bcast(a->c.ctx, a->m.arena[k].data, a->m.arena[k].len, 0, &a->d));
	if (st == ST_OK && pos.have_best) {
		a->have_best = 1;
		a->best_loss = pos.best_loss;
		report_note(&a->r, "--save-best: %s holds the best validation loss so far, %.6f; it is replaced only by a lower one",
			    a->o.save_best, pos.best_loss);
	}
	a->opt.step = pos.step;
	a->ctl.start_step = pos.step;
	a->ctl.start_epoch = pos.epoch;
	a->ctl.start_mb = pos.next_mb;
	if (st != ST_OK)
		return st;
	/* Every rank has pos: the same verdict everywhere, no agreement needed. */
	if (pos.epoch >= a->o.epochs || (a->o.max_steps > 0 && pos.step >= a->o.max_steps)) {
		/* Nothing to train, but --save still gets the finished weights: a batch script
		 * that retries a run killed after its last checkpoint must not lose the model. */
		if (a->o.save != NULL && a->w.rank == 0) {
			float *host = malloc(a->m.nparams * sizeof *host);

			st = host == NULL ? diag_set(&a->d, ST_RUNTIME, "out of memory")
					  : model_state_to_host(&a->m, 0, 1, host, &a->d);
			if (st == ST_OK)
				st = checkpoint_write_weights(a->o.save, "--save", &a->m, host, &a->d);
			free(host);
		}
		world_expect_wait(&a->w, "the --save write on rank 0");
		st = agree(a, st);
		if (st != ST_OK)
			return st;
		report_note(&a->r, "--resume: %s is complete (step %ld, %s): nothing to do%s", a->o.resume,
			    pos.step, pos.epoch >= a->o.epochs ? "all --epochs done" : "--max-steps reached",
			    a->o.save ? "; --save written from it" : "");
		return ST_STOP;
	}
	report_note(&a->r, "resumed from %s: step %ld, epoch %ld, micro-batch %ld (written by %d replica%s)",
		    a->o.resume, pos.step, pos.epoch + 1, pos.next_mb, pos.world, pos.world == 1 ? "" : "s");
	return st;
}

/* train_ctl.evaluated for --save-best: rank 0 keeps the weights of the lowest validation
 * loss so far (the first of equal ones); every rank learns the outcome. */
static enum status keep_best(void *arg, long step, long epoch, double loss, struct diag *d)
{
	struct app *a = arg;
	enum status st = ST_OK;
	float *host;

	if (a->have_best && !(loss < a->best_loss))
		return ST_OK;
	a->have_best = 1;
	a->best_loss = loss;
	if (a->w.rank == 0) {
		host = malloc(a->m.nparams * sizeof *host);
		if (host == NULL) {
			st = diag_set(d, ST_RUNTIME, "--save-best: out of memory");
		} else {
			st = model_state_to_host(&a->m, 0, 1, host, d);
			if (st == ST_OK && !model_all_finite(host, a->m.nparams))
				st = diag_set(d, ST_RUNTIME, "training diverged: the weights are not finite after step %ld; lower --lr (--save-best: %s was not written)",
					      step, a->o.save_best);
			if (st == ST_OK)
				st = checkpoint_write_weights(a->o.save_best, "--save-best", &a->m, host, d);
			free(host);
		}
		if (st == ST_OK)
			report_note(&a->r, "--save-best: %s now holds the weights after step %ld (validation loss %.6f)",
				    a->o.save_best, step, loss);
	}
	return agree(a, st);
}

/* Rank 0's starting weights: --init, or nn.Linear's init from --seed. */
static enum status initial_weights(struct app *a, float *host)
{
	if (a->o.init != NULL)
		return checkpoint_read_weights(a->o.init, &a->m, host, &a->d);
	model_init_host(&a->m, a->o.seed, host);
	return ST_OK;
}

/* Refuse up front what cannot fit: every replica's model (dp: all in this process) plus
 * the host copies ddptrain keeps: two batch buffers, the checkpoint and initial-weight
 * copies. */
static enum status check_memory(struct app *a)
{
	const struct options *o = &a->o;
	int reps = o->mode == MODE_DP ? a->pl.replicas : 1;
	struct model lay;
	double need;

	model_layout(&lay, o->widths, o->nlayers);
	need = (double)model_bytes_needed(o->widths, o->nlayers, (int)o->batch_size,
					  optimizer_state_arenas(&a->hp), o->frozen) * reps +
	       3.0 * (double)lay.nparams * sizeof(float);
	return placement_check_memory(&a->pl, o, &a->w, need, &a->d);
}

/* The parts of the options the optimizer and the training loops see. */
static void run_settings(struct app *a)
{
	const struct options *o = &a->o;
	const char *graphs;

	a->hp.kind = o->optimizer == OPT_OPTIM_ADAMW ? OPTIM_ADAMW : OPTIM_SGD;
	a->hp.lr = (float)o->lr;
	a->hp.momentum = (float)o->momentum;
	a->hp.nesterov = o->nesterov;
	a->hp.weight_decay = (float)o->weight_decay;
	a->hp.beta1 = o->beta1;
	a->hp.beta2 = o->beta2;
	a->hp.eps = o->eps;
	a->tc.batch_size = o->batch_size;
	a->tc.epochs = o->epochs;
	a->tc.max_steps = o->max_steps;
	a->tc.grad_accum = o->grad_accum;
	a->tc.log_every = o->log_every;
	a->tc.seed = o->seed;
	a->tc.shuffle = o->shuffle;
	a->tc.drop_last = o->drop_last;
	a->tc.overlap = o->overlap;
	a->tc.bucket_mb = o->bucket_mb;
	a->tc.loss.kind = o->loss == OPT_LOSS_CROSS_ENTROPY ? LOSS_CROSS_ENTROPY : LOSS_MSE;
	a->tc.schedule = o->schedule;
	a->tc.warmup_steps = o->warmup_steps;
	a->tc.clip_grad_norm = o->clip_grad_norm;
	a->tc.eval_every = o->eval_every;
	graphs = getenv("DDPTRAIN_CUDA_GRAPHS");
	a->tc.graphs = graphs == NULL || strcmp(graphs, "0") != 0;
}

/* Before any work, rank 0 checks that --save, --checkpoint and --metrics can be written
 * (directory takes a file, target a regular file, room for the weights). */
static enum status check_outputs(struct app *a)
{
	const struct options *o = &a->o;
	size_t weight_bytes;
	struct model lay;
	enum status st = ST_OK;

	model_layout(&lay, o->widths, o->nlayers);
	weight_bytes = lay.nparams * sizeof(float);
	{
		const struct named_path paths[] = {
			{"--save", o->save, 1, 0},
			{"--metrics", o->metrics, 1, 0},
			{"--checkpoint", o->checkpoint, 1, o->keep_checkpoints > 0},
			{"--resume", o->resume, 0, 0},
			{"--init", o->init, 0, 0},
			{"--inputs", o->inputs, 0, 0},
			{"--targets", o->targets, 0, 0},
			{"--save-best", o->save_best, 1, 0},
			{"--val-inputs", o->val_inputs, 0, 0},
			{"--val-targets", o->val_targets, 0, 0},
			{"--trace", o->trace, 1, 0},
			{"--prometheus", o->prometheus, 1, 0},
		};

		/* --resume=F --checkpoint=F is how a run continues; every other pair is refused. */
		if (a->w.rank == 0)
			st = outfile_distinct(paths, (int)(sizeof paths / sizeof paths[0]), 2, 3, &a->d);
	}
	if (a->w.rank == 0 && o->save != NULL && st == ST_OK)
		st = outfile_check(o->save, "--save", weight_bytes, &a->d);
	if (a->w.rank == 0 && o->checkpoint != NULL && st == ST_OK)
		st = outfile_check(o->checkpoint, "--checkpoint",
				   weight_bytes * (size_t)(1 + optimizer_state_arenas(&a->hp)), &a->d);
	if (a->w.rank == 0 && o->save_best != NULL && st == ST_OK)
		st = outfile_check(o->save_best, "--save-best", weight_bytes, &a->d);
	if (a->w.rank == 0 && o->metrics != NULL && st == ST_OK)
		st = outfile_check(o->metrics, "--metrics", 0, &a->d);
	if (a->w.rank == 0 && o->trace != NULL && st == ST_OK)
		st = outfile_check(o->trace, "--trace", 0, &a->d);
	if (a->w.rank == 0 && o->prometheus != NULL && st == ST_OK)
		st = outfile_check(o->prometheus, "--prometheus", 0, &a->d);
	return agree(a, st);
}

/* --trace (clocks aligned now, just before training), the step-time samples, --prometheus. */
static enum status observers_init(struct app *a)
{
	const struct options *o = &a->o;
	const int dp = o->mode == MODE_DP;
	enum status st;

	st = trace_init(&a->trace, o->trace, o->trace_lo, o->trace_hi, dp ? a->pl.replicas : 1, dp,
			(size_t)1 << 20, &a->d);
	if (st == ST_OK)
		st = trace_sync_clocks(&a->trace, &a->w, &a->d);
	if (st == ST_OK && !dp) {
		char host[64] = "?";

		gethostname(host, sizeof host - 1);
		st = straggler_init(&a->strag, &a->w, o->straggler_warn, host, &a->d);
	}
	if (st != ST_OK)
		return st;
	a->ctl.trace = o->trace != NULL ? &a->trace : NULL;
	a->ctl.straggler = dp ? NULL : &a->strag;
	if (a->w.rank == 0 && o->prometheus != NULL) {
		prometheus_init(&a->prom, o->prometheus, o->prometheus_every, options_mode_names[o->mode],
				replicas(a));
		a->ctl.prom = &a->prom;
	}
	return ST_OK;
}

static enum status setup(struct app *a)
{
	struct options *o = &a->o;
	const int classify = o->loss == OPT_LOSS_CROSS_ENTROPY;
	char text[CONFIG_TEXT_MAX];
	float *host = NULL;
	enum status st;

	st = check_outputs(a);
	if (st != ST_OK)
		return st;
	if (o->inputs != NULL)
		st = data_init_npy(&a->ds, o->inputs, o->targets, 0, o->widths[0], o->widths[o->nlayers],
				   classify, &a->d);
	else
		st = data_init_synthetic(&a->ds, o->seed, 0, (size_t)o->samples, o->widths[0],
					 o->widths[o->nlayers], classify, &a->d);
	/* The synthetic validation set continues the training set's generator. */
	if (st == ST_OK && o->val_inputs != NULL)
		st = data_init_npy(&a->val, o->val_inputs, o->val_targets, 1, o->widths[0],
				   o->widths[o->nlayers], classify, &a->d);
	else if (st == ST_OK && o->val_samples > 0)
		st = data_init_synthetic(&a->val, o->seed, (uint64_t)o->samples, (size_t)o->val_samples,
					 o->widths[0], o->widths[o->nlayers], classify, &a->d);
	st = agree(a, st);
	if (st != ST_OK)
		return st;
	/* Each rank scans its share of the rows for NaN and infinities. */
	st = agree(a, data_check_finite(&a->ds, a->ds.n * (size_t)a->w.rank / (size_t)a->w.size,
					a->ds.n * (size_t)(a->w.rank + 1) / (size_t)a->w.size -
						a->ds.n * (size_t)a->w.rank / (size_t)a->w.size,
					&a->d));
	if (st == ST_OK && a->val.n > 0) /* and the validation set's */
		st = agree(a, data_check_finite(&a->val, a->val.n * (size_t)a->w.rank / (size_t)a->w.size,
						a->val.n * (size_t)(a->w.rank + 1) / (size_t)a->w.size -
							a->val.n * (size_t)a->w.rank / (size_t)a->w.size,
						&a->d));
	if (st != ST_OK)
		return st;
	config_text(a, text, sizeof text, 0);
	st = agree(a, world_check_config(&a->w, text, &a->d));
	if (st != ST_OK)
		return st;

	st = agree(a, placement_decide(&a->pl, o, &a->w, &a->d));
	if (st != ST_OK)
		return st;
	st = agree(a, check_memory(a));
	if (st != ST_OK)
		return st;
	a->cfg.device = a->pl.gpu;
	a->cfg.tf32 = o->tf32;
	st = backend_init(&a->be, a->pl.device == DEVICE_CUDA ? a->pl.module.mod->backend : &backend_cpu_ops,
			  &a->cfg, &a->d);
	if (st == ST_OK)
		st = model_init(&a->m, &a->be, o->widths, o->nlayers, (int)o->batch_size, &a->d);
	if (st == ST_OK) {
		model_freeze(&a->m, o->frozen); /* before the optimizer: no state for frozen layers */
		st = optimizer_init(&a->opt, &a->m, &a->hp, &a->d);
	}
	st = agree(a, st);
	if (st == ST_OK)
		st = agree(a, comm_open(&a->c, a->pl.comm, &a->w, &a->be, &a->pl.module, a->m.grads,
					a->m.nparams + MODEL_SLOTS, a->o.timeout, &a->d));
	if (st != ST_OK)
		return st;
	if (a->c.grads != NULL) /* the shared-memory all-reduce reads them where they are */
		model_move_grads(&a->m, a->c.grads);
	report_init(&a->r, a->w.rank == 0, o->quiet);
	if (a->w.rank == 0 && (o->checkpoint || o->resume)) {
		a->ckpt_host = calloc(model_state_floats(&a->m, 0, a->m.narenas), sizeof *a->ckpt_host);
		if (a->ckpt_host == NULL)
			st = diag_set(&a->d, ST_RUNTIME, "out of memory for checkpoint buffers");
	}
	if (o->checkpoint != NULL) {
		checkpoint_new_lineage(a->lineage); /* --resume replaces it with the checkpoint's */
		a->ctl.checkpoint = write_checkpoint;
		a->ctl.every = o->checkpoint_every;
	}
	a->ctl.arg = a;
	if (a->val.n > 0)
		a->ctl.val = &a->val;
	if (o->save_best != NULL)
		a->ctl.evaluated = keep_best;
	if (st == ST_OK && a->w.rank == 0 && o->resume == NULL) {
		host = malloc(a->m.nparams * sizeof *host);
		st = host ? initial_weights(a, host) : diag_set(&a->d, ST_RUNTIME, "out of memory");
		if (st == ST_OK) {
			model_state_to_device(&a->m, 0, 1, host);
			st = a->be.ops->sync(a->be.ctx, &a->d);
		}
	}
	free(host);
	world_expect_wait(&a->w, "the --init read on rank 0");
	st = agree(a, st);
	if (st != ST_OK)
		return st;
	if (o->resume != NULL)
		st = resume(a);
	if (st != ST_OK)
		return st;
	config_text(a, text, sizeof text, 1);
	st = agree(a, report_open_metrics(&a->r, o->metrics, o->resume != NULL, text, &a->d));
	if (st != ST_OK)
		return st;
	/* Every replica starts from rank 0's weights. */
	world_watch_begin(&a->w, "the weight broadcast");
	st = a->c.ops->bcast(a->c.ctx, a->m.params, a->m.nparams, 0, &a->d);
	world_watch_end(&a->w);
	st = agree(a, st);
	if (st == ST_OK)
		st = agree(a, observers_init(a));
	return st;
}

/* Replicas of this run: MPI ranks (ddp) or worker threads (dp). */
static int replicas(const struct app *a)
{
	return a->o.mode == MODE_DP ? a->pl.replicas : a->w.size;
}

/* One "#" line per rank or dp replica: where it runs and on what. Collective. */
static void print_ranks(struct app *a)
{
	char device[160];
	char path[96];

	if (a->o.mode == MODE_DP) {
		for (int i = 0; i < a->pl.replicas; i++)
			if (a->pl.device == DEVICE_CUDA)
				report_note(&a->r, "  replica %2d: thread %d, GPU %d", i, i, a->pl.gpu + i);
			else
				report_note(&a->r, "  replica %2d: thread %d, cpu", i, i);
		return;
	}
	if (a->pl.device == DEVICE_CUDA)
		snprintf(device, sizeof device, "GPU %d of %d (%s)", a->pl.gpu, a->pl.gpu_count,
			 a->pl.gpu_name);
	else
		snprintf(device, sizeof device, "cpu");
	if (a->pl.comm == COMM_MPI)
		snprintf(path, sizeof path, "%s, %s", a->c.ops->name, comm_mpi_path_name(&a->c));
	else
		snprintf(path, sizeof path, "%s", a->c.ops->name);
	report_ranks(&a->r, &a->w, device, path);
}

static void print_header(struct app *a)
{
	const int dp = a->o.mode == MODE_DP;
	char widths[1024], opt[160], clip[64] = "off";

	options_format_widths(&a->o, widths, sizeof widths);
	if (dp)
		report_note(&a->r, "ddptrain %s: mode dp, 1 process, %d replicas on worker threads, device %s",
			    PACKAGE_VERSION, a->pl.replicas, a->be.ops->name);
	else
		report_note(&a->r, "ddptrain %s: mode ddp, %d rank%s (%d on this node), device %s, backend %s",
			    PACKAGE_VERSION, a->w.size, a->w.size == 1 ? "" : "s", a->w.local_size,
			    a->be.ops->name, a->c.ops->name);
	if (a->pl.notice[0] != '\0')
		report_note(&a->r, "%s", a->pl.notice);
	if (a->pl.device == DEVICE_CUDA)
		report_note(&a->r, "%s, TF32 %s", a->pl.info, a->o.tf32 ? "on" : "off");
	print_ranks(a);
	report_note(&a->r, "model %s (%zu parameters), data %s (%zu samples), batch %ld per %s x %d %ss x %ld accum = %ld per step",
		    widths, a->m.nparams, a->ds.synthetic ? "synthetic" : a->o.inputs, a->ds.n,
		    a->o.batch_size, dp ? "replica" : "rank", replicas(a), dp ? "replica" : "rank",
		    a->o.grad_accum, a->o.batch_size * replicas(a) * a->o.grad_accum);
	optimizer_describe(&a->hp, opt, sizeof opt);
	report_note(&a->r, "%s loss, %s, %ld epochs, %s, seed %llu", loss_name(&a->tc.loss), opt,
		    a->o.epochs, a->o.shuffle ? "shuffled" : "not shuffled", (unsigned long long)a->o.seed);
	if (a->o.clip_grad_norm > 0.0)
		snprintf(clip, sizeof clip, "at norm %g", a->o.clip_grad_norm);
	if (a->o.schedule != SCHED_CONSTANT || a->o.warmup_steps > 0 || a->o.clip_grad_norm > 0.0)
		report_note(&a->r, "lr schedule %s with %ld warmup steps, gradient clipping %s",
			    schedule_names[a->o.schedule], a->o.warmup_steps, clip);
	if (a->val.n > 0)
		report_note(&a->r, "validation: %s (%zu samples), every epoch%s",
			    a->val.synthetic ? "synthetic" : a->o.val_inputs, a->val.n,
			    a->o.eval_every > 0 ? " and every --eval-every steps" : "");
}

/* Fill the summary; in ddp mode rank 0 gathers every rank's figures into ranks/rss. */
static enum status summarize(struct app *a, struct report_summary *sum, struct replica_stats *ranks,
			     double *rss, struct straggler_rank *strag)
{
	double mine = report_peak_rss_mib(), state = 0.0;
	enum status st = ST_OK;

	sum->mode = options_mode_names[a->o.mode];
	sum->replicas = replicas(a);
	sum->steps = a->res.steps;
	sum->epochs = a->res.epochs;
	sum->seconds = a->res.seconds;
	sum->samples_per_s = a->res.seconds > 0 ? a->res.samples / a->res.seconds : 0.0;
	sum->first_loss = a->res.first_loss;
	sum->final_loss = a->res.final_loss;
	sum->comm_wait_share = a->res.seconds > 0 ? a->res.wait_s / a->res.seconds : 0.0;
	if (a->o.mode == MODE_DP) {
		sum->rep = a->res.rep;
	} else {
		struct straggler_rank me;
		char host[64] = "?";

		gethostname(host, sizeof host - 1);
		straggler_mine(&a->strag, host, &me);
		st = world_gather(&a->w, &a->res.rep[0], sizeof a->res.rep[0], ranks, &a->d);
		if (st == ST_OK)
			st = world_gather(&a->w, &mine, sizeof mine, rss, &a->d);
		if (st == ST_OK)
			st = world_gather(&a->w, &me, sizeof me, strag, &a->d);
		sum->rep = ranks;
		sum->rss_mib = rss;
		sum->strag = strag;
		sum->nbuckets = a->res.nbuckets;
		sum->buckets = a->res.buckets;
	}
	for (int i = 0; i < sum->replicas && a->w.rank == 0; i++)
		state = (double)sum->rep[i].state_bytes > state ? (double)sum->rep[i].state_bytes : state;
	sum->state_mib = state / 1048576.0;
	return st;
}

/* After training: rank 0 writes the merged trace and the last --prometheus file. */
static enum status finish_observers(struct app *a)
{
	const char *meta[4] = {NULL};
	char mode[32], host[64] = "?";
	enum status st = ST_OK;

	snprintf(mode, sizeof mode, "mode=%s", options_mode_names[a->o.mode]);
	meta[0] = "producer=ddptrain " PACKAGE_VERSION;
	meta[1] = mode;
	gethostname(host, sizeof host - 1);
	if (a->o.trace != NULL)
		st = agree(a, trace_write(&a->trace, &a->w, meta, host, &a->d));
	if (st == ST_OK && a->ctl.prom != NULL) {
		double el = a->res.seconds;

		st = trainer_prometheus(&a->ctl, &a->res, a->res.steps, a->res.steps, a->res.final_loss,
					el > 0 ? a->res.samples / el : 0.0, el > 0 ? a->res.wait_s / el : 0.0,
					0, replicas(a), &a->d);
	}
	return agree(a, st);
}

static enum status run(struct app *a)
{
	struct report_summary sum = {0};
	struct replica_stats *ranks = NULL;
	struct st_pending saved = {.slot = -1};
	struct straggler_rank *strag = NULL;
	double *rss = NULL;
	float *host = NULL;
	enum status st;

	print_header(a);
	if (a->o.mode == MODE_DP)
		st = trainer_dp(&a->tc, a->pl.replicas, &a->m, &a->opt, &a->cfg, &a->ds, &a->ctl, &a->r,
				&a->res, &a->d);
	else
		st = trainer_ddp(&a->tc, &a->w, &a->m, &a->opt, &a->c, &a->ds, &a->ctl, &a->r, &a->res,
				 &a->d);
	st = agree(a, st);
	if (st == ST_OK)
		st = finish_observers(a);
	if (st != ST_OK)
		return st;
	if (a->o.save != NULL && a->w.rank == 0) {
		host = malloc(a->m.nparams * sizeof *host);
		if (host == NULL) {
			st = diag_set(&a->d, ST_RUNTIME, "out of memory");
		} else {
			st = model_state_to_host(&a->m, 0, 1, host, &a->d);
			/* Data and starting weights were checked finite when loaded: this is divergence. */
			if (st == ST_OK && !model_all_finite(host, a->m.nparams))
				st = diag_set(&a->d, ST_RUNTIME, "training diverged: the weights are not finite after step %ld; lower --lr (--save: %s was not written)",
					      a->res.steps, a->o.save);
			else if (st == ST_OK)
				st = checkpoint_stage_weights(a->o.save, "--save", &a->m, host, &saved,
							      &a->d);
		}
		free(host);
	}
	world_expect_wait(&a->w, "the --save write on rank 0");
	st = agree(a, st);
	if (st == ST_OK) {
		ranks = calloc((size_t)a->w.size, sizeof *ranks);
		rss = calloc((size_t)a->w.size, sizeof *rss);
		strag = calloc((size_t)a->w.size, sizeof *strag);
		st = ranks && rss && strag ? summarize(a, &sum, ranks, rss, strag)
					   : diag_set(&a->d, ST_RUNTIME, "out of memory");
		st = agree(a, st);
	}
	/* The weights go into place only when everything else succeeded: a run that exits
	 * non-zero leaves no new --save file. */
	if (st == ST_OK) {
		st = report_finish(&a->r, &sum, 1, &a->d);
		if (st == ST_OK && a->w.rank == 0 && a->o.save != NULL)
			st = st_commit(&saved, &a->d);
		st = agree(a, st);
	}
	st_discard(&saved);
	free(ranks);
	free(rss);
	free(strag);
	return st;
}

int main(int argc, char **argv)
{
	struct app a;
	enum status st;

	memset(&a, 0, sizeof a);
	/* Handlers first: a stop signal during MPI's start-up is a graceful stop too. */
	signals_install();
	/* The command line alone decides --help, --version (ST_STOP) and usage errors. */
	st = options_parse(&a.o, argc, argv, &a.d);
	if (st == ST_OK && (a.o.help || a.o.version))
		st = ST_STOP;
	if (st != ST_OK && world_launch_size() == 1) {
		/* Alone: answer without starting MPI, which would spawn orted first (and wait
		 * for a name lookup where localhost is missing from /etc/hosts). */
		if (st == ST_STOP && a.o.help)
			options_print_help(stdout);
		else if (st == ST_STOP)
			options_print_version(stdout);
		else
			fprintf(stderr, "ddptrain: %s\n", a.d.msg);
		return status_exit_code(st);
	}
	{
		struct diag d = {0};
		/* The watchdog watches MPI's start-up and every collective after it, to
		 * MPI_Finalize. */
		enum status wst = world_watchdog_start(&a.w, a.o.timeout, &d);

		if (wst == ST_OK)
			wst = world_init(&a.w, &argc, &argv, &d);
		if (wst != ST_OK) {
			fprintf(stderr, "ddptrain: %s\n", d.msg);
			world_free(&a.w);
			return status_exit_code(wst);
		}
	}
	/* With other ranks, all agree: one rank's --version or bad flag stops every rank. */
	st = agree(&a, st);
	if (st == ST_OK)
		st = agree(&a, check_runnable(&a, &a.d));
	if (st == ST_OK)
		run_settings(&a);
	if (st == ST_OK)
		st = setup(&a);
	if (st == ST_OK)
		st = run(&a);

	report_end(&a.r, status_exit_code(st),
		   st == ST_INTERRUPTED ? "stopped by a signal" : a.d.st != ST_OK ? a.d.msg : NULL);
	free(a.ckpt_host);
	trace_free(&a.trace);
	straggler_free(&a.strag);
	report_free(&a.r);
	model_free(&a.m);
	comm_free(&a.c);
	backend_free(&a.be);
	data_free(&a.ds);
	data_free(&a.val);
	world_free(&a.w);
	return status_exit_code(st);
}
