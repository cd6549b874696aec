/* settings.c - the options as the modules' configurations and as texts to compare. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run/settings.h"

void settings_apply(const struct options *o, struct optimizer_hparams *hp, struct train_config *tc)
{
	const char *graphs = getenv("DDPTRAIN_CUDA_GRAPHS");

	hp->kind = o->optimizer;
	hp->lr = (float)o->lr;
	hp->momentum = (float)o->momentum;
	hp->nesterov = o->nesterov;
	hp->weight_decay = (float)o->weight_decay;
	hp->beta1 = o->beta1;
	hp->beta2 = o->beta2;
	hp->eps = o->eps;
	tc->batch_size = o->batch_size;
	tc->epochs = o->epochs;
	tc->max_steps = o->max_steps;
	tc->grad_accum = o->grad_accum;
	tc->log_every = o->log_every;
	tc->seed = o->seed;
	tc->shuffle = o->shuffle;
	tc->drop_last = o->drop_last;
	tc->overlap = o->overlap;
	tc->bucket_mb = o->bucket_mb;
	tc->loss.kind = o->loss;
	tc->schedule = o->schedule;
	tc->warmup_steps = o->warmup_steps;
	tc->clip_grad_norm = o->clip_grad_norm;
	tc->eval_every = o->eval_every;
	tc->zero = o->zero;
	tc->check_replicas = o->check_replicas;
	tc->compress = o->grad_compress != COMM_WIRE_F32;
	tc->compress_fp16 = o->grad_compress == COMM_WIRE_F16;
	tc->mean_after_backward = o->precision == PRECISION_BF16;
	tc->graphs = graphs == NULL || strcmp(graphs, "0") != 0;
}

void settings_resume_text(const struct options *o, const struct dataset *ds, char *buf, size_t len)
{
	snprintf(buf, len, "data=%s %zu x (%d, %d)\n", ds->synthetic ? "synthetic" : "npy", ds->n, ds->in,
		 ds->out);
	/* The data's identity: the same shape with other numbers is other data. */
	if (!ds->synthetic) {
		size_t used = strlen(buf);

		snprintf(buf + used, len - used, "inputs=%s\ntargets=%s\n", ds->fingerprint[0],
			 ds->fingerprint[1]);
	}
	options_format_settings(o, OPT_SCOPE_RESUME, buf, len);
}

void settings_config_text(const struct options *o, const struct dataset *ds, char *buf, size_t len,
			  int all)
{
	settings_resume_text(o, ds, buf, len);
	if (all) /* the data line, then every flag */
		buf[strcspn(buf, "\n") + 1] = '\0';
	options_format_settings(o, all ? OPT_SCOPE_ALL : OPT_SCOPE_RUN, buf, len);
}
