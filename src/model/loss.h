/*
 * loss.h - the training loss: forward and backward in one call, on the
 * backend's loss kernels.
 *
 * A loss reads the model's output y (n, width) and the targets, adds its
 * value (mean over the micro-batch, times scale) into a device float and
 * writes dL/dy, the seed of backward. What the targets are is the loss's
 * business: MSE reads float rows as wide as the output; cross-entropy reads
 * one class index per row, stored as a float (loss_target_width), and also
 * adds the accuracy (the fraction of rows whose first largest logit is the
 * label) into the float after the loss. A new loss is a kind here and its
 * kernel in each backend. This module is not the
 * activation of the last layer: model_layout chooses every layer's.
 */
#ifndef DDPT_LOSS_H
#define DDPT_LOSS_H

#include "backend/backend.h" /* struct backend */

enum loss_kind { LOSS_MSE, LOSS_CROSS_ENTROPY };
extern const char *const loss_names[]; /* --loss: "mse", "cross-entropy", NULL */

struct loss {
	enum loss_kind kind;
};

/* Floats per target row for a model with `out` outputs (MSE: out; cross-entropy: 1). */
int loss_target_width(const struct loss *l, int out);
/* From y and t (n rows): value[0] = scale * loss (added to if accumulate; value is backend
 * memory), for cross-entropy value[1] = scale * accuracy likewise, and dy = dscale * dL/dy,
 * all queued on be. */
void loss_apply(const struct loss *l, const struct backend *be, float *dy, float *value,
		const float *y, const float *t, int n, int width, float scale, float dscale,
		int accumulate);
/* "MSE" or "cross-entropy" for the run header. */
const char *loss_name(const struct loss *l);

#endif
