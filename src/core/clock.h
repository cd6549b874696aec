/*
 * clock.h - the program's one clock: monotonic seconds.
 *
 * Every interval ddptrain measures (step times, all-reduce waits, the
 * watchdog's silence, the dp phases) is a difference of two clock_now()
 * readings, so intervals can be added and subtracted from one another.
 */
#ifndef DDPT_CLOCK_H
#define DDPT_CLOCK_H

#ifdef __cplusplus
extern "C" { /* the CUDA module's .cu files use it too */
#endif

/* Seconds on CLOCK_MONOTONIC (an arbitrary origin; only differences mean anything). */
double clock_now(void);

#ifdef __cplusplus
}
#endif

#endif
