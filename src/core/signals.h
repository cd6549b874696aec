/*
 * signals.h - what ddptrain does when a signal arrives.
 *
 * Graceful stop: SIGTERM, SIGINT, SIGUSR1 (what Slurm and PBS send before
 * preemption or the time limit) and SIGHUP (a closed terminal or session).
 * The first one only raises a flag: the trainers fold it into the step's
 * gradient all-reduce, every rank stops after the same step, writes the
 * checkpoint and exits with EXIT_INTERRUPTED. A second one ends the process at
 * once (exit 128 + signal number, or EXIT_INTERRUPTED once the checkpoint is
 * written), removing the temporary files it had open.
 *
 * SIGPIPE is ignored: a write to a closed standard output fails with EPIPE
 * and the report stops printing (training goes on).
 *
 * SIGXFSZ is ignored: a write past the file-size limit (ulimit -f, which Slurm
 * copies from the submitting shell) fails with EFBIG, an ordinary write error
 * that names the file and removes the temporary, instead of killing the rank.
 *
 * SIGBUS on a mapped input file (another process truncated it) ends the process
 * with one line naming the file and exit 1, instead of a bare "Bus error".
 *
 * A stop can also be asked for with a file (--stop-file): once it exists, the stop is
 * pending as if SIGUSR1 had arrived. The batch scripts use it, because a signal sent to
 * the launcher as it starts is lost or kills it: mpirun dies of a SIGUSR1 that comes
 * before its handler, and forwards one that comes before the ranks exist to no one. A
 * file waits for the ranks, however long they take to start.
 *
 * The flag, the stop file's name, the table of mapped files and the table of temporary
 * files are the process-wide state in ddptrain, because a signal handler (or the
 * watchdog thread, for the stop file) can reach no other.
 */
#ifndef DDPT_SIGNALS_H
#define DDPT_SIGNALS_H

#include <stddef.h>

/* Install the handlers. Call it first thing in main (a signal during MPI start-up is
 * then a graceful stop too) and again after MPI_Init, which may install its own SIGBUS
 * handler. Idempotent. */
void signals_install(void);
/* The first stop signal received (SIGUSR1 once the stop file exists), or 0. Safe from
 * any thread; it looks for the stop file at most once every SIGNALS_STOP_FILE_EVERY
 * seconds, so calling it every step costs a clock reading. */
int signals_pending(void);
#define SIGNALS_STOP_FILE_EVERY 1.0
/* Watch path (--stop-file; NULL: none) from now on: a file there asks for a graceful stop,
 * as SIGUSR1 does. Call before any other thread starts; path must outlive the process's
 * use of it (argv storage). */
void signals_stop_file(const char *path);
/* The stop's checkpoint is written: a second signal now (mpirun ends the other ranks once
 * one has exited 3) says so and exits 3, instead of "without a checkpoint". */
void signals_stop_saved(void);

/* Name the file mapped at [addr, addr + len) for the SIGBUS message (what: e.g.
 * "--inputs: x.npy"; copied). Forget it before unmapping. At most 8 at a time;
 * further ones go unnamed. */
void signals_map_add(const void *addr, size_t len, const char *what);
void signals_map_remove(const void *addr);
/* The same for any mapping whose lost page means something else: why (a string that
 * lives as long as the program) follows what in the message. */
void signals_map_note(const void *addr, size_t len, const char *what, const char *why);

/* A temporary file this process is writing (or the lock file of an output it claims):
 * removed by any exit a handler or the watchdog makes. Returns a slot for
 * signals_tmp_remove, or -1 when the table (16 entries) is full or the path is too
 * long, in which case it is not tracked. */
int signals_tmp_add(const char *path);
void signals_tmp_remove(int slot);
/* Remove every tracked temporary file (async-signal-safe: only unlink). */
void signals_tmp_cleanup(void);

#endif
