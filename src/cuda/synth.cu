/*
 * synth.cu - the synthetic generator's kernels (see synth.h). Grid-stride loops, one
 * thread per element; labels one thread per sample (the first largest of its outputs).
 * No shared memory, no reduction, no state: the generator is six numbers passed by value.
 */
#include "cuda/cuda_ctx.h" /* cuda_blocks, CUDA_THREADS: the grid of the element-wise kernels */
#include "cuda/synth.h" /* this file's prototypes, as backend_cuda.cu sees them */


__global__ void k_synth_inputs(float *x, struct synth_spec s, const uint32_t *idx, size_t n)
{
	for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
		size_t r = e / (size_t)s.in;
		int j = (int)(e - r * (size_t)s.in);

		x[e] = synth_input(s.key_data, synth_base(&s, idx[r]), j);
	}
}

__global__ void k_synth_targets(float *y, struct synth_spec s, const uint32_t *idx, size_t n)
{
	for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
		size_t r = e / (size_t)s.outs;
		int k = (int)(e - r * (size_t)s.outs);

		y[e] = synth_target(&s, synth_base(&s, idx[r]), k);
	}
}

__global__ void k_synth_labels(float *y, struct synth_spec s, const uint32_t *idx, size_t n)
{
	for (size_t r = blockIdx.x * (size_t)blockDim.x + threadIdx.x; r < n; r += (size_t)gridDim.x * blockDim.x) {
		uint64_t base = synth_base(&s, idx[r]);
		float best = synth_target(&s, base, 0);
		int label = 0;

		for (int k = 1; k < s.outs; k++) {
			float v = synth_target(&s, base, k);

			if (v > best) {
				best = v;
				label = k;
			}
		}
		y[r] = (float)label;
	}
}

#ifndef DDPT_CUDA_HOST_KERNELS /* tests/lib/kernels_host.cc: the kernels only */
extern "C" cudaError_t synth_launch(float *x, float *y, const struct synth_spec *s, const uint32_t *idx, int n,
				    cudaStream_t st)
{
	size_t xn = (size_t)n * (size_t)s->in, yn = (size_t)n * (size_t)s->outs;
	cudaError_t rc;

	if (n <= 0)
		return cudaSuccess;
	if (x != NULL) {
		k_synth_inputs<<<cuda_blocks(xn), CUDA_THREADS, 0, st>>>(x, *s, idx, xn);
		rc = cudaGetLastError();
		if (rc != cudaSuccess)
			return rc;
	}
	if (y != NULL && s->classes)
		k_synth_labels<<<cuda_blocks((size_t)n), CUDA_THREADS, 0, st>>>(y, *s, idx, (size_t)n);
	else if (y != NULL)
		k_synth_targets<<<cuda_blocks(yn), CUDA_THREADS, 0, st>>>(y, *s, idx, yn);
	return cudaGetLastError();
}
#endif /* DDPT_CUDA_HOST_KERNELS */
