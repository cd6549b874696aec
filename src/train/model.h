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
 * This module knows nothing of ranks or communication: the trainer passes a
 * hook that backward calls after each layer's gradients are complete.
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
	float *params;                /* (nparams), = arena[0].data */
	float *grads;                 /* (nparams + MODEL_SLOTS + 1: slots, norm); NULL once sharded
				       * (model_shard_grads) */
	/* The gradients' memory, the one block the communicator's collectives work in: grads,
	 * or ZeRO-2's block (gfloats floats) */
	float *gmem;
	size_t gfloats;
	int grads_lent;               /* gmem belongs to the communicator (model_move_grads) */
	/* Where backward writes layer l's weight gradient (out, in), its bias gradient (out)
	 * right after: grads + w_off[l], or (ZeRO-2) a place in a bucket buffer. */
	float *gw[MODEL_MAX_LAYERS];
	float *slots;                 /* (MODEL_SLOTS) grads + nparams, or in the sharded block */
	/* ZeRO-2 (model_shard_grads): gmem is MODEL_SLOTS + 1 + pool + shard floats in place of
	 * grads: the slots, the norm, the bucket buffers, and room for this rank's shard of the reduced
	 * gradient (laid out as its optimizer state; gshard_len floats, the largest rank's, so
	 * that the block is laid out alike on every rank); else NULL */
	float *gshard, *gpool;
	size_t gshard_len;
	/* Called before each layer's forward (if not NULL): ZeRO-2 waits there for the
	 * all-gather of the layer's parameters. */
	void (*pre_layer)(void *arg, int layer);
	void *pre_arg;
	/* ZeRO-2's row panels (panel_dst NULL: none): backward computes a trainable layer of
	 * more than panel_cap floats in the parts model_panel_range gives, not into gw[l]:
	 * part j is written (set, never added) where panel_dst(panel_arg, l, j) says, then
	 * handed over with panel_done(panel_arg, l, j), all before dx and the layer's hook. */
	size_t panel_cap;
	float *(*panel_dst)(void *arg, int layer, int j);
	void (*panel_done)(void *arg, int layer, int j);
	void *panel_arg;
	struct model_arena arena[MODEL_MAX_ARENAS];
	int narenas;                  /* 1 + optimizer state arenas */
	float *norm;                  /* (1) scratch: the squared gradient norm for clipping, in gmem
				       * after the slots (ZeRO sums it over the ranks) */
	unsigned char frozen[MODEL_MAX_LAYERS]; /* layer l gets no gradient, no update, no state */
	float *act[MODEL_MAX_LAYERS + 1]; /* act[0] input (batch, widths[0]); act[l] output of layer l */
	float *target;                /* (batch, widths[nlayers]) */
	float *dbuf[2];               /* (batch, max width) ping-pong gradients of activations */
	size_t bytes;                 /* backend memory held by all of the above */
	struct trace_buf *trace;      /* borrowed: per-layer spans go here, or NULL (off) */
};

/* Bytes model_init allocates for these widths and batch, plus state_arenas optimizer
 * arenas with the layers of frozen (NULL: none) left out, each sharded over `shards`
 * ranks (1: whole; ZeRO: the largest rank's shard) (no allocation). */
size_t model_bytes_needed(const int *widths, int nlayers, int max_batch, int state_arenas,
			  const unsigned char *frozen, int shards);
/* Offsets, parameter count and activations for these widths (no allocation). */
void model_layout(struct model *m, const int *widths, int nlayers);
/* Lay out and allocate on be for micro-batches of up to max_batch rows. */
enum status model_init(struct model *m, struct backend *be, const int *widths, int nlayers,
		       int max_batch, struct diag *d);
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
/* Forward n rows of act[0]; the output is act[nlayers]. */
void model_forward(struct model *m, int n);
/* Backward from dbuf[0] (n, widths[nlayers]) = dL/dout. Layers run last to first, down to
 * the first trainable one; after each one, hook(arg, l) is called (if hook is not NULL).
 * accumulate adds to grads. A frozen layer passes the gradient through to the layers
 * before it but gets none itself (its slice of grads is left as it was). */
void model_backward(struct model *m, int n, int accumulate, void (*hook)(void *arg, int layer),
		    void *arg);
/* Safe to call twice. */
void model_free(struct model *m);

/* Gradient buckets: runs of whole trainable layers from the last layer backwards, each
 * closed once it holds at least cap floats (first_cap for the first, as PyTorch DDP does)
 * or when the next layer down is frozen. The slots ride with the bucket of the last
 * layer; when that layer is frozen they are a bucket of their own (lo = hi = -1), the
 * last one listed. */
struct bucket {
	int lo, hi;   /* layers lo..hi; backward completes it at layer lo */
	size_t off;   /* first float in grads */
	size_t len;   /* floats, including the slots for the bucket holding the last layer */
	int panel;    /* 1: a row panel of layer lo (= hi) alone (model_plan_parts) */
};
/* Fill b (room for nlayers + 1 entries); returns the bucket count. */
int model_plan_buckets(const struct model *m, size_t cap, size_t first_cap, struct bucket *b);

/* ZeRO-2's row panels of layer l for parts of at most cap floats (cap >= 1): as many of
 * the weight's rows as fit in a part (at least one: a row longer than cap is a part of
 * its own), the bias after the last rows as far as that part has room, the rest of the
 * bias in parts of cap. Each part is a contiguous range of the layer's floats (weight
 * then bias), so of the trainable index space. model_panel_count: how many;
 * model_panel_range: part j is floats [*a, *b) of the layer, from w_off[l]. */
int model_panel_count(const struct model *m, int l, size_t cap);
void model_panel_range(const struct model *m, int l, size_t cap, int j, size_t *a, size_t *b);
/* ZeRO-2's plan of the reduce-scatters in backward's order: the buckets of
 * model_plan_buckets, except that a trainable layer of more than cap floats is never in
 * one but comes as its row panels (model_panel_range for cap, panel = 1; a bucket
 * gathering the layers after it closes before it), and the slots are in no part (they
 * travel in an all-reduce of their own). Fills b with parts first .. first + room - 1
 * (those that exist; b may be NULL when room is 0) and returns the count of all. */
int model_plan_parts(const struct model *m, size_t cap, size_t first_cap, int first, int room,
		     struct bucket *b);

/* Move the gradients' memory (gmem: gfloats floats, with their contents: the gradients,
 * the slots and the norm) to host memory
 * the communicator owns and frees (struct comm's grads); model_free leaves it alone. */
void model_move_grads(struct model *m, float *grads);
/* ZeRO-2: replace the whole gradient with one block of MODEL_SLOTS + 1 + pool + shard
 * floats (slots, norm, gpool, gshard): before the communicator opens over gmem (the same size and
 * layout on every rank: shard is the largest rank's); the caller points gw into the
 * pool. On failure (d set) nothing changes. */
enum status model_shard_grads(struct model *m, size_t shard, size_t pool, struct diag *d);

#endif
