/* report.c - progress lines, summary and the JSON Lines metrics file. */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "report.h"

enum status report_init(struct report *r, int root, int quiet, const char *metrics_path,
			struct diag *d)
{
	int fd;

	memset(r, 0, sizeof *r);
	r->root = root;
	r->quiet = quiet;
	r->out = stdout;
	if (!root || metrics_path == NULL)
		return ST_OK;
	r->metrics_path = strdup(metrics_path);
	r->metrics_tmp = malloc(strlen(metrics_path) + 16);
	if (r->metrics_path == NULL || r->metrics_tmp == NULL)
		return diag_set(d, ST_RUNTIME, "--metrics: out of memory");
	sprintf(r->metrics_tmp, "%s.tmp.XXXXXX", metrics_path);
	fd = mkstemp(r->metrics_tmp);
	if (fd < 0) {
		free(r->metrics_tmp);
		r->metrics_tmp = NULL;
		return diag_errno(d, errno, "--metrics: %s: cannot create a file beside it", metrics_path);
	}
	r->metrics = fdopen(fd, "w");
	if (r->metrics == NULL) {
		close(fd);
		return diag_errno(d, errno, "--metrics: %s", metrics_path);
	}
	return ST_OK;
}

void report_note(struct report *r, const char *fmt, ...)
{
	va_list ap;

	if (!r->root || r->quiet)
		return;
	fputs("# ", r->out);
	va_start(ap, fmt);
	vfprintf(r->out, fmt, ap);
	va_end(ap);
	fputc('\n', r->out);
}

static void metrics_line(struct report *r, json_t *obj)
{
	if (r->metrics != NULL && obj != NULL) {
		json_dumpf(obj, r->metrics, JSON_COMPACT | JSON_PRESERVE_ORDER);
		fputc('\n', r->metrics);
	}
	json_decref(obj);
}

void report_step(struct report *r, long epoch, long step, long total, double loss,
		 double samples_per_s, double elapsed)
{
	if (!r->root)
		return;
	if (!r->quiet) {
		if (!r->header_done) {
			fprintf(r->out, "#%7s %12s %12s %14s %12s\n", "epoch", "step", "loss", "samples/s",
				"elapsed_s");
			r->header_done = 1;
		}
		fprintf(r->out, " %7ld %5ld/%-6ld %12.6f %14.0f %12.3f\n", epoch, step, total, loss,
			samples_per_s, elapsed);
	}
	metrics_line(r, json_pack("{s:s, s:I, s:I, s:f, s:f, s:f}", "type", "step", "step",
				  (json_int_t)step, "epoch", (json_int_t)epoch, "loss", loss,
				  "samples_per_s", samples_per_s, "elapsed_s", elapsed));
}

enum status report_finish(struct report *r, const struct report_summary *s, int success,
			  struct diag *d)
{
	enum status st = ST_OK;

	if (!r->root)
		return ST_OK;
	if (success && !r->quiet) {
		fprintf(r->out, "# done: %ld steps, %ld epochs in %.3f s, %.0f samples/s\n", s->steps,
			s->epochs, s->seconds, s->samples_per_s);
		fprintf(r->out, "# loss: first %.6f, final %.6f\n", s->first_loss, s->final_loss);
		fprintf(r->out, "# all-reduce wait: %.1f%% of step time on rank 0\n",
			100.0 * s->comm_wait_share);
	}
	fflush(r->out);
	if (r->metrics == NULL)
		return ST_OK;
	if (success) {
		metrics_line(r, json_pack("{s:s, s:I, s:I, s:f, s:f, s:f, s:f, s:f}", "type", "summary",
					  "steps", (json_int_t)s->steps, "epochs", (json_int_t)s->epochs,
					  "seconds", s->seconds, "samples_per_s", s->samples_per_s,
					  "first_loss", s->first_loss, "final_loss", s->final_loss,
					  "comm_wait_share", s->comm_wait_share));
		if (fflush(r->metrics) != 0 || fsync(fileno(r->metrics)) != 0)
			st = diag_errno(d, errno, "--metrics: %s: write", r->metrics_path);
	}
	if (fclose(r->metrics) != 0 && st == ST_OK && success)
		st = diag_errno(d, errno, "--metrics: %s: close", r->metrics_path);
	r->metrics = NULL;
	if (success && st == ST_OK && rename(r->metrics_tmp, r->metrics_path) != 0)
		st = diag_errno(d, errno, "--metrics: %s: rename", r->metrics_path);
	if (!success || st != ST_OK)
		unlink(r->metrics_tmp);
	free(r->metrics_tmp);
	r->metrics_tmp = NULL;
	return st;
}

void report_free(struct report *r)
{
	if (r->metrics != NULL) {
		fclose(r->metrics);
		r->metrics = NULL;
	}
	if (r->metrics_tmp != NULL)
		unlink(r->metrics_tmp);
	free(r->metrics_tmp);
	free(r->metrics_path);
	r->metrics_tmp = NULL;
	r->metrics_path = NULL;
}
