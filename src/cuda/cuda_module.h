/*
 * cuda_module.h - the functions the CUDA module's files define for module.c's
 * tables (backend_cuda.cu: the backend's operations; comm_nccl.c: the NCCL
 * communicator). Every defining file includes it, so the compiler checks each
 * definition against the prototype the table is built from.
 */
#ifndef DDPT_CUDA_MODULE_H
#define DDPT_CUDA_MODULE_H

#include <stddef.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "backend/gpu.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* module.c: the entry point gpu.c finds by dlsym(GPU_MODULE_SYMBOL). */
const struct gpu_module *ddptrain_gpu_module(void);
/* backend_cuda.cu */
enum status cuda_init(void **out, const struct backend_config *cfg, struct diag *d);
void cuda_fini(void *ctx);
enum status cuda_bind(void *ctx, struct diag *d);
float *cuda_alloc(void *ctx, size_t n);
void cuda_free(void *ctx, float *p);
float *cuda_host_alloc(void *ctx, size_t n);
void cuda_host_free(void *ctx, float *p);
void cuda_to_device(void *ctx, float *dst, const float *src, size_t n);
void cuda_synth(void *ctx, float *x, float *y, const struct synth_spec *s, const uint32_t *idx, int n);
enum status cuda_to_host(void *ctx, float *dst, const float *src, size_t n, struct diag *d);
void cuda_to_host_async(void *ctx, float *dst, const float *src, size_t n);
void cuda_copy(void *ctx, float *dst, const float *src, size_t n);
void cuda_copy_peer(void *ctx, float *dst, void *src_ctx, const float *src, size_t n);
void cuda_add(void *ctx, float *dst, const float *src, size_t n);
void cuda_linear_forward(void *ctx, float *y, const float *x, const float *w, const float *b,
			 int n, int in, int out, int relu);
void cuda_linear_backward(void *ctx, float *dx, float *dw, float *db, const float *dy,
			  const float *x, const float *w, int n, int in, int out, float gscale,
			  int accumulate);
void cuda_linear_grad_rows(void *ctx, float *dw, float *db, const float *dy, const float *x,
			   int n, int in, int out, int r0, int r1, float gscale);
void cuda_relu_forward(void *ctx, float *y, size_t n);
void cuda_relu_backward(void *ctx, float *dy, const float *y, size_t n);
void cuda_mse(void *ctx, float *dy, float *loss, const float *y, const float *t, int n, int width,
	      float scale, float dscale, int accumulate);
void cuda_cross_entropy(void *ctx, float *dy, float *out, const float *z, const float *labels,
			int n, int classes, float scale, float dscale, int accumulate);
void cuda_adamw(void *ctx, float *p, const float *g, float *m, float *v, size_t n,
		const struct adamw_hparams *h);
void cuda_sumsq(void *ctx, float *out, const float *x, size_t n, int accumulate);
void cuda_hash64(void *ctx, float *out, const float *x, size_t n, uint64_t first);
void cuda_clip(void *ctx, float *x, size_t n, const float *sumsq, float max_norm);
void cuda_axpbz(void *ctx, float *y, float a, float c, const float *x, float b, const float *z,
		size_t n);
enum status cuda_sync(void *ctx, struct diag *d);
size_t cuda_mem_used(void *ctx);
enum status cuda_graph_begin(void *ctx, struct diag *d);
enum status cuda_graph_end(void *ctx, int slot, struct diag *d);
enum status cuda_graph_launch(void *ctx, int slot, struct diag *d);
void cuda_graph_reset(void *ctx);
void cuda_host_mark(void *ctx, int slot);
enum status cuda_host_wait(void *ctx, int slot, struct diag *d);
enum status cuda_host_poll(void *ctx, int slot, int *done, struct diag *d);
void cuda_timer_mark(void *ctx, int id);
double cuda_timer_ms(void *ctx, int a, int b);
/* --trace's device clock: timing events on the compute stream, NVTX ranges. */
extern const struct trace_dev cuda_trace_dev;
/* comm_nccl.c */
enum status comm_nccl_unique_id(unsigned char id[GPU_NCCL_ID_BYTES], struct diag *d);
enum status comm_nccl_init(struct comm *out, struct backend *be,
			   const unsigned char id[GPU_NCCL_ID_BYTES], int rank, int size,
			   int timeout_s, int (*ready)(void *arg, int ok), void *arg,
			   int (*peer_failed)(void *peer_arg), void *peer_arg, struct diag *d);

#ifdef __cplusplus
}
#endif

#endif
