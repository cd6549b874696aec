/* trace.c - --trace: clock alignment over MPI, the merge on rank 0 and the Chrome JSON writer. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "core/outfile.h"  /* outfile_open, outfile_commit, outfile_abort */
#include "observe/trace.h"
#include "comm/world.h"    /* struct world, world_gather, world_all, world_mpi_error */

#define CLOCK_PINGS 10 /* round trips per rank; the fastest one gives the offset */
#define TAG_CLOCK 7301

enum status trace_parse_steps(const char *s, long *lo, long *hi, struct diag *d)
{
	const char *colon = strchr(s, ':');
	char *end;

	*lo = 1;
	*hi = 0;
	if (colon == NULL)
		return diag_set(d, ST_USAGE, "--trace-steps: '%s' is not A:B (first and last step, either may be left out)", s);
	if (colon != s) {
		errno = 0;
		*lo = strtol(s, &end, 10);
		if (end != colon || errno == ERANGE || *lo < 1)
			return diag_set(d, ST_USAGE, "--trace-steps: '%s': the first step must be a whole number >= 1", s);
	}
	if (colon[1] != '\0') {
		errno = 0;
		*hi = strtol(colon + 1, &end, 10);
		if (*end != '\0' || errno == ERANGE || *hi < 1)
			return diag_set(d, ST_USAGE, "--trace-steps: '%s': the last step must be a whole number >= 1", s);
		if (*hi < *lo)
			return diag_set(d, ST_USAGE, "--trace-steps: '%s': the last step comes before the first", s);
	}
	return ST_OK;
}

enum status trace_init(struct trace *t, const char *path, long lo, long hi, int nbuf, int dp,
		       size_t max_events, struct diag *d)
{
	memset(t, 0, sizeof *t);
	t->lo = lo;
	t->hi = hi;
	t->dp = dp;
	if (path == NULL)
		return ST_OK;
	if (nbuf < 1 || nbuf > TRACE_MAX_THREADS)
		return diag_set(d, ST_RUNTIME, "internal: %d trace buffers", nbuf);
	t->path = path;
	t->nbuf = nbuf;
	for (int i = 0; i < nbuf; i++) {
		t->buf[i].tid = i;
		t->buf[i].max = max_events;
	}
	t->origin = clock_now();
	return ST_OK;
}

double trace_clock_offset(double t0, double tr, double t1, double *err)
{
	*err = (t1 - t0) / 2.0;
	return tr - (t0 + t1) / 2.0;
}

enum status trace_sync_clocks(struct trace *t, struct world *w, struct diag *d)
{
	int rc = MPI_SUCCESS;

	t->rank = w->rank;
	t->size = w->size;
	if (t->path == NULL)
		return ST_OK;
	if (w->rank == 0) {
		t->offset = calloc((size_t)w->size, sizeof *t->offset);
		if (t->offset == NULL)
			return diag_set(d, ST_RUNTIME, "--trace: out of memory");
	}
	/* Rank 0 pings each rank in turn; the others answer with their clock's reading. */
	for (int r = 1; r < w->size && rc == MPI_SUCCESS; r++) {
		double best = -1.0;

		for (int k = 0; k < CLOCK_PINGS && rc == MPI_SUCCESS; k++) {
			double t0, t1, tr = 0.0, err, off;

			if (w->rank == 0) {
				t0 = clock_now();
				rc = MPI_Send(&t0, 1, MPI_DOUBLE, r, TAG_CLOCK, w->comm);
				if (rc == MPI_SUCCESS)
					rc = MPI_Recv(&tr, 1, MPI_DOUBLE, r, TAG_CLOCK, w->comm, MPI_STATUS_IGNORE);
				t1 = clock_now();
				off = trace_clock_offset(t0, tr, t1, &err);
				if (best < 0.0 || err < best) {
					best = err;
					t->offset[r] = off;
				}
			} else if (w->rank == r) {
				rc = MPI_Recv(&t0, 1, MPI_DOUBLE, 0, TAG_CLOCK, w->comm, MPI_STATUS_IGNORE);
				tr = clock_now();
				if (rc == MPI_SUCCESS)
					rc = MPI_Send(&tr, 1, MPI_DOUBLE, 0, TAG_CLOCK, w->comm);
			}
		}
		if (w->rank == 0 && best > t->residual)
			t->residual = best;
	}
	if (w->rank == 0)
		t->origin = clock_now();
	return rc == MPI_SUCCESS ? ST_OK : world_mpi_error(d, rc, "--trace: the clock ping-pong");
}

/* "forward layer 2", "allreduce bucket 0", "allgather layer 2", "optimizer": layers counted
 * from 1, as --freeze counts them; buckets from 0, as the all-reduce table does. */
static void event_name(const struct trace_event *e, char *buf, size_t len)
{
	const char *what = e->what >= 0 && e->what < TR_NWHAT ? trace_what_names[e->what] : "?";

	if (e->idx < 0)
		snprintf(buf, len, "%s", what);
	else if (e->what == TR_ALLREDUCE || e->what == TR_REDUCE_SCATTER)
		snprintf(buf, len, "%s bucket %d", what, e->idx);
	else
		snprintf(buf, len, "%s layer %d", what, e->idx + 1);
}

/* Write one JSON value followed by the separator the array needs. */
static void emit(FILE *f, json_t *v, int *first)
{
	if (!*first)
		fputs(",\n", f);
	*first = 0;
	json_dumpf(v, f, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(v);
}

static const char *event_cat(const struct trace_event *e)
{
	switch (e->what) {
	case TR_ALLREDUCE: case TR_REDUCE_SCATTER: case TR_ALL_GATHER: case TR_WAIT: return "comm";
	case TR_SCATTER: case TR_REPLICATE: case TR_GATHER: case TR_REDUCE: return "copy";
	case TR_CHECKPOINT: case TR_STOP: case TR_LOAD: return "io";
	default: return "compute";
	}
}

enum status trace_write_file(const char *path, const struct trace_event *const *ev,
			     const size_t *n, const char *const *names, int nranks, int dp,
			     double origin, const char *const *meta, struct diag *d)
{
	struct outfile of;
	json_t *other;
	int first = 1;
	enum status st = outfile_open(&of, path, "--trace", d);

	if (st != ST_OK)
		return st;
	fputs("{\"traceEvents\":[\n", of.f);
	for (int r = 0; r < nranks; r++) {
		int tids[TRACE_MAX_THREADS] = {0};

		emit(of.f, json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", "process_name", "ph", "M",
				     "pid", r, "tid", 0, "args", "name", names[r]), &first);
		emit(of.f, json_pack("{s:s, s:s, s:i, s:i, s:{s:i}}", "name", "process_sort_index",
				     "ph", "M", "pid", r, "tid", 0, "args", "sort_index", r), &first);
		for (size_t i = 0; i < n[r]; i++) {
			const struct trace_event *e = &ev[r][i];
			char name[64], id[96];
			double ts = (e->t0 - origin) * 1e6, te = (e->t1 - origin) * 1e6;
			json_t *args = json_pack("{s:i}", "step", (int)e->step);

			if (e->tid >= 0 && e->tid < TRACE_MAX_THREADS)
				tids[e->tid] = 1;
			event_name(e, name, sizeof name);
			if (e->bytes > 0)
				json_object_set_new(args, "bytes", json_real(e->bytes));
			if (e->kind == TRACE_INSTANT) {
				emit(of.f, json_pack("{s:s, s:s, s:s, s:s, s:f, s:i, s:i, s:o}", "name", name,
						     "cat", event_cat(e), "ph", "i", "s", "p", "ts", ts,
						     "pid", r, "tid", e->tid, "args", args), &first);
			} else if (e->kind == TRACE_ASYNC) {
				/* Async spans get tracks of their own beside the thread's, so a bucket
				 * in flight is drawn under the backward it overlaps. */
				snprintf(id, sizeof id, "r%d.s%d.%s.%d", r, (int)e->step, name, e->tid);
				emit(of.f, json_pack("{s:s, s:s, s:s, s:s, s:f, s:i, s:i, s:o}", "name", name,
						     "cat", event_cat(e), "ph", "b", "id", id, "ts", ts,
						     "pid", r, "tid", e->tid, "args", args), &first);
				emit(of.f, json_pack("{s:s, s:s, s:s, s:s, s:f, s:i, s:i}", "name", name,
						     "cat", event_cat(e), "ph", "e", "id", id, "ts", te,
						     "pid", r, "tid", e->tid), &first);
			} else {
				emit(of.f, json_pack("{s:s, s:s, s:s, s:f, s:f, s:i, s:i, s:o}", "name", name,
						     "cat", event_cat(e), "ph", "X", "ts", ts, "dur", te - ts,
						     "pid", r, "tid", e->tid, "args", args), &first);
			}
		}
		for (int k = 0; k < TRACE_MAX_THREADS; k++) {
			char tname[32];

			if (!tids[k] && k != 0)
				continue;
			snprintf(tname, sizeof tname, dp ? "replica %d" : "rank %d", dp ? k : r);
			emit(of.f, json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", "thread_name", "ph", "M",
					     "pid", r, "tid", k, "args", "name", tname), &first);
		}
	}
	fputs("],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":", of.f);
	other = json_object();
	for (int i = 0; meta != NULL && meta[i] != NULL; i++) {
		const char *eq = strchr(meta[i], '=');

		if (eq != NULL) {
			char key[64];

			snprintf(key, sizeof key, "%.*s", (int)(eq - meta[i]), meta[i]);
			json_object_set_new(other, key, json_string(eq + 1));
		}
	}
	json_dumpf(other, of.f, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(other);
	fputs("}\n", of.f);
	return outfile_commit(&of, d);
}

enum status trace_write(struct trace *t, struct world *w, const char *const *meta,
			const char *host, struct diag *d)
{
	struct trace_event *mine = NULL;
	char *all = NULL; /* rank 0: every rank's events, byte offsets displs[] */
	const struct trace_event **ev = NULL;
	char (*hosts)[64] = NULL, hostbuf[64] = {0}, **names = NULL;
	const char **allmeta = NULL;
	int *counts = NULL, *displs = NULL, nmine = 0, ok = 1, rc;
	size_t total = 0, *n = NULL, dropped = 0;
	enum status st = ST_OK;
	char clock[256], drop[64];

	if (t->path == NULL)
		return ST_OK;
	/* This rank's finished events from every buffer, in one array. */
	for (int i = 0; i < t->nbuf; i++)
		total += t->buf[i].n;
	mine = malloc((total ? total : 1) * sizeof *mine);
	if (mine == NULL)
		ok = 0;
	for (int i = 0; i < t->nbuf && mine != NULL; i++) {
		dropped += t->buf[i].dropped;
		for (size_t k = 0; k < t->buf[i].n; k++)
			if (!t->buf[i].ev[k].open && t->buf[i].ev[k].m0 < 0 && t->buf[i].ev[k].m1 < 0 &&
			    (size_t)(nmine + 1) * sizeof *mine < INT_MAX)
				mine[nmine++] = t->buf[i].ev[k];
	}
	snprintf(hostbuf, sizeof hostbuf, "%s", host);
	if (w->rank == 0) {
		counts = calloc((size_t)w->size, sizeof *counts);
		displs = calloc((size_t)w->size, sizeof *displs);
		hosts = calloc((size_t)w->size, sizeof *hosts);
		if (counts == NULL || displs == NULL || hosts == NULL)
			ok = 0;
	}
	/* Everyone learns whether rank 0 (or anyone) lacks memory before the gathers. */
	ok = world_all(w, ok);
	if (!ok) {
		st = diag_set(d, ST_RUNTIME, "--trace: out of memory for the merged trace");
		goto out_free;
	}
	{
		int bytes = nmine * (int)sizeof *mine;

		rc = MPI_Gather(&bytes, 1, MPI_INT, counts, 1, MPI_INT, 0, w->comm);
		if (rc != MPI_SUCCESS) {
			st = world_mpi_error(d, rc, "--trace: MPI_Gather(event counts)");
			goto out_free;
		}
		total = 0;
		for (int r = 0; w->rank == 0 && r < w->size; r++) {
			displs[r] = (int)total;
			total += (size_t)counts[r];
		}
		if (w->rank == 0 && total > INT_MAX)
			ok = 0;
		if (w->rank == 0 && ok)
			all = malloc(total ? total : 1);
		ok = world_all(w, w->rank != 0 || all != NULL);
		if (!ok) {
			st = diag_set(d, ST_RUNTIME, "--trace: the merged trace is too large (%zu bytes): bound it with --trace-steps", total);
			goto out_free;
		}
		rc = MPI_Gatherv(mine, bytes, MPI_BYTE, all, counts, displs, MPI_BYTE, 0, w->comm);
		if (rc != MPI_SUCCESS) {
			st = world_mpi_error(d, rc, "--trace: MPI_Gatherv(events)");
			goto out_free;
		}
	}
	st = world_gather(w, hostbuf, sizeof hostbuf, hosts, d);
	if (st != ST_OK || w->rank != 0)
		goto out_free;

	/* Rank 0: every rank's events onto rank 0's clock, then the file. */
	ev = calloc((size_t)w->size, sizeof *ev);
	n = calloc((size_t)w->size, sizeof *n);
	names = calloc((size_t)w->size, sizeof *names);
	{
		int nm = 0;

		while (meta != NULL && meta[nm] != NULL)
			nm++;
		allmeta = calloc((size_t)nm + 3, sizeof *allmeta);
		if (ev == NULL || n == NULL || names == NULL || allmeta == NULL) {
			st = diag_set(d, ST_RUNTIME, "--trace: out of memory");
			goto out_free;
		}
		for (int i = 0; i < nm; i++)
			allmeta[i] = meta[i];
		snprintf(clock, sizeof clock,
			 "clock_alignment=MPI ping-pong with rank 0, best of %d round trips per rank; residual error at most %.1f us",
			 CLOCK_PINGS, t->residual * 1e6);
		allmeta[nm] = clock;
		snprintf(drop, sizeof drop, "events_dropped_rank0=%zu", dropped);
		allmeta[nm + 1] = drop;
	}
	for (int r = 0; r < w->size; r++) {
		struct trace_event *e = (struct trace_event *)(all + displs[r]);

		n[r] = (size_t)counts[r] / sizeof *e;
		for (size_t k = 0; k < n[r]; k++) {
			e[k].t0 -= t->offset[r];
			e[k].t1 -= t->offset[r];
		}
		ev[r] = e;
		names[r] = malloc(96);
		if (names[r] == NULL) {
			st = diag_set(d, ST_RUNTIME, "--trace: out of memory");
			goto out_free;
		}
		if (t->dp)
			snprintf(names[r], 96, "dp: one process (%s)", hosts[r]);
		else
			snprintf(names[r], 96, "rank %d (%s)", r, hosts[r]);
	}
	st = trace_write_file(t->path, ev, n, (const char *const *)names, w->size, t->dp, t->origin,
			      allmeta, d);
out_free:
	for (int r = 0; names != NULL && r < w->size; r++)
		free(names[r]);
	free(names);
	free(allmeta);
	free(n);
	free(ev);
	free(all);
	free(hosts);
	free(displs);
	free(counts);
	free(mine);
	return st;
}

void trace_free(struct trace *t)
{
	for (int i = 0; i < TRACE_MAX_THREADS; i++) {
		free(t->buf[i].ev);
		t->buf[i].ev = NULL;
		t->buf[i].n = t->buf[i].cap = 0;
	}
	free(t->offset);
	t->offset = NULL;
}
