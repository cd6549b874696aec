/*
 * preflight.h - what is refused before any work: a launch this build cannot
 * run, outputs that cannot be written or that name another path's file, a model
 * that does not fit, data that is not finite.
 *
 * Each check returns a status on the rank that makes it; the session agrees on
 * it across the ranks. Nothing here writes a file or changes the run, except the
 * claims on the outputs (their lock files) that preflight_outputs hands the session.
 */
#ifndef DDPT_PREFLIGHT_H
#define DDPT_PREFLIGHT_H

#include "core/outfile.h"   /* struct outfile_lock */
#include "core/status.h"
#include "data/data.h"       /* struct dataset */
#include "comm/world.h"      /* struct world */
#include "run/options.h"     /* struct options */
#include "run/placement.h"   /* struct placement */
#include "model/optimizer.h" /* struct optimizer_hparams */
#include "train/plan.h"      /* struct grad_plan */
#include "train/trainer.h"   /* struct train_config */

/* Modes, devices and backends this build and launch can run; the rest fail clearly. */
enum status preflight_launch(const struct options *o, struct world *w, struct diag *d);

/* Rank 0: no output names the file of another file flag (--resume=F --checkpoint=F is
 * how a run continues), and each output can be written: a directory that takes the file,
 * a regular file or none as the target, room for the weights it will hold, no other job
 * writing it. claims[i] (options_paths' order) gets the claim on output i, held until
 * outfile_release, by the caller, also on failure. Other ranks: ST_OK, no claims. */
enum status preflight_outputs(const struct options *o, const struct optimizer_hparams *hp, int rank,
			      struct outfile_lock claims[OPT_MAX_FILES], struct diag *d);

/* Room for every replica's model (dp: all in this process) and the host copies kept
 * beside them: two batch buffers, the checkpoint and initial-weight copies; with ZeRO
 * what the plan keeps (a shard of the optimizer state, ZeRO-2's gradient block, ZeRO-3's
 * window of the parameters and working set). --max-memory bounds a rank's model memory
 * (refused with the stage that would fit). */
enum status preflight_memory(const struct options *o, const struct optimizer_hparams *hp,
			     const struct placement *pl, const struct world *w,
			     const struct grad_plan *plan, struct diag *d);

/* What a rank still maps after its communicator is set up, once the model and its
 * optimizer are: the host copies above, the loader's batches and worker threads and, on
 * the CPU, the BLAS library's work buffer of each thread that computes (mapped at its first
 * product), --precision=bf16's operand scratch and dp's further replicas. The
 * shared-memory all-reduce's window leaves room for it under an address-space limit
 * (ulimit -v). */
size_t preflight_later_bytes(const struct options *o, const struct placement *pl, const struct train_config *tc,
			     const struct world *w, const struct dataset *ds);

/* Once the communicator is set up, on the CPU: what training still maps (the above but the
 * host copies, some of which only a flag makes) fits under the address-space limit
 * (ulimit -v), whose BLAS allocator otherwise retries forever at the first product;
 * ST_RUNTIME naming the limit, what does not fit and a limit that would do if not. */
enum status preflight_address_space(const struct options *o, const struct placement *pl,
				    const struct train_config *tc, const struct world *w, const struct dataset *ds,
				    struct diag *d);

/* This rank's share of ds's rows holds only finite numbers. */
enum status preflight_finite(const struct dataset *ds, const struct world *w, struct diag *d);

#endif
