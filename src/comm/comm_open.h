/*
 * comm_open.h - the gradient communicator of the kind placement chose: MPI
 * (comm_mpi.h), or NCCL from the CUDA module with rank 0's unique id
 * broadcast over MPI, as llm.c and nccl-tests set it up.
 */
#ifndef DDPT_COMM_OPEN_H
#define DDPT_COMM_OPEN_H

#include <stddef.h>

#include "backend/backend.h" /* struct backend */
#include "comm/comm.h"    /* struct comm, enum comm_kind */
#include "backend/gpu.h"     /* struct gpu: the CUDA module's NCCL entry points */
#include "core/status.h"
#include "comm/world.h"   /* struct world */

/* Open c for kind (COMM_MPI or COMM_NCCL) over w's ranks, for the gradient buffer
 * grads[0..n) of be; mod is the loaded CUDA module (NCCL only), timeout_s NCCL's;
 * later_bytes what this rank still maps after the set-up (MPI's shared-memory window
 * leaves room for it). Collective. A failure on some ranks fails all of them, the message
 * on the ranks that saw it. */
enum status comm_open(struct comm *c, enum comm_kind kind, struct world *w, struct backend *be,
		      const struct gpu *mod, float *grads, size_t n, size_t later_bytes,
		      double timeout_s, struct diag *d);

#endif
