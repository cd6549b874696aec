/*
 * cuda_ctx.h - the CUDA backend's context, shared by the files of the CUDA
 * module (the backend and the NCCL communicator) and nothing else.
 */
#ifndef DDPT_CUDA_CTX_H
#define DDPT_CUDA_CTX_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "backend/backend.h"
#include "core/status.h"

#define CUDA_PARTIALS 256 /* blocks of the loss reduction's first pass */
#define CUDA_THREADS 256  /* threads per block of the element-wise kernels */

/* Blocks of CUDA_THREADS for a grid-stride loop over n elements: 1 to 4096. */
static inline int cuda_blocks(size_t n)
{
	size_t b = (n + CUDA_THREADS - 1) / CUDA_THREADS;

	return (int)(b < 4096 ? (b ? b : 1) : 4096);
}

/* Make the events of ev[0..n) not made yet (NULL), until one fails. */
static inline cudaError_t cuda_events_create(cudaEvent_t *ev, int n)
{
	cudaError_t rc = cudaSuccess;

	for (int i = 0; i < n && rc == cudaSuccess; i++)
		if (ev[i] == NULL)
			rc = cudaEventCreate(&ev[i]);
	return rc;
}

/* Destroy the events made of ev[0..n) (the others are NULL). */
static inline void cuda_events_destroy(cudaEvent_t *ev, int n)
{
	for (int i = 0; i < n; i++)
		if (ev[i] != NULL)
			cudaEventDestroy(ev[i]);
}

struct cuda_ctx {
	int device;
	cudaStream_t stream;          /* all compute, in order */
	cublasHandle_t blas;
	void *blas_workspace;         /* fixed, so cuBLAS never allocates (graph capture) */
	float *partials;              /* (2 * CUDA_PARTIALS) reduction scratch: loss and accuracy */
	cudaEvent_t ev;               /* cross-stream ordering for copy_peer */
	cudaEvent_t host_ev[BACKEND_MARKS]; /* host_mark / host_wait */
	uint32_t *synth_idx;          /* (synth_cap) the synth op's sample indices, copied in */
	int synth_cap;
	cudaEvent_t timer[BACKEND_TIMERS]; /* timer_mark / timer_ms, created on first use */
	cudaGraphExec_t exec[BACKEND_GRAPHS];
	unsigned long long peer_on;   /* bit i: this device reads device i's memory directly */
	size_t allocated;             /* bytes from alloc, never decreased: the peak held */
	struct diag err;              /* first error (sticky: the device is not trusted after it) */
	/* Set by the NCCL communicator ordered with this stream: every host wait also watches
	 * its asynchronous errors, and gives up after timeout_s (0: never). */
	enum status (*poll)(void *arg, struct diag *d);
	void *poll_arg;
	int timeout_s;
	/* --trace's device clock (backend_cuda.cu): markers are timing events on stream,
	 * measured from tref, recorded at host time tref_host on the idle stream. */
	cudaEvent_t *tev;             /* (tcap) */
	int tn, tcap;
	cudaEvent_t tref;
	double tref_host;
	int tref_set;
	/* --precision=bf16 (backend_cuda.cu): the products' bf16 operands and a float32 product
	 * to round before it is added, device scratch grown when a product needs more (outside
	 * a capture: the first step is eager). */
	int bf16;
	void *b16;                    /* (b16_n) __nv_bfloat16 */
	size_t b16_n;
	float *f32;                   /* (f32_n) */
	size_t f32_n;
};

/* cuBLAS's math mode, the same for the backend and the SGEMM ceiling it is measured
 * against. Without --tf32 it is PyTorch's for float32 (allow_tf32 off, the default:
 * CUBLAS_DEFAULT_MATH), which computes in float32 -- no TF32 -- but leaves cuBLAS its
 * fastest kernels; CUBLAS_PEDANTIC_MATH would rule some of those out for the same result
 * precision. */
static inline cublasMath_t cuda_blas_math(int tf32)
{
	return tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
}

#ifdef __cplusplus
extern "C" {
#endif
/* Record a failed CUDA call (first one wins); returns 1 if rc is an error. */
int cuda_note(struct cuda_ctx *c, cudaError_t rc, const char *call, const char *file, int line);
#ifdef __cplusplus
}
#endif

#define CUDA_NOTE(c, call) cuda_note((c), (call), #call, __FILE__, __LINE__)

#endif
