/* vmspace.c - this process's mapped bytes, its address-space limit, a thread's stack. */
#define _GNU_SOURCE         /* pthread_getattr_default_np */
#include <malloc.h>         /* mallopt: M_ARENA_MAX */
#include <pthread.h>
#include <stdio.h>
#include <sys/resource.h> /* getrlimit: RLIMIT_AS */
#include <unistd.h>       /* sysconf */

#include "core/vmspace.h"

void vmspace_init(void)
{
	if (vmspace_limit() > 0)
		mallopt(M_ARENA_MAX, 1);
}

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

double vmspace_peak(void)
{
	unsigned long kib = 0;
	char line[128];
	FILE *f = fopen("/proc/self/status", "r");

	while (f != NULL && fgets(line, sizeof line, f) != NULL)
		if (sscanf(line, "VmPeak: %lu kB", &kib) == 1)
			break;
	if (f != NULL)
		fclose(f);
	return (double)kib * 1024.0;
}

double vmspace_limit(void)
{
	struct rlimit as;

	if (getrlimit(RLIMIT_AS, &as) != 0 || as.rlim_cur == RLIM_INFINITY)
		return 0.0;
	return (double)as.rlim_cur;
}

size_t vmspace_thread_bytes(void)
{
	size_t stack = (size_t)8 << 20, guard = (size_t)sysconf(_SC_PAGESIZE); /* glibc's defaults */
	pthread_attr_t a;

	if (pthread_getattr_default_np(&a) == 0) {
		pthread_attr_getstacksize(&a, &stack);
		pthread_attr_getguardsize(&a, &guard);
		pthread_attr_destroy(&a);
	}
	if (stack == 0) /* not set: glibc's own default */
		stack = (size_t)8 << 20;
	return stack + guard;
}
