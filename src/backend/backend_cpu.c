/*
 * backend_cpu.c - the CPU backend: CBLAS for the matrix products, plain loops
 * for the element-wise work. Single-threaded BLAS: parallelism comes from
 * the ranks (or dp threads), one core each. With a progress hook and a panel
 * size set, the backward products run in row panels of about that many FLOP
 * with the hook called between them (MPI moves messages only inside MPI calls).
 *
 * --precision=bf16 (torch.autocast's bfloat16): the products' operands are rounded to
 * bf16 (nearest even, core/half.c) into scratch buffers, multiplied by an SGEMM (each
 * product of two bf16 values is exact in float32, the sums are float32: what
 * cblas_sbgemm computes), and each result is rounded to bf16. The SGEMM is the one path:
 * Debian's OpenBLAS 0.3.21 declares cblas_sbgemm but is built without it (the library
 * exports no such symbol), and where it exists it computes the same sums in another order.
 */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "config.h"
#include "core/half.h"      /* half_narrow, half_widen, half_round, half_value */
#include "core/hash64.h"    /* hash64_term: the replica check's digest */

#define PANEL_MIN_ROWS 32 /* below this a panel's SGEMM slows down */

struct cpu {
	void (*progress)(void *arg, float *done, size_t n); /* see set_progress, or NULL */
	double panel;                                        /* FLOP per panel; 0: no panels */
	void *arg;
	int bf16;                                            /* --precision=bf16 */
	float *scratch;                                      /* bf16 operands and products */
	size_t scratch_n;                                    /* floats in scratch */
	int oom;                                             /* scratch could not grow */
};

static enum status cpu_init(void **ctx, const struct backend_config *cfg, struct diag *d)
{
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
	openblas_set_num_threads(1);
#endif
	struct cpu *c = calloc(1, sizeof(struct cpu));

	*ctx = c;
	if (c == NULL)
		return diag_set(d, ST_RUNTIME, "cpu backend: out of memory");
	c->bf16 = cfg->precision == PRECISION_BF16;
	return ST_OK;
}

static void cpu_fini(void *ctx)
{
	struct cpu *c = ctx;

	if (c != NULL)
		free(c->scratch);
	free(c);
}

/* ---- bf16 autocast ------------------------------------------------------------------ */

/* The scratch buffer with room for n floats, or NULL (then c->oom is set: sync reports it
 * and the product is skipped). */
static float *scratch(struct cpu *c, size_t n)
{
	if (n > c->scratch_n) {
		float *p = realloc(c->scratch, n * sizeof *p);

		if (p == NULL) {
			c->oom = 1;
			return NULL;
		}
		c->scratch = p;
		c->scratch_n = n;
	}
	return c->scratch;
}

/* dst[i] = src[i] rounded to bf16 (nearest even), as a float. */
static void round_bf16(float *dst, const float *src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = half_value(half_round(src[i], HALF_BF16), HALF_BF16);
}

/* y (n, out) = bf16(bf16(x) @ bf16(w)^T + bf16(b)), then ReLU: torch.autocast's Linear,
 * whose output is bf16 (the ReLU of a bf16 value is one). */
static void bf16_linear_forward(struct cpu *c, float *y, const float *x, const float *w,
				const float *b, int n, int in, int out, int relu)
{
	size_t nx = (size_t)n * in, nw = (size_t)out * in;
	float *xb = scratch(c, nx + nw + (size_t)out), *wb, *bb;

	if (xb == NULL)
		return;
	wb = xb + nx;
	bb = wb + nw;
	round_bf16(xb, x, nx);
	round_bf16(wb, w, nw);
	round_bf16(bb, b, (size_t)out);
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, xb, in, wb, in, 0.0f,
		    y, out);
	for (int i = 0; i < n; i++) {
		float *restrict r = y + (size_t)i * out;

		for (int k = 0; k < out; k++) {
			float v = half_value(half_round(r[k] + bb[k], HALF_BF16), HALF_BF16);

			r[k] = relu && v <= 0.0f ? 0.0f : v;
		}
	}
}

/* Rows [r0, r1) of the bf16 weight and bias gradients from dyb (n, out) and xb (n, in),
 * both already bf16: dw rows = gscale bf16(dyb[:, r0:r1]^T @ xb), db = gscale bf16(the
 * float32 column sums), in float32, set or (accumulate) added to in float32, as
 * autocast's bf16 gradient is added to a float32 .grad and then averaged. prod has room
 * for (r1 - r0) * in floats. */
static void bf16_grad_rows(float *dw, float *db, const float *dyb, const float *xb, float *prod,
			   int n, int in, int out, int r0, int r1, float gscale, int accumulate)
{
	size_t len = (size_t)(r1 - r0) * in;

	if (dw != NULL) {
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1 - r0, in, n, 1.0f, dyb + r0,
			    out, xb, in, 0.0f, prod, in);
		for (size_t j = 0; j < len; j++) {
			float v = gscale * half_value(half_round(prod[j], HALF_BF16), HALF_BF16);

			dw[j] = accumulate ? dw[j] + v : v;
		}
	}
	if (db != NULL)
		for (int k = r0; k < r1; k++) {
			float s = 0.0f, v;

			for (int i = 0; i < n; i++)
				s += dyb[(size_t)i * out + k];
			v = gscale * half_value(half_round(s, HALF_BF16), HALF_BF16);
			db[k - r0] = accumulate ? db[k - r0] + v : v;
		}
}

static void cpu_set_progress(void *ctx, void (*fn)(void *arg, float *done, size_t n), void *arg,
			     double panel_flops)
{
	struct cpu *c = ctx;

	c->progress = fn;
	c->panel = fn != NULL && panel_flops > 0 ? panel_flops : 0;
	c->arg = arg;
}

/* Rows per panel for a product of m rows costing flops_per_row each: m when there is no
 * progress hook or the product is short. */
static int panel_rows(const struct cpu *c, int m, double flops_per_row)
{
	double rows;

	if (c == NULL || c->progress == NULL || c->panel <= 0 || (double)m * flops_per_row < 2.0 * c->panel)
		return m;
	rows = c->panel / flops_per_row;
	rows = rows < PANEL_MIN_ROWS ? PANEL_MIN_ROWS : 16.0 * (int)((rows + 15.0) / 16.0);
	return rows >= m ? m : (int)rows;
}

static enum status cpu_bind(void *ctx, struct diag *d)
{
	return ST_OK;
}

static float *cpu_alloc(void *ctx, size_t n)
{
	return calloc(n ? n : 1, sizeof(float));
}

static void cpu_free(void *ctx, float *p)
{
	free(p);
}

static void cpu_copy(void *ctx, float *dst, const float *src, size_t n)
{
	if (dst != src)
		memcpy(dst, src, n * sizeof(float));
}

static void cpu_to_host_async(void *ctx, float *dst, const float *src, size_t n)
{
	memcpy(dst, src, n * sizeof *dst);
}

static enum status cpu_sync(void *ctx, struct diag *d);

static enum status cpu_to_host(void *ctx, float *dst, const float *src, size_t n, struct diag *d)
{
	cpu_copy(ctx, dst, src, n);
	return cpu_sync(ctx, d);
}

static void cpu_copy_peer(void *ctx, float *dst, void *src_ctx, const float *src, size_t n)
{
	cpu_copy(ctx, dst, src, n);
}

static size_t cpu_mem_used(void *ctx)
{
	return 0;
}

static void cpu_add(void *ctx, float *restrict dst, const float *restrict src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] += src[i];
}

/* y (n, out) = x (n, 1) w (out, 1)^T + b, then the ReLU if relu: the SGEMM of depth 1
 * and the bias in one pass, without packing the operands (at 4096 x 1024 the packing,
 * the zeroing of y and the second pass cost three times the product). Each element is
 * what the SGEMM and the bias loop give: the product rounded once, plus 0 (OpenBLAS's
 * kernels accumulate into a zeroed register, so a product of -0 comes out +0), plus b. */
static void outer_bias(float *restrict y, const float *restrict x, const float *restrict w,
		       const float *restrict b, int n, int out, int relu)
{
	for (int i = 0; i < n; i++) {
		float *restrict r = y + (size_t)i * out;
		const float a = x[i];

		if (relu)
			for (int k = 0; k < out; k++) {
				float v = (a * w[k] + 0.0f) + b[k];

				r[k] = v <= 0.0f ? 0.0f : v;
			}
		else
			for (int k = 0; k < out; k++)
				r[k] = (a * w[k] + 0.0f) + b[k];
	}
}

static void cpu_linear_forward(void *ctx, float *y, const float *x, const float *w,
			       const float *b, int n, int in, int out, int relu)
{
	struct cpu *c = ctx;

	if (c != NULL && c->bf16) {
		bf16_linear_forward(c, y, x, w, b, n, in, out, relu);
		return;
	}
	if (in == 1) {
		outer_bias(y, x, w, b, n, out, relu);
		return;
	}
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, x, in, w, in, 0.0f,
		    y, out);
	for (int i = 0; i < n; i++) {
		float *restrict r = y + (size_t)i * out;
		const float *restrict bb = b;

		if (relu)
			for (int k = 0; k < out; k++) {
				float v = r[k] + bb[k];

				r[k] = v <= 0.0f ? 0.0f : v; /* NaN stays NaN, as torch.relu */
			}
		else
			for (int k = 0; k < out; k++)
				r[k] += bb[k];
	}
}

/* db (rows) = gscale times dy[:, r0:r0 + rows] summed over the n rows of dy (n, out), in
 * row order; set, or added to when accumulate is set. */
static void bias_grad(float *db, const float *dy, int n, int out, int r0, int rows, float gscale,
		      int accumulate)
{
	if (gscale != 1.0f) { /* the sums first, then scaled and added */
		for (int k = 0; k < rows; k++) {
			float s = 0.0f;

			for (int i = 0; i < n; i++)
				s += dy[(size_t)i * out + r0 + k];
			db[k] = (accumulate ? db[k] : 0.0f) + gscale * s;
		}
		return;
	}
	if (!accumulate)
		memset(db, 0, (size_t)rows * sizeof(float));
	for (int i = 0; i < n; i++) {
		const float *restrict r = dy + (size_t)i * out + r0;
		float *restrict s = db;

		for (int k = 0; k < rows; k++)
			s[k] += r[k];
	}
}

/* linear_backward in bf16: dy rounded to bf16 (the backward of autocast's cast to float32
 * for the loss, and a no-op on the bf16 gradients the layers above pass down), each of
 * dw, db and dx a bf16 result; the same panels and progress calls as in float32. */
static void bf16_linear_backward(struct cpu *c, float *dx, float *dw, float *db, const float *dy,
				 const float *x, const float *w, int n, int in, int out, float gscale,
				 int accumulate)
{
	size_t ny = (size_t)n * out, nx = (size_t)n * in, nw = (size_t)out * in;
	int step = panel_rows(c, out, 2.0 * in * n);
	float *dyb = scratch(c, ny + nx + nw + (size_t)step * in), *xb, *wb, *prod;

	if (dyb == NULL)
		return;
	xb = dyb + ny;
	wb = xb + nx;
	prod = wb + nw;
	round_bf16(dyb, dy, ny);
	if (dw != NULL) {
		round_bf16(xb, x, nx);
		for (int o = 0; o < out; o += step) {
			int rows = out - o < step ? out - o : step;

			bf16_grad_rows(dw + (size_t)o * in, NULL, dyb, xb, prod, n, in, out, o, o + rows,
				       gscale, accumulate);
			if (step < out)
				c->progress(c->arg, dw + (size_t)o * in, (size_t)rows * in);
		}
		bf16_grad_rows(NULL, db, dyb, NULL, NULL, n, in, out, 0, out, gscale, accumulate);
	}
	if (dx == NULL)
		return;
	round_bf16(wb, w, nw);
	step = panel_rows(c, n, 2.0 * in * out);
	for (int i = 0; i < n; i += step) {
		int rows = n - i < step ? n - i : step;

		if (c->progress != NULL)
			c->progress(c->arg, NULL, 0);
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, in, out, 1.0f,
			    dyb + (size_t)i * out, out, wb, in, 0.0f, dx + (size_t)i * in, in);
		round_bf16(dx + (size_t)i * in, dx + (size_t)i * in, (size_t)rows * in);
	}
}

static void cpu_linear_backward(void *ctx, float *dx, float *dw, float *db, const float *dy,
				const float *x, const float *w, int n, int in, int out, float gscale,
				int accumulate)
{
	struct cpu *c = ctx;
	int step = panel_rows(c, out, 2.0 * in * n);

	if (c != NULL && c->bf16) {
		bf16_linear_backward(c, dx, dw, db, dy, x, w, n, in, out, gscale, accumulate);
		return;
	}

	/* dw (out, in) = dy^T (out, n) @ x (n, in), in panels of dw's rows */
	if (dw != NULL) {
		for (int o = 0; o < out; o += step) {
			int rows = out - o < step ? out - o : step;

			cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, rows, in, n, gscale, dy + o,
				    out, x, in, accumulate ? 1.0f : 0.0f, dw + (size_t)o * in, in);
			if (step < out)
				c->progress(c->arg, dw + (size_t)o * in, (size_t)rows * in);
		}
		bias_grad(db, dy, n, out, 0, out, gscale, accumulate);
	}
	/* dx (n, in) = dy (n, out) @ w (out, in), in panels of dx's rows */
	if (dx == NULL)
		return;
	step = panel_rows(c, n, 2.0 * in * out);
	for (int i = 0; i < n; i += step) {
		int rows = n - i < step ? n - i : step;

		if (c != NULL && c->progress != NULL)
			c->progress(c->arg, NULL, 0);
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, in, out, 1.0f,
			    dy + (size_t)i * out, out, w, in, 0.0f, dx + (size_t)i * in, in);
	}
}

/* dw's rows [r0, r1) are the product linear_backward's panels take for them (the same
 * depth n, unblocked: the same sums per element). */
static void cpu_linear_grad_rows(void *ctx, float *dw, float *db, const float *dy, const float *x,
				 int n, int in, int out, int r0, int r1, float gscale)
{
	struct cpu *c = ctx;

	if (r1 <= r0)
		return;
	if (c != NULL && c->bf16) {
		size_t ny = (size_t)n * out, nx = (size_t)n * in;
		float *dyb = scratch(c, ny + nx + (size_t)(r1 - r0) * in);

		if (dyb == NULL)
			return;
		round_bf16(dyb, dy, ny);
		if (dw != NULL)
			round_bf16(dyb + ny, x, nx);
		bf16_grad_rows(dw, NULL, dyb, dyb + ny, dyb + ny + nx, n, in, out, r0, r1, gscale, 0);
		bf16_grad_rows(NULL, db, dyb, NULL, NULL, n, in, out, r0, r1, gscale, 0);
		return;
	}
	if (dw != NULL)
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1 - r0, in, n, gscale, dy + r0, out,
			    x, in, 0.0f, dw, in);
	if (db != NULL)
		bias_grad(db, dy, n, out, r0, r1 - r0, gscale, 0);
}

/* torch.relu: NaN passes through (fmaxf would turn it into 0 and hide bad data). */
static void cpu_relu_forward(void *ctx, float *restrict y, size_t n)
{
	for (size_t i = 0; i < n; i++)
		y[i] = y[i] <= 0.0f ? 0.0f : y[i];
}

/* torch's threshold_backward(grad, result, 0): zero where result <= 0, so a NaN output
 * passes its gradient on. */
static void cpu_relu_backward(void *ctx, float *restrict dy, const float *restrict y, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dy[i] = y[i] <= 0.0f ? 0.0f : dy[i];
}

static void cpu_mse(void *ctx, float *restrict dy, float *loss, const float *restrict y,
		    const float *restrict t, int n, int width, float scale, float dscale, int accumulate)
{
	size_t m = (size_t)n * (size_t)width, i = 0;
	float g = 2.0f * dscale / (float)m;
	double part[8] = {0.0}, sum = 0.0;

	/* The loss in eight running sums, element i into part[i % 8], added in order at the
	 * end: one sum in a chain waits out an addition's latency per element (twice the time
	 * of the rest of the loop at 4096 x 1024); a fixed order all the same. The gradient
	 * does not depend on it. */
	for (; i + 8 <= m; i += 8)
		for (int j = 0; j < 8; j++) {
			float e = y[i + j] - t[i + j];

			part[j] += (double)e * e;
			dy[i + j] = g * e;
		}
	for (; i < m; i++) {
		float e = y[i] - t[i];

		part[i % 8] += (double)e * e;
		dy[i] = g * e;
	}
	for (int j = 0; j < 8; j++)
		sum += part[j];
	*loss = (accumulate ? *loss : 0.0f) + (float)((double)scale * sum / (double)m);
}

static void cpu_cross_entropy(void *ctx, float *restrict dy, float *out, const float *restrict z,
			      const float *restrict labels, int n, int classes, float scale,
			      float dscale, int accumulate)
{
	const float g = dscale / (float)n;
	double sum = 0.0;
	long correct = 0;

	for (int i = 0; i < n; i++) {
		const float *restrict r = z + (size_t)i * classes;
		float *restrict dr = dy + (size_t)i * classes;
		/* a label outside [0, classes) (a file rewritten under the run) makes the loss NaN,
		 * which the trainer traces to its row, and reads nothing past the row's logits */
		const int ok = labels[i] >= 0.0f && labels[i] < (float)classes;
		int t = ok ? (int)labels[i] : 0, best = 0;
		float mx = r[0], s = 0.0f, lse;

		for (int k = 1; k < classes; k++) {
			if (r[k] > mx) {
				mx = r[k];
				best = k;
			}
		}
		for (int k = 0; k < classes; k++)
			s += expf(r[k] - mx);
		lse = mx + logf(s);
		sum += ok ? (double)(lse - r[t]) : (double)NAN;
		correct += best == t;
		for (int k = 0; k < classes; k++)
			dr[k] = g * (expf(r[k] - lse) - (k == t ? 1.0f : 0.0f));
	}
	out[0] = (accumulate ? out[0] : 0.0f) + (float)((double)scale * sum / (double)n);
	out[1] = (accumulate ? out[1] : 0.0f) + (float)((double)scale * (double)correct / (double)n);
}

/* Each case with its own restrict-qualified pointers, so every loop vectorizes. */
static void axpbz_noz(float *restrict y, float a, float c, const float *restrict x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		y[i] = a * y[i] + c * x[i];
}

static void axpbz_self(float *restrict y, float a, float c, const float *restrict x, float b,
		       size_t n)
{
	for (size_t i = 0; i < n; i++)
		y[i] = a * y[i] + c * (x[i] + b * y[i]);
}

static void axpbz_other(float *restrict y, float a, float c, const float *restrict x, float b,
			const float *restrict z, size_t n)
{
	for (size_t i = 0; i < n; i++)
		y[i] = a * y[i] + c * (x[i] + b * z[i]);
}

static void cpu_axpbz(void *ctx, float *y, float a, float c, const float *x, float b,
		      const float *z, size_t n)
{
	if (z == NULL)
		axpbz_noz(y, a, c, x, n);
	else if (z == y)
		axpbz_self(y, a, c, x, b, n);
	else
		axpbz_other(y, a, c, x, b, z, n);
}

static void cpu_adamw(void *ctx, float *restrict p, const float *restrict g, float *restrict m,
		      float *restrict v, size_t n, const struct adamw_hparams *h)
{
	for (size_t i = 0; i < n; i++) {
		p[i] *= h->decay;
		m[i] = m[i] * h->beta1 + h->one_minus_beta1 * g[i];
		v[i] = v[i] * h->beta2 + h->one_minus_beta2 * g[i] * g[i];
		p[i] += -h->step_size * (m[i] / (sqrtf(v[i]) / h->bc2_sqrt + h->eps));
	}
}

static void cpu_sumsq(void *ctx, float *out, const float *restrict x, size_t n, int accumulate)
{
	double s = 0.0;

	for (size_t i = 0; i < n; i++)
		s += (double)x[i] * x[i];
	out[0] = (accumulate ? out[0] : 0.0f) + (float)s;
}

static void cpu_hash64(void *ctx, float *out, const float *restrict x, size_t n, uint64_t first)
{
	uint64_t h = 0;

	for (size_t i = 0; i < n; i++) {
		uint32_t bits;

		memcpy(&bits, &x[i], sizeof bits);
		h += hash64_term(first + i, bits);
	}
	memcpy(out, &h, sizeof h);
}

static void cpu_clip(void *ctx, float *restrict x, size_t n, const float *sumsq, float max_norm)
{
	float coef = max_norm / (sqrtf(sumsq[0]) + 1e-6f);

	if (coef < 1.0f)
		for (size_t i = 0; i < n; i++)
			x[i] *= coef;
}

static void cpu_synth(void *ctx, float *x, float *y, const struct synth_spec *s, const uint32_t *idx, int n)
{
	synth_batch(s, idx, (size_t)n, x, y);
}

/* The one failure a CPU kernel can have: no memory for bf16 operands. */
static enum status cpu_sync(void *ctx, struct diag *d)
{
	const struct cpu *c = ctx;

	if (c != NULL && c->oom)
		return diag_set(d, ST_RUNTIME, "cpu backend: out of memory for the bf16 operands of a matrix product");
	return ST_OK;
}

const struct backend_ops backend_cpu_ops = {
	.name = "cpu",
	.host_memory = 1,
	.init = cpu_init,
	.fini = cpu_fini,
	.bind = cpu_bind,
	.alloc = cpu_alloc,
	.free = cpu_free,
	.host_alloc = cpu_alloc,
	.host_free = cpu_free,
	.to_device = cpu_copy,
	.synth = cpu_synth,
	.to_host = cpu_to_host,
	.to_host_async = cpu_to_host_async,
	.copy = cpu_copy,
	.copy_peer = cpu_copy_peer,
	.add = cpu_add,
	.linear_forward = cpu_linear_forward,
	.linear_backward = cpu_linear_backward,
	.linear_grad_rows = cpu_linear_grad_rows,
	.relu_forward = cpu_relu_forward,
	.relu_backward = cpu_relu_backward,
	.mse = cpu_mse,
	.axpbz = cpu_axpbz,
	.cross_entropy = cpu_cross_entropy,
	.adamw = cpu_adamw,
	.sumsq = cpu_sumsq,
	.hash64 = cpu_hash64,
	.clip = cpu_clip,
	.sync = cpu_sync,
	.mem_used = cpu_mem_used,
	.set_progress = cpu_set_progress,
};
