/* persist.c - starting weights, checkpoints, --resume, --save-best and --save. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h> /* access */

#include "run/persist.h"
#include "run/settings.h" /* settings_resume_text */
#include "model/schedule.h"  /* schedule_names */
#include "model/zero.h"    /* zero_cut */

static enum status agree(struct persist *p, enum status st)
{
	return agreement_reach(&p->ag, st);
}

enum status persist_save_weights(const struct model *m, const char *path, const char *flag, long step,
				 const struct train_config *tc, struct st_pending *stage,
				 const struct progress *pr, struct diag *d)
{
	float *host = malloc(m->nparams * sizeof *host);
	enum status st;

	if (host == NULL)
		return diag_set(d, ST_RUNTIME, "%s: out of memory", flag);
	st = model_state_to_host(m, 0, 1, host, d);
	/* Data and starting weights were checked finite when loaded: this is divergence. */
	if (st == ST_OK && !model_all_finite(host, m->nparams) && trainer_fp16_overflow(tc) != NULL)
		st = diag_set(d, ST_RUNTIME, "the weights are not finite after step %ld %s (%s: %s was not written)",
			      step, trainer_fp16_overflow(tc), flag, path);
	else if (st == ST_OK && !model_all_finite(host, m->nparams))
		st = diag_set(d, ST_RUNTIME, "training diverged: the weights are not finite after step %ld; lower --lr (%s: %s was not written)",
			      step, flag, path);
	else if (st == ST_OK && stage != NULL)
		st = checkpoint_stage_weights(path, flag, m, host, stage, pr, d);
	else if (st == ST_OK)
		st = checkpoint_write_weights(path, flag, m, host, pr, d);
	free(host);
	return st;
}

/* Whether the optimizer state arenas are ZeRO shards (ddp with --zero). */
static int sharded(const struct persist *p)
{
	return p->o->zero > 0 && p->o->mode == MODE_DDP;
}

/* A device buffer of a whole state arena on every rank, for as long as one move of the
 * state takes (not held: it is what ZeRO saves); agreed, so no rank enters the
 * collective alone. */
static enum status state_scratch(struct persist *p, float **scratch)
{
	const struct backend *be = p->m->be;

	*scratch = be->ops->alloc(be->ctx, p->m->ntrainable > 0 ? p->m->ntrainable : 1);
	if (!world_all(p->w, *scratch != NULL)) {
		be->ops->free(be->ctx, *scratch);
		*scratch = NULL;
		return diag_set(p->d, ST_RUNTIME, "out of %s memory for the optimizer state of a checkpoint (%zu floats)",
				be->ops->name, p->m->ntrainable);
	}
	return ST_OK;
}

/* The ranks' cuts of a whole state arena: rank q holds [cuts[q], cuts[q + 1]). */
static size_t *state_cuts(const struct persist *p)
{
	size_t *cuts = malloc((size_t)(p->w->size + 1) * sizeof *cuts);

	for (int q = 0; cuts != NULL && q <= p->w->size; q++)
		cuts[q] = zero_cut(p->m->ntrainable, q, p->w->size);
	return cuts;
}

/* ZeRO: the whole optimizer state onto rank 0's host (its place in host, laid out as
 * model_state_to_host lays it out): each state arena's shards are contiguous in rank
 * order, so the communicator's all-gather of them over a whole-arena scratch IS the whole
 * arena. Collective. */
static enum status gather_state(struct persist *p, float *host)
{
	struct model *m = p->m;
	const struct backend_ops *ops = m->be->ops;
	float *scratch;
	size_t *cuts = state_cuts(p);
	enum status st = state_scratch(p, &scratch);

	if (st == ST_OK && !world_all(p->w, cuts != NULL))
		st = diag_set(p->d, ST_RUNTIME, "out of memory for checkpoint buffers");
	for (int k = 1; k < m->narenas && st == ST_OK; k++) {
		ops->copy(m->be->ctx, scratch + m->arena[k].first, m->arena[k].data, m->arena[k].len);
		world_watch_begin(p->w, "the optimizer state all-gather");
		st = comm_all_gather_start(p->c, scratch, m->ntrainable, cuts, p->d);
		if (st == ST_OK)
			st = comm_wait_all(p->c, p->d);
		/* the host waits here, watched: a read into pageable memory (ckpt_host) queued
		 * behind the all-gather would block inside the driver, where a dead peer is never
		 * noticed */
		if (st == ST_OK)
			st = ops->sync(m->be->ctx, p->d);
		world_watch_end(p->w);
		if (st == ST_OK && p->w->rank == 0)
			st = ops->to_host(m->be->ctx, host + model_state_floats(m, 0, k), scratch,
					  m->ntrainable, p->d);
	}
	ops->free(m->be->ctx, scratch);
	free(cuts);
	return st;
}

/* ZeRO: rank 0's whole optimizer state (host, as model_state_floats lays it out) to
 * every rank, each keeping its shard. Collective. */
static enum status scatter_state(struct persist *p, const float *host)
{
	struct model *m = p->m;
	const struct backend_ops *ops = m->be->ops;
	float *scratch;
	enum status st = state_scratch(p, &scratch);

	for (int k = 1; k < m->narenas && st == ST_OK; k++) {
		if (p->w->rank == 0)
			ops->to_device(m->be->ctx, scratch, host + model_state_floats(m, 0, k), m->ntrainable);
		st = comm_bcast(p->c, scratch, m->ntrainable, 0, p->d);
		if (st == ST_OK)
			ops->copy(m->be->ctx, m->arena[k].data, scratch + m->arena[k].first, m->arena[k].len);
	}
	if (st == ST_OK)
		st = ops->sync(m->be->ctx, p->d);
	ops->free(m->be->ctx, scratch);
	return st;
}

/* train_ctl.checkpoint: rank 0 writes, every rank learns the outcome. */
static enum status write_checkpoint(void *arg, long step, long epoch, long next_mb, long schedule_steps,
				   struct diag *d)
{
	struct persist *p = arg;
	struct ckpt_pos pos = {step, epoch, next_mb, p->replicas, "", p->have_best, p->best_loss, schedule_steps};
	enum status st = ST_OK;
	char text[4096];

	memcpy(pos.lineage, p->lineage, sizeof pos.lineage);
	/* ZeRO: the whole state, in today's format (so it resumes with or without --zero and
	 * at another world size), gathered first */
	if (sharded(p))
		st = gather_state(p, p->ckpt_host);
	/* Waiting for rank 0 to write a big checkpoint is not a stall, even when stopping: the
	 * others wait in the agreement, hearing of its progress. */
	world_expect_wait(p->w, "the checkpoint write on rank 0");
	if (p->w->rank == 0 && st == ST_OK) {
		settings_resume_text(p->o, p->ds, text, sizeof text);
		st = model_state_to_host(p->m, 0, sharded(p) ? 1 : p->m->narenas, p->ckpt_host, d);
		/* checkpoint_save refuses non-finite weights as divergence; with fp16 on the wire
		 * they are most likely its overflow */
		if (st == ST_OK && trainer_fp16_overflow(p->tc) != NULL && !model_all_finite(p->ckpt_host, p->m->nparams))
			st = diag_set(d, ST_RUNTIME, "the weights are not finite after step %ld %s (--checkpoint: %s not written, the previous checkpoint is kept)",
				      step, trainer_fp16_overflow(p->tc), p->o->checkpoint);
		if (st == ST_OK)
			st = checkpoint_save(p->o->checkpoint, &p->kept, p->m, p->ckpt_host,
					     &pos, text, &p->progress, d);
	}
	return agree(p, st);
}

/* train_ctl.evaluated for --save-best: rank 0 keeps the weights of the lowest validation
 * loss so far (the first of equal ones); every rank learns the outcome. */
static enum status keep_best(void *arg, long step, long epoch, double loss, struct diag *d)
{
	struct persist *p = arg;
	enum status st = ST_OK;

	if (p->have_best && !(loss < p->best_loss))
		return ST_OK;
	p->have_best = 1;
	p->best_loss = loss;
	/* As for a checkpoint: the weights are rank 0's to write, a stop waits for them. */
	world_expect_wait(p->w, "the --save-best write on rank 0");
	if (p->w->rank == 0) {
		st = persist_save_weights(p->m, p->o->save_best, "--save-best", step, p->tc, NULL,
					  &p->progress, d);
		if (st == ST_OK)
			report_note(p->r, "--save-best: %s now holds the weights after step %ld (validation loss %.6f)",
				    p->o->save_best, step, loss);
	}
	return agree(p, st);
}

void persist_init(struct persist *p, struct train_ctl *ctl)
{
	const struct options *o = p->o;

	p->progress = (struct progress){world_progress, p->w};
	if (o->checkpoint != NULL) {
		checkpoint_new_lineage(p->lineage); /* --resume replaces it with the checkpoint's */
		p->kept.keep = (int)o->keep_checkpoints;
		ctl->checkpoint = write_checkpoint;
		ctl->every = o->checkpoint_every;
	}
	if (o->save_best != NULL)
		ctl->evaluated = keep_best;
	ctl->arg = p;
}

enum status persist_start(struct persist *p)
{
	enum status st = ST_OK;
	float *host;

	if (p->w->rank == 0 && (p->o->checkpoint || p->o->resume)) {
		p->ckpt_host = calloc(model_state_floats(p->m, 0, p->m->narenas), sizeof *p->ckpt_host);
		if (p->ckpt_host == NULL)
			st = diag_set(p->d, ST_RUNTIME, "out of memory for checkpoint buffers");
	}
	if (st == ST_OK && p->w->rank == 0 && p->o->resume == NULL) {
		host = malloc(p->m->nparams * sizeof *host);
		if (host == NULL)
			st = diag_set(p->d, ST_RUNTIME, "out of memory");
		else if (p->o->init != NULL)
			st = checkpoint_read_weights(p->o->init, p->m, host, p->d);
		else
			model_init_host(p->m, p->o->seed, host);
		if (st == ST_OK) {
			model_state_to_device(p->m, 0, 1, host);
			st = p->m->be->ops->sync(p->m->be->ctx, p->d);
		}
		free(host);
	}
	world_expect_wait(p->w, "the --init read on rank 0");
	return agree(p, st);
}

enum status persist_keep_start(struct persist *p, const struct train_ctl *ctl)
{
	const struct loader_config here = trainer_loader_config(p->tc, p->o->mode == MODE_DP, p->replicas, 0);
	enum status st = ST_OK;
	long last;

	if (p->o->checkpoint == NULL || p->kept.keep == 0)
		return ST_OK;
	if (p->w->rank == 0) { /* a stop may come after any step this run takes */
		last = trainer_total_steps(ctl, loader_epoch_length(p->ds->n, &here), p->tc->grad_accum,
					   p->tc->epochs, p->tc->max_steps);
		st = checkpoint_rotation_start(&p->kept, p->o->checkpoint, p->lineage, ctl->start_step + 1,
					       last, p->d);
	}
	return agree(p, st);
}

/* Rank 0: pos against the epochs of this run's data and batches (checkpoint_check_position):
 * an epoch's length at the checkpoint's world size, and at world size 1, the longest. */
static enum status check_position(struct persist *p, const struct ckpt_pos *pos)
{
	const int dp = p->o->mode == MODE_DP;
	const struct loader_config at = trainer_loader_config(p->tc, dp, pos->world, 0),
				   one = trainer_loader_config(p->tc, dp, 1, 0);

	return checkpoint_check_position(pos, loader_epoch_length(p->ds->n, &at), loader_epoch_length(p->ds->n, &one),
					 p->tc->grad_accum, p->o->resume, p->d);
}

enum status persist_resume(struct persist *p, struct train_ctl *ctl, struct optimizer *opt)
{
	const struct options *o = p->o;
	struct model *m = p->m;
	struct ckpt_pos pos = {0};
	char want[4096];
	enum status st = ST_OK;

	if (p->w->rank == 0) {
		settings_resume_text(o, p->ds, want, sizeof want);
		st = checkpoint_load(o->resume, m, want, p->ckpt_host, &pos, p->d);
		if (st == ST_OK)
			st = check_position(p, &pos);
		if (st == ST_OK && pos.world != p->replicas && pos.next_mb != 0)
			st = diag_set(p->d, ST_USAGE,
				      "--resume: %s was written by %d replicas in the middle of epoch %ld (next micro-batch %ld); resume it with %d, or from a checkpoint taken at an epoch boundary",
				      o->resume, pos.world, pos.epoch + 1, pos.next_mb, pos.world);
		/* --save-best continues from the checkpoint's best loss while its file holds those
		 * weights; a run without the file starts its best afresh. */
		if (st == ST_OK && pos.have_best && (o->save_best == NULL || access(o->save_best, F_OK) != 0))
			pos.have_best = 0;
		if (st == ST_OK) {
			memcpy(p->lineage, pos.lineage, sizeof p->lineage); /* the run continues */
			model_state_to_device(m, 0, sharded(p) ? 1 : m->narenas, p->ckpt_host);
			st = m->be->ops->sync(m->be->ctx, p->d);
		}
	}
	world_expect_wait(p->w, "the checkpoint read on rank 0");
	st = agree(p, st);
	if (st == ST_OK)
		st = agree(p, world_bcast(p->w, &pos, sizeof pos, 0, p->d));
	if (st == ST_OK && sharded(p)) /* the optimizer's state: each rank its shard */
		st = agree(p, scatter_state(p, p->ckpt_host));
	for (int k = 1; k < m->narenas && st == ST_OK && !sharded(p); k++) /* the optimizer's state */
		st = agree(p, comm_bcast(p->c, m->arena[k].data, m->arena[k].len, 0, p->d));
	if (st == ST_OK && pos.have_best) {
		p->have_best = 1;
		p->best_loss = pos.best_loss;
		report_note(p->r, "--save-best: %s holds the best validation loss so far, %.6f; it is replaced only by a lower one",
			    o->save_best, pos.best_loss);
	}
	opt->step = pos.step;
	/* The schedule keeps the length it was written with, also at another world size
	 * (whose epochs take another number of steps): its lr goes on from where it was. */
	p->tc->schedule_steps = pos.schedule_steps;
	ctl->start_step = pos.step;
	ctl->start_epoch = pos.epoch;
	ctl->start_mb = pos.next_mb;
	if (st != ST_OK)
		return st;
	/* Every rank has pos: the same verdict everywhere. Fewer ranks than the checkpoint's
	 * take more steps per epoch, and would run past the end of the schedule it keeps. */
	if (pos.schedule_steps > 0 && p->tc->schedule != SCHED_CONSTANT) {
		const struct loader_config here = trainer_loader_config(p->tc, o->mode == MODE_DP, p->replicas, 0);
		long total = trainer_total_steps(ctl, loader_epoch_length(p->ds->n, &here), p->tc->grad_accum,
						 p->tc->epochs, p->tc->max_steps);

		if (total > pos.schedule_steps)
			return agree(p, diag_set(p->d, ST_USAGE,
					"--resume: %s: its --lr-schedule=%s is %ld optimizer steps long (written by %d replicas), but with %d replica%s the epochs left take this run to step %ld, past the schedule's end; resume it with %d replicas or more",
					o->resume, schedule_names[p->tc->schedule], pos.schedule_steps, pos.world,
					p->replicas, p->replicas == 1 ? "" : "s", total, pos.world));
	}
	/* Every rank has pos: the same verdict everywhere, no agreement needed. */
	if (pos.epoch >= o->epochs || (o->max_steps > 0 && pos.step >= o->max_steps)) {
		/* Nothing to train, but --save still gets the finished weights: a batch script
		 * that retries a run killed after its last checkpoint must not lose the model. */
		world_expect_wait(p->w, "the --save write on rank 0");
		if (o->save != NULL && p->w->rank == 0)
			st = persist_save_weights(m, o->save, "--save", pos.step, p->tc, NULL, &p->progress,
						  p->d);
		st = agree(p, st);
		if (st != ST_OK)
			return st;
		report_note(p->r, "--resume: %s is complete (step %ld, %s): nothing to do%s", o->resume,
			    pos.step, pos.epoch >= o->epochs ? "all --epochs done" : "--max-steps reached",
			    o->save ? "; --save written from it" : "");
		return ST_STOP;
	}
	report_note(p->r, "resumed from %s: step %ld, epoch %ld, micro-batch %ld (written by %d replica%s)",
		    o->resume, pos.step, pos.epoch + 1, pos.next_mb, pos.world, pos.world == 1 ? "" : "s");
	return st;
}

enum status persist_stage_save(struct persist *p, long steps)
{
	enum status st = ST_OK;

	world_expect_wait(p->w, "the --save write on rank 0");
	if (p->o->save != NULL && p->w->rank == 0)
		st = persist_save_weights(p->m, p->o->save, "--save", steps, p->tc, &p->saved, &p->progress,
					  p->d);
	return agree(p, st);
}

enum status persist_commit(struct persist *p)
{
	if (p->w->rank == 0 && p->o->save != NULL)
		return st_commit(&p->saved, p->d);
	return ST_OK;
}

void persist_free(struct persist *p)
{
	st_discard(&p->saved);
	checkpoint_rotation_free(&p->kept);
	free(p->ckpt_host);
	p->ckpt_host = NULL;
}
