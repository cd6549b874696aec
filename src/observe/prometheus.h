/*
 * prometheus.h - --prometheus: the run's progress as a Prometheus text-format
 * file for the node exporter's textfile collector, rewritten atomically (a
 * temporary renamed over it, so the collector never reads half a file) at
 * most every --prometheus-every seconds, and once more at the end.
 *
 * Rank 0 only. Not an HTTP endpoint: cluster nodes already run an exporter,
 * and a file needs no port.
 */
#ifndef DDPT_PROMETHEUS_H
#define DDPT_PROMETHEUS_H

#include "core/status.h"

#define PROM_MAX_BUCKETS 64

/* What the file shows. */
struct prom_sample {
	long step, total;
	double loss;
	double samples_per_s;
	double wait_share;          /* fraction of the step waiting for all-reduces (ddp) */
	int nbuckets;
	double bucket_bytes[PROM_MAX_BUCKETS];
	double bucket_busbw[PROM_MAX_BUCKETS]; /* bytes/s, 0 if not measured yet */
	int exit_code;              /* the run's exit status in the last write; -1 while running */
};

struct prometheus {
	const char *path; /* borrowed; NULL: off */
	const char *mode; /* "ddp" or "dp" */
	double every;     /* seconds between writes */
	double last;      /* clock_now() of the last write */
	int replicas;
};

void prometheus_init(struct prometheus *p, const char *path, double every, const char *mode,
		     int replicas);
/* Is a write due at time now (or forced)? Cheap: a compare. */
static inline int prometheus_due(const struct prometheus *p, double now)
{
	return p->path != NULL && now - p->last >= p->every;
}
/* Write the file now (atomically) and remember the time. */
enum status prometheus_write(struct prometheus *p, const struct prom_sample *s, double now,
			     struct diag *d);

#endif
