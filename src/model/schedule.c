/* schedule.c - the learning-rate multipliers, written as transformers writes them. */
#include <math.h>

#include "model/schedule.h"

const char *const schedule_names[] = {"constant", "linear", "cosine", 0};

static long max1(long x)
{
	return x > 1 ? x : 1;
}

double schedule_multiplier(enum lr_schedule kind, long k, long warmup, long total)
{
	double progress;

	if (k < warmup)
		return (double)k / (double)max1(warmup);
	switch (kind) {
	case SCHED_CONSTANT:
		return 1.0;
	case SCHED_LINEAR:
		return fmax(0.0, (double)(total - k) / (double)max1(total - warmup));
	case SCHED_COSINE:
		progress = (double)(k - warmup) / (double)max1(total - warmup);
		return fmax(0.0, 0.5 * (1.0 + cos(M_PI * 0.5 * 2.0 * progress)));
	}
	return 1.0;
}
