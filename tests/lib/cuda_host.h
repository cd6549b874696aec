/*
 * cuda_host.h - what a CUDA kernel's source needs to compile as ordinary host C++
 * (g++), for the stub runtime to run the module's own kernels on the CPU
 * (tests/lib/kernels_host.cc includes src/cuda's .cu files after this header).
 *
 * A kernel becomes a plain function that one host "thread" of the grid runs at a time;
 * threadIdx, blockIdx, blockDim and gridDim read the indices the stub's grid runner
 * (cuda_stub_grid.c) set for that thread; __shared__ is one static copy, the running
 * block's (the process runs one block of one launch at a time); __syncthreads
 * switches to the block's next thread (each thread on a fiber of its own) until all
 * have arrived. Floating point is the host's IEEE single and double precision, without
 * contraction into fused multiply-adds (-ffp-contract=off): __fadd_rn and __fmul_rn are
 * the plain operations; the 16-bit conversions are CUDA's own host implementations from
 * cuda_fp16.h and cuda_bf16.h. Atomics are plain read-modify-writes: the threads of a
 * launch never run at the same time. Not a model of warps: a kernel that relies on warp
 * synchronous execution without __syncthreads (or on __shfl_*) does not compile here.
 */
#ifndef DDPT_CUDA_HOST_H
#define DDPT_CUDA_HOST_H

#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda_stub.h" /* struct stub_kthread, stub_kt, stub_syncthreads */

/* CUDA's headers, read by a host compiler, give these attributes gcc ignores. */
#undef __global__
#undef __device__
#undef __shared__
#undef __forceinline__
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static

#define threadIdx (stub_kt.thread)
#define blockIdx (stub_kt.block)
#define blockDim (stub_kt.bdim)
#define gridDim (stub_kt.gdim)
#define __syncthreads() stub_syncthreads()

static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }

template <typename T> static inline T atomicAdd(T *p, T v)
{
	T old = *p;

	*p = old + v;
	return old;
}

template <typename T> static inline T atomicMax(T *p, T v)
{
	T old = *p;

	*p = old < v ? v : old;
	return old;
}

#endif
