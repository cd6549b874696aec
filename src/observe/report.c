/* report.c - progress lines, summary and the streamed JSON Lines metrics file. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "core/build.h" /* build_json: the summary names the build */
#include "core/clock.h" /* clock_now: when a progress line is due */
#include "core/outfile.h" /* outfile_target, outfile_write_failed */
#include "core/tty.h"   /* tty_stdout_is_terminal: progress lines rewrite themselves */
#include "config.h" /* PACKAGE_VERSION */
#include "observe/report.h"

/* Wall-clock time now as ISO 8601 UTC with milliseconds ("2026-11-30T14:12:00.123Z"). */
static void wall_time(char *buf, size_t len)
{
	struct timespec ts;
	struct tm tm;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
		 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000L);
}

/* The length of the valid UTF-8 character at s (overlong forms, surrogates and code
 * points past U+10FFFF are not valid: jansson refuses them too), or 0. */
static size_t utf8_char(const unsigned char *s)
{
	unsigned lo = 0x80, hi = 0xbf;
	size_t n;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		n = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		n = 3, lo = s[0] == 0xe0 ? 0xa0 : lo, hi = s[0] == 0xed ? 0x9f : hi;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		n = 4, lo = s[0] == 0xf0 ? 0x90 : lo, hi = s[0] == 0xf4 ? 0x8f : hi;
	else
		return 0;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++) /* stops at the terminator, which is no continuation */
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return n;
}

/* A JSON string holding s whatever its bytes. JSON text is UTF-8, and jansson gives no
 * string (so json_pack no object) for other bytes: a path or a message cut inside a
 * character would cost a record its key or the whole record. Each byte that is not
 * part of a valid character is written as the text \xHH, as messages show control
 * characters. NULL for s NULL (or no memory). */
static json_t *json_text(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	json_t *j = s != NULL ? json_string(s) : NULL;
	char *buf, *o;

	if (j != NULL || s == NULL || (buf = malloc(4 * strlen(s) + 1)) == NULL)
		return j;
	for (o = buf; *p != '\0';) {
		size_t n = utf8_char(p);

		if (n == 0) {
			o += sprintf(o, "\\x%02x", *p++);
			continue;
		}
		memcpy(o, p, n);
		o += n;
		p += n;
	}
	*o = '\0';
	j = json_string(buf);
	free(buf);
	return j;
}

/* The metrics file failed (r->metrics_err) in what: no more records are tried, and the
 * user hears of it now, not at the end of the run. */
static void metrics_failed(struct report *r, const char *what)
{
	struct diag d = {0};

	if (strcmp(what, "write") == 0) { /* EFBIG names the file-size limit */
		char name[PATH_MAX + 16];

		snprintf(name, sizeof name, "--metrics: %s", r->metrics_path);
		outfile_write_failed(&d, r->metrics_err, name);
	} else {
		diag_errno(&d, r->metrics_err, "--metrics: %s: %s", r->metrics_path, what);
	}
	report_output_failed(r, REPORT_METRICS, d.msg);
}

/* Append one record as a whole line with one write(): a reader (tail -f) or a killed run
 * sees whole lines only. A short write is followed by one for the rest, whose failure
 * gives the reason (a full disk, the file-size limit); a line that cannot be finished is
 * cut back off the file. Every record gets the wall-clock time as its "time". */
static void metrics_write(struct report *r, json_t *obj)
{
	char when[64], *text = NULL;
	size_t len;

	if (r->metrics_fd >= 0 && obj != NULL && r->metrics_err == 0) {
		wall_time(when, sizeof when);
		json_object_set_new(obj, "time", json_string(when));
		text = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);
	}
	if (text != NULL) {
		struct stat sb;
		off_t before = fstat(r->metrics_fd, &sb) == 0 ? sb.st_size : -1;
		size_t done = 0;
		ssize_t w = 0;

		len = strlen(text);
		text[len] = '\n'; /* json_dumps's terminator: the line is len + 1 bytes */
		while (done < len + 1 && (w = write(r->metrics_fd, text + done, len + 1 - done)) != 0) {
			if (w > 0)
				done += (size_t)w;
			else if (errno != EINTR)
				break;
		}
		if (done != len + 1) {
			r->metrics_err = w < 0 ? errno : ENOSPC;
			if (done > 0 && before >= 0 && ftruncate(r->metrics_fd, before) != 0)
				r->metrics_err = errno;
			metrics_failed(r, "write");
		}
		free(text);
	}
	json_decref(obj);
}

/* The file is opened, and its "start" record written, with the first record of the run
 * proper: a run refused before that leaves a previous file alone. */
static int metrics_ready(struct report *r)
{
	json_t *first = r->metrics_start;
	char *target;

	if (r->metrics_fd >= 0)
		return 1;
	if (first == NULL || r->metrics_err != 0)
		return 0;
	r->metrics_start = NULL;
	/* Streamed in place (tail -f works, a stopped or crashed run keeps its lines); a
	 * resumed run appends to the attempts before it. So not an outfile, but the same
	 * target: the file outfile_check probed, through a link the file it names. */
	target = outfile_target(r->metrics_path);
	r->metrics_fd = target == NULL ? -1 : open(target, O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK |
							      (r->metrics_append ? O_APPEND : O_TRUNC), 0666);
	if (r->metrics_fd < 0) {
		r->metrics_err = errno;
		metrics_failed(r, "open");
		free(target);
		json_decref(first);
		return 0;
	}
	free(target);
	metrics_write(r, first);
	return 1;
}

void report_training_starts(struct report *r)
{
	r->last_line = clock_now();
	if (r->root)
		metrics_ready(r);
}

static void metrics_line(struct report *r, json_t *obj)
{
	if (metrics_ready(r))
		metrics_write(r, obj);
	else
		json_decref(obj);
}

/* Is the standard output still taking our lines? After a write error the report stops
 * printing: a closed pipe (EPIPE) is not an error (training goes on, one note on stderr);
 * anything else (a full disk) is reported at the end and makes the run fail. */
static void out_check(struct report *r)
{
	if (r->out_err != 0 || !ferror(r->out))
		return;
	r->out_err = errno != 0 ? errno : EIO;
	r->quiet = 1;
	if (r->out_err == EPIPE)
		fputs("ddptrain: standard output was closed: training goes on without progress lines\n",
		      stderr);
}

void report_init(struct report *r, int root, int quiet, double log_seconds)
{
	memset(r, 0, sizeof *r);
	r->metrics_fd = -1;
	r->root = root;
	r->quiet = quiet;
	r->out = stdout;
	r->tty = root && tty_stdout_is_terminal();
	r->every_s = log_seconds;
	if (r->tty && (log_seconds <= 0 || log_seconds > REPORT_TTY_SECONDS))
		r->every_s = REPORT_TTY_SECONDS;
	r->last_line = clock_now();
	if (root)
		setvbuf(stdout, NULL, _IOLBF, 0); /* whole lines, and a write error seen at once */
}

enum status report_open_metrics(struct report *r, const char *metrics_path, int append,
				const char *config, struct diag *d)
{
	json_t *cfg;
	char started[64];

	if (!r->root || metrics_path == NULL)
		return ST_OK;
	r->metrics_path = strdup(metrics_path);
	if (r->metrics_path == NULL)
		return diag_set(d, ST_RUNTIME, "--metrics: out of memory");
	r->metrics_append = append;
	/* The first record of each attempt: who wrote it, when, and with which settings. */
	cfg = json_object();
	for (const char *line = config; line != NULL && *line != '\0';) {
		size_t n = strcspn(line, "\n"), k = strcspn(line, "=");
		char key[64], *val;

		if (k < n && k < sizeof key) {
			snprintf(key, sizeof key, "%.*s", (int)k - (line[0] == '-' && line[1] == '-' ? 2 : 0),
				 line + (line[0] == '-' && line[1] == '-' ? 2 : 0));
			val = strndup(line + k + 1, n - k - 1);
			if (val != NULL)
				json_object_set_new(cfg, key, json_text(val));
			free(val);
		}
		line += n + (line[n] == '\n');
	}
	wall_time(started, sizeof started);
	r->metrics_start = json_pack("{s:s, s:s, s:s, s:o, s:o}", "type", "start", "version",
				     PACKAGE_VERSION, "start_time", started, "config", cfg, "build",
				     build_json());
	if (r->metrics_start == NULL)
		return diag_set(d, ST_RUNTIME, "--metrics: out of memory");
	return ST_OK;
}

void report_note(struct report *r, const char *fmt, ...)
{
	char raw[2048], line[4096];
	va_list ap;

	if (!r->root || r->quiet)
		return;
	if (r->line_open) {
		fputc('\n', r->out);
		r->line_open = 0;
	}
	va_start(ap, fmt);
	vsnprintf(raw, sizeof raw, fmt, ap);
	va_end(ap);
	diag_escape(line, sizeof line, raw); /* names from the command line, escaped */
	fprintf(r->out, "# %s\n", line);
	out_check(r);
}

void report_output_failed(struct report *r, enum report_output out, const char *why)
{
	static const char *const goes_on[] = {
		[REPORT_METRICS] = "training goes on without its records",
		[REPORT_TRACE] = "the weights and the other outputs are kept",
		[REPORT_PROMETHEUS] = "training goes on; the file is written again at the next update",
	};

	if (!r->root)
		return;
	r->lost |= out;
	if (r->warned & out)
		return;
	r->warned |= out;
	if (r->line_open) { /* a progress line redrawn on the terminal: end it first */
		fputc('\n', r->out);
		fflush(r->out);
		r->line_open = 0;
	}
	fprintf(stderr, "ddptrain: warning: %s; %s\n", why, goes_on[out]);
	fflush(stderr);
}

void report_output_ok(struct report *r, enum report_output out)
{
	r->lost &= ~(unsigned)out;
}

int report_lost(const struct report *r, char *names, size_t len)
{
	static const struct {
		enum report_output out;
		const char *flag;
	} outputs[] = {{REPORT_METRICS, "--metrics"}, {REPORT_TRACE, "--trace"},
		       {REPORT_PROMETHEUS, "--prometheus"}};
	int n = __builtin_popcount(r->lost), left = n;
	size_t o = 0;

	if (names == NULL || len == 0)
		return n;
	names[0] = '\0';
	for (size_t i = 0; i < sizeof outputs / sizeof outputs[0]; i++) {
		if (!(r->lost & outputs[i].out))
			continue;
		left--;
		o += (size_t)snprintf(names + o, o < len ? len - o : 0, "%s%s", outputs[i].flag,
				      left > 1 ? ", " : left == 1 ? " and " : "");
	}
	return n;
}

int report_due(const struct report *r)
{
	/* The clock is read only where a line can be due: not on the other ranks, nor quiet. */
	return r->root && !r->quiet && r->every_s > 0 && clock_now() - r->last_line >= r->every_s;
}

void report_step(struct report *r, const struct report_progress *p, int logged)
{
	const long left = p->total - p->step;
	double eta = p->steps_here > 0 ? p->elapsed / (double)p->steps_here * (double)left : 0.0;
	json_t *obj;

	if (!r->root)
		return;
	r->last_line = clock_now();
	if (!r->quiet && r->tty) {
		/* One line, redrawn in place; \033[K clears what a longer line left. */
		fprintf(r->out, "\r epoch %ld/%ld  step %ld/%ld (%.0f%%)  loss %.6f", p->epoch, p->epochs,
			p->step, p->total, p->total > 0 ? floor(100.0 * (double)p->step / (double)p->total) : 100.0,
			p->loss);
		if (isfinite(p->acc))
			fprintf(r->out, "  acc %.2f%%", 100.0 * p->acc);
		fprintf(r->out, "  %.0f samples/s  %.1f s  ETA %.1f s\033[K", p->samples_per_s, p->elapsed, eta);
		r->line_open = left != 0;
		if (!r->line_open)
			fputc('\n', r->out);
		fflush(r->out);
	} else if (!r->quiet) {
		if (!r->header_done) {
			fprintf(r->out, "#%7s %13s %12s", "epoch", "step", "loss");
			if (isfinite(p->acc))
				fprintf(r->out, " %8s", "acc_%");
			fprintf(r->out, " %14s %12s %10s\n", "samples/s", "elapsed_s", "eta_s");
			r->header_done = 1;
		}
		fprintf(r->out, " %7ld %6ld/%-6ld %12.6f", p->epoch, p->step, p->total, p->loss);
		if (isfinite(p->acc))
			fprintf(r->out, " %8.2f", 100.0 * p->acc);
		fprintf(r->out, " %14.0f %12.3f %10.1f\n", p->samples_per_s, p->elapsed, eta);
	}
	out_check(r);
	if (!logged)
		return;
	obj = json_pack("{s:s, s:I, s:I, s:f}", "type", "step", "step", (json_int_t)p->step, "epoch",
			(json_int_t)p->epoch, "loss", p->loss);
	if (obj != NULL && isfinite(p->acc))
		json_object_set_new(obj, "accuracy", json_real(p->acc));
	if (obj != NULL) {
		json_object_set_new(obj, "lr", json_real(p->lr));
		json_object_set_new(obj, "samples_per_s", json_real(p->samples_per_s));
		json_object_set_new(obj, "data_wait_ms", json_real(1e3 * p->data_wait_s));
		json_object_set_new(obj, "elapsed_s", json_real(p->elapsed));
		json_object_set_new(obj, "eta_s", json_real(eta));
	}
	metrics_line(r, obj);
}

void report_eval(struct report *r, long step, long epoch, double loss, double acc, size_t n)
{
	json_t *obj;

	if (!r->root)
		return;
	if (!r->quiet) {
		if (r->line_open) { /* a redrawn progress line is on the terminal */
			fputc('\n', r->out);
			r->line_open = 0;
		}
		fprintf(r->out, "# eval after step %ld (epoch %ld): validation loss %.6f", step, epoch, loss);
		if (isfinite(acc))
			fprintf(r->out, ", accuracy %.2f%% (%.0f of %zu)", 100.0 * acc, acc * (double)n, n);
		fprintf(r->out, "\n");
		fflush(r->out);
		out_check(r);
	}
	obj = json_pack("{s:s, s:I, s:I, s:f}", "type", "eval", "step", (json_int_t)step, "epoch",
			(json_int_t)epoch, "loss", loss);
	if (obj != NULL && isfinite(acc))
		json_object_set_new(obj, "accuracy", json_real(acc));
	if (obj != NULL)
		json_object_set_new(obj, "samples", json_integer((json_int_t)n));
	metrics_line(r, obj);
}

const char *const dp_phase_names[DP_NPHASES] = {
	"scatter", "replicate", "forward", "gather", "loss", "backward", "reduce", "step",
};

/* A GPU's peak device MiB as the tables' last column, or "-" on the CPU. */
static void print_dev_mib(struct report *r, const struct replica_stats *x)
{
	if (x->dev_peak_bytes > 0)
		fprintf(r->out, "%9.3f\n", (double)x->dev_peak_bytes / 1048576.0);
	else
		fprintf(r->out, "%9s\n", "-");
}

static void report_dp_replicas(struct report *r, const struct replica_stats *rep, int n, long steps,
			       double seconds)
{
	double per = steps > 0 ? 1.0 / (double)steps : 0.0;

	fprintf(r->out, "# dp per replica: ms per step in each phase, KiB moved per step, state MiB, ms per step waiting for data, TFLOP/s of its products over the run, peak device MiB\n");
	fprintf(r->out, "#%7s", "replica");
	for (int p = 0; p < DP_NPHASES; p++)
		fprintf(r->out, " %9s", dp_phase_names[p]);
	fprintf(r->out, " %10s %10s %9s %9s %9s %9s\n", "in_KiB", "out_KiB", "state_MiB", "data_wait", "TFLOP/s",
		"dev_MiB");
	for (int i = 0; i < n; i++) {
		fprintf(r->out, "#%7d", i);
		for (int p = 0; p < DP_NPHASES; p++)
			fprintf(r->out, " %9.4f", 1e3 * rep[i].seconds[p] * per);
		fprintf(r->out, " %10.1f %10.1f %9.3f %9.4f %9.4f ", rep[i].bytes_in * per / 1024.0,
			rep[i].bytes_out * per / 1024.0, (double)rep[i].state_bytes / 1048576.0,
			1e3 * rep[i].data_wait_s * per, seconds > 0 ? rep[i].flops / seconds / 1e12 : 0.0);
		print_dev_mib(r, &rep[i]);
	}
}

static void report_ddp_ranks(struct report *r, const struct replica_stats *rep, const double *rss_mib,
		      int n, long steps)
{
	double per = steps > 0 ? 1.0 / (double)steps : 0.0;

	fprintf(r->out, "# ddp per rank: ms per step, KiB its collectives send per step (as a ring sends them: an all-reduce twice its (n-1)/n, a reduce-scatter or all-gather once), state MiB, peak RSS MiB, all-reduce share of the step, ms per step waiting for data (within compute), TFLOP/s of its products, peak device MiB\n");
	fprintf(r->out, "#%7s %9s %9s %9s %10s %9s %9s %7s %9s %9s %9s\n", "rank", "compute", "ar_wait", "step",
		"sent_KiB", "state_MiB", "rss_MiB", "ar_%", "data_wait", "TFLOP/s", "dev_MiB");
	for (int i = 0; i < n; i++) {
		double step = rep[i].compute_s + rep[i].wait_s;

		fprintf(r->out, "#%7d %9.4f %9.4f %9.4f %10.1f %9.3f %9.1f %7.1f %9.4f %9.4f ", i,
			1e3 * rep[i].compute_s * per, 1e3 * rep[i].wait_s * per, 1e3 * step * per,
			rep[i].bytes_out * per / 1024.0, (double)rep[i].state_bytes / 1048576.0,
			rss_mib[i], step > 0 ? 100.0 * rep[i].wait_s / step : 0.0, 1e3 * rep[i].data_wait_s * per,
			step > 0 ? rep[i].flops / step / 1e12 : 0.0);
		print_dev_mib(r, &rep[i]);
	}
	fprintf(r->out, "# memory per rank, MiB: parameters, gradients, optimizer state (each rank's own: a shard with --zero), the working set (--zero=2: two gradient buffers; --zero=3: and the gathered layers)\n");
	fprintf(r->out, "#%7s %10s %10s %10s %10s\n", "rank", "params", "grads", "optim", "work");
	for (int i = 0; i < n; i++)
		fprintf(r->out, "#%7d %10.3f %10.3f %10.3f %10.3f\n", i, (double)rep[i].param_bytes / 1048576.0,
			(double)rep[i].grad_bytes / 1048576.0, (double)rep[i].optim_bytes / 1048576.0,
			(double)rep[i].work_bytes / 1048576.0);
}

/* nccl-tests' figures for each bucket's all-reduce, as rank 0 saw them. */
static void report_buckets(struct report *r, const struct report_summary *s)
{
	if (s->untimed != NULL) {
		fprintf(r->out, "# all-reduce per bucket: not timed: %s\n", s->untimed);
		return;
	}
	fprintf(r->out, "# all-reduce per bucket on rank 0 (launch to completion, mean over steps; busbw = algbw x 2(n-1)/n, n = %d)\n",
		s->replicas);
	fprintf(r->out, "#%7s %7s %12s %7s %10s %10s %11s %11s %11s\n", "bucket", "layers", "bytes",
		"count", "time_ms", "best_ms", "algbw_GB/s", "busbw_GB/s", "best_busbw");
	for (int b = 0; b < s->nbuckets; b++) {
		const struct bucket_stats *x = &s->buckets[b];
		double mean = x->count > 0 ? x->sum_s / (double)x->count : 0.0;
		double algbw = mean > 0 ? x->bytes / mean / 1e9 : 0.0;
		double best = x->min_s > 0 ? x->bytes / x->min_s / 1e9 : 0.0;
		char layers[32];

		if (x->lo < 0) /* frozen layers: a bucket of the loss and stop slots only */
			snprintf(layers, sizeof layers, "slots");
		else /* counted from 1, as --freeze counts them */
			snprintf(layers, sizeof layers, "%d-%d", x->hi + 1, x->lo + 1);
		fprintf(r->out, "#%7d %7s %12.0f %7ld %10.4f %10.4f %11.3f %11.3f %11.3f\n", b, layers,
			x->bytes, x->count, 1e3 * mean, 1e3 * x->min_s, algbw,
			report_busbw(algbw, s->replicas), report_busbw(best, s->replicas));
	}
}

/* Each rank's step-time percentiles and the slowest rank by compute time. */
static void report_stragglers(struct report *r, const struct report_summary *s)
{
	double ratio;
	int worst = straggler_slowest(s->strag, s->replicas, &ratio);

	fprintf(r->out, "# step time per rank (ms): percentiles over the steps, and compute (the step less its all-reduce wait)\n");
	fprintf(r->out, "#%7s %10s %10s %10s %12s  %s\n", "rank", "step_p50", "step_p99", "step_max",
		"compute_p50", "host");
	for (int i = 0; i < s->replicas; i++) {
		const struct straggler_rank *x = &s->strag[i];

		fprintf(r->out, "#%7d %10.4f %10.4f %10.4f %12.4f  %s\n", i, 1e3 * x->step_p50,
			1e3 * x->step_p99, 1e3 * x->step_max, 1e3 * x->busy_p50, x->host);
	}
	fprintf(r->out, "# slowest rank: %d on %s, compute p50 %.4f ms per step, %.2fx the median rank's\n",
		worst, s->strag[worst].host, 1e3 * s->strag[worst].busy_p50, ratio);
}

double report_peak_rss_mib(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru) != 0)
		return 0.0;
	return (double)ru.ru_maxrss / 1024.0; /* KiB on Linux */
}

/* The mean over ranks (replicas) of the products' TFLOP/s over the run. */
static double summary_tflops(const struct report_summary *s)
{
	double f = 0.0;

	for (int i = 0; i < s->replicas; i++)
		f += s->rep[i].flops;
	return s->seconds > 0 && s->replicas > 0 ? f / s->replicas / s->seconds / 1e12 : 0.0;
}

/* The per-replica (dp) or per-rank (ddp) figures, as a JSON array. */
static json_t *metrics_per_replica(const struct report_summary *s)
{
	json_t *arr = json_array();
	double per = s->steps > 0 ? 1.0 / (double)s->steps : 0.0;

	for (int i = 0; i < s->replicas; i++) {
		const struct replica_stats *x = &s->rep[i];
		json_t *o = json_pack("{s:i, s:f, s:f, s:I}", "index", i, "bytes_in_per_step",
				      x->bytes_in * per, "bytes_out_per_step", x->bytes_out * per,
				      "state_bytes", (json_int_t)x->state_bytes);
		const double busy = strcmp(s->mode, "dp") == 0 ? s->seconds : x->compute_s + x->wait_s;

		json_object_set_new(o, "flops_per_step", json_real(x->flops * per));
		json_object_set_new(o, "tflops", json_real(busy > 0 ? x->flops / busy / 1e12 : 0.0));
		if (x->dev_peak_bytes > 0)
			json_object_set_new(o, "device_peak_bytes", json_integer((json_int_t)x->dev_peak_bytes));

		json_object_set_new(o, "data_wait_ms_per_step", json_real(1e3 * x->data_wait_s * per));
		if (strcmp(s->mode, "ddp") == 0) {
			json_object_set_new(o, "param_bytes", json_integer((json_int_t)x->param_bytes));
			json_object_set_new(o, "grad_bytes", json_integer((json_int_t)x->grad_bytes));
			json_object_set_new(o, "optim_bytes", json_integer((json_int_t)x->optim_bytes));
			json_object_set_new(o, "work_bytes", json_integer((json_int_t)x->work_bytes));
		}
		if (strcmp(s->mode, "dp") == 0) {
			for (int p = 0; p < DP_NPHASES; p++) {
				char key[32];

				snprintf(key, sizeof key, "%s_ms_per_step", dp_phase_names[p]);
				json_object_set_new(o, key, json_real(1e3 * x->seconds[p] * per));
			}
		} else {
			json_object_set_new(o, "compute_ms_per_step", json_real(1e3 * x->compute_s * per));
			json_object_set_new(o, "allreduce_wait_ms_per_step", json_real(1e3 * x->wait_s * per));
			json_object_set_new(o, "peak_rss_mib", json_real(s->rss_mib[i]));
		}
		json_array_append_new(arr, o);
	}
	return arr;
}

/* The summary's all-reduce bandwidth per bucket and the step-time percentiles per rank. */
static void metrics_observers(json_t *sum, const struct report_summary *s)
{
	if (sum == NULL)
		return;
	if (s->nbuckets > 0) {
		json_t *arr = json_array();

		for (int b = 0; b < s->nbuckets; b++) {
			const struct bucket_stats *x = &s->buckets[b];
			double mean = x->count > 0 ? x->sum_s / (double)x->count : 0.0;
			double algbw = mean > 0 ? x->bytes / mean : 0.0;

			json_array_append_new(arr, json_pack("{s:i, s:i, s:i, s:f, s:I, s:f, s:f, s:f, s:f}",
							     "bucket", b, "first_layer", x->lo < 0 ? 0 : x->lo + 1,
							     "last_layer", x->hi < 0 ? 0 : x->hi + 1,
							     "bytes", x->bytes, "count", (json_int_t)x->count,
							     "mean_s", mean, "min_s", x->min_s,
							     "algbw_bytes_per_s", algbw, "busbw_bytes_per_s",
							     report_busbw(algbw, s->replicas)));
		}
		json_object_set_new(sum, "allreduce_buckets", arr);
	}
	if (s->strag != NULL) {
		json_t *arr = json_array();
		double ratio;
		int worst = straggler_slowest(s->strag, s->replicas, &ratio);

		for (int i = 0; i < s->replicas; i++) {
			const struct straggler_rank *x = &s->strag[i];

			json_array_append_new(arr, json_pack("{s:i, s:o, s:f, s:f, s:f, s:f}", "rank", i, "host",
							     json_text(x->host), "step_p50_s", x->step_p50, "step_p99_s",
							     x->step_p99, "step_max_s", x->step_max, "compute_p50_s",
							     x->busy_p50));
		}
		json_object_set_new(sum, "step_times", arr);
		json_object_set_new(sum, "slowest_rank", json_pack("{s:i, s:o, s:f}", "rank", worst, "host",
								   json_text(s->strag[worst].host), "ratio_to_median",
								   ratio));
	}
}

enum status report_finish(struct report *r, const struct report_summary *s, int success,
			  struct diag *d)
{
	enum status st = ST_OK;

	if (!r->root)
		return ST_OK;
	if (r->line_open) {
		fputc('\n', r->out);
		r->line_open = 0;
	}
	if (success && !r->quiet) {
		if (strcmp(s->mode, "dp") == 0)
			report_dp_replicas(r, s->rep, s->replicas, s->steps, s->seconds);
		else
			report_ddp_ranks(r, s->rep, s->rss_mib, s->replicas, s->steps);
		if (s->nbuckets > 0 && s->replicas > 1)
			report_buckets(r, s);
		if (s->strag != NULL && s->replicas > 1)
			report_stragglers(r, s);
		fprintf(r->out, "# done: %ld steps, %ld epochs in %.3f s, %.0f samples/s\n", s->steps,
			s->epochs, s->seconds, s->samples_per_s);
		fprintf(r->out, "# loss: first %.6f, final %.6f\n", s->first_loss, s->final_loss);
		if (strcmp(s->mode, "ddp") == 0)
			fprintf(r->out, "# all-reduce wait: %.1f%% of the step on rank 0 (per rank: ar_%% above)\n",
				100.0 * s->comm_wait_share);

		fprintf(r->out, "# summary: mode=%s replicas=%d steps=%ld seconds=%.6f samples_per_s=%.1f ms_per_step=%.6f state_mib=%.3f tflops_per_rank=%.4f\n",
			s->mode, s->replicas, s->steps, s->seconds, s->samples_per_s,
			s->steps > 0 ? 1e3 * s->seconds / (double)s->steps : 0.0, s->state_mib,
			summary_tflops(s));
	}
	if (fflush(r->out) != 0 || ferror(r->out))
		out_check(r);
	if (r->out_err != 0 && r->out_err != EPIPE)
		st = diag_errno(d, r->out_err, "standard output: write error");
	if (r->metrics_path == NULL)
		return st;
	if (success) {
		json_t *sumj = json_pack("{s:s, s:s, s:i, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:o}",
					 "type", "summary", "mode", s->mode, "replicas", s->replicas,
					 "steps", (json_int_t)s->steps, "epochs", (json_int_t)s->epochs,
					 "seconds", s->seconds, "samples_per_s", s->samples_per_s,
					 "first_loss", s->first_loss, "final_loss", s->final_loss,
					 "comm_wait_share", s->comm_wait_share, "per_replica",
					 metrics_per_replica(s));

		if (sumj != NULL)
			json_object_set_new(sumj, "tflops_per_rank", json_real(summary_tflops(s)));
		metrics_observers(sumj, s);
		if (sumj != NULL)
			json_object_set_new(sumj, "build", build_json());
		metrics_line(r, sumj);
	}
	if (r->metrics_fd >= 0 && r->metrics_err == 0 && fsync(r->metrics_fd) != 0 && errno != EINVAL) {
		r->metrics_err = errno;
		metrics_failed(r, "fsync");
	}
	r->finished = 1;
	return st;
}

void report_end(struct report *r, int exit_code, const char *why, long step)
{
	json_t *rec;

	if (r->metrics_path == NULL || r->ended || (r->finished && exit_code == 0))
		return;
	r->ended = 1;
	if (exit_code == 2 && r->metrics_fd < 0)
		return; /* refused before its first record: the file is not touched */
	rec = json_pack("{s:s, s:i, s:o?}", "type", "end", "exit_code", exit_code, "reason", json_text(why));
	if (rec != NULL && step >= 0) /* (jansson 2.10 has no "o*", which would leave it out) */
		json_object_set_new(rec, "step", json_integer(step));
	metrics_line(r, rec);
}

void report_free(struct report *r)
{
	if (r->metrics_fd >= 0)
		close(r->metrics_fd);
	r->metrics_fd = -1;
	json_decref(r->metrics_start);
	r->metrics_start = NULL;
	free(r->metrics_path);
	r->metrics_path = NULL;
}

void report_ranks(struct report *r, struct world *w, const char *device, const char *path)
{
	struct rank_line {
		int pid, local;
		char host[64], device[160], path[96];
	} mine = {0}, *all = NULL;
	struct diag ignore = {0};

	mine.pid = (int)getpid();
	mine.local = w->local_rank;
	snprintf(mine.host, sizeof mine.host, "%s", w->host);
	snprintf(mine.device, sizeof mine.device, "%s", device);
	snprintf(mine.path, sizeof mine.path, "%s", path);
	if (w->rank == 0)
		all = calloc((size_t)w->size, sizeof *all);
	if (world_gather(w, &mine, sizeof mine, all, &ignore) == ST_OK && all != NULL)
		for (int i = 0; i < w->size; i++)
			report_note(r, "  rank %3d: pid %7d on %s, node-local rank %d, device %s, backend %s",
				    i, all[i].pid, all[i].host, all[i].local, all[i].device, all[i].path);
	free(all);
}
