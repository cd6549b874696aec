/*
 * backend.h - the compute interface the model is written against.
 *
 * A backend owns the memory its pointers refer to (host memory for the CPU
 * backend, device memory for CUDA) and runs the few operations an MLP with
 * MSE loss and SGD needs. The model and the trainers only ever call through
 * struct backend_ops, so they do not know which backend they drive.
 *
 * Compute operations cannot fail on the CPU and fail asynchronously on a
 * GPU, so they return nothing; a backend remembers its first error and
 * reports it, with the failing call, from sync().
 */
#ifndef DDPT_BACKEND_H
#define DDPT_BACKEND_H

#include <stddef.h>

#include "status.h"

struct sgd_hparams {
	float lr, momentum, weight_decay;
};

struct backend_ops {
	const char *name;
	/* Create the backend's context (handles, streams). */
	enum status (*init)(void **ctx, struct diag *d);
	/* Release the context; NULL is allowed. */
	void (*fini)(void *ctx);
	/* Zeroed device memory for n floats, or NULL. */
	float *(*alloc)(void *ctx, size_t n);
	void (*free)(void *ctx, float *p);
	void (*to_device)(void *ctx, float *dst, const float *src, size_t n);
	void (*to_host)(void *ctx, float *dst, const float *src, size_t n);
	/* dst = src, both device memory of this backend. */
	void (*copy)(void *ctx, float *dst, const float *src, size_t n);
	/* dst += src, both device memory of this backend. */
	void (*add)(void *ctx, float *dst, const float *src, size_t n);
	/* y (n, out) = x (n, in) @ w^T + b; w is (out, in) row-major, b (out). */
	void (*linear_forward)(void *ctx, float *y, const float *x, const float *w, const float *b,
			       int n, int in, int out);
	/* From dy (n, out): dw (out, in) and db (out) are set (accumulate = 0) or added to
	 * (accumulate = 1); dx (n, in) = dy @ w is set unless dx is NULL. */
	void (*linear_backward)(void *ctx, float *dx, float *dw, float *db, const float *dy,
				const float *x, const float *w, int n, int in, int out, int accumulate);
	/* y = max(y, 0), in place. */
	void (*relu_forward)(void *ctx, float *y, size_t n);
	/* dy *= (y > 0), in place; y is the ReLU output. */
	void (*relu_backward)(void *ctx, float *dy, const float *y, size_t n);
	/* MSE over n rows of `width`: *loss = scale * mean((y - t)^2), added to *loss when
	 * accumulate is set, and dy = scale * 2 (y - t) / (n * width). loss is device memory. */
	void (*mse)(void *ctx, float *dy, float *loss, const float *y, const float *t, int n,
		    int width, float scale, int accumulate);
	/* torch.optim.SGD on n parameters: g' = g + wd p; m = momentum m + g' (if momentum
	 * is nonzero, with m starting at zero); p -= lr * (m or g'). */
	void (*sgd)(void *ctx, float *p, const float *g, float *m, size_t n,
		    const struct sgd_hparams *h);
	/* Wait for queued work; report the first error since the last sync. */
	enum status (*sync)(void *ctx, struct diag *d);
};

struct backend {
	const struct backend_ops *ops;
	void *ctx;
};

extern const struct backend_ops backend_cpu_ops;

/* Set up be with ops; ST_RUNTIME with the reason if the backend cannot start. */
enum status backend_init(struct backend *be, const struct backend_ops *ops, struct diag *d);
/* Safe to call twice. */
void backend_free(struct backend *be);

#endif
