/*
 * sgemm_ceiling.c - the fastest one rank could run an MLP's training step on
 * this CPU: the step's matrix products alone, through the same CBLAS that
 * ddptrain links, on one thread. scripts/bench.sh divides ddptrain's
 * achieved GFLOP/s per rank by this ceiling. It is not a test.
 *
 *   sgemm_ceiling [--layers=W0,W1,...] [--batch-size=B] [--reps=R]
 *
 * Defaults: the wide MLP of issue #6, 1024,1024,1024,1024,1024, batch 128,
 * 20 repetitions. For each Linear layer (in, out) the step does three
 * products, oriented as src/backend/backend_cpu.c does them (row-major):
 *
 *   forward      y (B, out)   = x (B, in) w^T          NoTrans, Trans    beta 1 (bias preloaded)
 *   weight grad  dw (out, in) = dy^T (out, B) x (B, in) Trans, NoTrans    beta 0
 *   input grad   dx (B, in)   = dy (B, out) w          NoTrans, NoTrans  beta 0, none for layer 1
 *
 * each 2*B*in*out FLOPs. A repetition runs them in the step's order
 * (forward layer by layer, then backward from the last layer) over
 * per-layer buffers, so the caches see the model's working set, and times
 * each product; a product's time is its median over the repetitions. The
 * rate of an orientation, and of the whole step (the ceiling), is its FLOPs
 * over the sum of those medians: the FLOP-weighted harmonic mean of the
 * products' rates.
 *
 * Prints a table and one "# summary: key=value ..." line for scripts/bench.sh.
 * Exit status: 0 success, 1 out of memory, 2 usage error.
 */
#include <cblas.h>  /* cblas_sgemm; openblas_set_num_threads */
#include <getopt.h> /* getopt_long */
#include <stdio.h>  /* printf, fprintf */
#include <stdlib.h> /* aligned_alloc, free, qsort, strtol */
#include <string.h> /* memset */
#include <time.h>   /* clock_gettime */

#include "config.h" /* HAVE_OPENBLAS_SET_NUM_THREADS */

#define MAX_LAYERS 64
#define WARMUP_REPS 2

enum orient { FORWARD, WGRAD, IGRAD, NORIENT };

static const char *const orient_name[NORIENT] = { "forward", "weight-grad", "input-grad" };
static const char *const orient_ops[NORIENT] = { "NT", "TN", "NN" };

struct net {
	int nlayers;         /* Linear layers L */
	int widths[MAX_LAYERS + 1];
	int batch;           /* B */
	float *act[MAX_LAYERS + 1];  /* (B, widths[l]): input, then each layer's output */
	float *dact[MAX_LAYERS + 1]; /* (B, widths[l]): gradient of the loss with respect to act */
	float *w[MAX_LAYERS];        /* (widths[l+1], widths[l]) */
	float *dw[MAX_LAYERS];       /* (widths[l+1], widths[l]) */
};

/* One timed product: its orientation, layer and (M, N, K) as passed to cblas_sgemm. */
struct product {
	enum orient o;
	int layer, m, n, k;
	double *secs; /* (reps) */
	double median;
};

/* Seconds on the monotonic clock. */
static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* 64-byte aligned floats, filled with small deterministic values (touched: no page
 * faults inside the timing). NULL when out of memory. */
static float *alloc_filled(size_t n, unsigned *state)
{
	size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
	float *p = aligned_alloc(64, bytes);

	if (p == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		*state = *state * 1664525u + 1013904223u;
		p[i] = ((float)(*state >> 8) / 16777216.0f - 0.5f) * 0.1f;
	}
	return p;
}

/* Free every buffer of the net; safe on a partly allocated or already freed net. */
static void net_free(struct net *t)
{
	for (int l = 0; l <= t->nlayers; l++) {
		free(t->act[l]);
		free(t->dact[l]);
		t->act[l] = t->dact[l] = NULL;
		if (l < t->nlayers) {
			free(t->w[l]);
			free(t->dw[l]);
			t->w[l] = t->dw[l] = NULL;
		}
	}
}

/* Allocate the net's buffers; 0 on success, -1 when out of memory. */
static int net_alloc(struct net *t)
{
	unsigned state = 1;
	size_t b = (size_t)t->batch;

	for (int l = 0; l <= t->nlayers; l++) {
		size_t wl = (size_t)t->widths[l];

		t->act[l] = alloc_filled(b * wl, &state);
		t->dact[l] = alloc_filled(b * wl, &state);
		if (t->act[l] == NULL || t->dact[l] == NULL)
			return -1;
		if (l < t->nlayers) {
			t->w[l] = alloc_filled((size_t)t->widths[l + 1] * wl, &state);
			t->dw[l] = alloc_filled((size_t)t->widths[l + 1] * wl, &state);
			if (t->w[l] == NULL || t->dw[l] == NULL)
				return -1;
		}
	}
	return 0;
}

/* Run one product as ddptrain's CPU backend runs it. */
static void product_run(const struct net *t, const struct product *p)
{
	int l = p->layer, in = t->widths[l], out = t->widths[l + 1], b = t->batch;

	switch (p->o) {
	case FORWARD:
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, b, out, in, 1.0f, t->act[l], in,
			    t->w[l], in, 1.0f, t->act[l + 1], out);
		break;
	case WGRAD:
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, b, 1.0f, t->dact[l + 1],
			    out, t->act[l], in, 0.0f, t->dw[l], in);
		break;
	default:
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, b, in, out, 1.0f,
			    t->dact[l + 1], out, t->w[l], in, 0.0f, t->dact[l], in);
		break;
	}
}

/* List the step's products in the order the step runs them; returns how many. */
static int plan_products(const struct net *t, struct product *p)
{
	int n = 0, b = t->batch;

	for (int l = 0; l < t->nlayers; l++)
		p[n++] = (struct product){ FORWARD, l, b, t->widths[l + 1], t->widths[l], NULL, 0 };
	for (int l = t->nlayers - 1; l >= 0; l--) {
		p[n++] = (struct product){ WGRAD, l, t->widths[l + 1], t->widths[l], b, NULL, 0 };
		if (l > 0)
			p[n++] = (struct product){ IGRAD, l, b, t->widths[l], t->widths[l + 1], NULL,
						   0 };
	}
	return n;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Median of n values (sorts them). */
static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Parse "W0,W1,..." into t->widths; 0 on success, -1 on a malformed list. */
static int parse_layers(struct net *t, const char *s)
{
	char *end;
	int n = 0;

	for (;;) {
		long v = strtol(s, &end, 10);

		if (end == s || v < 1 || v > 1 << 20 || n > MAX_LAYERS)
			return -1;
		t->widths[n++] = (int)v;
		if (*end == '\0')
			break;
		if (*end != ',')
			return -1;
		s = end + 1;
	}
	if (n < 2)
		return -1;
	t->nlayers = n - 1;
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "Usage: sgemm_ceiling [--layers=W0,W1,...] [--batch-size=B] [--reps=R]\n"
		   "Times an MLP training step's SGEMMs on one thread; see the source's top comment.\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "layers", required_argument, NULL, 'l' },
		{ "batch-size", required_argument, NULL, 'b' },
		{ "reps", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct net t;
	struct product p[3 * MAX_LAYERS];
	double flops[NORIENT] = { 0 }, secs[NORIENT] = { 0 }, all_flops = 0, all_secs = 0;
	const char *threads = "the BLAS's default threads";
	int reps = 20, np, c, rc = 0;
	char *end;

	memset(&t, 0, sizeof t);
	parse_layers(&t, "1024,1024,1024,1024,1024");
	t.batch = 128;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'l':
			if (parse_layers(&t, optarg) != 0) {
				fprintf(stderr, "sgemm_ceiling: --layers: '%s' is not a list of 2 to %d positive widths\n",
					optarg, MAX_LAYERS + 1);
				return 2;
			}
			break;
		case 'b':
			t.batch = (int)strtol(optarg, &end, 10);
			if (*optarg == '\0' || *end != '\0' || t.batch < 1) {
				fprintf(stderr, "sgemm_ceiling: --batch-size: '%s' is not a positive integer\n", optarg);
				return 2;
			}
			break;
		case 'r':
			reps = (int)strtol(optarg, &end, 10);
			if (*optarg == '\0' || *end != '\0' || reps < 1 || reps > 100000) {
				fprintf(stderr, "sgemm_ceiling: --reps: '%s' is not an integer from 1 to 100000\n", optarg);
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "sgemm_ceiling: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
	openblas_set_num_threads(1); /* as src/backend/backend_cpu.c: one core per rank */
	threads = "1 thread";
#endif

	np = plan_products(&t, p);
	for (int i = 0; i < np; i++) {
		p[i].secs = malloc((size_t)reps * sizeof(double));
		if (p[i].secs == NULL)
			rc = 1;
	}
	if (rc == 0 && net_alloc(&t) != 0)
		rc = 1;
	if (rc != 0) {
		fprintf(stderr, "sgemm_ceiling: out of memory\n");
		goto out_free;
	}

	for (int r = -WARMUP_REPS; r < reps; r++) {
		for (int i = 0; i < np; i++) {
			double t0 = now();

			product_run(&t, &p[i]);
			if (r >= 0)
				p[i].secs[r] = now() - t0;
		}
	}
	for (int i = 0; i < np; i++) {
		double f = 2.0 * p[i].m * p[i].n * p[i].k;

		p[i].median = median(p[i].secs, reps);
		flops[p[i].o] += f;
		secs[p[i].o] += p[i].median;
		all_flops += f;
		all_secs += p[i].median;
	}

	printf("# sgemm_ceiling: cblas_sgemm on %s, batch %d, layers", threads, t.batch);
	for (int l = 0; l <= t.nlayers; l++)
		printf("%c%d", l ? ',' : ' ', t.widths[l]);
	printf(", median of %d\n", reps);
	printf("# %-14s %4s %6s %6s %6s %8s\n", "product", "op", "M", "N", "K", "GFLOP/s");
	for (int i = 0; i < np; i++)
		printf("  %-11s L%-2d %4s %6d %6d %6d %8.2f\n", orient_name[p[i].o], p[i].layer + 1,
		       orient_ops[p[i].o], p[i].m, p[i].n, p[i].k,
		       2e-9 * p[i].m * p[i].n * p[i].k / p[i].median);
	printf("# summary: forward_gflops=%.2f wgrad_gflops=%.2f igrad_gflops=%.2f ceiling_gflops=%.2f flops_per_step=%.0f reps=%d\n",
	       secs[FORWARD] > 0 ? 1e-9 * flops[FORWARD] / secs[FORWARD] : 0.0,
	       secs[WGRAD] > 0 ? 1e-9 * flops[WGRAD] / secs[WGRAD] : 0.0,
	       secs[IGRAD] > 0 ? 1e-9 * flops[IGRAD] / secs[IGRAD] : 0.0,
	       1e-9 * all_flops / all_secs, all_flops, reps);
out_free:
	net_free(&t);
	for (int i = 0; i < np; i++)
		free(p[i].secs);
	return rc;
}
