/*
 * checkpoint.h - the model's state dict in safetensors files: the weights
 * (--init, --save) and training state that survives a crash: the weights (the
 * names --save uses, so a checkpoint also works as --init), the optimizer's
 * state arenas (SGD's momentum_buffer.NAME, AdamW's exp_avg.NAME and
 * exp_avg_sq.NAME, for the trainable layers only; AdamW's step count is the
 * position's step), and metadata: format version, the position
 * (step, epoch, next micro-batch), the world size, the configuration that
 * must match on resume, the run's lineage id, the lowest validation loss so far
 * (best_val_loss, with --save-best), and a SHA-256 of the header and the tensor data.
 *
 * The store/ wing (floor 3, above model/, below train/): the file formats: safetensors and
 * the checkpoint built on it. Rank 0 alone reads and writes; store/ decides
 * nothing about when.
 *
 * Writing goes through st_save (temporary file, fsync, rename, fsync of the
 * directory): a crash at any moment leaves the old checkpoint or the new one.
 */
#ifndef DDPT_CHECKPOINT_H
#define DDPT_CHECKPOINT_H

#include <stddef.h>

#include "model/model.h"
#include "store/safetensors.h" /* struct st_pending, struct progress */
#include "core/status.h"

/* 2: the SHA-256 covers the header (format 1 covered only the tensor data). */
#define CHECKPOINT_VERSION 2
#define CHECKPOINT_VERSION_TEXT "2"

/* Ranges a checkpoint's integers must lie in (no run writes more). */
#define CKPT_MAX_STEP (1L << 53)
#define CKPT_MAX_EPOCH (1L << 31)
#define CKPT_MAX_WORLD (1L << 24)
#define CKPT_LINEAGE 33 /* 32 hex digits and a NUL */

struct ckpt_pos {
	long step;    /* optimizer steps taken */
	long epoch;   /* the epoch the next micro-batch belongs to (0-based) */
	long next_mb; /* the next micro-batch within that epoch */
	int world;    /* replicas (ranks, or dp threads) that wrote it */
	char lineage[CKPT_LINEAGE]; /* random id of the run, kept across --resume */
	int have_best;     /* --save-best: a validation loss has been seen ... */
	double best_loss;  /* ... and this is the lowest (kept across --resume) */
	long schedule_steps; /* the lr schedule's length in optimizer steps; 0: not recorded
			      * (a checkpoint of an older ddptrain) */
};

/* --keep-checkpoints: a run's numbered copies path.step-N of its checkpoints (names of the
 * same file), the newest `keep` of its lineage kept (files of other runs are never
 * replaced or removed). The directory is read once, at the run's start
 * (checkpoint_rotation_start; else at its first checkpoint): a resumed run finds its
 * lineage's earlier copies there; after that the list lives here, so a checkpoint opens
 * no other file. A zeroed struct keeps none; the caller owns it. */
struct ckpt_rotation {
	int keep;          /* copies to keep; 0: none */
	int listed;        /* the directory has been read */
	struct ckpt_copy {
		char *name;    /* owned */
		long step;
	} *copy;           /* (n) owned, by step, oldest first */
	size_t n, cap;
};
/* Safe to call twice. */
void checkpoint_rotation_free(struct ckpt_rotation *rot);
/* Rank 0, before a run of lineage `lineage` whose checkpoints (at --checkpoint path) may
 * come after any step from first to last: read the directory into rot. ST_USAGE naming it
 * if a file that is not this lineage's checkpoint (another run's, or no checkpoint) holds
 * the rotation name of one of those steps: writing that step would replace it. */
enum status checkpoint_rotation_start(struct ckpt_rotation *rot, const char *path, const char *lineage,
				      long first, long last, struct diag *d);

/* Write path: m's whole state dict (every arena) from host, the arenas one after another
 * (model_state_to_host(m, 0, m->narenas, host)); config is the "--flag=value" lines that
 * must match on resume. With rot (NULL: none) also path.step-NNNNNNNN, pruned to the last
 * rot->keep checkpoints of pos->lineage; ST_RUNTIME if a file that is not one of them
 * holds that name (path is written, the file left as it is). */
enum status checkpoint_save(const char *path, struct ckpt_rotation *rot, const struct model *m,
			    const float *host, const struct ckpt_pos *pos, const char *config,
			    const struct progress *pr, struct diag *d);

/* ST_RUNTIME naming --checkpoint if its rotation names (path.step-NNNNNNNN beside the
 * file path names) are too long for its file system: checked at start-up, so the first
 * kept checkpoint cannot fail for it. A path that cannot be resolved passes (outfile_check
 * says why). */
enum status checkpoint_check_rotation(const char *path, struct diag *d);

/* A new random lineage id (the run's checkpoints carry it; --keep-checkpoints prunes only
 * its own lineage's files). */
void checkpoint_new_lineage(char lineage[CKPT_LINEAGE]);

/* The step N of a file named "base.step-N" (any digit count), or -1 for any other name. */
long checkpoint_numbered_step(const char *name, const char *base);

/* Read and verify path (format, checksum, the configuration `want` -- a difference is
 * ST_USAGE naming it -- and shapes for m). Fills host (m->narenas arenas of nparams floats,
 * optimizer state zeroed if the file has none) and pos. */
enum status checkpoint_load(const char *path, const struct model *m, const char *want,
			    float *host, struct ckpt_pos *pos, struct diag *d);

/* Is pos a position a run could have written? An epoch is nmicro micro-batches at the
 * checkpoint's world size (pos->world) and at most longest at any (world size 1: the
 * world may change between resumes at an epoch boundary, which changes the epoch's
 * length). The next micro-batch lies inside the epoch and begins a step of grad_accum
 * micro-batches; the step count is what the epochs before (1 to ceil(longest / grad_accum)
 * steps each) and the micro-batches before in this one take. ST_RUNTIME naming the
 * fields otherwise: the checksum proves a file intact, not that its writer was right. */
enum status checkpoint_check_position(const struct ckpt_pos *pos, long nmicro, long longest,
				      long grad_accum, const char *path, struct diag *d);

/* --init: m's weights (arena 0) from a safetensors file into host (nparams floats), as
 * strict as PyTorch's load_state_dict: every tensor present with its shape, finite, and
 * no tensor the model has no place for (optimizer state excepted). */
enum status checkpoint_read_weights(const char *path, const struct model *m, float *host,
				    struct diag *d);

/* --save (or --save-best, as `flag` says in messages): m's weights (arena 0, from host)
 * as a safetensors file, atomically. The writers here tell pr (NULL: nobody) after each
 * piece written (core/outfile.h). */
enum status checkpoint_write_weights(const char *path, const char *flag, const struct model *m,
				     const float *host, const struct progress *pr, struct diag *d);
/* The same, written to a temporary file beside path's target and put in place by
 * st_commit(out) (or removed by st_discard(out)): --save, once the whole run succeeded. */
enum status checkpoint_stage_weights(const char *path, const char *flag, const struct model *m,
				     const float *host, struct st_pending *out, const struct progress *pr,
				     struct diag *d);

/* Every line of `want` that `have` lacks ("(no --flag)") or sets differently, as
 * "--flag=value" for both, the flags before the other lines (data=...), joined by ", "
 * (", ..." where len runs out); returns how many, 0 when they agree. */
int checkpoint_config_diff(const char *have, const char *want, char *have_line,
			   char *want_line, size_t len);

#endif
