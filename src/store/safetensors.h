/*
 * safetensors.h - read and write safetensors files (8-byte little-endian
 * header length, JSON header, raw little-endian tensor data).
 *
 * The JSON header is parsed and produced by jansson. Reading maps the file
 * and validates every entry (dtype, shape, offsets that tile the data
 * region). Writing is atomic, through core's outfile: a temporary file in the
 * same directory, fsync, rename over the target, fsync of the directory, so a
 * reader sees the old file or the new one, never a partial one. The rename can wait
 * (st_write, then st_commit or st_discard), so a run that fails after writing
 * its weights leaves no new file.
 */
#ifndef DDPT_SAFETENSORS_H
#define DDPT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/outfile.h" /* struct outfile, struct progress */
#include "core/status.h"

#define ST_MAX_DIMS 8

struct st_tensor {
	char name[128];
	char dtype[8];          /* "F32", "F64", ... */
	int ndim;
	int64_t shape[ST_MAX_DIMS];
	size_t begin, end;      /* byte offsets into the data region */
};

struct st_file {
	void *map;              /* whole file */
	size_t map_len;
	const unsigned char *data; /* data region */
	size_t data_len;
	struct st_tensor *t;    /* (n) owned */
	size_t n;
};

/* One tensor to write: float32 data of shape [shape[0], shape[1], ...]. */
struct st_entry {
	const char *name;
	int ndim;
	int64_t shape[ST_MAX_DIMS];
	const float *data;      /* prod(shape) floats */
};

/* Map and validate path; `flag` names the option in messages (e.g. "--init"). */
enum status st_open(struct st_file *f, const char *path, const char *flag, struct diag *d);
/* Validate an in-memory file image (used by st_open and by the fuzz/unit tests). */
enum status st_parse(struct st_file *f, const unsigned char *buf, size_t len, const char *what,
		     struct diag *d);
/* The tensor named name, or NULL. */
const struct st_tensor *st_find(const struct st_file *f, const char *name);
/* Copy tensor t into out (count floats), converting F64 to float32. */
enum status st_read_f32(const struct st_file *f, const struct st_tensor *t, float *out,
			size_t count, const char *what, struct diag *d);
/* Safe to call twice. */
void st_close(struct st_file *f);

/* The JSON header st_save writes for these arguments (a malloc'd string of *hlen bytes,
 * padded with spaces to a multiple of 8), or NULL: the same arguments give the same bytes,
 * so a checksum over the header can be computed before the file is written. */
char *st_header(const struct st_entry *e, size_t n, const char *const *meta, size_t nmeta,
		size_t *hlen);
/* A file written but not yet in place: its temporary file beside the target (the file
 * path names, through any symbolic link). A zeroed one holds nothing. */
struct st_pending {
	struct outfile of;
};

/* Write n tensors (and optional string metadata pairs, meta[2k]=key, meta[2k+1]=value)
 * to a temporary file beside path's target, and fsync it, telling pr (NULL: nobody) after
 * each piece (core/outfile.h). On failure nothing is left. */
enum status st_write(struct st_pending *p, const char *path, const char *flag,
		     const struct st_entry *e, size_t n, const char *const *meta, size_t nmeta,
		     const struct progress *pr, struct diag *d);
/* Rename the written file over the target and make that durable (outfile_commit); on
 * failure the temporary file is removed and the target is untouched. */
enum status st_commit(struct st_pending *p, struct diag *d);
/* Remove an uncommitted temporary file and free p. Safe to call twice. */
void st_discard(struct st_pending *p);

/* st_write then st_commit: path written atomically. On failure nothing is left behind. */
enum status st_save(const char *path, const char *flag, const struct st_entry *e, size_t n,
		    const char *const *meta, size_t nmeta, const struct progress *pr, struct diag *d);

#endif
