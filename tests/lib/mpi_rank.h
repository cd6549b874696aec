/*
 * mpi_rank.h - the calling process's rank in MPI_COMM_WORLD, or 0 where MPI is not
 * running (before MPI_Init, after MPI_Finalize): the test doubles' faults name ranks.
 */
#ifndef DDPT_TESTS_MPI_RANK_H
#define DDPT_TESTS_MPI_RANK_H

#include <mpi.h>

static inline int mpi_world_rank(void)
{
	int init = 0, fin = 0, r = 0;

	MPI_Initialized(&init);
	MPI_Finalized(&fin);
	if (init && !fin)
		MPI_Comm_rank(MPI_COMM_WORLD, &r);
	return r;
}

#endif
