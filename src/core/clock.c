/* clock.c - monotonic seconds. */
#include <time.h>

#include "core/clock.h"

double clock_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
