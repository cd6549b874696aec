/*
 * bad_gpu.c - GPU modules that break the module boundary (src/backend/gpu.h) in the
 * ways gpu_load must refuse with a line instead of crashing (tests/gpu/bad-module.sh).
 * Everything else in them works: the tables are the fake GPU module's
 * (tests/lib/fake-gpu.so, named by DDPT_BAD_GPU_FAKE), copied, with one entry taken out,
 * so that a ddptrain that does not check would train until it calls that entry.
 *
 * DDPT_BAD_GPU says which:
 *   null          the entry returns NULL
 *   probe         struct gpu_module's probe is NULL
 *   backend       struct gpu_module's backend is NULL
 *   axpbz         the backend's axpbz (SGD's update) is NULL
 *   graph_end     the backend's graph_end is NULL while graph_begin is set
 *   bcast         the NCCL communicator nccl_comm_init makes has no bcast
 * Built a second time with BAD_GPU_DATA_SYMBOL (bad-gpu-data.so): the entry's name is a
 * data symbol, a struct gpu_module itself, which a caller that takes it for the function
 * jumps into.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/gpu.h" /* struct gpu_module, struct backend_ops, GPU_MODULE_SYMBOL */
#include "comm/comm.h"    /* struct comm, struct comm_ops: what nccl_comm_init fills in */

#ifdef BAD_GPU_DATA_SYMBOL

extern const struct gpu_module ddptrain_gpu_module;
const struct gpu_module ddptrain_gpu_module = {.abi = GPU_MODULE_ABI};

#else

static struct gpu_module module;
static struct backend_ops backend;
static struct comm_ops comm;
static const struct gpu_module *fake_module;

/* The fake's communicator, its table copied without bcast. */
static enum status comm_init_without_bcast(struct comm *c, struct backend *be,
					   const unsigned char id[GPU_NCCL_ID_BYTES], int rank, int size,
					   int timeout_s, int (*ready)(void *arg, int ok), void *arg,
					   int (*peer_failed)(void *peer_arg), void *peer_arg, struct diag *d)
{
	enum status st = fake_module->nccl_comm_init(c, be, id, rank, size, timeout_s, ready, arg, peer_failed,
						     peer_arg, d);

	if (st == ST_OK) {
		comm = *c->ops;
		comm.bcast = NULL;
		c->ops = &comm;
	}
	return st;
}

const struct gpu_module *ddptrain_gpu_module(void);

const struct gpu_module *ddptrain_gpu_module(void)
{
	const char *how = getenv("DDPT_BAD_GPU"), *fake = getenv("DDPT_BAD_GPU_FAKE");
	const struct gpu_module *(*entry)(void);
	void *h;

	if (how != NULL && strcmp(how, "null") == 0)
		return NULL;
	/* Not a refusal the test could take for the one it wants: a distinct exit. */
	if (how == NULL || fake == NULL || (h = dlopen(fake, RTLD_NOW | RTLD_LOCAL)) == NULL ||
	    (*(void **)&entry = dlsym(h, GPU_MODULE_SYMBOL)) == NULL) {
		fprintf(stderr, "bad-gpu: set DDPT_BAD_GPU and DDPT_BAD_GPU_FAKE (the fake module): %s\n",
			dlerror() != NULL ? "cannot load it" : "unset");
		exit(3);
	}
	fake_module = entry();
	module = *fake_module;
	backend = *module.backend;
	module.backend = &backend;
	if (strcmp(how, "probe") == 0) {
		module.probe = NULL;
	} else if (strcmp(how, "backend") == 0) {
		module.backend = NULL;
	} else if (strcmp(how, "axpbz") == 0) {
		backend.axpbz = NULL;
	} else if (strcmp(how, "graph_end") == 0) {
		backend.graph_end = NULL;
	} else if (strcmp(how, "bcast") == 0) {
		module.nccl_comm_init = comm_init_without_bcast;
	} else {
		fprintf(stderr, "bad-gpu: DDPT_BAD_GPU=%s: want null, probe, backend, axpbz, graph_end or bcast\n", how);
		exit(3);
	}
	return &module;
}

#endif
