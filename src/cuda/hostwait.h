/*
 * hostwait.h - how the CUDA module's host waits for the device: by polling,
 * never blocking inside the driver, so that the communicator's asynchronous
 * error and the timeout are watched for as long as the wait lasts.
 *
 * The backend's waits (to_host, sync, host_wait) and the NCCL communicator's
 * (the weight broadcast) all go through hostwait(). It is plain C without
 * CUDA types -- the caller's query says whether the work is done -- so that
 * tests/unit/test_hostwait.c runs it on every machine.
 */
#ifndef DDPT_HOSTWAIT_H
#define DDPT_HOSTWAIT_H

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct hostwait {
	const char *what;  /* the call waited for, in messages */
	int device;        /* the GPU, in the timeout's message */
	/* 1: the work waited for is done, 0: not yet, -1: failed (the reason set in d) */
	int (*query)(void *arg, struct diag *d);
	void *arg;
	/* The communicator's asynchronous error (NULL: none ordered with this work). */
	enum status (*poll)(void *arg, struct diag *d);
	void *poll_arg;
	int timeout_s;     /* give up after this long without the work done; 0: never */
};

/* Wait until w->query says done, polling the communicator meanwhile and once more after;
 * the first failure (the query's, the poll's, or the timeout's "no progress" with
 * w->what) is returned, set in d. */
enum status hostwait(const struct hostwait *w, struct diag *d);

#ifdef __cplusplus
}
#endif

#endif
