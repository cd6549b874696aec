/* tty.c - is this process's standard output a terminal, under mpirun too (/proc's parents). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "core/tty.h"

/* The parent of process pid, from /proc/pid/stat ("pid (comm) state ppid ..."), or -1. */
static pid_t parent_of(pid_t pid)
{
	char path[64], buf[512], *close_paren;
	FILE *f;
	size_t n;
	int ppid = -1;

	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (f == NULL)
		return -1;
	n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	close_paren = strrchr(buf, ')'); /* comm may hold spaces and parentheses */
	if (close_paren == NULL || sscanf(close_paren + 1, " %*c %d", &ppid) != 1)
		return -1;
	return (pid_t)ppid;
}

/* Does rank 0's output reach a terminal that takes \r and escapes? Not with TERM=dumb or
 * no TERM. Open MPI gives each rank a pseudo-terminal of its own, whatever mpirun writes
 * to, so under mpirun look past every ancestor that shares our standard output (a wrapper
 * such as timeout or time between mpirun and ddptrain) to the first whose standard output
 * is another file: the launcher's. Without mpirun, at ours. */
int tty_stdout_is_terminal(void)
{
	const char *term = getenv("TERM");
	struct stat mine, theirs;
	char link[64], target[256];
	pid_t p = getppid();
	ssize_t n;

	if (term == NULL || *term == '\0' || strcmp(term, "dumb") == 0)
		return 0;
	if (getenv("OMPI_COMM_WORLD_SIZE") == NULL)
		return isatty(STDOUT_FILENO);
	if (fstat(STDOUT_FILENO, &mine) != 0)
		return 0;
	for (int depth = 0; p > 1 && depth < 16; depth++, p = parent_of(p)) {
		snprintf(link, sizeof link, "/proc/%d/fd/1", (int)p);
		if (stat(link, &theirs) != 0)
			return 0;
		if (theirs.st_dev == mine.st_dev && theirs.st_ino == mine.st_ino)
			continue; /* a wrapper writing where we write */
		n = readlink(link, target, sizeof target - 1);
		if (n <= 0)
			return 0;
		target[n] = '\0';
		return strncmp(target, "/dev/pts/", 9) == 0 || strncmp(target, "/dev/tty", 8) == 0;
	}
	return 0;
}
