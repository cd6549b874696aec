/*
 * blasrows.h - does this process's BLAS compute a row panel of a product bit for bit
 * as it computes those rows of the whole product? ddptrain's CPU backend cuts
 * backward's products into row panels (ZeRO-2's linear_grad_rows, the ring's
 * streaming through set_progress) and the tests compare them with the whole
 * product. The sums per element are the same (the depth is not cut), but the BLAS
 * may pick another kernel, or another order of the same sums, for a narrower
 * product: OpenBLAS's Haswell sgemm (OPENBLAS_CORETYPE=Haswell on an AVX-512 CPU)
 * gives rows that start or end off a multiple of its 24-row block other last bits.
 *
 * The probe calls cblas_sgemm itself, as backend_cpu.c does, not the backend:
 * it asks about the BLAS, so that a backend that broke the equality is still
 * caught where the BLAS keeps it. Its cases are the cuts the backend makes:
 * dw = dy^T x after any row (ZeRO-2 cuts where the bucket cap falls) and
 * dx = dy w at the streaming panels (multiples of 16 rows, at least 32).
 *
 * Where they differ, each element is still the same K-term dot product, summed in
 * another order. Any order gives |s' - s| <= gamma_K sum_k |a_k b_k| with
 * gamma_K = K u / (1 - K u), u = 2^-24 (Higham, Accuracy and Stability of
 * Numerical Algorithms, 2nd ed., eq. 3.4 and lemma 3.1; an FMA only removes
 * roundings), so two orders differ by at most twice that: blas_dot_gap.
 */
#ifndef DDPT_TESTS_BLASROWS_H
#define DDPT_TESTS_BLASROWS_H

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"   /* HAVE_OPENBLAS_SET_NUM_THREADS */
#include "lib/fill.h" /* fill */

/* The most two float evaluations of one K-term dot product can differ by, as a
 * multiple of sum_k |a_k b_k|: 2 gamma_K. */
static double blas_dot_gap(int k)
{
	const double u = ldexp(1.0, -24);

	return 2.0 * k * u / (1.0 - k * u);
}

/* got and want (m, cols), each element the k-term dot product sum_t A(r, t) B(t, j), with
 * A(r, t) = a[r * ars + t * ats] and B(t, j) = b[t * ldb + j]: the number of elements that
 * differ by more than blas_dot_gap(k) sum_t |A(r, t) B(t, j)| (a NaN counts); *ndiff: the
 * elements whose bits differ; *worst: the largest difference as a fraction of its bound. */
static size_t blas_beyond_gap(const float *got, const float *want, int m, int cols, int k,
			      const float *a, size_t ars, size_t ats, const float *b, size_t ldb,
			      size_t *ndiff, double *worst)
{
	size_t beyond = 0;

	*ndiff = 0;
	*worst = 0;
	for (int r = 0; r < m; r++)
		for (int j = 0; j < cols; j++) {
			size_t e = (size_t)r * (size_t)cols + (size_t)j;
			double abs = 0, frac;

			if (memcmp(&got[e], &want[e], sizeof(float)) == 0)
				continue;
			(*ndiff)++;
			for (int t = 0; t < k; t++)
				abs += fabs((double)a[(size_t)r * ars + (size_t)t * ats]) *
				       fabs((double)b[(size_t)t * ldb + (size_t)j]);
			frac = fabs((double)got[e] - (double)want[e]) / (blas_dot_gap(k) * abs);
			if (!(frac <= 1.0))
				beyond++;
			*worst = frac > *worst || isnan(frac) ? frac : *worst;
		}
	return beyond;
}

/* One probe: a product cut into row panels of `rows` rows. 'w': dw (out, in) = dy^T x,
 * depth n, dw's rows cut; 'x': dx (n, in) = dy w, depth out, dx's rows cut. */
struct blas_case {
	char form;
	int n, in, out, rows;
};

static const struct blas_case blas_cases[] = {
	{'w', 64, 512, 512, 1},   {'w', 64, 512, 512, 7},  {'w', 64, 512, 512, 16},
	{'w', 64, 512, 512, 256}, {'w', 20, 24, 24, 5},    {'w', 20, 24, 24, 10},
	{'w', 60, 10, 200, 1},    {'w', 60, 10, 200, 16},  {'w', 33, 64, 96, 7},
	{'x', 64, 512, 512, 32},  {'x', 96, 64, 512, 32},  {'x', 96, 64, 512, 48},
};
#define BLAS_NCASES ((int)(sizeof blas_cases / sizeof blas_cases[0]))

/* Runs case c: 1 if every panel's float equals the whole product's, 0 if not but every
 * one is within blas_dot_gap, -1 if one is beyond it (or out of memory). *worst: the
 * largest difference as a fraction of its element's gap; *ndiff: the floats that differ. */
static int blas_case_run(const struct blas_case *c, double *worst, size_t *ndiff)
{
	const int m = c->form == 'w' ? c->out : c->n; /* rows of the result */
	const int k = c->form == 'w' ? c->n : c->out; /* depth of each sum */
	/* The product's left factor A (m, k): dy^T, A(r, t) = dy[t * out + r], or dy itself. */
	const enum CBLAS_TRANSPOSE ta = c->form == 'w' ? CblasTrans : CblasNoTrans;
	const size_t ars = c->form == 'w' ? 1 : (size_t)c->out, ats = c->form == 'w' ? (size_t)c->out : 1;
	const size_t nres = (size_t)m * (size_t)c->in;
	float *dy = malloc(sizeof(float) * (size_t)c->n * (size_t)c->out);
	float *b = malloc(sizeof(float) * (size_t)k * (size_t)c->in); /* x or w: (k, in) */
	float *whole = malloc(sizeof(float) * nres), *cut = malloc(sizeof(float) * nres);
	int rc = -1;

	*worst = 0;
	*ndiff = 0;
	if (dy == NULL || b == NULL || whole == NULL || cut == NULL)
		goto out_free;
	fill(dy, (size_t)c->n * (size_t)c->out, 41);
	fill(b, (size_t)k * (size_t)c->in, 42);
	for (int r0 = 0; r0 < m; r0 += c->rows) {
		int rows = m - r0 < c->rows ? m - r0 : c->rows;

		cblas_sgemm(CblasRowMajor, ta, CblasNoTrans, rows, c->in, k, 1.0f, dy + (size_t)r0 * ars,
			    c->out, b, c->in, 0.0f, cut + (size_t)r0 * c->in, c->in);
	}
	cblas_sgemm(CblasRowMajor, ta, CblasNoTrans, m, c->in, k, 1.0f, dy, c->out, b, c->in, 0.0f, whole,
		    c->in);
	if (blas_beyond_gap(cut, whole, m, c->in, k, dy, ars, ats, b, (size_t)c->in, ndiff, worst) > 0)
		rc = -1;
	else
		rc = *ndiff > 0 ? 0 : 1;
out_free:
	free(dy);
	free(b);
	free(whole);
	free(cut);
	return rc;
}

/* The BLAS in words: OpenBLAS's core and OPENBLAS_CORETYPE, which chooses it. */
static void blas_name(char *s, size_t len)
{
	const char *ct = getenv("OPENBLAS_CORETYPE");
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
	snprintf(s, len, "OpenBLAS's %s kernels (OPENBLAS_CORETYPE %s)", openblas_get_corename(),
		 ct != NULL ? ct : "unset");
#else
	snprintf(s, len, "a CBLAS, OPENBLAS_CORETYPE %s", ct != NULL ? ct : "unset");
#endif
}

/* The probe: runs every case single-threaded, as the backend runs the BLAS, and
 * returns 1 if all are bit for bit, 0 if some differ within float rounding
 * (blas_dot_gap), -1 if one is beyond it (a broken BLAS) or out of memory. why (len
 * bytes) says which BLAS and what differs; log, unless NULL, gets a line per case. */
static int blas_rows_exact(char *why, size_t len, FILE *log)
{
	char name[160];
	int verdict = 1, nbad = 0, first = -1;
	double worst = 0;

	blas_name(name, sizeof name);
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
	openblas_set_num_threads(1);
#endif
	for (int i = 0; i < BLAS_NCASES; i++) {
		const struct blas_case *c = &blas_cases[i];
		double w;
		size_t nd;
		int rc = blas_case_run(c, &w, &nd);

		if (log != NULL)
			fprintf(log, "# %s (n %d, in %d, out %d) in panels of %d rows: %s (%zu floats differ, "
				     "at most %.2g of the float-rounding bound)\n",
				c->form == 'w' ? "dw = dy^T x" : "dx = dy w", c->n, c->in, c->out, c->rows,
				rc == 1 ? "bit for bit" : rc == 0 ? "within float rounding" : "BEYOND float rounding",
				nd, w);
		if (rc < 1) {
			nbad++;
			first = first < 0 ? i : first;
			worst = w > worst ? w : worst;
		}
		verdict = rc < verdict ? rc : verdict;
	}
	if (verdict == 1) {
		snprintf(why, len, "%s: row panels are bit for bit the whole product's rows (%d cases)", name,
			 BLAS_NCASES);
	} else {
		const struct blas_case *c = &blas_cases[first];

		snprintf(why, len, "%s: row panels differ from the whole product's rows in %d of %d cases "
				   "(first: %s, n %d in %d out %d, panels of %d rows), %s (at most %.2g of the bound)",
			 name, nbad, BLAS_NCASES, c->form == 'w' ? "dw = dy^T x" : "dx = dy w", c->n, c->in,
			 c->out, c->rows, verdict == 0 ? "within float rounding" : "BEYOND float rounding",
			 worst);
	}
	return verdict;
}

#endif
