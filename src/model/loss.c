/* loss.c - MSE and softmax cross-entropy on the backend's kernels. */
#include "model/loss.h"

int loss_target_width(const struct loss *l, int out)
{
	return l->kind == LOSS_CROSS_ENTROPY ? 1 : out;
}

const char *const loss_names[] = {"mse", "cross-entropy", NULL};

void loss_apply(const struct loss *l, const struct backend *be, float *dy, float *value,
		const float *y, const float *t, int n, int width, float scale, float dscale,
		int accumulate)
{
	if (l->kind == LOSS_CROSS_ENTROPY) /* F.cross_entropy, mean over the n rows */
		be->ops->cross_entropy(be->ctx, dy, value, y, t, n, width, scale, dscale, accumulate);
	else /* mean((y - t)^2) over n * width */
		be->ops->mse(be->ctx, dy, value, y, t, n, width, scale, dscale, accumulate);
}

const char *loss_name(const struct loss *l)
{
	return l->kind == LOSS_CROSS_ENTROPY ? "cross-entropy" : "MSE";
}
