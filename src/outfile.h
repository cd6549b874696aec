/*
 * outfile.h - can an output file be written? Checked at start-up, so a run
 * does not train for hours and then fail to save.
 *
 * ddptrain writes its outputs (--save, --metrics) atomically: a temporary file
 * beside the final name, renamed over it when complete, so a failed run
 * leaves a previous file untouched. The target must therefore be absent or a
 * regular file, and its directory must take a new file. That is checked by
 * creating and removing such a file: permission bits alone do not tell the
 * truth for root, read-only mounts or ACLs. It is not a guarantee (the disk
 * can fill later); the writers still check every write.
 */
#ifndef DDPT_OUTFILE_H
#define DDPT_OUTFILE_H

#include <stddef.h>

#include "status.h"

/* ST_RUNTIME naming `flag` and path if path cannot be written atomically, or if its
 * file system has fewer than need_bytes free (0: no size check). */
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

#endif
