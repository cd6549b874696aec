/* sync.c - choosing the gradient-sync strategy, the model hooks that lead to it, the
 * waits every strategy shares, and the communicator's observer. */
#include "core/clock.h"
#include "train/sync.h"
#include "train/trainer.h" /* struct train_result */

/* The model's hooks, each handing the pass to the strategy. */
static enum status hook_before_layer(void *arg, int l)
{
	struct grad_sync *s = arg;

	return s->ops->before_layer(s, l);
}

static enum status hook_before_backward(void *arg, int l)
{
	struct grad_sync *s = arg;

	return s->ops->before_backward(s, l);
}

static enum status hook_layer_done(void *arg, int l)
{
	struct grad_sync *s = arg;

	return s->ops->layer_done(s, l);
}

static float *hook_panel_dst(void *arg, int l, int j)
{
	struct grad_sync *s = arg;

	return s->ops->panel_dst(s, l, j);
}

static enum status hook_panel_done(void *arg, int l, int j)
{
	struct grad_sync *s = arg;

	return s->ops->panel_done(s, l, j);
}

/* The communicator's observer: each collective, launch to completion, into the trace and,
 * where the strategy times buckets and it carries one of the plan's (not validation), into
 * that bucket's figures. */
static void observe_done(void *arg, struct comm_tag tag, int index, size_t n, double t0, double t1)
{
	struct grad_sync *s = arg;
	struct trace_buf *tb = s->prev_tb;
	struct bucket_stats *b;

	/* NCCL's observer tells of a step's spans in a later step (the step before's, if it
	 * was traced: a traced step's results are read at once, so the device is past its
	 * collectives when the next begins); validation's are traced where they are told */
	static const int what[] = {[COMM_ALLREDUCE] = TR_ALLREDUCE, [COMM_REDUCE_SCATTER] = TR_REDUCE_SCATTER,
				   [COMM_ALL_GATHER] = TR_ALL_GATHER};
	/* an all-gather is named for the layer it brings, if one (ZeRO-3), else none */
	const int idx = tag.kind != COMM_ALL_GATHER ? index : tag.item;

	if (tag.step == s->step_tag || tag.step < 0) {
		trace_record(s->tb, what[tag.kind], idx, TRACE_ASYNC, t0, t1, (double)n * sizeof(float));
	} else if (tag.step == s->step_tag - 1 && tb != NULL) {
		const int32_t now = tb->step;

		tb->step = s->prev_step;
		trace_record(tb, what[tag.kind], idx, TRACE_ASYNC, t0, t1, (double)n * sizeof(float));
		tb->step = now;
	}
	if (!s->ops->times_buckets || tag.step < 0 || tag.item < 0 || tag.item >= s->nbuckets)
		return;
	b = &s->res->buckets[tag.item];
	b->count++;
	b->sum_s += t1 - t0;
	if (b->count == 1 || t1 - t0 < b->min_s)
		b->min_s = t1 - t0;
}

/* The strategies, most specific first: the first whose rule applies is run. */
static const struct grad_sync_ops *const sync_table[] = {&sync_zero3_ops, &sync_zero2_ops, &sync_zero1_ops,
							 &sync_stream_ops, &sync_buckets_ops};

enum status grad_sync_init(struct grad_sync *s, const struct grad_sync_cfg *cfg, const struct grad_plan *p,
			   struct model *m, struct comm *c, struct world *w, struct train_result *res,
			   struct diag *d)
{
	const struct grad_sync_ops *ops = NULL;
	enum status st;

	*s = (struct grad_sync){.p = p, .m = m, .c = c, .w = w, .res = res, .d = d, .overlap = cfg->overlap,
				.wire = cfg->compress ? COMM_WIRE : 0, .nbuckets = p->nbuckets, .bucket = p->bucket};
	for (size_t i = 0; i < sizeof sync_table / sizeof *sync_table && ops == NULL; i++)
		if (sync_table[i]->applies(s))
			ops = sync_table[i];
	s->ops = ops; /* the last entry, the buckets, applies to every plan */
	s->hooks = (struct model_hooks){
		.arg = s,
		.before_layer = ops->before_layer != NULL ? hook_before_layer : NULL,
		.before_backward = ops->before_backward != NULL ? hook_before_backward : NULL,
		.layer_done = ops->layer_done != NULL ? hook_layer_done : NULL,
		.panel_cap = p->cfg.cap,
		.panel_dst = ops->panel_dst != NULL ? hook_panel_dst : NULL,
		.panel_done = ops->panel_done != NULL ? hook_panel_done : NULL,
	};
	st = ops->init(s);
	if (st != ST_OK) {
		s->ops = NULL; /* init frees what it made when it fails */
		return st;
	}
	comm_observe(c, &(struct comm_observer){observe_done, s, &s->tag});
	return ST_OK;
}

void grad_sync_step(struct grad_sync *s, struct trace_buf *tb)
{
	s->prev_tb = s->tb;
	s->prev_step = s->step;
	s->tb = tb;
	s->step = tb != NULL ? tb->step : 0;
	s->tag = (struct comm_tag){++s->step_tag, -1, COMM_ALLREDUCE};
}

void grad_sync_validating(struct grad_sync *s, int on)
{
	s->tag = (struct comm_tag){on ? -1 : s->step_tag, -1, COMM_ALLREDUCE};
}

void grad_sync_free(struct grad_sync *s)
{
	if (s->ops == NULL)
		return;
	comm_observe(s->c, NULL);
	s->ops->free(s);
	s->ops = NULL;
}

/* The bracket of every wait: the watchdog watches `what`, the time counts as waiting, the
 * trace shows it. */
struct wait_mark {
	double t0;
	long span;
};

static struct wait_mark wait_begin(struct grad_sync *s, const char *what)
{
	struct wait_mark w = {clock_now(), trace_begin(s->tb, TR_WAIT, -1)};

	world_watch_begin(s->w, what);
	return w;
}

static void wait_end(struct grad_sync *s, struct wait_mark w)
{
	world_watch_end(s->w);
	trace_end(s->tb, w.span);
	s->wait += clock_now() - w.t0;
}

enum status sync_wait_all(struct grad_sync *s, const char *what)
{
	struct wait_mark w = wait_begin(s, what);
	enum status st = comm_wait_all(s->c, s->d);

	wait_end(s, w);
	s->gathering = 0;
	return st;
}

enum status sync_wait_first(struct grad_sync *s, int k, const char *what)
{
	struct wait_mark w = wait_begin(s, what);
	enum status st = comm_wait_first(s->c, k, s->d);

	wait_end(s, w);
	return st;
}

enum status sync_start_last(struct grad_sync *s, enum status (*start)(struct grad_sync *s, int k),
			    int k, const char *what)
{
	struct wait_mark w = wait_begin(s, what);
	enum status st = start(s, k);

	wait_end(s, w);
	return st;
}

enum status sync_wait_ticket(struct grad_sync *s, struct comm_ticket t, const char *what)
{
	struct wait_mark w;
	enum status st;

	if (comm_ticket_done(s->c, t))
		return ST_OK;
	w = wait_begin(s, what);
	st = comm_wait_ticket(s->c, t, s->d);
	wait_end(s, w);
	return st;
}

void sync_next_coll(struct grad_sync *s, int k, enum comm_coll kind)
{
	s->tag.item = k;
	s->tag.kind = kind;
}

enum status sync_all_gather_start(struct grad_sync *s, int k, float *buf, size_t n, const size_t *cuts)
{
	const struct comm_tag was = s->tag;
	enum status st;

	sync_next_coll(s, k, COMM_ALL_GATHER);
	st = comm_all_gather_start(s->c, buf, n, cuts, s->d);
	s->tag = was;
	return st;
}
