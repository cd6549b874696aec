/*
 * synth.h - the synthetic generator's kernels (synth.cu), for the CUDA backend's synth
 * op (backend_cuda.cu): core/synth.h's generator, one thread per input or target, so
 * that a batch of synthetic samples is made in device memory from its sample indices
 * alone. The same bytes as the host's: every float step is rounded on its own
 * (__fmul_rn, __fadd_rn; the file is also built with -fmad=false).
 */
#ifndef DDPT_CUDA_SYNTH_H
#define DDPT_CUDA_SYNTH_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "core/synth.h" /* struct synth_spec */

#ifdef __cplusplus
extern "C" {
#endif

/* Queue on st: samples idx[0..n) (device memory) into x (n, s->in) and y (n, s->classes ?
 * 1 : s->outs), device memory, either NULL to skip. Returns the launches' error. */
cudaError_t synth_launch(float *x, float *y, const struct synth_spec *s, const uint32_t *idx, int n,
			 cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
