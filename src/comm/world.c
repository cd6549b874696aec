/* world.c - MPI start-up and shutdown, node-local ranks, status agreement, configuration
 * check and the watchdog over every collective. */
#define _GNU_SOURCE /* RTLD_NODELETE, dl_iterate_phdr */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/signals.h"
#include "comm/world.h"

/* The watchdog: the main thread marks the start and end of each blocking wait with two
 * atomic stores (no lock, no system call, nothing that wakes a thread); this thread looks
 * twice a second, and ends the process when the same wait has been in progress for longer
 * than the timeout. Nothing is polled in the step.
 *
 * It runs from before MPI_Init to after MPI_Finalize, so start-up and shutdown are
 * watched as the steps are. When a stop signal is pending, a collective that waits
 * much longer than the collectives before it means a rank is gone or stuck and the
 * stop cannot complete: the process gives up after a short grace (2 s plus twice the
 * longest wait seen so far), unless the wait was declared one for a rank that is busy
 * writing (world_expect_wait, world_expect_busy), which only --timeout ends.
 *
 * While training runs (world_watch_training), the time between two marks is watched as
 * well: every step marks its host synchronisation, so a rank that marks nothing for
 * --timeout is stuck outside any collective (a product that never returns, a write that
 * never ends) and would otherwise leave the others waiting and itself spinning.
 *
 * --timeout bounds a stall, not work that goes on: an evaluation batch done or a piece
 * of a file written (world_watch_progress) starts the count again, and so does, for a
 * rank waiting in the agreement after rank 0's write, each notice rank 0 sends of its
 * progress (world_expect_wait).
 *
 * Time this process itself did not run (SIGSTOP and SIGCONT, a suspended job, a
 * machine too busy to schedule it) is no other rank's fault: the thread sees it as a
 * late look, and it does not count toward the wait. */
struct world_watch {
	pthread_t thread;
	pthread_mutex_t mu;   /* for quit, timeout and the tick's timed wait */
	pthread_cond_t cv;
	double timeout;
	atomic_ulong gen;     /* odd: inside a marked wait; each mark adds 1 */
	atomic_ulong progress; /* world_watch_progress calls: each starts the count again */
	atomic_long step;
	const char *_Atomic what;
	atomic_int thread_wait; /* the marked wait is for a thread of this process */
	const char *_Atomic busy; /* the marked collective waits for this (or NULL) */
	const char *_Atomic standing; /* world_expect_busy's: every wait is for this (or NULL) */
	const char *_Atomic failed; /* this rank's own failure, on its way to the others */
	atomic_int patient;   /* no grace for a pending stop: MPI start-up, or busy set */
	const char *_Atomic who; /* training: what computes between the marks; NULL: not training */
	_Atomic long *now_step; /* the world's step, read when a rank is stuck between marks */
	atomic_int rank;      /* -1 until MPI says */
	atomic_int decided;   /* the run's exit status once its outcome is decided (world_outcome), or -1 */
	atomic_int size;      /* 1 until MPI says */
	int quit;
};

/* The watchdog looks this often (seconds); a look this much later than due means the
 * process did not run in between. Rank 0 sends its progress notices at most this often. */
#define WATCH_TICK 0.5
#define WATCH_LATE 1.0

/* The tags of rank 0's notices on world.notice: progress while busy, then done. */
enum { NOTICE_PROGRESS = 1, NOTICE_DONE = 2 };

/* Say why this process gives up, remove its temporary files and end it. paused: the
 * seconds of the wait this process itself did not run (not counted in waited). */
static void give_up(struct world_watch *x, const char *why, double waited, double paused)
{
	char own[128] = "", head[64], line[1024];
	int n, k;

	int rank = atomic_load(&x->rank);
	int between = !(atomic_load(&x->gen) & 1); /* stuck between two marks */
	long step = between ? atomic_load(x->now_step) : atomic_load(&x->step);
	const char *busy = atomic_load(&x->busy);
	const char *what = atomic_load(&x->what);
	const char *who = atomic_load(&x->who);
	const int thread = atomic_load(&x->thread_wait);

	if (busy == NULL)
		busy = atomic_load(&x->standing);
	k = rank >= 0 ? snprintf(head, sizeof head, "ddptrain: rank %d: ", rank)
		      : snprintf(head, sizeof head, "ddptrain: ");
	if (step > 0)
		snprintf(head + k, sizeof head - (size_t)k, "step %ld: ", step);
	if (paused > 0)
		snprintf(own, sizeof own, " (and this rank itself was stopped or not scheduled for %.0f s more)",
			 paused);
	if (why == NULL && between)
		n = snprintf(line, sizeof line, "%sthe step did not end within --timeout=%g s%s: %s has been computing (or writing) for %.0f s without reaching a collective or making progress (an evaluation batch, a piece of a file written)%s; giving up\n",
			     head, x->timeout, own, who != NULL ? who : "this rank", waited,
			     atomic_load(&x->size) > 1 ? ", and the others wait for it" : "");
	else if (why == NULL && atomic_load(&x->failed) != NULL)
		/* This rank failed first: its reason, not only the wait, is the news. */
		n = snprintf(line, sizeof line, "%s%s (then %s did not complete within --timeout=%g s: the other ranks are stuck, probably waiting for this one; giving up)\n",
			     head, atomic_load(&x->failed), what, x->timeout);
	else if (why == NULL && busy != NULL)
		n = snprintf(line, sizeof line, "%s%s made no progress for --timeout=%g s%s: that rank is stuck or its file system is too slow; giving up\n",
			     head, busy, x->timeout, own);
	else if (why == NULL && thread)
		n = snprintf(line, sizeof line, "%s%s did not end within --timeout=%g s%s: its thread is stuck (in a product that never returns, or on a device that does not answer); giving up\n",
			     head, what, x->timeout, own);
	else if (why == NULL)
		n = snprintf(line, sizeof line, "%s%s did not complete within --timeout=%g s%s: another rank stalled or died; giving up\n",
			     head, what, x->timeout, own);
	else if (atomic_load(&x->decided) >= 0)
		/* The run is over, its files written and its outcome agreed: the stop has nothing
		 * left to save, and the exit status is the run's, not this wait's. */
		n = snprintf(line, sizeof line, "%s%s, but %s has waited %.0f s%s: ending now with the run's exit status %d (the run was over and its files written)\n",
			     head, why, what, waited, own, atomic_load(&x->decided));
	else if (thread)
		n = snprintf(line, sizeof line, "%s%s, but %s has not ended after %.0f s%s: stopping without a checkpoint\n",
			     head, why, what, waited, own);
	else
		n = snprintf(line, sizeof line, "%s%s, but %s has waited %.0f s for another rank%s: stopping without a checkpoint\n",
			     head, why, what, waited, own);
	if (n < 0)
		n = 0;
	if ((size_t)n >= sizeof line) { /* cut short: still one whole line */
		n = (int)sizeof line - 1;
		line[n - 1] = '\n';
	}
	/* One line, one write: the ranks share mpirun's stderr, and a line written in
	 * pieces comes out interleaved with the other ranks' lines. */
	fflush(stderr);
	while (write(STDERR_FILENO, line, (size_t)n) < 0 && errno == EINTR)
		;
	signals_tmp_cleanup();
	/* MPI_Abort is not ours to call from this thread; mpirun ends the job */
	_exit(why != NULL && atomic_load(&x->decided) >= 0 ? atomic_load(&x->decided) : 1);
}

static void *watchdog_main(void *arg)
{
	struct world_watch *x = arg;
	unsigned long seen = 0, seen_progress = 0;
	double since = 0.0, longest = 0.0, looked = clock_now(), paused = 0.0;

	pthread_mutex_lock(&x->mu);
	while (!x->quit) {
		struct timespec tick;
		unsigned long gen, progress;
		double now;

		clock_gettime(CLOCK_MONOTONIC, &tick);
		tick.tv_nsec += (long)(WATCH_TICK * 1e9);
		if (tick.tv_nsec >= 1000000000L) {
			tick.tv_sec++;
			tick.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&x->cv, &x->mu, &tick);
		if (x->quit)
			break;
		gen = atomic_load(&x->gen);
		progress = atomic_load(&x->progress);
		now = clock_now();
		if (now - looked > WATCH_TICK + WATCH_LATE) { /* this process did not run */
			since += now - looked - WATCH_TICK;
			paused += now - looked - WATCH_TICK;
		}
		looked = now;
		if (gen != seen || progress != seen_progress) { /* a mark or progress since the last look */
			if (gen != seen && (seen & 1) && now - since > longest)
				longest = now - since; /* the one seen in progress has ended */
			seen = gen;
			seen_progress = progress;
			since = now;
			paused = 0.0;
			continue;
		}
		if (!(gen & 1)) { /* between marks: watched only while training */
			if (x->timeout > 0 && atomic_load(&x->who) != NULL && now - since >= x->timeout)
				give_up(x, NULL, now - since, paused);
			continue;
		}
		if (x->timeout > 0 && now - since >= x->timeout)
			give_up(x, NULL, now - since, paused);
		if (signals_pending() && !atomic_load(&x->patient) && atomic_load(&x->standing) == NULL &&
		    now - since >= 2.0 + 2.0 * longest)
			give_up(x, "asked to stop", now - since, paused);
	}
	pthread_mutex_unlock(&x->mu);
	return NULL;
}

enum status world_watchdog_start(struct world *w, double timeout_s, struct diag *d)
{
	struct world_watch *x = w->watch;
	pthread_condattr_t ca;

	if (x != NULL) { /* running: a new timeout */
		pthread_mutex_lock(&x->mu);
		x->timeout = timeout_s;
		pthread_mutex_unlock(&x->mu);
		return ST_OK;
	}
	if (timeout_s <= 0)
		return ST_OK;
	x = calloc(1, sizeof *x);
	if (x == NULL)
		return diag_set(d, ST_RUNTIME, "watchdog: out of memory");
	x->timeout = timeout_s;
	atomic_init(&x->rank, w->comm != MPI_COMM_NULL ? w->rank : -1);
	atomic_init(&x->size, w->size > 0 ? w->size : 1);
	atomic_init(&x->gen, 0);
	atomic_init(&x->progress, 0);
	atomic_init(&x->step, 0);
	atomic_init(&x->what, "");
	atomic_init(&x->thread_wait, 0);
	atomic_init(&x->busy, NULL);
	atomic_init(&x->standing, NULL);
	atomic_init(&x->patient, 0);
	atomic_init(&x->who, NULL);
	atomic_init(&x->decided, -1);
	x->now_step = &w->step;
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

void world_outcome(struct world *w, int exit_code)
{
	if (w->watch != NULL)
		atomic_store(&w->watch->decided, exit_code);
}

void world_failed(struct world *w, const char *msg)
{
	if (w->watch != NULL)
		atomic_store(&w->watch->failed, msg);
}

/* A marked wait begins: for another rank (thread 0) or for a thread of this process. */
static void watch_begin(struct world *w, const char *what, int thread)
{
	struct world_watch *x = w->watch;

	if (x == NULL)
		return;
	atomic_store_explicit(&x->what, what, memory_order_relaxed);
	atomic_store_explicit(&x->thread_wait, thread, memory_order_relaxed);
	atomic_store_explicit(&x->step, w->step, memory_order_relaxed);
	atomic_fetch_add_explicit(&x->gen, 1, memory_order_release); /* now odd */
}

void world_watch_begin(struct world *w, const char *what)
{
	watch_begin(w, what, 0);
}

void world_watch_thread(struct world *w, const char *what)
{
	watch_begin(w, what, 1);
}

void world_watch_training(struct world *w, const char *who)
{
	struct world_watch *x = w->watch;

	if (x == NULL)
		return;
	atomic_fetch_add(&x->gen, 2); /* a mark of its own: the wait starts now */
	atomic_store(&x->who, who);
	if (who == NULL) /* what rank 0 was busy with during training is over */
		atomic_store(&x->standing, NULL);
}

void world_watch_end(struct world *w)
{
	struct world_watch *x = w->watch;

	if (x == NULL)
		return;
	atomic_store_explicit(&x->busy, NULL, memory_order_relaxed);
	atomic_store_explicit(&x->patient, 0, memory_order_relaxed);
	atomic_fetch_add_explicit(&x->gen, 1, memory_order_release); /* now even */
}

/* Rank 0 tells every other rank (tag: NOTICE_PROGRESS or NOTICE_DONE). The sends are
 * small, so they leave at once; each is matched by the agreement's receives (agree_relayed)
 * before that agreement returns. */
static void notice_all(struct world *w, int tag)
{
	static const int word = 0;

	for (int r = 1; r < w->size; r++) {
		MPI_Request rq;

		if (MPI_Isend(&word, 1, MPI_INT, r, tag, w->notice, &rq) == MPI_SUCCESS)
			(void)MPI_Request_free(&rq); /* completes on its own; a lost notice only shortens the others' patience */
	}
}

void world_watch_progress(struct world *w)
{
	double now;

	if (w == NULL)
		return;
	if (w->watch != NULL)
		atomic_fetch_add_explicit(&w->watch->progress, 1, memory_order_relaxed);
	if (!w->relay || w->rank != 0 || w->size < 2)
		return;
	now = clock_now();
	if (now - w->noticed >= WATCH_TICK) {
		w->noticed = now;
		notice_all(w, NOTICE_PROGRESS);
	}
}

void world_progress(void *arg)
{
	world_watch_progress(arg);
}

void world_expect_wait(struct world *w, const char *busy)
{
	w->relay = w->comm != MPI_COMM_NULL && w->notice != MPI_COMM_NULL;
	w->noticed = 0.0;
	if (w->watch != NULL) {
		atomic_store_explicit(&w->watch->busy, busy, memory_order_relaxed);
		atomic_store_explicit(&w->watch->patient, 1, memory_order_relaxed);
	}
}

void world_expect_busy(struct world *w, const char *busy)
{
	if (w->watch != NULL)
		atomic_store(&w->watch->standing, busy);
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

	if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) /* not an MPI error code */
		snprintf(msg, sizeof msg, "MPI error code %d", rc);
	return diag_set(d, ST_RUNTIME, "%s failed: %s", call, msg);
}

enum status world_init(struct world *w, int *argc, char ***argv, struct diag *d)
{
	struct world_watch *watch = w->watch; /* started before, to watch MPI's start-up */
	int provided, rc, flag = 0;

	memset(w, 0, sizeof *w);
	w->watch = watch;
	w->comm = MPI_COMM_NULL;
	w->local = MPI_COMM_NULL;
	w->notice = w->alarm = MPI_COMM_NULL;
	w->main_thread = pthread_self();
	if (gethostname(w->host, sizeof w->host - 1) != 0)
		snprintf(w->host, sizeof w->host, "?");
	world_watch_begin(w, "MPI start-up");
	if (watch != NULL) /* a stop signal now is handled once training starts */
		atomic_store(&watch->patient, 1);
	if ((rc = MPI_Initialized(&flag)) != MPI_SUCCESS) {
		world_watch_end(w);
		return diag_set(d, ST_RUNTIME, "MPI_Initialized failed (code %d)", rc);
	}
	if (!flag) {
		/* MPI_THREAD_FUNNELED: only the main thread calls MPI (dp mode's workers and the
		 * watchdog do not). */
		rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
		if (rc != MPI_SUCCESS) {
			world_watch_end(w);
			return diag_set(d, ST_RUNTIME, "MPI_Init_thread failed (code %d)", rc);
		}
		w->inited = 1;
	}
	signals_install(); /* MPI_Init put its own SIGBUS handler (opal_signal) in place of ours */
	/* Errors come back as codes, so every rank can agree before exiting. */
	w->comm = MPI_COMM_WORLD;
	if ((rc = MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN)) != MPI_SUCCESS ||
	    (rc = MPI_Comm_rank(w->comm, &w->rank)) != MPI_SUCCESS ||
	    (rc = MPI_Comm_size(w->comm, &w->size)) != MPI_SUCCESS) {
		world_watch_end(w);
		return world_mpi_error(d, rc, "MPI_Comm_set_errhandler/MPI_Comm_rank/MPI_Comm_size(MPI_COMM_WORLD)");
	}
	if (watch != NULL) {
		atomic_store(&watch->rank, w->rank);
		atomic_store(&watch->size, w->size);
	}
	rc = MPI_Comm_split_type(w->comm, MPI_COMM_TYPE_SHARED, w->rank, MPI_INFO_NULL, &w->local);
	if (rc == MPI_SUCCESS && (rc = MPI_Comm_dup(w->comm, &w->notice)) != MPI_SUCCESS)
		w->notice = MPI_COMM_NULL;
	if (rc == MPI_SUCCESS && (rc = MPI_Comm_dup(w->comm, &w->alarm)) != MPI_SUCCESS)
		w->alarm = MPI_COMM_NULL;
	world_watch_end(w);
	if (rc != MPI_SUCCESS)
		return world_mpi_error(d, rc, "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)/MPI_Comm_dup");
	if ((rc = MPI_Comm_rank(w->local, &w->local_rank)) != MPI_SUCCESS ||
	    (rc = MPI_Comm_size(w->local, &w->local_size)) != MPI_SUCCESS)
		return world_mpi_error(d, rc, "MPI_Comm_rank/MPI_Comm_size(node)");
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

enum status world_check_launch(const struct world *w, struct diag *d)
{
	int said = world_launch_size();
	const char *ws = getenv("WORLD_SIZE");
	long torch = ws != NULL ? strtol(ws, NULL, 10) : 0;

	if (w->size != 1)
		return ST_OK;
	if (said > 1)
		return diag_set(d, ST_USAGE, "the launcher started %d processes but MPI sees a world of 1 here: each would train alone. Launch with srun --mpi=pmix (or mpirun)",
				said);
	if (said == 1 && getenv("OMPI_COMM_WORLD_SIZE") != NULL)
		return ST_OK; /* mpirun -np 1 */
	if (torch > 1)
		return diag_set(d, ST_USAGE, "WORLD_SIZE=%ld (a torchrun-style launch) but MPI sees a world of 1: each process would train alone. Launch ddptrain with mpirun -np %ld (or srun --mpi=pmix)",
				torch, torch);
	return ST_OK;
}

static int severity(enum status st)
{
	switch (st) {
	case ST_OK: return 0;
	case ST_INCOMPLETE: return 1; /* a finished run: anything else that happened says more */
	case ST_STOP: return 2;
	case ST_INTERRUPTED: return 3;
	case ST_PEER: return 4; /* below the failure it follows, whose rank then reports it */
	case ST_RUNTIME: return 5;
	case ST_USAGE: return 6;
	}
	return 5;
}

/* The agreement after rank 0's busy work (world_expect_wait): rank 0 tells every other
 * rank it is done, behind its progress notices (MPI keeps one sender's messages on one
 * communicator in order), and agrees; the others agree while taking those notices, each
 * starting their wait's count again, until both the agreement and the done notice are in
 * (so no notice is left for a later agreement). */
static int agree_relayed(struct world *w, const void *in, void *out)
{
	MPI_Request rq[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
	int rc, word, done = w->rank == 0;

	if (w->rank == 0)
		notice_all(w, NOTICE_DONE);
	rc = MPI_Iallreduce(in, out, 1, MPI_2INT, MPI_MINLOC, w->comm, &rq[0]);
	if (rc == MPI_SUCCESS && !done)
		rc = MPI_Irecv(&word, 1, MPI_INT, 0, MPI_ANY_TAG, w->notice, &rq[1]);
	while (rc == MPI_SUCCESS && (rq[0] != MPI_REQUEST_NULL || !done)) {
		MPI_Status s;
		int i;

		rc = MPI_Waitany(2, rq, &i, &s);
		if (rc != MPI_SUCCESS || i != 1)
			continue;
		if (s.MPI_TAG == NOTICE_DONE) {
			done = 1;
		} else {
			world_watch_progress(w); /* rank 0 goes on: the wait counts again */
			rc = MPI_Irecv(&word, 1, MPI_INT, 0, MPI_ANY_TAG, w->notice, &rq[1]);
		}
	}
	if (rq[1] != MPI_REQUEST_NULL) { /* failed: nothing is left to arrive in word */
		(void)MPI_Cancel(&rq[1]);
		(void)MPI_Request_free(&rq[1]);
	}
	return rc;
}

enum status world_agree(struct world *w, enum status mine, int *reporter)
{
	/* MINLOC over (-severity, rank): the most severe status, lowest rank on ties. */
	struct { int value, rank; } in = {-severity(mine), w->rank}, out;
	static const enum status by_severity[] = {ST_OK, ST_INCOMPLETE, ST_STOP, ST_INTERRUPTED, ST_PEER,
						  ST_RUNTIME, ST_USAGE};

	int rc;

	world_watch_begin(w, "the ranks' agreement on the outcome");
	if (w->relay && w->size > 1)
		rc = agree_relayed(w, &in, &out);
	else
		rc = MPI_Allreduce(&in, &out, 1, MPI_2INT, MPI_MINLOC, w->comm);
	w->relay = 0;
	world_watch_end(w);
	if (rc != MPI_SUCCESS) {
		*reporter = mine != ST_OK;
		return mine != ST_OK ? mine : ST_RUNTIME;
	}
	*reporter = out.rank == w->rank;
	return by_severity[-out.value];
}

/* A peer's word has come (world_peer_failed): that rank's next collective on the world is
 * the agreement, so no other one is entered (it would be matched with the agreement):
 * ST_PEER naming that rank, or ST_OK. */
static enum status peer_gone(const struct world *w, struct diag *d)
{
	if (!w->peer_failed)
		return ST_OK;
	return diag_set(d, ST_PEER, "rank %d failed, and goes to agree on it", w->peer_failed - 1);
}

enum status world_check_config(struct world *w, const char *text, struct diag *d)
{
	unsigned long long n = strlen(text) + 1;
	const char *a, *b;
	char *root;
	int rc;

	/* Rank 0's length, then its text. */
	world_watch_begin(w, "the configuration check");
	rc = MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, 0, w->comm);
	world_watch_end(w);
	if (rc != MPI_SUCCESS)
		return world_mpi_error(d, rc, "MPI_Bcast(configuration)");
	if (n == 0 || n > INT_MAX || (root = malloc(n)) == NULL)
		return diag_set(d, ST_RUNTIME, "configuration check: out of memory");
	if (w->rank == 0)
		memcpy(root, text, n);
	world_watch_begin(w, "the configuration check");
	rc = MPI_Bcast(root, (int)n, MPI_CHAR, 0, w->comm);
	world_watch_end(w);
	if (rc != MPI_SUCCESS) {
		free(root);
		return world_mpi_error(d, rc, "MPI_Bcast(configuration)");
	}
	root[n - 1] = '\0';
	/* Compare line by line; the lines are in the same order on every rank. */
	a = text;
	b = root;
	while (*a != '\0' || *b != '\0') {
		size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");

		if (la != lb || memcmp(a, b, la) != 0) {
			diag_set(d, ST_USAGE, "configuration differs between ranks: %.*s here, %.*s on rank 0",
				 (int)la, a, (int)lb, b);
			free(root);
			return ST_USAGE;
		}
		a += la + (a[la] == '\n');
		b += lb + (b[lb] == '\n');
	}
	free(root);
	return ST_OK;
}

int world_all(struct world *w, int mine)
{
	int in = mine != 0, out = 0, rc;

	if (w->peer_failed)
		return 0; /* peer_gone */
	world_watch_begin(w, "the device agreement");
	rc = MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_MIN, w->comm);
	world_watch_end(w);
	return rc == MPI_SUCCESS ? out : 0;
}

enum status world_share_failure(struct world *w, struct diag *mine)
{
	/* MINLOC over (ok, rank): the lowest failing rank, if any failed. */
	struct { int ok, rank; } in = {mine->st == ST_OK, w->rank}, out;
	int rc;

	if (peer_gone(w, mine) != ST_OK)
		return mine->st;
	world_watch_begin(w, "the ranks' agreement on a failure");
	rc = MPI_Allreduce(&in, &out, 1, MPI_2INT, MPI_MINLOC, w->comm);
	if (rc == MPI_SUCCESS && !out.ok)
		rc = MPI_Bcast(mine, (int)sizeof *mine, MPI_BYTE, out.rank, w->comm);
	world_watch_end(w);
	if (rc != MPI_SUCCESS)
		return world_mpi_error(mine, rc, "MPI_Allreduce/MPI_Bcast(a failure)");
	return mine->st;
}

/* The tag of a failed rank's word on world.alarm; the word is its rank. */
#define ALARM_TAG 1
/* world_peer_failed looks this often (seconds) at most. */
#define ALARM_LOOK 0.05

void world_alarm(struct world *w)
{
	if (w->alarmed || w->alarm == MPI_COMM_NULL || w->size < 2)
		return;
	w->alarmed = 1;
	for (int r = 0; r < w->size; r++) {
		MPI_Request rq;

		/* one int from w, which lives until MPI_Finalize: the send completes on its own */
		if (r != w->rank && MPI_Isend(&w->rank, 1, MPI_INT, r, ALARM_TAG, w->alarm, &rq) == MPI_SUCCESS)
			(void)MPI_Request_free(&rq);
	}
}

int world_peer_failed(void *arg)
{
	struct world *w = arg;
	MPI_Status status;
	int flag = 0;
	double now;

	if (w->peer_failed || w->alarm == MPI_COMM_NULL || !pthread_equal(pthread_self(), w->main_thread))
		return w->peer_failed;
	now = clock_now();
	if (now - w->alarm_looked < ALARM_LOOK)
		return 0;
	w->alarm_looked = now;
	if (MPI_Iprobe(MPI_ANY_SOURCE, ALARM_TAG, w->alarm, &flag, &status) == MPI_SUCCESS && flag)
		w->peer_failed = 1 + status.MPI_SOURCE;
	return w->peer_failed;
}

enum status world_bcast(struct world *w, void *buf, size_t len, int root, struct diag *d)
{
	int rc;

	if (peer_gone(w, d) != ST_OK)
		return d->st;
	world_watch_begin(w, "a broadcast from rank 0");
	rc = MPI_Bcast(buf, (int)len, MPI_BYTE, root, w->comm);
	world_watch_end(w);
	return rc == MPI_SUCCESS ? ST_OK : world_mpi_error(d, rc, "MPI_Bcast");
}

enum status world_local_allgather(struct world *w, const void *mine, size_t len, void *all,
				  struct diag *d)
{
	int rc;

	if (peer_gone(w, d) != ST_OK)
		return d->st;
	rc = MPI_Allgather(mine, (int)len, MPI_BYTE, all, (int)len, MPI_BYTE, w->local);
	return rc == MPI_SUCCESS ? ST_OK : world_mpi_error(d, rc, "MPI_Allgather(node)");
}

enum status world_allgather(struct world *w, const void *mine, size_t len, void *all,
			    const char *what, struct diag *d)
{
	int rc;

	if (peer_gone(w, d) != ST_OK)
		return d->st;
	world_watch_begin(w, what);
	rc = MPI_Allgather(mine, (int)len, MPI_BYTE, all, (int)len, MPI_BYTE, w->comm);
	world_watch_end(w);
	return rc == MPI_SUCCESS ? ST_OK : world_mpi_error(d, rc, "MPI_Allgather");
}

enum status world_gather(struct world *w, const void *mine, size_t len, void *all, struct diag *d)
{
	int rc;

	if (peer_gone(w, d) != ST_OK)
		return d->st;
	world_watch_begin(w, "the statistics gather");
	rc = MPI_Gather(mine, (int)len, MPI_BYTE, all, (int)len, MPI_BYTE, 0, w->comm);
	world_watch_end(w);
	return rc == MPI_SUCCESS ? ST_OK : world_mpi_error(d, rc, "MPI_Gather(statistics)");
}

/* The loaded objects' paths, gathered by dl_iterate_phdr (see pin_objects). */
struct loaded {
	char **path;
	size_t n, cap;
};

static int list_object(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct loaded *l = arg;
	char **grown;

	(void)size;
	if (info->dlpi_name == NULL || info->dlpi_name[0] != '/')
		return 0;
	if (l->n == l->cap) {
		grown = realloc(l->path, (l->cap ? 2 * l->cap : 32) * sizeof *grown);
		if (grown == NULL)
			return 1; /* the objects listed so far are pinned */
		l->path = grown;
		l->cap = l->cap ? 2 * l->cap : 32;
	}
	if ((l->path[l->n] = strdup(info->dlpi_name)) != NULL)
		l->n++;
	return 0;
}

/* Keep every shared object loaded so far mapped until the process ends (see world_free).
 * The paths are listed first and reopened after dl_iterate_phdr returns: dlopen inside
 * its callback would take the loader's lock while holding the list's, the reverse of the
 * order in which a dlopen or dlclose on another thread (MPI's or PMIx's progress thread
 * loading a component) takes them. Never inlined: the leak checkers' suppressions
 * (tests/lib/valgrind.supp, lsan.supp) name this frame, which holds what the loader keeps. */
__attribute__((noinline)) static void pin_objects(void)
{
	struct loaded l = {0};

	dl_iterate_phdr(list_object, &l);
	for (size_t i = 0; i < l.n; i++) {
		(void)dlopen(l.path[i], RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
		free(l.path[i]);
	}
	free(l.path);
}

void world_free(struct world *w)
{
	if (w->local != MPI_COMM_NULL)
		(void)MPI_Comm_free(&w->local); /* teardown: nobody to tell of a failure */
	if (w->notice != MPI_COMM_NULL)
		(void)MPI_Comm_free(&w->notice);
	/* a word no rank took (each had ended its waits) goes with its communicator */
	if (w->alarm != MPI_COMM_NULL)
		(void)MPI_Comm_free(&w->alarm);
	w->local = w->notice = w->alarm = MPI_COMM_NULL;
	if (w->inited) {
		/* Open MPI 4.1 unmaps its components (PMIx among them) in MPI_Finalize while its
		 * progress threads may still be inside them; under load a rank then died at exit
		 * with "Address not mapped" (3 times in this project's loaded test runs, always
		 * at the same page offset). Pinning every object loaded so far keeps that code
		 * mapped until exit; nothing is loaded or run twice. Watched under its own name,
		 * so that a stall says which of the two it was. */
		world_watch_begin(w, "keeping the loaded objects mapped before MPI_Finalize");
		pin_objects();
		world_watch_end(w);
		/* A rank that never arrives makes MPI_Finalize wait forever: watched too. */
		world_watch_begin(w, "MPI_Finalize");
		(void)MPI_Finalize(); /* the last MPI call: nobody to tell of a failure */
		world_watch_end(w);
		w->inited = 0;
	}
	watchdog_stop(w);
}
