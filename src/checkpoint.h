/*
 * checkpoint.h - the model's state dict in safetensors files: the weights
 * (--init, --save) and training state that survives a crash: the weights (the
 * names --save uses, so a checkpoint also works as --init), the optimizer's
 * state arenas, and metadata: format version, the position
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

/* Write path: m's whole state dict (every arena) from host, the arenas one after another
 * (model_state_to_host(m, 0, m->narenas, host)); config is the "--flag=value" lines that
 * must match on resume. keep > 0 also keeps path.step-NNNNNNNN for the last keep
 * checkpoints. */
enum status checkpoint_save(const char *path, int keep, const struct model *m,
			    const float *host, const struct ckpt_pos *pos, const char *config,
			    struct diag *d);

/* Read and verify path (format, checksum, the configuration `want` -- a difference is
 * ST_USAGE naming it -- and shapes for m). Fills host (m->narenas arenas of nparams floats,
 * optimizer state zeroed if the file has none) and pos. */
enum status checkpoint_load(const char *path, const struct model *m, const char *want,
			    float *host, struct ckpt_pos *pos, struct diag *d);

/* --init: m's weights (arena 0) from a safetensors file into host (nparams floats), as
 * strict as PyTorch's load_state_dict: every tensor present with its shape, finite, and
 * no tensor the model has no place for (optimizer state excepted). */
enum status checkpoint_read_weights(const char *path, const struct model *m, float *host,
				    struct diag *d);

/* --save: m's weights (arena 0, from host) as a safetensors file, atomically. */
enum status checkpoint_write_weights(const char *path, const struct model *m, const float *host,
				     struct diag *d);

/* The first line of `want` that `have` lacks or sets differently, as "--flag=value" for
 * both; returns 0 when they agree. */
int checkpoint_config_diff(const char *have, const char *want, char *have_line,
			   char *want_line, size_t len);

#endif
