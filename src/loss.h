/*
 * loss.h - the training loss: forward and backward in one call, on the
 * backend's loss kernels.
 *
 * A loss reads the model's output y (n, width) and the targets, adds its
 * value (mean over the micro-batch, times scale) into a device float and
 * writes dL/dy, the seed of backward. What the targets are is the loss's
 * business: MSE reads float rows as wide as the output; a classification
 * loss would read one class index per row (loss_target_width). A new loss is
 * a kind here and its kernel in each backend. This module is not the
 * activation of the last layer: model_layout chooses every layer's.
 */
#ifndef DDPT_LOSS_H
#define DDPT_LOSS_H

#include "backend.h" /* struct backend */

enum loss_kind { LOSS_MSE };

struct loss {
	enum loss_kind kind;
};

/* Floats per target row for a model with `out` outputs (MSE: out). */
int loss_target_width(const struct loss *l, int out);
/* From y and t (n rows): *value = scale * loss (added to *value if accumulate; value is
 * backend memory) and dy = scale * dL/dy, both queued on be. */
void loss_apply(const struct loss *l, const struct backend *be, float *dy, float *value,
		const float *y, const float *t, int n, int width, float scale, int accumulate);
/* "MSE" for the run header. */
const char *loss_name(const struct loss *l);

#endif
