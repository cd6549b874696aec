/*
 * outfile.h - output files: can one be written (checked at start-up, so a run
 * does not train for hours and then fail to save), where its bytes go, and
 * the temporary file it is written through.
 *
 * ddptrain writes --save, --save-best, --checkpoint, --trace and --prometheus
 * atomically, all through struct outfile: a temporary file "<target>.tmp.XXXXXX"
 * beside the final name, renamed over it when complete, so a failed run leaves a
 * previous file untouched. When the name is a symbolic link, the target is the
 * file the link names, even one that does not exist yet: the link is kept and
 * what it points to is replaced. --metrics is a stream, not rewritten whole (tail
 * -f follows it, a resumed run appends): it is opened at the same target, in place.
 * The target must be absent or a regular file,
 * and its directory must take a new file. That is checked by creating and
 * removing such a file: permission bits alone do not tell the truth for root,
 * read-only mounts or ACLs. It is not a guarantee (the disk can fill later);
 * the writers still check every write.
 *
 * Temporary files are removed on every exit ddptrain makes (errors, a second
 * signal, the watchdog, SIGBUS: see signals.h); those a kill -9 leaves behind
 * are removed by the next run that writes the same target (outfile_check), once
 * it holds the target's lock, which every writer of it holds while it runs.
 */
#ifndef DDPT_OUTFILE_H
#define DDPT_OUTFILE_H

#include <stddef.h>
#include <stdio.h>

#include "core/status.h"

/* A run's claim on one output: the lock file "<target>.lock" beside the file it writes,
 * held (flock) while the run lives and holding "host pid", so that a second job writing
 * the same file is refused at start with the first one's host and pid, and a temporary
 * beside a file whose lock is free is known to be a dead run's. A zeroed struct holds
 * nothing. Where the file system has no locks (flock: ENOLCK), nothing is claimed. */
struct outfile_lock {
	char *path;  /* owned: the lock file; NULL: nothing held */
	int fd;      /* holds the lock */
	int slot;    /* its entry in the signal handlers' table (removed on a fatal exit), or -1 */
};

/* Check that path can be written and claim it. ST_USAGE naming `flag`, path and the
 * other job's host and pid if another process holds path's lock; ST_RUNTIME naming them
 * if path cannot be written atomically, or if its file system has fewer than need_bytes
 * free or the file-size limit (ulimit -f) is below need_bytes (0: no size check). On
 * success *lock holds the claim (outfile_release gives it up); on failure it holds
 * nothing. With the claim held, removes the temporary files an earlier, killed run left
 * beside path's target; a live writer's are never touched. */
enum status outfile_check(const char *path, const char *flag, size_t need_bytes,
			  struct outfile_lock *lock, struct diag *d);
/* Give up the claim and remove the lock file; safe to call twice. */
void outfile_release(struct outfile_lock *lock);

/* ST_RUNTIME: "<what>: write: <strerror>", and for EFBIG the file-size limit (ulimit -f)
 * that caused it. Every writer of an output reports a failed write through it. */
enum status outfile_write_failed(struct diag *d, int errnum, const char *what);

/* One file named on the command line, for outfile_distinct. */
struct named_path {
	const char *flag;   /* "--save", "--inputs", ... */
	const char *path;   /* NULL: not given */
	int output;         /* written by the run */
	int rotation;       /* --checkpoint with --keep-checkpoints: path.step-N are written too */
};

/* ST_USAGE if an output names the same file as any other path (input or output): device
 * and inode for files that exist, the resolved directory and name for those that do not;
 * also a path that is one of a rotation's names (path.step-N) or, for two outputs, one's
 * lock file (path.lock, outfile_check). allow_a and allow_b (indexes
 * into p, or -1) may name the same file: --resume and --checkpoint continue one run. */
enum status outfile_distinct(const struct named_path *p, int n, int allow_a, int allow_b,
			     struct diag *d);
/* The file a write to path replaces: path, or the file a symbolic link (or a chain of
 * them, dangling or not) finally names. Caller frees; NULL with errno set on failure. */
char *outfile_target(const char *path);

/* Whom to tell that a long write goes on, after each piece of it and after its fsync (the
 * watchdog: comm/world.h's world_progress), so that a write that keeps going for longer
 * than --timeout is not taken for a stall. */
struct progress {
	void (*tick)(void *arg);
	void *arg;
};

/* One output file being written: every file ddptrain writes whole (--save, --save-best,
 * --checkpoint, --trace, --prometheus) goes through it. outfile_open creates the
 * temporary beside outfile_target(path) and registers it for removal on every exit;
 * the writer writes through f (or outfile_write); outfile_commit syncs it, renames it
 * over the target and syncs the directory; outfile_abort removes it. A zeroed struct
 * holds nothing: committing or aborting it does nothing. */
struct outfile {
	FILE *f;           /* the temporary, open for writing; NULL once synced */
	char *target;      /* owned: the file the rename replaces */
	char *tmp;         /* owned: the temporary's name; NULL once renamed or removed */
	int slot;          /* the temporary's entry in the signal handlers' table, or -1 */
	char what[DIAG_WHAT_LEN]; /* "--trace: path": names the file in messages */
	const struct progress *progress; /* borrowed, set after outfile_open; NULL: nobody told */
};

#define OUTFILE_PIECE ((size_t)8 << 20)

/* Create the temporary; `flag` names the file in messages. On failure nothing is left. */
enum status outfile_open(struct outfile *of, const char *path, const char *flag, struct diag *d);
/* Write len bytes to the temporary (binary writers; text writers use of->f), in pieces of
 * at most OUTFILE_PIECE bytes, of->progress told after each. */
enum status outfile_write(struct outfile *of, const void *buf, size_t len, struct diag *d);
/* Flush, fsync and close the temporary: the bytes are on disk, only the rename is left.
 * On failure the temporary is removed. */
enum status outfile_sync(struct outfile *of, struct diag *d);
/* outfile_sync if not done, rename over the target and make the rename durable; on
 * failure the temporary is removed and the target is untouched. Frees of either way. */
enum status outfile_commit(struct outfile *of, struct diag *d);
/* Remove the temporary and free of; safe to call twice and after outfile_commit. */
void outfile_abort(struct outfile *of);

#endif
