/* comm_open.c - choosing and setting up the gradient communicator. */
#include "comm_mpi.h"
#include "comm_open.h"

enum status comm_open(struct comm *c, enum comm_kind kind, struct world *w, struct backend *be,
		      const struct gpu *mod, float *grads, size_t n, double timeout_s,
		      struct diag *d)
{
	unsigned char id[GPU_NCCL_ID_BYTES] = {0};
	enum status st = ST_OK;

	if (kind != COMM_NCCL)
		return comm_mpi_init(c, w, be, grads, n, d);
	if (w->rank == 0)
		st = mod->mod->nccl_unique_id(id, d);
	if (!world_all(w, st == ST_OK))
		return st != ST_OK ? st : diag_set(d, ST_RUNTIME, "rank 0 could not create the NCCL id");
	st = world_bcast(w, id, sizeof id, 0, d);
	if (!world_all(w, st == ST_OK))
		return st != ST_OK ? st : diag_set(d, ST_RUNTIME, "the NCCL id broadcast failed");
	return mod->mod->nccl_comm_init(c, be, id, w->rank, w->size, (int)timeout_s, d);
}
