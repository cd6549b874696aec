/*
 * hostcoll.c - the table of host collective algorithms, the one place that
 * chooses among them, and the observer they all tell.
 */
#include <stddef.h> /* offsetof */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"     /* clock_now: the observer's times */
#include "core/half.h"      /* half_narrow, half_widen: the 16-bit mirror */
#include "comm/hostcoll.h"
#include "comm/ring.h"      /* RING_WINDOW: the most DDPTRAIN_RING_WINDOW can ask */

/* Every algorithm; the named ones in the order DDPTRAIN_ALLREDUCE's message lists them. */
static const struct hostcoll_ops *const algs[] = {
	&hostcoll_ring,
	&hostcoll_shm,
	&hostcoll_mpi,
	&hostcoll_hier,
};
#define NALGS ((int)(sizeof algs / sizeof algs[0]))

/* The numeric settings: variable, field, default and range. */
static const struct knob {
	const char *var;
	size_t field; /* offsetof(struct hostcoll_cfg, ...) */
	int def, lo, hi;
} knobs[] = {
	{"DDPTRAIN_RING_CHUNK_KB", offsetof(struct hostcoll_cfg, chunk_kb), 1024, 1, 1 << 20},
	{"DDPTRAIN_RING_WINDOW", offsetof(struct hostcoll_cfg, window), 8, 1, RING_WINDOW},
	{"DDPTRAIN_RING_MIN_KB", offsetof(struct hostcoll_cfg, min_kb), 64, 0, 1 << 22},
	{"DDPTRAIN_PANEL_MFLOP", offsetof(struct hostcoll_cfg, panel_mflop), 0, 0, 1 << 20},
};
#define NKNOBS ((int)(sizeof knobs / sizeof knobs[0]))

/* What rank 0's environment asks for, broadcast to every rank as bytes. */
struct asked {
	int alg;                 /* index in algs[], or -1: auto */
	struct hostcoll_cfg cfg;
	int bad;                 /* 0: all fine; 1: DDPTRAIN_ALLREDUCE; 2 + i: knobs[i] */
};

int hostcoll_obs_start(struct hostcoll_obs *o, size_t n)
{
	int k = o->started++;

	if (k < COMM_MAX_INFLIGHT) {
		/* Only all-reduces started while somebody watches are told (t0 < 0: not). */
		o->t0[k] = o->to.done != NULL ? clock_now() : -1.0;
		o->n[k] = n;
		o->tag[k] = comm_observer_tag(&o->to);
	}
	return k;
}

void hostcoll_obs_done(const struct hostcoll_obs *o, int order)
{
	if (o->to.done != NULL && order >= 0 && order < COMM_MAX_INFLIGHT && o->t0[order] >= 0)
		o->to.done(o->to.arg, o->tag[order], order, o->n[order], o->t0[order], clock_now());
}

int hostcoll_obs_watched(const struct hostcoll_obs *o)
{
	return o->to.done != NULL;
}

uint16_t *hostcoll_narrow(struct hostcoll_mirror *m, const float *buf, size_t n, struct diag *d)
{
	uint16_t *h;

	if (m->base == NULL || buf < m->base || buf + n > m->base + m->n) {
		diag_set(d, ST_RUNTIME, "internal: a 16-bit collective outside the gradients");
		return NULL;
	}
	if (m->h == NULL && (m->h = malloc((m->n ? m->n : 1) * sizeof *m->h)) == NULL) {
		diag_set(d, ST_RUNTIME, "comm: out of memory for the 16-bit gradients (%zu)", m->n);
		return NULL;
	}
	h = m->h + (buf - m->base);
	half_narrow(h, buf, n, comm_wire_half(m->wire));
	return h;
}

void hostcoll_widen(const struct hostcoll_mirror *m, float *dst, const uint16_t *h, size_t n)
{
	half_widen(dst, h, n, comm_wire_half(m->wire));
}

/* Read the settings from this rank's environment; a bad value leaves its default. */
static void asked_read(struct asked *e)
{
	const char *a = getenv("DDPTRAIN_ALLREDUCE");

	memset(e, 0, sizeof *e);
	e->alg = -1;
	if (a != NULL && *a != '\0' && strcmp(a, "auto") != 0) {
		for (int i = 0; i < NALGS && e->alg < 0; i++)
			if (algs[i]->name != NULL && strcmp(a, algs[i]->name) == 0)
				e->alg = i;
		e->bad = e->alg < 0;
	}
	for (int i = 0; i < NKNOBS; i++) {
		const char *v = getenv(knobs[i].var);
		int *field = (int *)((char *)&e->cfg + knobs[i].field);
		char *end;
		long x;

		*field = knobs[i].def;
		if (v == NULL || *v == '\0')
			continue;
		x = strtol(v, &end, 10);
		if (*end != '\0' || x < knobs[i].lo || x > knobs[i].hi)
			e->bad = e->bad ? e->bad : 2 + i;
		else
			*field = (int)x;
	}
}

/* The refusal of a bad setting: "DDPTRAIN_ALLREDUCE: want auto, ring, shm or mpi". */
static enum status asked_refuse(const struct asked *e, struct diag *d)
{
	char want[256] = "auto";
	int named = 0, seen = 0;
	size_t at;

	if (e->bad >= 2)
		return diag_set(d, ST_USAGE, "%s: want %d to %d", knobs[e->bad - 2].var,
				knobs[e->bad - 2].lo, knobs[e->bad - 2].hi);
	for (int i = 0; i < NALGS; i++)
		named += algs[i]->name != NULL;
	for (int i = 0; i < NALGS; i++) {
		if (algs[i]->name == NULL)
			continue;
		at = strlen(want);
		snprintf(want + at, sizeof want - at, "%s%s", ++seen == named ? " or " : ", ",
			 algs[i]->name);
	}
	return diag_set(d, ST_USAGE, "DDPTRAIN_ALLREDUCE: want %s", want);
}

/* Set up ops as a's algorithm and tell c what it needs. */
static enum status open_alg(struct hostcoll *a, const struct hostcoll_ops *ops,
			    struct hostcoll_setup *s, struct comm *c, struct diag *d)
{
	enum status st = ops->init(&a->ctx, s, d);

	if (st != ST_OK)
		return st;
	a->ops = ops;
	c->grads = s->grads;
	c->stream = ops->stream;
	return ST_OK;
}

enum status hostcoll_choose(struct hostcoll *a, struct comm *c, struct world *w, int host,
			    const float *base, size_t nfloats, size_t later_bytes,
			    struct hostcoll_obs *obs, struct diag *d)
{
	struct asked e = {.alg = -1};
	struct hostcoll_setup s = {w, &e.cfg, obs, base, nfloats, later_bytes, c->wire, &a->mirror,
				    NULL, 0};
	const struct hostcoll_ops *ops;
	struct diag tried = {0};
	enum status st;
	int rc;

	a->ops = NULL;
	a->ctx = NULL;
	a->mirror = (struct hostcoll_mirror){base, nfloats, c->wire, NULL};
	if (!host || w->size == 1) /* nothing to choose: no setting is read */
		return open_alg(a, &hostcoll_mpi, &s, c, d);
	asked_read(&e);
	rc = MPI_Bcast(&e, (int)sizeof e, MPI_BYTE, 0, w->comm);
	ops = e.alg >= 0 ? algs[e.alg] : NULL;
	if (rc == MPI_SUCCESS && (ops == NULL || ops == &hostcoll_shm)) {
		/* Every rank reaches the same choice: local_size < size on all of them or on none. */
		int ls[2] = {w->local_size, -w->local_size};

		if (w->local_size == w->size)
			ops = &hostcoll_shm;
		else if ((rc = MPI_Allreduce(MPI_IN_PLACE, ls, 2, MPI_INT, MPI_MIN, w->comm)) ==
			 MPI_SUCCESS)
			ops = ls[0] == -ls[1] && ls[0] > 1 ? &hostcoll_hier : &hostcoll_ring;
	}
	if (rc != MPI_SUCCESS)
		return world_mpi_error(d, rc, "MPI_Bcast/MPI_Allreduce(all-reduce settings)");
	if (e.bad)
		return asked_refuse(&e, d);
	if (e.alg >= 0) { /* asked for by name: it or nothing, on every rank at once */
		st = open_alg(a, ops, &s, c, d);
		if (st != ST_OK && s.unavailable)
			diag_prefix(d, "DDPTRAIN_ALLREDUCE=%s: ", algs[e.alg]->name);
	} else {
		/* Chosen: where it cannot be had on every rank (a small /dev/shm in a container),
		 * the choice without it stands in (MPI's all-reduce on one node, the ring across
		 * nodes), and why it could not be had is a note, not an error. */
		st = open_alg(a, ops, &s, c, &tried);
		if (st != ST_OK && s.unavailable) {
			ops = w->local_size == w->size ? &hostcoll_mpi : &hostcoll_ring;
			st = open_alg(a, ops, &s, c, d);
			snprintf(c->notice, sizeof c->notice, "all-reduce auto: %s (%s)", ops->name,
				 tried.msg);
		} else if (st != ST_OK) {
			diag_set(d, tried.st, "%s", tried.msg);
		}
	}
	if (st == ST_OK)
		c->panel_flops = e.cfg.panel_mflop * 1e6;
	return st;
}

void hostcoll_free(struct hostcoll *a)
{
	if (a->ops != NULL)
		a->ops->fini(a->ctx);
	a->ops = NULL;
	a->ctx = NULL;
	free(a->mirror.h);
	a->mirror.h = NULL;
}
