/*
 * stcompare - compare two safetensors files tensor by tensor.
 *
 *   stcompare A B [TOL]    relative error max|a-b| / max|b| per tensor, worst
 *                          printed; exit 1 if it exceeds TOL (default 1e-5)
 *   stcompare --exact A B  exit 1 unless every tensor is bit-identical
 *
 * Both modes exit 1 at the first NaN or infinity in either file, with one line
 * naming the file, the tensor, the element and the value: weights must be
 * finite, and a NaN compares false with everything, so it would otherwise pass
 * as a difference of 0. -0.0 against 0.0 is a difference of 0 in the tolerance
 * mode and a difference in --exact (the bits differ).
 *
 * Exit 2 for a usage error (TOL not a finite number >= 0) or if the files
 * cannot be read or do not hold the same tensors.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/safetensors.h"

/* One of the two files: "A" or "B", its path and its mapping. */
struct side {
	const char *label, *path;
	struct st_file f;
};

static float *load(const struct side *s, const struct st_tensor *t, size_t *count)
{
	struct diag d = {0};
	size_t n = 1;
	float *v;

	for (int k = 0; k < t->ndim; k++)
		n *= (size_t)t->shape[k];
	v = malloc((n ? n : 1) * sizeof *v);
	if (v == NULL || st_read_f32(&s->f, t, v, n, s->label, &d) != ST_OK) {
		fprintf(stderr, "stcompare: %s\n", v == NULL ? "out of memory" : d.msg);
		exit(2);
	}
	*count = n;
	return v;
}

/* 0 if every v[k] is finite, else 1 after one line naming the first that is not. */
static int check_finite(const struct side *s, const char *name, const float *v, size_t n)
{
	for (size_t k = 0; k < n; k++) {
		if (!isfinite(v[k])) {
			printf("stcompare: %s (%s): tensor %s element %zu (counting from 0) is %g; weights must be finite\n",
			       s->label, s->path, name, k, (double)v[k]);
			return 1;
		}
	}
	return 0;
}

/* TOL from text: a finite number >= 0 and nothing after it; -1 if it is not one. */
static double parse_tol(const char *text)
{
	char *end;
	double v = strtod(text, &end);

	if (end == text || *end != '\0' || !isfinite(v) || !(v >= 0))
		return -1;
	return v;
}

int main(int argc, char **argv)
{
	struct side a_side = {"A", NULL, {0}}, b_side = {"B", NULL, {0}};
	struct diag d = {0};
	int exact = 0, argi = 1, rc = 0;
	double tol = 1e-5, worst = 0.0;
	const char *worst_name = "";

	if (argc > 1 && strcmp(argv[1], "--exact") == 0) {
		exact = 1;
		argi++;
	}
	if (argc - argi < 2 || argc - argi > 3) {
		fprintf(stderr, "usage: stcompare [--exact] A B [TOL]\n");
		return 2;
	}
	if (argc - argi > 2) {
		tol = parse_tol(argv[argi + 2]);
		if (tol < 0) {
			fprintf(stderr, "stcompare: TOL '%s' is not a finite number >= 0\n", argv[argi + 2]);
			return 2;
		}
	}
	a_side.path = argv[argi];
	b_side.path = argv[argi + 1];
	if (st_open(&a_side.f, a_side.path, "A", &d) != ST_OK ||
	    st_open(&b_side.f, b_side.path, "B", &d) != ST_OK) {
		fprintf(stderr, "stcompare: %s\n", d.msg);
		rc = 2;
		goto out_close;
	}
	if (a_side.f.n != b_side.f.n) {
		fprintf(stderr, "stcompare: %zu tensors against %zu\n", a_side.f.n, b_side.f.n);
		rc = 2;
		goto out_close;
	}
	for (size_t i = 0; i < a_side.f.n && rc == 0; i++) {
		const struct st_tensor *ta = &a_side.f.t[i], *tb = st_find(&b_side.f, ta->name);
		size_t na, nb;
		float *a, *b;
		double maxdiff = 0.0, maxb = 0.0, rel;

		if (tb == NULL) {
			fprintf(stderr, "stcompare: %s missing from B\n", ta->name);
			rc = 2;
			break;
		}
		a = load(&a_side, ta, &na);
		b = load(&b_side, tb, &nb);
		if (na != nb) {
			fprintf(stderr, "stcompare: %s has %zu elements against %zu\n", ta->name, na, nb);
			rc = 2;
		} else if (check_finite(&a_side, ta->name, a, na) || check_finite(&b_side, ta->name, b, nb)) {
			rc = 1;
		} else if (exact && memcmp(a, b, na * sizeof *a) != 0) {
			printf("stcompare: %s differs\n", ta->name);
			rc = 1;
		}
		/* Every value is finite here, so the differences and the maxima are too. */
		for (size_t k = 0; k < na && rc == 0; k++) {
			double diff = fabs((double)a[k] - (double)b[k]);

			maxdiff = diff > maxdiff ? diff : maxdiff;
			maxb = fabs((double)b[k]) > maxb ? fabs((double)b[k]) : maxb;
		}
		rel = maxb > 0 ? maxdiff / maxb : maxdiff;
		if (rc == 0 && rel >= worst) {
			worst = rel;
			worst_name = ta->name;
		}
		free(a);
		free(b);
	}
	if (rc != 0)
		goto out_close;
	if (exact) {
		printf("stcompare: bit-identical (%zu tensors)\n", a_side.f.n);
	} else {
		printf("stcompare: max relative error %.3g (%s), tolerance %.3g\n", worst, worst_name, tol);
		rc = worst <= tol ? 0 : 1;
	}
out_close:
	st_close(&a_side.f);
	st_close(&b_side.f);
	return rc;
}
