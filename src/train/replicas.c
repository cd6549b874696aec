/* replicas.c - the replica check: each rank's replicated state hashed where it lives,
 * the digests compared across the ranks, and a mismatch named. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash64.h"  /* hash64_mix: the tensors' digests into one */
#include "train/replicas.h"
#include "train/sync.h"   /* SYNC_SAME_* */

#define REPLICAS_NAMED 6 /* ranks a message names before "and K more" */

enum status replicas_init(struct replicas *x, struct model *m, struct world *w, long every,
			  unsigned what, const char *strategy, struct diag *d)
{
	const struct backend_ops *ops = m->be->ops;
	/* the arenas compared: the parameters (arena 0), and the state arenas after them */
	const int last = (what & SYNC_SAME_STATE) ? m->narenas : (what & (SYNC_SAME_PARAMS | SYNC_SAME_GATHERED)) ? 1 : 0;

	*x = (struct replicas){.m = m, .w = w, .every = every, .what = what, .strategy = strategy};
	if (!replicas_on(x))
		return ST_OK;
	x->t = malloc((size_t)(last * model_tensors_per_arena(m)) * sizeof *x->t);
	if (x->t != NULL)
		x->ntensors = model_state_dict(m, 0, last, x->t);
	x->dev = ops->alloc(m->be->ctx, 2 * (size_t)x->ntensors);
	/* read behind the device's queue: pinned (backend.h's to_host) */
	x->host = ops->host_alloc(m->be->ctx, 2 * (size_t)x->ntensors);
	x->vote = calloc((size_t)w->size, sizeof *x->vote);
	x->rec = calloc((size_t)w->size, REPLICAS_HOST + 8 * (size_t)x->ntensors);
	if (x->t == NULL || x->dev == NULL || x->host == NULL || x->vote == NULL || x->rec == NULL) {
		replicas_free(x);
		return diag_set(d, ST_RUNTIME, "--check-replicas: out of memory for %d tensors' digests of %d ranks",
				last * model_tensors_per_arena(m), w->size);
	}
	return ST_OK;
}

void replicas_gather_from(struct replicas *x, struct grad_sync *s)
{
	x->sync = s;
}

int replicas_on(const struct replicas *x)
{
	return x->every > 0 && x->w->size > 1 && x->what != 0;
}

void replicas_describe(const struct replicas *x, struct report *r)
{
	const int state = x->m->narenas > 1; /* the optimizer keeps state (SGD without momentum none) */
	char every[48];

	if (x->every == 0 || x->w->size == 1)
		return;
	if (x->what == 0) {
		report_note(r, "replica check: nothing to compare: the %s strategy keeps no state on more than one rank between steps (each holds its own shard)",
			    x->strategy);
		return;
	}
	if (x->every == 1)
		snprintf(every, sizeof every, "every step");
	else
		snprintf(every, sizeof every, "every %ld steps", x->every);
	if (x->what & SYNC_SAME_GATHERED) {
		report_note(r, "replica check: %s and before any weights are written: each layer's all-gathered parameters (%d tensors) hashed where they live and compared bit for bit across the %d ranks; each rank's window of the parameters, gradient shard and optimizer state are its own: not compared",
			    every, x->ntensors, x->w->size);
		return;
	}
	report_note(r, "replica check: %s and before any weights are written: %s (%d tensors) hashed where they live and compared bit for bit across the %d ranks%s",
		    every, state && (x->what & SYNC_SAME_STATE) ? "the parameters and the optimizer state" : "the parameters",
		    x->ntensors, x->w->size,
		    state && !(x->what & SYNC_SAME_STATE) ? "; the optimizer state is sharded (each rank's own): not compared" : "");
}

/* Rank q's record of a mismatch: its host name, then its tensors' digests. */
static unsigned char *record(const struct replicas *x, int q)
{
	return x->rec + (size_t)q * (REPLICAS_HOST + 8 * (size_t)x->ntensors);
}

/* Rank q's digest of tensor i, from its record. */
static uint64_t tensor_digest(const struct replicas *x, int q, int i)
{
	uint64_t h;

	memcpy(&h, record(x, q) + REPLICAS_HOST + 8 * (size_t)i, sizeof h);
	return h;
}

/* Append "rank q (host H)" for the ranks q whose digest is (same) or is not (!same) the
 * reference's: REPLICAS_NAMED of them, then how many more. */
static void name_ranks(const struct replicas *x, uint64_t ref, int same, char *buf, size_t len)
{
	size_t used = strlen(buf);
	int n = 0;

	for (int q = 0; q < x->w->size && used < len; q++) {
		if ((x->vote[q].digest == ref) != same)
			continue;
		if (n < REPLICAS_NAMED)
			used += (size_t)snprintf(buf + used, len - used, "%srank %d (host %.*s)", n ? ", " : "", q,
						 REPLICAS_HOST, (const char *)record(x, q));
		n++;
	}
	if (n > REPLICAS_NAMED && used < len)
		snprintf(buf + used, len - used, " and %d more", n - REPLICAS_NAMED);
}

/* The verdict on a mismatch, the same on every rank: every rank's per-tensor digests and
 * host gathered, the reference (the digest most ranks hold; the lowest rank's on a tie),
 * the ranks that differ from it and the first tensor in which any of them does. */
static enum status mismatch(struct replicas *x, long step, struct diag *d)
{
	const int size = x->w->size;
	unsigned char *mine = record(x, x->w->rank);
	int ref = 0, most = 0, first = x->ntensors, differ = 0;
	char who[320] = "";
	enum status st;

	snprintf((char *)mine, REPLICAS_HOST, "%s", x->w->host);
	memcpy(mine + REPLICAS_HOST, x->host, 8 * (size_t)x->ntensors);
	st = world_allgather(x->w, mine, REPLICAS_HOST + 8 * (size_t)x->ntensors, x->rec,
			     "the replica check's mismatch report", d);
	if (st != ST_OK)
		return st;
	for (int q = 0; q < size; q++) {
		int n = 0;

		for (int k = 0; k < size; k++)
			n += x->vote[k].digest == x->vote[q].digest;
		if (n > most) {
			most = n;
			ref = q;
		}
	}
	for (int q = 0; q < size; q++) {
		if (x->vote[q].digest == x->vote[ref].digest)
			continue;
		differ++;
		for (int i = 0; i < first; i++)
			if (tensor_digest(x, q, i) != tensor_digest(x, ref, i))
				first = i;
	}
	if (2 * most > size) { /* a majority: the others are the suspects */
		name_ranks(x, x->vote[ref].digest, 0, who, sizeof who);
		return diag_set(d, ST_RUNTIME, "replica check after step %ld: %s %s other values than the %d of %d ranks that agree, first in %s: a rank computing wrong values (silent data corruption, a faulty device)? Stopped before anything is written from this state: an earlier checkpoint stays as it was",
				step, who, differ > 1 ? "hold" : "holds", most, size,
				first < x->ntensors ? x->t[first].name : "the folded digest");
	}
	/* No majority (always so at 2 ranks): every rank is named, which is wrong is unknown. */
	name_ranks(x, x->vote[ref].digest, 1, who, sizeof who);
	strncat(who, " against ", sizeof who - strlen(who) - 1);
	name_ranks(x, x->vote[ref].digest, 0, who, sizeof who);
	return diag_set(d, ST_RUNTIME, "replica check after step %ld: no majority of the %d ranks agrees, so which is wrong cannot be told: %s, first in %s: a rank computing wrong values (silent data corruption, a faulty device)? Stopped before anything is written from this state: an earlier checkpoint stays as it was",
			step, size, who, first < x->ntensors ? x->t[first].name : "the folded digest");
}

enum status replicas_check(struct replicas *x, long step, struct diag *d)
{
	const struct backend_ops *ops = x->m->be->ops;
	void *bc = x->m->be->ctx;
	struct replica_vote mine = {0};
	struct diag own = {0};
	enum status st;
	int failed = 0;

	/* Every tensor's digest on the device, then the 8 bytes of each read back at once. The
	 * arenas compared are whole on every rank (first 0): t->off is the place in data; or
	 * (SYNC_SAME_GATHERED) the parameters' layers, weight and bias, each as gathered. */
	for (int i = 0; i < x->ntensors && (own.st == ST_OK || (x->what & SYNC_SAME_GATHERED)); i++) {
		const struct model_tensor *t = &x->t[i];
		const float *at = x->m->arena[t->arena].data + t->off;

		if (x->what & SYNC_SAME_GATHERED) {
			const int l = i / 2; /* the state dict's order: each layer's weight, then its bias */
			const float *layer;

			struct diag dummy = {0};

			/* after a failure every layer is still asked for: each is a collective */
			x->sync->d = own.st == ST_OK ? &own : &dummy;
			layer = x->sync->ops->gathered(x->sync, l);
			x->sync->d = d;
			if (layer == NULL || own.st != ST_OK)
				continue;
			at = layer + (t->off - x->m->w_off[l]);
		}
		ops->hash64(bc, x->dev + 2 * i, at, t->len, 0);
	}
	st = own.st != ST_OK ? own.st : ops->to_host(bc, x->host, x->dev, 2 * (size_t)x->ntensors, &own);
	for (int i = 0; st == ST_OK && i < x->ntensors; i++) {
		uint64_t h;

		memcpy(&h, x->host + 2 * i, sizeof h);
		mine.digest = hash64_mix(mine.digest ^ h);
	}
	mine.failed = st != ST_OK;
	/* a rank whose digest failed still takes part, or the others would wait for it */
	st = world_allgather(x->w, &mine, sizeof mine, x->vote, "the replica check", d);
	if (st != ST_OK)
		return st;
	x->checks++;
	for (int q = 0; q < x->w->size; q++)
		failed |= x->vote[q].failed;
	if (mine.failed) {
		*d = own;
		return own.st;
	}
	if (failed)
		return diag_set(d, ST_PEER, "another rank could not make its replica check's digest");
	for (int q = 1; q < x->w->size; q++)
		if (x->vote[q].digest != x->vote[0].digest)
			return mismatch(x, step, d);
	return ST_OK;
}

void replicas_free(struct replicas *x)
{
	if (x->m != NULL) {
		const struct backend_ops *ops = x->m->be->ops;

		if (x->dev != NULL)
			ops->free(x->m->be->ctx, x->dev);
		if (x->host != NULL)
			ops->host_free(x->m->be->ctx, x->host);
	}
	free(x->t);
	free(x->vote);
	free(x->rec);
	x->t = NULL;
	x->dev = x->host = NULL;
	x->vote = NULL;
	x->rec = NULL;
}
