/*
 * backend.h - the compute interface the model is written against.
 *
 * The backend/ wing (floor 1, above core/): the compute interface, the CPU
 * backend, and the GPU probe and module loader (backend/gpu.h). It knows no
 * model, no data and no communicator: those are built on it.
 *
 * A backend owns the memory its pointers refer to (host memory for the CPU
 * backend, device memory for CUDA) and runs the kernels an MLP, its loss
 * (loss.h) and its optimizer (optimizer.h) are built from: the layers, the
 * activations, the losses and element-wise updates. It knows no optimizer. The model and the trainers only ever call through
 * struct backend_ops, so they do not know which backend they drive.
 *
 * Compute operations cannot fail on the CPU and fail asynchronously on a
 * GPU, so they return nothing; a backend remembers its first error and
 * reports it, with the failing call, from sync().
 */
#ifndef DDPT_BACKEND_H
#define DDPT_BACKEND_H

#include <stddef.h>

#include "core/status.h"
#include "core/synth.h" /* struct synth_spec: the synthetic generator */

struct trace_dev; /* trace.h */

#ifdef __cplusplus
extern "C" {
#endif

/* One torch.optim.AdamW step, its scalars worked out on the host in double precision as
 * PyTorch does (for step t): decay = 1 - lr wd, one_minus_beta1 = 1 - beta1,
 * one_minus_beta2 = 1 - beta2, step_size = lr / (1 - beta1^t), bc2_sqrt = sqrt(1 - beta2^t). */
struct adamw_hparams {
	float decay, beta1, beta2, one_minus_beta1, one_minus_beta2, step_size, bc2_sqrt, eps;
};

/* The matrix products' arithmetic (--precision). PRECISION_TF32 lets cuBLAS use TF32
 * tensor cores (not bit-compatible with float32; the CPU runs float32). PRECISION_BF16 is
 * torch.autocast's bfloat16: linear_forward, linear_backward and linear_grad_rows round
 * their matrix operands to bf16 (nearest even), sum in float32 and round each result to
 * bf16, which they store in the float32 buffer (the bias is rounded and added before that
 * rounding; dw and db are bf16 values times the gradient scale, in float32, added in
 * float32 when accumulating). Every other kernel runs in float32 on what it is given.
 *
 * Where the mean over ranks and micro-batches is taken: the loss kernels scale the
 * gradient's seed by dscale and linear_backward and linear_grad_rows their weight and
 * bias gradients by gscale. In float32 the trainer puts it in the seed (gscale 1); in
 * bf16 after the backward (dscale 1), where PyTorch takes it: DDP divides the float32
 * gradient by the world size, and the accumulating loop the gradient summed over the
 * micro-batches by their count. A scale in the seed would change every bf16 rounding of
 * the backward when it is not a power of two (issue 34). */
enum precision { PRECISION_FP32, PRECISION_TF32, PRECISION_BF16 };

/* What a backend instance is created for. */
struct backend_config {
	int device;                /* GPU index (after CUDA_VISIBLE_DEVICES); ignored by the CPU backend */
	enum precision precision;  /* the products' arithmetic */
};

struct backend_ops {
	const char *name;
	int host_memory; /* 1: device memory is ordinary host memory (MPI may use it as is) */
	/* Create the backend's context (handles, streams) on cfg->device. */
	enum status (*init)(void **ctx, const struct backend_config *cfg, struct diag *d);
	/* Release the context; NULL is allowed. */
	void (*fini)(void *ctx);
	/* Make this instance current for the calling thread (dp worker threads). */
	enum status (*bind)(void *ctx, struct diag *d);
	/* Zeroed device memory for n floats, or NULL. */
	float *(*alloc)(void *ctx, size_t n);
	void (*free)(void *ctx, float *p);
	/* Host memory that to_device reads fastest (pinned for CUDA), or NULL. */
	float *(*host_alloc)(void *ctx, size_t n);
	void (*host_free)(void *ctx, float *p);
	/* Queue a copy from host memory; src must stay unchanged until the copy has run: until
	 * the next to_host or sync, or until host_wait on a mark recorded after it (the loader
	 * rings its host batches and waits on each buffer's mark before refilling it). */
	void (*to_device)(void *ctx, float *dst, const float *src, size_t n);
	/* Synthetic samples idx[0..n) made where they are used: x (n, s->in) and y (n,
	 * s->classes ? 1 : s->outs) in device memory, either NULL to skip; the bytes of
	 * core/synth.h's generator. idx is host memory (host_alloc) read as to_device's src is:
	 * unchanged until the work has run. Nothing else crosses to the device. With x and y
	 * both NULL it only makes room for n indices (device memory: never inside a capture). */
	void (*synth)(void *ctx, float *x, float *y, const struct synth_spec *s, const uint32_t *idx, int n);
	/* Copy to host memory; returns when dst holds the data (waits for queued work). An
	 * error in that work, or in the communicator ordered with it, is returned here with
	 * the failing call: dst is then not valid. Behind a collective, dst must come from
	 * host_alloc: a copy into pageable memory blocks inside the CUDA driver until the
	 * collective ends, where a dead peer is neither polled for nor timed out. */
	enum status (*to_host)(void *ctx, float *dst, const float *src, size_t n, struct diag *d);
	/* Queue a copy to dst, host memory from host_alloc, without waiting: dst holds the data
	 * once the device has passed a host_mark recorded after it (host_poll or host_wait
	 * says so); without host_mark, when this returns. */
	void (*to_host_async)(void *ctx, float *dst, const float *src, size_t n);
	/* dst = src, both device memory of this backend. */
	void (*copy)(void *ctx, float *dst, const float *src, size_t n);
	/* dst (this instance's memory) = src (the memory of instance src_ctx, maybe another
	 * GPU); ordered after both instances' queued work. */
	void (*copy_peer)(void *ctx, float *dst, void *src_ctx, const float *src, size_t n);
	/* dst += src, both device memory of this backend. */
	void (*add)(void *ctx, float *dst, const float *src, size_t n);
	/* y (n, out) = x (n, in) @ w^T + b, then max(y, 0) if relu; w is (out, in) row-major,
	 * b (out). The bias and the ReLU are one pass over y. */
	void (*linear_forward)(void *ctx, float *y, const float *x, const float *w, const float *b,
			       int n, int in, int out, int relu);
	/* From dy (n, out): dw (out, in) = gscale dy^T @ x and db (out) = gscale times the
	 * column sums of dy are set (accumulate = 0) or added to (accumulate = 1) unless dw is
	 * NULL (a frozen layer: db is then ignored too); dx (n, in) = dy @ w is set unless dx
	 * is NULL (never scaled). */
	void (*linear_backward)(void *ctx, float *dx, float *dw, float *db, const float *dy,
				const float *x, const float *w, int n, int in, int out, float gscale,
				int accumulate);
	/* Rows [r0, r1) of linear_backward's weight and bias gradients from dy (n, out) and
	 * x (n, in), set (never added), each element with the arithmetic linear_backward uses
	 * for it: dw (r1 - r0, in) = gscale dy[:, r0:r1]^T @ x unless dw is NULL, db (r1 - r0)
	 * = gscale times the sums of dy[:, r0:r1] over the n rows unless db is NULL. ZeRO-2
	 * computes a layer larger than a bucket in row panels with it, each into a reused
	 * bucket buffer. */
	void (*linear_grad_rows)(void *ctx, float *dw, float *db, const float *dy, const float *x,
				 int n, int in, int out, int r0, int r1, float gscale);
	/* y = max(y, 0), in place. */
	void (*relu_forward)(void *ctx, float *y, size_t n);
	/* dy *= (y > 0), in place; y is the ReLU output. */
	void (*relu_backward)(void *ctx, float *dy, const float *y, size_t n);
	/* MSE over n rows of `width`: *loss = scale * mean((y - t)^2), added to *loss when
	 * accumulate is set, and dy = dscale * 2 (y - t) / (n * width). loss is device memory. */
	void (*mse)(void *ctx, float *dy, float *loss, const float *y, const float *t, int n,
		    int width, float scale, float dscale, int accumulate);
	/* y = a y + c (x + b z) element-wise over n floats, as (x + b z) rounded first; z may
	 * be NULL (then y = a y + c x) and may be y itself. The optimizers' fused update. */
	void (*axpbz)(void *ctx, float *y, float a, float c, const float *x, float b,
		      const float *z, size_t n);
	/* Softmax cross-entropy over n rows of `classes` logits with class labels (n) stored as
	 * floats: out[0] = scale * mean(logsumexp(z) - z[label]) and out[1] = scale * the
	 * fraction of rows whose first largest logit is the label (torch.argmax), each added
	 * to when accumulate is set; dy = dscale * (softmax(z) - onehot(label)) / n. out is
	 * device memory (2). Labels are in range (checked when the data is loaded). */
	void (*cross_entropy)(void *ctx, float *dy, float *out, const float *z, const float *labels,
			      int n, int classes, float scale, float dscale, int accumulate);
	/* torch.optim.AdamW on n parameters: p *= decay; m = beta1 m + (1 - beta1) g;
	 * v = beta2 v + (1 - beta2) g^2; p -= step_size * m / (sqrt(v) / bc2_sqrt + eps). */
	void (*adamw)(void *ctx, float *p, const float *g, float *m, float *v, size_t n,
		      const struct adamw_hparams *h);
	/* out[0] = (out[0] if accumulate, else 0) + sum of x[i]^2; out is device memory (1). */
	void (*sumsq)(void *ctx, float *out, const float *x, size_t n, int accumulate);
	/* The replica check's digest of x[0..n) (core/hash64.h), its elements numbered from
	 * `first` (their index in the tensor or arena): into out, device memory of 2 floats
	 * that hold the 64 bits (read back with to_host, then memcpy into a uint64_t). Of the
	 * bits, not the values: every backend gives the same digest for the same bits. */
	void (*hash64)(void *ctx, float *out, const float *x, size_t n, uint64_t first);
	/* clip_grad_norm_'s scaling: x *= min(1, max_norm / (sqrt(sumsq[0]) + 1e-6)), sumsq
	 * being device memory (1) filled by sumsq over all the tensors clipped together. */
	void (*clip)(void *ctx, float *x, size_t n, const float *sumsq, float max_norm);
	/* Wait for queued work; report the first error since the last sync. */
	enum status (*sync)(void *ctx, struct diag *d);
	/* Device memory in use by this instance, in bytes (0 if unknown). */
	size_t (*mem_used)(void *ctx);
	/* Optional (NULL if unsupported): record the work queued between graph_begin and
	 * graph_end as graph `slot` (0..BACKEND_GRAPHS-1), and replay it with graph_launch.
	 * A failed capture leaves the work unexecuted and returns an error. */
	enum status (*graph_begin)(void *ctx, struct diag *d);
	enum status (*graph_end)(void *ctx, int slot, struct diag *d);
	enum status (*graph_launch)(void *ctx, int slot, struct diag *d);
	/* Optional: destroy every recorded graph. A graph that recorded a collective must be
	 * gone before its communicator is (NCCL's destroy waits for such graphs). */
	void (*graph_reset)(void *ctx);
	/* Optional (NULL where to_device copies at once): host_mark(slot) marks the point
	 * after the work queued so far; host_wait(slot) returns when the device has passed
	 * the last mark of that slot (0..BACKEND_MARKS-1), with the first error, if any. */
	void (*host_mark)(void *ctx, int slot);
	enum status (*host_wait)(void *ctx, int slot, struct diag *d);
	/* With host_mark: never blocks. *done = 1 if the device has passed the last mark of
	 * that slot (cudaEventQuery), else 0; returns the first error, if any (then *done = 1:
	 * nothing more will come). */
	enum status (*host_poll)(void *ctx, int slot, int *done, struct diag *d);
	/* Optional (NULL where the host clock times device work, as on the CPU): timer_mark(id)
	 * marks the point after the work queued so far (id 0..BACKEND_TIMERS-1, reusable after
	 * a sync); timer_ms(a, b) is the device time from mark a to mark b, in milliseconds,
	 * once both have passed (after a sync), or negative if unknown. */
	void (*timer_mark)(void *ctx, int id);
	double (*timer_ms)(void *ctx, int a, int b);
	/* Optional (NULL if unsupported): call fn between the panels of linear_backward's
	 * products longer than 2 x panel_flops (0: none is cut), so that communication can move
	 * while they compute: fn(arg, dw + o * in, rows * in) when dw's rows [o, o + rows) are
	 * final (they come in increasing order), fn(arg, NULL, 0) between dx's panels. The
	 * panels depend only on the shapes and panel_flops. fn NULL: stop. */
	void (*set_progress)(void *ctx, void (*fn)(void *arg, float *done, size_t n), void *arg,
			     double panel_flops);
	/* Optional: a device clock for --trace (CUDA events on the compute stream, NVTX
	 * ranges), driven with this backend's ctx; NULL: spans use host times. */
	const struct trace_dev *trace_dev;
};

#define BACKEND_GRAPHS 4
#define BACKEND_MARKS 5 /* 0 .. 2: the loader's buffers (LOADER_BUFFERS); 3, 4: ddp's step reads */
#define BACKEND_TIMERS 64

struct backend {
	const struct backend_ops *ops;
	void *ctx;
};

extern const struct backend_ops backend_cpu_ops;

/* Set up be with ops; ST_RUNTIME with the reason if the backend cannot start. */
enum status backend_init(struct backend *be, const struct backend_ops *ops,
			 const struct backend_config *cfg, struct diag *d);
/* Safe to call twice. */
void backend_free(struct backend *be);

#ifdef __cplusplus
}
#endif

#endif
