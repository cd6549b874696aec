/*
 * wire.cu - the 16-bit wire's conversion kernels (see wire.h). One thread per
 * element in a grid-stride loop; no shared memory, no reduction.
 */
#include <cuda_bf16.h> /* __nv_bfloat16, __float2bfloat16_rn, __bfloat162float */
#include <cuda_fp16.h> /* __half, __float2half_rn, __half2float */

#include "cuda/cuda_ctx.h" /* cuda_blocks, CUDA_THREADS: the grid of the element-wise kernels */
#include "cuda/wire.h" /* this file's prototypes, as comm_nccl.c sees them */


__global__ void k_wire_narrow_f16(__half *dst, const float *src, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		dst[i] = __float2half_rn(src[i]);
}

__global__ void k_wire_narrow_bf16(__nv_bfloat16 *dst, const float *src, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void k_wire_widen_f16(float *dst, const __half *src, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		dst[i] = __half2float(src[i]);
}

__global__ void k_wire_widen_bf16(float *dst, const __nv_bfloat16 *src, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		dst[i] = __bfloat162float(src[i]);
}

#ifndef DDPT_CUDA_HOST_KERNELS /* tests/lib/kernels_host.cc: the kernels only */
extern "C" cudaError_t wire_narrow(uint16_t *dst, const float *src, size_t n, enum comm_wire w,
				   cudaStream_t s)
{
	if (n == 0)
		return cudaSuccess;
	if (w == COMM_WIRE_F16)
		k_wire_narrow_f16<<<cuda_blocks(n), CUDA_THREADS, 0, s>>>((__half *)dst, src, n);
	else
		k_wire_narrow_bf16<<<cuda_blocks(n), CUDA_THREADS, 0, s>>>((__nv_bfloat16 *)dst, src, n);
	return cudaGetLastError();
}

extern "C" cudaError_t wire_widen(float *dst, const uint16_t *src, size_t n, enum comm_wire w,
				  cudaStream_t s)
{
	if (n == 0)
		return cudaSuccess;
	if (w == COMM_WIRE_F16)
		k_wire_widen_f16<<<cuda_blocks(n), CUDA_THREADS, 0, s>>>(dst, (const __half *)src, n);
	else
		k_wire_widen_bf16<<<cuda_blocks(n), CUDA_THREADS, 0, s>>>(dst, (const __nv_bfloat16 *)src, n);
	return cudaGetLastError();
}
#endif /* DDPT_CUDA_HOST_KERNELS */
