/*
 * model.h - an MLP (Linear, ReLU, ..., Linear) whose state lives in three flat
 * buffers on the backend: parameters, gradients and momentum.
 *
 * Layer l's weight (out, in) row-major and bias (out) follow each other in
 * layer order, as ToyModel().state_dict() lists them, so a gradient bucket
 * (a run of consecutive layers) is one contiguous slice and the optimizer is
 * one flat loop. The gradient buffer has MODEL_SLOTS extra floats after the
 * last bias, all-reduced with the last bucket: the loss and the stop flag ride
 * along with the gradients, so neither costs a collective of its own.
 *
 * This module knows nothing of ranks or communication: the trainer passes a
 * hook that backward calls after each layer's gradients are complete.
 */
#ifndef DDPT_MODEL_H
#define DDPT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "options.h"
#include "status.h"

#define MODEL_SLOTS 2      /* extra gradient floats after the parameters */
#define MODEL_SLOT_LOSS 0  /* the step's loss over ranks and micro-batches */
#define MODEL_SLOT_STOP 1  /* nonzero if some rank was asked to stop (a signal) */

struct model {
	int nlayers;
	int widths[OPT_MAX_LAYERS + 1];
	size_t w_off[OPT_MAX_LAYERS]; /* layer l's weight in params/grads */
	size_t b_off[OPT_MAX_LAYERS]; /* layer l's bias */
	size_t nparams;
	int max_batch;
	struct backend *be;           /* borrowed */
	float *params;                /* (nparams) */
	float *grads;                 /* (nparams + MODEL_SLOTS) */
	float *mom;                   /* (nparams), or NULL without momentum */
	float *act[OPT_MAX_LAYERS + 1]; /* act[0] input (batch, widths[0]); act[l] output of layer l */
	float *target;                /* (batch, widths[nlayers]) */
	float *dbuf[2];               /* (batch, max width) ping-pong gradients of activations */
	size_t bytes;                 /* backend memory held by all of the above */
};

/* Bytes model_init allocates for these widths and batch (no allocation). */
size_t model_bytes_needed(const int *widths, int nlayers, int max_batch, int with_momentum);
/* Offsets and parameter count for these widths (no allocation). */
void model_layout(struct model *m, const int *widths, int nlayers);
/* Lay out and allocate on be for micro-batches of up to max_batch rows. */
enum status model_init(struct model *m, struct backend *be, const int *widths, int nlayers,
		       int max_batch, int with_momentum, struct diag *d);
/* nn.Linear's default init, weight and bias uniform in +-1/sqrt(fan_in), a pure
 * function of seed. host is scratch of nparams floats and receives the weights. */
void model_init_host(const struct model *m, uint64_t seed, float *host);
/* The safetensors name of tensor k (0: net1.weight, 1: net1.bias, 2: net2.weight, ...). */
void model_tensor_name(int k, char *buf, size_t len);
/* Forward n rows of act[0]; the output is act[nlayers]. */
void model_forward(struct model *m, int n);
/* Backward from dbuf[0] (n, widths[nlayers]) = dL/dout. Layers run last to first; after
 * each one, hook(arg, l) is called (if hook is not NULL). accumulate adds to grads. */
void model_backward(struct model *m, int n, int accumulate, void (*hook)(void *arg, int layer),
		    void *arg);
/* Safe to call twice. */
void model_free(struct model *m);

/* Gradient buckets: runs of whole layers from the last layer backwards, each closed
 * once it holds at least cap floats (first_cap for the first, as PyTorch DDP does). */
struct bucket {
	int lo, hi;   /* layers lo..hi; backward completes it at layer lo */
	size_t off;   /* first float in grads */
	size_t len;   /* floats, including the slots for the bucket holding the last layer */
};
/* Fill b (room for nlayers entries); returns the bucket count. */
int model_plan_buckets(const struct model *m, size_t cap, size_t first_cap, struct bucket *b);

#endif
