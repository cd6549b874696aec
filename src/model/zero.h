/*
 * zero.h - the shard plan of ZeRO (--zero): which part of the trainable
 * parameters each rank owns, and what follows from it for the gradient buckets
 * and the optimizer.
 *
 * The trainable index space is the trainable layers' parameters in layer order
 * with the frozen layers left out, as the optimizer's state arenas are laid out
 * (model.h). Of its T floats, rank r of N owns the contiguous range
 * [T r / N, T (r + 1) / N): its optimizer state is that slice of every state
 * arena, so the ranks' state arenas concatenated in rank order are the whole
 * arena. From the range come each bucket's cuts (where the bucket's
 * reduce-scatter and all-gather split it between the ranks) and the optimizer's
 * pieces (the trainable runs within the range).
 *
 * ZeRO-2 also keeps only the shard of the reduced gradient (laid out as the
 * shard's state) and writes backward's gradients into a pool of two bucket
 * buffers, reused once the reduce-scatter of the bucket before last has
 * completed; the gradient plan (plan.h) cuts its parts and sizes the buffers.
 *
 * This module computes; it allocates nothing and knows no communicator.
 */
#ifndef DDPT_ZERO_H
#define DDPT_ZERO_H

#include <stddef.h>

#include "model/model.h" /* struct model, struct bucket, MODEL_MAX_LAYERS */

/* A run of owned parameters: params[off .. off + len) and state[so .. so + len) of the
 * rank's state arenas (offsets within its shard). */
struct zero_piece {
	size_t off; /* in the parameters and gradients */
	size_t so;  /* in the shard's state arenas */
	size_t len; /* floats */
};

struct zero_plan {
	int rank, size;
	size_t total;  /* T: trainable floats */
	size_t lo, hi; /* the owned range of the trainable index space */
	int npieces;
	struct zero_piece piece[MODEL_MAX_LAYERS];
};

/* The first float rank q of size owns of total: total q / size (q = size: total). */
size_t zero_cut(size_t total, int q, int size);
/* The plan of rank `rank` of `size` for m's trainable layers (after model_freeze). */
void zero_plan_init(struct zero_plan *z, const struct model *m, int rank, int size);
/* The cuts (size + 1 entries, relative to t0) of the trainable range [t0, t0 + len):
 * where each rank's owned part of it begins. */
void zero_range_cuts(const struct zero_plan *z, size_t t0, size_t len, size_t *cuts);
/* Bucket b's cuts (size + 1 entries, relative to b->off, over its first `len` floats:
 * the gradients, without slots): zero_range_cuts of its range. b must be trainable
 * (lo >= 0): a run of whole layers, or a row panel of one (grad_plan_cut). */
void zero_bucket_cuts(const struct zero_plan *z, const struct model *m, const struct bucket *b,
		      size_t len, size_t *cuts);

/* The largest shard of m's trainable parameters over size ranks, in floats. */
size_t zero_shard_room(const struct model *m, int size);

/* ZeRO-3 keeps the parameters themselves sharded: rank q keeps the window
 * [zero_param_cut(m, q, size), zero_param_cut(m, q + 1, size)) of the parameter arena
 * (frozen layers included). The windows are cut where the trainable cuts are (zero_cut of
 * the trainable floats), so each rank's parameters, gradient shard and optimizer state are
 * the same trainable floats; a run of frozen layers goes whole to the rank whose window
 * ends at the trainable layer after it (rank 0 takes those before the first). */
size_t zero_param_cut(const struct model *m, int q, int size);
/* The largest such window over size ranks, in floats. */
size_t zero_param_room(const struct model *m, int size);
/* Where rank q's part of arena `arena` begins over size ranks at ZeRO stage `stage`, for
 * an arena sharded at that stage: the parameters (arena 0) at stage 3 (zero_param_cut),
 * the state arenas at every stage above 0 (zero_cut of the trainable floats). q = size:
 * the arena's end. */
size_t zero_arena_cut(const struct model *m, int arena, int stage, int q, int size);
/* The first trainable index of bucket b (trainable, lo >= 0: whole layers or a panel). */
size_t zero_bucket_start(const struct model *m, const struct bucket *b);

#endif
