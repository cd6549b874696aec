/* placement.c - choosing the device and the communicator, the same on every rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "run/placement.h"

#define PROC_GPUS "/proc/driver/nvidia/gpus"

int placement_gpu_for(int local_rank, int count)
{
	return count > 0 ? local_rank % count : 0;
}

/* Load the module and ask the runtime for devices. */
static enum status open_cuda(struct placement *p, struct diag *d)
{
	enum status st = gpu_load(&p->module, d);

	if (st == ST_OK)
		st = p->module.mod->probe(&p->gpu_count, p->info, sizeof p->info, d);
	if (st == ST_OK && p->gpu_count == 0)
		st = diag_set(d, ST_RUNTIME, "no usable GPU: the CUDA runtime sees none (%s)", p->info);
	return st;
}

/* Ranks of one node must not share a GPU under NCCL ("Duplicate GPU detected"). Asked for
 * NCCL, such ranks are refused; chosen by auto, every rank takes MPI instead (on the same
 * GPUs: a one-GPU workstation running two ranks trains, as with --backend=mpi), and says
 * so. All ranks of the world make that choice together: another node may share none. */
static enum status check_shared_gpus(struct placement *p, const struct options *o, struct world *w,
				     struct diag *d)
{
	unsigned char (*all)[GPU_UUID_BYTES], mine[GPU_UUID_BYTES];
	enum status st, info;
	int a = 0, b = 0, shared = 0, auto_shared;

	memset(mine, 0, sizeof mine);
	info = p->module.mod->device_info(p->gpu, mine, p->gpu_name, sizeof p->gpu_name, d);
	all = calloc((size_t)w->local_size + 1, sizeof *all);
	if (all == NULL)
		return diag_set(d, ST_RUNTIME, "out of memory");
	/* Every rank of the node joins the gather, whatever device_info said. */
	st = world_local_allgather(w, mine, GPU_UUID_BYTES, all, d);
	if (st == ST_OK && p->comm == COMM_NCCL)
		shared = gpu_find_duplicate((const unsigned char (*)[GPU_UUID_BYTES])all, w->local_size, &a, &b);
	free(all);
	/* Every rank joins, whatever its own options or outcome: no rank waits alone. */
	auto_shared = !world_all(w, !(shared && o->comm == COMM_AUTO));
	if (st != ST_OK)
		return st;
	if (auto_shared && p->comm == COMM_NCCL && o->comm == COMM_AUTO) {
		p->comm = COMM_MPI;
		if (shared)
			snprintf(p->notice, sizeof p->notice,
				 "backend auto: mpi, not nccl (node-local ranks %d and %d share GPU %d, %s, which NCCL cannot do)",
				 a, b, p->gpu, p->gpu_name);
		else
			snprintf(p->notice, sizeof p->notice,
				 "backend auto: mpi, not nccl (ranks of another node share a GPU, which NCCL cannot do)");
		return info;
	}
	if (info == ST_OK && shared && b == w->local_rank)
		return diag_set(d, ST_USAGE,
				"--backend=nccl: node-local ranks %d and %d would share GPU %d (%s), which NCCL cannot do; use --backend=mpi (or auto), or start at most %d rank%s per node",
				a, b, p->gpu, p->gpu_name, p->gpu_count, p->gpu_count == 1 ? "" : "s");
	return info;
}

enum status placement_decide(struct placement *p, const struct options *o, struct world *w,
			     struct diag *d)
{
	enum status st = ST_OK;
	int built = 0, usable;

#ifdef HAVE_CUDA_MODULE
	built = 1;
#endif
	/* A module named explicitly is used even by a build without CUDA (the tests' fake). */
	if (getenv("DDPTRAIN_CUDA_MODULE") != NULL && getenv("DDPTRAIN_CUDA_MODULE")[0] != '\0')
		built = 1;
	memset(p, 0, sizeof *p);
	p->device = DEVICE_CPU;
	if (o->device == DEVICE_CUDA) {
		if (!built)
			return diag_set(d, ST_RUNTIME, "--device=cuda: this ddptrain was built without CUDA (configure found no CUDA toolkit, cuBLAS and NCCL); use --device=cpu");
		st = open_cuda(p, d);
		if (st != ST_OK)
			diag_prefix(d, "--device=cuda: ");
		/* Ranks that failed report it; the others stop here too, before any collective
		 * the failed ones would never join. */
		if (!world_all(w, st == ST_OK))
			return st;
		p->device = DEVICE_CUDA;
	} else if (o->device == DEVICE_AUTO) {
		int visible = gpu_visible_count(PROC_GPUS, getenv("CUDA_VISIBLE_DEVICES"));
		struct diag why = {0};

		if (!built)
			snprintf(p->notice, sizeof p->notice, "device auto: CPU (built without CUDA)");
		else if (visible == 0)
			snprintf(p->notice, sizeof p->notice, "device auto: CPU (no GPU visible)");
		else if (open_cuda(p, &why) != ST_OK)
			snprintf(p->notice, sizeof p->notice, "device auto: CPU (%s)", why.msg);
		usable = built && visible > 0 && why.st == ST_OK;
		/* Every rank makes the same choice: the GPU only if all can use one. */
		if (!world_all(w, usable)) {
			if (usable)
				snprintf(p->notice, sizeof p->notice, "device auto: CPU (another rank has no usable GPU)");
		} else {
			p->device = DEVICE_CUDA;
		}
	}
	if (p->device == DEVICE_CPU && o->comm == COMM_NCCL)
		return diag_set(d, ST_USAGE, "--backend=nccl needs GPUs (--device=cuda); use --backend=mpi on the CPU");
	p->comm = o->comm == COMM_AUTO ? (p->device == DEVICE_CUDA ? COMM_NCCL : COMM_MPI) : o->comm;

	p->replicas = o->replicas;
	if (o->mode == MODE_DP) {
		if (p->replicas == 0)
			p->replicas = p->device == DEVICE_CUDA ? p->gpu_count : 2;
		if (p->device == DEVICE_CUDA && p->replicas > p->gpu_count)
			return diag_set(d, ST_USAGE, "--replicas=%d: only %d GPU%s visible (one replica per GPU)",
					p->replicas, p->gpu_count, p->gpu_count == 1 ? " is" : "s are");
		p->comm = COMM_MPI; /* dp makes no collective call; the setup broadcast is a no-op */
	}
	if (p->device == DEVICE_CUDA) {
		p->gpu = o->mode == MODE_DP ? 0 : placement_gpu_for(w->local_rank, p->gpu_count);
		st = check_shared_gpus(p, o, w, d);
	}
	return st;
}

/* Memory this process may use: MemAvailable shared by the ranks of this node. */
static double available_bytes(const struct world *w)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	double kib = 0;

	while (f != NULL && fgets(line, sizeof line, f) != NULL)
		if (sscanf(line, "MemAvailable: %lf kB", &kib) == 1)
			break;
	if (f != NULL)
		fclose(f);
	return kib * 1024.0 / (w->local_size > 0 ? w->local_size : 1);
}

enum status placement_check_memory(const struct placement *p, const struct options *o,
				   const struct world *w, double need, struct diag *d)
{
	double avail;
	char widths[1024];

	if (p->device != DEVICE_CPU)
		return ST_OK;
	avail = available_bytes(w);
	if (avail <= 0 || need <= avail)
		return ST_OK;
	options_format_widths(o, widths, sizeof widths);
	return diag_set(d, ST_RUNTIME,
			"--layers=%s --batch-size=%ld: needs %.2f GiB per %s, but only %.2f GiB are available (MemAvailable over %d rank%s on this node)",
			widths, o->batch_size, need / 1073741824.0, o->mode == MODE_DP ? "process" : "rank",
			avail / 1073741824.0, w->local_size, w->local_size == 1 ? "" : "s");
}
