/*
 * safetensors.c - validated reading and atomic writing of safetensors files.
 *
 * Files read are untrusted: the header length, every shape and every offset
 * is checked against the real file length before use, shapes are multiplied
 * with overflow checks, and nothing is allocated from a size the file claims.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/filemap.h"
#include "core/outfile.h" /* outfile_open, outfile_write, outfile_sync, outfile_commit */
#include "store/safetensors.h"

#define ST_MAX_HEADER (100u << 20) /* the reference implementation's limit */

static size_t dtype_size(const char *dt)
{
	static const struct { const char *name; size_t size; } sizes[] = {
		{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4},
		{"I16", 2}, {"I8", 1}, {"U8", 1}, {"BOOL", 1}, {"U16", 2}, {"U32", 4}, {"U64", 8},
	};
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
		if (strcmp(dt, sizes[i].name) == 0)
			return sizes[i].size;
	return 0;
}

static int cmp_begin(const void *a, const void *b)
{
	const struct st_tensor *x = a, *y = b;

	return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Fill t from one header entry; checks dtype, shape and offsets against data_len. */
static enum status parse_entry(struct st_tensor *t, const char *name, json_t *v, size_t data_len,
			       const char *what, struct diag *d)
{
	json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape");
	json_t *off = json_object_get(v, "data_offsets");
	size_t esize, count = 1, i;
	char q[32];
	json_t *x;

	if (strlen(name) >= sizeof t->name)
		return diag_set(d, ST_RUNTIME, "%s: tensor name '%s...' is too long (%zu bytes, at most %zu)",
				what, diag_quote(q, sizeof q, name), strlen(name), sizeof t->name - 1);
	for (const char *c = name; *c != '\0'; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			return diag_set(d, ST_RUNTIME, "%s: tensor name '%s' contains a control character",
					what, diag_quote(q, sizeof q, name));
	strcpy(t->name, name);
	if (!json_is_object(v) || !json_is_string(dt) || !json_is_array(shape) || !json_is_array(off) ||
	    json_array_size(off) != 2)
		return diag_set(d, ST_RUNTIME, "%s: malformed safetensors header entry '%s'", what, name);
	esize = dtype_size(json_string_value(dt));
	if (esize == 0 || strlen(json_string_value(dt)) >= sizeof t->dtype)
		return diag_set(d, ST_RUNTIME, "%s: tensor '%s' has unknown dtype '%s'", what, name,
				diag_quote(q, sizeof q, json_string_value(dt)));
	strcpy(t->dtype, json_string_value(dt));
	if (json_array_size(shape) > ST_MAX_DIMS)
		return diag_set(d, ST_RUNTIME, "%s: tensor '%s' has too many dimensions", what, name);
	t->ndim = (int)json_array_size(shape);
	json_array_foreach(shape, i, x) {
		json_int_t s = json_is_integer(x) ? json_integer_value(x) : -1;

		if (s < 0 || s > (json_int_t)1 << 40)
			return diag_set(d, ST_RUNTIME, "%s: tensor '%s' has a bad shape", what, name);
		t->shape[i] = s;
		if (s != 0 && count > ((size_t)1 << 42) / (size_t)s)
			return diag_set(d, ST_RUNTIME, "%s: tensor '%s' is too large (shape product over 2^42)",
					what, name);
		count *= (size_t)s;
	}
	for (i = 0; i < 2; i++) {
		x = json_array_get(off, i);
		if (!json_is_integer(x) || json_integer_value(x) < 0)
			return diag_set(d, ST_RUNTIME, "%s: tensor '%s' has bad data_offsets", what, name);
	}
	t->begin = (size_t)json_integer_value(json_array_get(off, 0));
	t->end = (size_t)json_integer_value(json_array_get(off, 1));
	if (t->begin > t->end)
		return diag_set(d, ST_RUNTIME, "%s: tensor '%s' has data_offsets [%zu, %zu] that run backwards",
				what, name, t->begin, t->end);
	if (t->end > data_len)
		return diag_set(d, ST_RUNTIME, "%s: tensor '%s' lies outside the file (offsets %zu..%zu, data %zu bytes)",
				what, name, t->begin, t->end, data_len);
	if (t->end - t->begin != count * esize)
		return diag_set(d, ST_RUNTIME, "%s: tensor '%s' has %zu bytes but its shape needs %zu",
				what, name, t->end - t->begin, count * esize);
	return ST_OK;
}

enum status st_parse(struct st_file *f, const unsigned char *buf, size_t len, const char *what,
		     struct diag *d)
{
	uint64_t hlen = 0;
	json_error_t jerr;
	json_t *root, *v;
	const char *key;
	char q[72];
	enum status st = ST_OK;
	size_t i = 0, pos = 0;

	f->t = NULL;
	f->n = 0;
	if (len < 8)
		return diag_set(d, ST_RUNTIME, "%s: too short to be a safetensors file (%zu bytes)", what, len);
	for (int b = 7; b >= 0; b--)
		hlen = hlen << 8 | buf[b];
	if (hlen > len - 8)
		return diag_set(d, ST_RUNTIME, "%s: bad safetensors header length %llu: runs past the end of the file (%zu bytes)",
				what, (unsigned long long)hlen, len);
	if (hlen < 2 || hlen > ST_MAX_HEADER)
		return diag_set(d, ST_RUNTIME, "%s: bad safetensors header length %llu (the format allows 2 to %u)",
				what, (unsigned long long)hlen, ST_MAX_HEADER);
	root = json_loadb((const char *)buf + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
#if JANSSON_VERSION_HEX >= 0x020b00
	if (root == NULL && json_error_code(&jerr) == json_error_duplicate_key)
		return diag_set(d, ST_RUNTIME, "%s: safetensors header names a tensor twice: %s", what,
				diag_quote(jerr.text, sizeof jerr.text, jerr.text));
#endif
	if (root == NULL)
		return diag_set(d, ST_RUNTIME, "%s: safetensors header is not valid JSON: %s (column %d)",
				what, diag_quote(jerr.text, sizeof jerr.text, jerr.text), jerr.column);
	if (!json_is_object(root)) {
		st = diag_set(d, ST_RUNTIME, "%s: safetensors header is not a JSON object", what);
		goto out_root;
	}
	f->data = buf + 8 + hlen;
	f->data_len = len - 8 - (size_t)hlen;
	f->t = calloc(json_object_size(root) + 1, sizeof *f->t);
	if (f->t == NULL) {
		st = diag_set(d, ST_RUNTIME, "%s: out of memory", what);
		goto out_root;
	}
	json_object_foreach(root, key, v) {
		if (strcmp(key, "__metadata__") == 0) {
			const char *mk;
			json_t *mv;

			if (!json_is_object(v)) {
				st = diag_set(d, ST_RUNTIME, "%s: __metadata__ is not an object", what);
				goto out_t;
			}
			/* The format allows only string to string; a number here (NaN, 1e999) is refused. */
			json_object_foreach(v, mk, mv) {
				if (!json_is_string(mv)) {
					st = diag_set(d, ST_RUNTIME, "%s: __metadata__ value '%s' is not a string",
						      what, diag_quote(q, sizeof q, mk));
					goto out_t;
				}
			}
			continue;
		}
		st = parse_entry(&f->t[i], key, v, f->data_len, what, d);
		if (st != ST_OK)
			goto out_t;
		i++;
	}
	f->n = i;
	/* The tensors must tile the data region: sorted by offset, no gap, no overlap. */
	{
		struct st_tensor *s = malloc((f->n + 1) * sizeof *s);

		if (s == NULL) {
			st = diag_set(d, ST_RUNTIME, "%s: out of memory", what);
			goto out_t;
		}
		memcpy(s, f->t, f->n * sizeof *s);
		qsort(s, f->n, sizeof *s, cmp_begin);
		for (i = 0; i < f->n; i++) {
			if (s[i].begin != pos) {
				st = diag_set(d, ST_RUNTIME, "%s: tensor '%s' %s the one before it", what,
					      s[i].name, s[i].begin < pos ? "overlaps" : "leaves a gap after");
				break;
			}
			pos = s[i].end;
		}
		if (st == ST_OK && pos != f->data_len)
			st = diag_set(d, ST_RUNTIME, "%s: data region is %zu bytes but the tensors cover %zu (%zu bytes of trailing data)",
				      what, f->data_len, pos, f->data_len - pos);
		free(s);
		if (st != ST_OK)
			goto out_t;
	}
	json_decref(root);
	return ST_OK;

out_t:
	free(f->t);
	f->t = NULL;
	f->n = 0;
out_root:
	json_decref(root);
	return st;
}

enum status st_open(struct st_file *f, const char *path, const char *flag, struct diag *d)
{
	char what[DIAG_WHAT_LEN];
	enum status st;

	memset(f, 0, sizeof *f);
	snprintf(what, sizeof what, "%s: %s", flag, path);
	st = filemap_open(path, what, 8, "safetensors", &f->map, &f->map_len, d);
	if (st != ST_OK)
		return st;
	st = st_parse(f, f->map, f->map_len, what, d);
	if (st != ST_OK)
		st_close(f);
	return st;
}

const struct st_tensor *st_find(const struct st_file *f, const char *name)
{
	for (size_t i = 0; i < f->n; i++)
		if (strcmp(f->t[i].name, name) == 0)
			return &f->t[i];
	return NULL;
}

enum status st_read_f32(const struct st_file *f, const struct st_tensor *t, float *out,
			size_t count, const char *what, struct diag *d)
{
	const unsigned char *src = f->data + t->begin;

	if (strcmp(t->dtype, "F32") == 0 && t->end - t->begin == count * 4) {
		memcpy(out, src, count * 4);
	} else if (strcmp(t->dtype, "F64") == 0 && t->end - t->begin == count * 8) {
		for (size_t i = 0; i < count; i++) {
			double v;

			memcpy(&v, src + i * 8, 8);
			out[i] = (float)v;
		}
	} else {
		return diag_set(d, ST_RUNTIME, "%s: tensor '%s' has dtype %s; need F32 or F64", what,
				t->name, t->dtype);
	}
	return ST_OK;
}

void st_close(struct st_file *f)
{
	filemap_close(f->map, f->map_len);
	free(f->t);
	f->map = NULL;
	f->t = NULL;
	f->n = 0;
}

char *st_header(const struct st_entry *e, size_t n, const char *const *meta,
			  size_t nmeta, size_t *hlen)
{
	json_t *root = json_object(), *md;
	size_t off = 0, len, pad;
	char *text, *out;

	if (root == NULL)
		return NULL;
	if (nmeta > 0) {
		md = json_object();
		for (size_t k = 0; k < nmeta; k++)
			json_object_set_new(md, meta[2 * k], json_string(meta[2 * k + 1]));
		json_object_set_new(root, "__metadata__", md);
	}
	for (size_t i = 0; i < n; i++) {
		json_t *shape = json_array();
		size_t count = 1;

		for (int k = 0; k < e[i].ndim; k++) {
			json_array_append_new(shape, json_integer(e[i].shape[k]));
			count *= (size_t)e[i].shape[k];
		}
		json_object_set_new(root, e[i].name,
				    json_pack("{s:s, s:o, s:[I, I]}", "dtype", "F32", "shape", shape,
					      "data_offsets", (json_int_t)off, (json_int_t)(off + count * 4)));
		off += count * 4;
	}
	text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(root);
	if (text == NULL)
		return NULL;
	len = strlen(text);
	pad = (8 - len % 8) % 8;
	out = malloc(len + pad + 1);
	if (out != NULL) {
		memcpy(out, text, len);
		memset(out + len, ' ', pad);
		out[len + pad] = '\0';
		*hlen = len + pad;
	}
	free(text);
	return out;
}

enum status st_write(struct st_pending *p, const char *path, const char *flag,
		     const struct st_entry *e, size_t n, const char *const *meta, size_t nmeta,
		     const struct progress *pr, struct diag *d)
{
	unsigned char lenbuf[8];
	size_t hlen = 0;
	enum status st;
	char *header = st_header(e, n, meta, nmeta, &hlen);

	memset(p, 0, sizeof *p);
	if (header == NULL)
		return diag_set(d, ST_RUNTIME, "%s: %s: cannot build the safetensors header", flag, path);
	st = outfile_open(&p->of, path, flag, d);
	if (st != ST_OK)
		goto out_header;
	p->of.progress = pr;
	for (int b = 0; b < 8; b++)
		lenbuf[b] = (unsigned char)((uint64_t)hlen >> (8 * b));
	st = outfile_write(&p->of, lenbuf, 8, d);
	if (st == ST_OK)
		st = outfile_write(&p->of, header, hlen, d);
	for (size_t i = 0; i < n && st == ST_OK; i++) {
		size_t count = 1;

		for (int k = 0; k < e[i].ndim; k++)
			count *= (size_t)e[i].shape[k];
		st = outfile_write(&p->of, e[i].data, count * sizeof(float), d);
	}
	if (st == ST_OK)
		st = outfile_sync(&p->of, d); /* on disk now: st_commit only renames */
	if (st != ST_OK)
		outfile_abort(&p->of);
out_header:
	free(header);
	return st;
}

enum status st_commit(struct st_pending *p, struct diag *d)
{
	return outfile_commit(&p->of, d);
}

void st_discard(struct st_pending *p)
{
	outfile_abort(&p->of);
}

enum status st_save(const char *path, const char *flag, const struct st_entry *e, size_t n,
		    const char *const *meta, size_t nmeta, const struct progress *pr, struct diag *d)
{
	struct st_pending p;
	enum status st = st_write(&p, path, flag, e, n, meta, nmeta, pr, d);

	if (st == ST_OK)
		st = st_commit(&p, d);
	st_discard(&p);
	return st;
}
