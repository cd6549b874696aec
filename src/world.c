/* world.c - MPI start-up, node-local ranks, status agreement and configuration check. */
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "signals.h"
#include "world.h"

#define CONFIG_TEXT_MAX 4096

/* The watchdog: the main thread marks the start and end of each blocking collective with
 * two atomic stores (no lock, no system call, nothing that wakes a thread); this thread
 * looks twice a second, and ends the process when the same collective has been in
 * progress for longer than the timeout. Nothing is polled in the step. */
struct world_watch {
	pthread_t thread;
	pthread_mutex_t mu;   /* only for quit and the tick's timed wait */
	pthread_cond_t cv;
	double timeout;
	atomic_ulong gen;     /* odd: inside a marked collective; each mark adds 1 */
	atomic_long step;
	const char *_Atomic what;
	int rank, quit;
};

static void *watchdog_main(void *arg)
{
	struct world_watch *x = arg;
	unsigned long seen = 0;
	double since = 0.0;

	pthread_mutex_lock(&x->mu);
	while (!x->quit) {
		struct timespec tick;
		unsigned long gen;
		double now;

		clock_gettime(CLOCK_MONOTONIC, &tick);
		tick.tv_nsec += 500000000L;
		if (tick.tv_nsec >= 1000000000L) {
			tick.tv_sec++;
			tick.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&x->cv, &x->mu, &tick);
		if (x->quit)
			break;
		gen = atomic_load(&x->gen);
		now = clock_now();
		if (!(gen & 1) || gen != seen) { /* idle, or a new collective since the last look */
			seen = gen;
			since = now;
			continue;
		}
		if (now - since >= x->timeout) {
			fprintf(stderr, "ddptrain: rank %d: step %ld: %s did not complete within --timeout=%g s: another rank stalled or died; giving up\n",
				x->rank, atomic_load(&x->step), atomic_load(&x->what), x->timeout);
			fflush(stderr);
			_exit(1); /* MPI_Abort is not ours to call from this thread; mpirun ends the job */
		}
		if (signals_pending() && now - since >= 2.0) {
			fprintf(stderr, "ddptrain: rank %d: step %ld: asked to stop, but %s has waited %.0f s for another rank: stopping without a checkpoint\n",
				x->rank, atomic_load(&x->step), atomic_load(&x->what), now - since);
			fflush(stderr);
			_exit(1);
		}
	}
	pthread_mutex_unlock(&x->mu);
	return NULL;
}

enum status world_watchdog_start(struct world *w, double timeout_s, struct diag *d)
{
	struct world_watch *x;
	pthread_condattr_t ca;

	if (timeout_s <= 0 || w->watch != NULL)
		return ST_OK;
	x = calloc(1, sizeof *x);
	if (x == NULL)
		return diag_set(d, ST_RUNTIME, "watchdog: out of memory");
	x->timeout = timeout_s;
	x->rank = w->rank;
	atomic_init(&x->gen, 0);
	atomic_init(&x->step, 0);
	atomic_init(&x->what, "");
	pthread_mutex_init(&x->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&x->cv, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&x->thread, NULL, watchdog_main, x) != 0) {
		free(x);
		return diag_set(d, ST_RUNTIME, "watchdog: cannot start its thread");
	}
	w->watch = x;
	return ST_OK;
}

void world_watch_begin(struct world *w, const char *what)
{
	struct world_watch *x = w->watch;

	if (x == NULL)
		return;
	atomic_store_explicit(&x->what, what, memory_order_relaxed);
	atomic_store_explicit(&x->step, w->step, memory_order_relaxed);
	atomic_fetch_add_explicit(&x->gen, 1, memory_order_release); /* now odd */
}

void world_watch_end(struct world *w)
{
	struct world_watch *x = w->watch;

	if (x == NULL)
		return;
	atomic_fetch_add_explicit(&x->gen, 1, memory_order_release); /* now even */
}

static void watchdog_stop(struct world *w)
{
	struct world_watch *x = w->watch;

	if (x == NULL)
		return;
	pthread_mutex_lock(&x->mu);
	x->quit = 1;
	pthread_cond_signal(&x->cv);
	pthread_mutex_unlock(&x->mu);
	pthread_join(x->thread, NULL);
	pthread_mutex_destroy(&x->mu);
	pthread_cond_destroy(&x->cv);
	free(x);
	w->watch = NULL;
}

enum status world_mpi_error(struct diag *d, int rc, const char *call)
{
	char msg[MPI_MAX_ERROR_STRING];
	int len = 0;

	MPI_Error_string(rc, msg, &len);
	return diag_set(d, ST_RUNTIME, "%s failed: %s", call, msg);
}

enum status world_init(struct world *w, int *argc, char ***argv, struct diag *d)
{
	int provided, rc, flag = 0;

	memset(w, 0, sizeof *w);
	w->comm = MPI_COMM_NULL;
	w->local = MPI_COMM_NULL;
	MPI_Initialized(&flag);
	if (!flag) {
		/* MPI_THREAD_FUNNELED: only the main thread calls MPI (dp mode's workers do not). */
		rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
		if (rc != MPI_SUCCESS)
			return diag_set(d, ST_RUNTIME, "MPI_Init_thread failed (code %d)", rc);
		w->inited = 1;
	}
	/* Errors come back as codes, so every rank can agree before exiting. */
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	w->comm = MPI_COMM_WORLD;
	MPI_Comm_rank(w->comm, &w->rank);
	MPI_Comm_size(w->comm, &w->size);
	rc = MPI_Comm_split_type(w->comm, MPI_COMM_TYPE_SHARED, w->rank, MPI_INFO_NULL, &w->local);
	if (rc != MPI_SUCCESS)
		return world_mpi_error(d, rc, "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
	MPI_Comm_rank(w->local, &w->local_rank);
	MPI_Comm_size(w->local, &w->local_size);
	return ST_OK;
}

int world_launch_size(void)
{
	/* Open MPI's mpirun, MPICH's hydra (and PMI-2), Slurm's srun */
	static const char *const size_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"};
	/* launchers whose size variable may be missing: PMIx, PMI-1, hydra */
	static const char *const rank_vars[] = {"PMIX_RANK", "PMI_RANK", "MPI_LOCALNRANKS"};

	for (size_t i = 0; i < sizeof size_vars / sizeof size_vars[0]; i++) {
		const char *v = getenv(size_vars[i]);
		char *end;
		long n;

		if (v == NULL)
			continue;
		n = strtol(v, &end, 10);
		return *v != '\0' && *end == '\0' && n >= 1 && n <= INT_MAX ? (int)n : 0;
	}
	for (size_t i = 0; i < sizeof rank_vars / sizeof rank_vars[0]; i++)
		if (getenv(rank_vars[i]) != NULL)
			return 0;
	return 1;
}

static int severity(enum status st)
{
	switch (st) {
	case ST_OK: return 0;
	case ST_STOP: return 1;
	case ST_INTERRUPTED: return 2;
	case ST_RUNTIME: return 3;
	case ST_USAGE: return 4;
	}
	return 3;
}

enum status world_agree(struct world *w, enum status mine, int *reporter)
{
	/* MINLOC over (-severity, rank): the most severe status, lowest rank on ties. */
	struct { int value, rank; } in = {-severity(mine), w->rank}, out;
	static const enum status by_severity[] = {ST_OK, ST_STOP, ST_INTERRUPTED, ST_RUNTIME, ST_USAGE};

	int rc;

	world_watch_begin(w, "the ranks' agreement on the outcome");
	rc = MPI_Allreduce(&in, &out, 1, MPI_2INT, MPI_MINLOC, w->comm);
	world_watch_end(w);
	if (rc != MPI_SUCCESS) {
		*reporter = mine != ST_OK;
		return mine != ST_OK ? mine : ST_RUNTIME;
	}
	*reporter = out.rank == w->rank;
	return by_severity[-out.value];
}

enum status world_check_config(struct world *w, const char *text, struct diag *d)
{
	char root[CONFIG_TEXT_MAX];
	const char *a, *b;
	int rc;

	if (strlen(text) >= sizeof root)
		return diag_set(d, ST_RUNTIME, "internal: configuration text too long");
	if (w->rank == 0)
		strcpy(root, text);
	world_watch_begin(w, "the configuration check");
	rc = MPI_Bcast(root, sizeof root, MPI_CHAR, 0, w->comm);
	world_watch_end(w);
	if (rc != MPI_SUCCESS)
		return world_mpi_error(d, rc, "MPI_Bcast(configuration)");
	/* Compare line by line; the lines are in the same order on every rank. */
	a = text;
	b = root;
	while (*a != '\0' || *b != '\0') {
		size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");

		if (la != lb || memcmp(a, b, la) != 0)
			return diag_set(d, ST_USAGE,
					"configuration differs between ranks: %.*s here, %.*s on rank 0",
					(int)la, a, (int)lb, b);
		a += la + (a[la] == '\n');
		b += lb + (b[lb] == '\n');
	}
	return ST_OK;
}

int world_all(struct world *w, int mine)
{
	int in = mine != 0, out = 0, rc;

	world_watch_begin(w, "the device agreement");
	rc = MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_MIN, w->comm);
	world_watch_end(w);
	return rc == MPI_SUCCESS ? out : 0;
}

enum status world_bcast(struct world *w, void *buf, size_t len, int root, struct diag *d)
{
	int rc;

	world_watch_begin(w, "a broadcast from rank 0");
	rc = MPI_Bcast(buf, (int)len, MPI_BYTE, root, w->comm);
	world_watch_end(w);
	return rc == MPI_SUCCESS ? ST_OK : world_mpi_error(d, rc, "MPI_Bcast");
}

enum status world_local_allgather(struct world *w, const void *mine, size_t len, void *all,
				  struct diag *d)
{
	int rc = MPI_Allgather(mine, (int)len, MPI_BYTE, all, (int)len, MPI_BYTE, w->local);

	return rc == MPI_SUCCESS ? ST_OK : world_mpi_error(d, rc, "MPI_Allgather(node)");
}

enum status world_gather(struct world *w, const void *mine, size_t len, void *all, struct diag *d)
{
	int rc;

	world_watch_begin(w, "the statistics gather");
	rc = MPI_Gather(mine, (int)len, MPI_BYTE, all, (int)len, MPI_BYTE, 0, w->comm);
	world_watch_end(w);
	return rc == MPI_SUCCESS ? ST_OK : world_mpi_error(d, rc, "MPI_Gather(statistics)");
}

void world_free(struct world *w)
{
	watchdog_stop(w);
	if (w->local != MPI_COMM_NULL)
		MPI_Comm_free(&w->local);
	w->local = MPI_COMM_NULL;
	if (w->inited) {
		MPI_Finalize();
		w->inited = 0;
	}
}
