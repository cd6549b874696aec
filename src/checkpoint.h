/*
 * checkpoint.h - training state that survives a crash: a safetensors file
 * with the weights (the names --save uses, so a checkpoint also works as
 * --init), the momentum buffers, and metadata: format version, the position
 * (step, epoch, next micro-batch), the world size, the configuration that
 * must match on resume, and a SHA-256 of the tensor data.
 *
 * Writing goes through st_save (temporary file, fsync, rename, fsync of the
 * directory): a crash at any moment leaves the old checkpoint or the new one.
 */
#ifndef DDPT_CHECKPOINT_H
#define DDPT_CHECKPOINT_H

#include <stddef.h>

#include "model.h"
#include "status.h"

#define CHECKPOINT_VERSION 1

struct ckpt_pos {
	long step;    /* optimizer steps taken */
	long epoch;   /* the epoch the next micro-batch belongs to (0-based) */
	long next_mb; /* the next micro-batch within that epoch */
	int world;    /* replicas (ranks, or dp threads) that wrote it */
};

/* Write path: params and (if mom is not NULL) momentum, host copies of nparams floats
 * laid out as m's; config is the "--flag=value" lines that must match on resume.
 * keep > 0 also keeps path.step-NNNNNNNN for the last keep checkpoints. */
enum status checkpoint_save(const char *path, int keep, const struct model *m,
			    const float *params, const float *mom, const struct ckpt_pos *pos,
			    const char *config, struct diag *d);

/* Read and verify path (format, checksum, the configuration `want` -- a difference is
 * ST_USAGE naming it -- and shapes for m). Fills params, mom (zeros if the file has none;
 * may be NULL) and pos. */
enum status checkpoint_load(const char *path, const struct model *m, const char *want,
			    float *params, float *mom, struct ckpt_pos *pos, struct diag *d);

/* The first line of `want` that `have` lacks or sets differently, as "--flag=value" for
 * both; returns 0 when they agree. */
int checkpoint_config_diff(const char *have, const char *want, char *have_line,
			   char *want_line, size_t len);

#endif
