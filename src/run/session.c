/* session.c - one run: set up, train, save, summarise, tear down, agreeing after each phase. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_open.h"  /* comm_open */
#include "run/overview.h"
#include "run/preflight.h"
#include "run/session.h"
#include "run/settings.h"    /* settings_config_text, SETTINGS_TEXT_MAX */
#include "model/zero.h"      /* zero_plan_init */

_Static_assert(OPT_MAX_LAYERS == MODEL_MAX_LAYERS, "--layers and the model agree on the depth");
_Static_assert(OPT_MAX_REPLICAS == TRAIN_MAX_REPLICAS, "--replicas and the trainer agree");

enum status session_agree(struct session *s, enum status st)
{
	int reporter = 0;
	enum status all;

	if ((st == ST_RUNTIME || st == ST_USAGE) && s->d.st != ST_OK)
		world_failed(&s->w, s->d.msg);
	/* A rank that failed on its own in NCCL's world (its device, say) may leave the others
	 * waiting on theirs for a collective it will never join: they hear of it there, abort
	 * their communicators and come to agree at once, instead of at --timeout. */
	if (st == ST_RUNTIME && s->pl.comm == COMM_NCCL && s->c.ops != NULL)
		world_alarm(&s->w);
	all = world_agree(&s->w, st, &reporter);

	if (all != ST_OK && all != ST_STOP && all != ST_INTERRUPTED && reporter && !s->reported) {
		const char *msg = s->d.st != ST_OK ? s->d.msg : "failed";

		if (s->w.rank == 0)
			fprintf(stderr, "ddptrain: %s\n", msg);
		else
			fprintf(stderr, "ddptrain: rank %d: %s\n", s->w.rank, msg);
		fflush(stderr);
	}
	if (all == ST_STOP && reporter && !s->reported) {
		/* --help or --version, answered once, by the lowest rank that asked */
		if (s->o.help)
			options_print_help(stdout);
		else
			options_print_version(stdout);
		fflush(stdout);
	}
	if (all != ST_OK)
		s->reported = 1; /* the same failure, passed up, is not printed again */
	return all;
}

static enum status agree_cb(void *arg, enum status st)
{
	return session_agree(arg, st);
}

int session_replicas(const struct session *s)
{
	return s->o.mode == MODE_DP ? s->pl.replicas : s->w.size;
}

/* The training set and the validation set (the synthetic one continues the training
 * set's generator), each rank's share scanned for NaN and infinities. */
static enum status load_data(struct session *s)
{
	const struct options *o = &s->o;
	const int classify = o->loss == LOSS_CROSS_ENTROPY, in = o->widths[0], out = o->widths[o->nlayers];
	enum status st;

	if (o->inputs != NULL)
		st = data_init_npy(&s->ds, o->inputs, o->targets, 0, in, out, classify, &s->d);
	else
		st = data_init_synthetic(&s->ds, o->seed, 0, (size_t)o->samples, in, out, classify, &s->d);
	if (st == ST_OK && o->val_inputs != NULL)
		st = data_init_npy(&s->val, o->val_inputs, o->val_targets, 1, in, out, classify, &s->d);
	else if (st == ST_OK && o->val_samples > 0)
		st = data_init_synthetic(&s->val, o->seed, (uint64_t)o->samples, (size_t)o->val_samples, in, out,
					 classify, &s->d);
	st = session_agree(s, st);
	if (st == ST_OK)
		st = session_agree(s, preflight_finite(&s->ds, &s->w, &s->d));
	if (st == ST_OK && s->val.n > 0)
		st = session_agree(s, preflight_finite(&s->val, &s->w, &s->d));
	return st;
}

/* The gradient plan, from the layout alone: the memory check reads it before anything is
 * allocated, the model's ZeRO-2 block is made from it, the trainer runs it. */
static enum status plan_gradients(struct session *s)
{
	const struct options *o = &s->o;
	struct grad_plan_cfg cfg = {.zero = o->zero, .compress = s->tc.compress, .rank = s->w.rank,
				    .size = s->w.size};
	struct model lay;

	model_layout(&lay, o->widths, o->nlayers);
	model_freeze(&lay, o->frozen);
	trainer_bucket_caps(o->bucket_mb, &cfg.cap, &cfg.first_cap);
	return grad_plan_init(&s->plan, &lay, &cfg, &s->d);
}

/* The device, its backend, the model and its optimizer, the communicator. */
static enum status build_model(struct session *s)
{
	const struct options *o = &s->o;
	enum status st;

	st = session_agree(s, placement_decide(&s->pl, o, &s->w, &s->d));
	if (st == ST_OK)
		st = session_agree(s, plan_gradients(s));
	if (st == ST_OK)
		st = session_agree(s, preflight_memory(o, &s->hp, &s->pl, &s->w, &s->plan, &s->d));
	if (st != ST_OK)
		return st;
	s->cfg.device = s->pl.gpu;
	s->cfg.precision = o->precision;
	st = backend_init(&s->be, s->pl.device == DEVICE_CUDA ? s->pl.module.mod->backend : &backend_cpu_ops,
			  &s->cfg, &s->d);
	if (st == ST_OK) {
		/* ZeRO-2/3: the gradient's shard and the bucket buffers instead of all of it, before
		 * the communicator opens over the gradients' memory; ZeRO-3: this rank's window of
		 * the parameters and the working set the layers are gathered into */
		struct model_shard sh;

		grad_plan_shard(&s->plan, &sh);
		st = model_init_shard(&s->m, &s->be, o->widths, o->nlayers, (int)o->batch_size, &sh, &s->d);
	}
	if (st == ST_OK) {
		struct zero_plan z;

		model_freeze(&s->m, o->frozen); /* before the optimizer: no state for frozen layers */
		/* ZeRO: this rank's optimizer state is its shard of the trainable parameters */
		zero_plan_init(&z, &s->m, s->w.rank, s->w.size);
		st = optimizer_init(&s->opt, &s->m, &s->hp, o->zero > 0 ? &z : NULL, &s->d);
		/* ZeRO-2/3: the optimizer reads the gradient shard, after the pool buffers */
		if (st == ST_OK && o->zero >= 2)
			s->opt.grad_at = MODEL_SLOTS + 1 + s->plan.poolb[0] + s->plan.poolb[1];
	}
	st = session_agree(s, st);
	s->c.wire = o->grad_compress; /* read by the communicator's init */
	/* ZeRO-1/2's all-gathers complete every trainable parameter, all in flight at once;
	 * ZeRO-3's, a layer or two of the working set at a time (or a checkpoint's pieces of a
	 * layer), taken from the staging ring in turn: one layer more than two for its slack */
	s->c.outside = o->zero == 3 ? (GRAD_PLAN_GATHERED + 1) * s->plan.gather_floats : o->zero > 0 ? s->m.nparams : 0;
	if (st == ST_OK)
		st = session_agree(s, comm_open(&s->c, s->pl.comm, &s->w, &s->be, &s->pl.module, s->m.gmem,
						s->m.gfloats, preflight_later_bytes(o, &s->pl, &s->tc, &s->w, &s->ds),
						o->timeout, &s->d));
	if (st == ST_OK)
		st = session_agree(s, preflight_address_space(o, &s->pl, &s->tc, &s->w, &s->ds, &s->d));
	if (st == ST_OK && s->c.grads != NULL) /* the shared-memory all-reduce reads them where they are */
		model_move_grads(&s->m, s->c.grads);
	return st;
}

enum status session_setup(struct session *s)
{
	const struct options *o = &s->o;
	char text[SETTINGS_TEXT_MAX];
	enum status st;

	settings_apply(o, &s->hp, &s->tc);
	st = session_agree(s, preflight_outputs(o, &s->hp, s->w.rank, s->claims, &s->d));
	s->outputs_checked = st == ST_OK;
	if (st == ST_OK)
		st = load_data(s);
	if (st != ST_OK)
		return st;
	settings_config_text(o, &s->ds, text, sizeof text, 0);
	st = session_agree(s, world_check_config(&s->w, text, &s->d));
	if (st == ST_OK)
		st = build_model(s);
	if (st != ST_OK)
		return st;
	report_init(&s->r, s->w.rank == 0, o->quiet, o->log_seconds);
	s->per = (struct persist){.o = o, .tc = &s->tc, .ds = &s->ds, .m = &s->m, .w = &s->w, .c = &s->c, .r = &s->r,
				  .ag = {agree_cb, s}, .d = &s->d, .replicas = session_replicas(s)};
	persist_init(&s->per, &s->ctl);
	if (s->val.n > 0)
		s->ctl.val = &s->val;
	st = persist_start(&s->per);
	if (st == ST_OK && o->resume != NULL)
		st = persist_resume(&s->per, &s->ctl, &s->opt);
	if (st == ST_OK)
		st = persist_keep_start(&s->per, &s->ctl);
	if (st != ST_OK)
		return st;
	settings_config_text(o, &s->ds, text, sizeof text, 1);
	st = session_agree(s, report_open_metrics(&s->r, o->metrics, o->resume != NULL, text, &s->d));
	if (st != ST_OK)
		return st;
	/* Every replica starts from rank 0's weights (ZeRO-3: persist handed each rank its
	 * window of them). */
	if (!s->m.psharded) {
		world_watch_begin(&s->w, "the weight broadcast");
		st = comm_bcast(&s->c, s->m.params, s->m.nparams, 0, &s->d);
		world_watch_end(&s->w);
		st = session_agree(s, st);
	}
	if (st == ST_OK)
		st = session_agree(s, observers_init(&s->ob, o, session_replicas(s), &s->w, &s->ctl, &s->d));
	return st;
}

/* What the overview reads of s. */
static struct overview overview_of(struct session *s)
{
	return (struct overview){.o = &s->o, .pl = &s->pl, .be = &s->be, .c = &s->c, .w = &s->w, .m = &s->m,
				 .ds = &s->ds, .val = &s->val, .tc = &s->tc, .hp = &s->hp, .res = &s->res,
				 .strag = &s->ob.strag, .r = &s->r, .replicas = session_replicas(s)};
}

enum status session_run(struct session *s)
{
	const struct agreement ag = {agree_cb, s};
	struct report_summary sum = {0};
	struct replica_stats *ranks = NULL;
	struct straggler_rank *strag = NULL;
	double *rss = NULL;
	enum status st;

	const struct overview v = overview_of(s);

	overview_header(&v);
	/* a rank (or dp's main thread) stuck in a step ends at --timeout too */
	if (s->o.mode == MODE_DP) {
		world_watch_training(&s->w, "the main thread (replica 0, and the gather, loss, reduce and optimizer step)");
		st = trainer_dp(&s->tc, s->pl.replicas, &s->w, &s->m, &s->opt, &s->cfg, &s->ds, &s->ctl,
				&s->r, &s->res, &s->d);
	} else {
		world_watch_training(&s->w, "this rank");
		st = trainer_ddp(&s->tc, &s->plan, &s->w, &s->m, &s->opt, &s->c, &s->ds, &s->ctl, &s->r,
				 &s->res, &s->d);
	}
	world_watch_training(&s->w, NULL);
	st = session_agree(s, st);
	if (st == ST_OK)
		st = persist_stage_save(&s->per, s->res.steps);
	if (st == ST_OK) {
		ranks = calloc((size_t)s->w.size, sizeof *ranks);
		rss = calloc((size_t)s->w.size, sizeof *rss);
		strag = calloc((size_t)s->w.size, sizeof *strag);
		st = ranks && rss && strag ? overview_summary(&v, &sum, ranks, rss, strag, &s->d)
					   : diag_set(&s->d, ST_RUNTIME, "out of memory");
		st = session_agree(s, st);
	}
	/* The weights go into place only when training and its summary succeeded: a run that
	 * fails leaves no new --save file. */
	if (st == ST_OK) {
		st = report_finish(&s->r, &sum, 1, &s->d);
		if (st == ST_OK)
			st = persist_commit(&s->per);
		st = session_agree(s, st);
	}
	free(ranks);
	free(rss);
	free(strag);
	/* The observers' last files after the weights: the weights are the product, and a
	 * trace or metrics file that cannot be written costs the run its exit 0, not them. */
	return observers_finish(&s->ob, &s->o, session_replicas(s), &s->w, &s->ctl, &s->res, &s->r, st,
				&ag, &s->d);
}

void session_end(struct session *s, enum status st)
{
	/* Failed in the set-up: a refused run (exit 2) leaves its outputs alone. */
	if (s->outputs_checked && (st == ST_RUNTIME || st == ST_PEER))
		observers_end_early(&s->ob, &s->o, session_replicas(s), &s->w, &s->ctl, &s->res, &s->r, st);
	/* the trainers set res.total as training begins, res.steps as it ends */
	report_end(&s->r, status_exit_code(st),
		   st == ST_INTERRUPTED ? "stopped by a signal" : s->d.st != ST_OK ? s->d.msg : NULL,
		   s->res.total > 0 ? s->res.steps : -1);
	persist_free(&s->per);
	observers_free(&s->ob);
	report_free(&s->r);
	for (int i = 0; i < OPT_MAX_FILES; i++) /* the outputs are written or abandoned: free */
		outfile_release(&s->claims[i]);
	model_free(&s->m);
	grad_plan_free(&s->plan);
	comm_free(&s->c);
	backend_free(&s->be);
	data_free(&s->ds);
	data_free(&s->val);
	world_outcome(&s->w, status_exit_code(st));
	world_free(&s->w);
}
