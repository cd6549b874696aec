/* hostwait.c - the CUDA module's host waits: poll the work, the communicator and the clock
 * until the work is known complete, and the communicator once more then. */
#include <sched.h>

#include "core/clock.h"
#include "cuda/hostwait.h"

enum status hostwait(const struct hostwait *w, struct diag *d)
{
	double t0 = clock_now();

	for (;;) {
		int q = w->query(w->arg, d);

		/* Done: the poll runs once more. A replayed graph's collectives are waited for
		 * only here, and NCCL may report their error as the stream drains, or before
		 * the host came to wait at all. */
		if (q > 0)
			return w->poll != NULL ? w->poll(w->poll_arg, d) : ST_OK;
		if (q < 0)
			return d->st != ST_OK ? d->st : diag_set(d, ST_RUNTIME, "%s failed", w->what);
		if (w->poll != NULL && w->poll(w->poll_arg, d) != ST_OK)
			return d->st;
		if (w->timeout_s > 0 && clock_now() - t0 > w->timeout_s)
			return diag_set(d, ST_RUNTIME, "GPU %d: %s: no progress for %d s: a peer rank is gone or stalled",
					w->device, w->what, w->timeout_s);
		sched_yield();
	}
}
