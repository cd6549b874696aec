/*
 * metcompare - compare the losses a ddptrain run reported with a reference.
 *
 *   metcompare [--progress OUT] METRICS REF [TOL]
 *
 * METRICS is ddptrain's --metrics file (JSON lines); REF holds JSON lines of the same
 * shape, "step" and "eval" records only (tests/torch_crosscheck.py writes PyTorch's).
 * For each of the two kinds REF has, METRICS must have records at the same steps, in
 * order, with the same epoch; the loss must agree within TOL relative (default 1e-5),
 * the accuracy and the learning rate, where REF has them, within TOL (the accuracy
 * absolute, the rate relative). The summary record's first and final loss must be
 * REF's first and last step losses. With --progress, OUT is ddptrain's standard output:
 * its progress lines, eval lines and "# loss: first, final" line are checked the same
 * way, within what their printed digits allow.
 *
 * A value that is missing, not a number, or not finite, on either side, is a failure:
 * a comparison with NaN is false, and a tool that only looks for large differences
 * would pass it.
 *
 * Exit 0 if everything agrees, 1 if not (one line per disagreement, at most 10),
 * 2 if a file cannot be read or a line is not JSON.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ERRORS 10

/* One step or eval record. acc and lr are NAN where the record has none. */
struct rec {
	long step, epoch;
	double loss, acc, lr;
	int has_acc, has_lr;
};

struct recs {
	struct rec *v;
	size_t n, cap;
};

struct run {
	struct recs step, eval;
	int has_summary;
	double first_loss, final_loss;
};

static int errors;

static void run_free(struct run *r)
{
	free(r->step.v);
	free(r->eval.v);
}

static void mismatch(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void mismatch(const char *fmt, ...)
{
	va_list ap;

	if (errors++ >= MAX_ERRORS)
		return;
	va_start(ap, fmt);
	fputs("metcompare: ", stdout);
	vprintf(fmt, ap);
	fputc('\n', stdout);
	va_end(ap);
}

static void push(struct recs *r, const struct rec *x)
{
	if (r->n == r->cap) {
		r->cap = r->cap ? 2 * r->cap : 64;
		r->v = realloc(r->v, r->cap * sizeof *r->v);
		if (r->v == NULL) {
			fprintf(stderr, "metcompare: out of memory\n");
			exit(2);
		}
	}
	r->v[r->n++] = *x;
}

/* A number field: 1 and *out if it is there and a finite number; 0 if absent; -1 if
 * present but not a finite number (said on stdout). */
static int number(json_t *o, const char *key, double *out, const char *what, long line)
{
	json_t *v = json_object_get(o, key);

	if (v == NULL)
		return 0;
	if (!json_is_number(v) || !isfinite(json_number_value(v))) {
		mismatch("%s line %ld: \"%s\" is not a finite number", what, line, key);
		return -1;
	}
	*out = json_number_value(v);
	return 1;
}

/* Read a JSON-lines file: its step and eval records, and its summary's losses. Each
 * step or eval record must have a finite loss (else a mismatch). Exit 2 if unreadable. */
static void load(const char *path, const char *what, struct run *run)
{
	FILE *f = fopen(path, "r");
	char *line = NULL;
	size_t cap = 0;
	long lineno = 0;

	if (f == NULL) {
		fprintf(stderr, "metcompare: %s: cannot open %s: %s\n", what, path, strerror(errno));
		exit(2);
	}
	memset(run, 0, sizeof *run);
	while (getline(&line, &cap, f) > 0) {
		json_error_t je;
		json_t *o, *t;
		const char *type;
		struct rec r = {.acc = NAN, .lr = NAN};
		double x;

		lineno++;
		if (line[strspn(line, " \t\r\n")] == '\0')
			continue;
		o = json_loads(line, 0, &je);
		if (o == NULL || !json_is_object(o)) {
			fprintf(stderr, "metcompare: %s: %s line %ld is not a JSON object: %s\n", what, path,
				lineno, o == NULL ? je.text : "not an object");
			exit(2);
		}
		t = json_object_get(o, "type");
		type = json_is_string(t) ? json_string_value(t) : "";
		if (strcmp(type, "summary") == 0) {
			run->has_summary = 1;
			if (number(o, "first_loss", &run->first_loss, what, lineno) != 1 ||
			    number(o, "final_loss", &run->final_loss, what, lineno) != 1) {
				mismatch("%s line %ld: the summary lacks a finite first_loss or final_loss", what,
					 lineno);
				run->has_summary = -1;
			}
		} else if (strcmp(type, "step") == 0 || strcmp(type, "eval") == 0) {
			r.step = json_integer_value(json_object_get(o, "step"));
			r.epoch = json_integer_value(json_object_get(o, "epoch"));
			if (number(o, "loss", &r.loss, what, lineno) != 1) {
				mismatch("%s line %ld: a %s record without a finite loss", what, lineno, type);
				r.loss = NAN;
			}
			r.has_acc = number(o, "accuracy", &x, what, lineno);
			r.acc = r.has_acc == 1 ? x : NAN;
			r.has_lr = number(o, "lr", &x, what, lineno);
			r.lr = r.has_lr == 1 ? x : NAN;
			push(strcmp(type, "step") == 0 ? &run->step : &run->eval, &r);
		}
		json_decref(o);
	}
	free(line);
	fclose(f);
}

/* |a - b| <= tol * |b| + slack, false for any non-finite a or b. */
static int close_rel(double a, double b, double tol, double slack)
{
	return isfinite(a) && isfinite(b) && fabs(a - b) <= tol * fabs(b) + slack;
}

static double rel_err(double a, double b)
{
	return fabs(a - b) / (fabs(b) > 1e-30 ? fabs(b) : 1e-30);
}

/* Compare one kind of record; the worst loss error goes to *worst (NAN on a mismatch). */
static void compare_recs(const char *kind, const struct recs *got, const struct recs *ref, double tol,
			 double *worst)
{
	*worst = 0.0;
	if (got->n != ref->n) {
		mismatch("%zu %s records, want %zu", got->n, kind, ref->n);
		*worst = NAN;
		return;
	}
	for (size_t i = 0; i < ref->n; i++) {
		const struct rec *a = &got->v[i], *b = &ref->v[i];

		if (a->step != b->step || a->epoch != b->epoch) {
			mismatch("%s record %zu is step %ld epoch %ld, want step %ld epoch %ld", kind, i + 1,
				 a->step, a->epoch, b->step, b->epoch);
			*worst = NAN;
			continue;
		}
		if (!close_rel(a->loss, b->loss, tol, 0.0)) {
			mismatch("%s at step %ld: loss %.9g, want %.9g (relative error %.3g > %.3g)", kind,
				 b->step, a->loss, b->loss, rel_err(a->loss, b->loss), tol);
			*worst = NAN;
		} else if (*worst == *worst && rel_err(a->loss, b->loss) > *worst) {
			*worst = rel_err(a->loss, b->loss);
		}
		if (b->has_acc == 1 && !close_rel(a->acc, b->acc, 0.0, tol))
			mismatch("%s at step %ld: accuracy %.9g, want %.9g", kind, b->step, a->acc, b->acc);
		if (b->has_lr == 1 && !close_rel(a->lr, b->lr, tol, 0.0))
			mismatch("%s at step %ld: lr %.9g, want %.9g", kind, b->step, a->lr, b->lr);
	}
}

/* ddptrain's standard output: progress lines " EPOCH STEP/TOTAL LOSS [ACC%] ...", eval
 * lines and the summary's loss line, against the reference. Printed with 6 decimals
 * (accuracy: percent with 2), so each may be off by half its last digit. Returns the
 * number of progress lines. */
static long compare_progress(const char *path, const struct run *ref, int with_acc, double tol)
{
	FILE *f = fopen(path, "r");
	char *line = NULL;
	size_t cap = 0, si = 0, ei = 0;
	long n = 0;
	int seen_loss_line = 0;

	if (f == NULL) {
		fprintf(stderr, "metcompare: --progress: cannot open %s: %s\n", path, strerror(errno));
		exit(2);
	}
	while (getline(&line, &cap, f) > 0) {
		long epoch, step, total, s2, e2;
		double loss, acc, first, final;
		int k;

		if (sscanf(line, " %ld %ld/%ld %lf %lf", &epoch, &step, &total, &loss, &acc) >= 4 &&
		    line[0] == ' ') {
			const struct rec *b = si < ref->step.n ? &ref->step.v[si] : NULL;

			n++;
			si++;
			if (b == NULL) {
				mismatch("progress line for step %ld beyond the reference's %zu steps", step,
					 ref->step.n);
				continue;
			}
			if (step != b->step || epoch != b->epoch)
				mismatch("progress line %ld is step %ld epoch %ld, want step %ld epoch %ld", n, step,
					 epoch, b->step, b->epoch);
			else if (!close_rel(loss, b->loss, tol, 5e-7))
				mismatch("progress line at step %ld: loss %.6f, want %.9g", step, loss, b->loss);
			/* The accuracy column follows the loss; the next number is samples/s. */
			k = sscanf(line, " %*d %*d/%*d %*f %lf", &acc);
			if (with_acc && (k != 1 || !close_rel(acc / 100.0, b->acc, 0.0, 5e-5 + tol)))
				mismatch("progress line at step %ld: accuracy %.2f%%, want %.4f%%", step,
					 k == 1 ? acc : NAN, 100.0 * b->acc);
		} else if (sscanf(line, "# eval after step %ld (epoch %ld): validation loss %lf", &s2, &e2,
				  &loss) == 3) {
			const struct rec *b = ei < ref->eval.n ? &ref->eval.v[ei] : NULL;

			ei++;
			if (b == NULL || s2 != b->step || e2 != b->epoch)
				mismatch("eval line after step %ld (epoch %ld) not in the reference", s2, e2);
			else if (!close_rel(loss, b->loss, tol, 5e-7))
				mismatch("eval line after step %ld: loss %.6f, want %.9g", s2, loss, b->loss);
		} else if (sscanf(line, "# loss: first %lf, final %lf", &first, &final) == 2) {
			seen_loss_line = 1;
			if (ref->step.n == 0 || !close_rel(first, ref->step.v[0].loss, tol, 5e-7) ||
			    !close_rel(final, ref->step.v[ref->step.n - 1].loss, tol, 5e-7))
				mismatch("summary line: first %.6f, final %.6f, want %.9g, %.9g", first, final,
					 ref->step.n ? ref->step.v[0].loss : NAN,
					 ref->step.n ? ref->step.v[ref->step.n - 1].loss : NAN);
		}
	}
	free(line);
	fclose(f);
	if ((size_t)n != ref->step.n)
		mismatch("%ld progress lines, want %zu (one per step: --log-every=1)", n, ref->step.n);
	if (ei != ref->eval.n)
		mismatch("%zu eval lines, want %zu", ei, ref->eval.n);
	if (!seen_loss_line)
		mismatch("no \"# loss: first ..., final ...\" line in %s", path);
	return n;
}

int main(int argc, char **argv)
{
	const char *progress = NULL;
	struct run got, ref;
	double tol = 1e-5, wstep, weval;
	long nprog = -1;
	int argi = 1;
	char *end;

	if (argc > 2 && strcmp(argv[1], "--progress") == 0) {
		progress = argv[2];
		argi = 3;
	}
	if (argc - argi < 2 || argc - argi > 3) {
		fprintf(stderr, "usage: metcompare [--progress OUT] METRICS REF [TOL]\n");
		return 2;
	}
	if (argc - argi == 3) {
		errno = 0;
		tol = strtod(argv[argi + 2], &end);
		if (errno != 0 || *end != '\0' || end == argv[argi + 2] || !isfinite(tol) || tol < 0) {
			fprintf(stderr, "metcompare: TOL '%s' is not a finite number >= 0\n", argv[argi + 2]);
			return 2;
		}
	}
	load(argv[argi], "METRICS", &got);
	load(argv[argi + 1], "REF", &ref);
	if (ref.step.n == 0 && ref.eval.n == 0) {
		fprintf(stderr, "metcompare: REF %s holds no step or eval record\n", argv[argi + 1]);
		return 2;
	}
	compare_recs("step", &got.step, &ref.step, tol, &wstep);
	compare_recs("eval", &got.eval, &ref.eval, tol, &weval);
	if (ref.step.n > 0) {
		if (got.has_summary == 0)
			mismatch("METRICS has no summary record");
		else if (got.has_summary == 1 &&
			 (!close_rel(got.first_loss, ref.step.v[0].loss, tol, 0.0) ||
			  !close_rel(got.final_loss, ref.step.v[ref.step.n - 1].loss, tol, 0.0)))
			mismatch("summary: first_loss %.9g, final_loss %.9g, want %.9g, %.9g", got.first_loss,
				 got.final_loss, ref.step.v[0].loss, ref.step.v[ref.step.n - 1].loss);
	}
	if (progress != NULL)
		nprog = compare_progress(progress, &ref, ref.step.n > 0 && ref.step.v[0].has_acc == 1, tol);
	if (errors > MAX_ERRORS)
		printf("metcompare: ... %d disagreements in all\n", errors);
	if (errors) {
		run_free(&got);
		run_free(&ref);
		return 1;
	}
	printf("metcompare: %zu steps (worst loss error %.3g), %zu evals (%.3g), summary", ref.step.n, wstep,
	       ref.eval.n, weval);
	if (nprog >= 0)
		printf(", %ld progress lines", nprog);
	printf(" agree within %.3g\n", tol);
	run_free(&got);
	run_free(&ref);
	return 0;
}
