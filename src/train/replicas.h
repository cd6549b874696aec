/*
 * replicas.h - the replica check (--check-replicas=N): the state every ddp rank holds
 * the same copy of, compared bit for bit across the ranks every N optimizer steps,
 * before every checkpoint and at the last step, so that a rank computing wrong values
 * (silent data corruption, a faulty device) is named and stops the run before its state
 * is written anywhere.
 *
 * Each rank hashes, where the state lives (backend_ops.hash64: the device's memory on a
 * GPU, nothing copied but 8 bytes per tensor), every tensor of the state dict that the
 * gradient-sync strategy keeps replicated (grad_sync_ops.replicated: plain DDP the
 * parameters and the optimizer state; ZeRO-1/2 the all-gathered parameters, its
 * optimizer state being each rank's own shard; ZeRO-3, which keeps every layer sharded,
 * each layer's all-gathered copy, gathered for the check; a strategy that replicates
 * nothing, nothing: the run header says so). The tensors' digests fold into one
 * 64-bit digest per rank, and one all-gather of 16 bytes per rank compares them. Only
 * when they differ does a second all-gather bring every rank's per-tensor digests and
 * host name, so that every rank reaches the same verdict: the ranks outside the majority
 * (at 2 ranks, or with no majority, all of them: which one is wrong cannot be told), on
 * which hosts, and the first tensor (in state-dict order) that differs. The check is
 * ST_RUNTIME on every rank.
 *
 * Not here: when a check is due (trainer.c) or settling ZeRO's all-gathers first (the
 * caller, ddp.c).
 */
#ifndef DDPT_REPLICAS_H
#define DDPT_REPLICAS_H

#include <stdint.h>

#include "comm/world.h"     /* struct world, world_allgather */
#include "core/status.h"
#include "model/model.h"    /* struct model, struct model_tensor */
#include "observe/report.h" /* struct report */

struct grad_sync; /* sync.h: the strategy whose all-gathers a ZeRO-3 check asks for */

#define REPLICAS_HOST 64 /* bytes of a host name in the mismatch report (struct world's) */

struct replicas {
	struct model *m;          /* borrowed */
	struct world *w;          /* borrowed */
	long every;               /* N: optimizer steps between checks; 0: off */
	unsigned what;            /* SYNC_SAME_* (sync.h): what the strategy keeps replicated */
	struct grad_sync *sync;   /* borrowed: SYNC_SAME_GATHERED's layers come from its gathered */
	const char *strategy;     /* its name, for the header when it keeps nothing replicated */
	int ntensors;             /* tensors compared */
	struct model_tensor *t;   /* (ntensors) their state-dict entries */
	float *dev;               /* (2 ntensors) backend memory: each tensor's digest */
	float *host;              /* (2 ntensors) host_alloc: the same, read back */
	struct replica_vote {     /* (w->size) every rank's digest, gathered each check */
		uint64_t digest;
		int32_t failed;       /* its digest could not be made (the rank reports why) */
		int32_t pad;
	} *vote;
	unsigned char *rec;       /* (w->size records) on a mismatch: each rank's host name and
				   * per-tensor digests (REPLICAS_HOST + 8 ntensors bytes each) */
	long checks;              /* checks made */
};

/* Set up the check of what (SYNC_SAME_*; 0: nothing is replicated) every `every` steps
 * (0: off) over w's ranks, for strategy `strategy` (its name). Allocates only when a check
 * will run (replicas_on); fails (d set) when out of memory. */
enum status replicas_init(struct replicas *x, struct model *m, struct world *w, long every,
			  unsigned what, const char *strategy, struct diag *d);
/* SYNC_SAME_GATHERED: where the layers come from (s's strategy gathers them). */
void replicas_gather_from(struct replicas *x, struct grad_sync *s);
/* 1 if checks will run: asked for, more than one rank, something replicated. */
int replicas_on(const struct replicas *x);
/* The run header's line (none when off or with one rank). */
void replicas_describe(const struct replicas *x, struct report *r);
/* Compare the replicas after optimizer step `step` (the weights settled): collective.
 * ST_OK when every rank holds the same bits; else ST_RUNTIME on every rank, with the
 * ranks, hosts and first tensor that differ in d (or ST_PEER on the ranks whose digest
 * was made where another rank's failed). */
enum status replicas_check(struct replicas *x, long step, struct diag *d);
/* Safe to call twice. */
void replicas_free(struct replicas *x);

#endif
