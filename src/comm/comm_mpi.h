/*
 * comm_mpi.h - gradient all-reduce over MPI.
 *
 * Host memory is reduced in place. Device memory (a GPU backend) goes to
 * MPI directly when Open MPI is CUDA-aware (asked at run time), otherwise it
 * is staged through a pinned host copy of the gradient buffer.
 */
#ifndef DDPT_COMM_MPI_H
#define DDPT_COMM_MPI_H

#include "backend/backend.h"
#include "comm/comm.h"
#include "comm/world.h"

/* An MPI communicator over w's ranks for buffers inside base[0..nfloats) of backend be
 * (the model's gradient buffer; broadcasts may use any buffer of be); later_bytes: what
 * this rank still maps after the set-up (the shared-memory window must leave room). */
enum status comm_mpi_init(struct comm *c, struct world *w, struct backend *be, float *base,
			  size_t nfloats, size_t later_bytes, struct diag *d);
/* 1 if this Open MPI reports CUDA support at run time. */
int comm_mpi_cuda_aware(void);

#endif
