/* preflight.c - the checks made before any work. */
#include <math.h>  /* ceil */
#include <stdio.h>
#include <string.h>

#include "core/outfile.h" /* outfile_distinct, outfile_check, outfile_release */
#include "core/vmspace.h" /* vmspace_used, vmspace_peak, vmspace_limit, vmspace_thread_bytes */
#include "run/preflight.h"
#include "store/checkpoint.h" /* checkpoint_check_rotation */
#include "model/model.h"   /* model_layout, model_bytes_needed */
#include "train/plan.h"   /* grad_plan_shard, grad_plan_init */
#include "train/trainer.h" /* trainer_run_loader_config */
#include "data/loader.h"  /* loader_map_bytes */

enum status preflight_launch(const struct options *o, struct world *w, struct diag *d)
{
	if (world_check_launch(w, d) != ST_OK)
		return ST_USAGE;
	if (o->mode == MODE_DP && w->size > 1)
		return diag_set(d, ST_USAGE, "--mode=dp runs in one process (one thread per replica), but %d MPI ranks were started: run it without mpirun, or use --mode=ddp for one process per replica",
				w->size);
	return ST_OK;
}

enum status preflight_outputs(const struct options *o, const struct optimizer_hparams *hp, int rank,
			      struct outfile_lock claims[OPT_MAX_FILES], struct diag *d)
{
	struct opt_file f[OPT_MAX_FILES];
	struct named_path p[OPT_MAX_FILES];
	char flags[OPT_MAX_FILES][32];
	int n, resume = -1, checkpoint = -1;
	size_t weight_bytes;
	struct model lay;
	enum status st;

	if (rank != 0)
		return ST_OK;
	model_layout(&lay, o->widths, o->nlayers);
	weight_bytes = lay.nparams * sizeof(float);
	n = options_paths(o, f);
	for (int i = 0; i < n; i++) {
		snprintf(flags[i], sizeof flags[i], "--%s", f[i].flag);
		p[i] = (struct named_path){flags[i], f[i].path, f[i].kind != OPT_PATH_IN,
					   f[i].kind == OPT_PATH_CHECKPOINT && o->keep_checkpoints > 0};
		if (strcmp(f[i].flag, "resume") == 0)
			resume = i;
		if (f[i].kind == OPT_PATH_CHECKPOINT)
			checkpoint = i;
	}
	/* --resume=F --checkpoint=F is how a run continues; every other pair is refused. */
	st = outfile_distinct(p, n, resume, checkpoint, d);
	for (int i = 0; i < n && st == ST_OK; i++) {
		size_t bytes = f[i].kind == OPT_PATH_SAVE || f[i].kind == OPT_PATH_BEST ? weight_bytes
			       : f[i].kind == OPT_PATH_CHECKPOINT
				       ? weight_bytes * (size_t)(1 + optimizer_state_arenas(hp))
				       : 0;

		if (f[i].kind != OPT_PATH_IN && f[i].path != NULL)
			st = outfile_check(f[i].path, flags[i], bytes, &claims[i], d);
		if (st == ST_OK && p[i].rotation && f[i].path != NULL)
			st = checkpoint_check_rotation(f[i].path, d);
	}
	return st;
}

/* OpenBLAS maps a 128 MiB work buffer at its first product (its BUFFER_SIZE in Debian's
 * DYNAMIC_ARCH build: VmSize grows by 131072 kB at the first cblas_sgemm). */
#define BLAS_BUFFER_BYTES ((size_t)128 << 20)

/* The host copies of the weights kept beside the model: two batch buffers, the checkpoint
 * and initial-weight copies. */
static size_t host_copies_bytes(const struct options *o)
{
	struct model lay;

	model_layout(&lay, o->widths, o->nlayers);
	return 3 * lay.nparams * sizeof(float);
}

/* The model memory of one replica under plan p (its largest rank's), bytes. */
static double model_need(const struct options *o, const struct optimizer_hparams *hp,
			 const struct grad_plan *p)
{
	struct model_shard sh;

	grad_plan_shard(p, &sh);
	if (sh.sharded) /* the largest window: the same verdict on every rank */
		sh.param_len = p->param_room;
	return (double)model_bytes_needed(o->widths, o->nlayers, (int)o->batch_size, optimizer_state_arenas(hp),
					  o->frozen, p->cfg.zero > 0 ? p->cfg.size : 1, &sh);
}

/* --max-memory: the model memory of a rank within the bound, or a refusal that says which
 * stage would fit. */
static enum status check_bound(const struct options *o, const struct optimizer_hparams *hp,
			       const struct grad_plan *plan, double need, struct diag *d)
{
	const double mib = 1048576.0;
	struct grad_plan p3;
	struct grad_plan_cfg cfg = plan->cfg;
	struct model lay;
	double need3;
	char bound[32];

	if (o->max_memory == 0 || need <= (double)o->max_memory)
		return ST_OK;
	options_format_size(o->max_memory, bound, sizeof bound);
	if (o->zero == 3 || o->mode == MODE_DP)
		return diag_set(d, ST_RUNTIME, "--max-memory=%s: the model needs %.1f MiB per %s (parameters, gradients, optimizer state, activations%s); use more ranks, a smaller --batch-size or a smaller model",
				bound, need / mib, o->mode == MODE_DP ? "replica" : "rank",
				o->zero == 3 ? ", the working set" : "");
	model_layout(&lay, o->widths, o->nlayers);
	model_freeze(&lay, o->frozen);
	cfg.zero = 3;
	if (grad_plan_init(&p3, &lay, &cfg, d) != ST_OK) {
		grad_plan_free(&p3); /* what it had made */
		return ST_RUNTIME;
	}
	need3 = model_need(o, hp, &p3);
	grad_plan_free(&p3);
	if (need3 <= (double)o->max_memory)
		return diag_set(d, ST_RUNTIME, "--max-memory=%s: --zero=%d needs %.1f MiB per rank, but --zero=3 (the parameters sharded too) needs %.1f MiB: use --zero=3",
				bound, o->zero, need / mib, need3 / mib);
	return diag_set(d, ST_RUNTIME, "--max-memory=%s: --zero=%d needs %.1f MiB per rank, and even --zero=3 needs %.1f MiB; use more ranks, a smaller --batch-size or a smaller model",
			bound, o->zero, need / mib, need3 / mib);
}

enum status preflight_memory(const struct options *o, const struct optimizer_hparams *hp,
			     const struct placement *pl, const struct world *w,
			     const struct grad_plan *plan, struct diag *d)
{
	int reps = o->mode == MODE_DP ? pl->replicas : 1;
	double need = model_need(o, hp, plan);
	enum status st = check_bound(o, hp, plan, need, d);

	if (st != ST_OK)
		return st;
	return placement_check_memory(pl, o, w, need * reps + (double)host_copies_bytes(o), d);
}

/* What a rank maps on the host after the address-space check, host copies aside (some are
 * made only when a flag uses them), and what it is made of. */
struct later_maps {
	double bytes;
	int blas;      /* OpenBLAS's work buffers: one per thread that computes at once (CPU) */
	int allreduce; /* MPI's all-reduce temporaries are counted */
	int workers;   /* the loader's worker threads */
};

/* On the CPU: OpenBLAS's work buffers (dp: each replica's), --precision=bf16's operand
 * scratch of each, MPI's all-reduce temporaries (ddp), dp's further replicas (models and
 * threads); everywhere, the loader's batches and workers. */
static struct later_maps mapped_later(const struct options *o, const struct placement *pl,
				      const struct train_config *tc, const struct world *w,
				      const struct dataset *ds)
{
	const int dp = o->mode == MODE_DP, reps = dp ? pl->replicas : 1;
	const struct loader_config lc = trainer_run_loader_config(tc, dp, dp ? reps : w->size, dp ? 0 : w->rank,
								   w->local_size);
	struct later_maps m = {.bytes = (double)loader_map_bytes(ds, &lc), .workers = loader_threads(ds, &lc)};

	if (pl->device != DEVICE_CPU)
		return m;
	m.blas = reps;
	m.bytes += (double)reps * (double)BLAS_BUFFER_BYTES;
	if (o->precision == PRECISION_BF16) { /* backend_cpu.c's scratch: the largest layer's operands */
		double most = 0.0;

		for (int l = 0; l < o->nlayers; l++) {
			double in = o->widths[l], out = o->widths[l + 1];
			double f = (double)o->batch_size * (in + out) + 2.0 * in * out;

			most = f > most ? f : most;
		}
		m.bytes += reps * most * sizeof(float);
	}
	m.allreduce = !dp && w->size > 1;
	if (m.allreduce) { /* at most the gradient once more, in the buckets in flight */
		struct model lay;

		model_layout(&lay, o->widths, o->nlayers);
		m.bytes += (double)lay.nparams * sizeof(float);
	}
	if (dp) /* replicas 1..G-1: their models (batches of --batch-size) and threads */
		m.bytes += (reps - 1) * ((double)model_bytes_needed(o->widths, o->nlayers, (int)o->batch_size, 0,
								    o->frozen, 1, NULL) +
					 (double)vmspace_thread_bytes());
	return m;
}

size_t preflight_later_bytes(const struct options *o, const struct placement *pl, const struct train_config *tc,
			     const struct world *w, const struct dataset *ds)
{
	return host_copies_bytes(o) + (size_t)mapped_later(o, pl, tc, w, ds).bytes;
}

/* Room kept beyond what is counted: the few MiB MPI, the C library and the trainer map as
 * they go (a peer's shared-memory segment, dp's gathered batch). */
#define ADDRESS_SLACK_BYTES ((double)(16 << 20))
/* What start-up may have left unmapped when it came this near the limit: MPI skips a
 * plug-in whose library does not fit (libicudata's 30 MiB for a process started without
 * mpirun) and a helper thread whose stack does not, quietly. */
#define ADDRESS_SKIPPED_BYTES ((double)(64 << 20))

enum status preflight_address_space(const struct options *o, const struct placement *pl,
				    const struct train_config *tc, const struct world *w, const struct dataset *ds,
				    struct diag *d)
{
	const double mib = 1048576.0;
	double limit = vmspace_limit(), used, need;
	struct later_maps later;
	char what[200];
	int n;

	if (limit <= 0 || pl->device != DEVICE_CPU)
		return ST_OK;
	used = vmspace_used();
	later = mapped_later(o, pl, tc, w, ds);
	need = used + later.bytes + ADDRESS_SLACK_BYTES;
	if (used <= 0 || need <= limit)
		return ST_OK;
	/* Past this, OpenBLAS's allocator retries its mmap forever instead of failing, at the
	 * first product (after the loader's workers have started). */
	if (later.blas > 1)
		n = snprintf(what, sizeof what, "OpenBLAS's %d work buffers of %.0f MiB (one per replica)",
			     later.blas, (double)BLAS_BUFFER_BYTES / mib);
	else
		n = snprintf(what, sizeof what, "OpenBLAS's %.0f MiB work buffer", (double)BLAS_BUFFER_BYTES / mib);
	if (later.allreduce)
		n += snprintf(what + n, sizeof what - (size_t)n, ", MPI's all-reduce buffers");
	if (later.workers > 0)
		snprintf(what + n, sizeof what - (size_t)n, ", the loader's %d worker thread%s and its batches",
			 later.workers, later.workers > 1 ? "s" : "");
	else
		snprintf(what + n, sizeof what - (size_t)n, " and the loader's batches");
	/* The limit named is what is in use, what is to come and the slack, rounded up to 64 MiB,
	 * with what start-up may have skipped under this limit added where it came near it: a
	 * run at the limit named maps those too, and then trains, instead of being refused
	 * again with a larger number. */
	if (limit - vmspace_peak() < ADDRESS_SKIPPED_BYTES)
		need += ADDRESS_SKIPPED_BYTES;
	return diag_set(d, ST_RUNTIME,
			"the address-space limit (ulimit -v %.0f, %.1f MiB) cannot hold the %.1f MiB training still maps (%s): %.1f MiB are in use; raise ulimit -v to at least %.0f",
			limit / 1024.0, limit / mib, later.bytes / mib, what, used / mib,
			ceil(need / (64 * mib)) * 64 * 1024.0);
}

enum status preflight_finite(const struct dataset *ds, const struct world *w, struct diag *d)
{
	return data_check_finite_share(ds, w->rank, w->size, d);
}
