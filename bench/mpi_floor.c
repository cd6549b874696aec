/*
 * mpi_floor.c - the least an MPI training job can do: start, all-reduce one
 * ToyModel's worth of gradients (165 floats) and finish. scripts/bench.sh
 * launches it as it launches `ddptrain --max-steps=1`, so the difference in
 * wall time and peak memory is what ddptrain itself adds to the seed job.
 * It is not a test: it checks the sum only so the all-reduce cannot be idle.
 */
#include <mpi.h>   /* MPI_Init, MPI_Allreduce, MPI_Finalize */
#include <stdio.h> /* fprintf */

#define NPARAMS 165 /* ToyModel: Linear(10,10) and Linear(10,5), weights and biases */

int main(int argc, char **argv)
{
	float g[NPARAMS];
	int size = 0, bad = 0;

	if (MPI_Init(&argc, &argv) != MPI_SUCCESS) {
		fprintf(stderr, "mpi_floor: MPI_Init failed\n");
		return 1;
	}
	for (int i = 0; i < NPARAMS; i++)
		g[i] = 1.0f;
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (MPI_Allreduce(MPI_IN_PLACE, g, NPARAMS, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) !=
	    MPI_SUCCESS)
		bad = 1;
	for (int i = 0; i < NPARAMS && !bad; i++)
		bad = g[i] != (float)size;
	if (bad)
		fprintf(stderr, "mpi_floor: the all-reduce did not sum to %d\n", size);
	MPI_Finalize();
	return bad;
}
