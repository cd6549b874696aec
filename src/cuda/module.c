/*
 * module.c - the entry point of ddptrain-cuda.so: the table of the CUDA
 * backend's operations and the GPU queries ddptrain needs before it picks
 * a device. See gpu.h for why this is a separate module.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ctx.h"
#include "cuda_module.h" /* the backend and NCCL functions of this table */
#include "backend/gpu.h"

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
	.synth = cuda_synth,
	.to_host = cuda_to_host,
	.to_host_async = cuda_to_host_async,
	.copy = cuda_copy,
	.copy_peer = cuda_copy_peer,
	.add = cuda_add,
	.linear_forward = cuda_linear_forward,
	.linear_backward = cuda_linear_backward,
	.linear_grad_rows = cuda_linear_grad_rows,
	.relu_forward = cuda_relu_forward,
	.relu_backward = cuda_relu_backward,
	.mse = cuda_mse,
	.axpbz = cuda_axpbz,
	.cross_entropy = cuda_cross_entropy,
	.adamw = cuda_adamw,
	.sumsq = cuda_sumsq,
	.hash64 = cuda_hash64,
	.clip = cuda_clip,
	.sync = cuda_sync,
	.mem_used = cuda_mem_used,
	.graph_begin = cuda_graph_begin,
	.graph_end = cuda_graph_end,
	.graph_launch = cuda_graph_launch,
	.graph_reset = cuda_graph_reset,
	.host_mark = cuda_host_mark,
	.host_wait = cuda_host_wait,
	.host_poll = cuda_host_poll,
	.timer_mark = cuda_timer_mark,
	.timer_ms = cuda_timer_ms,
	.trace_dev = &cuda_trace_dev,
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

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static enum status bench_sgemm(int dev, int trans_a, int trans_b, int m, int n, int k, int tf32,
			       int iters, double *tflops, struct diag *d)
{
	float *a = NULL, *b = NULL, *c = NULL, ms = 0.0f;
	const float one = 1.0f, zero = 0.0f;
	cublasHandle_t h = NULL;
	cudaEvent_t e0 = NULL, e1 = NULL;
	double *t = calloc((size_t)iters, sizeof *t);
	enum status st = ST_OK;

	*tflops = 0.0;
	if (t == NULL || cudaSetDevice(dev) != cudaSuccess ||
	    cudaMalloc((void **)&a, (size_t)m * k * sizeof(float)) != cudaSuccess ||
	    cudaMalloc((void **)&b, (size_t)k * n * sizeof(float)) != cudaSuccess ||
	    cudaMalloc((void **)&c, (size_t)m * n * sizeof(float)) != cudaSuccess ||
	    cudaMemset(a, 0, (size_t)m * k * sizeof(float)) != cudaSuccess ||
	    cudaMemset(b, 0, (size_t)k * n * sizeof(float)) != cudaSuccess ||
	    cublasCreate(&h) != CUBLAS_STATUS_SUCCESS || cudaEventCreate(&e0) != cudaSuccess ||
	    cudaEventCreate(&e1) != cudaSuccess) {
		st = diag_set(d, ST_RUNTIME, "bench_sgemm: set-up failed: %s",
			      cudaGetErrorString(cudaGetLastError()));
		goto out;
	}
	cublasSetMathMode(h, cuda_blas_math(tf32));
	for (int i = -2; i < iters; i++) {
		cudaEventRecord(e0, 0);
		if (cublasSgemm(h, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
				m, n, k, &one, a, trans_a ? k : m, b, trans_b ? n : k, &zero, c, m) !=
		    CUBLAS_STATUS_SUCCESS) {
			st = diag_set(d, ST_RUNTIME, "bench_sgemm: cublasSgemm failed");
			goto out;
		}
		cudaEventRecord(e1, 0);
		cudaEventSynchronize(e1);
		cudaEventElapsedTime(&ms, e0, e1);
		if (i >= 0)
			t[i] = ms;
	}
	qsort(t, (size_t)iters, sizeof *t, cmp_double);
	*tflops = 2.0 * m * n * (double)k / (t[iters / 2] * 1e-3) / 1e12;
out:
	if (e0)
		cudaEventDestroy(e0);
	if (e1)
		cudaEventDestroy(e1);
	if (h)
		cublasDestroy(h);
	cudaFree(a);
	cudaFree(b);
	cudaFree(c);
	free(t);
	return st;
}

static const struct gpu_module module = {
	.abi = GPU_MODULE_ABI,
	.probe = probe,
	.device_info = device_info,
	.backend = &backend_cuda_ops,
	.nccl_unique_id = comm_nccl_unique_id,
	.nccl_comm_init = comm_nccl_init,
	.bench_sgemm = bench_sgemm,
};

__attribute__((visibility("default"))) const struct gpu_module *ddptrain_gpu_module(void)
{
	return &module;
}
