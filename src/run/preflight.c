/* preflight.c - the checks made before any work. */
#include <math.h>  /* ceil */
#include <stdio.h>
#include <string.h>

#include "core/outfile.h" /* outfile_distinct, outfile_check, outfile_release */
#include "core/vmspace.h" /* vmspace_used, vmspace_limit */
#include "run/preflight.h"
#include "store/checkpoint.h" /* checkpoint_check_rotation */
#include "model/model.h"  /* model_layout, model_bytes_needed */
#include "train/plan.h"   /* grad_plan_shard, grad_plan_init */

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
	if (grad_plan_init(&p3, &lay, &cfg, d) != ST_OK)
		return ST_RUNTIME;
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

size_t preflight_later_bytes(const struct options *o, const struct placement *pl)
{
	return host_copies_bytes(o) + (pl->device == DEVICE_CPU ? BLAS_BUFFER_BYTES : 0);
}

enum status preflight_address_space(const struct placement *pl, struct diag *d)
{
	const double mib = 1048576.0, blas = (double)BLAS_BUFFER_BYTES;
	double limit = vmspace_limit(), used;

	if (limit <= 0 || pl->device != DEVICE_CPU)
		return ST_OK;
	used = vmspace_used();
	if (used <= 0 || used + blas <= limit)
		return ST_OK;
	/* Past this, OpenBLAS's allocator retries its mmap forever instead of failing: only
	 * the buffer is counted here (a host copy that does not fit fails on its own). The
	 * limit named is rounded up to 64 MiB: the ranks' use differs by a few pages, and
	 * threads' stacks come later. */
	return diag_set(d, ST_RUNTIME,
			"the address-space limit (ulimit -v %.0f, %.1f MiB) cannot hold OpenBLAS's %.0f MiB work buffer: %.1f MiB are in use; raise ulimit -v to at least %.0f",
			limit / 1024.0, limit / mib, blas / mib, used / mib,
			ceil((used + blas) / (64 * mib) + 0.25) * 64 * 1024.0);
}

enum status preflight_finite(const struct dataset *ds, const struct world *w, struct diag *d)
{
	size_t first = ds->n * (size_t)w->rank / (size_t)w->size;
	size_t end = ds->n * (size_t)(w->rank + 1) / (size_t)w->size;

	return data_check_finite(ds, first, end - first, d);
}
