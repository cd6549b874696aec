/*
 * stcompare - compare two safetensors files tensor by tensor.
 *
 *   stcompare A B [TOL]    relative error max|a-b| / max|b| per tensor, worst
 *                          printed; exit 1 if it exceeds TOL (default 1e-5)
 *   stcompare --exact A B  exit 1 unless every tensor is bit-identical
 *
 * Exit 2 if the files cannot be read or do not hold the same tensors.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

static float *load(const struct st_file *f, const struct st_tensor *t, size_t *count)
{
	struct diag d = {0};
	size_t n = 1;
	float *v;

	for (int k = 0; k < t->ndim; k++)
		n *= (size_t)t->shape[k];
	v = malloc((n ? n : 1) * sizeof *v);
	if (v == NULL || st_read_f32(f, t, v, n, "stcompare", &d) != ST_OK) {
		fprintf(stderr, "stcompare: %s\n", d.msg);
		exit(2);
	}
	*count = n;
	return v;
}

int main(int argc, char **argv)
{
	struct st_file fa = {0}, fb = {0};
	struct diag d = {0};
	int exact = 0, argi = 1, rc = 0;
	double tol = 1e-5, worst = 0.0;
	const char *worst_name = "";

	if (argc > 1 && strcmp(argv[1], "--exact") == 0) {
		exact = 1;
		argi++;
	}
	if (argc - argi < 2) {
		fprintf(stderr, "usage: stcompare [--exact] A B [TOL]\n");
		return 2;
	}
	if (argc - argi > 2)
		tol = atof(argv[argi + 2]);
	if (st_open(&fa, argv[argi], "A", &d) != ST_OK || st_open(&fb, argv[argi + 1], "B", &d) != ST_OK) {
		fprintf(stderr, "stcompare: %s\n", d.msg);
		rc = 2;
		goto out_close;
	}
	if (fa.n != fb.n) {
		fprintf(stderr, "stcompare: %zu tensors against %zu\n", fa.n, fb.n);
		rc = 2;
		goto out_close;
	}
	for (size_t i = 0; i < fa.n && rc == 0; i++) {
		const struct st_tensor *tb = st_find(&fb, fa.t[i].name);
		size_t na, nb;
		float *a, *b;
		double maxdiff = 0.0, maxb = 0.0, rel;

		if (tb == NULL) {
			fprintf(stderr, "stcompare: %s missing from B\n", fa.t[i].name);
			rc = 2;
			break;
		}
		a = load(&fa, &fa.t[i], &na);
		b = load(&fb, tb, &nb);
		if (na != nb) {
			fprintf(stderr, "stcompare: %s has %zu elements against %zu\n", fa.t[i].name, na, nb);
			rc = 2;
		} else if (exact && memcmp(a, b, na * sizeof *a) != 0) {
			printf("stcompare: %s differs\n", fa.t[i].name);
			rc = 1;
		}
		for (size_t k = 0; k < na && rc == 0; k++) {
			double diff = fabs((double)a[k] - (double)b[k]);

			maxdiff = diff > maxdiff ? diff : maxdiff;
			maxb = fabs((double)b[k]) > maxb ? fabs((double)b[k]) : maxb;
		}
		rel = maxb > 0 ? maxdiff / maxb : maxdiff;
		if (rc == 0 && rel >= worst) {
			worst = rel;
			worst_name = fa.t[i].name;
		}
		free(a);
		free(b);
	}
	if (rc != 0)
		goto out_close;
	if (exact) {
		printf("stcompare: bit-identical (%zu tensors)\n", fa.n);
	} else {
		printf("stcompare: max relative error %.3g (%s), tolerance %.3g\n", worst, worst_name, tol);
		rc = worst <= tol ? 0 : 1;
	}
out_close:
	st_close(&fa);
	st_close(&fb);
	return rc;
}
