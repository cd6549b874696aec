/*
 * schedule.h - learning-rate schedules: the multipliers of the transformers
 * library's get_constant_schedule_with_warmup, get_linear_schedule_with_warmup
 * and get_cosine_schedule_with_warmup (num_cycles 0.5), as
 * torch.optim.lr_scheduler.LambdaLR applies them: the lr of optimizer step
 * k (counting from 0: the first step is k = 0) is base_lr * multiplier(k).
 *
 * A pure function of the step: a resumed run, which knows how many steps were
 * taken, continues the schedule exactly with no state of its own.
 */
#ifndef DDPT_SCHEDULE_H
#define DDPT_SCHEDULE_H

enum lr_schedule { SCHED_CONSTANT, SCHED_LINEAR, SCHED_COSINE };

extern const char *const schedule_names[]; /* "constant", "linear", "cosine", NULL */

/* The multiplier of step k (0-based) with `warmup` warmup steps in a run of `total`
 * optimizer steps: k / warmup during the warmup, then 1 (constant), a straight line down
 * to 0 at step total (linear), or half a cosine down to 0 at step total (cosine). */
double schedule_multiplier(enum lr_schedule kind, long k, long warmup, long total);

#endif
