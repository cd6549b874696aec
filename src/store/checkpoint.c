/* checkpoint.c - the model's state dict in safetensors files: --init, --save and
 * training checkpoints (writing, verifying, reading). */
#define _GNU_SOURCE /* memmem */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h> /* NAME_MAX, PATH_MAX */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store/checkpoint.h"
#include "config.h"      /* PACKAGE_VERSION */
#include "core/digest.h"      /* digest_sha256_hex */
#include "core/outfile.h"     /* outfile_target: the rotation names the file a link names */
#include "model/optimizer.h"   /* optimizer_is_state_tensor */
#include "store/safetensors.h" /* st_open, st_find, st_read_f32, st_save */

#define MAX_TENSORS (MODEL_MAX_ARENAS * 2 * MODEL_MAX_LAYERS)

#define SHA_HEX DIGEST_HEX

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
		e[k].data = host + model_state_floats(m, first, t[k].arena) + t[k].off;
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

/* Every element of the n tensors t read into host (arena after arena, as
 * model_state_to_host lays them out) is one training can produce: the first that is not is
 * named, by tensor and element ("exp_avg_sq.net1.weight" (2, 3)), with the reason and the
 * verdict on the file. A checkpoint that holds one was altered and re-signed, or corrupted
 * before it was signed: the hash alone cannot tell. */
static enum status check_values(const struct model *m, const struct model_tensor *t, int n,
				const float *host, const char *what, const char *verdict, struct diag *d)
{
	for (int k = 0; k < n; k++) {
		const float *v = host + model_state_floats(m, 0, t[k].arena) + t[k].off;

		for (size_t i = 0; i < t[k].len; i++) {
			const char *why = optimizer_impossible_value(t[k].name, v[i]);
			char at[48];

			if (why == NULL)
				continue;
			if (t[k].ndim == 2)
				snprintf(at, sizeof at, "(%zu, %zu)", i / (size_t)t[k].shape[1], i % (size_t)t[k].shape[1]);
			else
				snprintf(at, sizeof at, "(%zu)", i);
			return diag_set(d, ST_RUNTIME, "%s: tensor '%s' element %s (counting from 0) is %g, %s: %s",
					what, t[k].name, at, (double)v[i], why, verdict);
		}
	}
	return ST_OK;
}

enum status checkpoint_read_weights(const char *path, const struct model *m, float *host,
				    struct diag *d)
{
	struct model_tensor t[2 * MODEL_MAX_LAYERS];
	struct st_file f;
	enum status st;
	char what[DIAG_WHAT_LEN], shape[64];
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
	if (st == ST_OK)
		st = check_values(m, t, n, host, what, "ddptrain starts only from finite weights", d);
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

enum status checkpoint_write_weights(const char *path, const char *flag, const struct model *m,
				     const float *host, const struct progress *pr, struct diag *d)
{
	struct model_tensor t[2 * MODEL_MAX_LAYERS];
	struct st_entry e[2 * MODEL_MAX_LAYERS];
	const char *meta[] = {"format", "pt", "producer", "ddptrain " PACKAGE_VERSION};
	int n = model_state_dict(m, 0, 1, t);

	tensor_entries(m, t, n, 0, host, e);
	return st_save(path, flag, e, (size_t)n, meta, 2, pr, d);
}

enum status checkpoint_stage_weights(const char *path, const char *flag, const struct model *m,
				     const float *host, struct st_pending *out, const struct progress *pr,
				     struct diag *d)
{
	struct model_tensor t[2 * MODEL_MAX_LAYERS];
	struct st_entry e[2 * MODEL_MAX_LAYERS];
	const char *meta[] = {"format", "pt", "producer", "ddptrain " PACKAGE_VERSION};
	int n = model_state_dict(m, 0, 1, t);

	tensor_entries(m, t, n, 0, host, e);
	return st_write(out, path, flag, e, (size_t)n, meta, 2, pr, d);
}

/* The JSON header of an opened safetensors file (st_open validated its length). */
static json_t *header_json(const struct st_file *f)
{
	size_t hlen = 0;

	for (int b = 7; b >= 0; b--)
		hlen = hlen << 8 | ((const unsigned char *)f->map)[b];
	return json_loadb((const char *)f->map + 8, hlen, 0, NULL);
}

/* A metadata string, or NULL. */
static const char *meta_get(json_t *md, const char *key)
{
	json_t *v = json_object_get(md, key);

	return json_is_string(v) ? json_string_value(v) : NULL;
}

/* Whose is path: 1 a checkpoint of this lineage, 0 another run's (a checkpoint with another
 * lineage), -1 no run's (unreadable, not a checkpoint). */
static int lineage_owner(const char *path, const char *lineage)
{
	struct diag ignore = {0};
	struct st_file f;
	json_t *root;
	const char *l;
	int owner;

	if (st_open(&f, path, "--keep-checkpoints", &ignore) != ST_OK)
		return -1;
	root = header_json(&f);
	l = meta_get(json_object_get(root, "__metadata__"), "lineage");
	owner = l == NULL ? -1 : strcmp(l, lineage) == 0;
	json_decref(root);
	st_close(&f);
	return owner;
}

/* The step of "BASE.step-DIGITS" (any number of digits), or -1 for another name. */
long checkpoint_numbered_step(const char *name, const char *base)
{
	size_t blen = strlen(base), nd;
	const char *digits;
	char *end;
	long step;

	if (strncmp(name, base, blen) != 0 || strncmp(name + blen, ".step-", 6) != 0)
		return -1;
	digits = name + blen + 6;
	nd = strlen(digits);
	if (nd == 0 || nd > 18 || strspn(digits, "0123456789") != nd)
		return -1;
	errno = 0;
	step = strtol(digits, &end, 10);
	return errno == 0 && *end == '\0' ? step : -1;
}

void checkpoint_rotation_free(struct ckpt_rotation *rot)
{
	for (size_t i = 0; i < rot->n; i++)
		free(rot->copy[i].name);
	free(rot->copy);
	rot->copy = NULL;
	rot->n = rot->cap = 0;
	rot->listed = 0;
}

/* The rotation name of step N: target.step-NNNNNNNN (8 digits, more past 10^8 steps). */
#define ROTATION_FORMAT "%s.step-%08ld"
#define ROTATION_EXTRA 14 /* strlen(".step-NNNNNNNN") */

enum status checkpoint_check_rotation(const char *path, struct diag *d)
{
	char *target = outfile_target(path), *copy;
	size_t base_len, path_len;
	long name_max;
	enum status st = ST_OK;

	if (target == NULL)
		return ST_OK;
	copy = strdup(target);
	if (copy == NULL) {
		free(target);
		return diag_set(d, ST_RUNTIME, "--keep-checkpoints: out of memory");
	}
	base_len = strlen(basename(copy));
	strcpy(copy, target);
	errno = 0;
	name_max = pathconf(dirname(copy), _PC_NAME_MAX);
	if (name_max <= 0)
		name_max = NAME_MAX;
	path_len = strlen(target);
	if (base_len + ROTATION_EXTRA > (size_t)name_max)
		st = diag_set(d, ST_RUNTIME, "--checkpoint: %s: the name is too long for --keep-checkpoints, whose names add .step-NNNNNNNN (%zu characters; its file system allows %ld)",
			      path, base_len + ROTATION_EXTRA, name_max);
	else if (path_len + ROTATION_EXTRA >= PATH_MAX)
		st = diag_set(d, ST_RUNTIME, "--checkpoint: %s: the path is too long for --keep-checkpoints, whose names add .step-NNNNNNNN (%zu characters; at most %d)",
			      path, path_len + ROTATION_EXTRA, PATH_MAX - 1);
	free(copy);
	free(target);
	return st;
}

/* Add name (taken) at step to rot's list, in step order; 0 when out of memory (name freed). */
static int rotation_add(struct ckpt_rotation *rot, char *name, long step)
{
	size_t at = rot->n;

	if (name == NULL)
		return 0;
	if (rot->n == rot->cap) {
		size_t cap = rot->cap ? 2 * rot->cap : 16;
		struct ckpt_copy *g = realloc(rot->copy, cap * sizeof *g);

		if (g == NULL) {
			free(name);
			return 0;
		}
		rot->copy = g;
		rot->cap = cap;
	}
	while (at > 0 && rot->copy[at - 1].step > step) /* steps grow: normally none to pass */
		at--;
	memmove(rot->copy + at + 1, rot->copy + at, (rot->n - at) * sizeof *rot->copy);
	rot->copy[at] = (struct ckpt_copy){name, step};
	rot->n++;
	return 1;
}

/* The lineage's copies beside target (its directory, as target.step-N), read once: files
 * of another run (another lineage, or not a checkpoint) are left alone and not counted, so
 * a stale set cannot push out the current run's. One of them under the rotation name of a
 * step from first to last (this run may write any: a stop comes after any step) is
 * refused, ST_USAGE naming it: that step's checkpoint would replace it, and the rotation
 * then remove it. */
static enum status rotation_list(struct ckpt_rotation *rot, const char *target, const char *lineage,
				 long first, long last, struct diag *d)
{
	char *dcopy = strdup(target), *bcopy = strdup(target), *base, *dir;
	const char *slash = strrchr(target, '/');
	/* names as keep_numbered makes them: target's directory as written, then the name */
	const int dlen = slash != NULL ? (int)(slash - target + 1) : 0;
	char in_way[4200] = "", more[64] = "";
	long way_step = -1, nway = 0;
	int ok = 1, way_owner = -1;
	enum status st = ST_OK;
	struct dirent *e;
	DIR *dp;

	if (dcopy == NULL || bcopy == NULL) {
		st = diag_set(d, ST_RUNTIME, "--keep-checkpoints: out of memory");
		goto out_free;
	}
	base = basename(bcopy);
	dir = dirname(dcopy);
	dp = opendir(dir);
	if (dp == NULL) {
		st = diag_errno(d, errno, "--keep-checkpoints: %s", dir);
		goto out_free;
	}
	while (ok && (e = readdir(dp)) != NULL) {
		long s = checkpoint_numbered_step(e->d_name, base);
		char full[4200], name[NAME_MAX + 32];
		int owner;

		if (s < 0)
			continue;
		snprintf(full, sizeof full, "%.*s%s", dlen, target, e->d_name);
		owner = lineage_owner(full, lineage);
		snprintf(name, sizeof name, ROTATION_FORMAT, base, s);
		if (owner == 1) {
			ok = rotation_add(rot, strdup(full), s);
		} else if (s >= first && s <= last && strcmp(name, e->d_name) == 0) {
			nway++;
			if (way_step < 0 || s < way_step) { /* the lowest step: readdir has no order */
				snprintf(in_way, sizeof in_way, "%s", full);
				way_step = s;
				way_owner = owner;
			}
		}
	}
	closedir(dp);
	rot->listed = 1;
	if (!ok) {
		st = diag_set(d, ST_RUNTIME, "--keep-checkpoints: out of memory");
	} else if (nway > 0) {
		if (nway > 1)
			snprintf(more, sizeof more, " (and %ld more such files)", nway - 1);
		st = diag_set(d, ST_USAGE, "--keep-checkpoints: %s%s is not this run's (%s): this run's checkpoint of step %ld would replace it, and the rotation remove it; move it away or give --checkpoint another name%s",
			      in_way, more, way_owner == 0 ? "another run's checkpoint" : "not a ddptrain checkpoint",
			      way_step, way_owner == 0 ? ", or --resume that run" : "");
	}
out_free:
	free(dcopy);
	free(bcopy);
	return st;
}

enum status checkpoint_rotation_start(struct ckpt_rotation *rot, const char *path, const char *lineage,
				      long first, long last, struct diag *d)
{
	char *target = outfile_target(path);
	enum status st;

	if (target == NULL)
		return diag_errno(d, errno, "--keep-checkpoints: %s", path);
	st = rotation_list(rot, target, lineage, first, last, d);
	free(target);
	return st;
}

/* Keep the newest rot->keep copies: link the new one, then remove the oldest by step. When
 * path is a symbolic link they are names of the file it names, beside that file (link(2)
 * would name the link itself, and a hard link cannot leave the target's file system). */
static enum status keep_numbered(const char *path, long step, struct ckpt_rotation *rot,
				 const char *lineage, struct diag *d)
{
	char numbered[4200], *target = outfile_target(path);
	enum status st = ST_OK;
	int mine = 0;

	if (target == NULL)
		return diag_errno(d, errno, "--keep-checkpoints: %s", path);
	snprintf(numbered, sizeof numbered, ROTATION_FORMAT, target, step);
	/* read at the start (checkpoint_rotation_start), or here the first time */
	if (!rot->listed && (st = rotation_list(rot, target, lineage, 1, 0, d)) != ST_OK)
		goto out;
	/* The new copy replaces only this run's of the same name (a step taken again after a
	 * resume); a file of that name that is not this run's (made since the start) never. */
	for (size_t i = rot->n; i-- > 0 && rot->copy[i].step >= step && !mine;)
		if (strcmp(rot->copy[i].name, numbered) == 0) {
			mine = 1;
			free(rot->copy[i].name);
			memmove(rot->copy + i, rot->copy + i + 1, (rot->n - i - 1) * sizeof *rot->copy);
			rot->n--;
		}
	if (mine)
		unlink(numbered);
	if (link(target, numbered) != 0) {
		st = errno == EEXIST ?
			diag_set(d, ST_RUNTIME, "--keep-checkpoints: %s appeared during the run and is not this run's: not replaced (%s holds the checkpoint of step %ld)",
				 numbered, path, step) :
			diag_errno(d, errno, "--keep-checkpoints: %s", numbered);
		goto out;
	}
	if (!rotation_add(rot, strdup(numbered), step))
		st = diag_set(d, ST_RUNTIME, "--keep-checkpoints: out of memory");
	if (rot->n > (size_t)rot->keep) {
		size_t drop = rot->n - (size_t)rot->keep;

		for (size_t i = 0; i < drop; i++) {
			unlink(rot->copy[i].name);
			free(rot->copy[i].name);
		}
		memmove(rot->copy, rot->copy + drop, (rot->n - drop) * sizeof *rot->copy);
		rot->n -= drop;
	}
out:
	free(target);
	return st;
}

void checkpoint_new_lineage(char lineage[CKPT_LINEAGE])
{
	unsigned char r[16] = {0};
	struct timespec ts;
	FILE *f = fopen("/dev/urandom", "rb");

	if (f == NULL || fread(r, 1, sizeof r, f) != sizeof r) {
		/* no urandom: time and pid still tell runs apart */
		clock_gettime(CLOCK_REALTIME, &ts);
		snprintf((char *)r, sizeof r, "%lx%x", (long)ts.tv_nsec ^ (long)ts.tv_sec, (unsigned)getpid());
	}
	if (f != NULL)
		fclose(f);
	for (int i = 0; i < 16; i++)
		sprintf(lineage + 2 * i, "%02x", r[i]);
}

/* The header is hashed with the sha256 value as 64 zeros: writer and reader both hash
 * the exact header bytes, so every field (position, configuration, tensor offsets) is
 * covered, not only the tensor data. */
#define SHA_KEY "\"sha256\":\""
static const char sha_zeros[SHA_HEX] =
	"0000000000000000000000000000000000000000000000000000000000000000";

enum status checkpoint_save(const char *path, struct ckpt_rotation *rot, const struct model *m,
			    const float *host, const struct ckpt_pos *pos, const char *config,
			    const struct progress *pr, struct diag *d)
{
	struct model_tensor t[MAX_TENSORS];
	struct st_entry e[MAX_TENSORS];
	char sha[SHA_HEX] = "", *header;
	char ver[16], step[32], epoch[32], mb[32], world[16], best[40], sched[32];
	const void *bufs[MAX_TENSORS + 1];
	size_t lens[MAX_TENSORS + 1], hlen = 0;
	const char *meta[24];
	int n = model_state_dict(m, 0, m->narenas, t), nm = 0, ok;
	enum status st;

	/* Data and starting weights were checked finite when loaded: this is divergence. */
	if (!model_all_finite(host, model_state_floats(m, 0, m->narenas)))
		return diag_set(d, ST_RUNTIME, "training diverged: the weights are not finite after step %ld; lower --lr (--checkpoint: %s not written, the previous checkpoint is kept)",
				pos->step, path);
	tensor_entries(m, t, n, 0, host, e);
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
	META("momentum", m->narenas > 1 ? "yes" : "no"); /* optimizer state follows */
	META("lineage", pos->lineage);
	if (pos->have_best) {
		snprintf(best, sizeof best, "%.17g", pos->best_loss);
		META("best_val_loss", best);
	}
	if (pos->schedule_steps > 0) {
		snprintf(sched, sizeof sched, "%ld", pos->schedule_steps);
		META("schedule_steps", sched);
	}
	META("config", config);
	META("sha256", sha_zeros);
#undef META
	header = st_header(e, (size_t)n, meta, (size_t)nm / 2, &hlen);
	if (header == NULL)
		return diag_set(d, ST_RUNTIME, "--checkpoint: %s: cannot build the header", path);
	bufs[0] = header;
	lens[0] = hlen;
	for (int k = 0; k < n; k++) {
		bufs[k + 1] = e[k].data;
		lens[k + 1] = t[k].len * sizeof(float);
	}
	ok = digest_sha256_hex(bufs, lens, n + 1, sha);
	free(header);
	if (!ok)
		return diag_set(d, ST_RUNTIME, "--checkpoint: SHA-256 failed");
	meta[nm - 1] = sha;
	st = st_save(path, "--checkpoint", e, (size_t)n, meta, (size_t)nm / 2, pr, d);
	if (st == ST_OK && rot != NULL && rot->keep > 0)
		st = keep_numbered(path, pos->step, rot, pos->lineage, d);
	return st;
}

/* Metadata integer key in [lo, hi]; 0 if absent, malformed or out of range. */
static int meta_long(json_t *md, const char *key, long lo, long hi, long *out)
{
	const char *s = meta_get(md, key);
	char *end;

	if (s == NULL)
		return 0;
	errno = 0;
	*out = strtol(s, &end, 10);
	return *s != '\0' && *end == '\0' && errno == 0 && *out >= lo && *out <= hi;
}

/* Check the SHA-256 over the header (its sha256 value zeroed) and the data region. */
static int header_and_data_match(const struct st_file *f, const char *sha_want, char sha[SHA_HEX])
{
	const char *h = (const char *)f->map + 8, *at;
	size_t hlen = (size_t)(f->data - (const unsigned char *)f->map) - 8, klen = strlen(SHA_KEY);
	char needle[SHA_HEX + 16], *copy;
	const void *bufs[2];
	size_t lens[2];
	int ok;

	if (strlen(sha_want) != SHA_HEX - 1 || strspn(sha_want, "0123456789abcdef") != SHA_HEX - 1)
		return 0;
	snprintf(needle, sizeof needle, SHA_KEY "%s\"", sha_want);
	at = memmem(h, hlen, needle, strlen(needle));
	if (at == NULL || memmem(at + 1, hlen - (size_t)(at + 1 - h), needle, strlen(needle)) != NULL)
		return 0;
	copy = malloc(hlen);
	if (copy == NULL)
		return 0;
	memcpy(copy, h, hlen);
	memcpy(copy + (at - h) + klen, sha_zeros, SHA_HEX - 1);
	bufs[0] = copy;
	lens[0] = hlen;
	bufs[1] = f->data;
	lens[1] = f->data_len;
	ok = digest_sha256_hex(bufs, lens, 2, sha) && strcmp(sha, sha_want) == 0;
	free(copy);
	return ok;
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
	const char *sha_want, *cfg, *has_mom, *lineage, *ver, *best;
	char sha[SHA_HEX] = "", what[DIAG_WHAT_LEN];
	long world = 0;
	enum status st;

	snprintf(what, sizeof what, "--resume: %s", path);
	st = st_open(&f, path, "--resume", d);
	if (st != ST_OK)
		return st;
	root = header_json(&f);
	md = json_object_get(root, "__metadata__");
	ver = meta_get(md, "ddptrain_checkpoint");
	if (ver == NULL) {
		st = diag_set(d, ST_RUNTIME, "%s: not a ddptrain checkpoint (no ddptrain_checkpoint metadata); use it with --init for its weights",
			      what);
		goto out;
	}
	if (strcmp(ver, CHECKPOINT_VERSION_TEXT) != 0) {
		char q[40];

		st = diag_set(d, ST_RUNTIME, "%s: checkpoint format %s; this ddptrain reads format %d%s",
			      what, diag_quote(q, sizeof q, ver), CHECKPOINT_VERSION,
			      strcmp(ver, "1") == 0 ? " (format 1 did not checksum its header; use the file with --init for its weights)" : "");
		goto out;
	}
	sha_want = meta_get(md, "sha256");
	if (sha_want == NULL || !header_and_data_match(&f, sha_want, sha)) {
		st = diag_set(d, ST_RUNTIME, "%s: checksum mismatch: the header or the tensor data is corrupt or was edited (SHA-256 %.16s..., expected %.16s...)",
			      what, sha, sha_want ? sha_want : "(none)");
		goto out;
	}
	/* Covered by the checksum, and still range-checked: a value no run can write is refused. */
	if (!meta_long(md, "step", 0, CKPT_MAX_STEP, &pos->step) ||
	    !meta_long(md, "epoch", 0, CKPT_MAX_EPOCH, &pos->epoch) ||
	    !meta_long(md, "next_micro_batch", 0, CKPT_MAX_EPOCH, &pos->next_mb) ||
	    !meta_long(md, "world_size", 1, CKPT_MAX_WORLD, &world) ||
	    (lineage = meta_get(md, "lineage")) == NULL || strlen(lineage) != CKPT_LINEAGE - 1 ||
	    strspn(lineage, "0123456789abcdef") != CKPT_LINEAGE - 1 ||
	    (cfg = meta_get(md, "config")) == NULL || (has_mom = meta_get(md, "momentum")) == NULL) {
		st = diag_set(d, ST_RUNTIME, "%s: checkpoint metadata is incomplete, malformed or out of range", what);
		goto out;
	}
	memcpy(pos->lineage, lineage, CKPT_LINEAGE);
	pos->world = (int)world;
	if ((best = meta_get(md, "best_val_loss")) != NULL) { /* optional: --save-best runs only */
		char *end;

		errno = 0;
		pos->best_loss = strtod(best, &end);
		if (end == best || *end != '\0' || errno != 0 || !isfinite(pos->best_loss)) {
			st = diag_set(d, ST_RUNTIME, "%s: checkpoint metadata is incomplete, malformed or out of range", what);
			goto out;
		}
		pos->have_best = 1;
	}
	/* Optional (older checkpoints lack it): the schedule's length. Against the steps this
	 * run will take it is checked by the resume (persist_resume). */
	pos->schedule_steps = 0;
	if (meta_get(md, "schedule_steps") != NULL &&
	    !meta_long(md, "schedule_steps", 1, CKPT_MAX_STEP, &pos->schedule_steps)) {
		st = diag_set(d, ST_RUNTIME, "%s: checkpoint metadata is incomplete, malformed or out of range", what);
		goto out;
	}
	if (checkpoint_config_diff(cfg, want, hl, wl, sizeof hl)) {
		st = diag_set(d, ST_USAGE, "--resume: %s was written with %s; this run has %s", path, hl, wl);
		goto out;
	}
	/* And the other way: settings the checkpoint has and this run lacks (wl is then
	 * "(no --flag)"), e.g. one a later ddptrain added to the text. */
	switch (checkpoint_config_diff(want, cfg, wl, hl, sizeof hl)) {
	case 0:
		break;
	case 1:
		st = diag_set(d, ST_USAGE, "--resume: %s was written with %s; this run has no %.*s",
			      path, hl, (int)strcspn(wl + 4, ")"), wl + 4);
		goto out;
	default:
		st = diag_set(d, ST_USAGE, "--resume: %s was written with %s; this run has none of these",
			      path, hl);
		goto out;
	}
	for (int k = 0; k < n && st == ST_OK; k++) {
		float *dst = host + model_state_floats(m, 0, t[k].arena) + t[k].off;
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
	if (st == ST_OK)
		st = check_values(m, t, n, host, what, "training never writes that (the file was altered or corrupted)", d);
out:
	json_decref(root);
	st_close(&f);
	return st;
}

enum status checkpoint_check_position(const struct ckpt_pos *pos, long nmicro, long longest,
				      long grad_accum, const char *path, struct diag *d)
{
	/* Steps the epochs before this one took, and this one's micro-batches so far took. */
	const long before = pos->step - pos->next_mb / grad_accum, most = (longest + grad_accum - 1) / grad_accum;

	if (pos->next_mb >= nmicro)
		return diag_set(d, ST_RUNTIME, "--resume: %s: next_micro_batch %ld is past the end of an epoch of %ld micro-batches (world size %d)",
				path, pos->next_mb, nmicro, pos->world);
	if (pos->next_mb % grad_accum != 0)
		return diag_set(d, ST_RUNTIME, "--resume: %s: next_micro_batch %ld does not begin a step of --grad-accum=%ld micro-batches",
				path, pos->next_mb, grad_accum);
	/* pos->epoch <= before <= pos->epoch * most, without the product overflowing */
	if (before < pos->epoch || (pos->epoch > 0 ? (before - 1) / pos->epoch >= most : before > 0)) {
		long lo = pos->epoch + pos->next_mb / grad_accum;
		double hi = (double)pos->epoch * (double)most + (double)(pos->next_mb / grad_accum);
		char range[64];

		if (hi == (double)lo)
			snprintf(range, sizeof range, "%ld", lo);
		else
			snprintf(range, sizeof range, "%ld to %.0f", lo, hi);
		return diag_set(d, ST_RUNTIME, "--resume: %s: step %ld contradicts epoch %ld and next_micro_batch %ld: those take %s steps (an epoch takes 1 to %ld steps, by world size)",
				path, pos->step, pos->epoch, pos->next_mb, range, most);
	}
	return ST_OK;
}

/* Append ", " (unless first) and text to buf (len bytes); a text that does not fit ends
 * the list with ", ..." where it fits. */
static void list_append(char *buf, size_t len, const char *text, int textlen)
{
	size_t used = strlen(buf);

	if (used >= 3 && strcmp(buf + used - 3, "...") == 0)
		return;
	if (used + (used ? 2 : 0) + (size_t)textlen + 5 < len)
		snprintf(buf + used, len - used, "%s%.*s", used ? ", " : "", textlen, text);
	else if (used + 5 < len)
		snprintf(buf + used, len - used, "%s...", used ? ", " : "");
}

int checkpoint_config_diff(const char *have, const char *want, char *have_line,
			   char *want_line, size_t len)
{
	int n = 0;

	have_line[0] = want_line[0] = '\0';
	/* Two passes: the flags first, then the lines that follow from them (data=... shows
	 * the targets' width, which --loss decides), so the cause is named first. */
	for (int flags = 1; flags >= 0; flags--) {
		for (const char *w = want; *w != '\0';) {
			size_t wl = strcspn(w, "\n"), key = strcspn(w, "=");
			const char *h = have;
			int found = 0;

			if (key > wl)
				key = wl;
			if ((strncmp(w, "--", 2) == 0) != flags) {
				w += wl + (w[wl] == '\n');
				continue;
			}
			while (*h != '\0') {
				size_t hl = strcspn(h, "\n");

				if (hl >= key && strncmp(h, w, key) == 0 && (h[key] == '=' || hl == key)) {
					found = 1;
					if (hl != wl || strncmp(h, w, wl) != 0) {
						list_append(have_line, len, h, (int)hl);
						list_append(want_line, len, w, (int)wl);
						n++;
					}
					break;
				}
				h += hl + (h[hl] == '\n');
			}
			if (!found) {
				char none[160];

				snprintf(none, sizeof none, "(no %.*s)", (int)(key < 150 ? key : 150), w);
				list_append(have_line, len, none, (int)strlen(none));
				list_append(want_line, len, w, (int)wl);
				n++;
			}
			w += wl + (w[wl] == '\n');
		}
	}
	return n;
}
