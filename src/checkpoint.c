/* checkpoint.c - the model's state dict in safetensors files: --init, --save and
 * training checkpoints (writing, verifying, reading). */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <libgen.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "config.h"      /* PACKAGE_VERSION */
#include "optimizer.h"   /* optimizer_is_state_tensor */
#include "safetensors.h" /* st_open, st_find, st_read_f32, st_save */

#define MAX_TENSORS (MODEL_MAX_ARENAS * 2 * MODEL_MAX_LAYERS)

#define SHA_HEX 65

/* SHA-256 of the concatenation of n buffers, as lowercase hex. */
static int sha256_hex(const void *const *buf, const size_t *len, int n, char out[SHA_HEX])
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	int ok = ctx != NULL && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1;

	for (int i = 0; i < n && ok; i++)
		ok = EVP_DigestUpdate(ctx, buf[i], len[i]) == 1;
	ok = ok && EVP_DigestFinal_ex(ctx, md, &mdlen) == 1;
	EVP_MD_CTX_free(ctx);
	for (unsigned int i = 0; ok && i < mdlen; i++)
		sprintf(out + 2 * i, "%02x", md[i]);
	return ok;
}

/* Safetensors entries for state dict tensors t[0..n), whose arenas lie in host arena
 * after arena from arena `first` on. */
static void tensor_entries(const struct model *m, const struct model_tensor *t, int n, int first,
			   const float *host, struct st_entry *e)
{
	for (int k = 0; k < n; k++) {
		e[k].name = t[k].name;
		e[k].ndim = t[k].ndim;
		e[k].shape[0] = t[k].shape[0];
		e[k].shape[1] = t[k].shape[1];
		e[k].data = host + (size_t)(t[k].arena - first) * m->nparams + t[k].off;
	}
}

/* "[out, in]" or "[out]". */
static const char *shape_text(const struct model_tensor *t, char *buf, size_t len)
{
	if (t->ndim == 2)
		snprintf(buf, len, "[%d, %d]", t->shape[0], t->shape[1]);
	else
		snprintf(buf, len, "[%d]", t->shape[0]);
	return buf;
}

/* The tensor's name up to its first '.' ("net3" of "net3.bias"). */
static int module_len(const char *name)
{
	return (int)strcspn(name, ".");
}

enum status checkpoint_read_weights(const char *path, const struct model *m, float *host,
				    struct diag *d)
{
	struct model_tensor t[2 * MODEL_MAX_LAYERS];
	struct st_file f;
	enum status st;
	char what[600], shape[64];
	int n = model_state_dict(m, 0, 1, t);

	st = st_open(&f, path, "--init", d);
	if (st != ST_OK)
		return st;
	snprintf(what, sizeof what, "--init: %s", path);
	for (int k = 0; k < n && st == ST_OK; k++) {
		const struct st_tensor *x = st_find(&f, t[k].name);

		if (x == NULL)
			st = diag_set(d, ST_RUNTIME, "%s: no tensor '%s' (expected for --layers)", what, t[k].name);
		else if (x->ndim != t[k].ndim || x->shape[0] != t[k].shape[0] ||
			 (t[k].ndim == 2 && x->shape[1] != t[k].shape[1]))
			st = diag_set(d, ST_RUNTIME, "%s: tensor '%s' has the wrong shape; --layers needs %s",
				      what, t[k].name, shape_text(&t[k], shape, sizeof shape));
		else
			st = st_read_f32(&f, x, host + t[k].off, t[k].len, what, d);
	}
	for (size_t i = 0; i < m->nparams && st == ST_OK; i++)
		if (!isfinite(host[i]))
			st = diag_set(d, ST_RUNTIME, "%s: weights contain a non-finite value", what);
	/* Strict, as PyTorch's load_state_dict: a tensor the model has no place for means the
	 * file is for another model. A checkpoint's optimizer state is not weights. */
	for (size_t i = 0; i < f.n && st == ST_OK; i++) {
		const char *name = f.t[i].name;
		int k = 0;

		if (optimizer_is_state_tensor(name))
			continue;
		while (k < n && strcmp(name, t[k].name) != 0)
			k++;
		if (k == n) {
			char q[160];

			st = diag_set(d, ST_RUNTIME, "%s: unexpected tensor '%s': --layers has %.*s to %.*s (weight and bias each)",
				      what, diag_quote(q, sizeof q, name), module_len(t[0].name), t[0].name,
				      module_len(t[n - 1].name), t[n - 1].name);
		}
	}
	st_close(&f);
	return st;
}

enum status checkpoint_write_weights(const char *path, const struct model *m, const float *host,
				     struct diag *d)
{
	struct model_tensor t[2 * MODEL_MAX_LAYERS];
	struct st_entry e[2 * MODEL_MAX_LAYERS];
	const char *meta[] = {"format", "pt", "producer", "ddptrain " PACKAGE_VERSION};
	int n = model_state_dict(m, 0, 1, t);

	tensor_entries(m, t, n, 0, host, e);
	return st_save(path, "--save", e, (size_t)n, meta, 2, d);
}

/* Keep the newest `keep` of path.step-*: link the new one, remove the oldest. */
static enum status keep_numbered(const char *path, long step, int keep, struct diag *d)
{
	char numbered[4200], *dcopy = strdup(path), *bcopy = strdup(path);
	const char *dir, *base;
	struct dirent *e;
	char **found = NULL;
	size_t nfound = 0, cap = 0, blen;
	DIR *dp;
	enum status st = ST_OK;

	if (dcopy == NULL || bcopy == NULL) {
		free(dcopy);
		free(bcopy);
		return diag_set(d, ST_RUNTIME, "--keep-checkpoints: out of memory");
	}
	dir = dirname(dcopy);
	base = basename(bcopy);
	blen = strlen(base);
	snprintf(numbered, sizeof numbered, "%s.step-%08ld", path, step);
	unlink(numbered);
	if (link(path, numbered) != 0) {
		st = diag_errno(d, errno, "--keep-checkpoints: %s", numbered);
		goto out;
	}
	dp = opendir(dir);
	while (dp != NULL && (e = readdir(dp)) != NULL) {
		if (strncmp(e->d_name, base, blen) != 0 || strncmp(e->d_name + blen, ".step-", 6) != 0 ||
		    strlen(e->d_name + blen + 6) != 8 || strspn(e->d_name + blen + 6, "0123456789") != 8)
			continue;
		if (nfound == cap) {
			char **g = realloc(found, (cap = cap ? 2 * cap : 16) * sizeof *found);

			if (g == NULL)
				break;
			found = g;
		}
		found[nfound++] = strdup(e->d_name);
	}
	if (dp != NULL)
		closedir(dp);
	/* Zero-padded step numbers sort as text; remove all but the newest keep. */
	for (size_t i = 0; i < nfound; i++)
		for (size_t j = i + 1; j < nfound; j++)
			if (found[i] && found[j] && strcmp(found[i], found[j]) > 0) {
				char *t = found[i];

				found[i] = found[j];
				found[j] = t;
			}
	for (size_t i = 0; i + (size_t)keep < nfound; i++) {
		char old[4200];

		snprintf(old, sizeof old, "%s/%s", dir, found[i]);
		unlink(old);
	}
	for (size_t i = 0; i < nfound; i++)
		free(found[i]);
	free(found);
out:
	free(dcopy);
	free(bcopy);
	return st;
}

enum status checkpoint_save(const char *path, int keep, const struct model *m,
			    const float *host, const struct ckpt_pos *pos, const char *config,
			    struct diag *d)
{
	struct model_tensor t[MAX_TENSORS];
	struct st_entry e[MAX_TENSORS];
	char sha[SHA_HEX] = "";
	char ver[16], step[32], epoch[32], mb[32], world[16];
	const void *bufs[MAX_TENSORS];
	size_t lens[MAX_TENSORS];
	const char *meta[20];
	int n = model_state_dict(m, 0, m->narenas, t), nm = 0;
	enum status st;

	for (size_t i = 0; i < m->nparams * (size_t)m->narenas; i++)
		if (!isfinite(host[i]))
			return diag_set(d, ST_RUNTIME, "--checkpoint: %s: not written at step %ld: the weights are not finite (the previous checkpoint is kept)",
					path, pos->step);
	tensor_entries(m, t, n, 0, host, e);
	for (int k = 0; k < n; k++) {
		bufs[k] = e[k].data;
		lens[k] = t[k].len * sizeof(float);
	}
	if (!sha256_hex(bufs, lens, n, sha))
		return diag_set(d, ST_RUNTIME, "--checkpoint: SHA-256 failed");
	snprintf(ver, sizeof ver, "%d", CHECKPOINT_VERSION);
	snprintf(step, sizeof step, "%ld", pos->step);
	snprintf(epoch, sizeof epoch, "%ld", pos->epoch);
	snprintf(mb, sizeof mb, "%ld", pos->next_mb);
	snprintf(world, sizeof world, "%d", pos->world);
#define META(k, v) (meta[nm++] = (k), meta[nm++] = (v))
	META("format", "pt");
	META("ddptrain_checkpoint", ver);
	META("step", step);
	META("epoch", epoch);
	META("next_micro_batch", mb);
	META("world_size", world);
	META("momentum", m->narenas > 1 ? "yes" : "no"); /* format 1: optimizer state follows */
	META("config", config);
	META("sha256", sha);
#undef META
	st = st_save(path, "--checkpoint", e, (size_t)n, meta, (size_t)nm / 2, d);
	if (st == ST_OK && keep > 0)
		st = keep_numbered(path, pos->step, keep, d);
	return st;
}

/* A metadata string, or NULL. */
static const char *meta_get(json_t *md, const char *key)
{
	json_t *v = json_object_get(md, key);

	return json_is_string(v) ? json_string_value(v) : NULL;
}

static int parse_long_meta(json_t *md, const char *key, long *out)
{
	const char *s = meta_get(md, key);
	char *end;

	if (s == NULL)
		return 0;
	errno = 0;
	*out = strtol(s, &end, 10);
	return *s != '\0' && *end == '\0' && errno == 0 && *out >= 0;
}

enum status checkpoint_load(const char *path, const struct model *m, const char *want,
			    float *host, struct ckpt_pos *pos, struct diag *d)
{
	struct model_tensor t[MAX_TENSORS];
	int n = model_state_dict(m, 0, m->narenas, t);
	char shape[64];
	char hl[256], wl[256];
	struct st_file f;
	json_t *root = NULL, *md;
	const char *sha_want, *cfg, *has_mom;
	char sha[SHA_HEX] = "", what[600];
	const void *bufs[1];
	size_t lens[1], hlen = 0;
	long world = 0;
	enum status st;

	snprintf(what, sizeof what, "--resume: %s", path);
	st = st_open(&f, path, "--resume", d);
	if (st != ST_OK)
		return st;
	for (int b = 7; b >= 0; b--)
		hlen = hlen << 8 | ((const unsigned char *)f.map)[b];
	root = json_loadb((const char *)f.map + 8, hlen, 0, NULL);
	md = json_object_get(root, "__metadata__");
	if (meta_get(md, "ddptrain_checkpoint") == NULL) {
		st = diag_set(d, ST_RUNTIME, "%s: not a ddptrain checkpoint (no ddptrain_checkpoint metadata); use it with --init for its weights",
			      what);
		goto out;
	}
	if (strcmp(meta_get(md, "ddptrain_checkpoint"), "1") != 0) {
		st = diag_set(d, ST_RUNTIME, "%s: checkpoint format %s; this ddptrain reads format %d", what,
			      meta_get(md, "ddptrain_checkpoint"), CHECKPOINT_VERSION);
		goto out;
	}
	sha_want = meta_get(md, "sha256");
	bufs[0] = f.data;
	lens[0] = f.data_len;
	if (sha_want == NULL || !sha256_hex(bufs, lens, 1, sha) || strcmp(sha, sha_want) != 0) {
		st = diag_set(d, ST_RUNTIME, "%s: checksum mismatch: the tensor data is corrupt (SHA-256 %.16s..., expected %.16s...)",
			      what, sha, sha_want ? sha_want : "(none)");
		goto out;
	}
	if (!parse_long_meta(md, "step", &pos->step) || !parse_long_meta(md, "epoch", &pos->epoch) ||
	    !parse_long_meta(md, "next_micro_batch", &pos->next_mb) ||
	    !parse_long_meta(md, "world_size", &world) || world < 1 ||
	    (cfg = meta_get(md, "config")) == NULL || (has_mom = meta_get(md, "momentum")) == NULL) {
		st = diag_set(d, ST_RUNTIME, "%s: checkpoint metadata is incomplete or malformed", what);
		goto out;
	}
	pos->world = (int)world;
	if (checkpoint_config_diff(cfg, want, hl, wl, sizeof hl)) {
		st = diag_set(d, ST_USAGE, "--resume: %s was written with %s; this run has %s", path, hl, wl);
		goto out;
	}
	for (int k = 0; k < n && st == ST_OK; k++) {
		float *dst = host + (size_t)t[k].arena * m->nparams + t[k].off;
		const struct st_tensor *x;

		if (t[k].arena > 0 && strcmp(has_mom, "yes") != 0) {
			memset(dst, 0, t[k].len * sizeof *dst); /* a run without optimizer state */
			continue;
		}
		x = st_find(&f, t[k].name);
		if (x == NULL || x->ndim != t[k].ndim || x->shape[0] != t[k].shape[0] ||
		    (t[k].ndim == 2 && x->shape[1] != t[k].shape[1]))
			st = diag_set(d, ST_USAGE, "%s: tensor '%s' is missing or not %s as --layers needs",
				      what, t[k].name, shape_text(&t[k], shape, sizeof shape));
		else
			st = st_read_f32(&f, x, dst, t[k].len, what, d);
	}
out:
	json_decref(root);
	st_close(&f);
	return st;
}

int checkpoint_config_diff(const char *have, const char *want, char *have_line,
			   char *want_line, size_t len)
{
	for (const char *w = want; *w != '\0';) {
		size_t wl = strcspn(w, "\n"), key = strcspn(w, "=");
		const char *h = have;
		int found = 0;

		if (key > wl)
			key = wl;
		while (*h != '\0') {
			size_t hl = strcspn(h, "\n");

			if (hl >= key && strncmp(h, w, key) == 0 && (h[key] == '=' || hl == key)) {
				found = 1;
				if (hl != wl || strncmp(h, w, wl) != 0) {
					snprintf(have_line, len, "%.*s", (int)hl, h);
					snprintf(want_line, len, "%.*s", (int)wl, w);
					return 1;
				}
				break;
			}
			h += hl + (h[hl] == '\n');
		}
		if (!found) {
			snprintf(have_line, len, "(no %.*s)", (int)key, w);
			snprintf(want_line, len, "%.*s", (int)wl, w);
			return 1;
		}
		w += wl + (w[wl] == '\n');
	}
	return 0;
}
