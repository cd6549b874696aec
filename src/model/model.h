/*
 * model.h - an MLP (Linear, activation, ..., Linear) whose state lives in flat
 * buffers on the backend: parameters, gradients, and the optimizer's state as
 * further named arenas laid out as the trainable parameters (optimizer.h adds them;
 * a frozen layer takes no room in them, as it has no state in PyTorch).
 *
 * Layer l's weight (out, in) row-major and bias (out) follow each other in
 * layer order, as ToyModel().state_dict() lists them, so a gradient bucket
 * (a run of consecutive layers) is one contiguous slice and the optimizer is
 * one flat loop. The gradient buffer has MODEL_SLOTS extra floats after the
 * last bias, all-reduced with the last bucket: the loss and the stop flag ride
 * along with the gradients, so neither costs a collective of its own.
 *
 * The model owns the state dict: model_state_dict lists every tensor (name,
 * shape, arena and offset), and the readers and writers of weights and
 * checkpoints only ever walk that list, so a new layer kind or optimizer
 * state never touches them. Tensor names are made here and nowhere else.
 *
 * The model/ wing (floor 2, above backend/): what is trained -- the model, its loss,
 * optimizer and learning-rate schedule, and ZeRO's shard plan (which rank owns which
 * parameters). It knows no ranks' communication, data sets, files or options: the
 * trainers (train/) drive it, the checkpoints (store/) read its state dict.
 *
 * This module knows nothing of ranks or communication: the trainer passes hooks
 * (struct model_hooks) that forward calls before each layer and backward after
 * each layer's gradients are complete; a hook's failure ends the pass.
 */
#ifndef DDPT_MODEL_H
#define DDPT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/status.h"
#include "core/tracebuf.h" /* struct trace_buf, the recorders */

#define MODEL_MAX_LAYERS 64 /* Linear layers; widths has one more entry */
#define MODEL_MAX_ARENAS 4  /* the parameters and up to 3 optimizer state arenas */

#define MODEL_SLOTS 3      /* extra gradient floats after the parameters */
#define MODEL_SLOT_LOSS 0  /* the step's loss over ranks and micro-batches */
#define MODEL_SLOT_ACC 1   /* cross-entropy: the step's accuracy, likewise (right after the loss) */
#define MODEL_SLOT_STOP 2  /* nonzero if some rank was asked to stop (a signal) */

/* The function applied to a layer's output; the last layer's is the model's output. */
enum activation { ACT_NONE, ACT_RELU };

/* A named arena: arena 0 is the parameters (nparams floats, tensor names "net1.weight",
 * ...); the others are optimizer state ("momentum_buffer": "momentum_buffer.net1.weight",
 * ...), ntrainable floats laid out as the trainable layers' parameters with the frozen
 * layers left out (model_trainable_runs gives each run's place in both). */
struct model_arena {
	const char *name; /* static storage; "" for the parameters */
	float *data;      /* (len) backend memory, owned by the model */
	size_t len;       /* floats held here: nparams, ntrainable, or a ZeRO shard's */
	size_t first;     /* where data[0] is in the whole arena (0 unless sharded) */
	size_t whole;     /* floats of the whole arena: nparams, or ntrainable */
};

struct model {
	int nlayers;
	int widths[MODEL_MAX_LAYERS + 1];
	enum activation act_fn[MODEL_MAX_LAYERS]; /* applied to layer l's output */
	size_t w_off[MODEL_MAX_LAYERS]; /* layer l's weight in params/grads */
	size_t b_off[MODEL_MAX_LAYERS]; /* layer l's bias */
	size_t nparams;
	size_t ntrainable;            /* floats of the layers not frozen (nparams if none is) */
	int max_batch;
	struct backend *be;           /* borrowed */
	float *params;                /* (nparams), = arena[0].data; ZeRO-3: the window of arena 0 */
	float *grads;                 /* (nparams + MODEL_SLOTS + 1: slots, norm); NULL once sharded
				       * (struct model_shard grad_extra) */
	/* The gradients' memory, the one block the communicator's collectives work in: grads,
	 * or ZeRO-2's block (gfloats floats) */
	float *gmem;
	size_t gfloats;
	int grads_lent;               /* gmem belongs to the communicator (model_move_grads) */
	/* Where backward writes layer l's weight gradient (out, in), its bias gradient (out)
	 * right after: grads + w_off[l], or (ZeRO-2/3) a place in a bucket buffer. */
	float *gw[MODEL_MAX_LAYERS];
	/* Where forward and backward read layer l's weight (out, in), its bias (out) right
	 * after: params + w_off[l], or (ZeRO-3, the parameters sharded) the working buffer the
	 * caller's hook gathered the layer into, NULL until it has. */
	float *pw[MODEL_MAX_LAYERS];
	int psharded;                 /* arena 0 holds a window of the parameters (ZeRO-3) */
	float *work;                  /* (work_floats) ZeRO-3's working set, laid out by the caller */
	size_t work_floats;
	float *slots;                 /* (MODEL_SLOTS) grads + nparams, or in the sharded block */
	int gblock;                   /* gmem is a block laid out by the caller (grad_extra):
				       * the slots, the norm, then the caller's; grads and gw NULL */
	struct model_arena arena[MODEL_MAX_ARENAS];
	int narenas;                  /* 1 + optimizer state arenas */
	float *norm;                  /* (1) scratch: the squared gradient norm for clipping, in gmem
				       * after the slots (ZeRO sums it over the ranks) */
	unsigned char frozen[MODEL_MAX_LAYERS]; /* layer l gets no gradient, no update, no state */
	float *act[MODEL_MAX_LAYERS + 1]; /* act[0] input (batch, widths[0]); act[l] output of layer l */
	float *target;                /* (batch, widths[nlayers]) */
	float *own_input, *own_target; /* act[0] and target as allocated (model_read_input) */
	float *dbuf[2];               /* (batch, max width) ping-pong gradients of activations */
	size_t bytes;                 /* backend memory held by all of the above */
	struct trace_buf *trace;      /* borrowed: per-layer spans go here, or NULL (off) */
};

/* What a rank keeps of the model's memory when it keeps less than all of it (ZeRO; the
 * gradient plan, train/plan.h, says what). All zero: everything. */
struct model_shard {
	int sharded;                    /* the parameters are a window (ZeRO-3): */
	size_t param_first, param_len;  /* floats [first, first + len) of arena 0 */
	size_t work;                    /* ZeRO-3: floats of the working set gathered layers live in */
	/* ZeRO-2/3: the gradient memory is one block of the slots, the norm and grad_extra
	 * floats the caller lays out (its pool buffers and gradient shard), instead of the
	 * whole gradient; 0: the whole gradient */
	size_t grad_extra;
};

/* Bytes model_init_shard allocates for these widths and batch and sh (NULL: all of it),
 * plus state_arenas optimizer arenas with the layers of frozen (NULL: none) left out, each
 * sharded over `shards` ranks (1: whole; ZeRO: the largest rank's shard) (no allocation). */
size_t model_bytes_needed(const int *widths, int nlayers, int max_batch, int state_arenas,
			  const unsigned char *frozen, int shards, const struct model_shard *sh);
/* Offsets, parameter count and activations for these widths (no allocation). */
void model_layout(struct model *m, const int *widths, int nlayers);
/* Lay out and allocate on be for micro-batches of up to max_batch rows: all of the
 * parameters and gradient (model_init), or what sh keeps (model_init_shard; sh NULL: all).
 * With sh->grad_extra, grads and gw are NULL (the caller points gw into its layout); with
 * sh->sharded, pw is NULL (the caller's hooks point it at the gathered layers). */
enum status model_init(struct model *m, struct backend *be, const int *widths, int nlayers,
		       int max_batch, struct diag *d);
enum status model_init_shard(struct model *m, struct backend *be, const int *widths, int nlayers,
			     int max_batch, const struct model_shard *sh, struct diag *d);
/* Add a zeroed state arena named name (static storage) holding floats [first, first +
 * len) of the whole arena of ntrainable floats (0, ntrainable: all of it; ZeRO: the
 * rank's shard); returns it, or NULL (with d set) when out of memory or arenas. The
 * model frees it. */
float *model_add_arena(struct model *m, const char *name, size_t first, size_t len,
		       struct diag *d);
/* Freeze the layers with frozen[l] set (frozen may be NULL: none). Before any state arena
 * is added: a frozen layer has no optimizer state in the state dict. */
void model_freeze(struct model *m, const unsigned char *frozen);
/* The trainable parameters as runs of consecutive trainable layers, first layer first:
 * fills off[] (in the parameters and gradients), state_off[] (in a state arena; may be
 * NULL) and len[] (room for nlayers each) and returns the number of runs. */
int model_trainable_runs(const struct model *m, size_t *off, size_t *state_off, size_t *len);
/* nn.Linear's default init, weight and bias uniform in +-1/sqrt(fan_in), a pure
 * function of seed. host is scratch of nparams floats and receives the weights. */
void model_init_host(const struct model *m, uint64_t seed, float *host);

/* One tensor of the state dict. */
struct model_tensor {
	char name[64];  /* "net1.weight", "momentum_buffer.net1.weight", ... */
	int ndim;       /* 2 (weight) or 1 (bias) */
	int shape[2];   /* (out, in) or (out) */
	int arena;      /* index into m->arena */
	size_t off;     /* first float within the arena */
	size_t len;     /* floats */
};
/* The tensors of arenas [first, last) in order (arena by arena, layer by layer, weight
 * then bias; a frozen layer has none in the state arenas); t has room for
 * (last - first) * model_tensors_per_arena(m) entries.
 * Returns the count. Use first = 0, last = 1 for the weights, 0, m->narenas for all. */
int model_state_dict(const struct model *m, int first, int last, struct model_tensor *t);
/* Tensors per arena (2 per layer). */
int model_tensors_per_arena(const struct model *m);
/* Floats of the whole arenas [first, last) together: a host buffer for
 * model_state_to_host. */
size_t model_state_floats(const struct model *m, int first, int last);
/* Copy arenas [first, last) to host, laid out arena after arena (each its whole floats;
 * a sharded arena fills only its own part, at its first), or back to the backend (a
 * sharded arena reads only its part). to_host waits, and returns the device's error, if
 * any (host is then not valid); to_device is queued (sync before reusing host). */
enum status model_state_to_host(const struct model *m, int first, int last, float *host,
				struct diag *d);
void model_state_to_device(struct model *m, int first, int last, const float *host);
/* Are all n host floats finite? (Weights are checked before every write: a file never
 * holds a NaN or an infinity.) */
int model_all_finite(const float *host, size_t n);
/* What a pass calls back into its caller (the trainer's gradient sync). Every entry may
 * be NULL; one that returns an error ends the pass, which returns it. */
struct model_hooks {
	void *arg;
	/* forward: before layer l (ZeRO waits there for the all-gather of its parameters) */
	enum status (*before_layer)(void *arg, int layer);
	/* backward: before layer l, which reads pw[l] to pass the gradient down (ZeRO-3 waits
	 * there for its parameters' all-gather) */
	enum status (*before_backward)(void *arg, int layer);
	/* backward: after layer l's gradients are complete */
	enum status (*layer_done)(void *arg, int layer);
	/* backward in row panels (panel_dst NULL: none): a trainable layer of more than
	 * panel_cap floats is computed in the parts model_panel_range gives, not into gw[l]:
	 * part j is written (set, never added) where panel_dst(arg, l, j) says, then handed
	 * over with panel_done(arg, l, j), all before dx and layer_done. */
	size_t panel_cap;
	float *(*panel_dst)(void *arg, int layer, int j);
	enum status (*panel_done)(void *arg, int layer, int j);
};
/* The floating-point operations of the matrix products of one forward and backward of n
 * rows (2 per multiply-add: forward, the weight gradients of the trainable layers, the
 * input gradients of the layers above the first trainable one), as the TFLOP/s figures
 * count them; the element-wise work is left out. */
double model_flops(const struct model *m, int n);
/* On a backend whose memory is the host's (backend_ops.host_memory): read the input and
 * the target from x and y, where the caller made them, until model_read_input(m, NULL,
 * NULL) puts back the model's own (to_device into act[0] and target copies into those). */
void model_read_input(struct model *m, const float *x, const float *y);
/* Forward n rows of act[0]; the output is act[nlayers]. h may be NULL (not with sharded
 * parameters: its before_layer points pw). */
enum status model_forward(struct model *m, int n, const struct model_hooks *h);
/* Backward from dbuf[0] (n, widths[nlayers]) = dL/dout. Layers run last to first, down to
 * the first trainable one, calling h's hooks (h may be NULL). The weight and bias
 * gradients come out times gscale (backend.h), set, or added to with accumulate. A
 * frozen layer passes the gradient through to the layers before it but gets none itself
 * (its slice of grads is left as it was). */
enum status model_backward(struct model *m, int n, float gscale, int accumulate,
			   const struct model_hooks *h);
/* Safe to call twice. */
void model_free(struct model *m);

/* A range of the gradients that travels as one collective (the gradient plan, plan.h,
 * cuts them): whole layers lo..hi, a row panel of one layer, or the slots alone
 * (lo = hi = -1). */
struct bucket {
	int lo, hi;   /* layers lo..hi; backward completes it at layer lo */
	size_t off;   /* first float in grads */
	size_t len;   /* floats, including the slots for the bucket holding the last layer */
	int panel;    /* 1: a row panel of layer lo (= hi) alone (grad_plan_cut) */
};

/* Row panels of layer l for parts of at most cap floats (cap >= 1): as many of
 * the weight's rows as fit in a part (at least one: a row longer than cap is a part of
 * its own), the bias after the last rows as far as that part has room, the rest of the
 * bias in parts of cap. Each part is a contiguous range of the layer's floats (weight
 * then bias), so of the trainable index space. model_panel_count: how many;
 * model_panel_range: part j is floats [*a, *b) of the layer, from w_off[l]. */
int model_panel_count(const struct model *m, int l, size_t cap);
void model_panel_range(const struct model *m, int l, size_t cap, int j, size_t *a, size_t *b);
/* Move the gradients' memory (gmem: gfloats floats, with their contents: the gradients,
 * the slots and the norm) to host memory
 * the communicator owns and frees (struct comm's grads); model_free leaves it alone. */
void model_move_grads(struct model *m, float *grads);
#endif
