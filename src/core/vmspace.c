/* vmspace.c - this process's mapped bytes and its address-space limit. */
#include <stdio.h>
#include <sys/resource.h> /* getrlimit: RLIMIT_AS */
#include <unistd.h>       /* sysconf */

#include "core/vmspace.h"

double vmspace_used(void)
{
	unsigned long pages = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (f != NULL) {
		if (fscanf(f, "%lu", &pages) != 1)
			pages = 0;
		fclose(f);
	}
	return (double)pages * (double)sysconf(_SC_PAGESIZE);
}

double vmspace_limit(void)
{
	struct rlimit as;

	if (getrlimit(RLIMIT_AS, &as) != 0 || as.rlim_cur == RLIM_INFINITY)
		return 0.0;
	return (double)as.rlim_cur;
}
