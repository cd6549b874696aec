/* prometheus.c - the --prometheus textfile. */
#include <stdio.h>
#include <time.h>

#include "core/outfile.h"
#include "observe/prometheus.h"

void prometheus_init(struct prometheus *p, const char *path, double every, const char *mode,
		     int replicas)
{
	p->path = path;
	p->every = every;
	p->mode = mode;
	p->replicas = replicas;
	p->last = -1e300; /* the first step writes */
}

/* HELP and TYPE of a gauge. Names follow Prometheus' conventions (promtool check
 * metrics): the unit as a suffix, "_ratio" for a fraction, no "_total" on a gauge. */
static void gauge_head(FILE *f, const char *name, const char *help)
{
	fprintf(f, "# HELP ddptrain_%s %s\n# TYPE ddptrain_%s gauge\n", name, help, name);
}

/* One gauge with its HELP and TYPE lines. */
static void gauge(FILE *f, const char *name, const char *help, const char *labels, double v)
{
	gauge_head(f, name, help);
	fprintf(f, "ddptrain_%s{%s} %.15g\n", name, labels, v);
}

enum status prometheus_write(struct prometheus *p, const struct prom_sample *s, double now,
			     struct diag *d)
{
	struct outfile of;
	char labels[96];
	enum status st;

	p->last = now;
	st = outfile_open(&of, p->path, "--prometheus", d);
	if (st != ST_OK)
		return st;
	snprintf(labels, sizeof labels, "mode=\"%s\",replicas=\"%d\"", p->mode, p->replicas);
	gauge(of.f, "running", "1 while training, 0 once the run has ended.", labels, s->exit_code < 0);
	if (s->exit_code >= 0)
		gauge(of.f, "exit_code", "The run's exit status (ddptrain(1), EXIT STATUS), once it has ended.",
		      labels, s->exit_code);
	gauge(of.f, "step", "Optimizer steps completed.", labels, (double)s->step);
	gauge(of.f, "steps_planned", "The optimizer step the run ends at.", labels, (double)s->total);
	gauge(of.f, "loss", "Loss of the latest step (mean over replicas).", labels, s->loss);
	gauge(of.f, "samples_per_second", "Training throughput since the start, all replicas.", labels,
	      s->samples_per_s);
	gauge(of.f, "allreduce_wait_ratio", "Fraction of rank 0's time spent waiting for all-reduces.",
	      labels, s->wait_share);
	/* A bucket's size is a value, not a label: a label names a series. */
	if (s->nbuckets > 0)
		gauge_head(of.f, "bucket_size_bytes", "Bytes each gradient bucket all-reduces per step.");
	for (int b = 0; b < s->nbuckets; b++)
		fprintf(of.f, "ddptrain_bucket_size_bytes{%s,bucket=\"%d\"} %.0f\n", labels, b,
			s->bucket_bytes[b]);
	if (s->nbuckets > 0)
		gauge_head(of.f, "bucket_busbw_bytes_per_second",
			   "Bus bandwidth of each gradient bucket's all-reduce, algbw x 2(n-1)/n, mean over steps.");
	for (int b = 0; b < s->nbuckets; b++)
		fprintf(of.f, "ddptrain_bucket_busbw_bytes_per_second{%s,bucket=\"%d\"} %.9g\n", labels, b,
			s->bucket_busbw[b]);
	gauge(of.f, "last_update_timestamp_seconds", "When this file was written (Unix time).", labels,
	      (double)time(NULL));
	return outfile_commit(&of, d);
}
