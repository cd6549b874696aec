/* outfile.c - output targets, their temporary files, the start-up checks that output
 * files can be written and do not collide, and the one atomic writer. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "core/outfile.h"
#include "core/signals.h"

#define TMP_SUFFIX ".tmp."
#define TMP_RANDOM 6 /* mkstemp's XXXXXX */

/* The file-size limit (RLIMIT_FSIZE, ulimit -f) in bytes, or 0 when there is none. */
static unsigned long long size_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_FSIZE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
		return 0;
	return (unsigned long long)rl.rlim_cur;
}

/* Has the file open at fd reached the file-size limit? (Then that is why a buffered write
 * failed, whose errno is gone.) */
static int at_size_limit(int fd)
{
	struct stat sb;

	return size_limit() > 0 && fstat(fd, &sb) == 0 && (unsigned long long)sb.st_size >= size_limit();
}

enum status outfile_write_failed(struct diag *d, int errnum, const char *what)
{
	unsigned long long limit = size_limit();
	char why[80] = "";

	if (errnum == EFBIG && limit > 0)
		snprintf(why, sizeof why, " (the file-size limit, ulimit -f, is %llu bytes)", limit);
	return diag_set(d, ST_RUNTIME, "%s: write: %s%s", what, strerror(errnum), why);
}

char *outfile_target(const char *path)
{
	char *cur = strdup(path);

	for (int hops = 0; cur != NULL; hops++) {
		struct stat sb;
		char link[PATH_MAX], *next;
		ssize_t n;

		if (lstat(cur, &sb) != 0 || !S_ISLNK(sb.st_mode))
			return cur; /* absent or not a link: write here */
		if (hops == 40) {
			free(cur);
			errno = ELOOP;
			return NULL;
		}
		n = readlink(cur, link, sizeof link - 1);
		if (n < 0) {
			free(cur);
			return NULL;
		}
		link[n] = '\0';
		if (link[0] == '/' || strchr(cur, '/') == NULL) {
			next = strdup(link);
		} else { /* relative to the link's directory */
			size_t dlen = (size_t)(strrchr(cur, '/') - cur) + 1;

			next = malloc(dlen + (size_t)n + 1);
			if (next != NULL) {
				memcpy(next, cur, dlen);
				memcpy(next + dlen, link, (size_t)n + 1);
			}
		}
		free(cur);
		cur = next;
	}
	errno = ENOMEM;
	return NULL;
}

/* The one place a temporary is made: "<target>.tmp.XXXXXX", open for writing, with the
 * mode the umask gives new files, registered with the signal handlers so that every exit
 * removes it. *tmp (caller frees) and *slot go to tmp_forget. Returns the descriptor, or
 * -1 with errno set. */
static int tmp_create(const char *target, char **tmp, int *slot)
{
	mode_t mask;
	int fd;

	*slot = -1;
	*tmp = malloc(strlen(target) + sizeof TMP_SUFFIX + TMP_RANDOM);
	if (*tmp == NULL) {
		errno = ENOMEM;
		return -1;
	}
	sprintf(*tmp, "%s" TMP_SUFFIX "XXXXXX", target);
	fd = mkstemp(*tmp);
	if (fd < 0) {
		int e = errno;

		free(*tmp);
		*tmp = NULL;
		errno = e;
		return -1;
	}
	*slot = signals_tmp_add(*tmp);
	mask = umask(0); /* mkstemp makes 0600; give the file the usual mode */
	umask(mask);
	fchmod(fd, 0666 & ~mask);
	return fd;
}

/* The temporary is renamed or removed: stop tracking it. */
static void tmp_forget(char **tmp, int *slot)
{
	signals_tmp_remove(*slot);
	*slot = -1;
	free(*tmp);
	*tmp = NULL;
}

/* Remove "<target>.tmp.XXXXXX" files (exactly ddptrain's pattern) beside target;
 * returns how many. */
static int remove_stale(const char *target)

{
	char *dcopy = strdup(target), *bcopy = strdup(target);
	const char *dir, *base;
	struct dirent *e;
	size_t blen;
	int removed = 0;
	DIR *dp;

	if (dcopy == NULL || bcopy == NULL)
		goto out;
	dir = dirname(dcopy);
	base = basename(bcopy);
	blen = strlen(base);
	dp = opendir(dir);
	while (dp != NULL && (e = readdir(dp)) != NULL) {
		const char *rest = e->d_name + blen;
		char path[PATH_MAX];

		if (strncmp(e->d_name, base, blen) != 0 || strncmp(rest, TMP_SUFFIX, strlen(TMP_SUFFIX)) != 0)
			continue;
		rest += strlen(TMP_SUFFIX);
		if (strlen(rest) != TMP_RANDOM ||
		    strspn(rest, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") != TMP_RANDOM)
			continue;
		if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) < sizeof path &&
		    unlink(path) == 0)
			removed++;
	}
	if (dp != NULL)
		closedir(dp);
out:
	free(dcopy);
	free(bcopy);
	return removed;
}

enum status outfile_check(const char *path, const char *flag, size_t need_bytes, struct diag *d)
{
	struct stat sb;
	struct statvfs vfs;
	enum status st = ST_OK;
	char *target, *probe;
	int fd, slot;

	target = outfile_target(path);
	if (target == NULL)
		return diag_errno(d, errno, "%s: %s", flag, path);
	if (stat(target, &sb) == 0 && !S_ISREG(sb.st_mode)) {
		st = diag_set(d, ST_RUNTIME, "%s: %s: exists and is not a regular file", flag, path);
		goto out_target;
	}
	remove_stale(target);
	/* The same kind of temporary file the writers use. */
	fd = tmp_create(target, &probe, &slot);
	if (fd < 0) {
		st = diag_errno(d, errno, "%s: %s: cannot create a file beside it", flag, path);
		goto out_target;
	}
	if (need_bytes > 0 && size_limit() > 0 && need_bytes > size_limit())
		st = diag_set(d, ST_RUNTIME, "%s: %s: needs %zu bytes but the file-size limit (ulimit -f) is %llu bytes",
			      flag, path, need_bytes, size_limit());
	else if (need_bytes > 0 && fstatvfs(fd, &vfs) == 0 &&
		 (unsigned long long)vfs.f_bavail * vfs.f_frsize < need_bytes)
		st = diag_set(d, ST_RUNTIME, "%s: %s: needs %zu bytes but its file system has %llu free",
			      flag, path, need_bytes, (unsigned long long)vfs.f_bavail * vfs.f_frsize);
	close(fd);
	unlink(probe);
	tmp_forget(&probe, &slot);
out_target:
	free(target);
	return st;
}

/* Where path is or would be: "D:I" for an existing file (its device and inode, so links
 * and other spellings meet), else the resolved directory and the name of the file a write
 * would create (through a dangling link, the file it names). */
static void file_identity(const char *given, char *out, size_t len)
{
	char *target = outfile_target(given), dir[PATH_MAX];
	const char *path = target != NULL ? target : given;
	char *dcopy = strdup(path), *bcopy = strdup(path);
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
	free(target);
}

/* Is path one of rot's rotation names (target.step-DIGITS beside rot's target, the names
 * checkpoint.c gives them)? Both are resolved through symbolic links. */
static int is_rotation_name(const char *given, const char *rot_given)
{
	char *path = outfile_target(given), *rot = outfile_target(rot_given);
	char *pd = path ? strdup(path) : NULL, *pb = path ? strdup(path) : NULL;
	char *rd = rot ? strdup(rot) : NULL, *rb = rot ? strdup(rot) : NULL;
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
	free(path);
	free(rot);
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

enum status outfile_open(struct outfile *of, const char *path, const char *flag, struct diag *d)
{
	int fd;

	memset(of, 0, sizeof *of);
	of->slot = -1;
	snprintf(of->what, sizeof of->what, "%s: %s", flag, path);
	of->target = outfile_target(path); /* through a symbolic link, to the file it names */
	if (of->target == NULL)
		return diag_errno(d, errno, "%s", of->what);
	fd = tmp_create(of->target, &of->tmp, &of->slot);
	if (fd < 0) {
		enum status st = diag_errno(d, errno, "%s: cannot create a file beside it", of->what);

		outfile_abort(of);
		return st;
	}
	of->f = fdopen(fd, "w");
	if (of->f == NULL) {
		enum status st = diag_errno(d, errno, "%s", of->what);

		close(fd);
		outfile_abort(of);
		return st;
	}
	return ST_OK;
}

enum status outfile_write(struct outfile *of, const void *buf, size_t len, struct diag *d)
{
	if (len > 0 && fwrite(buf, 1, len, of->f) != len)
		return outfile_write_failed(d, errno, of->what);
	return ST_OK;
}

enum status outfile_sync(struct outfile *of, struct diag *d)
{
	enum status st = ST_OK;

	if (of->f == NULL)
		return ST_OK;
	if (fflush(of->f) != 0)
		st = outfile_write_failed(d, errno, of->what);
	else if (ferror(of->f) && at_size_limit(fileno(of->f)))
		st = outfile_write_failed(d, EFBIG, of->what);
	else if (ferror(of->f)) /* an earlier buffered write failed; its errno is gone */
		st = diag_set(d, ST_RUNTIME, "%s: write failed", of->what);
	else if (fsync(fileno(of->f)) != 0)
		st = diag_errno(d, errno, "%s: fsync", of->what);
	if (fclose(of->f) != 0 && st == ST_OK)
		st = diag_errno(d, errno, "%s: close", of->what);
	of->f = NULL;
	if (st != ST_OK)
		outfile_abort(of);
	return st;
}

/* Make a rename in path's directory durable. */
static void sync_dir(const char *path)
{
	char *dir = strdup(path);
	int dfd = dir ? open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;

	if (dfd >= 0) {
		fsync(dfd);
		close(dfd);
	}
	free(dir);
}

enum status outfile_commit(struct outfile *of, struct diag *d)
{
	enum status st = ST_OK;

	if (of->tmp == NULL)
		goto out;
	st = outfile_sync(of, d);
	if (st != ST_OK)
		goto out;
	if (rename(of->tmp, of->target) != 0) {
		st = diag_errno(d, errno, "%s: rename", of->what);
		goto out;
	}
	tmp_forget(&of->tmp, &of->slot);
	sync_dir(of->target);
out:
	outfile_abort(of);
	return st;
}

void outfile_abort(struct outfile *of)
{
	if (of->f != NULL)
		fclose(of->f);
	of->f = NULL;
	if (of->tmp != NULL) {
		unlink(of->tmp);
		tmp_forget(&of->tmp, &of->slot);
	}
	free(of->target);
	of->target = NULL;
}
