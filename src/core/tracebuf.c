/* tracebuf.c - the span names and the device-clock resolution of a trace buffer. */
#include "core/tracebuf.h"

const char *const trace_what_names[TR_NWHAT] = {
	"load", "forward", "loss", "backward", "allreduce", "wait", "optimizer", "validation",
	"checkpoint", "stop", "scatter", "replicate", "gather", "reduce", "replica check", "reducescatter",
	"allgather",
};

void trace_resolve(struct trace_buf *b)
{
	if (b == NULL)
		return;
	if (b->dev != NULL) {
		for (size_t i = b->resolved; i < b->n; i++) {
			struct trace_event *e = &b->ev[i];

			if (e->m0 >= 0)
				e->t0 = b->dev->time(b->dev_ctx, e->m0);
			if (e->m1 >= 0)
				e->t1 = b->dev->time(b->dev_ctx, e->m1);
			e->m0 = e->m1 = -1;
		}
		b->dev->reset(b->dev_ctx);
	}
	b->resolved = b->n;
}

