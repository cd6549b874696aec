/*
 * world.h - the MPI job: rank, size, node-local rank, and the host-side
 * agreements every rank takes part in.
 *
 * world_agree is how a failure that only some ranks saw becomes everybody's
 * decision before anyone blocks in a collective: each rank contributes its
 * status, all get the most severe one and the lowest rank that saw it (the
 * one that reports it).
 */
#ifndef DDPT_WORLD_H
#define DDPT_WORLD_H

#include <mpi.h>
#include <pthread.h>

#include "core/status.h"

struct world {
	int rank, size;             /* in MPI_COMM_WORLD */
	int local_rank, local_size; /* on this node (MPI_COMM_TYPE_SHARED split) */
	MPI_Comm comm;              /* MPI_COMM_WORLD */
	MPI_Comm local;             /* this node's ranks */
	MPI_Comm notice;            /* a duplicate of comm: rank 0's progress notices (world_expect_wait) */
	int relay;                  /* world_expect_wait was called: the next world_agree relays them */
	double noticed;             /* rank 0: clock_now() of the last progress notice sent */
	MPI_Comm alarm;             /* a duplicate of comm: a failed rank's word to the others (world_alarm) */
	pthread_t main_thread;      /* the thread that called world_init: the one that calls MPI */
	int alarmed;                /* world_alarm sent this rank's word */
	int peer_failed;            /* 1 + the rank whose word world_peer_failed found, or 0 */
	double alarm_looked;        /* clock_now() of world_peer_failed's last look */
	int inited;                 /* we called MPI_Init_thread, so we finalize */
	_Atomic long step;          /* the optimizer step in progress (the watchdog reads it) */
	char host[64];              /* this process's host name (gethostname; "?" if none) */
	struct world_watch *watch;  /* the watchdog's state (world.c), or NULL */
};

/* Ranks in this job as the launcher's environment says, without starting MPI: 1 when no
 * launcher is seen (a singleton) or it started one rank, 0 when it does not say. */
int world_launch_size(void);
/* The one translation of an MPI error code: ST_RUNTIME with "CALL failed: MPI's message". */
enum status world_mpi_error(struct diag *d, int rc, const char *call);

/* MPI_Init_thread and the node split. w must be zeroed, or hold a watchdog started on a
 * zeroed struct (which then watches the start-up). */
enum status world_init(struct world *w, int *argc, char ***argv, struct diag *d);
/* A world of 1 where the launcher says there are more processes (srun without
 * --mpi=pmix: SLURM_STEP_NUM_TASKS > 1; a torchrun-style WORLD_SIZE > 1), each of which
 * would train alone: ST_USAGE with a hint. A world of 1 that mpirun reports is fine. */
enum status world_check_launch(const struct world *w, struct diag *d);
/* Every rank calls this with its own status. Returns the agreed (most severe) status;
 * *reporter is set to 1 on exactly one rank that saw it, the one that should print. */
enum status world_agree(struct world *w, enum status mine, int *reporter);
/* Every rank passes its configuration as "name=value" lines; rank 0's is broadcast and
 * the first line that differs is reported as ST_USAGE, naming this rank and the setting. */
enum status world_check_config(struct world *w, const char *text, struct diag *d);
/* 1 on every rank if mine is nonzero on every rank, else 0. */
int world_all(struct world *w, int mine);
/* Every rank passes its own outcome in *mine (ST_OK: none). If some rank failed, every
 * rank returns the lowest failing rank's status, with its message in *mine, so that all
 * can act on (and rank 0 can tell) a reason only some ranks saw. */
enum status world_share_failure(struct world *w, struct diag *mine);
/* A rank that failed on its own (its device, say) and goes to agree on it, while the
 * others may be waiting on their devices for a collective it will never join, tells them
 * so first: one word to every other rank, sent without waiting, once per run.
 * world_peer_failed (a struct world *) is for those waits to poll: 1 + the rank of a
 * peer that sent its word, or 0; it looks (MPI_Iprobe) at most every 50 ms, and only on
 * the thread that called world_init (MPI is funneled through it), answering 0 elsewhere. */
void world_alarm(struct world *w);
int world_peer_failed(void *w);
/* Broadcast len bytes from root. */
enum status world_bcast(struct world *w, void *buf, size_t len, int root, struct diag *d);
/* Start the watchdog thread: a blocking collective that lasts longer than timeout_s
 * (0: never) ends this process with a message naming the step and the collective; Open MPI
 * then ends the job. Call it before world_init (on a zeroed struct world) to watch MPI's
 * start-up too; called again, it sets the timeout. It stops in world_free, after
 * MPI_Finalize. */
enum status world_watchdog_start(struct world *w, double timeout_s, struct diag *d);
/* Training starts (who: what computes between the marks, "this rank", or dp's main
 * thread) or ends (NULL): while it runs, a rank that neither begins nor ends a marked wait
 * nor makes progress (world_watch_progress) for --timeout (stuck in a product, as
 * OpenBLAS's allocator spins under a tight ulimit -v, or in a write) is ended too, naming
 * its step. Every step marks at least one wait (the step's host synchronisation, or dp's
 * wait for its replicas). */
void world_watch_training(struct world *w, const char *who);
/* Mark the start and end of a blocking collective (what: e.g. "gradient all-reduce"). */
void world_watch_begin(struct world *w, const char *what);
/* The same for a wait for another thread of this process (what: e.g. "replica 1's forward
 * pass", dp's worker): the give-up line says that thread is stuck, not another rank.
 * Ended by world_watch_end. */
void world_watch_thread(struct world *w, const char *what);
/* This rank has failed with msg (which must live until it is replaced, or forgotten with
 * NULL): if the collective it then waits in times out (the others stuck waiting for it),
 * the watchdog prints msg first. */
void world_failed(struct world *w, const char *msg);
void world_watch_end(struct world *w);
/* Work that is no collective goes on (an evaluation batch done, a piece of a file
 * written): --timeout counts again from now, whether this rank is between marks or
 * waiting. On rank 0 between world_expect_wait and the agreement after it, the other
 * ranks, waiting in that agreement for it, hear of it too (at most twice a second), and
 * their wait counts again from then. Main thread only; w may be NULL. */
void world_watch_progress(struct world *w);
/* world_watch_progress for a struct progress (core/outfile.h): arg is the struct world. */
void world_progress(void *arg);
/* Rank 0 is about to be busy (busy: e.g. "the checkpoint write on rank 0") and the next
 * agreement (world_agree) waits for it: that agreement has no short grace for a pending
 * stop signal, only --timeout ends it, and rank 0's progress while busy reaches the
 * others there (world_watch_progress), so a write that goes on for longer than --timeout
 * is not taken for a stall. Call on every rank, before rank 0's work (or, for work that
 * makes no progress calls, after it), with no world_agree in between. */
void world_expect_wait(struct world *w, const char *busy);
/* Rank 0 is busy outside any agreement (busy: e.g. "the --prometheus write on rank 0",
 * while the others go on into the next step's collectives): until this is called again
 * with NULL, every marked wait of this rank is patient as world_expect_wait's agreement
 * is, and a timeout names busy. */
void world_expect_busy(struct world *w, const char *busy);
/* Gather len bytes from every rank of this node into all (local_size * len bytes) on each. */
enum status world_local_allgather(struct world *w, const void *mine, size_t len, void *all,
				  struct diag *d);
/* Gather len bytes from every rank into all (size * len bytes, rank order) on every rank;
 * watched as `what`. */
enum status world_allgather(struct world *w, const void *mine, size_t len, void *all,
			    const char *what, struct diag *d);
/* Gather len bytes from every rank into all (size * len bytes) on rank 0. */
enum status world_gather(struct world *w, const void *mine, size_t len, void *all, struct diag *d);
/* The run is over: its outcome agreed, its files written, exit_code the status it ends
 * with. A stop signal that then finds a wait (MPI_Finalize) longer than its grace ends
 * the process with exit_code, not 1: there is nothing left to save. --timeout still ends
 * a stalled wait with 1. */
void world_outcome(struct world *w, int exit_code);
/* Safe to call twice. */
void world_free(struct world *w);

#endif
