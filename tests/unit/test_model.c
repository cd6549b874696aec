/*
 * test_model.c - the CPU backend's operations and the model's forward and
 * backward, against naive loops, finite differences and hand-computed values.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "train/model.h"
#include "train/optimizer.h"
#include "core/rng.h"

static const struct backend_ops *ops = &backend_cpu_ops;

static void fill(float *v, size_t n, uint64_t key)
{
	for (size_t i = 0; i < n; i++)
		v[i] = 2.0f * rng_u01(key, i) - 1.0f;
}

static void test_linear_forward_matches_naive_loops(void **state)
{
	enum { N = 4, IN = 3, OUT = 5 };
	float x[N * IN], w[OUT * IN], b[OUT], y[N * OUT];

	fill(x, N * IN, 1);
	fill(w, OUT * IN, 2);
	fill(b, OUT, 3);
	ops->linear_forward(NULL, y, x, w, b, N, IN, OUT, 0);
	for (int i = 0; i < N; i++)
		for (int o = 0; o < OUT; o++) {
			double s = b[o];

			for (int k = 0; k < IN; k++)
				s += (double)x[i * IN + k] * w[o * IN + k]; /* w is (out, in) */
			assert_float_equal(y[i * OUT + o], s, 1e-5);
		}
}

static void test_linear_forward_fuses_relu(void **state)
{
	enum { N = 5, IN = 4, OUT = 6 };
	float x[N * IN], w[OUT * IN], b[OUT], y[N * OUT], yr[N * OUT];
	int negatives = 0;

	fill(x, N * IN, 21);
	fill(w, OUT * IN, 22);
	fill(b, OUT, 23);
	ops->linear_forward(NULL, y, x, w, b, N, IN, OUT, 0);
	ops->linear_forward(NULL, yr, x, w, b, N, IN, OUT, 1);
	for (int i = 0; i < N * OUT; i++) {
		assert_true(yr[i] == (y[i] > 0.0f ? y[i] : 0.0f));
		negatives += y[i] < 0.0f;
	}
	assert_true(negatives > 0); /* the case is not vacuous */
}

/* f(x, w, b) = sum(r * linear(x)); its gradients are exactly what linear_backward gives for dy = r. */
static double probe(const float *x, const float *w, const float *b, const float *r, int n, int in,
		    int out)
{
	float y[64];
	double s = 0;

	ops->linear_forward(NULL, y, x, w, b, n, in, out, 0);
	for (int i = 0; i < n * out; i++)
		s += (double)r[i] * y[i];
	return s;
}

static void test_linear_backward_matches_finite_differences(void **state)
{
	enum { N = 3, IN = 4, OUT = 2 };
	float x[N * IN], w[OUT * IN], b[OUT], r[N * OUT], dx[N * IN], dw[OUT * IN], db[OUT];
	const float eps = 1e-2f;
	float *vars[3] = {x, w, b}, *grads[3] = {dx, dw, db};
	int sizes[3] = {N * IN, OUT * IN, OUT};

	fill(x, N * IN, 4);
	fill(w, OUT * IN, 5);
	fill(b, OUT, 6);
	fill(r, N * OUT, 7);
	ops->linear_backward(NULL, dx, dw, db, r, x, w, N, IN, OUT, 0);
	for (int v = 0; v < 3; v++)
		for (int i = 0; i < sizes[v]; i++) {
			float keep = vars[v][i];
			double up, down;

			vars[v][i] = keep + eps;
			up = probe(x, w, b, r, N, IN, OUT);
			vars[v][i] = keep - eps;
			down = probe(x, w, b, r, N, IN, OUT);
			vars[v][i] = keep;
			assert_float_equal(grads[v][i], (up - down) / (2 * eps), 1e-4);
		}
}

static void test_linear_backward_accumulates_weight_and_bias_gradients(void **state)
{
	enum { N = 2, IN = 2, OUT = 2 };
	float x[N * IN], w[OUT * IN], r[N * OUT], dw1[OUT * IN], db1[OUT], dw2[OUT * IN], db2[OUT];

	fill(x, N * IN, 8);
	fill(w, OUT * IN, 9);
	fill(r, N * OUT, 10);
	ops->linear_backward(NULL, NULL, dw1, db1, r, x, w, N, IN, OUT, 0);
	memcpy(dw2, dw1, sizeof dw1);
	memcpy(db2, db1, sizeof db1);
	ops->linear_backward(NULL, NULL, dw2, db2, r, x, w, N, IN, OUT, 1);
	for (int i = 0; i < OUT * IN; i++)
		assert_float_equal(dw2[i], 2 * dw1[i], 1e-6);
	for (int i = 0; i < OUT; i++)
		assert_float_equal(db2[i], 2 * db1[i], 1e-6);
}

/* What the progress hook saw: dw's rows reported in increasing order, without gaps. */
struct seen {
	float *dw;
	size_t next; /* floats of dw reported so far */
	int calls, gaps;
};

static void record(void *arg, float *done, size_t n)
{
	struct seen *s = arg;

	s->calls++;
	if (n == 0)
		return;
	if (done != s->dw + s->next)
		s->gaps++;
	s->next += n;
}

static void test_linear_backward_in_panels_is_bit_identical_and_reports_rows_in_order(void **state)
{
	enum { N = 64, IN = 512, OUT = 512 }; /* long enough for panels (2 N IN OUT > 32 MFLOP) */
	struct backend be;
	struct backend_config cfg = {0};
	struct diag d = {0};
	float *x = malloc(sizeof(float) * N * IN), *w = malloc(sizeof(float) * OUT * IN),
	      *dy = malloc(sizeof(float) * N * OUT);
	float *dx[2], *dw[2], *db[2];
	struct seen s = {0};

	assert_int_equal(backend_init(&be, ops, &cfg, &d), ST_OK);
	assert_non_null(ops->set_progress);
	for (int k = 0; k < 2; k++) {
		dx[k] = malloc(sizeof(float) * N * IN);
		dw[k] = malloc(sizeof(float) * OUT * IN);
		db[k] = malloc(sizeof(float) * OUT);
	}
	fill(x, N * IN, 11);
	fill(w, OUT * IN, 12);
	fill(dy, N * OUT, 13);
	ops->linear_backward(be.ctx, dx[0], dw[0], db[0], dy, x, w, N, IN, OUT, 0);
	s.dw = dw[1];
	ops->set_progress(be.ctx, record, &s, 16e6);
	ops->linear_backward(be.ctx, dx[1], dw[1], db[1], dy, x, w, N, IN, OUT, 0);
	ops->set_progress(be.ctx, NULL, NULL, 0);
	assert_true(s.calls > 2); /* it did split */
	assert_int_equal(s.gaps, 0);
	assert_int_equal(s.next, (size_t)OUT * IN);
	assert_memory_equal(dw[0], dw[1], sizeof(float) * OUT * IN);
	assert_memory_equal(dx[0], dx[1], sizeof(float) * N * IN);
	assert_memory_equal(db[0], db[1], sizeof(float) * OUT);
	for (int k = 0; k < 2; k++) {
		free(dx[k]);
		free(dw[k]);
		free(db[k]);
	}
	free(x);
	free(w);
	free(dy);
	backend_free(&be);
}

static void test_relu_forward_and_backward(void **state)
{
	float y[5] = {-2, -0.0f, 0.5f, 3, -1e-30f}, dy[5] = {1, 2, 3, 4, 5};
	const float want_y[5] = {0, 0, 0.5f, 3, 0}, want_dy[5] = {0, 0, 3, 4, 0};

	ops->relu_forward(NULL, y, 5);
	assert_memory_equal(y, want_y, sizeof y);
	ops->relu_backward(NULL, dy, y, 5);
	assert_memory_equal(dy, want_dy, sizeof dy);
}

/* torch.relu(nan) is nan and its backward (threshold_backward) passes the gradient on:
 * a NaN must not be hidden as 0. */
static void test_relu_propagates_nan_like_torch(void **state)
{
	float y[2] = {NAN, -1}, dy[2] = {7, 8}, x[1] = {NAN}, w[1] = {1}, b[1] = {0}, yl[1];

	ops->relu_forward(NULL, y, 2);
	assert_true(isnan(y[0]));
	assert_true(y[1] == 0.0f);
	ops->relu_backward(NULL, dy, y, 2);
	assert_true(dy[0] == 7.0f);
	assert_true(dy[1] == 0.0f);
	ops->linear_forward(NULL, yl, x, w, b, 1, 1, 1, 1);
	assert_true(isnan(yl[0]));
}

static void test_mse_matches_hand_computed_values(void **state)
{
	/* y - t = {1, -2, 0, 3}: MSE = 14/4 = 3.5; grad = 2 (y - t) / 4. */
	const float y[4] = {2, 0, 1, 4}, t[4] = {1, 2, 1, 1};
	float dy[4], loss = 100.0f;

	ops->mse(NULL, dy, &loss, y, t, 2, 2, 1.0f, 0);
	assert_float_equal(loss, 3.5, 1e-6);
	assert_float_equal(dy[0], 0.5, 1e-7);
	assert_float_equal(dy[1], -1.0, 1e-7);
	assert_float_equal(dy[2], 0.0, 1e-7);
	assert_float_equal(dy[3], 1.5, 1e-7);
	/* scaled and accumulated: loss += 0.25 * 3.5 */
	ops->mse(NULL, dy, &loss, y, t, 2, 2, 0.25f, 1);
	assert_float_equal(loss, 3.5 + 0.875, 1e-6);
	assert_float_equal(dy[3], 0.375, 1e-7);
}

/* A one-weight, one-bias model (nparams 2) on the CPU, stepped by an SGD optimizer. */
struct sgd_rig {
	struct backend be;
	struct model m;
	struct optimizer opt;
};

/* A 1x1 Linear (2 parameters) stepped by the optimizer h. */
static void optim_rig_init(struct sgd_rig *r, const struct optimizer_hparams *h)
{
	const int widths[2] = {1, 1};
	struct backend_config cfg = {0, 0};
	struct diag d = {0};

	assert_int_equal(backend_init(&r->be, ops, &cfg, &d), ST_OK);
	assert_int_equal(model_init(&r->m, &r->be, widths, 1, 1, &d), ST_OK);
	assert_int_equal(r->m.nparams, 2);
	assert_int_equal(optimizer_init(&r->opt, &r->m, h, &d), ST_OK);
	assert_int_equal(r->m.narenas, 1 + optimizer_state_arenas(h));
}

static void sgd_rig_init(struct sgd_rig *r, float lr, float momentum, float weight_decay)
{
	struct optimizer_hparams h = {.kind = OPTIM_SGD, .lr = lr, .momentum = momentum,
				      .weight_decay = weight_decay};

	optim_rig_init(r, &h);
}

static void sgd_rig_free(struct sgd_rig *r)
{
	model_free(&r->m);
	backend_free(&r->be);
}

static void test_sgd_plain_step(void **state)
{
	struct sgd_rig r;

	sgd_rig_init(&r, 0.1f, 0.0f, 0.0f);
	r.m.params[0] = 1.0f;
	r.m.params[1] = -2.0f;
	r.m.grads[0] = 0.5f;
	r.m.grads[1] = 0.25f;
	optimizer_step(&r.opt, 1.0);
	assert_float_equal(r.m.params[0], 0.95, 1e-7);
	assert_float_equal(r.m.params[1], -2.025, 1e-7);
	assert_int_equal(r.opt.step, 1);
	sgd_rig_free(&r);
}

static void test_sgd_momentum_and_weight_decay_match_torch_by_hand(void **state)
{
	/* torch.optim.SGD(lr=0.1, momentum=0.9, weight_decay=0.01), p=1, grads 0.5 then 0.2:
	 * step 1: d = 0.5 + 0.01*1 = 0.51; buf = 0.51; p = 1 - 0.051 = 0.949
	 * step 2: d = 0.2 + 0.01*0.949 = 0.20949; buf = 0.9*0.51 + 0.20949 = 0.66849;
	 *         p = 0.949 - 0.066849 = 0.882151 */
	struct sgd_rig r;
	float *p, *m;

	sgd_rig_init(&r, 0.1f, 0.9f, 0.01f);
	p = r.m.params;
	m = r.opt.momentum_buffer;
	p[0] = 1.0f;
	r.m.grads[0] = 0.5f;
	optimizer_step(&r.opt, 1.0);
	assert_float_equal(m[0], 0.51, 1e-7);
	assert_float_equal(p[0], 0.949, 1e-7);
	r.m.grads[0] = 0.2f;
	optimizer_step(&r.opt, 1.0);
	assert_float_equal(m[0], 0.66849, 1e-6);
	assert_float_equal(p[0], 0.882151, 1e-6);
	sgd_rig_free(&r);
}

/* Two rows of 3 logits: [1, 2, 3] with label 2 (right) and [0, 0, 0] with label 1 (wrong:
 * argmax takes the first of equal logits, 0). scale 0.5:
 *   row 1: lse = 3 + log(1 + e^-1 + e^-2) = 3.40760596; loss 0.40760596
 *   row 2: lse = log 3 = 1.09861229; loss 1.09861229
 *   loss = 0.5 * (0.40760596 + 1.09861229) / 2 = 0.37655456; accuracy 0.5 * 1/2 = 0.25
 *   dy = 0.5 / 2 * (softmax - onehot): softmax row 1 = [0.09003057, 0.24472847, 0.66524096],
 *   row 2 = [1/3, 1/3, 1/3] (torch.nn.functional.cross_entropy gives the same). */
static void test_cross_entropy_matches_hand_computed_values(void **state)
{
	const float z[6] = {1, 2, 3, 0, 0, 0}, labels[2] = {2, 1};
	const double want[6] = {0.25 * 0.09003057, 0.25 * 0.24472847, 0.25 * (0.66524096 - 1),
				0.25 / 3, 0.25 * (1.0 / 3 - 1), 0.25 / 3};
	float dy[6], out[2] = {7, 7};

	ops->cross_entropy(NULL, dy, out, z, labels, 2, 3, 0.5f, 0);
	assert_float_equal(out[0], 0.37655456, 1e-7);
	assert_float_equal(out[1], 0.25, 1e-7);
	for (int i = 0; i < 6; i++)
		assert_float_equal(dy[i], want[i], 1e-7);
	ops->cross_entropy(NULL, dy, out, z, labels, 2, 3, 0.5f, 1); /* accumulates */
	assert_float_equal(out[0], 2 * 0.37655456, 2e-7);
	assert_float_equal(out[1], 0.5, 1e-7);
}

/* A large logit does not overflow: the max is taken out before exp. */
static void test_cross_entropy_is_stable_for_large_logits(void **state)
{
	const float z[2] = {1000, 0}, labels[1] = {1};
	float dy[2], out[2];

	ops->cross_entropy(NULL, dy, out, z, labels, 1, 2, 1.0f, 0);
	assert_float_equal(out[0], 1000.0, 1e-3);
	assert_float_equal(out[1], 0.0, 0);
	assert_float_equal(dy[0], 1.0, 1e-7);
	assert_float_equal(dy[1], -1.0, 1e-7);
}

static void test_sgd_nesterov_matches_torch_by_hand(void **state)
{
	/* torch.optim.SGD(lr=0.1, momentum=0.9, nesterov=True), p=1, grads 0.5 then 0.2:
	 * step 1: buf = 0.5; d = 0.5 + 0.9*0.5 = 0.95; p = 1 - 0.095 = 0.905
	 * step 2: buf = 0.45 + 0.2 = 0.65; d = 0.2 + 0.585 = 0.785; p = 0.8265 */
	struct optimizer_hparams h = {.kind = OPTIM_SGD, .lr = 0.1f, .momentum = 0.9f, .nesterov = 1};
	struct sgd_rig r;

	optim_rig_init(&r, &h);
	r.m.params[0] = 1.0f;
	r.m.grads[0] = 0.5f;
	optimizer_step(&r.opt, 1.0);
	assert_float_equal(r.opt.momentum_buffer[0], 0.5, 1e-7);
	assert_float_equal(r.m.params[0], 0.905, 1e-7);
	r.m.grads[0] = 0.2f;
	optimizer_step(&r.opt, 1.0);
	assert_float_equal(r.opt.momentum_buffer[0], 0.65, 1e-7);
	assert_float_equal(r.m.params[0], 0.8265, 1e-7);
	sgd_rig_free(&r);
}

/* AdamW with the middle layer frozen: its state arenas hold the trainable layers only (no
 * memory for the frozen one, as PyTorch keeps no state for it), the state dict's state
 * tensors tile them exactly, and the trainable layers' parameters and state after two
 * steps equal those of the same model with nothing frozen, given the same gradients. */
static void test_frozen_layer_has_no_optimizer_state_in_memory(void **state)
{
	const int widths[4] = {3, 5, 4, 2};
	const unsigned char frozen[3] = {0, 1, 0};
	struct optimizer_hparams h = {.kind = OPTIM_ADAMW, .lr = 0.1f, .weight_decay = 0.01f,
				      .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
	struct backend_config cfg = {0, 0};
	struct backend be;
	struct model mf, mu; /* frozen, unfrozen */
	struct optimizer of, ou;
	struct model_tensor t[3 * 6];
	struct diag d = {0};
	size_t mid, next = 0, base_bytes;
	int n, nstate = 0;

	assert_int_equal(backend_init(&be, ops, &cfg, &d), ST_OK);
	assert_int_equal(model_init(&mf, &be, widths, 3, 1, &d), ST_OK);
	assert_int_equal(model_init(&mu, &be, widths, 3, 1, &d), ST_OK);
	base_bytes = mf.bytes;
	model_freeze(&mf, frozen);
	mid = mf.w_off[2] - mf.w_off[1];
	assert_int_equal(mf.ntrainable, mf.nparams - mid);
	assert_int_equal(optimizer_init(&of, &mf, &h, &d), ST_OK);
	assert_int_equal(optimizer_init(&ou, &mu, &h, &d), ST_OK);
	assert_int_equal(mf.arena[1].len, mf.ntrainable);
	assert_int_equal(mf.bytes, base_bytes + 2 * mf.ntrainable * sizeof(float));
	assert_int_equal(mf.bytes, model_bytes_needed(widths, 3, 1, 2, frozen));
	assert_int_equal(model_state_floats(&mf, 0, 3), mf.nparams + 2 * mf.ntrainable);
	n = model_state_dict(&mf, 0, 3, t);
	assert_int_equal(n, 6 + 4 + 4);
	for (int k = 0; k < n; k++) {
		if (t[k].arena != 1)
			continue;
		assert_int_equal(t[k].off, next); /* in order, no gap, no frozen layer */
		next += t[k].len;
		nstate++;
	}
	assert_int_equal(nstate, 4);
	assert_int_equal(next, mf.ntrainable);
	for (int step = 0; step < 2; step++) {
		for (size_t p = 0; p < mf.nparams; p++) {
			mf.params[p] = mu.params[p] = step == 0 ? 0.01f * (float)p - 0.3f : mf.params[p];
			mf.grads[p] = mu.grads[p] = 0.05f * (float)((p * 7 + (size_t)step) % 11) - 0.2f;
		}
		optimizer_step(&of, 1.0);
		optimizer_step(&ou, 1.0);
		for (size_t p = 0; p < mf.nparams; p++) {
			int in_mid = p >= mf.w_off[1] && p < mf.w_off[2];
			size_t sp = p < mf.w_off[1] ? p : p - mid;

			if (in_mid) { /* untouched in mf; mu's copy follows mf's before each step */
				assert_true(mf.params[p] == 0.01f * (float)p - 0.3f);
				continue;
			}
			assert_true(mf.params[p] == mu.params[p]);
			assert_true(of.exp_avg[sp] == ou.exp_avg[p]);
			assert_true(of.exp_avg_sq[sp] == ou.exp_avg_sq[p]);
		}
	}
	model_free(&mf);
	model_free(&mu);
	backend_free(&be);
}

static void test_adamw_matches_torch_by_hand(void **state)
{
	/* torch.optim.AdamW(lr=0.1, weight_decay=0.01), p=1, grads 0.5 then 0.2:
	 * step 1: p = 0.999; m = 0.05; v = 0.00025; step_size = 0.1/0.1 = 1;
	 *         denom = sqrt(0.00025)/sqrt(0.001) + 1e-8 = 0.5; p = 0.999 - 0.1 = 0.899
	 * step 2: p = 0.899 * 0.999 = 0.898101; m = 0.045 + 0.02 = 0.065;
	 *         v = 0.00024975 + 0.00004 = 0.00028975; step_size = 0.1/0.19;
	 *         denom = sqrt(0.00028975)/sqrt(0.001999) = 0.3807194;
	 *         p = 0.898101 - 0.5263158 * 0.065 / 0.3807194 = 0.8082435 (torch: 0.80824351)
	 * A schedule's multiplier of 0.5 on a third step halves the lr: checked against the
	 * same step at lr 0.05 worked through the kernel. */
	struct optimizer_hparams h = {.kind = OPTIM_ADAMW, .lr = 0.1f, .weight_decay = 0.01f,
				      .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
	struct sgd_rig r;
	double lr;

	optim_rig_init(&r, &h);
	r.m.params[0] = 1.0f;
	r.m.grads[0] = 0.5f;
	optimizer_step(&r.opt, 1.0);
	assert_float_equal(r.opt.exp_avg[0], 0.05, 1e-8);
	assert_float_equal(r.opt.exp_avg_sq[0], 0.00025, 1e-10);
	assert_float_equal(r.m.params[0], 0.899, 1e-7);
	r.m.grads[0] = 0.2f;
	lr = optimizer_step(&r.opt, 1.0);
	assert_float_equal(lr, 0.1, 1e-8);
	assert_float_equal(r.opt.exp_avg[0], 0.065, 1e-8);
	assert_float_equal(r.opt.exp_avg_sq[0], 0.00028975, 1e-10);
	assert_float_equal(r.m.params[0], 0.8082435, 2e-7);
	assert_int_equal(r.opt.step, 2);
	lr = optimizer_step(&r.opt, 0.5);
	assert_float_equal(lr, 0.05, 1e-8);
	sgd_rig_free(&r);
}

static void test_sumsq_and_clip_match_clip_grad_norm(void **state)
{
	/* Two tensors [3] and [4]: norm 5; clip_grad_norm_(max_norm=1) scales by
	 * 1 / (5 + 1e-6); max_norm=10 leaves them alone (the coefficient is clamped to 1). */
	float a[1] = {3.0f}, b[1] = {4.0f}, norm[1] = {99.0f};

	ops->sumsq(NULL, norm, a, 1, 0);
	ops->sumsq(NULL, norm, b, 1, 1);
	assert_float_equal(norm[0], 25.0, 0);
	ops->clip(NULL, a, 1, norm, 10.0f);
	assert_float_equal(a[0], 3.0, 0);
	ops->clip(NULL, a, 1, norm, 1.0f);
	ops->clip(NULL, b, 1, norm, 1.0f);
	assert_float_equal(a[0], 3.0 / (5.0 + 1e-6), 1e-7);
	assert_float_equal(b[0], 4.0 / (5.0 + 1e-6), 1e-7);
}

/* Model loss for the current params on act[0]/target (n rows). */
static double model_loss(struct model *m, int n)
{
	float loss = 0;

	model_forward(m, n);
	ops->mse(NULL, m->dbuf[0], &loss, m->act[m->nlayers], m->target, n, m->widths[m->nlayers],
		 1.0f, 0);
	return loss;
}

static void test_model_backward_matches_finite_differences(void **state)
{
	const int widths[4] = {3, 5, 4, 2};
	struct backend be;
	struct model m;
	struct diag d = {0};
	const int n = 6;
	const float eps = 1e-2f;

	struct backend_config cfg = {0, 0};

	assert_int_equal(backend_init(&be, ops, &cfg, &d), ST_OK);
	assert_int_equal(model_init(&m, &be, widths, 3, n, &d), ST_OK);
	assert_int_equal(m.nparams, 5 * 3 + 5 + 4 * 5 + 4 + 2 * 4 + 2);
	model_init_host(&m, 11, m.params);
	fill(m.act[0], (size_t)n * 3, 12);
	fill(m.target, (size_t)n * 2, 13);
	model_loss(&m, n);
	model_backward(&m, n, 0, NULL, NULL);
	for (size_t p = 0; p < m.nparams; p++) {
		float keep = m.params[p], g = m.grads[p];
		double up, down;

		m.params[p] = keep + eps;
		up = model_loss(&m, n);
		m.params[p] = keep - eps;
		down = model_loss(&m, n);
		m.params[p] = keep;
		/* Exact for a quadratic away from ReLU kinks; eps is far smaller than typical pre-activations. */
		assert_float_equal(g, (up - down) / (2 * eps), 2e-4);
	}
	model_free(&m);
	model_free(&m);
	backend_free(&be);
}

static void test_model_init_is_uniform_in_fan_in_bound(void **state)
{
	const int widths[3] = {16, 8, 4};
	struct model m;
	float *host;

	model_layout(&m, widths, 2);
	host = malloc(m.nparams * sizeof *host);
	model_init_host(&m, 0, host);
	for (int l = 0; l < 2; l++) {
		float bound = 1.0f / sqrtf((float)widths[l]), lo = 1, hi = -1;

		for (size_t p = m.w_off[l]; p < m.b_off[l] + (size_t)widths[l + 1]; p++) {
			assert_true(fabsf(host[p]) <= bound);
			lo = host[p] < lo ? host[p] : lo;
			hi = host[p] > hi ? host[p] : hi;
		}
		/* Spread over the interval, not collapsed. */
		assert_true(lo < -0.5f * bound && hi > 0.5f * bound);
	}
	free(host);
}

static void test_model_layout_follows_state_dict_order(void **state)
{
	const int widths[3] = {10, 10, 5};
	struct model m;
	struct model_tensor t[4];

	model_layout(&m, widths, 2);
	assert_int_equal(m.nparams, 165);
	assert_int_equal(m.w_off[0], 0);
	assert_int_equal(m.b_off[0], 100);
	assert_int_equal(m.w_off[1], 110);
	assert_int_equal(m.b_off[1], 160);
	m.narenas = 1;
	m.arena[0].name = "";
	assert_int_equal(model_state_dict(&m, 0, 1, t), 4);
	assert_string_equal(t[0].name, "net1.weight");
	assert_string_equal(t[3].name, "net2.bias");
}

static void test_buckets_are_contiguous_and_cover_all_gradients(void **state)
{
	const int widths[6] = {8, 16, 16, 16, 16, 4};
	struct model m;
	struct bucket b[5];
	size_t end;
	int nb;

	model_layout(&m, widths, 5);
	/* One big bucket: everything plus the slots. */
	nb = model_plan_buckets(&m, 1u << 20, 1u << 20, b);
	assert_int_equal(nb, 1);
	assert_int_equal(b[0].off, 0);
	assert_int_equal(b[0].len, m.nparams + MODEL_SLOTS);
	/* Small cap: one layer each, last layer first, slots in the first bucket. */
	nb = model_plan_buckets(&m, 1, 1, b);
	assert_int_equal(nb, 5);
	end = m.nparams + MODEL_SLOTS;
	for (int i = 0; i < nb; i++) {
		assert_int_equal(b[i].lo, 4 - i);
		assert_int_equal(b[i].hi, 4 - i);
		assert_int_equal(b[i].off + b[i].len, end);
		end = b[i].off;
	}
	assert_int_equal(end, 0);
	/* A cap of two middle layers (272 floats each): buckets close once they reach it. */
	nb = model_plan_buckets(&m, 500, 60, b);
	assert_int_equal(nb, 3);
	assert_int_equal(b[0].lo, 4); /* 68 floats >= first cap 60 */
	assert_int_equal(b[1].lo, 2); /* 272 + 272 >= 500 */
	assert_int_equal(b[2].lo, 0);
	assert_int_equal(b[2].hi, 1);
}

/* A frozen middle layer: its gradient slice is left alone, the layers before and after it
 * still get the gradients of the unfrozen model (they flow through it), it is in no
 * bucket, and the trainable runs skip it. */
static void test_frozen_layer_passes_gradients_through_and_gets_none(void **state)
{
	const int widths[4] = {3, 5, 4, 2};
	const unsigned char frozen[3] = {0, 1, 0};
	struct backend be;
	struct model m;
	struct diag d = {0};
	struct backend_config cfg = {0, 0};
	struct bucket b[4];
	size_t off[3], so[3], len[3];
	float *want;
	const int n = 6;

	assert_int_equal(backend_init(&be, ops, &cfg, &d), ST_OK);
	assert_int_equal(model_init(&m, &be, widths, 3, n, &d), ST_OK);
	want = malloc(m.nparams * sizeof *want);
	model_init_host(&m, 11, m.params);
	fill(m.act[0], (size_t)n * 3, 12);
	fill(m.target, (size_t)n * 2, 13);
	model_loss(&m, n);
	model_backward(&m, n, 0, NULL, NULL);
	memcpy(want, m.grads, m.nparams * sizeof *want);
	model_freeze(&m, frozen);
	for (size_t p = 0; p < m.nparams; p++)
		m.grads[p] = 42.0f;
	model_loss(&m, n);
	model_backward(&m, n, 0, NULL, NULL);
	for (size_t p = 0; p < m.nparams; p++) {
		if (p >= m.w_off[1] && p < m.w_off[2])
			assert_true(m.grads[p] == 42.0f);
		else
			assert_true(m.grads[p] == want[p]);
	}
	assert_int_equal(model_trainable_runs(&m, off, so, len), 2);
	assert_int_equal(off[0], 0);
	assert_int_equal(len[0], m.w_off[1]);
	assert_int_equal(off[1], m.w_off[2]);
	assert_int_equal(off[1] + len[1], m.nparams);
	/* in a state arena the frozen layer takes no room */
	assert_int_equal(so[0], 0);
	assert_int_equal(so[1], len[0]);
	assert_int_equal(m.ntrainable, len[0] + len[1]);
	/* one bucket per trainable run, the last layer's with the slots */
	assert_int_equal(model_plan_buckets(&m, 1u << 20, 1u << 20, b), 2);
	assert_int_equal(b[0].lo, 2);
	assert_int_equal(b[0].off, m.w_off[2]);
	assert_int_equal(b[0].len, m.nparams - m.w_off[2] + MODEL_SLOTS);
	assert_int_equal(b[1].lo, 0);
	assert_int_equal(b[1].hi, 0);
	assert_int_equal(b[1].len, m.w_off[1]);
	/* the last layer frozen: the slots travel alone, in the last bucket */
	{
		const unsigned char last[3] = {0, 0, 1};

		model_freeze(&m, last);
		assert_int_equal(model_plan_buckets(&m, 1u << 20, 1u << 20, b), 2);
		assert_int_equal(b[0].lo, 0);
		assert_int_equal(b[0].hi, 1);
		assert_int_equal(b[0].len, m.w_off[2]);
		assert_int_equal(b[1].lo, -1);
		assert_int_equal(b[1].off, m.nparams);
		assert_int_equal(b[1].len, MODEL_SLOTS);
	}
	free(want);
	model_free(&m);
	backend_free(&be);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_linear_forward_matches_naive_loops),
		cmocka_unit_test(test_linear_forward_fuses_relu),
		cmocka_unit_test(test_linear_backward_matches_finite_differences),
		cmocka_unit_test(test_linear_backward_accumulates_weight_and_bias_gradients),
		cmocka_unit_test(test_linear_backward_in_panels_is_bit_identical_and_reports_rows_in_order),
		cmocka_unit_test(test_relu_forward_and_backward),
		cmocka_unit_test(test_relu_propagates_nan_like_torch),
		cmocka_unit_test(test_mse_matches_hand_computed_values),
		cmocka_unit_test(test_sgd_plain_step),
		cmocka_unit_test(test_sgd_momentum_and_weight_decay_match_torch_by_hand),
		cmocka_unit_test(test_cross_entropy_matches_hand_computed_values),
		cmocka_unit_test(test_cross_entropy_is_stable_for_large_logits),
		cmocka_unit_test(test_sgd_nesterov_matches_torch_by_hand),
		cmocka_unit_test(test_adamw_matches_torch_by_hand),
		cmocka_unit_test(test_sumsq_and_clip_match_clip_grad_norm),
		cmocka_unit_test(test_frozen_layer_passes_gradients_through_and_gets_none),
		cmocka_unit_test(test_frozen_layer_has_no_optimizer_state_in_memory),
		cmocka_unit_test(test_model_backward_matches_finite_differences),
		cmocka_unit_test(test_model_init_is_uniform_in_fan_in_bound),
		cmocka_unit_test(test_model_layout_follows_state_dict_order),
		cmocka_unit_test(test_buckets_are_contiguous_and_cover_all_gradients),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
