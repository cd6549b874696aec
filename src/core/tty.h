/*
 * tty.h - whether rank 0's standard output reaches a terminal that takes \r and escapes,
 * looking through mpirun (which gives each rank a pseudo-terminal of its own) and the
 * wrappers between it and us, by walking /proc's parents. Linux's /proc only; elsewhere
 * the answer is "no", which costs only the rewritten progress line.
 */
#ifndef DDPT_TTY_H
#define DDPT_TTY_H

/* 1 if the output is a terminal (TERM set and not "dumb"); 0 otherwise. */
int tty_stdout_is_terminal(void);

#endif
