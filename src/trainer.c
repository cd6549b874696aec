/* trainer.c - what both training loops do after an optimizer step: checkpoints and stops. */
#include <math.h>

#include "clock.h"
#include "trainer.h"

enum status trainer_after_step(const struct train_ctl *ctl, const struct train_config *tc,
			       struct step_clock *clk, struct train_result *res, long *step,
			       long total, const struct batch *b, long nmicro, float loss,
			       double consumed, int stop, struct report *r, struct diag *d)
{
	long epoch = b->epoch, next = b->mb + 1;
	enum status st;

	if (!isfinite(loss))
		return diag_set(d, ST_RUNTIME, "loss is %f at step %ld (epoch %ld): training diverged; lower --lr",
				(double)loss, *step + 1, b->epoch + 1);
	++*step;
	if (*step == ctl->start_step + 1)
		res->first_loss = loss;
	res->final_loss = loss;
	clk->loss_sum += loss;
	clk->loss_count++;
	if ((tc->log_every > 0 && *step % tc->log_every == 0) || *step == total) {
		double now = clock_now();

		report_step(r, b->epoch + 1, tc->epochs, *step, total, clk->loss_sum / (double)clk->loss_count,
			    (consumed - clk->consumed_at_last) / (now - clk->t_last), now - clk->t0,
			    *step - ctl->start_step);
		clk->t_last = now;
		clk->consumed_at_last = consumed;
		clk->loss_sum = 0.0;
		clk->loss_count = 0;
	}
	if (next >= nmicro) {
		epoch++;
		next = 0;
	}
	if (ctl->checkpoint != NULL &&
	    ((ctl->every > 0 && *step % ctl->every == 0) || *step == total || stop)) {
		st = ctl->checkpoint(ctl->arg, *step, epoch, next, d);
		if (st != ST_OK)
			return st;
	}
	if (!stop)
		return ST_OK;
	report_note(r, "stopped by a signal after step %ld of %ld%s", *step, total,
		    ctl->checkpoint ? ": checkpoint written, continue with --resume"
				    : " (no --checkpoint: nothing was saved)");
	return ST_INTERRUPTED;
}

long trainer_total_steps(const struct train_ctl *ctl, long nmicro, long grad_accum, long epochs,
			 long max_steps)
{
	long per_epoch = (nmicro + grad_accum - 1) / grad_accum;
	long epoch = ctl->start_epoch, mb = ctl->start_mb, total = ctl->start_step;

	if (mb >= nmicro) {
		epoch++;
		mb = 0;
	}
	if (epoch < epochs)
		total += (nmicro - mb + grad_accum - 1) / grad_accum + per_epoch * (epochs - epoch - 1);
	if (max_steps > 0 && max_steps < total)
		total = max_steps;
	return total;
}
