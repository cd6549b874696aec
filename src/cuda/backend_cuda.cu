/*
 * backend_cuda.cu - the CUDA backend: cuBLAS for the matrix products, small
 * kernels for the element-wise work, the losses (MSE, softmax cross-entropy),
 * the optimizers (SGD, AdamW) and the gradient norm and clipping, all on one
 * stream per instance.
 *
 * Nothing in a step allocates or waits for the device; errors are recorded
 * with the failing call and the library's message and reported by sync().
 * TF32 is off unless asked for, so products match float32 (PyTorch's default
 * math, cuda_ctx.h). The loss is reduced in a fixed order (two passes, no
 * atomics), so a run is reproducible bit for bit. With --trace, a device clock (the end of this
 * file) times spans with events on the stream.
 */
#include <cuda_bf16.h>        /* __nv_bfloat16, __float2bfloat16_rn: --precision=bf16 */
#include <nvtx3/nvToolsExt.h> /* header-only NVTX 3: the --trace spans' ranges */
#include <stdio.h>
#include <string.h>

#include "core/clock.h"
#include "cuda_ctx.h"
#include "cuda_module.h" /* this file's prototypes, as module.c sees them */
#include "cuda/hostwait.h"   /* hostwait: every wait of the host */
#include "cuda/synth.h"      /* synth_launch: the synthetic generator's kernels */
#include "core/tracebuf.h"           /* struct trace_dev, clock_now */
#include "core/hash64.h"             /* hash64_term: the replica check's digest */

/* tests/lib/kernels_host.cc compiles this file a second time, for the CUDA stub to run
 * the kernels on the host: DDPT_CUDA_HOST_KERNELS keeps only the kernels. */
#ifndef DDPT_CUDA_HOST_KERNELS
extern "C" int cuda_note(struct cuda_ctx *c, cudaError_t rc, const char *call, const char *file,
			 int line)
{
	if (rc == cudaSuccess)
		return 0;
	diag_set(&c->err, ST_RUNTIME, "GPU %d: %s failed (%s:%d): %s", c->device, call, file, line,
		 cudaGetErrorString(rc));
	return 1;
}

static const char *cublas_msg(cublasStatus_t s)
{
	switch (s) {
	case CUBLAS_STATUS_NOT_INITIALIZED: return "cuBLAS not initialized";
	case CUBLAS_STATUS_ALLOC_FAILED: return "cuBLAS allocation failed";
	case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
	case CUBLAS_STATUS_ARCH_MISMATCH: return "architecture mismatch";
	case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
	case CUBLAS_STATUS_INTERNAL_ERROR: return "internal error";
	case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported";
	default: return "error";
	}
}

static void blas_note(struct cuda_ctx *c, cublasStatus_t s, const char *call)
{
	if (s != CUBLAS_STATUS_SUCCESS)
		diag_set(&c->err, ST_RUNTIME, "GPU %d: %s failed: %s (%d)", c->device, call,
			 cublas_msg(s), (int)s);
}

/* Every operation makes its device current: dp drives several GPUs from one thread. */
static void use(struct cuda_ctx *c)
{
	CUDA_NOTE(c, cudaSetDevice(c->device));
}

/* The first error, if any, as the caller's status. */
static enum status report(struct cuda_ctx *c, struct diag *d)
{
	if (c->err.st != ST_OK && d != NULL)
		diag_set(d, c->err.st, "%s", c->err.msg);
	return c->err.st;
}

/* hostwait's query: whether ev has passed (the whole stream if ev is NULL). */
struct waited {
	struct cuda_ctx *c;
	cudaEvent_t ev;
	const char *what;
};

static int waited_query(void *arg, struct diag *d)
{
	struct waited *w = (struct waited *)arg;
	cudaError_t q = w->ev != NULL ? cudaEventQuery(w->ev) : cudaStreamQuery(w->c->stream);

	if (q == cudaSuccess)
		return 1;
	if (q == cudaErrorNotReady)
		return 0;
	cuda_note(w->c, q, w->what, __FILE__, __LINE__);
	return -1;
}

/* Wait on the host until ev has passed (the whole stream if ev is NULL), watching the
 * communicator's asynchronous errors and its timeout: a dead peer leaves NCCL's kernels
 * spinning, which cudaStreamSynchronize would wait for forever. */
static enum status wait_for(struct cuda_ctx *c, cudaEvent_t ev, const char *what, struct diag *d)
{
	struct waited wd = {c, ev, what};
	const struct hostwait w = {what, c->device, waited_query, &wd, c->poll, c->poll_arg, c->timeout_s};

	if (c->err.st == ST_OK)
		hostwait(&w, &c->err);
	return report(c, d);
}

#endif /* DDPT_CUDA_HOST_KERNELS */

/* ---- kernels --------------------------------------------------------------- */

/* y += b row by row, then relu (NaN passes through, as torch.relu) if asked: one pass. */
__global__ void k_bias_rows(float *y, const float *b, int n, int out, int relu)
{
	size_t total = (size_t)n * out;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		float v = y[i] + b[i % out];

		y[i] = relu && v <= 0.0f ? 0.0f : v;
	}
}

__global__ void k_relu(float *y, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		y[i] = y[i] <= 0.0f ? 0.0f : y[i]; /* NaN stays NaN, as torch.relu */
}

/* torch's threshold_backward: zero where y <= 0, so a NaN output passes its gradient. */
__global__ void k_relu_bwd(float *dy, const float *y, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		dy[i] = y[i] <= 0.0f ? 0.0f : dy[i];
}

/* ---- bf16 autocast (--precision=bf16): the CPU backend's arithmetic (backend.h) ---- */

/* x rounded to bf16, nearest even (PyTorch's and core/half.c's rounding), as a float. */
__device__ __forceinline__ float bf16r(float x)
{
	return __bfloat162float(__float2bfloat16_rn(x));
}

__global__ void k_to_bf16(__nv_bfloat16 *dst, const float *src, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		dst[i] = __float2bfloat16_rn(src[i]);
}

/* y = bf16(y + bf16(b)) row by row, then relu: autocast's Linear output. */
__global__ void k_bias_rows_bf16(float *y, const float *b, int n, int out, int relu)
{
	size_t total = (size_t)n * out;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		float v = bf16r(y[i] + bf16r(b[i % out]));

		y[i] = relu && v <= 0.0f ? 0.0f : v;
	}
}

/* dst = scale bf16(src) (dst may be src), or dst += scale bf16(src) when accumulate is
 * set; two roundings, never fused (the CPU backend's arithmetic). */
__global__ void k_round_bf16(float *dst, const float *src, size_t n, float scale, int accumulate)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		dst[i] = __fadd_rn(accumulate ? dst[i] : 0.0f, __fmul_rn(scale, bf16r(src[i])));
}

/* db[k] (+)= sum over rows of dy[:, k] (k < cols; dy's rows ld apart), parallel over rows as well as columns: a block
 * per BG_COLS columns, whose BG_COLS x BG_LANES threads each sum every BG_LANES-th row of
 * one column (a warp reads BG_COLS neighbours of one row), then each column's BG_LANES
 * partial sums are added in a fixed tree order -- the same bits on every run. (One
 * thread per column, rows in order, gave a 4096-wide layer 16 blocks.) */
#define BG_COLS 32
#define BG_LANES 32

/* A gradient value as a float: float32 as it is, bf16 widened. */
__device__ __forceinline__ float bg_load(float x)
{
	return x;
}

__device__ __forceinline__ float bg_load(__nv_bfloat16 x)
{
	return __bfloat162float(x);
}

/* The body of both bias-gradient kernels: db[k] (+)= scale times the float32 sum of column
 * k of dy, rounded to bf16 with ROUND (autocast's bias gradient of bf16 gradients). */
template <typename T, int ROUND>
__device__ __forceinline__ void bias_grad(float *db, const T *dy, int n, int cols, int ld, float scale,
					  int accumulate)
{
	__shared__ float part[BG_LANES][BG_COLS + 1]; /* + 1: no bank conflicts */
	int k = blockIdx.x * BG_COLS + threadIdx.x;
	float s = 0.0f;

	if (k < cols)
		for (int i = threadIdx.y; i < n; i += BG_LANES)
			s += bg_load(dy[(size_t)i * ld + k]);
	part[threadIdx.y][threadIdx.x] = s;
	__syncthreads();
	for (int h = BG_LANES / 2; h > 0; h /= 2) {
		if (threadIdx.y < h)
			part[threadIdx.y][threadIdx.x] += part[threadIdx.y + h][threadIdx.x];
		__syncthreads();
	}
	if (threadIdx.y == 0 && k < cols)
		db[k] = __fadd_rn(accumulate ? db[k] : 0.0f,
				  __fmul_rn(scale, ROUND ? bf16r(part[0][threadIdx.x]) : part[0][threadIdx.x]));
}

__global__ void k_bias_grad(float *db, const float *dy, int n, int cols, int ld, float scale,
			    int accumulate)
{
	bias_grad<float, 0>(db, dy, n, cols, ld, scale, accumulate);
}

__global__ void k_bias_grad_bf16(float *db, const __nv_bfloat16 *dy, int n, int cols, int ld,
				 float scale, int accumulate)
{
	bias_grad<__nv_bfloat16, 1>(db, dy, n, cols, ld, scale, accumulate);
}

/* The sum of every thread's s over the block (CUDA_THREADS threads), in a fixed order, so the
 * result is the same bit for bit on every run (for uint64_t, integer addition mod 2^64:
 * any order would); valid in thread 0. */
template <typename T> __device__ T block_sum(T s)
{
	__shared__ T sh[CUDA_THREADS];

	sh[threadIdx.x] = s;
	__syncthreads();
	for (int w = CUDA_THREADS / 2; w > 0; w /= 2) {
		if (threadIdx.x < w)
			sh[threadIdx.x] += sh[threadIdx.x + w];
		__syncthreads();
	}
	return sh[0];
}

/* Pass 1: dy = g (y - t) and one partial sum of squares per block. */
__global__ void k_mse_pass1(float *dy, float *partials, const float *y, const float *t, size_t m,
			    float g)
{
	double s = 0.0, sum;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < m;
	     i += (size_t)gridDim.x * blockDim.x) {
		float e = y[i] - t[i];

		s += (double)e * e;
		dy[i] = g * e;
	}
	sum = block_sum(s);
	if (threadIdx.x == 0)
		partials[blockIdx.x] = (float)sum;
}

/* Pass 2 (one block): loss (+)= scale * sum(partials) / m. */
__global__ void k_mse_pass2(float *loss, const float *partials, int nparts, double m, float scale,
			    int accumulate)
{
	double s = 0.0, sum;

	for (int i = threadIdx.x; i < nparts; i += blockDim.x)
		s += partials[i];
	sum = block_sum(s);
	if (threadIdx.x == 0)
		*loss = (accumulate ? *loss : 0.0f) + (float)((double)scale * sum / m);
}

/* Pass 1 of the cross-entropy: one row per thread (max, log-sum-exp, argmax, the row's
 * gradient), one partial loss sum and one partial count of correct rows per block. */
__global__ void k_xent_pass1(float *dy, float *partials, const float *z, const float *labels,
			     int n, int classes, float g)
{
	double s = 0.0, right = 0.0, sum;

	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
		const float *r = z + (size_t)i * classes;
		float *dr = dy + (size_t)i * classes;
		/* a label outside [0, classes) makes the loss NaN (backend_cpu.c's rule) */
		const int ok = labels[i] >= 0.0f && labels[i] < (float)classes;
		int t = ok ? (int)labels[i] : 0, best = 0;
		float mx = r[0], e = 0.0f, lse;

		for (int k = 1; k < classes; k++) {
			if (r[k] > mx) {
				mx = r[k];
				best = k;
			}
		}
		for (int k = 0; k < classes; k++)
			e += expf(r[k] - mx);
		lse = mx + logf(e);
		s += ok ? (double)(lse - r[t]) : nan("");
		right += best == t;
		for (int k = 0; k < classes; k++)
			dr[k] = g * (expf(r[k] - lse) - (k == t ? 1.0f : 0.0f));
	}
	sum = block_sum(s);
	if (threadIdx.x == 0)
		partials[blockIdx.x] = (float)sum;
	__syncthreads(); /* every thread has read block_sum's result before it is reused */
	sum = block_sum(right);
	if (threadIdx.x == 0)
		partials[CUDA_PARTIALS + blockIdx.x] = (float)sum;
}

/* Pass 2 (one block): out[0] (+)= scale * loss sum / n, out[1] (+)= scale * correct / n. */
__global__ void k_xent_pass2(float *out, const float *partials, int nparts, double n, float scale,
			     int accumulate)
{
	double s = 0.0, right = 0.0, sum;

	for (int i = threadIdx.x; i < nparts; i += blockDim.x) {
		s += partials[i];
		right += partials[CUDA_PARTIALS + i];
	}
	sum = block_sum(s);
	if (threadIdx.x == 0)
		out[0] = (accumulate ? out[0] : 0.0f) + (float)((double)scale * sum / n);
	__syncthreads();
	sum = block_sum(right);
	if (threadIdx.x == 0)
		out[1] = (accumulate ? out[1] : 0.0f) + (float)((double)scale * sum / n);
}

/* y = a y + c (x + b z), or a y + c x without z; (x + b z) rounded first, as on the CPU. */
__global__ void k_axpbz(float *y, float a, float c, const float *x, float b, const float *z,
			size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float t = z != NULL ? __fadd_rn(x[i], __fmul_rn(b, z[i])) : x[i];

		y[i] = __fadd_rn(__fmul_rn(a, y[i]), __fmul_rn(c, t));
	}
}

__global__ void k_adamw(float *p, const float *g, float *m, float *v, size_t n,
			struct adamw_hparams h)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float gi = g[i], mi, vi;

		p[i] *= h.decay;
		mi = m[i] * h.beta1 + h.one_minus_beta1 * gi;
		vi = v[i] * h.beta2 + h.one_minus_beta2 * gi * gi;
		m[i] = mi;
		v[i] = vi;
		p[i] += -h.step_size * (mi / (sqrtf(vi) / h.bc2_sqrt + h.eps));
	}
}

/* Pass 1 of a sum of squares: one partial per block. */
__global__ void k_sumsq_pass1(float *partials, const float *x, size_t n)
{
	double s = 0.0, sum;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		s += (double)x[i] * x[i];
	sum = block_sum(s);
	if (threadIdx.x == 0)
		partials[blockIdx.x] = (float)sum;
}

/* Pass 2 (one block): *out (+)= sum(partials). */
__global__ void k_sumsq_pass2(float *out, const float *partials, int nparts, int accumulate)
{
	double s = 0.0, sum;

	for (int i = threadIdx.x; i < nparts; i += blockDim.x)
		s += partials[i];
	sum = block_sum(s);
	if (threadIdx.x == 0)
		*out = (accumulate ? *out : 0.0f) + (float)sum;
}

/* Pass 1 of the replica check's digest (core/hash64.h) of the floats whose bits are
 * x[0..n), numbered from first: one partial sum per block. */
__global__ void k_hash64_pass1(uint64_t *partials, const uint32_t *x, size_t n, uint64_t first)
{
	uint64_t s = 0, sum;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		s += hash64_term(first + i, x[i]);
	sum = block_sum<uint64_t>(s);
	if (threadIdx.x == 0)
		partials[blockIdx.x] = sum;
}

/* Pass 2 (one block): *out = the sum of the partials, the digest's 64 bits. */
__global__ void k_hash64_pass2(uint64_t *out, const uint64_t *partials, int nparts)
{
	uint64_t s = 0, sum;

	for (int i = threadIdx.x; i < nparts; i += blockDim.x)
		s += partials[i];
	sum = block_sum<uint64_t>(s);
	if (threadIdx.x == 0)
		*out = sum;
}

/* clip_grad_norm_: x *= min(1, max_norm / (sqrt(*sumsq) + 1e-6)), read on the device. */
__global__ void k_clip(float *x, size_t n, const float *sumsq, float max_norm)
{
	float coef = max_norm / (sqrtf(*sumsq) + 1e-6f);

	if (coef >= 1.0f)
		return;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		x[i] *= coef;
}

__global__ void k_add(float *dst, const float *src, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		dst[i] += src[i];
}

#ifndef DDPT_CUDA_HOST_KERNELS /* the host functions, which launch kernels */
/* A kernel launch's error, named by its kernel (cudaGetLastError() alone names none). */
#define LAUNCH_CHECK(c, what) cuda_note((c), cudaGetLastError(), "launch of " what, __FILE__, __LINE__)

/* ---- operations ---------------------------------------------------------------- */

/* The events of host_mark's slots (BACKEND_MARKS); nonzero (c's error set) on failure. */
static int host_events(struct cuda_ctx *c)
{
	for (int i = 0; i < BACKEND_MARKS; i++)
		if (CUDA_NOTE(c, cudaEventCreateWithFlags(&c->host_ev[i], cudaEventDisableTiming)))
			return 1;
	return 0;
}

extern "C" enum status cuda_init(void **out, const struct backend_config *cfg, struct diag *d)
{
	struct cuda_ctx *c = (struct cuda_ctx *)calloc(1, sizeof *c);
	cublasStatus_t bs;
	size_t ws = 32u << 20;

	*out = NULL;
	if (c == NULL)
		return diag_set(d, ST_RUNTIME, "cuda: out of host memory");
	c->device = cfg->device;
	c->bf16 = cfg->precision == PRECISION_BF16;
	if (!CUDA_NOTE(c, cudaSetDevice(c->device)) &&
	    !CUDA_NOTE(c, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) &&
	    !CUDA_NOTE(c, cudaEventCreateWithFlags(&c->ev, cudaEventDisableTiming)) &&
	    !host_events(c) &&
	    !CUDA_NOTE(c, cudaMalloc(&c->blas_workspace, ws)) &&
	    !CUDA_NOTE(c, cudaMalloc((void **)&c->partials, 2 * CUDA_PARTIALS * sizeof(float)))) {
		bs = cublasCreate(&c->blas);
		blas_note(c, bs, "cublasCreate");
		if (bs == CUBLAS_STATUS_SUCCESS) {
			blas_note(c, cublasSetStream(c->blas, c->stream), "cublasSetStream");
			blas_note(c, cublasSetWorkspace(c->blas, c->blas_workspace, ws), "cublasSetWorkspace");
			blas_note(c, cublasSetMathMode(c->blas, cuda_blas_math(cfg->precision == PRECISION_TF32)), "cublasSetMathMode");
		}
	}
	if (c->err.st != ST_OK) {
		enum status st = diag_set(d, c->err.st, "%s", c->err.msg);

		cuda_fini(c); /* what was made before the failure (fini skips what was not) */
		return st;
	}
	c->allocated = ws + CUDA_PARTIALS * sizeof(float);
	*out = c;
	return ST_OK;
}

extern "C" void cuda_fini(void *ctx)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;

	if (c == NULL)
		return;
	cudaSetDevice(c->device);
	if (c->err.st == ST_OK) /* after an error, queued work may never finish */
		cudaStreamSynchronize(c->stream);
	for (int i = 0; i < BACKEND_GRAPHS; i++)
		if (c->exec[i] != NULL)
			cudaGraphExecDestroy(c->exec[i]);
	if (c->blas != NULL)
		cublasDestroy(c->blas);
	cudaFree(c->b16);
	cudaFree(c->f32);
	cudaFree(c->partials);
	cudaFree(c->blas_workspace);
	cudaFree(c->synth_idx);
	if (c->ev != NULL)
		cudaEventDestroy(c->ev);
	cuda_events_destroy(c->host_ev, BACKEND_MARKS);
	cuda_events_destroy(c->timer, BACKEND_TIMERS);
	for (int i = 0; i < c->tcap; i++)
		cudaEventDestroy(c->tev[i]);
	free(c->tev);
	if (c->tref != NULL)
		cudaEventDestroy(c->tref);
	if (c->stream != NULL) /* NULL would name the legacy default stream */
		cudaStreamDestroy(c->stream);
	free(c);
}

extern "C" enum status cuda_bind(void *ctx, struct diag *d)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;

	use(c);
	return ST_OK;
}

extern "C" float *cuda_alloc(void *ctx, size_t n)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;
	void *p = NULL;
	size_t bytes = (n ? n : 1) * sizeof(float);

	use(c);
	if (cudaMalloc(&p, bytes) != cudaSuccess)
		return NULL;
	/* On the compute stream, which every later use is ordered after (cudaMemset would run
	 * on the legacy stream, unordered with the non-blocking compute stream). */
	if (cudaMemsetAsync(p, 0, bytes, c->stream) != cudaSuccess) {
		cudaFree(p);
		return NULL;
	}
	c->allocated += bytes;
	return (float *)p;
}

extern "C" void cuda_free(void *ctx, float *p)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;

	if (p == NULL)
		return;
	use(c);
	cudaFree(p);
}

extern "C" float *cuda_host_alloc(void *ctx, size_t n)
{
	void *p = NULL;

	if (cudaHostAlloc(&p, (n ? n : 1) * sizeof(float), cudaHostAllocPortable) != cudaSuccess)
		return NULL;
	return (float *)p;
}

extern "C" void cuda_host_free(void *ctx, float *p)
{
	if (p != NULL)
		cudaFreeHost(p);
}

extern "C" void cuda_to_device(void *ctx, float *dst, const float *src, size_t n)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;

	use(c);
	CUDA_NOTE(c, cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyHostToDevice, c->stream));
}

extern "C" void cuda_synth(void *ctx, float *x, float *y, const struct synth_spec *s, const uint32_t *idx,
			   int n)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;

	use(c);
	if (n <= 0)
		return;
	if (c->synth_cap < n) { /* the first batch, eagerly: never inside a capture */
		cudaFree(c->synth_idx);
		c->synth_idx = NULL;
		c->synth_cap = 0;
		if (CUDA_NOTE(c, cudaMalloc((void **)&c->synth_idx, (size_t)n * sizeof(uint32_t))))
			return;
		c->synth_cap = n;
		c->allocated += (size_t)n * sizeof(uint32_t);
	}
	if (CUDA_NOTE(c, cudaMemcpyAsync(c->synth_idx, idx, (size_t)n * sizeof(uint32_t), cudaMemcpyHostToDevice,
					 c->stream)))
		return;
	cuda_note(c, synth_launch(x, y, s, c->synth_idx, n, c->stream), "launch of k_synth", __FILE__, __LINE__);
}

extern "C" enum status cuda_to_host(void *ctx, float *dst, const float *src, size_t n,
				   struct diag *d)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;

	use(c);
	CUDA_NOTE(c, cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost, c->stream));
	return wait_for(c, NULL, "cudaMemcpyAsync(device to host)", d);
}

extern "C" void cuda_to_host_async(void *ctx, float *dst, const float *src, size_t n)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;

	use(c);
	CUDA_NOTE(c, cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost, c->stream));
}

extern "C" void cuda_copy(void *ctx, float *dst, const float *src, size_t n)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;

	use(c);
	CUDA_NOTE(c, cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, c->stream));
}

/* dst on this instance's GPU = src on src_ctx's GPU, after src's queued work (event). */
extern "C" void cuda_copy_peer(void *ctx, float *dst, void *src_ctx, const float *src, size_t n)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx, *s = (struct cuda_ctx *)src_ctx;

	/* Without peer access the copy is staged through host memory. */
	if (s->device != c->device && s->device < 64 && !(c->peer_on >> s->device & 1)) {
		int can = 0;

		use(c);
		if (cudaDeviceCanAccessPeer(&can, c->device, s->device) == cudaSuccess && can) {
			cudaError_t rc = cudaDeviceEnablePeerAccess(s->device, 0);

			if (rc == cudaErrorPeerAccessAlreadyEnabled)
				cudaGetLastError(); /* not an error: another instance on this device did it */
			else
				CUDA_NOTE(c, rc);
		}
		c->peer_on |= 1ull << s->device; /* asked once, whatever the answer */
	}
	if (s != c) {
		use(s);
		CUDA_NOTE(c, cudaEventRecord(s->ev, s->stream));
		use(c);
		CUDA_NOTE(c, cudaStreamWaitEvent(c->stream, s->ev, 0));
	}
	use(c);
	CUDA_NOTE(c, cudaMemcpyPeerAsync(dst, c->device, src, s->device, n * sizeof(float), c->stream));
}

extern "C" void cuda_add(void *ctx, float *dst, const float *src, size_t n)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;

	use(c);
	k_add<<<cuda_blocks(n), CUDA_THREADS, 0, c->stream>>>(dst, src, n);
	LAUNCH_CHECK(c, "k_add");
}

/* ---- bf16 autocast: bf16 operands, float32 sums (cublasGemmEx, CUBLAS_COMPUTE_32F), each
 * result rounded to bf16 by a kernel, as the CPU backend does (backend.h) ---------------- */

/* Scratch of at least n elements of size bytes in *p (capacity *cap); NULL with the error
 * noted if it cannot grow: never inside a capture (cudaMalloc would invalidate it; the
 * first step of a run is eager and every later one has the same shapes). */
static void *grow(struct cuda_ctx *c, void **p, size_t *cap, size_t n, size_t size)
{
	enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;

	if (n <= *cap)
		return *p;
	if (CUDA_NOTE(c, cudaStreamIsCapturing(c->stream, &cs)))
		return NULL;
	if (cs != cudaStreamCaptureStatusNone) {
		cuda_note(c, cudaErrorStreamCaptureUnsupported, "bf16 operand scratch grown inside a graph capture",
			  __FILE__, __LINE__);
		return NULL;
	}
	cudaFree(*p); /* waits for the work that used it */
	*p = NULL;
	*cap = 0;
	if (CUDA_NOTE(c, cudaMalloc(p, n * size)))
		return NULL;
	*cap = n;
	c->allocated += n * size;
	return *p;
}

/* src (n floats) rounded to bf16 into dst. */
static void to_bf16(struct cuda_ctx *c, __nv_bfloat16 *dst, const float *src, size_t n)
{
	k_to_bf16<<<cuda_blocks(n), CUDA_THREADS, 0, c->stream>>>(dst, src, n);
	LAUNCH_CHECK(c, "k_to_bf16");
}

/* Column-major C (m, n) = op(A) op(B), A and B bf16, C float32, sums in float32. */
static void gemm_bf16(struct cuda_ctx *c, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
		      int k, const __nv_bfloat16 *a, int lda, const __nv_bfloat16 *b, int ldb,
		      float *out, int ldc, const char *what)
{
	const float one = 1.0f, zero = 0.0f;

	blas_note(c, cublasGemmEx(c->blas, ta, tb, m, n, k, &one, a, CUDA_R_16BF, lda, b, CUDA_R_16BF,
				  ldb, &zero, out, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
		  what);
}

static void forward_bf16(struct cuda_ctx *c, float *y, const float *x, const float *w,
			 const float *b, int n, int in, int out, int relu)
{
	size_t nx = (size_t)n * in, nw = (size_t)out * in;
	__nv_bfloat16 *xb = (__nv_bfloat16 *)grow(c, &c->b16, &c->b16_n, nx + nw, sizeof *xb);

	if (xb == NULL)
		return;
	to_bf16(c, xb, x, nx);
	to_bf16(c, xb + nx, w, nw);
	gemm_bf16(c, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, xb + nx, in, xb, in, y, out,
		  "cublasGemmEx(forward, bf16)");
	k_bias_rows_bf16<<<cuda_blocks((size_t)n * out), CUDA_THREADS, 0, c->stream>>>(y, b, n, out, relu);
	LAUNCH_CHECK(c, "k_bias_rows_bf16");
}

/* Rows [r0, r1) of dw and db from the bf16 dyb (n, out) and xb (n, in), times gscale, set
 * or added to. */
static void grad_rows_bf16(struct cuda_ctx *c, float *dw, float *db, const __nv_bfloat16 *dyb,
			   const __nv_bfloat16 *xb, int n, int in, int out, int r0, int r1,
			   float gscale, int accumulate)
{
	const int rows = r1 - r0;
	size_t len = (size_t)rows * in;

	if (dw != NULL) {
		float *prod = accumulate ? (float *)grow(c, (void **)&c->f32, &c->f32_n, len, sizeof(float)) : dw;

		if (prod == NULL)
			return;
		gemm_bf16(c, CUBLAS_OP_N, CUBLAS_OP_T, in, rows, n, xb, in, dyb + r0, out, prod, in,
			  "cublasGemmEx(weight grad, bf16)");
		k_round_bf16<<<cuda_blocks(len), CUDA_THREADS, 0, c->stream>>>(dw, prod, len, gscale,
									      accumulate);
		LAUNCH_CHECK(c, "k_round_bf16");
	}
	if (db != NULL) {
		k_bias_grad_bf16<<<(rows + BG_COLS - 1) / BG_COLS, dim3(BG_COLS, BG_LANES), 0, c->stream>>>(
			db, dyb + r0, n, rows, out, gscale, accumulate);
		LAUNCH_CHECK(c, "k_bias_grad_bf16");
	}
}

static void backward_bf16(struct cuda_ctx *c, float *dx, float *dw, float *db, const float *dy,
			  const float *x, const float *w, int n, int in, int out, float gscale,
			  int accumulate)
{
	size_t ny = (size_t)n * out, nx = (size_t)n * in, nw = (size_t)out * in;
	__nv_bfloat16 *dyb = (__nv_bfloat16 *)grow(c, &c->b16, &c->b16_n, ny + nx + nw, sizeof *dyb);

	if (dyb == NULL)
		return;
	to_bf16(c, dyb, dy, ny);
	if (dw != NULL) {
		to_bf16(c, dyb + ny, x, nx);
		grad_rows_bf16(c, dw, db, dyb, dyb + ny, n, in, out, 0, out, gscale, accumulate);
	}
	if (dx == NULL)
		return;
	to_bf16(c, dyb + ny + nx, w, nw);
	gemm_bf16(c, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, dyb + ny + nx, in, dyb, out, dx, in,
		  "cublasGemmEx(input grad, bf16)");
	k_round_bf16<<<cuda_blocks(nx), CUDA_THREADS, 0, c->stream>>>(dx, dx, nx, 1.0f, 0);
	LAUNCH_CHECK(c, "k_round_bf16");
}

/* Row-major y (n, out) = x (n, in) w^T + b: in cuBLAS's column-major terms
 * y^T (out, n) = op_T(w as (in, out)) x^T (in, n). */
extern "C" void cuda_linear_forward(void *ctx, float *y, const float *x, const float *w,
				    const float *b, int n, int in, int out, int relu)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;
	const float one = 1.0f, zero = 0.0f;

	use(c);
	if (c->bf16) {
		forward_bf16(c, y, x, w, b, n, in, out, relu);
		return;
	}
	blas_note(c, cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, w, in, x, in,
				 &zero, y, out), "cublasSgemm(forward)");
	k_bias_rows<<<cuda_blocks((size_t)n * out), CUDA_THREADS, 0, c->stream>>>(y, b, n, out, relu);
	LAUNCH_CHECK(c, "k_bias_rows");
}

extern "C" void cuda_linear_backward(void *ctx, float *dx, float *dw, float *db, const float *dy,
				     const float *x, const float *w, int n, int in, int out,
				     float gscale, int accumulate)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;
	const float one = 1.0f, zero = 0.0f;

	use(c);
	if (c->bf16) {
		backward_bf16(c, dx, dw, db, dy, x, w, n, in, out, gscale, accumulate);
		return;
	}
	/* dw (out, in) row-major = (in, out) column-major = x^T (in, n) dy (n, out); none for a
	 * frozen layer (dw NULL) */
	if (dw != NULL) {
		blas_note(c, cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &gscale, x, in,
					 dy, out, accumulate ? &one : &zero, dw, in), "cublasSgemm(weight grad)");
		k_bias_grad<<<(out + BG_COLS - 1) / BG_COLS, dim3(BG_COLS, BG_LANES), 0, c->stream>>>(
			db, dy, n, out, out, gscale, accumulate);
		LAUNCH_CHECK(c, "k_bias_grad");
	}
	/* dx (n, in) row-major = (in, n) column-major = w^T (in, out) dy^T (out, n) */
	if (dx != NULL)
		blas_note(c, cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &one, w, in, dy,
					 out, &zero, dx, in), "cublasSgemm(input grad)");
}

/* Rows [r0, r1) of dw and db: dw's rows are columns r0..r1 of the column-major (in, out)
 * product, x^T (in, n) dy[:, r0:r1] (n, rows), dy read from column r0 with its own
 * leading dimension; db's columns of dy summed as k_bias_grad sums every column. cuBLAS
 * may pick another kernel for the narrower product, so a panel is not promised the
 * whole product's bits on a GPU. */
extern "C" void cuda_linear_grad_rows(void *ctx, float *dw, float *db, const float *dy,
				      const float *x, int n, int in, int out, int r0, int r1,
				      float gscale)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;
	const float zero = 0.0f;
	const int rows = r1 - r0;

	if (rows <= 0)
		return;
	use(c);
	if (c->bf16) {
		size_t ny = (size_t)n * out, nx = (size_t)n * in;
		__nv_bfloat16 *dyb = (__nv_bfloat16 *)grow(c, &c->b16, &c->b16_n, ny + nx, sizeof *dyb);

		if (dyb == NULL)
			return;
		to_bf16(c, dyb, dy, ny);
		if (dw != NULL)
			to_bf16(c, dyb + ny, x, nx);
		grad_rows_bf16(c, dw, db, dyb, dyb + ny, n, in, out, r0, r1, gscale, 0);
		return;
	}
	if (dw != NULL)
		blas_note(c, cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_T, in, rows, n, &gscale, x, in,
					 dy + r0, out, &zero, dw, in), "cublasSgemm(weight grad rows)");
	if (db != NULL) {
		k_bias_grad<<<(rows + BG_COLS - 1) / BG_COLS, dim3(BG_COLS, BG_LANES), 0, c->stream>>>(
			db, dy + r0, n, rows, out, gscale, 0);
		LAUNCH_CHECK(c, "k_bias_grad");
	}
}

extern "C" void cuda_relu_forward(void *ctx, float *y, size_t n)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;

	use(c);
	k_relu<<<cuda_blocks(n), CUDA_THREADS, 0, c->stream>>>(y, n);
	LAUNCH_CHECK(c, "k_relu");
}

extern "C" void cuda_relu_backward(void *ctx, float *dy, const float *y, size_t n)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;

	use(c);
	k_relu_bwd<<<cuda_blocks(n), CUDA_THREADS, 0, c->stream>>>(dy, y, n);
	LAUNCH_CHECK(c, "k_relu_bwd");
}

extern "C" void cuda_mse(void *ctx, float *dy, float *loss, const float *y, const float *t, int n,
			 int width, float scale, float dscale, int accumulate)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;
	size_t m = (size_t)n * width;

	use(c);
	k_mse_pass1<<<CUDA_PARTIALS, CUDA_THREADS, 0, c->stream>>>(dy, c->partials, y, t, m,
							       2.0f * dscale / (float)m);
	LAUNCH_CHECK(c, "k_mse_pass1");
	k_mse_pass2<<<1, CUDA_THREADS, 0, c->stream>>>(loss, c->partials, CUDA_PARTIALS, (double)m, scale,
						  accumulate);
	LAUNCH_CHECK(c, "k_mse_pass2");
}

extern "C" void cuda_cross_entropy(void *ctx, float *dy, float *out, const float *z,
				   const float *labels, int n, int classes, float scale, float dscale,
				   int accumulate)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;

	use(c);
	k_xent_pass1<<<CUDA_PARTIALS, CUDA_THREADS, 0, c->stream>>>(dy, c->partials, z, labels, n, classes,
								dscale / (float)n);
	LAUNCH_CHECK(c, "k_xent_pass1");
	k_xent_pass2<<<1, CUDA_THREADS, 0, c->stream>>>(out, c->partials, CUDA_PARTIALS, (double)n, scale,
						   accumulate);
	LAUNCH_CHECK(c, "k_xent_pass2");
}

extern "C" void cuda_axpbz(void *ctx, float *y, float a, float c, const float *x, float b,
			   const float *z, size_t n)
{
	struct cuda_ctx *cx = (struct cuda_ctx *)ctx;

	use(cx);
	k_axpbz<<<cuda_blocks(n), CUDA_THREADS, 0, cx->stream>>>(y, a, c, x, b, z, n);
	LAUNCH_CHECK(cx, "k_axpbz");
}

extern "C" void cuda_adamw(void *ctx, float *p, const float *g, float *m, float *v, size_t n,
			   const struct adamw_hparams *h)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;

	use(c);
	k_adamw<<<cuda_blocks(n), CUDA_THREADS, 0, c->stream>>>(p, g, m, v, n, *h);
	LAUNCH_CHECK(c, "k_adamw");
}

extern "C" void cuda_sumsq(void *ctx, float *out, const float *x, size_t n, int accumulate)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;

	use(c);
	k_sumsq_pass1<<<CUDA_PARTIALS, CUDA_THREADS, 0, c->stream>>>(c->partials, x, n);
	LAUNCH_CHECK(c, "k_sumsq_pass1");
	k_sumsq_pass2<<<1, CUDA_THREADS, 0, c->stream>>>(out, c->partials, CUDA_PARTIALS, accumulate);
	LAUNCH_CHECK(c, "k_sumsq_pass2");
}

/* The partials are the loss reduction's scratch (2 * CUDA_PARTIALS floats: as many
 * 64-bit sums as blocks), used in stream order like theirs. */
extern "C" void cuda_hash64(void *ctx, float *out, const float *x, size_t n, uint64_t first)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;
	int blocks = cuda_blocks(n) < CUDA_PARTIALS ? cuda_blocks(n) : CUDA_PARTIALS;

	use(c);
	k_hash64_pass1<<<blocks, CUDA_THREADS, 0, c->stream>>>((uint64_t *)c->partials, (const uint32_t *)x,
							     n, first);
	LAUNCH_CHECK(c, "k_hash64_pass1");
	k_hash64_pass2<<<1, CUDA_THREADS, 0, c->stream>>>((uint64_t *)out, (const uint64_t *)c->partials,
							blocks);
	LAUNCH_CHECK(c, "k_hash64_pass2");
}

extern "C" void cuda_clip(void *ctx, float *x, size_t n, const float *sumsq, float max_norm)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;

	use(c);
	k_clip<<<cuda_blocks(n), CUDA_THREADS, 0, c->stream>>>(x, n, sumsq, max_norm);
	LAUNCH_CHECK(c, "k_clip");
}

extern "C" enum status cuda_sync(void *ctx, struct diag *d)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;
	enum status st;

	use(c);
	st = wait_for(c, NULL, "cudaStreamSynchronize", d);
	return st;
}

extern "C" size_t cuda_mem_used(void *ctx)
{
	return ((struct cuda_ctx *)ctx)->allocated;
}

extern "C" enum status cuda_graph_begin(void *ctx, struct diag *d)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;
	cudaError_t rc;

	use(c);
	if (c->err.st != ST_OK) /* graph_end forgets the errors made while capturing only */
		return report(c, d);
	rc = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal);
	if (rc != cudaSuccess)
		return diag_set(d, ST_RUNTIME, "cudaStreamBeginCapture: %s", cudaGetErrorString(rc));
	return ST_OK;
}

extern "C" enum status cuda_graph_end(void *ctx, int slot, struct diag *d)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;
	cudaGraph_t g = NULL;
	cudaError_t rc;

	use(c);
	rc = cudaStreamEndCapture(c->stream, &g);
	if (rc == cudaSuccess && c->err.st != ST_OK)
		rc = cudaErrorStreamCaptureInvalidated; /* a call failed while capturing */
	if (rc == cudaSuccess) {
		if (c->exec[slot] != NULL)
			cudaGraphExecDestroy(c->exec[slot]);
		rc = cudaGraphInstantiate(&c->exec[slot], g, 0);
	}
	if (g != NULL)
		cudaGraphDestroy(g);
	if (rc != cudaSuccess) {
		c->exec[slot] = NULL;
		memset(&c->err, 0, sizeof c->err);
		cudaGetLastError(); /* clear the sticky launch error of the failed capture */
		return diag_set(d, ST_RUNTIME, "CUDA graph capture: %s", cudaGetErrorString(rc));
	}
	return ST_OK;
}

extern "C" enum status cuda_graph_launch(void *ctx, int slot, struct diag *d)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;

	use(c);
	if (c->exec[slot] == NULL)
		return diag_set(d, ST_RUNTIME, "internal: no CUDA graph in slot %d", slot);
	CUDA_NOTE(c, cudaGraphLaunch(c->exec[slot], c->stream));
	return report(c, d);
}

extern "C" void cuda_graph_reset(void *ctx)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;

	use(c);
	for (int i = 0; i < BACKEND_GRAPHS; i++)
		if (c->exec[i] != NULL) {
			cudaGraphExecDestroy(c->exec[i]);
			c->exec[i] = NULL;
		}
}

extern "C" void cuda_host_mark(void *ctx, int slot)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;

	use(c);
	CUDA_NOTE(c, cudaEventRecord(c->host_ev[slot], c->stream));
}

extern "C" enum status cuda_host_wait(void *ctx, int slot, struct diag *d)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;

	use(c);
	return wait_for(c, c->host_ev[slot], "cudaEventQuery(host buffer copied)", d);
}

extern "C" enum status cuda_host_poll(void *ctx, int slot, int *done, struct diag *d)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;
	struct waited wd = {c, c->host_ev[slot], "cudaEventQuery(step read)"};

	use(c);
	*done = c->err.st != ST_OK || waited_query(&wd, d) != 0;
	return report(c, d);
}

extern "C" void cuda_timer_mark(void *ctx, int id)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;

	use(c);
	if (c->timer[id] == NULL && CUDA_NOTE(c, cudaEventCreate(&c->timer[id])))
		return;
	CUDA_NOTE(c, cudaEventRecord(c->timer[id], c->stream));
}

extern "C" double cuda_timer_ms(void *ctx, int a, int b)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;
	float ms = 0.0f;

	use(c);
	if (c->timer[a] == NULL || c->timer[b] == NULL ||
	    cudaEventElapsedTime(&ms, c->timer[a], c->timer[b]) != cudaSuccess) {
		cudaGetLastError(); /* not sticky: a mark that did not complete is no device fault */
		return -1.0;
	}
	return ms;
}

/* ---- --trace's device clock ----------------------------------------------------------
 * A marker is a timing event recorded on the compute stream, so a span covers the work
 * queued between its two markers as the GPU ran it; a span also opens and closes an NVTX
 * range on the host thread, so Nsight Systems shows the same names. Elapsed times are
 * float milliseconds, which lose precision far from their reference: each step takes a
 * fresh reference, recorded on the idle stream at a known host time (the stream drains
 * first; only traced steps pay for that). */
static int cuda_trace_mark(void *ctx, const char *name, int begin)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;

	if (!c->tref_set) {
		if (c->tref == NULL && CUDA_NOTE(c, cudaEventCreate(&c->tref)))
			return -1;
		CUDA_NOTE(c, cudaStreamSynchronize(c->stream));
		c->tref_host = clock_now();
		if (CUDA_NOTE(c, cudaEventRecord(c->tref, c->stream)))
			return -1;
		c->tref_set = 1;
	}
	if (c->tn == c->tcap) {
		int cap = c->tcap ? 2 * c->tcap : 256;
		cudaEvent_t *p = (cudaEvent_t *)realloc(c->tev, (size_t)cap * sizeof *p);

		if (p == NULL)
			return -1;
		c->tev = p;
		for (int i = c->tcap; i < cap; i++)
			if (CUDA_NOTE(c, cudaEventCreate(&c->tev[i]))) {
				c->tcap = i;
				return -1;
			}
		c->tcap = cap;
	}
	if (begin)
		nvtxRangePushA(name);
	if (CUDA_NOTE(c, cudaEventRecord(c->tev[c->tn], c->stream)))
		return -1;
	if (!begin)
		nvtxRangePop();
	return c->tn++;
}

/* A marker's time on the host's monotonic clock; waits for it. */
static double cuda_trace_time(void *ctx, int marker)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;
	float ms = 0.0f;

	if (marker < 0 || marker >= c->tn || CUDA_NOTE(c, cudaEventSynchronize(c->tev[marker])) ||
	    CUDA_NOTE(c, cudaEventElapsedTime(&ms, c->tref, c->tev[marker])))
		return c->tref_host;
	return c->tref_host + 1e-3 * (double)ms;
}

static void cuda_trace_reset(void *ctx)
{
	struct cuda_ctx *c = (struct cuda_ctx *)ctx;

	c->tn = 0;
	c->tref_set = 0;
}

extern "C" const struct trace_dev cuda_trace_dev = {cuda_trace_mark, cuda_trace_time,
						    cuda_trace_reset};
#endif /* DDPT_CUDA_HOST_KERNELS */
