/*
 * wire.h - the 16-bit wire's conversions on the device (wire.cu), for the NCCL
 * communicator (comm_nccl.c): a float32 bucket narrowed into a 16-bit mirror before
 * the collective and the mirror widened back into it after, both on the caller's
 * stream. PyTorch's fp16_compress_hook / bf16_compress_hook arithmetic: each float is
 * rounded to nearest, ties to even (__float2half_rn, __float2bfloat16_rn), and widened
 * exactly. Not a reduction: the sums are NCCL's, in its own order.
 */
#ifndef DDPT_CUDA_WIRE_H
#define DDPT_CUDA_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "comm/comm.h" /* enum comm_wire */

#ifdef __cplusplus
extern "C" {
#endif

/* Queue on s: dst[0..n) = src[0..n) rounded to w's 16-bit type (COMM_WIRE_F16 or
 * COMM_WIRE_BF16). dst: (n) 16-bit values in device memory. Returns the launch's error. */
cudaError_t wire_narrow(uint16_t *dst, const float *src, size_t n, enum comm_wire w,
			cudaStream_t s);
/* Queue on s: dst[0..n) = src[0..n) (w's 16-bit type) widened to float32 (exact). */
cudaError_t wire_widen(float *dst, const uint16_t *src, size_t n, enum comm_wire w,
		       cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
