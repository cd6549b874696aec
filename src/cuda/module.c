/*
 * module.c - the entry point of ddptrain-cuda.so: the table of the CUDA
 * backend's operations and the GPU queries ddptrain needs before it picks
 * a device. See gpu.h for why this is a separate module.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "cuda_ctx.h"
#include "gpu.h"

/* backend_cuda.cu */
enum status cuda_init(void **out, const struct backend_config *cfg, struct diag *d);
void cuda_fini(void *ctx);
enum status cuda_bind(void *ctx, struct diag *d);
float *cuda_alloc(void *ctx, size_t n);
void cuda_free(void *ctx, float *p);
float *cuda_host_alloc(void *ctx, size_t n);
void cuda_host_free(void *ctx, float *p);
void cuda_to_device(void *ctx, float *dst, const float *src, size_t n);
void cuda_to_host(void *ctx, float *dst, const float *src, size_t n);
void cuda_copy(void *ctx, float *dst, const float *src, size_t n);
void cuda_copy_peer(void *ctx, float *dst, void *src_ctx, const float *src, size_t n);
void cuda_add(void *ctx, float *dst, const float *src, size_t n);
void cuda_linear_forward(void *ctx, float *y, const float *x, const float *w, const float *b,
			 int n, int in, int out);
void cuda_linear_backward(void *ctx, float *dx, float *dw, float *db, const float *dy,
			  const float *x, const float *w, int n, int in, int out, int accumulate);
void cuda_relu_forward(void *ctx, float *y, size_t n);
void cuda_relu_backward(void *ctx, float *dy, const float *y, size_t n);
void cuda_mse(void *ctx, float *dy, float *loss, const float *y, const float *t, int n, int width,
	      float scale, int accumulate);
void cuda_sgd(void *ctx, float *p, const float *g, float *m, size_t n, const struct sgd_hparams *h);
enum status cuda_sync(void *ctx, struct diag *d);
size_t cuda_mem_used(void *ctx);
void *cuda_stream(void *ctx);
enum status cuda_graph_begin(void *ctx, struct diag *d);
enum status cuda_graph_end(void *ctx, int slot, struct diag *d);
enum status cuda_graph_launch(void *ctx, int slot, struct diag *d);
/* comm_nccl.c */
enum status nccl_unique_id(unsigned char id[GPU_NCCL_ID_BYTES], struct diag *d);
enum status nccl_comm_init(struct comm *out, struct backend *be,
			   const unsigned char id[GPU_NCCL_ID_BYTES], int rank, int size,
			   int timeout_s, struct diag *d);

static const struct backend_ops backend_cuda_ops = {
	.name = "cuda",
	.host_memory = 0,
	.init = cuda_init,
	.fini = cuda_fini,
	.bind = cuda_bind,
	.alloc = cuda_alloc,
	.free = cuda_free,
	.host_alloc = cuda_host_alloc,
	.host_free = cuda_host_free,
	.to_device = cuda_to_device,
	.to_host = cuda_to_host,
	.copy = cuda_copy,
	.copy_peer = cuda_copy_peer,
	.add = cuda_add,
	.linear_forward = cuda_linear_forward,
	.linear_backward = cuda_linear_backward,
	.relu_forward = cuda_relu_forward,
	.relu_backward = cuda_relu_backward,
	.mse = cuda_mse,
	.sgd = cuda_sgd,
	.sync = cuda_sync,
	.mem_used = cuda_mem_used,
	.graph_begin = cuda_graph_begin,
	.graph_end = cuda_graph_end,
	.graph_launch = cuda_graph_launch,
	.stream = cuda_stream,
};

static enum status probe(int *count, char *info, size_t len, struct diag *d)
{
	int rt = 0, drv = 0;
	cudaError_t rc;

	*count = 0;
	cudaRuntimeGetVersion(&rt);
	cudaDriverGetVersion(&drv);
	snprintf(info, len, "CUDA runtime %d.%d, driver %d.%d", rt / 1000, rt % 1000 / 10, drv / 1000,
		 drv % 1000 / 10);
	rc = cudaGetDeviceCount(count);
	if (rc != cudaSuccess) {
		*count = 0;
		return diag_set(d, ST_RUNTIME, "no usable GPU: %scudaGetDeviceCount: %s (%s)",
				drv == 0 ? "no NVIDIA driver is loaded; " : "", cudaGetErrorString(rc), info);
	}
	return ST_OK;
}

static enum status device_info(int dev, unsigned char uuid[GPU_UUID_BYTES], char *name, size_t len,
			       struct diag *d)
{
	struct cudaDeviceProp p;
	cudaError_t rc = cudaGetDeviceProperties(&p, dev);

	if (rc != cudaSuccess)
		return diag_set(d, ST_RUNTIME, "cudaGetDeviceProperties(%d): %s", dev, cudaGetErrorString(rc));
	memcpy(uuid, p.uuid.bytes, GPU_UUID_BYTES);
	snprintf(name, len, "%s", p.name);
	return ST_OK;
}

static const struct gpu_module module = {
	.abi = GPU_MODULE_ABI,
	.probe = probe,
	.device_info = device_info,
	.backend = &backend_cuda_ops,
	.nccl_unique_id = nccl_unique_id,
	.nccl_comm_init = nccl_comm_init,
};

__attribute__((visibility("default"))) const struct gpu_module *ddptrain_gpu_module(void)
{
	return &module;
}
