/*
 * ddp.c - one ddp rank's training state: its set-up (the pinned read-back buffers, the
 * gradient sync, graphs or not), what the run header says of the plan, the callbacks
 * the after-step work calls (evaluation, settling the weights), the result and the
 * teardown. The loop is trainer_ddp.c; the step, ddp_step.c.
 */
#include <string.h>

#include "train/ddp.h"

/* trainer_after_step's eval: every rank its share of the validation set, then the sums. */
enum status ddp_eval(void *arg, long step, long epoch)
{
	struct ddp *t = arg;
	double loss = 0.0, acc = 0.0;
	long span = trace_begin(t->sync.tb, TR_VALIDATION, -1);
	enum status st;

	grad_sync_validating(&t->sync, 1);
	st = trainer_evaluate(t->tc, t->m, t->ctl->val, t->w->rank, t->w->size, t->c, t->w, &t->sync.hooks, &loss, &acc,
			      t->d);
	grad_sync_validating(&t->sync, 0);
	trace_end(t->sync.tb, span);
	if (st != ST_OK)
		return st;
	report_eval(t->r, step, epoch + 1, loss, acc, t->ctl->val->n);
	return t->ctl->evaluated ? t->ctl->evaluated(t->ctl->arg, step, epoch, loss, t->d) : ST_OK;
}

/* train_loop's settle: what still changes the weights completes. */
enum status ddp_settle(void *arg)
{
	struct ddp *t = arg;

	return t->sync.ops->settle != NULL ? t->sync.ops->settle(&t->sync) : ST_OK;
}

/* train_loop's check: the weights settled (ZeRO's all-gathers), then compared. */
enum status ddp_check(void *arg, long step)
{
	struct ddp *t = arg;
	enum status st = ddp_settle(t);

	return st == ST_OK ? replicas_check(&t->rep, step, t->d) : st;
}

/* What the run header says of the plan. */
void ddp_describe(const struct ddp *t, long steps_per_epoch)
{
	const struct grad_sync *s = &t->sync;
	const struct grad_plan *p = s->p;
	const struct train_config *tc = t->tc;
	const struct model *m = t->m;

	report_note(t->r, "buckets: %d (cap %.3g MiB%s), %ld steps per epoch, %ld steps in all", s->nbuckets,
		    tc->bucket_mb, s->ops->bucket_note, steps_per_epoch, t->total);
	if (s->ops->describe != NULL)
		s->ops->describe(s, t->r, tc->bucket_mb);
	if (t->graphs_why != NULL)
		report_note(t->r, "CUDA graphs off: %s; steps run eagerly", t->graphs_why);
	if (tc->compress)
		report_note(t->r, "gradients all-reduced in %s (--grad-compress); loss, stop flag, clipping norm, validation and parameters in fp32",
			    comm_wire_names[t->c->wire]);
	if (p->reduced < m->nparams + MODEL_SLOTS)
		report_note(t->r, "frozen layers: %zu of %zu parameters trained and all-reduced",
			    p->reduced - MODEL_SLOTS, m->nparams);
	replicas_describe(&t->rep, t->r);
}

/* Free what ddp_setup made (each part may be NULL); safe twice. */
void ddp_free(struct ddp *t)
{
	const struct backend_ops *ops = t->m->be->ops;

	grad_sync_free(&t->sync);
	replicas_free(&t->rep);
	ops->host_free(t->m->be->ctx, t->stop_host);
	ops->host_free(t->m->be->ctx, t->slots);
	t->stop_host = t->slots = NULL;
}

/* The pinned read-back buffers and the gradient sync, on every rank or on none: a rank
 * that cannot start must not leave the others waiting in step 1's all-reduce until
 * --timeout. */
enum status ddp_setup(struct ddp *t, const struct grad_plan *p)
{
	const struct backend_ops *ops = t->m->be->ops;
	const struct train_config *tc = t->tc;
	enum status st = ST_OK;

	/* The step's read comes after its collectives on the device: into pageable memory it
	 * would block inside the driver until they end, where a dead peer is never noticed;
	 * into pinned memory the backend's wait watches the communicator. */
	t->stop_host = ops->host_alloc(t->m->be->ctx, LOADER_BUFFERS);
	t->slots = ops->host_alloc(t->m->be->ctx, 2 * MODEL_SLOTS);
	if (t->stop_host == NULL || t->slots == NULL)
		st = diag_set(t->d, ST_RUNTIME, "trainer: out of host memory");
	if (st == ST_OK)
		st = grad_sync_init(&t->sync, &(struct grad_sync_cfg){tc->overlap, tc->compress}, p, t->m, t->c,
				    t->w, t->res, t->d);
	if (st == ST_OK)
		st = replicas_init(&t->rep, t->m, t->w, tc->check_replicas, t->sync.ops->replicated,
				   t->sync.ops->name, t->d);
	replicas_gather_from(&t->rep, &t->sync);
	if (!world_all(t->w, st == ST_OK)) {
		ddp_free(t);
		return st != ST_OK ? st : diag_set(t->d, ST_PEER, "another rank could not start training");
	}
	for (int i = 0; i < LOADER_BUFFERS; i++)
		t->stop_host[i] = 0.0f;
	for (int k = 0; k < t->sync.nbuckets; k++) {
		t->res->buckets[k].bytes = (double)t->sync.bucket[k].len * sizeof(float);
		t->res->buckets[k].lo = t->sync.bucket[k].lo;
		t->res->buckets[k].hi = t->sync.bucket[k].hi;
	}
	t->res->nbuckets = t->sync.nbuckets;
	/* what sync.c's observer leaves out of the bucket figures, the whole run long */
	if (!t->sync.ops->times_buckets)
		t->res->untimed = t->sync.ops->untimed;
	/* Steps can be device graphs with a backend that records them and a communicator whose
	 * collectives can be recorded (NCCL), for whole, single-micro-batch steps, where the
	 * strategy can be recorded too. */
	t->graphs = ops->graph_begin != NULL && ops->graph_reset != NULL && t->c->ops->capturable &&
		    tc->grad_accum == 1 && tc->graphs && trainer_step_is_fixed(tc, t->opt);
	t->graphs_why = t->graphs ? t->sync.ops->uncapturable : NULL; /* said in the run header */
	t->graphs = t->graphs && t->graphs_why == NULL;
	t->graph_off = !t->graphs;
	return ST_OK;
}

/* What the result says of this rank at the end. */
void ddp_result(const struct ddp *t, long step, double seconds, double consumed)
{
	struct train_result *res = t->res;
	const struct model *m = t->m;
	const size_t pool = t->sync.p->cfg.zero >= 2 ? t->sync.p->poolb[0] + t->sync.p->poolb[1] : 0;

	res->steps = step;
	res->seconds = seconds;
	res->wait_s = t->sync.wait;
	res->samples = consumed * t->w->size;
	res->nreplicas = 1;
	res->rep[0].wait_s = t->sync.wait;
	res->rep[0].compute_s = res->seconds - t->sync.wait;
	/* what its collectives sent, validation's and checkpoints' included (as a ring sends) */
	res->rep[0].bytes_in = res->rep[0].bytes_out = t->c->sent_bytes - t->sent0;
	res->rep[0].state_bytes = m->bytes;
	res->rep[0].param_bytes = m->arena[0].len * sizeof(float);
	/* what the collectives work through apart (ZeRO-2/3's two gradient buffers, ZeRO-3's
	 * gathered layers), from what the rank keeps (the gradient, or its shard) */
	res->rep[0].work_bytes = (m->work_floats + pool) * sizeof(float);
	res->rep[0].grad_bytes = (m->gfloats - pool) * sizeof(float);
	res->rep[0].flops = t->flops;
	res->rep[0].dev_peak_bytes = m->be->ops->mem_used(m->be->ctx); /* a GPU's peak; 0 on the CPU */
	for (int k = 1; k < m->narenas; k++)
		res->rep[0].optim_bytes += m->arena[k].len * sizeof(float);
}

/* The end of the run: the last all-gathers, the last step's spans, the device idle, the
 * graphs before the communicator (NCCL's destroy waits for every graph that holds one of
 * its collectives). */
enum status ddp_teardown(struct ddp *t, enum status st)
{
	const struct backend_ops *ops = t->m->be->ops;

	if (st == ST_OK) /* the weights are read now: the last all-gathers complete */
		st = ddp_settle(t);
	comm_observe(t->c, NULL);
	if (t->ctl->trace != NULL && t->ctl->trace->path != NULL)
		trace_resolve(&t->ctl->trace->buf[0]); /* the last step's checkpoint, on a device clock */
	t->m->trace = NULL;
	if (st == ST_OK)
		st = ops->sync(t->m->be->ctx, t->d);
	if (t->graphs)
		ops->graph_reset(t->m->be->ctx);
	return st;
}

