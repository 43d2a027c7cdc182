/*
 * GGUF parser. A cursor walks the header with a bounds check before every read; counts taken
 * from the file are capped by the bytes left (each item needs at least a few bytes), so a
 * damaged count cannot make us allocate more than the file could describe.
 */
#include "formats/gguf.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"

#define GGUF_MAGIC 0x46554747u /* "GGUF" read little-endian */
#define DEFAULT_ALIGNMENT 32

typedef struct cursor {
	const uint8_t *base;
	uint64_t pos, size;
	const char *what;
} cursor;

static uint64_t rdle(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
	return v;
}

static sg_status need(cursor *c, uint64_t n, const char *item)
{
	if (n > c->size - c->pos)
		return sg_error(SG_ERR_FORMAT, "gguf: %s: truncated: %s needs %llu bytes at offset %llu, file is %llu",
				c->what, item, (unsigned long long)n, (unsigned long long)c->pos,
				(unsigned long long)c->size);
	return SG_OK;
}

static sg_status rd(cursor *c, int n, uint64_t *v, const char *item)
{
	sg_status st = need(c, (uint64_t)n, item);
	if (st) return st;
	*v = rdle(c->base + c->pos, n);
	c->pos += (uint64_t)n;
	return SG_OK;
}

/* A GGUF string: u64 length + bytes. Returns a pointer into the map. */
static sg_status rd_str(cursor *c, const uint8_t **s, uint64_t *len, const char *item)
{
	sg_status st = rd(c, 8, len, item);
	if (st) return st;
	st = need(c, *len, item);
	if (st) return st;
	*s = c->base + c->pos;
	c->pos += *len;
	return SG_OK;
}

static int scalar_size(uint32_t t)
{
	switch (t) {
	case SG_GGUF_U8:
	case SG_GGUF_I8:
	case SG_GGUF_BOOL: return 1;
	case SG_GGUF_U16:
	case SG_GGUF_I16: return 2;
	case SG_GGUF_U32:
	case SG_GGUF_I32:
	case SG_GGUF_F32: return 4;
	case SG_GGUF_U64:
	case SG_GGUF_I64:
	case SG_GGUF_F64: return 8;
	default: return 0;
	}
}

const char *sg_gguf_vtype_name(int t)
{
	static const char *names[] = {"u8",  "i8",   "u16",    "i16",   "u32", "i32", "f32",
				      "bool", "string", "array", "u64", "i64", "f64"};
	return t >= 0 && t <= 12 ? names[t] : "unknown";
}

/* Skips one array body (element type + count + elements), validating nested arrays. */
static sg_status skip_array(cursor *c, const char *key, int depth, uint32_t *etype, uint64_t *count)
{
	if (depth > SG_GGUF_MAX_DEPTH)
		return sg_error(SG_ERR_FORMAT, "gguf: %s: key '%s': arrays nested deeper than %d", c->what, key,
				SG_GGUF_MAX_DEPTH);
	uint64_t t, n;
	sg_status st = rd(c, 4, &t, "array type");
	if (!st) st = rd(c, 8, &n, "array length");
	if (st) return sg_error_wrap(st, "key '%s'", key);
	if (t > SG_GGUF_F64)
		return sg_error(SG_ERR_FORMAT, "gguf: %s: key '%s': array of unknown value type %llu", c->what, key,
				(unsigned long long)t);
	*etype = (uint32_t)t;
	*count = n;
	int es = scalar_size((uint32_t)t);
	if (es) {
		if (n > (c->size - c->pos) / (uint64_t)es)
			return sg_error(SG_ERR_FORMAT,
					"gguf: %s: key '%s': array of %llu %s runs past the end of the file", c->what,
					key, (unsigned long long)n, sg_gguf_vtype_name((int)t));
		c->pos += n * (uint64_t)es;
		return SG_OK;
	}
	for (uint64_t i = 0; i < n; i++) {
		if (t == SG_GGUF_STRING) {
			const uint8_t *s;
			uint64_t len;
			st = rd_str(c, &s, &len, "array string");
		} else {
			uint32_t et;
			uint64_t en;
			st = skip_array(c, key, depth + 1, &et, &en);
		}
		if (st) return sg_error_wrap(st, "key '%s' element %llu", key, (unsigned long long)i);
	}
	return SG_OK;
}

static sg_status parse_kv(cursor *c, sg_gguf_kv *kv)
{
	const uint8_t *ks;
	uint64_t klen, t;
	sg_status st = rd_str(c, &ks, &klen, "metadata key");
	if (st) return st;
	if (klen == 0 || klen > 65535 || memchr(ks, 0, (size_t)klen))
		return sg_error(SG_ERR_FORMAT, "gguf: %s: metadata key at offset %llu is empty, too long or has a NUL",
				c->what, (unsigned long long)(c->pos - klen));
	kv->key = sg_strndup((const char *)ks, (size_t)klen);
	if (!kv->key) return sg_error(SG_ERR_NOMEM, "gguf: metadata key");
	st = rd(c, 4, &t, "value type");
	if (st) return sg_error_wrap(st, "key '%s'", kv->key);
	if (t > SG_GGUF_F64)
		return sg_error(SG_ERR_FORMAT, "gguf: %s: key '%s' has unknown value type %llu", c->what, kv->key,
				(unsigned long long)t);
	kv->type = (sg_gguf_vtype)t;
	int sz = scalar_size((uint32_t)t);
	if (sz) {
		uint64_t raw;
		st = rd(c, sz, &raw, "value");
		if (st) return sg_error_wrap(st, "key '%s'", kv->key);
		switch (kv->type) {
		case SG_GGUF_I8: kv->v.i = (int8_t)raw; break;
		case SG_GGUF_I16: kv->v.i = (int16_t)raw; break;
		case SG_GGUF_I32: kv->v.i = (int32_t)raw; break;
		case SG_GGUF_I64: kv->v.i = (int64_t)raw; break;
		case SG_GGUF_F32: {
			float f;
			uint32_t r32 = (uint32_t)raw;
			memcpy(&f, &r32, 4);
			kv->v.f = f;
			break;
		}
		case SG_GGUF_F64: memcpy(&kv->v.f, &raw, 8); break;
		default: kv->v.u = raw; break;
		}
		return SG_OK;
	}
	if (kv->type == SG_GGUF_STRING) {
		const uint8_t *s;
		st = rd_str(c, &s, &kv->str_len, "string value");
		if (st) return sg_error_wrap(st, "key '%s'", kv->key);
		kv->str = sg_strndup((const char *)s, (size_t)kv->str_len);
		if (!kv->str) return sg_error(SG_ERR_NOMEM, "gguf: value of '%s'", kv->key);
		return SG_OK;
	}
	uint32_t et;
	uint64_t start = c->pos + 12;
	st = skip_array(c, kv->key, 1, &et, &kv->arr_n);
	if (st) return st;
	kv->arr_type = (sg_gguf_vtype)et;
	kv->arr_data = c->base + start;
	kv->arr_bytes = c->pos - start;
	return SG_OK;
}

static int by_offset(const void *a, const void *b)
{
	const sg_tensor *x = *(const sg_tensor *const *)a, *y = *(const sg_tensor *const *)b;
	if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
	return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

static int by_name(const void *a, const void *b)
{
	return strcmp((*(const sg_tensor *const *)a)->name, (*(const sg_tensor *const *)b)->name);
}

static int by_key(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sorted copy of the key pointers, so a file with a million keys stays O(n log n). */
static sg_status check_duplicate_keys(const sg_gguf *g, const char *what)
{
	if (g->n_kv < 2) return SG_OK;
	const char **keys = sg_calloc((size_t)g->n_kv, sizeof(char *));
	if (!keys) return sg_error(SG_ERR_NOMEM, "gguf: %s: key table", what);
	for (int64_t i = 0; i < g->n_kv; i++) keys[i] = g->kv[i].key;
	qsort(keys, (size_t)g->n_kv, sizeof(char *), by_key);
	sg_status st = SG_OK;
	for (int64_t i = 1; i < g->n_kv && !st; i++)
		if (!strcmp(keys[i - 1], keys[i]))
			st = sg_error(SG_ERR_FORMAT, "gguf: %s: duplicate metadata key '%s'", what, keys[i]);
	sg_free(keys);
	return st;
}

/* ggml types this build does not decode, named so the error says what the file holds. */
static const char *unsupported_ggml_name(uint64_t id)
{
	switch (id) {
	case 16: return "IQ2_XXS";
	case 17: return "IQ2_XS";
	case 18: return "IQ3_XXS";
	case 19: return "IQ1_S";
	case 21: return "IQ3_S";
	case 22: return "IQ2_S";
	case 29: return "IQ1_M";
	case 34: return "TQ1_0";
	case 35: return "TQ2_0";
	case 39: return "MXFP4";
	default: return NULL;
	}
}

static sg_status parse_tensor_info(cursor *c, sg_tensor *t, int index)
{
	const uint8_t *ns;
	uint64_t nlen, nd, type, off;
	sg_status st = rd_str(c, &ns, &nlen, "tensor name");
	if (st) return sg_error_wrap(st, "tensor %d", index);
	if (nlen == 0 || nlen > 4096 || memchr(ns, 0, (size_t)nlen))
		return sg_error(SG_ERR_FORMAT, "gguf: %s: tensor %d has an empty, overlong or NUL-holding name",
				c->what, index);
	t->name = sg_strndup((const char *)ns, (size_t)nlen);
	if (!t->name) return sg_error(SG_ERR_NOMEM, "gguf: tensor names");
	st = rd(c, 4, &nd, "n_dims");
	if (st) return sg_error_wrap(st, "tensor '%s'", t->name);
	if (nd > 4)
		return sg_error(SG_ERR_FORMAT, "gguf: %s: tensor '%s' has %llu dimensions (at most 4)", c->what,
				t->name, (unsigned long long)nd);
	t->n_dims = (int)nd;
	for (int i = 0; i < t->n_dims; i++) {
		uint64_t ne;
		st = rd(c, 8, &ne, "tensor dimension");
		if (st) return sg_error_wrap(st, "tensor '%s'", t->name);
		if (ne > (UINT64_C(1) << 62))
			return sg_error(SG_ERR_FORMAT, "gguf: %s: tensor '%s' ne[%d] = %llu is absurd", c->what,
					t->name, i, (unsigned long long)ne);
		t->ne[i] = (int64_t)ne;
	}
	st = rd(c, 4, &type, "tensor type");
	if (!st) st = rd(c, 8, &off, "tensor offset");
	if (st) return sg_error_wrap(st, "tensor '%s'", t->name);
	const sg_type_info *ti = type < 100 ? sg_type_get((int)type) : NULL;
	if (!ti) {
		const char *known = unsupported_ggml_name(type);
		return sg_error(SG_ERR_UNSUPPORTED, "gguf: %s: tensor '%s' has ggml type id %llu%s%s%s, which this "
						    "build does not support",
				c->what, t->name, (unsigned long long)type, known ? " (" : "", known ? known : "",
				known ? ")" : "");
	}
	t->type = (sg_type)type;
	int64_t nel;
	if (sg_shape_product(t->ne, t->n_dims, &nel))
		return sg_error(SG_ERR_FORMAT, "gguf: %s: tensor '%s' has too many elements", c->what, t->name);
	if (t->n_dims > 0 && t->ne[0] % ti->block) {
		char sh[160];
		return sg_error(SG_ERR_FORMAT, "gguf: %s: tensor '%s' is %s %s: ne[0] = %lld is not a multiple of "
					       "the block size %d",
				c->what, t->name, ti->name, sg_tensor_shape_str(t, sh, sizeof(sh)),
				(long long)t->ne[0], ti->block);
	}
	uint64_t blocks = (uint64_t)nel / (uint64_t)ti->block;
	if (blocks > (UINT64_C(1) << 62) / (uint64_t)ti->block_bytes)
		return sg_error(SG_ERR_FORMAT, "gguf: %s: tensor '%s' byte size overflows", c->what, t->name);
	t->nbytes = blocks * (uint64_t)ti->block_bytes;
	t->offset = off; /* relative until the data section start is known */
	return SG_OK;
}

static _Atomic uint64_t n_parses;

uint64_t sg_gguf_parse_count(void) { return atomic_load(&n_parses); }

sg_status sg_gguf_parse(const uint8_t *data, size_t size, const char *what, int file, sg_gguf *out)
{
	memset(out, 0, sizeof(*out));
	atomic_fetch_add(&n_parses, 1);
	cursor c = {data, 0, size, what ? what : "(memory)"};
	uint64_t magic, ver, nt, nkv;
	sg_status st = rd(&c, 4, &magic, "magic");
	if (st) return st;
	if (magic != GGUF_MAGIC)
		return sg_error(SG_ERR_FORMAT, "gguf: %s: bad magic 0x%08llx (a GGUF file starts with \"GGUF\")", c.what,
				(unsigned long long)magic);
	if ((st = rd(&c, 4, &ver, "version"))) return st;
	if (ver == 1)
		return sg_error(SG_ERR_UNSUPPORTED, "gguf: %s: version 1 is not supported (re-convert to v3)", c.what);
	if (ver != 2 && ver != 3) {
		if (ver > 0xffff && (((ver >> 24) & 0xff) == 2 || ((ver >> 24) & 0xff) == 3))
			return sg_error(SG_ERR_UNSUPPORTED, "gguf: %s: big-endian GGUF is not supported", c.what);
		return sg_error(SG_ERR_UNSUPPORTED, "gguf: %s: version %llu (supported: 2, 3)", c.what,
				(unsigned long long)ver);
	}
	out->version = (uint32_t)ver;
	if ((st = rd(&c, 8, &nt, "tensor count")) || (st = rd(&c, 8, &nkv, "metadata count"))) return st;
	/* a key/value needs >= 8+1+4+1 bytes, a tensor info >= 8+1+4+4+8 */
	if (nkv > (c.size - c.pos) / 14 || nt > (c.size - c.pos) / 25 || nt > INT32_MAX)
		return sg_error(SG_ERR_FORMAT, "gguf: %s: %llu tensors and %llu metadata entries cannot fit in %llu bytes",
				c.what, (unsigned long long)nt, (unsigned long long)nkv, (unsigned long long)c.size);
	out->kv = sg_calloc(nkv ? nkv : 1, sizeof(sg_gguf_kv));
	out->tensors = sg_calloc(nt ? nt : 1, sizeof(sg_tensor));
	sg_tensor **order = sg_calloc(nt ? nt : 1, sizeof(sg_tensor *));
	if (!out->kv || !out->tensors || !order) {
		sg_free(order);
		sg_gguf_free(out);
		return sg_error(SG_ERR_NOMEM, "gguf: %s: header tables", c.what);
	}
	out->alignment = DEFAULT_ALIGNMENT;
	for (uint64_t i = 0; i < nkv; i++) {
		st = parse_kv(&c, &out->kv[i]);
		out->n_kv = (int64_t)i + 1;
		if (st) goto fail;
	}
	if ((st = check_duplicate_keys(out, c.what))) goto fail;
	const sg_gguf_kv *al = sg_gguf_find(out, "general.alignment");
	if (al) {
		if (al->type != SG_GGUF_U32 || al->v.u == 0 || (al->v.u & (al->v.u - 1))) {
			st = sg_error(SG_ERR_FORMAT, "gguf: %s: general.alignment must be a u32 power of two, found %s %llu",
				      c.what, sg_gguf_vtype_name(al->type), (unsigned long long)al->v.u);
			goto fail;
		}
		out->alignment = al->v.u;
	}
	for (uint64_t i = 0; i < nt; i++) {
		sg_tensor *t = &out->tensors[i];
		out->n_tensors = (int)i + 1;
		t->file = file;
		st = parse_tensor_info(&c, t, (int)i);
		if (st) goto fail;
		if (t->offset % out->alignment) {
			st = sg_error(SG_ERR_FORMAT, "gguf: %s: tensor '%s' offset %llu is not a multiple of the alignment %llu",
				      c.what, t->name, (unsigned long long)t->offset, (unsigned long long)out->alignment);
			goto fail;
		}
		order[i] = t;
	}
	uint64_t ds = (c.pos + out->alignment - 1) / out->alignment * out->alignment;
	if (nt && ds > c.size) {
		st = sg_error(SG_ERR_FORMAT, "gguf: %s: data section starts at %llu past file size %llu", c.what,
			      (unsigned long long)ds, (unsigned long long)c.size);
		goto fail;
	}
	out->data_start = ds;
	for (uint64_t i = 0; i < nt; i++) {
		sg_tensor *t = &out->tensors[i];
		uint64_t avail = c.size > ds ? c.size - ds : 0;
		if (t->offset > avail || t->nbytes > avail - t->offset) {
			st = sg_error(SG_ERR_FORMAT, "gguf: %s: tensor '%s' data ends at %llu past file size %llu", c.what,
				      t->name, (unsigned long long)(ds + t->offset + t->nbytes), (unsigned long long)c.size);
			goto fail;
		}
		t->offset += ds;
		t->data = data + t->offset;
	}
	qsort(order, (size_t)nt, sizeof(*order), by_offset);
	for (uint64_t i = 1; i < nt; i++) {
		const sg_tensor *a = order[i - 1], *b = order[i];
		if (a->nbytes && b->nbytes && a->offset + a->nbytes > b->offset) {
			st = sg_error(SG_ERR_FORMAT, "gguf: %s: tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap",
				      c.what, a->name, (unsigned long long)a->offset,
				      (unsigned long long)(a->offset + a->nbytes), b->name, (unsigned long long)b->offset,
				      (unsigned long long)(b->offset + b->nbytes));
			goto fail;
		}
	}
	qsort(order, (size_t)nt, sizeof(*order), by_name);
	for (uint64_t i = 1; i < nt; i++)
		if (!strcmp(order[i - 1]->name, order[i]->name)) {
			st = sg_error(SG_ERR_FORMAT, "gguf: %s: duplicate tensor name '%s'", c.what, order[i]->name);
			goto fail;
		}
	sg_free(order);
	if (what && !(out->path = sg_strdup(what))) {
		sg_gguf_free(out);
		return sg_error(SG_ERR_NOMEM, "gguf: %s: path", what);
	}
	return SG_OK;
fail:
	sg_free(order);
	sg_gguf_free(out);
	return st;
}

void sg_gguf_free(sg_gguf *g)
{
	if (!g) return;
	for (int64_t i = 0; i < g->n_kv; i++) {
		sg_free(g->kv[i].key);
		sg_free(g->kv[i].str);
	}
	for (int i = 0; i < g->n_tensors; i++) sg_free(g->tensors[i].name);
	sg_free(g->kv);
	sg_free(g->tensors);
	sg_free(g->path);
	memset(g, 0, sizeof(*g));
}

const sg_gguf_kv *sg_gguf_find(const sg_gguf *g, const char *key)
{
	for (int64_t i = 0; i < g->n_kv; i++)
		if (!strcmp(g->kv[i].key, key)) return &g->kv[i];
	return NULL;
}

static sg_status kv_int(const sg_gguf_kv *kv, int64_t *out)
{
	switch (kv->type) {
	case SG_GGUF_I8:
	case SG_GGUF_I16:
	case SG_GGUF_I32:
	case SG_GGUF_I64: *out = kv->v.i; return SG_OK;
	case SG_GGUF_U64:
		if (kv->v.u > INT64_MAX) break;
		/* fallthrough */
	case SG_GGUF_U8:
	case SG_GGUF_U16:
	case SG_GGUF_U32:
	case SG_GGUF_BOOL: *out = (int64_t)kv->v.u; return SG_OK;
	default: break;
	}
	return sg_error(SG_ERR_FORMAT, "gguf: key '%s' must be an integer, found %s", kv->key,
			sg_gguf_vtype_name(kv->type));
}

sg_status sg_gguf_get_int(const sg_gguf *g, const char *key, int64_t *out)
{
	const sg_gguf_kv *kv = sg_gguf_find(g, key);
	return kv ? kv_int(kv, out) : SG_ERR_NOT_FOUND;
}

sg_status sg_gguf_get_num(const sg_gguf *g, const char *key, double *out)
{
	const sg_gguf_kv *kv = sg_gguf_find(g, key);
	if (!kv) return SG_ERR_NOT_FOUND;
	if (kv->type == SG_GGUF_F32 || kv->type == SG_GGUF_F64) return *out = kv->v.f, SG_OK;
	int64_t i;
	sg_status st = kv_int(kv, &i);
	if (st) return sg_error(SG_ERR_FORMAT, "gguf: key '%s' must be a number, found %s", key, sg_gguf_vtype_name(kv->type));
	*out = (double)i;
	return SG_OK;
}

sg_status sg_gguf_get_str(const sg_gguf *g, const char *key, const char **out)
{
	const sg_gguf_kv *kv = sg_gguf_find(g, key);
	if (!kv) return SG_ERR_NOT_FOUND;
	if (kv->type != SG_GGUF_STRING)
		return sg_error(SG_ERR_FORMAT, "gguf: key '%s' must be a string, found %s", key,
				sg_gguf_vtype_name(kv->type));
	*out = kv->str;
	return SG_OK;
}

static sg_status arr_elem(const sg_gguf_kv *kv, uint64_t i, uint64_t *raw, int *es)
{
	if (kv->type != SG_GGUF_ARRAY || !(*es = scalar_size(kv->arr_type)))
		return sg_error(SG_ERR_FORMAT, "gguf: key '%s' is not a numeric array", kv->key);
	if (i >= kv->arr_n)
		return sg_error(SG_ERR_RANGE, "gguf: key '%s': index %llu past %llu elements", kv->key,
				(unsigned long long)i, (unsigned long long)kv->arr_n);
	*raw = rdle(kv->arr_data + i * (uint64_t)*es, *es);
	return SG_OK;
}

sg_status sg_gguf_arr_int(const sg_gguf_kv *kv, uint64_t i, int64_t *out)
{
	uint64_t raw;
	int es;
	sg_status st = arr_elem(kv, i, &raw, &es);
	if (st) return st;
	switch (kv->arr_type) {
	case SG_GGUF_I8: *out = (int8_t)raw; break;
	case SG_GGUF_I16: *out = (int16_t)raw; break;
	case SG_GGUF_I32: *out = (int32_t)raw; break;
	case SG_GGUF_F32:
	case SG_GGUF_F64:
		return sg_error(SG_ERR_FORMAT, "gguf: key '%s' holds floats, not integers", kv->key);
	default: *out = (int64_t)raw; break;
	}
	return SG_OK;
}

sg_status sg_gguf_arr_num(const sg_gguf_kv *kv, uint64_t i, double *out)
{
	uint64_t raw;
	int es;
	sg_status st = arr_elem(kv, i, &raw, &es);
	if (st) return st;
	if (kv->arr_type == SG_GGUF_F32) {
		float f;
		uint32_t r = (uint32_t)raw;
		memcpy(&f, &r, 4);
		*out = f;
	} else if (kv->arr_type == SG_GGUF_F64) {
		memcpy(out, &raw, 8);
	} else {
		int64_t v;
		st = sg_gguf_arr_int(kv, i, &v);
		if (st) return st;
		*out = (double)v;
	}
	return SG_OK;
}

void sg_gguf_str_iter_init(const sg_gguf_kv *kv, sg_gguf_str_iter *it)
{
	int ok = kv && kv->type == SG_GGUF_ARRAY && kv->arr_type == SG_GGUF_STRING;
	it->p = ok ? kv->arr_data : NULL;
	it->left = ok ? kv->arr_n : 0;
}

int sg_gguf_str_next(sg_gguf_str_iter *it, const char **s, uint64_t *len)
{
	if (!it->left) return 0;
	/* bounds were validated by the parser, which walked exactly these bytes */
	*len = rdle(it->p, 8);
	*s = (const char *)it->p + 8;
	it->p += 8 + *len;
	it->left--;
	return 1;
}

char *sg_gguf_kv_str(const sg_gguf_kv *kv, char *buf, size_t cap)
{
	switch (kv->type) {
	case SG_GGUF_STRING:
		if (kv->str_len > 60) snprintf(buf, cap, "\"%.57s...\" (%llu bytes)", kv->str, (unsigned long long)kv->str_len);
		else snprintf(buf, cap, "\"%s\"", kv->str);
		break;
	case SG_GGUF_ARRAY:
		snprintf(buf, cap, "[%s x %llu]", sg_gguf_vtype_name(kv->arr_type), (unsigned long long)kv->arr_n);
		break;
	case SG_GGUF_F32:
	case SG_GGUF_F64: snprintf(buf, cap, "%g", kv->v.f); break;
	case SG_GGUF_BOOL: snprintf(buf, cap, "%s", kv->v.u ? "true" : "false"); break;
	case SG_GGUF_I8:
	case SG_GGUF_I16:
	case SG_GGUF_I32:
	case SG_GGUF_I64: snprintf(buf, cap, "%" PRId64, kv->v.i); break;
	default: snprintf(buf, cap, "%" PRIu64, kv->v.u); break;
	}
	return buf;
}
