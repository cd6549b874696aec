/* outfile.c - the start-up checks that output files can be written and do not collide. */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
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

/* Where path is or would be: "D:I" for an existing file (its device and inode, so links
 * and other spellings meet), else the resolved directory and the name. */
static void file_identity(const char *path, char *out, size_t len)
{
	char *dcopy = strdup(path), *bcopy = strdup(path), dir[PATH_MAX];
	struct stat sb;

	if (stat(path, &sb) == 0)
		snprintf(out, len, "%llu:%llu", (unsigned long long)sb.st_dev,
			 (unsigned long long)sb.st_ino);
	else if (dcopy != NULL && bcopy != NULL && realpath(dirname(dcopy), dir) != NULL)
		snprintf(out, len, "%s/%s", dir, basename(bcopy));
	else
		snprintf(out, len, "%s", path);
	free(dcopy);
	free(bcopy);
}

/* Is path one of rot's rotation names (rot.step-DIGITS in rot's directory)? */
static int is_rotation_name(const char *path, const char *rot)
{
	char *pd = strdup(path), *pb = strdup(path), *rd = strdup(rot), *rb = strdup(rot);
	char a[PATH_MAX], b[PATH_MAX];
	const char *name, *base;
	size_t blen;
	int hit = 0;

	if (pd && pb && rd && rb && realpath(dirname(pd), a) != NULL && realpath(dirname(rd), b) != NULL &&
	    strcmp(a, b) == 0) {
		name = basename(pb);
		base = basename(rb);
		blen = strlen(base);
		hit = strncmp(name, base, blen) == 0 && strncmp(name + blen, ".step-", 6) == 0 &&
		      name[blen + 6] != '\0' && strspn(name + blen + 6, "0123456789") == strlen(name + blen + 6);
	}
	free(pd);
	free(pb);
	free(rd);
	free(rb);
	return hit;
}

enum status outfile_distinct(const struct named_path *p, int n, int allow_a, int allow_b,
			     struct diag *d)
{
	char id[2][PATH_MAX + 32];

	for (int i = 0; i < n; i++) {
		if (p[i].path == NULL)
			continue;
		for (int j = 0; j < n; j++) {
			if (j == i || p[j].path == NULL || !(p[i].output || p[j].output))
				continue;
			if (p[j].rotation && p[i].output && is_rotation_name(p[i].path, p[j].path))
				return diag_set(d, ST_USAGE, "%s: %s is one of %s's rotation names (%s.step-N, --keep-checkpoints); give it another name",
						p[i].flag, p[i].path, p[j].flag, p[j].path);
			if (j < i || (i == allow_a && j == allow_b) || (i == allow_b && j == allow_a))
				continue;
			file_identity(p[i].path, id[0], sizeof id[0]);
			file_identity(p[j].path, id[1], sizeof id[1]);
			if (strcmp(id[0], id[1]) == 0)
				return diag_set(d, ST_USAGE, "%s and %s name the same file (%s)%s", p[i].flag,
						p[j].flag, p[j].path,
						p[i].output && p[j].output ? ": give each output its own name"
									   : ": an output would overwrite an input");
		}
	}
	return ST_OK;
}
