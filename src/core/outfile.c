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
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "core/outfile.h"
#include "core/signals.h"

#define TMP_SUFFIX ".tmp."
#define TMP_RANDOM 6 /* mkstemp's XXXXXX */
#define LOCK_SUFFIX ".lock"

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

/* Do fd and name refer to the same file? */
static int same_file(int fd, const char *name)
{
	struct stat a, b;

	return fstat(fd, &a) == 0 && stat(name, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* Another process holds the lock on fd (the lock file `name`): ST_USAGE naming it by the
 * "host pid" it wrote. */
static enum status lock_refused(int fd, const char *name, const char *flag, const char *path,
				struct diag *d)
{
	char text[300] = "", host[256], q[256];
	ssize_t n = pread(fd, text, sizeof text - 1, 0);
	long pid;

	text[n > 0 ? n : 0] = '\0';
	if (sscanf(text, "%255s %ld", host, &pid) != 2) /* it has not written them yet */
		return diag_set(d, ST_USAGE, "%s: %s: another ddptrain is writing it (it holds %s); give this run another file, or wait for that one to end",
				flag, path, name);
	return diag_set(d, ST_USAGE, "%s: %s: another ddptrain is writing it (host %s, pid %ld); give this run another file, or wait for that one to end",
			flag, path, diag_quote(q, sizeof q, host), pid);
}

/* Is the file open at fd one a lock of ours could be: a regular file with no other name
 * (a hard link would carry the lock's text into another file) that is empty (made, not
 * yet signed) or holds one line "host pid" (lock_sign)? Anything else is a user's file
 * that happens to be named like a lock, and is never written or removed. On a no, *why
 * says what it is. */
static int lock_file_ok(int fd, const char **why)
{
	char text[300], host[256], tail;
	struct stat sb;
	ssize_t n;
	long pid;

	if (fstat(fd, &sb) != 0) {
		*why = "cannot be examined";
		return 0;
	}
	if (S_ISDIR(sb.st_mode))
		*why = "is a directory";
	else if (!S_ISREG(sb.st_mode))
		*why = "is not a regular file";
	else if (sb.st_nlink != 1)
		*why = "is a hard link to another file";
	else if (sb.st_size == 0)
		return 1;
	else if (sb.st_size >= (off_t)sizeof text)
		*why = "is not a ddptrain lock file (it holds other data)";
	else if ((n = pread(fd, text, sizeof text - 1, 0)) != sb.st_size)
		*why = "cannot be read";
	else if ((text[n] = '\0', sscanf(text, "%255s %ld%c", host, &pid, &tail) != 3) ||
		 tail != '\n' || strchr(text, '\n') != text + n - 1 || pid <= 0)
		*why = "is not a ddptrain lock file (it holds other data)";
	else
		return 1;
	return 0;
}

/* The lock file `name` exists but cannot be one of ours: ST_USAGE naming it and why.
 * Nothing is written to it or removed: it may be a user's file. */
static enum status lock_unusable(struct diag *d, const char *flag, const char *path, const char *name,
				 const char *why)
{
	return diag_set(d, ST_USAGE, "%s: %s %s, and ddptrain needs that name for the lock it holds while writing %s: remove it or give %s another name",
			flag, name, why, path, flag);
}

/* Open the lock file `name`, made here if absent, without following a link and without
 * blocking on a FIFO, and with no truncation: until lock_file_ok says it is ours, its
 * bytes are not touched. Returns the descriptor; -1 with d set; -2 when the file went
 * away between the two opens (its holder ended: try again). */
static int lock_open(const char *name, const char *flag, const char *path, struct diag *d)
{
	const int how = O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
	struct stat sb;
	int fd, e;

	fd = open(name, how | O_CREAT | O_EXCL, 0666);
	if (fd >= 0 || errno != EEXIST) {
		if (fd < 0)
			diag_errno(d, errno, "%s: %s: cannot create a file beside it", flag, path);
		return fd;
	}
	fd = open(name, how);
	if (fd >= 0)
		return fd;
	e = errno;
	if (lstat(name, &sb) == 0 && S_ISLNK(sb.st_mode))
		lock_unusable(d, flag, path, name, stat(name, &sb) == 0 ? "is a symbolic link" : "is a dangling symbolic link");
	else if (e == EISDIR || (lstat(name, &sb) == 0 && S_ISDIR(sb.st_mode)))
		lock_unusable(d, flag, path, name, "is a directory");
	else if (e == ENOENT)
		return -2;
	else if (e == ENXIO || e == ELOOP || e == EACCES || e == EPERM || e == ETXTBSY)
		lock_unusable(d, flag, path, name, e == ENXIO ? "is not a regular file" : strerror(e));
	else
		diag_errno(d, e, "%s: %s", flag, name);
	return -1;
}

/* Claim target for this process: lock (flock) "<target>.lock". ST_OK with l->path set;
 * ST_OK with l->path NULL where the file system has no locks; ST_USAGE when another
 * process holds it, or when the name holds something that is not a lock of ours (a
 * link, a directory, a FIFO, a file with other names or other bytes: see lock_file_ok).
 * lock_sign then writes who holds it. */
static enum status lock_take(struct outfile_lock *l, const char *target, const char *flag,
			     const char *path, struct diag *d)
{
	char *name = malloc(strlen(target) + sizeof LOCK_SUFFIX);
	enum status st = ST_OK;
	const char *why;
	int fd = -1;

	l->path = NULL;
	l->slot = -1;
	if (name == NULL)
		return diag_set(d, ST_RUNTIME, "%s: %s: out of memory", flag, path);
	sprintf(name, "%s" LOCK_SUFFIX, target);
	/* A holder removes the file as it ends: a lock taken on a name that has gone (or been
	 * made anew) since it was opened claims nothing, so take the new one. */
	for (int tries = 0; st == ST_OK; tries++) {
		fd = lock_open(name, flag, path, d);
		if (fd == -2 && tries < 100) {
			continue;
		} else if (fd < 0) {
			st = fd == -1 ? d->st : diag_set(d, ST_RUNTIME, "%s: %s: %s keeps being replaced", flag, path, name);
		} else if (!lock_file_ok(fd, &why)) {
			/* Looked at before flock: a FIFO or a device is not to be locked either. */
			st = lock_unusable(d, flag, path, name, why);
		} else if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
			int e = errno;

			if (e == EWOULDBLOCK)
				st = lock_refused(fd, name, flag, path, d);
			else if (e != ENOLCK && e != EOPNOTSUPP && e != ENOSYS && e != EINVAL)
				st = diag_errno(d, e, "%s: %s: flock(%s)", flag, path, name);
			close(fd);
			free(name);
			return st; /* ST_OK: no locks here, nothing claimed */
		} else if (!same_file(fd, name)) {
			if (tries == 100)
				st = diag_set(d, ST_RUNTIME, "%s: %s: %s keeps being replaced", flag, path, name);
		} else if (!lock_file_ok(fd, &why)) {
			/* Held now, so no other ddptrain is changing it: look again. */
			st = lock_unusable(d, flag, path, name, why);
		} else {
			break;
		}
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
	if (st != ST_OK) {
		free(name);
		return st;
	}
	l->path = name;
	l->fd = fd;
	l->slot = signals_tmp_add(name);
	return ST_OK;
}

/* Write "host pid" into a lock taken, for the message of a job refused (lock_refused); a
 * failure to write it claims nothing less. The lock file is ours (lock_take checked it
 * while holding it), so truncating it loses nothing. */
static void lock_sign(const struct outfile_lock *l)
{
	char host[256] = "?", text[300];

	if (l->path == NULL)
		return;
	gethostname(host, sizeof host - 1);
	host[sizeof host - 1] = '\0';
	for (char *c = host; *c != '\0'; c++) /* one word: lock_file_ok reads it back */
		if (*c == ' ' || *c == '\n')
			*c = '_';
	snprintf(text, sizeof text, "%s %ld\n", host, (long)getpid());
	if (ftruncate(l->fd, 0) == 0)
		(void)!pwrite(l->fd, text, strlen(text), 0);
}

void outfile_release(struct outfile_lock *l)
{
	if (l->path == NULL)
		return;
	signals_tmp_remove(l->slot);
	l->slot = -1;
	if (same_file(l->fd, l->path)) /* remove it while it is held: see lock_take */
		unlink(l->path);
	close(l->fd);
	free(l->path);
	l->path = NULL;
}

enum status outfile_check(const char *path, const char *flag, size_t need_bytes,
			  struct outfile_lock *lock, struct diag *d)
{
	struct stat sb;
	struct statvfs vfs;
	enum status st = ST_OK;
	char *target, *probe;
	int fd, slot;

	lock->path = NULL;
	target = outfile_target(path);
	if (target == NULL)
		return diag_errno(d, errno, "%s: %s", flag, path);
	if (stat(target, &sb) == 0 && !S_ISREG(sb.st_mode)) {
		st = diag_set(d, ST_RUNTIME, "%s: %s: exists and is not a regular file", flag, path);
		goto out_target;
	}
	st = lock_take(lock, target, flag, path, d);
	if (st != ST_OK)
		goto out_target;
	/* Every writer of target holds its lock: with it held, a temporary is a dead run's.
	 * Without locks, whose it is cannot be known, and it is left alone. */
	if (lock->path != NULL)
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
	if (st != ST_OK)
		outfile_release(lock);
	else /* after the space check: on a nearly full disk the text takes a block */
		lock_sign(lock);
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

/* If given lies in the directory of of_given's target (both resolved through symbolic
 * links) and its name begins with that target's name, the rest of its name (caller
 * frees); else NULL. */
static char *name_beyond(const char *given, const char *of_given)
{
	char *path = outfile_target(given), *of = outfile_target(of_given);
	char *pd = path ? strdup(path) : NULL, *pb = path ? strdup(path) : NULL;
	char *od = of ? strdup(of) : NULL, *ob = of ? strdup(of) : NULL;
	char a[PATH_MAX], b[PATH_MAX], *rest = NULL;

	if (pd && pb && od && ob && realpath(dirname(pd), a) != NULL && realpath(dirname(od), b) != NULL &&
	    strcmp(a, b) == 0) {
		const char *name = basename(pb), *base = basename(ob);

		if (strncmp(name, base, strlen(base)) == 0)
			rest = strdup(name + strlen(base));
	}
	free(pd);
	free(pb);
	free(od);
	free(ob);
	free(path);
	free(of);
	return rest;
}

/* Is path one of rot's rotation names (target.step-DIGITS beside rot's target, the names
 * checkpoint.c gives them)? */
static int is_rotation_name(const char *given, const char *rot_given)
{
	char *rest = name_beyond(given, rot_given);
	int hit = rest != NULL && strncmp(rest, ".step-", 6) == 0 && rest[6] != '\0' &&
		  strspn(rest + 6, "0123456789") == strlen(rest + 6);

	free(rest);
	return hit;
}

/* Is path the lock file of the output of_given (outfile_check's claim)? */
static int is_lock_name(const char *given, const char *of_given)
{
	char *rest = name_beyond(given, of_given);
	int hit = rest != NULL && strcmp(rest, LOCK_SUFFIX) == 0;

	free(rest);
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
			if (p[j].output && p[i].output && is_lock_name(p[i].path, p[j].path))
				return diag_set(d, ST_USAGE, "%s: %s is the lock file of %s (%s" LOCK_SUFFIX "); give it another name",
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

/* A piece of the file is written: tell whoever watches. */
static void told(const struct outfile *of)
{
	if (of->progress != NULL && of->progress->tick != NULL)
		of->progress->tick(of->progress->arg);
}

enum status outfile_write(struct outfile *of, const void *buf, size_t len, struct diag *d)
{
	const char *p = buf;

	while (len > 0) {
		size_t n = len < OUTFILE_PIECE ? len : OUTFILE_PIECE;

		if (fwrite(p, 1, n, of->f) != n)
			return outfile_write_failed(d, errno, of->what);
		p += n;
		len -= n;
		told(of);
	}
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
	else
		told(of);
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
