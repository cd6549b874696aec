/*
 * cublas_stub.c - a stub of cuBLAS for the test build of the real CUDA module (see
 * cuda_stub.h): a handle remembers its device, stream and workspace; an SGEMM is an
 * operation on the handle's stream that reads A and B and writes C, checked for races,
 * and computes C = alpha op(A) op(B) + beta C as cuBLAS documents it (column-major;
 * op(X) = X or X^T; A is lda-strided with m x k or, transposed, k x m stored; beta 0
 * does not read C) through the CPU's BLAS, with exactly the ops and leading dimensions
 * given, when issued or at each replay of a graph that captured it. alpha and beta are
 * host pointers (CUBLAS_POINTER_MODE_HOST, the default), read at the call. Its rules: a
 * handle is used on the device it was created on; its creation allocates (not inside a
 * capture); inside a capture it needs a workspace of its own (cublasSetWorkspace), or it
 * would allocate one there; each operand, from its pointer, shape and leading
 * dimension, lies inside one block of the device's memory.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
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

/* A product as a graph keeps it: SGEMM, or --precision=bf16's GemmEx (bf16 A and B). */
struct gemm_op {
	cublasOperation_t ta, tb;
	int m, n, k, lda, ldb, ldc;
	float alpha, beta;
	const void *A, *B;
	float *C;
	int bf16; /* A and B hold bf16 values */
};

/* A stored operand of rows x cols, leading dimension ld, widened from bf16 to float (the
 * widening is exact, so the float32 product is cuBLAS's CUBLAS_COMPUTE_32F's up to the
 * order of its sums). */
static float *widen(const void *p, int rows, int cols, int ld)
{
	const uint16_t *h = p;
	size_t n = (size_t)(cols - 1) * (size_t)ld + (size_t)rows;
	float *f = malloc(n * sizeof *f);

	for (size_t i = 0; f != NULL && i < n; i++) {
		uint32_t u = (uint32_t)h[i] << 16;

		memcpy(&f[i], &u, sizeof u);
	}
	return f;
}

static void run_gemm(const struct stub_node *node)
{
	const struct gemm_op *o = (const struct gemm_op *)(const void *)node->arg;
	const float *A = o->A, *B = o->B;
	float *wa = NULL, *wb = NULL;

	if (o->m == 0 || o->n == 0)
		return;
	if (o->k == 0 || o->alpha == 0.0f) { /* C = beta C; with beta 0, C is not read */
		for (int j = 0; j < o->n; j++)
			for (int i = 0; i < o->m; i++) {
				float *c = &o->C[(size_t)j * o->ldc + i];

				*c = o->beta == 0.0f ? 0.0f : o->beta * *c;
			}
		return;
	}
	if (o->bf16) {
		A = wa = widen(o->A, o->ta == CUBLAS_OP_N ? o->m : o->k, o->ta == CUBLAS_OP_N ? o->k : o->m, o->lda);
		B = wb = widen(o->B, o->tb == CUBLAS_OP_N ? o->k : o->n, o->tb == CUBLAS_OP_N ? o->n : o->k, o->ldb);
		if (wa == NULL || wb == NULL) {
			stub_rule("cublasGemmEx: the stub is out of host memory");
			free(wa);
			free(wb);
			return;
		}
	}
	cblas_sgemm(CblasColMajor, o->ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
		    o->tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, o->m, o->n, o->k, o->alpha, A, o->lda,
		    B, o->ldb, o->beta, o->C, o->ldc);
	free(wa);
	free(wb);
}

/* An operand that is not inside one block of the handle's device memory: named. */
static int operand_outside(const char *call, const char *name, const void *p, size_t bytes, int rows,
			   int cols, int ld, int device)
{
	int d;

	if (bytes == 0)
		return 0;
	d = stub_device_span(p, bytes);
	if (d == device)
		return 0;
	stub_rule("%s: %s (%d x %d stored, leading dimension %d: %zu bytes from %p) %s", call,
		  name, rows, cols, ld, bytes, p,
		  d == -2 ? "runs past the end of its device allocation" :
		  d == -1 ? "is not device memory" : "is another device's memory");
	return 1;
}

/* The rules of both products: cuBLAS's argument checks, the handle's device and stream,
 * capture, faults, and each operand within its own block of device memory (A and B of
 * `ab` bytes an element), then the product queued on the handle's stream. */
static cublasStatus_t gemm(cublasHandle_t h, const char *call, cublasOperation_t ta, cublasOperation_t tb,
			   int m, int n, int k, float alpha, const void *A, int lda, const void *B, int ldb,
			   float beta, float *C, int ldc, int bf16)
{
	const size_t ab = bf16 ? 2 : sizeof(float);
	cudaStream_t s;
	struct stub_touch t[3];
	struct stub_node node = {.run = run_gemm};
	struct gemm_op o;
	int ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
	int br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;

	if (h == NULL)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T))
		return CUBLAS_STATUS_INVALID_VALUE; /* CUBLAS_OP_C is OP_T for reals: not used here */
	if (m < 0 || n < 0 || k < 0 || lda < (ta == CUBLAS_OP_N ? m : k) ||
	    ldb < (tb == CUBLAS_OP_N ? k : n) || ldc < m)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (h->device != stub_current_device()) {
		stub_rule("%s with a handle of device %d while device %d is current", call, h->device,
			  stub_current_device());
		return CUBLAS_STATUS_EXECUTION_FAILED;
	}
	s = stub_stream(h->stream);
	if (s->legacy && stub_thread_capture() != NULL) {
		char why[96];

		snprintf(why, sizeof why, "%s on the legacy default stream (no cublasSetStream)", call);
		stub_unsafe(why, cudaErrorStreamCaptureImplicit);
		return CUBLAS_STATUS_EXECUTION_FAILED;
	}
	if (s->cap != NULL && h->workspace == NULL) {
		stub_rule("%s inside a capture on a handle without a workspace of its own (cublasSetWorkspace): cuBLAS allocates one, which a capture does not permit",
			  call);
		return CUBLAS_STATUS_EXECUTION_FAILED;
	}
	if (stub_fault(call))
		return CUBLAS_STATUS_EXECUTION_FAILED;
	if (m == 0 || n == 0)
		return CUBLAS_STATUS_SUCCESS; /* a quick return: nothing is read or written */
	/* extent() is in bytes of floats */
	t[0] = (struct stub_touch){(uintptr_t)A, (uintptr_t)A + (k > 0 ? extent(ar, ac, lda) / sizeof(float) * ab : 0), 0};
	t[1] = (struct stub_touch){(uintptr_t)B, (uintptr_t)B + (k > 0 ? extent(br, bc, ldb) / sizeof(float) * ab : 0), 0};
	t[2] = (struct stub_touch){(uintptr_t)C, (uintptr_t)C + extent(m, n, ldc), 1};
	if (operand_outside(call, "A", A, t[0].hi - t[0].lo, ar, ac, lda, h->device) ||
	    operand_outside(call, "B", B, t[1].hi - t[1].lo, br, bc, ldb, h->device) ||
	    operand_outside(call, "C", C, t[2].hi - t[2].lo, m, n, ldc, h->device))
		return CUBLAS_STATUS_EXECUTION_FAILED; /* on a GPU: an illegal address, or wrong numbers */
	o = (struct gemm_op){ta, tb, m, n, k, lda, ldb, ldc, alpha, beta, A, B, C, bf16};
	memcpy(node.arg, &o, sizeof o);
	stub_issue_run(s, call, t, 3, &node);
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
			      int n, int k, const float *alpha, const float *A, int lda,
			      const float *B, int ldb, const float *beta, float *C, int ldc)
{
	return gemm(h, "cublasSgemm", ta, tb, m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc, 0);
}

/* --precision=bf16's products: bf16 A and B, a float32 C and float32 sums, the one
 * combination the module uses (others: not supported). */
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
			    int n, int k, const void *alpha, const void *A, cudaDataType at, int lda,
			    const void *B, cudaDataType bt, int ldb, const void *beta, void *C,
			    cudaDataType ct, int ldc, cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
	(void)algo;
	if (h == NULL)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (at != CUDA_R_16BF || bt != CUDA_R_16BF || ct != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F)
		return CUBLAS_STATUS_NOT_SUPPORTED;
	return gemm(h, "cublasGemmEx", ta, tb, m, n, k, *(const float *)alpha, A, lda, B, ldb,
		    *(const float *)beta, C, ldc, 1);
}
