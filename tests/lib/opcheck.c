/*
 * opcheck - every CUDA backend operation against the CPU backend on the same
 * random data, and a cuBLAS SGEMM timing (needs a GPU; scripts/gpu-check.sh).
 *
 *   opcheck [--tf32]              exit 0 if every operation's relative error
 *                                 max|gpu - cpu| / max|cpu| is at most 1e-6
 *                                 (TF32 off); 77 if no GPU can be used
 *
 * The sizes reach every launch path of the CUDA kernels: more than 65,536 rows (the
 * 256 x 256 threads of the reductions' first pass, so a thread takes several rows or
 * elements) and vectors over 2^21 elements (past the 4096-block cap of the element-wise
 * kernels, so their grid-stride loops go round), all odd, so no size is a multiple of a
 * block.
 *   opcheck --sgemm M N K [TA TB] print the cuBLAS SGEMM rate in TFLOP/s of C (M, N) =
 *                                 op(A) (M, K) op(B) (K, N), op = N or T (column-major)
 */
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

static void check(const char *what, const struct pair *p)
{
	float *back = malloc(p->n * sizeof(float));
	double maxd = 0, maxc = 0, rel;
	struct diag d = {0};

	if (gpu.ops->to_host(gpu.ctx, back, p->g, p->n, &d) != ST_OK) {
		printf("%-28s FAIL: %s\n", what, d.msg);
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
	printf("%-28s %10.3g %s\n", what, rel, rel <= tol ? "ok" : "FAIL");
	failures += !(rel <= tol);
	free(back);
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
		cfg.tf32 = 1;
		tol = 5e-3;
	}
	if (backend_init(&cpu, &backend_cpu_ops, &cfg, &d) != ST_OK ||
	    backend_init(&gpu, mod.mod->backend, &cfg, &d) != ST_OK) {
		fprintf(stderr, "opcheck: %s\n", d.msg);
		return 1;
	}
	printf("# %s, %d GPU(s); relative error max|gpu-cpu|/max|cpu|, tolerance %g\n", info, count, tol);
	{
		/* rows (N), layer widths (IN, OUT), optimizer vectors (V): see the top */
		enum { N = 65539, IN = 97, OUT = 67, V = (1 << 21) + 3, SLICE = 1500001 };
		struct pair x, w, b, y, dy, dx, dw, db, t, loss, p, g, m, acts, lab, ce, v, nrm;
		struct adamw_hparams ha = {0.9995f, 0.9f, 0.999f, 0.1f, 0.001f, 0.05f, 0.0447f, 1e-8f};

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
		pair_init(&p, V, 11);
		pair_init(&g, V, 12);
		pair_init(&m, V, 13);
		pair_init(&acts, N * OUT, 14);
		pair_init(&lab, N, 15);
		pair_init(&ce, 2, 16);
		pair_init(&v, V, 17);
		pair_init(&nrm, 1, 18);
		for (int i = 0; i < N; i++) /* class labels in [0, OUT), as floats */
			lab.h[i] = (float)((i * 7) % OUT);
		memcpy(lab.c, lab.h, N * sizeof(float));
		gpu.ops->to_device(gpu.ctx, lab.g, lab.h, N);
		for (size_t i = 0; i < v.n; i++) /* exp_avg_sq is never negative */
			v.h[i] = fabsf(v.h[i]);
		memcpy(v.c, v.h, v.n * sizeof(float));
		gpu.ops->to_device(gpu.ctx, v.g, v.h, v.n);

		cpu.ops->linear_forward(cpu.ctx, acts.c, x.c, w.c, b.c, N, IN, OUT, 1);
		gpu.ops->linear_forward(gpu.ctx, acts.g, x.g, w.g, b.g, N, IN, OUT, 1);
		check("linear_forward + relu", &acts);
		cpu.ops->linear_forward(cpu.ctx, y.c, x.c, w.c, b.c, N, IN, OUT, 0);
		gpu.ops->linear_forward(gpu.ctx, y.g, x.g, w.g, b.g, N, IN, OUT, 0);
		check("linear_forward", &y);
		/* a frozen layer: dx only, dw and db untouched */
		cpu.ops->linear_backward(cpu.ctx, dx.c, NULL, db.c, dy.c, x.c, w.c, N, IN, OUT, 0);
		gpu.ops->linear_backward(gpu.ctx, dx.g, NULL, db.g, dy.g, x.g, w.g, N, IN, OUT, 0);
		check("linear_backward dx (frozen)", &dx);
		check("linear_backward db untouched", &db);
		for (int acc = 0; acc < 2; acc++) {
			cpu.ops->linear_backward(cpu.ctx, dx.c, dw.c, db.c, dy.c, x.c, w.c, N, IN, OUT, acc);
			gpu.ops->linear_backward(gpu.ctx, dx.g, dw.g, db.g, dy.g, x.g, w.g, N, IN, OUT, acc);
			check(acc ? "linear_backward dx (acc)" : "linear_backward dx", &dx);
			check(acc ? "linear_backward dw (acc)" : "linear_backward dw", &dw);
			check(acc ? "linear_backward db (acc)" : "linear_backward db", &db);
		}
		acts.c[3] = NAN; /* and a NaN, which ReLU must pass on forward and backward */
		gpu.ops->to_device(gpu.ctx, acts.g + 3, acts.c + 3, 1);
		cpu.ops->relu_forward(cpu.ctx, acts.c, acts.n);
		gpu.ops->relu_forward(gpu.ctx, acts.g, acts.n);
		check("relu_forward", &acts);
		cpu.ops->relu_backward(cpu.ctx, dy.c, acts.c, dy.n);
		gpu.ops->relu_backward(gpu.ctx, dy.g, acts.g, dy.n);
		check("relu_backward", &dy);
		for (int acc = 0; acc < 2; acc++) {
			cpu.ops->mse(cpu.ctx, dy.c, loss.c, y.c, t.c, N, OUT, 0.5f, acc);
			gpu.ops->mse(gpu.ctx, dy.g, loss.g, y.g, t.g, N, OUT, 0.5f, acc);
			check(acc ? "mse loss (accumulate)" : "mse loss", &loss);
			check("mse gradient", &dy);
		}
		for (int acc = 0; acc < 2; acc++) {
			cpu.ops->cross_entropy(cpu.ctx, dy.c, ce.c, y.c, lab.c, N, OUT, 0.5f, acc);
			gpu.ops->cross_entropy(gpu.ctx, dy.g, ce.g, y.g, lab.g, N, OUT, 0.5f, acc);
			check(acc ? "cross_entropy loss+acc (acc)" : "cross_entropy loss+acc", &ce);
			check("cross_entropy gradient", &dy);
		}
		/* The three forms optimizer.c uses: SGD without momentum (z is y), the momentum
		 * buffer (z another buffer), the step along the buffer (no z). */
		cpu.ops->axpbz(cpu.ctx, p.c, 1.0f, -0.01f, g.c, 0.001f, p.c, p.n);
		gpu.ops->axpbz(gpu.ctx, p.g, 1.0f, -0.01f, g.g, 0.001f, p.g, p.n);
		check("axpbz (sgd, wd)", &p);
		cpu.ops->axpbz(cpu.ctx, m.c, 0.9f, 1.0f, g.c, 0.001f, p.c, m.n);
		gpu.ops->axpbz(gpu.ctx, m.g, 0.9f, 1.0f, g.g, 0.001f, p.g, m.n);
		check("axpbz (momentum buffer)", &m);
		cpu.ops->axpbz(cpu.ctx, p.c, 1.0f, -0.01f, m.c, 0.0f, NULL, p.n);
		gpu.ops->axpbz(gpu.ctx, p.g, 1.0f, -0.01f, m.g, 0.0f, NULL, p.n);
		check("axpbz (no z)", &p);
		for (int k = 0; k < 2; k++) {
			cpu.ops->adamw(cpu.ctx, p.c, g.c, m.c, v.c, p.n, &ha);
			gpu.ops->adamw(gpu.ctx, p.g, g.g, m.g, v.g, p.n, &ha);
			check("adamw params", &p);
			check("adamw exp_avg", &m);
			check("adamw exp_avg_sq", &v);
		}
		cpu.ops->sumsq(cpu.ctx, nrm.c, g.c, SLICE, 0);
		gpu.ops->sumsq(gpu.ctx, nrm.g, g.g, SLICE, 0);
		cpu.ops->sumsq(cpu.ctx, nrm.c, g.c + SLICE, V - SLICE, 1);
		gpu.ops->sumsq(gpu.ctx, nrm.g, g.g + SLICE, V - SLICE, 1);
		check("sumsq (two slices)", &nrm);
		cpu.ops->clip(cpu.ctx, g.c, g.n, nrm.c, 1.0f);
		gpu.ops->clip(gpu.ctx, g.g, g.n, nrm.g, 1.0f);
		check("clip to norm 1", &g);
		cpu.ops->add(cpu.ctx, g.c, m.c, g.n);
		gpu.ops->add(gpu.ctx, g.g, m.g, g.n);
		check("add", &g);
		cpu.ops->copy(cpu.ctx, g.c, p.c, g.n);
		gpu.ops->copy(gpu.ctx, g.g, p.g, g.n);
		check("copy", &g);
		cpu.ops->copy_peer(cpu.ctx, m.c, cpu.ctx, p.c, m.n);
		gpu.ops->copy_peer(gpu.ctx, m.g, gpu.ctx, p.g, m.n);
		check("copy_peer", &m);
		if (gpu.ops->sync(gpu.ctx, &d) != ST_OK) {
			fprintf(stderr, "opcheck: %s\n", d.msg);
			return 1;
		}
		{
			struct pair *all[] = {&x, &w, &b, &y, &dy, &dx, &dw, &db, &t, &loss, &p, &g, &m,
					      &acts, &lab, &ce, &v, &nrm};

			for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
				pair_free(all[i]);
		}
	}
	printf("# %s\n", failures ? "FAILED" : "all operations agree");
	return failures ? 1 : 0;
}
