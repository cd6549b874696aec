/*
 * outfile.h - output files: can one be written (checked at start-up, so a run
 * does not train for hours and then fail to save), where its bytes go, and
 * the temporary file it is written through.
 *
 * ddptrain writes --save and --checkpoint atomically: a temporary file
 * "<target>.tmp.XXXXXX" beside the final name, renamed over it when complete,
 * so a failed run leaves a previous file untouched. When the name is a
 * symbolic link, the target is the file the link names: the link is kept and
 * what it points to is replaced. The target must be absent or a regular file,
 * and its directory must take a new file. That is checked by creating and
 * removing such a file: permission bits alone do not tell the truth for root,
 * read-only mounts or ACLs. It is not a guarantee (the disk can fill later);
 * the writers still check every write.
 *
 * Temporary files are removed on every exit ddptrain makes (errors, a second
 * signal, the watchdog, SIGBUS: see signals.h); those a kill -9 leaves behind
 * are removed by the next run that writes the same target (outfile_check).
 */
#ifndef DDPT_OUTFILE_H
#define DDPT_OUTFILE_H

#include <stddef.h>
#include <stdio.h>

#include "core/status.h"

/* ST_RUNTIME naming `flag` and path if path cannot be written atomically, or if its
 * file system has fewer than need_bytes free (0: no size check). Also removes the
 * temporary files an earlier, killed run left beside path's target. */
enum status outfile_check(const char *path, const char *flag, size_t need_bytes, struct diag *d);

/* One file named on the command line, for outfile_distinct. */
struct named_path {
	const char *flag;   /* "--save", "--inputs", ... */
	const char *path;   /* NULL: not given */
	int output;         /* written by the run */
	int rotation;       /* --checkpoint with --keep-checkpoints: path.step-N are written too */
};

/* ST_USAGE if an output names the same file as any other path (input or output): device
 * and inode for files that exist, the resolved directory and name for those that do not;
 * also a path that is one of a rotation's names (path.step-N). allow_a and allow_b (indexes
 * into p, or -1) may name the same file: --resume and --checkpoint continue one run. */
enum status outfile_distinct(const struct named_path *p, int n, int allow_a, int allow_b,
			     struct diag *d);
/* The file a write to path replaces: path, or the file a symbolic link (or a chain of
 * them, dangling or not) finally names. Caller frees; NULL with errno set on failure. */
char *outfile_target(const char *path);

/* A temporary file beside target, open for writing, with the mode the umask gives new
 * files, tracked for removal on a fatal exit. *tmp (caller frees) and *slot are for
 * outfile_tmp_done. Returns the descriptor, or -1 with errno set. */
int outfile_tmp_create(const char *target, char **tmp, int *slot);
/* The temporary file is renamed or removed: stop tracking it. */
void outfile_tmp_done(int slot);

/* Remove "<target>.tmp.XXXXXX" files (exactly ddptrain's pattern) beside target;
 * returns how many. */
int outfile_remove_stale(const char *target);

/* A text file being written atomically: f writes a temporary beside path, which
 * outfile_commit renames over path (durably); outfile_abort removes it. */
struct outfile {
	FILE *f;
	char *tmp;         /* the temporary's name */
	const char *path;  /* borrowed */
	const char *flag;  /* borrowed: names the file in messages, e.g. "--trace" */
};

enum status outfile_open(struct outfile *of, const char *path, const char *flag, struct diag *d);
/* Flush, fsync, close and rename into place; on failure the temporary is removed. */
enum status outfile_commit(struct outfile *of, struct diag *d);
/* Remove the temporary; safe to call twice and after outfile_commit. */
void outfile_abort(struct outfile *of);

#endif
