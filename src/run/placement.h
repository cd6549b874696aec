/*
 * placement.h - where each rank runs: the CPU or a GPU (which one), and
 * whether gradients travel by MPI or NCCL.
 *
 * --device=auto looks for GPUs without loading any CUDA library (gpu.h),
 * loads the CUDA module only if one is visible, and falls back to the CPU
 * with a one-line notice when it cannot be used; all ranks make the same
 * choice. Each rank takes GPU local_rank % count. When two ranks of a node
 * would share a GPU, which NCCL cannot do, --backend=auto takes MPI on every
 * rank (with a notice) and an explicit --backend=nccl is refused.
 */
#ifndef DDPT_PLACEMENT_H
#define DDPT_PLACEMENT_H

#include "backend/gpu.h"
#include "run/options.h"
#include "core/status.h"
#include "comm/world.h"

struct placement {
	enum device_kind device; /* DEVICE_CPU or DEVICE_CUDA, decided */
	enum comm_kind comm;     /* COMM_MPI or COMM_NCCL, decided */
	int gpu;                 /* this rank's GPU (cuda) */
	int gpu_count;           /* GPUs the CUDA runtime sees (cuda) */
	int replicas;            /* dp: worker threads, decided */
	struct gpu module;       /* the loaded CUDA module (cuda) */
	char gpu_name[128];
	char info[128];          /* CUDA runtime and driver versions */
	char notice[640];        /* why auto fell back to the CPU or to MPI, or "" */
};

/* The GPU of the rank with node-local rank local_rank when count GPUs are visible. */
int placement_gpu_for(int local_rank, int count);

/* Decide for every rank (collective). ST_USAGE / ST_RUNTIME with the reason in d. */
enum status placement_decide(struct placement *p, const struct options *o, struct world *w,
			     struct diag *d);

/* Refuse up front what cannot fit in host memory, rather than being killed by the kernel
 * mid-run (CPU placement only: cudaMalloc reports device memory with the sizes). need:
 * bytes this process needs (every replica it holds, and its host copies). */
enum status placement_check_memory(const struct placement *p, const struct options *o,
				   const struct world *w, double need, struct diag *d);

#endif
