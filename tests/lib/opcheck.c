/*
 * opcheck - every CUDA backend operation against the CPU backend on the same
 * random data, and a cuBLAS SGEMM timing (needs a GPU; scripts/gpu-check.sh).
 *
 *   opcheck [--tf32|--bf16]       exit 0 if every operation's relative error
 *                                 max|gpu - cpu| / max|cpu| is at most 1e-6
 *                                 (TF32 off), at small sizes and at the large
 *                                 ones of every launch path; 77 if no GPU can be used.
 *                                 --bf16: --precision=bf16's products on both, at
 *                                 2^-8 + 1e-6 (below)
 *   opcheck --sgemm M N K [TA TB] print the cuBLAS SGEMM rate in TFLOP/s of C (M, N) =
 *                                 op(A) (M, K) op(B) (K, N), op = N or T (column-major)
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/gpu.h"
#include "core/rng.h"

static struct backend cpu, gpu;
static int failures;
static double tol = 1e-6;

/* A buffer on both backends holding the same random values. */
struct pair {
	float *h, *c, *g; /* host reference copy, CPU backend, GPU backend */
	size_t n;
};

static void pair_init(struct pair *p, size_t n, uint64_t key)
{
	p->n = n;
	p->h = malloc(n * sizeof(float));
	for (size_t i = 0; i < n; i++)
		p->h[i] = 2.0f * rng_u01(key, i) - 1.0f;
	p->c = cpu.ops->alloc(cpu.ctx, n);
	p->g = gpu.ops->alloc(gpu.ctx, n);
	memcpy(p->c, p->h, n * sizeof(float));
	gpu.ops->to_device(gpu.ctx, p->g, p->h, n);
}

static void pair_free(struct pair *p)
{
	free(p->h);
	cpu.ops->free(cpu.ctx, p->c);
	gpu.ops->free(gpu.ctx, p->g);
}

/* The cross-entropy gradient dy = g (softmax(z) - onehot) of n rows of c classes against
 * the CPU's, within a bound derived from float rounding rather than a flat 1e-6: both
 * sides compute p_k = exp(z_k - lse) with lse = max + log(sum of c exponentials), summed
 * in another order. With u = FLT_EPSILON (one ulp at 1: covers a rounding to nearest,
 * and CUDA's expf is within 2 ulp, glibc's within 1): the sum of c terms in any order
 * differs by at most (c - 1) u relative, so log s by (c - 1) u; lse's rounding adds
 * u (|max| + |log s|); z_k - lse's rounding u |z_k - lse|; exp 3 u relative on both sides.
 * So |dy_gpu - dy_cpu| <= g u p_k (|z_k - lse| + |max| + |log s| + c + 3), each row's
 * largest taken. (A flat 1e-6 held until a run on an H200 saw 1.53e-6 at 70,001 rows of
 * 31 classes, within this bound: 31 classes alone allow 30 u = 3.6e-6.) */
static void check_xent_gradient(const char *what, const struct pair *p, const float *z, int n, int c,
				float scale)
{
	float *back = malloc(p->n * sizeof(float));
	const double g = (double)scale / n, u = FLT_EPSILON;
	double worst = 0, maxc = 0, bound_rel = 0;
	struct diag d = {0};
	int bad = 0;

	if (gpu.ops->to_host(gpu.ctx, back, p->g, p->n, &d) != ST_OK) {
		printf("%-32s FAIL: %s\n", what, d.msg);
		failures++;
		free(back);
		return;
	}
	for (int i = 0; i < n; i++) {
		const float *r = z + (size_t)i * c;
		double mx = r[0], s = 0, lse, most = 0, bound;

		for (int k = 1; k < c; k++)
			mx = r[k] > mx ? r[k] : mx;
		for (int k = 0; k < c; k++)
			s += exp(r[k] - mx);
		lse = mx + log(s);
		for (int k = 0; k < c; k++) {
			double pk = exp(r[k] - lse);

			most = fmax(most, pk * (fabs(r[k] - lse) + fabs(mx) + fabs(log(s)) + c + 3));
		}
		bound = g * u * most + 2 * u * g; /* and the product with g rounded, both sides */
		for (int k = 0; k < c; k++) {
			const size_t j = (size_t)i * c + k;
			double dd = fabs((double)back[j] - p->c[j]);

			bad += !(dd <= bound);
			worst = fmax(worst, dd);
			maxc = fmax(maxc, fabs(p->c[j]));
			bound_rel = fmax(bound_rel, bound);
		}
	}
	printf("%-32s %10.3g %s (bound %.3g)\n", what, maxc > 0 ? worst / maxc : worst, bad ? "FAIL" : "ok",
	       maxc > 0 ? bound_rel / maxc : bound_rel);
	failures += bad > 0;
	free(back);
}

static void check(const char *what, const struct pair *p)
{
	float *back = malloc(p->n * sizeof(float));
	double maxd = 0, maxc = 0, rel;
	struct diag d = {0};

	if (gpu.ops->to_host(gpu.ctx, back, p->g, p->n, &d) != ST_OK) {
		printf("%-32s FAIL: %s\n", what, d.msg);
		failures++;
		free(back);
		return;
	}
	for (size_t i = 0; i < p->n; i++) {
		/* A NaN or infinity must be where the CPU has it, and the same one (ReLU
		 * propagates NaN, as torch.relu); the scale is the largest finite CPU value,
		 * so one infinity cannot turn every other difference into 0. */
		float gv = back[i], cv = p->c[i];
		double dd;

		if (isfinite(gv) && isfinite(cv))
			dd = fabs((double)gv - cv);
		else
			dd = (isnan(gv) && isnan(cv)) || gv == cv ? 0.0 : INFINITY;
		maxd = dd > maxd ? dd : maxd;
		if (isfinite(cv))
			maxc = fabs(cv) > maxc ? fabs(cv) : maxc;
	}
	rel = maxc > 0 ? maxd / maxc : maxd;
	printf("%-32s %10.3g %s\n", what, rel, rel <= tol ? "ok" : "FAIL");
	failures += !(rel <= tol);
	free(back);
}

/* Set p's values to multiples of 1/q in [-1, 1] on both backends. */
static void pair_dyadic(struct pair *p, int q)
{
	for (size_t i = 0; i < p->n; i++)
		p->h[i] = (float)((int)(p->h[i] * 0.5f * (float)q + 0.5f * (float)q + 0.5f) - q / 2) /
			  (float)(q / 2);
	memcpy(p->c, p->h, p->n * sizeof(float));
	gpu.ops->to_device(gpu.ctx, p->g, p->h, p->n);
}

/* linear_backward writing dx, dw, db, then accumulating into dw and db times a third (a
 * gradient scale that is not a power of two), then linear_grad_rows rewriting a middle
 * panel of dw's and db's rows (of 1 row if out is small, times a third) and db's last
 * rows alone; each check's name starts with size. */
static void check_backward(const char *size, struct pair *dx, struct pair *dw, struct pair *db,
			   const struct pair *dy, const struct pair *x, const struct pair *w, int n,
			   int in, int out)
{
	char what[64];

	for (int acc = 0; acc < 2; acc++) {
		const float gs = acc ? 1.0f / 3.0f : 1.0f;

		cpu.ops->linear_backward(cpu.ctx, dx->c, dw->c, db->c, dy->c, x->c, w->c, n, in, out, gs, acc);
		gpu.ops->linear_backward(gpu.ctx, dx->g, dw->g, db->g, dy->g, x->g, w->g, n, in, out, gs, acc);
		snprintf(what, sizeof what, "%slinear_backward dx%s", size, acc ? " (acc)" : "");
		check(what, dx);
		snprintf(what, sizeof what, "%slinear_backward dw%s", size, acc ? " (acc)" : "");
		check(what, dw);
		snprintf(what, sizeof what, "%slinear_backward db%s", size, acc ? " (acc)" : "");
		check(what, db);
	}
	{
		const int r0 = out / 3, r1 = out / 3 + (out / 3 > 0 ? out / 3 : 1);

		cpu.ops->linear_grad_rows(cpu.ctx, dw->c + (size_t)r0 * in, db->c + r0, dy->c, x->c, n,
					  in, out, r0, r1, 1.0f / 3.0f);
		gpu.ops->linear_grad_rows(gpu.ctx, dw->g + (size_t)r0 * in, db->g + r0, dy->g, x->g, n,
					  in, out, r0, r1, 1.0f / 3.0f);
		cpu.ops->linear_grad_rows(cpu.ctx, NULL, db->c + r1, dy->c, x->c, n, in, out, r1, out, 1.0f);
		gpu.ops->linear_grad_rows(gpu.ctx, NULL, db->g + r1, dy->g, x->g, n, in, out, r1, out, 1.0f);
		snprintf(what, sizeof what, "%slinear_grad_rows dw", size);
		check(what, dw);
		snprintf(what, sizeof what, "%slinear_grad_rows db", size);
		check(what, db);
	}
}

/* hash64 of x[0..n) numbered from first on both backends: the same 64 bits, bit for bit
 * (a digest must not depend on where it was made). */
static void check_hash(const char *what, const float *xc, const float *xg, size_t n, uint64_t first)
{
	float *oc = cpu.ops->alloc(cpu.ctx, 2), *og = gpu.ops->alloc(gpu.ctx, 2);
	float back[2];
	uint64_t hc, hg;
	struct diag d = {0};

	cpu.ops->hash64(cpu.ctx, oc, xc, n, first);
	gpu.ops->hash64(gpu.ctx, og, xg, n, first);
	if (gpu.ops->to_host(gpu.ctx, back, og, 2, &d) != ST_OK) {
		printf("%-32s FAIL: %s\n", what, d.msg);
		failures++;
	} else {
		memcpy(&hc, oc, sizeof hc);
		memcpy(&hg, back, sizeof hg);
		printf("%-32s %10s %s\n", what, hc == hg ? "identical" : "differ", hc == hg ? "ok" : "FAIL");
		failures += hc != hg;
	}
	cpu.ops->free(cpu.ctx, oc);
	gpu.ops->free(gpu.ctx, og);
}

/* The optimizers' and the clipping's vector operations on n elements (random keys from
 * key on), as optimizer.c and trainer.c call them; each check's name starts with size. */
static void check_vectors(const char *size, size_t n, uint64_t key)
{
	struct pair p, g, m, v, nrm;
	struct adamw_hparams ha = {0.9995f, 0.9f, 0.999f, 0.1f, 0.001f, 0.05f, 0.0447f, 1e-8f};
	const size_t cut = n * 3 / 5;
	char what[64];

#define CHECK(name, x) (snprintf(what, sizeof what, "%s%s", size, name), check(what, x))
	pair_init(&p, n, key);
	pair_init(&g, n, key + 1);
	pair_init(&m, n, key + 2);
	pair_init(&v, n, key + 6);
	pair_init(&nrm, 1, key + 7);
	for (size_t i = 0; i < v.n; i++) /* exp_avg_sq is never negative */
		v.h[i] = fabsf(v.h[i]);
	memcpy(v.c, v.h, v.n * sizeof(float));
	gpu.ops->to_device(gpu.ctx, v.g, v.h, v.n);
	/* The three forms optimizer.c uses: SGD without momentum (z is y), the momentum
	 * buffer (z another buffer), the step along the buffer (no z). */
	cpu.ops->axpbz(cpu.ctx, p.c, 1.0f, -0.01f, g.c, 0.001f, p.c, p.n);
	gpu.ops->axpbz(gpu.ctx, p.g, 1.0f, -0.01f, g.g, 0.001f, p.g, p.n);
	CHECK("axpbz (sgd, wd)", &p);
	cpu.ops->axpbz(cpu.ctx, m.c, 0.9f, 1.0f, g.c, 0.001f, p.c, m.n);
	gpu.ops->axpbz(gpu.ctx, m.g, 0.9f, 1.0f, g.g, 0.001f, p.g, m.n);
	CHECK("axpbz (momentum buffer)", &m);
	cpu.ops->axpbz(cpu.ctx, p.c, 1.0f, -0.01f, m.c, 0.0f, NULL, p.n);
	gpu.ops->axpbz(gpu.ctx, p.g, 1.0f, -0.01f, m.g, 0.0f, NULL, p.n);
	CHECK("axpbz (no z)", &p);
	for (int k = 0; k < 2; k++) {
		cpu.ops->adamw(cpu.ctx, p.c, g.c, m.c, v.c, p.n, &ha);
		gpu.ops->adamw(gpu.ctx, p.g, g.g, m.g, v.g, p.n, &ha);
		CHECK("adamw params", &p);
		CHECK("adamw exp_avg", &m);
		CHECK("adamw exp_avg_sq", &v);
	}
	cpu.ops->sumsq(cpu.ctx, nrm.c, g.c, cut, 0);
	gpu.ops->sumsq(gpu.ctx, nrm.g, g.g, cut, 0);
	cpu.ops->sumsq(cpu.ctx, nrm.c, g.c + cut, n - cut, 1);
	gpu.ops->sumsq(gpu.ctx, nrm.g, g.g + cut, n - cut, 1);
	CHECK("sumsq (two slices)", &nrm);
	snprintf(what, sizeof what, "%shash64", size);
	check_hash(what, g.c, g.g, n, 0);
	snprintf(what, sizeof what, "%shash64 (slice, first 2^33+5)", size);
	check_hash(what, g.c + cut, g.g + cut, n - cut, ((uint64_t)1 << 33) + 5);
	cpu.ops->clip(cpu.ctx, g.c, g.n, nrm.c, 1.0f);
	gpu.ops->clip(gpu.ctx, g.g, g.n, nrm.g, 1.0f);
	CHECK("clip to norm 1", &g);
	cpu.ops->add(cpu.ctx, g.c, m.c, g.n);
	gpu.ops->add(gpu.ctx, g.g, m.g, g.n);
	CHECK("add", &g);
	cpu.ops->copy(cpu.ctx, g.c, p.c, g.n);
	gpu.ops->copy(gpu.ctx, g.g, p.g, g.n);
	CHECK("copy", &g);
	cpu.ops->copy_peer(cpu.ctx, m.c, cpu.ctx, p.c, m.n);
	gpu.ops->copy_peer(gpu.ctx, m.g, gpu.ctx, p.g, m.n);
	CHECK("copy_peer", &m);
	cpu.ops->relu_forward(cpu.ctx, p.c, p.n);
	gpu.ops->relu_forward(gpu.ctx, p.g, p.n);
	CHECK("relu_forward (vector)", &p);
#undef CHECK
	pair_free(&p);
	pair_free(&g);
	pair_free(&m);
	pair_free(&v);
	pair_free(&nrm);
}

/* The launch paths small sizes never take: element-wise kernels past 4096 blocks of 256
 * threads (their grid-stride loops: 2^21 + 3 elements), reductions past one pass of
 * their 256 x 256 threads (more than 65,536 rows or elements), the bias over more than
 * 1M elements, odd widths. The products' inputs there are multiples of 1/8 and 1/16, so
 * every sum over the 70,001 rows is exact in float32 in any order: the CPU's rows in
 * order and the GPU's parallel reductions must agree to the bit. */
static void check_large(void)
{
	enum { R = 70001, IN = 33, OUT = 31 };
	const size_t E = ((size_t)1 << 21) + 3;
	struct pair x, w, b, y, t, dy, dx, dw, db, lab, ce, loss;

	printf("# large: %d rows of %d -> %d, %zu elements\n", R, IN, OUT, E);
	pair_init(&x, (size_t)R * IN, 31);
	pair_init(&w, OUT * IN, 32);
	pair_init(&b, OUT, 33);
	pair_init(&y, (size_t)R * OUT, 34);
	pair_init(&t, (size_t)R * OUT, 47);
	pair_init(&dy, (size_t)R * OUT, 35);
	pair_init(&dx, (size_t)R * IN, 36);
	pair_init(&dw, OUT * IN, 37);
	pair_init(&db, OUT, 38);
	pair_init(&lab, R, 39);
	pair_init(&ce, 2, 40);
	pair_init(&loss, 1, 41);
	pair_dyadic(&x, 16);
	pair_dyadic(&dy, 32);
	for (size_t i = 0; i < lab.n; i++)
		lab.h[i] = (float)((i * 7) % OUT);
	memcpy(lab.c, lab.h, lab.n * sizeof(float));
	gpu.ops->to_device(gpu.ctx, lab.g, lab.h, lab.n);

	cpu.ops->linear_forward(cpu.ctx, y.c, x.c, w.c, b.c, R, IN, OUT, 1);
	gpu.ops->linear_forward(gpu.ctx, y.g, x.g, w.g, b.g, R, IN, OUT, 1);
	check("large linear_forward + relu", &y);
	check_backward("large ", &dx, &dw, &db, &dy, &x, &w, R, IN, OUT);
	cpu.ops->relu_backward(cpu.ctx, dy.c, y.c, dy.n);
	gpu.ops->relu_backward(gpu.ctx, dy.g, y.g, dy.n);
	check("large relu_backward", &dy);
	cpu.ops->mse(cpu.ctx, dy.c, loss.c, y.c, t.c, R, OUT, 0.5f, 0.5f, 0);
	gpu.ops->mse(gpu.ctx, dy.g, loss.g, y.g, t.g, R, OUT, 0.5f, 0.5f, 0);
	check("large mse loss", &loss);
	check("large mse gradient", &dy);
	cpu.ops->cross_entropy(cpu.ctx, dy.c, ce.c, y.c, lab.c, R, OUT, 0.5f, 0.5f, 0);
	gpu.ops->cross_entropy(gpu.ctx, dy.g, ce.g, y.g, lab.g, R, OUT, 0.5f, 0.5f, 0);
	check("large cross_entropy loss+acc", &ce);
	check_xent_gradient("large cross_entropy gradient", &dy, y.c, R, OUT, 0.5f);
	check_vectors("large ", E, 42);
	pair_free(&x);
	pair_free(&w);
	pair_free(&b);
	pair_free(&y);
	pair_free(&t);
	pair_free(&dy);
	pair_free(&dx);
	pair_free(&dw);
	pair_free(&db);
	pair_free(&lab);
	pair_free(&ce);
	pair_free(&loss);
}

/* Cross-entropy over one class, as torch.nn.functional.cross_entropy takes it: every row's
 * softmax is 1, so the loss is exactly 0, the accuracy 1 and the gradient exactly 0, on
 * the device as on the CPU, whatever the logits (rows past one grid of threads). */
static void check_one_class(void)
{
	enum { R = 70001 };
	struct pair z, lab, dy, ce;
	float *back = malloc(R * sizeof *back), out[2] = {-1, -1};
	struct diag d = {0};
	int bad = 0;

	pair_init(&z, R, 51);
	pair_init(&lab, R, 52);
	pair_init(&dy, R, 53);
	pair_init(&ce, 2, 54);
	memset(lab.c, 0, R * sizeof(float)); /* label 0, the only class */
	memset(lab.h, 0, R * sizeof(float));
	gpu.ops->to_device(gpu.ctx, lab.g, lab.h, R);
	cpu.ops->cross_entropy(cpu.ctx, dy.c, ce.c, z.c, lab.c, R, 1, 0.5f, 0.5f, 0);
	gpu.ops->cross_entropy(gpu.ctx, dy.g, ce.g, z.g, lab.g, R, 1, 0.5f, 0.5f, 0);
	if (gpu.ops->to_host(gpu.ctx, back, dy.g, R, &d) != ST_OK ||
	    gpu.ops->to_host(gpu.ctx, out, ce.g, 2, &d) != ST_OK) {
		printf("%-32s FAIL: %s\n", "one-class cross_entropy", d.msg);
		bad = 1;
	} else {
		for (size_t i = 0; i < R; i++)
			bad += back[i] != 0.0f || dy.c[i] != 0.0f;
		bad += out[0] != 0.0f || ce.c[0] != 0.0f || out[1] != 0.5f || ce.c[1] != 0.5f;
		printf("%-32s loss %g %g, accuracy %g %g, %d gradients not 0 %s\n", "one-class cross_entropy",
		       out[0], ce.c[0], out[1], ce.c[1], bad, bad ? "FAIL" : "ok");
	}
	failures += bad > 0;
	free(back);
	pair_free(&z);
	pair_free(&lab);
	pair_free(&dy);
	pair_free(&ce);
}

/* The synthetic generator: the CUDA kernels against the CPU's, bit for bit (tolerance 0,
 * TF32 or not: no product in it), regression targets and labels, at sizes past one grid
 * of the element-wise kernels (grid-stride loops), with indices up to 2^32 - 1. */
static void check_synth(void)
{
	enum { R = 40009 };
	static const struct { int in, outs, classes; } shape[] = {{33, 31, 0}, {97, 10, 10}, {1, 1, 0}};
	uint32_t *idx = (uint32_t *)gpu.ops->host_alloc(gpu.ctx, R);

	for (size_t i = 0; i < R; i++)
		idx[i] = i % 3 == 0 ? 4294967295u - (uint32_t)i : (uint32_t)(i * 2654435761u >> 3);
	for (size_t k = 0; k < sizeof shape / sizeof shape[0]; k++) {
		struct synth_spec sp = {rng_key(7, RNG_DATA), rng_key(7, RNG_TEACHER), 1000, shape[k].in, shape[k].outs,
					shape[k].classes};
		size_t xn = (size_t)R * (size_t)sp.in, yn = (size_t)R * (size_t)(sp.classes ? 1 : sp.outs);
		float *xc = malloc(xn * sizeof *xc), *yc = malloc(yn * sizeof *yc);
		float *xb = malloc(xn * sizeof *xb), *yb = malloc(yn * sizeof *yb);
		float *xg = gpu.ops->alloc(gpu.ctx, xn), *yg = gpu.ops->alloc(gpu.ctx, yn);
		struct diag d = {0};
		char what[64];
		int same;

		cpu.ops->synth(cpu.ctx, xc, yc, &sp, idx, R);
		gpu.ops->synth(gpu.ctx, xg, yg, &sp, idx, R);
		snprintf(what, sizeof what, "synth %d -> %d%s", sp.in, sp.outs, sp.classes ? " labels" : "");
		if (gpu.ops->to_host(gpu.ctx, xb, xg, xn, &d) != ST_OK ||
		    gpu.ops->to_host(gpu.ctx, yb, yg, yn, &d) != ST_OK) {
			printf("%-32s FAIL: %s\n", what, d.msg);
			failures++;
		} else {
			same = memcmp(xb, xc, xn * sizeof *xb) == 0 && memcmp(yb, yc, yn * sizeof *yb) == 0;
			printf("%-32s %10s %s\n", what, same ? "identical" : "differ", same ? "ok" : "FAIL");
			failures += !same;
		}
		gpu.ops->free(gpu.ctx, xg);
		gpu.ops->free(gpu.ctx, yg);
		free(xc), free(yc), free(xb), free(yb);
	}
	gpu.ops->host_free(gpu.ctx, (float *)idx);
}

int main(int argc, char **argv)
{
	struct gpu mod;
	struct diag d = {0};
	struct backend_config cfg = {0, 0};
	char info[128];
	int count = 0;

	if (gpu_load(&mod, &d) != ST_OK || mod.mod->probe(&count, info, sizeof info, &d) != ST_OK) {
		printf("SKIP: %s\n", d.msg);
		return 77;
	}
	if ((argc == 5 || argc == 7) && strcmp(argv[1], "--sgemm") == 0) {
		double tf = 0;
		int ta = argc == 7 && argv[5][0] == 'T', tb = argc == 7 && argv[6][0] == 'T';

		if (mod.mod->bench_sgemm(0, ta, tb, atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), 0, 20, &tf,
					 &d) != ST_OK) {
			fprintf(stderr, "opcheck: %s\n", d.msg);
			return 1;
		}
		printf("%.2f\n", tf);
		return 0;
	}
	if (argc > 1 && strcmp(argv[1], "--tf32") == 0) {
		cfg.precision = PRECISION_TF32;
		tol = 5e-3;
	}
	/* Both round every product's result to bf16 once; float32 sums in another order can
	 * round an element to the neighbouring bf16 value, one unit in its 8th bit: at most
	 * 2^-8 of the largest element (dw accumulated: of the product added), plus float32's
	 * own differences. */
	if (argc > 1 && strcmp(argv[1], "--bf16") == 0) {
		cfg.precision = PRECISION_BF16;
		tol = 0x1p-8 + 1e-6;
	}
	if (backend_init(&cpu, &backend_cpu_ops, &cfg, &d) != ST_OK ||
	    backend_init(&gpu, mod.mod->backend, &cfg, &d) != ST_OK) {
		fprintf(stderr, "opcheck: %s\n", d.msg);
		return 1;
	}
	printf("# %s, %d GPU(s); relative error max|gpu-cpu|/max|cpu|, tolerance %g\n", info, count, tol);
	{
		enum { N = 37, IN = 96, OUT = 64 };
		struct pair x, w, b, y, dy, dx, dw, db, t, loss, acts, lab, ce;

		pair_init(&x, N * IN, 1);
		pair_init(&w, OUT * IN, 2);
		pair_init(&b, OUT, 3);
		pair_init(&y, N * OUT, 4);
		pair_init(&dy, N * OUT, 5);
		pair_init(&dx, N * IN, 6);
		pair_init(&dw, OUT * IN, 7);
		pair_init(&db, OUT, 8);
		pair_init(&t, N * OUT, 9);
		pair_init(&loss, 1, 10);
		pair_init(&acts, N * OUT, 14);
		pair_init(&lab, N, 15);
		pair_init(&ce, 2, 16);
		for (int i = 0; i < N; i++) /* class labels in [0, OUT), as floats */
			lab.h[i] = (float)((i * 7) % OUT);
		memcpy(lab.c, lab.h, N * sizeof(float));
		gpu.ops->to_device(gpu.ctx, lab.g, lab.h, N);

		cpu.ops->linear_forward(cpu.ctx, acts.c, x.c, w.c, b.c, N, IN, OUT, 1);
		gpu.ops->linear_forward(gpu.ctx, acts.g, x.g, w.g, b.g, N, IN, OUT, 1);
		check("linear_forward + relu", &acts);
		cpu.ops->linear_forward(cpu.ctx, y.c, x.c, w.c, b.c, N, IN, OUT, 0);
		gpu.ops->linear_forward(gpu.ctx, y.g, x.g, w.g, b.g, N, IN, OUT, 0);
		check("linear_forward", &y);
		/* a frozen layer: dx only, dw and db untouched */
		cpu.ops->linear_backward(cpu.ctx, dx.c, NULL, db.c, dy.c, x.c, w.c, N, IN, OUT, 1.0f, 0);
		gpu.ops->linear_backward(gpu.ctx, dx.g, NULL, db.g, dy.g, x.g, w.g, N, IN, OUT, 1.0f, 0);
		check("linear_backward dx (frozen)", &dx);
		check("linear_backward db untouched", &db);
		check_backward("", &dx, &dw, &db, &dy, &x, &w, N, IN, OUT);
		acts.c[3] = NAN; /* and a NaN, which ReLU must pass on forward and backward */
		gpu.ops->to_device(gpu.ctx, acts.g + 3, acts.c + 3, 1);
		cpu.ops->relu_forward(cpu.ctx, acts.c, acts.n);
		gpu.ops->relu_forward(gpu.ctx, acts.g, acts.n);
		check("relu_forward", &acts);
		cpu.ops->relu_backward(cpu.ctx, dy.c, acts.c, dy.n);
		gpu.ops->relu_backward(gpu.ctx, dy.g, acts.g, dy.n);
		check("relu_backward", &dy);
		for (int acc = 0; acc < 2; acc++) { /* the seed's scale apart from the value's */
			cpu.ops->mse(cpu.ctx, dy.c, loss.c, y.c, t.c, N, OUT, 0.5f, acc ? 0.25f : 0.5f, acc);
			gpu.ops->mse(gpu.ctx, dy.g, loss.g, y.g, t.g, N, OUT, 0.5f, acc ? 0.25f : 0.5f, acc);
			check(acc ? "mse loss (accumulate)" : "mse loss", &loss);
			check("mse gradient", &dy);
		}
		for (int acc = 0; acc < 2; acc++) {
			const float ds = acc ? 0.25f : 0.5f;

			cpu.ops->cross_entropy(cpu.ctx, dy.c, ce.c, y.c, lab.c, N, OUT, 0.5f, ds, acc);
			gpu.ops->cross_entropy(gpu.ctx, dy.g, ce.g, y.g, lab.g, N, OUT, 0.5f, ds, acc);
			check(acc ? "cross_entropy loss+acc (acc)" : "cross_entropy loss+acc", &ce);
			check_xent_gradient("cross_entropy gradient", &dy, y.c, N, OUT, ds);
		}
		check_vectors("", 5000, 11);
		if (gpu.ops->sync(gpu.ctx, &d) != ST_OK) {
			fprintf(stderr, "opcheck: %s\n", d.msg);
			return 1;
		}
		{
			struct pair *all[] = {&x, &w, &b, &y, &dy, &dx, &dw, &db, &t, &loss, &acts, &lab, &ce};

			for (size_t i = 0; i < sizeof all / sizeof *all; i++)
				pair_free(all[i]);
		}
	}
	check_large();
	check_one_class();
	check_synth();
	printf("# %s\n", failures ? "FAILED" : "all operations agree");
	return failures ? 1 : 0;
}
