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

/* An SGEMM as a graph keeps it. */
struct sgemm_op {
	cublasOperation_t ta, tb;
	int m, n, k, lda, ldb, ldc;
	float alpha, beta;
	const float *A, *B;
	float *C;
};

static void run_sgemm(const struct stub_node *node)
{
	const struct sgemm_op *o = (const struct sgemm_op *)(const void *)node->arg;

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
	cblas_sgemm(CblasColMajor, o->ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
		    o->tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, o->m, o->n, o->k, o->alpha, o->A,
		    o->lda, o->B, o->ldb, o->beta, o->C, o->ldc);
}

/* An operand that is not inside one block of the handle's device memory: named. */
static int operand_outside(const char *name, const void *p, size_t bytes, int rows, int cols,
			   int ld, int device)
{
	int d;

	if (bytes == 0)
		return 0;
	d = stub_device_span(p, bytes);
	if (d == device)
		return 0;
	stub_rule("cublasSgemm: %s (%d x %d stored, leading dimension %d: %zu bytes from %p) %s",
		  name, rows, cols, ld, bytes, p,
		  d == -2 ? "runs past the end of its device allocation" :
		  d == -1 ? "is not device memory" : "is another device's memory");
	return 1;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
			      int n, int k, const float *alpha, const float *A, int lda,
			      const float *B, int ldb, const float *beta, float *C, int ldc)
{
	cudaStream_t s;
	struct stub_touch t[3];
	struct stub_node node = {.run = run_sgemm};
	struct sgemm_op o;
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
	if (m == 0 || n == 0)
		return CUBLAS_STATUS_SUCCESS; /* a quick return: nothing is read or written */
	t[0] = (struct stub_touch){(uintptr_t)A, (uintptr_t)A + (k > 0 ? extent(ar, ac, lda) : 0), 0};
	t[1] = (struct stub_touch){(uintptr_t)B, (uintptr_t)B + (k > 0 ? extent(br, bc, ldb) : 0), 0};
	t[2] = (struct stub_touch){(uintptr_t)C, (uintptr_t)C + extent(m, n, ldc), 1};
	if (operand_outside("A", A, t[0].hi - t[0].lo, ar, ac, lda, h->device) ||
	    operand_outside("B", B, t[1].hi - t[1].lo, br, bc, ldb, h->device) ||
	    operand_outside("C", C, t[2].hi - t[2].lo, m, n, ldc, h->device))
		return CUBLAS_STATUS_EXECUTION_FAILED; /* on a GPU: an illegal address, or wrong numbers */
	o = (struct sgemm_op){ta, tb, m, n, k, lda, ldb, ldc, *alpha, *beta, A, B, C};
	memcpy(node.arg, &o, sizeof o);
	stub_issue_run(s, "cublasSgemm", t, 3, &node);
	return CUBLAS_STATUS_SUCCESS;
}
