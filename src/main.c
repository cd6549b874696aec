/*
 * main.c - ddptrain: wires the modules together and chooses the exit code.
 *
 * Parse, set up, train, save, tear down. After every phase that can fail on
 * some ranks only, the ranks agree on the outcome (world_agree) before anyone
 * enters the next collective, so all exit together with the same code and
 * the message is printed once, by the lowest rank that saw the problem.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"    /* backend_cpu_ops, backend_init, backend_free */
#include "comm.h"       /* comm_mpi_init, comm_free */
#include "config.h"     /* PACKAGE_VERSION */
#include "data.h"       /* data_init_synthetic, data_init_npy, data_free */
#include "model.h"      /* model_init, model_init_host, model_tensor_name, model_free */
#include "options.h"    /* options_parse, options_print_help */
#include "outfile.h"    /* outfile_check */
#include "report.h"     /* report_init, report_note, report_finish, report_free */
#include "safetensors.h" /* st_open, st_find, st_read_f32, st_save */
#include "status.h"     /* enum status, struct diag, status_exit_code */
#include "trainer.h"    /* trainer_ddp */
#include "world.h"      /* world_init, world_agree, world_check_config, world_free */

struct app {
	struct world w;
	struct options o;
	struct dataset ds;
	struct backend be;
	struct comm c;
	struct model m;
	struct report r;
	struct train_result res;
	struct diag d;
};

/* All ranks agree on st; the reporting rank prints the message. */
static enum status agree(struct app *a, enum status st)
{
	int reporter = 0;
	enum status all = world_agree(&a->w, st, &reporter);

	if (all != ST_OK && all != ST_STOP && reporter) {
		const char *msg = a->d.st != ST_OK ? a->d.msg : "failed";

		if (a->w.rank == 0)
			fprintf(stderr, "ddptrain: %s\n", msg);
		else
			fprintf(stderr, "ddptrain: rank %d: %s\n", a->w.rank, msg);
		fflush(stderr);
	}
	return all;
}

/* Modes, devices and backends this build can run; the rest fail clearly. */
static enum status check_runnable(struct app *a, struct diag *d)
{
	struct options *o = &a->o;

	if (o->mode == MODE_DP && a->w.size > 1)
		return diag_set(d, ST_USAGE, "--mode=dp runs in one process (one thread per replica), but %d MPI ranks were started: run it without mpirun, or use --mode=ddp for one process per replica",
				a->w.size);
	if (o->mode == MODE_DP && o->replicas == 0)
		o->replicas = 2; /* no GPUs in this build: two CPU replicas */
	if (o->device == DEVICE_CUDA)
		return diag_set(d, ST_RUNTIME, "--device=cuda: this ddptrain has no CUDA backend; use --device=cpu");
	if (o->comm == COMM_NCCL)
		return diag_set(d, ST_RUNTIME, "--backend=nccl: this ddptrain has no NCCL backend; use --backend=mpi");
	return ST_OK;
}

/* "--flag=value" lines of every setting that must be equal on all ranks. */
static void config_text(const struct app *a, char *buf, size_t len)
{
	const struct options *o = &a->o;
	char widths[1024];

	options_format_widths(o, widths, sizeof widths);
	snprintf(buf, len,
		 "--layers=%s\n--batch-size=%ld\n--epochs=%ld\n--max-steps=%ld\n--lr=%.17g\n"
		 "--momentum=%.17g\n--weight-decay=%.17g\n--grad-accum=%ld\n--seed=%llu\n"
		 "data=%s %zu x (%d, %d)\n--shuffle=%d\n--drop-last=%d\n--mode=%s\n--device=%s\n"
		 "--backend=%s\n--bucket-mb=%.17g\n--no-overlap=%d\n--replicas=%d\n",
		 widths, o->batch_size, o->epochs, o->max_steps, o->lr, o->momentum,
		 o->weight_decay, o->grad_accum, (unsigned long long)o->seed,
		 a->ds.synthetic ? "synthetic" : "npy", a->ds.n, a->ds.in, a->ds.out, o->shuffle,
		 o->drop_last, options_mode_names[o->mode], options_device_names[o->device],
		 options_comm_names[o->comm], o->bucket_mb, !o->overlap, o->replicas);
}

/* Rank 0's starting weights: --init, or nn.Linear's init from --seed. */
static enum status initial_weights(struct app *a, float *host)
{
	struct model *m = &a->m;
	struct st_file f;
	enum status st;
	char what[600];

	if (a->o.init == NULL) {
		model_init_host(m, a->o.seed, host);
		return ST_OK;
	}
	st = st_open(&f, a->o.init, "--init", &a->d);
	if (st != ST_OK)
		return st;
	snprintf(what, sizeof what, "--init: %s", a->o.init);
	for (int k = 0; k < 2 * m->nlayers && st == ST_OK; k++) {
		int l = k / 2, out = m->widths[l + 1], in = m->widths[l];
		const struct st_tensor *t;
		char name[32];

		model_tensor_name(k, name, sizeof name);
		t = st_find(&f, name);
		if (t == NULL) {
			st = diag_set(&a->d, ST_RUNTIME, "%s: no tensor '%s' (expected for --layers)", what, name);
		} else if (k % 2 == 0 && (t->ndim != 2 || t->shape[0] != out || t->shape[1] != in)) {
			st = diag_set(&a->d, ST_RUNTIME, "%s: tensor '%s' has the wrong shape; --layers needs [%d, %d]",
				      what, name, out, in);
		} else if (k % 2 == 1 && (t->ndim != 1 || t->shape[0] != out)) {
			st = diag_set(&a->d, ST_RUNTIME, "%s: tensor '%s' has the wrong shape; --layers needs [%d]",
				      what, name, out);
		} else {
			st = st_read_f32(&f, t, host + (k % 2 ? m->b_off[l] : m->w_off[l]),
					 (size_t)out * (k % 2 ? 1 : (size_t)in), what, &a->d);
		}
	}
	for (size_t i = 0; i < m->nparams && st == ST_OK; i++)
		if (!isfinite(host[i]))
			st = diag_set(&a->d, ST_RUNTIME, "%s: weights contain a non-finite value", what);
	st_close(&f);
	return st;
}

/* Rank 0 writes the final weights atomically. */
static enum status save_weights(struct app *a, const float *host)
{
	struct model *m = &a->m;
	struct st_entry e[2 * OPT_MAX_LAYERS];
	char names[2 * OPT_MAX_LAYERS][32];
	const char *meta[] = {"format", "pt", "producer", "ddptrain " PACKAGE_VERSION};

	for (int k = 0; k < 2 * m->nlayers; k++) {
		int l = k / 2;

		model_tensor_name(k, names[k], sizeof names[k]);
		e[k].name = names[k];
		e[k].ndim = k % 2 ? 1 : 2;
		e[k].shape[0] = m->widths[l + 1];
		e[k].shape[1] = m->widths[l];
		e[k].data = host + (k % 2 ? m->b_off[l] : m->w_off[l]);
	}
	return st_save(a->o.save, "--save", e, (size_t)(2 * m->nlayers), meta, 2, &a->d);
}

/* Before any work, rank 0 checks that --save and --metrics can be written
 * (directory takes a file, target a regular file, room for the weights). */
static enum status check_outputs(struct app *a)
{
	const struct options *o = &a->o;
	size_t weight_bytes = 0;
	enum status st = ST_OK;

	for (int l = 0; l < o->nlayers; l++)
		weight_bytes += 4 * ((size_t)o->widths[l] + 1) * (size_t)o->widths[l + 1];
	if (a->w.rank == 0 && o->save != NULL)
		st = outfile_check(o->save, "--save", weight_bytes, &a->d);
	if (a->w.rank == 0 && o->metrics != NULL && st == ST_OK)
		st = outfile_check(o->metrics, "--metrics", 0, &a->d);
	return agree(a, st);
}

static enum status setup(struct app *a)
{
	struct options *o = &a->o;
	char text[4096];
	float *host = NULL;
	enum status st;

	st = check_outputs(a);
	if (st != ST_OK)
		return st;
	if (o->inputs != NULL)
		st = data_init_npy(&a->ds, o->inputs, o->targets, o->widths[0], o->widths[o->nlayers], &a->d);
	else
		st = data_init_synthetic(&a->ds, o->seed, (size_t)o->samples, o->widths[0],
					 o->widths[o->nlayers], &a->d);
	st = agree(a, st);
	if (st != ST_OK)
		return st;
	config_text(a, text, sizeof text);
	st = agree(a, world_check_config(&a->w, text, &a->d));
	if (st != ST_OK)
		return st;

	st = backend_init(&a->be, &backend_cpu_ops, &a->d);
	if (st == ST_OK)
		st = comm_mpi_init(&a->c, &a->w, &a->d);
	if (st == ST_OK)
		st = model_init(&a->m, &a->be, o->widths, o->nlayers, (int)o->batch_size,
				o->momentum != 0.0, &a->d);
	if (st == ST_OK)
		st = report_init(&a->r, a->w.rank == 0, o->quiet, o->metrics, &a->d);
	if (st == ST_OK && a->w.rank == 0) {
		host = malloc(a->m.nparams * sizeof *host);
		st = host ? initial_weights(a, host) : diag_set(&a->d, ST_RUNTIME, "out of memory");
		if (st == ST_OK)
			a->be.ops->to_device(a->be.ctx, a->m.params, host, a->m.nparams);
	}
	free(host);
	st = agree(a, st);
	if (st != ST_OK)
		return st;
	/* Every replica starts from rank 0's weights. */
	return agree(a, a->c.ops->bcast(a->c.ctx, a->m.params, a->m.nparams, 0, &a->d));
}

/* Replicas of this run: MPI ranks (ddp) or worker threads (dp). */
static int replicas(const struct app *a)
{
	return a->o.mode == MODE_DP ? a->o.replicas : a->w.size;
}

static void print_header(struct app *a)
{
	const int dp = a->o.mode == MODE_DP;
	char widths[1024];

	options_format_widths(&a->o, widths, sizeof widths);
	if (dp)
		report_note(&a->r, "ddptrain %s: mode dp, 1 process, %d replicas on worker threads, device %s",
			    PACKAGE_VERSION, a->o.replicas, a->be.ops->name);
	else
		report_note(&a->r, "ddptrain %s: mode ddp, %d rank%s (%d on this node), device %s, backend %s",
			    PACKAGE_VERSION, a->w.size, a->w.size == 1 ? "" : "s", a->w.local_size,
			    a->be.ops->name, a->c.ops->name);
	report_note(&a->r, "model %s (%zu parameters), data %s (%zu samples), batch %ld per %s x %d %ss x %ld accum = %ld per step",
		    widths, a->m.nparams, a->ds.synthetic ? "synthetic" : a->o.inputs, a->ds.n,
		    a->o.batch_size, dp ? "replica" : "rank", replicas(a), dp ? "replica" : "rank",
		    a->o.grad_accum, a->o.batch_size * replicas(a) * a->o.grad_accum);
	report_note(&a->r, "SGD lr %g momentum %g weight decay %g, %ld epochs, %s, seed %llu",
		    a->o.lr, a->o.momentum, a->o.weight_decay, a->o.epochs,
		    a->o.shuffle ? "shuffled" : "not shuffled", (unsigned long long)a->o.seed);
}

/* Fill the summary; in ddp mode rank 0 gathers every rank's figures into ranks/rss. */
static enum status summarize(struct app *a, struct report_summary *sum, struct replica_stats *ranks,
			     double *rss)
{
	double mine = report_peak_rss_mib(), state = 0.0;
	enum status st = ST_OK;

	sum->mode = options_mode_names[a->o.mode];
	sum->replicas = replicas(a);
	sum->steps = a->res.steps;
	sum->epochs = a->res.epochs;
	sum->seconds = a->res.seconds;
	sum->samples_per_s = a->res.seconds > 0 ? a->res.samples / a->res.seconds : 0.0;
	sum->first_loss = a->res.first_loss;
	sum->final_loss = a->res.final_loss;
	sum->comm_wait_share = a->res.seconds > 0 ? a->res.wait_s / a->res.seconds : 0.0;
	if (a->o.mode == MODE_DP) {
		sum->rep = a->res.rep;
	} else {
		st = world_gather(&a->w, &a->res.rep[0], sizeof a->res.rep[0], ranks, &a->d);
		if (st == ST_OK)
			st = world_gather(&a->w, &mine, sizeof mine, rss, &a->d);
		sum->rep = ranks;
		sum->rss_mib = rss;
	}
	for (int i = 0; i < sum->replicas && a->w.rank == 0; i++)
		state = (double)sum->rep[i].state_bytes > state ? (double)sum->rep[i].state_bytes : state;
	sum->state_mib = state / 1048576.0;
	return st;
}

static enum status run(struct app *a)
{
	struct report_summary sum = {0};
	struct replica_stats *ranks = NULL;
	double *rss = NULL;
	float *host = NULL;
	enum status st;

	print_header(a);
	if (a->o.mode == MODE_DP)
		st = trainer_dp(&a->o, a->o.replicas, &a->m, &a->ds, &a->r, &a->res, &a->d);
	else
		st = trainer_ddp(&a->o, &a->w, &a->m, &a->c, &a->ds, &a->r, &a->res, &a->d);
	st = agree(a, st);
	if (st != ST_OK)
		return st;
	if (a->o.save != NULL && a->w.rank == 0) {
		host = malloc(a->m.nparams * sizeof *host);
		if (host == NULL) {
			st = diag_set(&a->d, ST_RUNTIME, "out of memory");
		} else {
			a->be.ops->to_host(a->be.ctx, host, a->m.params, a->m.nparams);
			st = save_weights(a, host);
		}
		free(host);
	}
	st = agree(a, st);
	if (st != ST_OK)
		return st;
	ranks = calloc((size_t)a->w.size, sizeof *ranks);
	rss = calloc((size_t)a->w.size, sizeof *rss);
	st = ranks && rss ? summarize(a, &sum, ranks, rss) : diag_set(&a->d, ST_RUNTIME, "out of memory");
	st = agree(a, st);
	if (st == ST_OK)
		st = agree(a, report_finish(&a->r, &sum, 1, &a->d));
	free(ranks);
	free(rss);
	return st;
}

int main(int argc, char **argv)
{
	struct app a;
	enum status st;

	memset(&a, 0, sizeof a);
	st = world_init(&a.w, &argc, &argv, &a.d);
	if (st != ST_OK) {
		fprintf(stderr, "ddptrain: %s\n", a.d.msg);
		return status_exit_code(st);
	}
	st = agree(&a, options_parse(&a.o, argc, argv, &a.d));
	if (st == ST_OK && (a.o.help || a.o.version)) {
		if (a.w.rank == 0 && a.o.help)
			options_print_help(stdout);
		else if (a.w.rank == 0)
			printf("ddptrain %s\n", PACKAGE_VERSION);
		st = ST_STOP;
	}
	if (st == ST_OK)
		st = agree(&a, check_runnable(&a, &a.d));
	if (st == ST_OK)
		st = setup(&a);
	if (st == ST_OK)
		st = run(&a);

	report_free(&a.r);
	model_free(&a.m);
	comm_free(&a.c);
	backend_free(&a.be);
	data_free(&a.ds);
	world_free(&a.w);
	return status_exit_code(st);
}
