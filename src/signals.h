/*
 * signals.h - graceful stop on SIGTERM, SIGINT and SIGUSR1 (what Slurm and
 * PBS send before preemption or the time limit).
 *
 * The first signal only raises a flag: the trainers fold it into the step's
 * gradient all-reduce, every rank stops after the same step, writes the
 * checkpoint and exits with EXIT_INTERRUPTED. A second signal ends the
 * process at once (exit 128 + signal number). The flag is the one piece of
 * process-wide state in ddptrain, because a signal handler can reach no other.
 */
#ifndef DDPT_SIGNALS_H
#define DDPT_SIGNALS_H

/* Install the handlers (once, before training). */
void signals_install(void);
/* The first signal received, or 0. */
int signals_pending(void);

#endif
