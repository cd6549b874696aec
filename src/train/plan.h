/*
 * plan.h - the gradient plan: how one rank's gradients are cut for communication,
 * worked out once per run and handed to everyone who needs it.
 *
 * The session builds it from the model's layout (widths and frozen layers, no memory)
 * before anything is allocated; the memory check reads its sizes, the model's ZeRO-2
 * gradient block is made from them, and the trainer's gradient-sync strategy
 * (sync.h) runs it. Nothing else cuts gradients, so nothing has to agree with
 * anything: there is one plan.
 *
 * What it holds:
 * - the buckets, in backward's order: runs of whole trainable layers from the last
 *   layer backwards, each closed once it holds at least the cap (the first cap for the
 *   first, as PyTorch DDP's 1 MiB), at layer 0, or before a frozen layer
 *   (grad_plan_cut is the one place that rule is written);
 * - where the slots (loss, accuracy, stop; model.h) travel: with the bucket of the
 *   last layer, or in an all-reduce of their own (the last layer frozen; ZeRO and
 *   --grad-compress keep every bucket pure gradient);
 * - with streaming (the ring), the same rule with every bucket at the first cap: the
 *   regions' size;
 * - ZeRO: each bucket's cuts (where its reduce-scatter and all-gather split it
 *   between the ranks; zero.h), and where this rank's owned range starts;
 * - ZeRO-2 and ZeRO-3: the parts (the reduce-scatters of backward: the buckets, except
 *   that a layer larger than the cap comes in row panels of at most the cap), their
 *   cuts, and the two pool buffers' sizes;
 * - ZeRO-3: each rank's window of the parameters (zero.h), each layer's cuts for its
 *   all-gather, and the working set the gathered layers live in: GRAD_PLAN_GATHERED
 *   buffers (the layer computing and the one prefetched), buffer i for the layers l
 *   with l % GRAD_PLAN_GATHERED = i, each the size of the largest of them.
 *
 * Not here: sending anything (sync.h) or allocating the model's memory (model.h).
 */
#ifndef DDPT_PLAN_H
#define DDPT_PLAN_H

#include <stddef.h>

#include "core/status.h"
#include "model/model.h" /* struct model (its layout), struct bucket, MODEL_MAX_LAYERS */

/* ZeRO-3's working set: layers gathered at once (the one computing, the next prefetched). */
#define GRAD_PLAN_GATHERED 2

/* What a plan is made for. */
struct grad_plan_cfg {
	size_t cap, first_cap; /* floats (trainer_bucket_caps) */
	int zero;              /* ZeRO stage: 0 to 3 */
	int compress;          /* --grad-compress: the buckets travel in the wire type */
	int rank, size;        /* this rank of the world */
};

struct grad_plan {
	struct grad_plan_cfg cfg;
	struct bucket bucket[MODEL_MAX_LAYERS + 1]; /* backward's order; the slots' own last */
	int nbuckets;
	int ngrad;                    /* gradient buckets: 0 .. ngrad - 1 */
	int slot_bucket;              /* the slots' own bucket (= ngrad), or -1: they ride in bucket 0 */
	int closes[MODEL_MAX_LAYERS]; /* the bucket layer l's backward completes, or -1 */
	int lowest;                   /* the first trainable layer: backward ends there */
	size_t reduced;               /* floats sent per step: every bucket's, slots included */
	/* streaming: the buckets at the first cap (what the report shows), or 0: not possible
	 * (frozen layers, ZeRO, --grad-compress) */
	struct bucket sbucket[MODEL_MAX_LAYERS + 1];
	int nsbuckets;
	/* ZeRO (cfg.zero > 0) */
	size_t tlo;                   /* this rank's first owned float of the trainable ones */
	size_t shard_room;            /* the largest rank's shard, floats */
	size_t *cuts;                 /* (ngrad, size + 1): bucket k's cuts; else NULL */
	/* ZeRO-3 (cfg.zero == 3) */
	size_t *pwin;                 /* (size + 1): where each rank's window of the parameters starts */
	size_t param_room;            /* the largest window, floats */
	size_t *lcuts;                /* (nlayers, size + 1): layer l's all-gather cuts */
	size_t gather_floats;         /* the largest layer, floats */
	/* working buffer i (of GRAD_PLAN_GATHERED) holds the layers l with l % GRAD_PLAN_GATHERED
	 * = i: it starts at float gather_at[i] of the working set, which is gather_at[last]
	 * floats, each buffer the size of the largest of its layers */
	size_t gather_at[GRAD_PLAN_GATHERED + 1];
	/* ZeRO-2 and ZeRO-3 (cfg.zero >= 2) */
	struct bucket *part;          /* (nparts) the reduce-scatters, in backward's order */
	int nparts;
	int npaneled;                 /* layers in row panels */
	size_t *pcuts;                /* (nparts, size + 1): part k's cuts */
	size_t *pt0;                  /* (nparts): part k's first trainable index */
	int pfirst[MODEL_MAX_LAYERS]; /* layer l's first panel part, or -1 */
	int pcloses[MODEL_MAX_LAYERS]; /* the part of whole layers layer l completes, or -1 */
	size_t poolb[2];              /* floats of pool buffer 0 (even parts) and 1 (odd ones) */
};

/* Plan for m's layout and frozen layers (model_layout and model_freeze are enough: m
 * needs no memory). Fails (d set) only when out of host memory. */
enum status grad_plan_init(struct grad_plan *p, const struct model *m, const struct grad_plan_cfg *cfg,
			   struct diag *d);
/* Safe to call twice. */
void grad_plan_free(struct grad_plan *p);

/* Bucket k's cuts, ZeRO-2's part k's, ZeRO-3's layer l's all-gather's (size + 1 entries
 * each). */
const size_t *grad_plan_cuts(const struct grad_plan *p, int k);
const size_t *grad_plan_part_cuts(const struct grad_plan *p, int k);
const size_t *grad_plan_layer_cuts(const struct grad_plan *p, int l);
/* ZeRO-2 and ZeRO-3: the floats of the gradient block beside the slots and the norm: the
 * two pool buffers, then the largest rank's shard (struct model_shard's grad_extra). */
size_t grad_plan_block_floats(const struct grad_plan *p);

/* What this rank keeps of the model's memory under the plan (ZeRO-2's gradient block,
 * ZeRO-3's window of the parameters and working set; all zero without ZeRO-2): model_init
 * allocates that, and the memory check counts it. */
void grad_plan_shard(const struct grad_plan *p, struct model_shard *sh);

/* The one cutting rule. With parts 0: the buckets (the slots counted in the bucket of the
 * last layer, or a bucket of their own after the others when that layer is frozen); with
 * parts 1: ZeRO-2's parts (a trainable layer of more than cap floats comes as its row
 * panels, model_panel_range, and a bucket gathering the layers after it closes before
 * it; the slots are in none). Fills b with entries first .. first + room - 1 (those that
 * exist; b may be NULL when room is 0) and returns the count of all. */
int grad_plan_cut(const struct model *m, size_t cap, size_t first_cap, int parts, int first, int room,
		  struct bucket *b);

#endif
