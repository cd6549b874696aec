/*
 * cublas_stub.c - a stub of cuBLAS for the test build of the real CUDA module (see
 * cuda_stub.h): a handle remembers its device, stream and workspace; an SGEMM computes
 * nothing but is an operation on the handle's stream that reads A and B and writes C,
 * checked for races. Its rules: a handle is used on the device it was created on; its
 * creation allocates (not inside a capture); inside a capture it needs a workspace of
 * its own (cublasSetWorkspace), or it would allocate one there.
 */
#include <stdlib.h>

#include <cublas_v2.h>

#include "cuda_stub.h"

struct cublasContext {
	int device;
	cudaStream_t stream;
	void *workspace;
	size_t workspace_bytes;
	cublasMath_t math;
};

cublasStatus_t cublasCreate_v2(cublasHandle_t *h)
{
	*h = NULL;
	if (stub_unsafe("cublasCreate (it allocates)", cudaErrorStreamCaptureUnsupported) != cudaSuccess)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	*h = calloc(1, sizeof **h);
	if (*h == NULL)
		return CUBLAS_STATUS_ALLOC_FAILED;
	(*h)->device = stub_current_device();
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t h)
{
	free(h);
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s)
{
	if (h == NULL)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	h->stream = s;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void *ws, size_t bytes)
{
	if (h == NULL)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	h->workspace = ws;
	h->workspace_bytes = bytes;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode)
{
	if (h == NULL)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	h->math = mode;
	return CUBLAS_STATUS_SUCCESS;
}

/* Bytes of a column-major matrix of `rows` x `cols` with leading dimension ld. */
static size_t extent(int rows, int cols, int ld)
{
	return rows <= 0 || cols <= 0 ? 0 : ((size_t)(cols - 1) * (size_t)ld + (size_t)rows) * sizeof(float);
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
			      int n, int k, const float *alpha, const float *A, int lda,
			      const float *B, int ldb, const float *beta, float *C, int ldc)
{
	cudaStream_t s;
	struct stub_touch t[3];

	if (h == NULL)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (m < 0 || n < 0 || k < 0 || lda < (ta == CUBLAS_OP_N ? m : k) ||
	    ldb < (tb == CUBLAS_OP_N ? k : n) || ldc < m)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (h->device != stub_current_device()) {
		stub_rule("cublasSgemm with a handle of device %d while device %d is current", h->device,
			  stub_current_device());
		return CUBLAS_STATUS_EXECUTION_FAILED;
	}
	s = stub_stream(h->stream);
	if (s->legacy && stub_thread_capture() != NULL) {
		stub_unsafe("cublasSgemm on the legacy default stream (no cublasSetStream)",
			    cudaErrorStreamCaptureImplicit);
		return CUBLAS_STATUS_EXECUTION_FAILED;
	}
	if (s->cap != NULL && h->workspace == NULL) {
		stub_rule("cublasSgemm inside a capture on a handle without a workspace of its own (cublasSetWorkspace): cuBLAS allocates one, which a capture does not permit");
		return CUBLAS_STATUS_EXECUTION_FAILED;
	}
	if (stub_fault("cublasSgemm"))
		return CUBLAS_STATUS_EXECUTION_FAILED;
	t[0] = (struct stub_touch){(uintptr_t)A, (uintptr_t)A + extent(ta == CUBLAS_OP_N ? m : k,
									 ta == CUBLAS_OP_N ? k : m, lda), 0};
	t[1] = (struct stub_touch){(uintptr_t)B, (uintptr_t)B + extent(tb == CUBLAS_OP_N ? k : n,
									 tb == CUBLAS_OP_N ? n : k, ldb), 0};
	t[2] = (struct stub_touch){(uintptr_t)C, (uintptr_t)C + extent(m, n, ldc), 1};
	stub_issue(s, "cublasSgemm", t, 3, NULL);
	return CUBLAS_STATUS_SUCCESS;
}

/* --precision=bf16's products: cublasSgemm's rules, with bf16 A and B, a float32 C and
 * float32 sums, the one combination the module uses (others: not supported); the extents
 * it touches in the types' sizes. */
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
			    int n, int k, const void *alpha, const void *A, cudaDataType at, int lda,
			    const void *B, cudaDataType bt, int ldb, const void *beta, void *C,
			    cudaDataType ct, int ldc, cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
	cudaStream_t s;
	struct stub_touch t[3];

	if (h == NULL)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (at != CUDA_R_16BF || bt != CUDA_R_16BF || ct != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F)
		return CUBLAS_STATUS_NOT_SUPPORTED;
	if (m < 0 || n < 0 || k < 0 || lda < (ta == CUBLAS_OP_N ? m : k) ||
	    ldb < (tb == CUBLAS_OP_N ? k : n) || ldc < m)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (h->device != stub_current_device()) {
		stub_rule("cublasGemmEx with a handle of device %d while device %d is current", h->device,
			  stub_current_device());
		return CUBLAS_STATUS_EXECUTION_FAILED;
	}
	s = stub_stream(h->stream);
	if (s->legacy && stub_thread_capture() != NULL) {
		stub_unsafe("cublasGemmEx on the legacy default stream (no cublasSetStream)",
			    cudaErrorStreamCaptureImplicit);
		return CUBLAS_STATUS_EXECUTION_FAILED;
	}
	if (s->cap != NULL && h->workspace == NULL) {
		stub_rule("cublasGemmEx inside a capture on a handle without a workspace of its own (cublasSetWorkspace): cuBLAS allocates one, which a capture does not permit");
		return CUBLAS_STATUS_EXECUTION_FAILED;
	}
	if (stub_fault("cublasGemmEx"))
		return CUBLAS_STATUS_EXECUTION_FAILED;
	/* extent() is in bytes of floats; a bf16 operand spans half as many. */
	t[0] = (struct stub_touch){(uintptr_t)A, (uintptr_t)A + (extent(ta == CUBLAS_OP_N ? m : k,
									  ta == CUBLAS_OP_N ? k : m, lda)) / 2, 0};
	t[1] = (struct stub_touch){(uintptr_t)B, (uintptr_t)B + (extent(tb == CUBLAS_OP_N ? k : n,
									  tb == CUBLAS_OP_N ? n : k, ldb)) / 2, 0};
	t[2] = (struct stub_touch){(uintptr_t)C, (uintptr_t)C + extent(m, n, ldc), 1};
	stub_issue(s, "cublasGemmEx", t, 3, NULL);
	return CUBLAS_STATUS_SUCCESS;
}
