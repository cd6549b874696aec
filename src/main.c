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
#include <unistd.h>

#include "backend.h"    /* backend_cpu_ops, backend_init, backend_free */
#include "checkpoint.h" /* checkpoint_save, checkpoint_load, checkpoint_config_diff */
#include "comm.h"       /* comm_free */
#include "comm_mpi.h"   /* comm_mpi_init, comm_mpi_path_name */
#include "config.h"     /* PACKAGE_VERSION */
#include "data.h"       /* data_init_synthetic, data_init_npy, data_free */
#include "model.h"      /* model_init, model_init_host, model_tensor_name, model_free */
#include "options.h"    /* options_parse, options_print_help */
#include "placement.h"  /* placement_decide: CPU or GPU, MPI or NCCL */
#include "outfile.h"    /* outfile_check */
#include "report.h"     /* report_init, report_note, report_finish, report_free */
#include "safetensors.h" /* st_open, st_find, st_read_f32, st_save */
#include "signals.h"    /* signals_install */
#include "status.h"     /* enum status, struct diag, status_exit_code */
#include "trainer.h"    /* trainer_ddp */
#include "world.h"      /* world_init, world_agree, world_check_config, world_free */

struct app {
	struct world w;
	struct options o;
	struct placement pl;
	struct dataset ds;
	struct backend_config cfg;
	struct backend be;
	struct comm c;
	struct model m;
	struct report r;
	struct train_result res;
	struct train_ctl ctl;
	float *ckpt_params, *ckpt_mom; /* rank 0: host copies for checkpoints */
	int reported;       /* the current failure was printed already */
	struct diag d;
};

/* All ranks agree on st; the reporting rank prints the message. */
static enum status agree(struct app *a, enum status st)
{
	int reporter = 0;
	enum status all = world_agree(&a->w, st, &reporter);

	if (all != ST_OK && all != ST_STOP && all != ST_INTERRUPTED && reporter && !a->reported) {
		const char *msg = a->d.st != ST_OK ? a->d.msg : "failed";

		if (a->w.rank == 0)
			fprintf(stderr, "ddptrain: %s\n", msg);
		else
			fprintf(stderr, "ddptrain: rank %d: %s\n", a->w.rank, msg);
		fflush(stderr);
	}
	if (all == ST_STOP && reporter && !a->reported) {
		/* --help or --version, answered once, by the lowest rank that asked */
		if (a->o.help)
			options_print_help(stdout);
		else
			options_print_version(stdout);
		fflush(stdout);
	}
	if (all != ST_OK)
		a->reported = 1; /* the same failure, passed up, is not printed again */
	return all;
}

/* Modes, devices and backends this build can run; the rest fail clearly. */
static enum status check_runnable(struct app *a, struct diag *d)
{
	struct options *o = &a->o;

	if (o->mode == MODE_DP && a->w.size > 1)
		return diag_set(d, ST_USAGE, "--mode=dp runs in one process (one thread per replica), but %d MPI ranks were started: run it without mpirun, or use --mode=ddp for one process per replica",
				a->w.size);
	return ST_OK;
}


/* The settings a checkpoint must share with the run that resumes it. */
static void resume_text(const struct app *a, char *buf, size_t len)
{
	const struct options *o = &a->o;
	char widths[1024];

	options_format_widths(o, widths, sizeof widths);
	snprintf(buf, len,
		 "--layers=%s\n--batch-size=%ld\n--lr=%.9g\n--momentum=%.9g\n--weight-decay=%.9g\n"
		 "--grad-accum=%ld\n--seed=%llu\ndata=%s %zu x (%d, %d)\n--shuffle=%d\n--drop-last=%d\n"
		 "--mode=%s\n",
		 widths, o->batch_size, o->lr, o->momentum, o->weight_decay, o->grad_accum,
		 (unsigned long long)o->seed, a->ds.synthetic ? "synthetic" : "npy", a->ds.n, a->ds.in,
		 a->ds.out, o->shuffle, o->drop_last, options_mode_names[o->mode]);
}

static int replicas(const struct app *a);

/* "--flag=value" lines of every setting that must be equal on all ranks: those a
 * checkpoint must share, and those that shape the run. */
static void config_text(const struct app *a, char *buf, size_t len)
{
	const struct options *o = &a->o;
	size_t used;

	resume_text(a, buf, len);
	used = strlen(buf);
	snprintf(buf + used, len - used,
		 "--epochs=%ld\n--max-steps=%ld\n--device=%s\n--backend=%s\n--bucket-mb=%.9g\n"
		 "--no-overlap=%d\n--replicas=%d\n--tf32=%d\n--checkpoint-every=%ld\n--resume=%d\n",
		 o->epochs, o->max_steps, options_device_names[o->device], options_comm_names[o->comm],
		 o->bucket_mb, !o->overlap, o->replicas, o->tf32, o->checkpoint_every,
		 o->resume != NULL);
}

/* train_ctl.checkpoint: rank 0 writes, every rank learns the outcome. */
static enum status write_checkpoint(void *arg, long step, long epoch, long next_mb, struct diag *d)
{
	struct app *a = arg;
	struct ckpt_pos pos = {step, epoch, next_mb, replicas(a)};
	enum status st = ST_OK;
	char text[2048];

	if (a->w.rank == 0) {
		resume_text(a, text, sizeof text);
		a->be.ops->to_host(a->be.ctx, a->ckpt_params, a->m.params, a->m.nparams);
		if (a->m.mom != NULL)
			a->be.ops->to_host(a->be.ctx, a->ckpt_mom, a->m.mom, a->m.nparams);
		st = checkpoint_save(a->o.checkpoint, (int)a->o.keep_checkpoints, &a->m, a->ckpt_params,
				     a->m.mom ? a->ckpt_mom : NULL, &pos, text, d);
	}
	return agree(a, st);
}

/* --resume: rank 0 reads and checks the checkpoint; every rank gets the position and
 * (through the weight broadcast that follows) the weights and momentum. */
static enum status resume(struct app *a)
{
	struct ckpt_pos pos = {0};
	char want[2048];
	enum status st = ST_OK;

	if (a->w.rank == 0) {
		resume_text(a, want, sizeof want);
		st = checkpoint_load(a->o.resume, &a->m, want, a->ckpt_params, a->ckpt_mom, &pos, &a->d);
		if (st == ST_OK && pos.world != replicas(a) && pos.next_mb != 0)
			st = diag_set(&a->d, ST_USAGE,
				      "--resume: %s was written by %d replicas in the middle of epoch %ld (next micro-batch %ld); resume it with %d, or from a checkpoint taken at an epoch boundary",
				      a->o.resume, pos.world, pos.epoch + 1, pos.next_mb, pos.world);
		if (st == ST_OK) {
			a->be.ops->to_device(a->be.ctx, a->m.params, a->ckpt_params, a->m.nparams);
			if (a->m.mom != NULL)
				a->be.ops->to_device(a->be.ctx, a->m.mom, a->ckpt_mom, a->m.nparams);
			st = a->be.ops->sync(a->be.ctx, &a->d);
		}
	}
	st = agree(a, st);
	if (st == ST_OK)
		st = agree(a, world_bcast(&a->w, &pos, sizeof pos, 0, &a->d));
	if (st == ST_OK && a->m.mom != NULL)
		st = agree(a, a->c.ops->bcast(a->c.ctx, a->m.mom, a->m.nparams, 0, &a->d));
	a->ctl.start_step = pos.step;
	a->ctl.start_epoch = pos.epoch;
	a->ctl.start_mb = pos.next_mb;
	if (st == ST_OK)
		report_note(&a->r, "resumed from %s: step %ld, epoch %ld, micro-batch %ld (written by %d replica%s)",
			    a->o.resume, pos.step, pos.epoch + 1, pos.next_mb, pos.world,
			    pos.world == 1 ? "" : "s");
	return st;
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
	/* Strict, as PyTorch's load_state_dict: a tensor the model has no place for means the
	 * file is for another model. A checkpoint's momentum buffers are not weights. */
	for (size_t i = 0; i < f.n && st == ST_OK; i++) {
		const char *name = f.t[i].name;
		int k = -1;

		if (strncmp(name, "momentum_buffer.", 16) == 0)
			continue;
		for (int t = 0; t < 2 * m->nlayers && k < 0; t++) {
			char want[32];

			model_tensor_name(t, want, sizeof want);
			if (strcmp(name, want) == 0)
				k = t;
		}
		if (k < 0) {
			char q[160];

			st = diag_set(&a->d, ST_RUNTIME, "%s: unexpected tensor '%s': --layers has net1 to net%d (weight and bias each)",
				      what, diag_quote(q, sizeof q, name), m->nlayers);
		}
	}
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

/* Memory this process may use: MemAvailable shared by the ranks of this node. */
static double available_bytes(const struct app *a)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	double kib = 0;

	while (f != NULL && fgets(line, sizeof line, f) != NULL)
		if (sscanf(line, "MemAvailable: %lf kB", &kib) == 1)
			break;
	if (f != NULL)
		fclose(f);
	return kib * 1024.0 / (a->w.local_size > 0 ? a->w.local_size : 1);
}

/* Refuse up front what cannot fit, rather than being killed by the kernel mid-run. */
static enum status check_memory(struct app *a)
{
	const struct options *o = &a->o;
	int reps = a->o.mode == MODE_DP ? a->pl.replicas : 1;
	double need, avail;
	char widths[1024];

	if (a->pl.device != DEVICE_CPU)
		return ST_OK; /* device memory: cudaMalloc says so, with the sizes, at set-up */
	/* Every replica's model (dp: all in this process) plus the host copies ddptrain keeps:
	 * two batch buffers, the checkpoint and initial-weight copies. */
	need = (double)model_bytes_needed(o->widths, o->nlayers, (int)o->batch_size, o->momentum != 0) * reps;
	{
		struct model lay;

		model_layout(&lay, o->widths, o->nlayers);
		need += 3.0 * (double)lay.nparams * sizeof(float);
	}
	avail = available_bytes(a);
	if (avail <= 0 || need <= avail)
		return ST_OK;
	options_format_widths(o, widths, sizeof widths);
	return diag_set(&a->d, ST_RUNTIME,
			"--layers=%s --batch-size=%ld: needs %.2f GiB per %s, but only %.2f GiB are available (MemAvailable over %d rank%s on this node)",
			widths, o->batch_size, need / 1073741824.0, o->mode == MODE_DP ? "process" : "rank",
			avail / 1073741824.0, a->w.local_size, a->w.local_size == 1 ? "" : "s");
}

/* The gradient communicator: NCCL (rank 0's unique id broadcast over MPI) or MPI. */
static enum status comm_init(struct app *a)
{
	unsigned char id[GPU_NCCL_ID_BYTES] = {0};
	enum status st = ST_OK;

	if (a->pl.comm != COMM_NCCL)
		return agree(a, comm_mpi_init(&a->c, &a->w, &a->be, a->m.grads,
					      a->m.nparams + MODEL_SLOTS, &a->d));
	if (a->w.rank == 0)
		st = a->pl.module.mod->nccl_unique_id(id, &a->d);
	st = agree(a, st);
	if (st == ST_OK)
		st = agree(a, world_bcast(&a->w, id, sizeof id, 0, &a->d));
	if (st == ST_OK)
		st = agree(a, a->pl.module.mod->nccl_comm_init(&a->c, &a->be, id, a->w.rank, a->w.size,
							       (int)a->o.timeout, &a->d));
	return st;
}

/* Before any work, rank 0 checks that --save, --checkpoint and --metrics can be written
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
	if (a->w.rank == 0 && o->checkpoint != NULL && st == ST_OK)
		st = outfile_check(o->checkpoint, "--checkpoint",
				   weight_bytes * (o->momentum != 0.0 ? 2 : 1), &a->d);
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

	st = agree(a, placement_decide(&a->pl, o, &a->w, &a->d));
	if (st != ST_OK)
		return st;
	st = agree(a, check_memory(a));
	if (st != ST_OK)
		return st;
	a->cfg.device = a->pl.gpu;
	a->cfg.tf32 = o->tf32;
	st = backend_init(&a->be, a->pl.device == DEVICE_CUDA ? a->pl.module.mod->backend : &backend_cpu_ops,
			  &a->cfg, &a->d);
	if (st == ST_OK)
		st = model_init(&a->m, &a->be, o->widths, o->nlayers, (int)o->batch_size,
				o->momentum != 0.0, &a->d);
	st = agree(a, st);
	if (st == ST_OK)
		st = comm_init(a);
	if (st != ST_OK)
		return st;
	st = report_init(&a->r, a->w.rank == 0, o->quiet, o->metrics, &a->d);
	if (st == ST_OK && a->w.rank == 0 && (o->checkpoint || o->resume)) {
		a->ckpt_params = calloc(a->m.nparams, sizeof *a->ckpt_params);
		a->ckpt_mom = calloc(a->m.nparams, sizeof *a->ckpt_mom);
		if (a->ckpt_params == NULL || a->ckpt_mom == NULL)
			st = diag_set(&a->d, ST_RUNTIME, "out of memory for checkpoint buffers");
	}
	if (o->checkpoint != NULL) {
		a->ctl.checkpoint = write_checkpoint;
		a->ctl.arg = a;
		a->ctl.every = o->checkpoint_every;
	}
	if (st == ST_OK && a->w.rank == 0 && o->resume == NULL) {
		host = malloc(a->m.nparams * sizeof *host);
		st = host ? initial_weights(a, host) : diag_set(&a->d, ST_RUNTIME, "out of memory");
		if (st == ST_OK) {
			a->be.ops->to_device(a->be.ctx, a->m.params, host, a->m.nparams);
			st = a->be.ops->sync(a->be.ctx, &a->d);
		}
	}
	free(host);
	st = agree(a, st);
	if (st != ST_OK)
		return st;
	if (o->resume != NULL)
		st = resume(a);
	if (st != ST_OK)
		return st;
	/* Every replica starts from rank 0's weights. */
	world_watch_begin(&a->w, "the weight broadcast");
	st = a->c.ops->bcast(a->c.ctx, a->m.params, a->m.nparams, 0, &a->d);
	world_watch_end(&a->w);
	return agree(a, st);
}

/* Replicas of this run: MPI ranks (ddp) or worker threads (dp). */
static int replicas(const struct app *a)
{
	return a->o.mode == MODE_DP ? a->pl.replicas : a->w.size;
}

/* One "#" line per rank (nccl-tests style): where it runs and on what. Collective. */
static void print_ranks(struct app *a)
{
	struct rank_line {
		int pid, local;
		char host[64], device[160];
	} mine = {0}, *all = NULL;
	struct diag ignore = {0};

	mine.pid = (int)getpid();
	mine.local = a->w.local_rank;
	gethostname(mine.host, sizeof mine.host - 1);
	if (a->pl.device == DEVICE_CUDA)
		snprintf(mine.device, sizeof mine.device, "GPU %d of %d (%s)", a->pl.gpu,
			 a->pl.gpu_count, a->pl.gpu_name);
	else
		snprintf(mine.device, sizeof mine.device, "cpu");
	if (a->o.mode == MODE_DP) {
		for (int i = 0; i < a->pl.replicas; i++)
			if (a->pl.device == DEVICE_CUDA)
				report_note(&a->r, "  replica %2d: thread %d, GPU %d", i, i, a->pl.gpu + i);
			else
				report_note(&a->r, "  replica %2d: thread %d, cpu", i, i);
		return;
	}
	if (a->w.rank == 0)
		all = calloc((size_t)a->w.size, sizeof *all);
	if (world_gather(&a->w, &mine, sizeof mine, all, &ignore) == ST_OK && all != NULL)
		for (int r = 0; r < a->w.size; r++)
			report_note(&a->r, "  rank %3d: pid %7d on %s, node-local rank %d, device %s, backend %s%s%s",
				    r, all[r].pid, all[r].host, all[r].local, all[r].device, a->c.ops->name,
				    a->pl.comm == COMM_MPI && a->pl.device == DEVICE_CUDA ? ", " : "",
				    a->pl.comm == COMM_MPI && a->pl.device == DEVICE_CUDA ?
					    comm_mpi_path_name(&a->c) : "");
	free(all);
}

static void print_header(struct app *a)
{
	const int dp = a->o.mode == MODE_DP;
	char widths[1024];

	options_format_widths(&a->o, widths, sizeof widths);
	if (dp)
		report_note(&a->r, "ddptrain %s: mode dp, 1 process, %d replicas on worker threads, device %s",
			    PACKAGE_VERSION, a->pl.replicas, a->be.ops->name);
	else
		report_note(&a->r, "ddptrain %s: mode ddp, %d rank%s (%d on this node), device %s, backend %s",
			    PACKAGE_VERSION, a->w.size, a->w.size == 1 ? "" : "s", a->w.local_size,
			    a->be.ops->name, a->c.ops->name);
	if (a->pl.notice[0] != '\0')
		report_note(&a->r, "%s", a->pl.notice);
	if (a->pl.device == DEVICE_CUDA)
		report_note(&a->r, "%s, TF32 %s", a->pl.info, a->o.tf32 ? "on" : "off");
	print_ranks(a);
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
		st = trainer_dp(&a->o, a->pl.replicas, &a->m, &a->cfg, &a->ds, &a->ctl, &a->r, &a->res,
				&a->d);
	else
		st = trainer_ddp(&a->o, &a->w, &a->m, &a->c, &a->ds, &a->ctl, &a->r, &a->res, &a->d);
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
	/* The command line alone decides --help, --version (ST_STOP) and usage errors. */
	st = options_parse(&a.o, argc, argv, &a.d);
	if (st == ST_OK && (a.o.help || a.o.version))
		st = ST_STOP;
	if (st != ST_OK && world_launch_size() == 1) {
		/* Alone: answer without starting MPI, which would spawn orted first (and wait
		 * for a name lookup where localhost is missing from /etc/hosts). */
		if (st == ST_STOP && a.o.help)
			options_print_help(stdout);
		else if (st == ST_STOP)
			options_print_version(stdout);
		else
			fprintf(stderr, "ddptrain: %s\n", a.d.msg);
		return status_exit_code(st);
	}
	{
		struct diag d = {0};
		enum status wst = world_init(&a.w, &argc, &argv, &d);

		if (wst != ST_OK) {
			fprintf(stderr, "ddptrain: %s\n", d.msg);
			return status_exit_code(wst);
		}
	}
	/* With other ranks, all agree: one rank's --version or bad flag stops every rank. */
	st = agree(&a, st);
	if (st == ST_OK)
		st = agree(&a, check_runnable(&a, &a.d));
	if (st == ST_OK) {
		signals_install();
		st = agree(&a, world_watchdog_start(&a.w, a.o.timeout, &a.d));
	}
	if (st == ST_OK)
		st = setup(&a);
	if (st == ST_OK)
		st = run(&a);

	free(a.ckpt_params);
	free(a.ckpt_mom);
	report_free(&a.r);
	model_free(&a.m);
	comm_free(&a.c);
	backend_free(&a.be);
	data_free(&a.ds);
	world_free(&a.w);
	return status_exit_code(st);
}
