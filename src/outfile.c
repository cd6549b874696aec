/* outfile.c - the start-up check that an output file can be written. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "outfile.h"

enum status outfile_check(const char *path, const char *flag, size_t need_bytes, struct diag *d)
{
	struct stat sb;
	struct statvfs vfs;
	enum status st = ST_OK;
	char *probe;
	int fd;

	if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
		return diag_set(d, ST_RUNTIME, "%s: %s: exists and is not a regular file", flag, path);
	/* The same name pattern the writers use for their temporary file. */
	probe = malloc(strlen(path) + 16);
	if (probe == NULL)
		return diag_set(d, ST_RUNTIME, "%s: out of memory", flag);
	sprintf(probe, "%s.tmp.XXXXXX", path);
	fd = mkstemp(probe);
	if (fd < 0) {
		st = diag_errno(d, errno, "%s: %s: cannot create a file beside it", flag, path);
		goto out_free;
	}
	if (need_bytes > 0 && fstatvfs(fd, &vfs) == 0 &&
	    (unsigned long long)vfs.f_bavail * vfs.f_frsize < need_bytes)
		st = diag_set(d, ST_RUNTIME, "%s: %s: needs %zu bytes but its file system has %llu free",
			      flag, path, need_bytes, (unsigned long long)vfs.f_bavail * vfs.f_frsize);
	close(fd);
	unlink(probe);
out_free:
	free(probe);
	return st;
}
