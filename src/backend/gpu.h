/*
 * gpu.h - the GPU module boundary.
 *
 * Linking libcudart, libcublas and libnccl costs a CPU-only run about 75 ms
 * of start-up and 200 MiB of memory, so the CUDA backend and the NCCL
 * communicator live in a separate module (ddptrain-cuda.so) that ddptrain
 * dlopens only when a GPU will be used. This header is all the two sides
 * share: one table of entry points, found by name, checked by ABI number.
 *
 * Whether a GPU is visible is decided here without loading any CUDA
 * library: from the driver's /proc entries and CUDA_VISIBLE_DEVICES.
 */
#ifndef DDPT_GPU_H
#define DDPT_GPU_H

#include <stddef.h>

#include "backend/backend.h"
#include "core/status.h"

struct comm; /* comm/comm.h: the module fills one in for NCCL */

/* Bump when the tables either side fills in change: struct gpu_module here, struct
 * backend_ops (backend/backend.h), struct comm_ops (comm/comm.h). 3: comm_ops.describe;
 * 4: comm_ops' reduce_scatter_start, all_gather_start, wait_first, the start flags, and
 * struct comm.wire; 5: backend_ops.linear_grad_rows, struct comm.outside; 6: backend_ops.synth,
 * to_host_async, host_poll, BACKEND_MARKS 5, struct comm.size and inflight; 7: struct
 * backend_config.precision in tf32's place (PRECISION_BF16 asks for bf16 products); 8: the
 * gradient scales of linear_backward, linear_grad_rows (gscale), mse and cross_entropy (dscale);
 * 9: backend_ops.hash64 (--check-replicas); 10: nccl_comm_init's peer_failed. */
#define GPU_MODULE_ABI 10
#define GPU_MODULE_SYMBOL "ddptrain_gpu_module"
#define GPU_MODULE_FILE "ddptrain-cuda.so"
#define GPU_NCCL_ID_BYTES 128 /* sizeof(ncclUniqueId) */
#define GPU_UUID_BYTES 16

struct gpu_module {
	int abi;            /* GPU_MODULE_ABI */
	/* Devices the CUDA runtime can use (after CUDA_VISIBLE_DEVICES); a driver that is too
	 * old or missing is an error with the runtime's message. info gets runtime and driver
	 * versions. */
	enum status (*probe)(int *count, char *info, size_t len, struct diag *d);
	/* Device dev's UUID (to find ranks sharing a GPU) and name. */
	enum status (*device_info)(int dev, unsigned char uuid[GPU_UUID_BYTES], char *name,
				   size_t len, struct diag *d);
	/* The CUDA backend (cuBLAS and kernels). */
	const struct backend_ops *backend;
	/* ncclGetUniqueId, for rank 0 to broadcast over MPI. */
	enum status (*nccl_unique_id)(unsigned char id[GPU_NCCL_ID_BYTES], struct diag *d);
	/* ncclCommInitRank with that id; the communicator all-reduces on its own stream,
	 * ordered after be's compute stream by events, and be's waits (to_host, sync) watch
	 * its asynchronous errors. ncclCommInitRank blocks until every rank has called it, so
	 * each rank first calls ready(arg, 1 if its own set-up succeeded, else 0) -- a
	 * collective that returns 1 only if every rank is ready -- and calls the init only on
	 * 1; a rank that was ready itself then returns ST_STOP (the failed rank reports). The
	 * communicator aborts (ncclCommAbort) instead of destroying itself once an
	 * error was seen. Every wait that polls the communicator also asks
	 * peer_failed(peer_arg) (NULL: never), which answers 1 + the rank of a peer that
	 * failed on its own, or 0: a collective that peer never joins would keep this rank
	 * waiting until timeout_s, so the communicator aborts and the wait fails with
	 * ST_PEER naming that rank. Only the thread that waits calls it. */
	enum status (*nccl_comm_init)(struct comm *c, struct backend *be,
				      const unsigned char id[GPU_NCCL_ID_BYTES], int rank, int size,
				      int timeout_s, int (*ready)(void *arg, int ok), void *arg,
				      int (*peer_failed)(void *peer_arg), void *peer_arg, struct diag *d);
	/* Time cublasSgemm C (m, n) = op(A) (m, k) op(B) (k, n), column-major, op transposing
	 * when trans_a / trans_b is set (the layout each of a step's products uses), on
	 * device dev, float32 (TF32 if tf32), median of iters runs after a warm-up: the
	 * ceiling for the matrix products. */
	enum status (*bench_sgemm)(int dev, int trans_a, int trans_b, int m, int n, int k, int tf32,
				   int iters, double *tflops, struct diag *d);
};

struct gpu {
	void *handle;                 /* dlopen handle, or NULL */
	int fd;                       /* the module file, open while it is loaded (-1: none) */
	const struct gpu_module *mod; /* entry points, or NULL */
	char path[4096];              /* the module file that was loaded */
};

/* GPUs the driver shows (entries of proc_dir, normally /proc/driver/nvidia/gpus),
 * restricted by cuda_visible_devices (the variable's value, or NULL if unset) as the
 * CUDA runtime restricts them. Loads nothing. */
int gpu_visible_count(const char *proc_dir, const char *cuda_visible_devices);

/* dlopen the module: $DDPTRAIN_CUDA_MODULE, else ddptrain-cuda.so beside the executable
 * (the build tree), else in the installed package library directory. It is never
 * unloaded: CUDA and NCCL keep threads and exit handlers in it. ST_RUNTIME naming the file
 * and what is wrong where it is not a regular file (refused before it is opened for
 * loading: a FIFO would block), its entry is not a function, or gpu_module_check refuses
 * what the entry returns. */
enum status gpu_load(struct gpu *g, struct diag *d);

/* Whether m, what a module's entry returned, can be called through: not NULL, this ABI,
 * and every entry of its tables that a caller calls without looking (struct gpu_module's
 * and its backend's; the optional ones of backend.h all or none of each group).
 * ST_RUNTIME with one line naming the missing entry if not. */
enum status gpu_module_check(const struct gpu_module *m, struct diag *d);

/* The first two of n ranks that hold the same GPU UUID: returns 1 and sets *a < *b. */
int gpu_find_duplicate(const unsigned char (*uuid)[GPU_UUID_BYTES], int n, int *a, int *b);

#endif
