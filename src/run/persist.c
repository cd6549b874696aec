/* persist.c - starting weights, checkpoints, --resume, --save-best and --save. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h> /* access */

#include "run/persist.h"
#include "run/settings.h" /* settings_resume_text */
#include "model/schedule.h" /* schedule_names */
#include "model/zero.h"   /* zero_cut */

static enum status agree(struct persist *p, enum status st)
{
	return agreement_reach(&p->ag, st);
}

/* Whether arena k is a ZeRO shard on each rank: the optimizer state with --zero (ddp),
 * the parameters too with --zero=3. */
static int sharded(const struct persist *p, int k)
{
	return p->o->zero > (k == 0 ? 2 : 0) && p->o->mode == MODE_DDP;
}

/* Whether any arena is a shard. */
static int any_sharded(const struct persist *p)
{
	return sharded(p, p->m->narenas - 1);
}

/* Rank 0: the arenas whole on every rank, to host (laid out as model_state_to_host lays
 * out all of them), or (to_device) back from it. */
static enum status whole_arenas(struct persist *p, float *host, int to_device, struct diag *d)
{
	struct model *m = p->m;
	enum status st = ST_OK;

	for (int k = 0; k < m->narenas && st == ST_OK; k++) {
		float *at = host + model_state_floats(m, 0, k);

		if (sharded(p, k))
			continue;
		if (to_device)
			model_state_to_device(m, k, k + 1, at);
		else
			st = model_state_to_host(m, k, k + 1, at, d);
	}
	return st;
}

/* The pieces a sharded arena moves in, floats: the whole arena at once, or under ZeRO-3,
 * whose point is that no rank holds a whole one, a layer's worth at a time. */
static size_t piece_floats(const struct persist *p)
{
	const struct model *m = p->m;
	size_t most = 1;

	if (p->o->zero < 3)
		return m->ntrainable > most ? m->ntrainable : most;
	for (int l = 0; l < m->nlayers; l++) {
		size_t lf = (size_t)m->widths[l + 1] * (size_t)(m->widths[l] + 1);

		most = lf > most ? lf : most;
	}
	return most;
}

/* A device buffer of `n` floats on every rank, for as long as one move of the state takes
 * (not held: it is what ZeRO saves); agreed, so no rank enters the collective alone. */
static enum status state_scratch(struct persist *p, size_t n, float **scratch)
{
	const struct backend *be = p->m->be;

	*scratch = be->ops->alloc(be->ctx, n);
	if (!world_all(p->w, *scratch != NULL)) {
		be->ops->free(be->ctx, *scratch);
		*scratch = NULL;
		return diag_set(p->d, ST_RUNTIME, "out of %s memory for the state of a checkpoint (%zu floats)",
				be->ops->name, n);
	}
	return ST_OK;
}

/* Arena k's piece [a, a + n) and this rank's part of it: the cuts of every rank's part within
 * the piece (size + 1), and where this rank's part of the piece is in its shard (*at) and
 * how long (*len). */
static void piece_cuts(const struct persist *p, int k, size_t a, size_t n, size_t *cuts, size_t *at,
		       size_t *len)
{
	const struct model_arena *ar = &p->m->arena[k];
	const size_t lo = ar->first > a ? ar->first : a;
	const size_t hi = ar->first + ar->len < a + n ? ar->first + ar->len : a + n;

	for (int q = 0; q <= p->w->size; q++) {
		size_t c = zero_arena_cut(p->m, k, p->o->zero, q, p->w->size);

		cuts[q] = c <= a ? 0 : c - a >= n ? n : c - a;
	}
	*at = lo - ar->first;
	*len = hi > lo ? hi - lo : 0;
}

/* ZeRO: the sharded arenas of [0, last) between rank 0's host (each whole at its place
 * in host, laid out as model_state_to_host lays them out) and every rank's shard, a piece
 * at a time through a scratch of the piece. gather: onto rank 0's host -- a sharded
 * arena's shards are contiguous in rank order, so the all-gather of each rank's part of
 * a piece IS the piece; else from it, each rank keeping its part of the broadcast piece.
 * Collective. */
static enum status move_arenas(struct persist *p, float *host, int last, int gather)
{
	struct model *m = p->m;
	const struct backend_ops *ops = m->be->ops;
	const size_t piece = piece_floats(p);
	size_t *cuts = malloc((size_t)(p->w->size + 1) * sizeof *cuts);
	float *scratch;
	enum status st = state_scratch(p, piece, &scratch), host_st = ST_OK;

	if (st == ST_OK && !world_all(p->w, cuts != NULL))
		st = diag_set(p->d, ST_RUNTIME, "out of memory for checkpoint buffers");
	for (int k = 0; k < last && st == ST_OK; k++) {
		const size_t whole = m->arena[k].whole, base = model_state_floats(m, 0, k);

		for (size_t a = 0; a < whole && sharded(p, k) && st == ST_OK; a += piece) {
			const size_t n = whole - a < piece ? whole - a : piece;
			float *mine;
			size_t at, len;

			piece_cuts(p, k, a, n, cuts, &at, &len);
			mine = scratch + cuts[p->w->rank];
			if (!gather) {
				if (p->w->rank == 0)
					ops->to_device(m->be->ctx, scratch, host + base + a, n);
				st = comm_bcast(p->c, scratch, n, 0, p->d);
				if (st == ST_OK && len > 0)
					ops->copy(m->be->ctx, m->arena[k].data + at, mine, len);
				if (st == ST_OK) /* the scratch is refilled for the next piece */
					st = ops->sync(m->be->ctx, p->d);
				continue;
			}
			if (len > 0)
				ops->copy(m->be->ctx, mine, m->arena[k].data + at, len);
			world_watch_begin(p->w, "the state all-gather of a checkpoint");
			st = comm_all_gather_start(p->c, scratch, n, cuts, p->d);
			if (st == ST_OK)
				st = comm_wait_all(p->c, p->d);
			/* the host waits here, watched: a read into pageable memory (host) queued
			 * behind the all-gather would block inside the driver, where a dead peer is
			 * never noticed */
			if (st == ST_OK)
				st = ops->sync(m->be->ctx, p->d);
			world_watch_end(p->w);
			/* rank 0's own failure must not leave the others in the next piece's
			 * all-gather: it goes on, and reports it at the end */
			if (st == ST_OK && p->w->rank == 0 && host_st == ST_OK)
				host_st = ops->to_host(m->be->ctx, host + base + a, scratch, n, p->d);
		}
	}
	ops->free(m->be->ctx, scratch);
	free(cuts);
	return st != ST_OK ? st : host_st;
}

/* The weights onto rank 0's host (nparams floats): copied there, or under ZeRO-3 gathered
 * from every rank's window (collective: every rank calls it). */
static enum status weights_to_host(struct persist *p, float *host)
{
	if (sharded(p, 0))
		return move_arenas(p, host, 1, 1);
	return p->w->rank == 0 ? model_state_to_host(p->m, 0, 1, host, p->d) : ST_OK;
}

enum status persist_save_weights(struct persist *p, const char *path, const char *flag, long step,
				 struct st_pending *stage)
{
	const struct train_config *tc = p->tc;
	const int best = strcmp(flag, "--save-best") == 0;
	float *host = p->w->rank == 0 ? malloc(p->m->nparams * sizeof *host) : NULL;
	enum status st = ST_OK;

	if (p->w->rank == 0 && host == NULL)
		st = diag_set(p->d, ST_RUNTIME, "%s: out of memory", flag);
	if (sharded(p, 0) && !world_all(p->w, st == ST_OK)) /* no rank enters the gather alone */
		st = st != ST_OK ? st : diag_set(p->d, ST_PEER, "%s: rank 0 is out of memory", flag);
	if (st == ST_OK)
		st = weights_to_host(p, host);
	/* The weights are rank 0's to write, a stop waits for them: the others wait in the
	 * caller's agreement, hearing of its progress. */
	world_expect_wait(p->w, best ? "the --save-best write on rank 0" : "the --save write on rank 0");
	if (p->w->rank != 0 || st != ST_OK) {
		free(host);
		return st;
	}
	/* Data and starting weights were checked finite when loaded: this is divergence. */
	if (!model_all_finite(host, p->m->nparams) && trainer_fp16_overflow(tc) != NULL)
		st = diag_set(p->d, ST_RUNTIME, "the weights are not finite after step %ld %s (%s: %s was not written)",
			      step, trainer_fp16_overflow(tc), flag, path);
	else if (!model_all_finite(host, p->m->nparams))
		st = diag_set(p->d, ST_RUNTIME, "training diverged: the weights are not finite after step %ld; lower --lr (%s: %s was not written)",
			      step, flag, path);
	else if (stage != NULL)
		st = checkpoint_stage_weights(path, flag, p->m, host, stage, &p->progress, p->d);
	else
		st = checkpoint_write_weights(path, flag, p->m, host, &p->progress, p->d);
	free(host);
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
	 * at another world size), gathered first; the arenas whole on every rank from rank 0 */
	if (any_sharded(p))
		st = move_arenas(p, p->ckpt_host, p->m->narenas, 1);
	/* Waiting for rank 0 to write a big checkpoint is not a stall, even when stopping: the
	 * others wait in the agreement, hearing of its progress. */
	world_expect_wait(p->w, "the checkpoint write on rank 0");
	if (p->w->rank == 0 && st == ST_OK) {
		settings_resume_text(p->o, p->ds, text, sizeof text);
		st = whole_arenas(p, p->ckpt_host, 0, d);
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
	st = persist_save_weights(p, p->o->save_best, "--save-best", step, NULL);
	if (st == ST_OK && p->w->rank == 0)
		report_note(p->r, "--save-best: %s now holds the weights after step %ld (validation loss %.6f)",
			    p->o->save_best, step, loss);
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
	float *host = NULL;

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
	}
	world_expect_wait(p->w, "the --init read on rank 0");
	st = agree(p, st);
	/* ZeRO-3: each rank its window of them (else the session broadcasts them whole) */
	if (st == ST_OK && p->o->resume == NULL && sharded(p, 0))
		st = agree(p, move_arenas(p, host, 1, 0));
	free(host);
	return st;
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
			whole_arenas(p, p->ckpt_host, 1, p->d);
			st = m->be->ops->sync(m->be->ctx, p->d);
		}
	}
	world_expect_wait(p->w, "the checkpoint read on rank 0");
	st = agree(p, st);
	if (st == ST_OK)
		st = agree(p, world_bcast(p->w, &pos, sizeof pos, 0, p->d));
	if (st == ST_OK && any_sharded(p)) /* ZeRO: each rank its shard of what is sharded */
		st = agree(p, move_arenas(p, p->ckpt_host, m->narenas, 0));
	for (int k = 1; k < m->narenas && st == ST_OK && !sharded(p, k); k++) /* the optimizer's state */
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
		if (o->save != NULL)
			st = persist_save_weights(p, o->save, "--save", pos.step, NULL);
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

	if (p->o->save != NULL)
		st = persist_save_weights(p, p->o->save, "--save", steps, &p->saved);
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
