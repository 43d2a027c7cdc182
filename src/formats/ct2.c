/*
 * CTranslate2 model.bin parser. The file is untrusted: a cursor checks the bytes left before
 * every read, counts are capped by what the bytes left could hold, and every error names the
 * file, the variable and the numbers.
 */
#include "formats/ct2.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/error.h"

/* Smallest records: a variable is a string (u16 + NUL), rank, dtype and byte count; an alias two
 * strings. Counts read from the file are checked against these so a damaged count cannot make
 * the parser allocate more than the file could describe. */
#define MIN_VAR_BYTES 9u
#define MIN_ALIAS_BYTES 6u

static const struct {
	const char *name;
	sg_type type;
} dtypes[] = {
	{"float32", SG_TYPE_F32}, {"int8", SG_TYPE_I8},     {"int16", SG_TYPE_I16},
	{"int32", SG_TYPE_I32},   {"float16", SG_TYPE_F16}, {"bfloat16", SG_TYPE_BF16},
};
#define N_DTYPES ((int)(sizeof(dtypes) / sizeof(dtypes[0])))

const char *sg_ct2_dtype_name(int id)
{
	return id >= 0 && id < N_DTYPES ? dtypes[id].name : NULL;
}

typedef struct cursor {
	const uint8_t *base;
	uint64_t pos, size;
	const char *what;
} cursor;

static sg_status need(cursor *c, uint64_t n, const char *item, const char *var)
{
	if (n <= c->size - c->pos) return SG_OK;
	if (var)
		return sg_error(SG_ERR_FORMAT,
				"ct2: %s: variable '%s': truncated: %s needs %llu bytes at offset %llu, file is %llu",
				c->what, var, item, (unsigned long long)n, (unsigned long long)c->pos,
				(unsigned long long)c->size);
	return sg_error(SG_ERR_FORMAT, "ct2: %s: truncated: %s needs %llu bytes at offset %llu, file is %llu",
			c->what, item, (unsigned long long)n, (unsigned long long)c->pos, (unsigned long long)c->size);
}

static sg_status rd(cursor *c, int n, uint64_t *v, const char *item, const char *var)
{
	sg_status st = need(c, (uint64_t)n, item, var);
	if (st) return st;
	uint64_t x = 0;
	for (int i = n - 1; i >= 0; i--) x = x << 8 | c->base[c->pos + (uint64_t)i];
	c->pos += (uint64_t)n;
	*v = x;
	return SG_OK;
}

/* A string: u16 length counting the NUL, then the bytes. *s points into the map (NUL-terminated
 * there); a length of 0, a missing terminator or a NUL inside is refused. */
static sg_status rd_str(cursor *c, const char **s, const char *item)
{
	uint64_t n;
	uint64_t at = c->pos;
	sg_status st = rd(c, 2, &n, item, NULL);
	if (st) return st;
	st = need(c, n, item, NULL);
	if (st) return st;
	const uint8_t *p = c->base + c->pos;
	if (n == 0 || p[n - 1] != 0 || memchr(p, 0, n - 1))
		return sg_error(SG_ERR_FORMAT, "ct2: %s: %s at offset %llu is not a NUL-terminated string of length %llu",
				c->what, item, (unsigned long long)at, (unsigned long long)n);
	*s = (const char *)p;
	c->pos += n;
	return SG_OK;
}

void sg_ct2_close(sg_ct2 *c)
{
	if (!c) return;
	for (int i = 0; i < c->n_vars; i++) sg_free(c->vars[i].t.name);
	for (int i = 0; i < c->n_aliases; i++) sg_free(c->aliases[i].name);
	sg_free(c->vars);
	sg_free(c->aliases);
	sg_free(c->var_order);
	sg_free(c->alias_order);
	sg_free(c->spec);
	sg_mmap_close(&c->map);
	memset(c, 0, sizeof(*c));
}

/* Reads one variable record at the cursor into v (name not yet owned: points into the map). */
static sg_status parse_var(cursor *c, int index, sg_ct2_var *v, const char **name)
{
	char item[48];
	snprintf(item, sizeof(item), "name of variable %d", index);
	sg_status st = rd_str(c, name, item);
	if (st) return st;
	const char *nm = *name;
	uint64_t rank, dt, nbytes;
	if ((st = rd(c, 1, &rank, "rank", nm))) return st;
	if (rank > SG_MAX_DIMS)
		return sg_error(SG_ERR_FORMAT, "ct2: %s: variable '%s' has rank %llu (at most %d)", c->what, nm,
				(unsigned long long)rank, SG_MAX_DIMS);
	sg_tensor *t = &v->t;
	t->n_dims = (int)rank;
	for (uint64_t i = 0; i < rank; i++) {
		uint64_t d;
		if ((st = rd(c, 4, &d, "dimension", nm))) return st;
		t->ne[rank - 1 - i] = (int64_t)d; /* the file lists the outermost first */
	}
	if ((st = rd(c, 1, &dt, "dtype", nm))) return st;
	if (dt >= (uint64_t)N_DTYPES)
		return sg_error(SG_ERR_FORMAT,
				"ct2: %s: variable '%s' has unknown dtype %llu (known: 0 float32, 1 int8, 2 int16, 3 "
				"int32, 4 float16, 5 bfloat16)",
				c->what, nm, (unsigned long long)dt);
	t->type = dtypes[dt].type;
	if ((st = rd(c, 4, &nbytes, "byte count", nm))) return st;
	int64_t nel;
	char sh[160];
	if (sg_shape_product(t->ne, t->n_dims, &nel))
		return sg_error(SG_ERR_FORMAT, "ct2: %s: variable '%s' shape %s is too large", c->what, nm,
				sg_tensor_shape_str(t, sh, sizeof(sh)));
	uint64_t want = (uint64_t)nel * (uint64_t)sg_type_get(t->type)->block_bytes;
	if (want != nbytes)
		return sg_error(SG_ERR_FORMAT, "ct2: %s: variable '%s' is %s %s = %llu bytes but its byte count says %llu",
				c->what, nm, dtypes[dt].name, sg_tensor_shape_str(t, sh, sizeof(sh)),
				(unsigned long long)want, (unsigned long long)nbytes);
	if (nbytes > c->size - c->pos)
		return sg_error(SG_ERR_FORMAT,
				"ct2: %s: variable '%s' data [%llu, %llu) runs past file size %llu", c->what, nm,
				(unsigned long long)c->pos, (unsigned long long)(c->pos + nbytes),
				(unsigned long long)c->size);
	t->offset = c->pos;
	t->nbytes = nbytes;
	t->data = c->base + c->pos;
	c->pos += nbytes;
	return SG_OK;
}

/* qsort has no context argument: the arrays being sorted are set here for the comparators. One
 * parse at a time per thread. */
static _Thread_local const sg_ct2 *sorting;

static int by_var_name(const void *a, const void *b)
{
	return strcmp(sorting->vars[*(const int *)a].t.name, sorting->vars[*(const int *)b].t.name);
}

static int by_alias_name(const void *a, const void *b)
{
	return strcmp(sorting->aliases[*(const int *)a].name, sorting->aliases[*(const int *)b].name);
}

static int find_var(const sg_ct2 *c, const char *name)
{
	int lo = 0, hi = c->n_vars - 1;
	while (lo <= hi) {
		int mid = lo + (hi - lo) / 2, k = c->var_order[mid];
		int r = strcmp(name, c->vars[k].t.name);
		if (!r) return k;
		if (r < 0) hi = mid - 1;
		else lo = mid + 1;
	}
	return -1;
}

static int find_alias(const sg_ct2 *c, const char *name)
{
	int lo = 0, hi = c->n_aliases - 1;
	while (lo <= hi) {
		int mid = lo + (hi - lo) / 2, k = c->alias_order[mid];
		int r = strcmp(name, c->aliases[k].name);
		if (!r) return k;
		if (r < 0) hi = mid - 1;
		else lo = mid + 1;
	}
	return -1;
}

const sg_ct2_var *sg_ct2_find(const sg_ct2 *c, const char *name)
{
	int k = find_var(c, name);
	if (k >= 0) return &c->vars[k];
	k = find_alias(c, name);
	return k >= 0 ? &c->vars[c->aliases[k].target] : NULL;
}

/* Pairs each I8/I16 weight X with X_scale and checks the scale's type and size. */
static sg_status pair_scales(sg_ct2 *c, const char *what)
{
	for (int i = 0; i < c->n_vars; i++) {
		sg_ct2_var *v = &c->vars[i];
		if (v->t.type != SG_TYPE_I8 && v->t.type != SG_TYPE_I16) continue;
		size_t n = strlen(v->t.name);
		char *sname = sg_malloc(n + sizeof("_scale"));
		if (!sname) return sg_error(SG_ERR_NOMEM, "ct2: %s: scale names", what);
		memcpy(sname, v->t.name, n);
		memcpy(sname + n, "_scale", sizeof("_scale"));
		int k = find_var(c, sname);
		sg_free(sname);
		if (k < 0) continue; /* an int8 flag or an unquantized integer table: no scale */
		sg_ct2_var *s = &c->vars[k];
		int64_t rows = v->t.n_dims ? v->t.ne[v->t.n_dims - 1] : 1, have = sg_tensor_nelem(&s->t);
		int is_float = s->t.type == SG_TYPE_F32 || s->t.type == SG_TYPE_F16 || s->t.type == SG_TYPE_BF16;
		if (!is_float || (have != rows && have != 1)) {
			char sh[160];
			return sg_error(SG_ERR_FORMAT,
					"ct2: %s: scale '%s' is %s %s; weight '%s' (%lld rows) needs float [%lld] or a "
					"scalar",
					what, s->t.name, sg_type_name(s->t.type), sg_tensor_shape_str(&s->t, sh, sizeof(sh)),
					v->t.name, (long long)rows, (long long)rows);
		}
		v->scale = &s->t;
		s->is_scale = 1;
	}
	return SG_OK;
}

sg_status sg_ct2_parse(const uint8_t *data, size_t size, const char *what, sg_ct2 *out)
{
	memset(out, 0, sizeof(*out));
	if (!what) what = "(memory)";
	cursor c = {data, 0, size, what};
	uint64_t v, rev, n;
	const char *s;
	sg_status st;
	if ((st = rd(&c, 4, &v, "binary version", NULL))) return st;
	if (v != SG_CT2_VERSION)
		return sg_error(SG_ERR_UNSUPPORTED,
				"ct2: %s: binary version %llu is not supported (this reader knows version %d)", what,
				(unsigned long long)v, SG_CT2_VERSION);
	out->version = (uint32_t)v;
	if ((st = rd_str(&c, &s, "spec name"))) return st;
	if (!(out->spec = sg_strdup(s))) return sg_error(SG_ERR_NOMEM, "ct2: %s: spec name", what);
	if ((st = rd(&c, 4, &rev, "spec revision", NULL))) goto fail;
	out->revision = (uint32_t)rev;
	if ((st = rd(&c, 4, &n, "variable count", NULL))) goto fail;
	if (n > (c.size - c.pos) / MIN_VAR_BYTES) {
		st = sg_error(SG_ERR_FORMAT,
			      "ct2: %s: variable count %llu cannot fit in the %llu bytes left at offset %llu", what,
			      (unsigned long long)n, (unsigned long long)(c.size - c.pos), (unsigned long long)c.pos);
		goto fail;
	}
	out->vars = sg_calloc(n ? n : 1, sizeof(sg_ct2_var));
	out->var_order = sg_calloc(n ? n : 1, sizeof(int));
	if (!out->vars || !out->var_order) {
		st = sg_error(SG_ERR_NOMEM, "ct2: %s: %llu variables", what, (unsigned long long)n);
		goto fail;
	}
	for (uint64_t i = 0; i < n; i++) {
		sg_ct2_var *var = &out->vars[i];
		const char *name;
		if ((st = parse_var(&c, (int)i, var, &name))) goto fail;
		if (!(var->t.name = sg_strdup(name))) {
			st = sg_error(SG_ERR_NOMEM, "ct2: %s: variable names", what);
			goto fail;
		}
		out->var_order[i] = (int)i;
		out->n_vars++;
		out->data_bytes += var->t.nbytes;
	}
	sorting = out;
	qsort(out->var_order, (size_t)out->n_vars, sizeof(int), by_var_name);
	for (int i = 1; i < out->n_vars; i++)
		if (!strcmp(out->vars[out->var_order[i - 1]].t.name, out->vars[out->var_order[i]].t.name)) {
			st = sg_error(SG_ERR_FORMAT, "ct2: %s: two variables are named '%s'", what,
				      out->vars[out->var_order[i]].t.name);
			goto fail;
		}
	if ((st = rd(&c, 4, &n, "alias count", NULL))) goto fail;
	if (n > (c.size - c.pos) / MIN_ALIAS_BYTES) {
		st = sg_error(SG_ERR_FORMAT, "ct2: %s: alias count %llu cannot fit in the %llu bytes left at offset %llu",
			      what, (unsigned long long)n, (unsigned long long)(c.size - c.pos),
			      (unsigned long long)c.pos);
		goto fail;
	}
	out->aliases = sg_calloc(n ? n : 1, sizeof(sg_ct2_alias));
	out->alias_order = sg_calloc(n ? n : 1, sizeof(int));
	if (!out->aliases || !out->alias_order) {
		st = sg_error(SG_ERR_NOMEM, "ct2: %s: %llu aliases", what, (unsigned long long)n);
		goto fail;
	}
	for (uint64_t i = 0; i < n; i++) {
		const char *alias, *target;
		char item[48];
		snprintf(item, sizeof(item), "name of alias %llu", (unsigned long long)i);
		if ((st = rd_str(&c, &alias, item))) goto fail;
		snprintf(item, sizeof(item), "target of alias %llu", (unsigned long long)i);
		if ((st = rd_str(&c, &target, item))) goto fail;
		int k = find_var(out, target);
		if (k < 0) {
			st = sg_error(SG_ERR_FORMAT, "ct2: %s: alias '%s' names '%s', which is not a variable", what, alias,
				      target);
			goto fail;
		}
		if (find_var(out, alias) >= 0) {
			st = sg_error(SG_ERR_FORMAT, "ct2: %s: alias '%s' has the name of a variable", what, alias);
			goto fail;
		}
		sg_ct2_alias *a = &out->aliases[i];
		if (!(a->name = sg_strdup(alias))) {
			st = sg_error(SG_ERR_NOMEM, "ct2: %s: alias names", what);
			goto fail;
		}
		a->target = k;
		out->alias_order[i] = (int)i;
		out->n_aliases++;
	}
	sorting = out;
	qsort(out->alias_order, (size_t)out->n_aliases, sizeof(int), by_alias_name);
	sorting = NULL;
	for (int i = 1; i < out->n_aliases; i++)
		if (!strcmp(out->aliases[out->alias_order[i - 1]].name, out->aliases[out->alias_order[i]].name)) {
			st = sg_error(SG_ERR_FORMAT, "ct2: %s: two aliases are named '%s'", what,
				      out->aliases[out->alias_order[i]].name);
			goto fail;
		}
	if (c.pos != c.size) {
		st = sg_error(SG_ERR_FORMAT, "ct2: %s: %llu unexpected bytes after the alias table (it ends at offset %llu)",
			      what, (unsigned long long)(c.size - c.pos), (unsigned long long)c.pos);
		goto fail;
	}
	if ((st = pair_scales(out, what))) goto fail;
	return SG_OK;
fail:
	sorting = NULL;
	sg_ct2_close(out);
	return st;
}

static int is_dir(const char *path)
{
	struct stat sb;
	return !stat(path, &sb) && S_ISDIR(sb.st_mode);
}

sg_status sg_ct2_open(const char *path, sg_ct2 *out)
{
	memset(out, 0, sizeof(*out));
	char *file = NULL;
	if (is_dir(path)) {
		size_t n = strlen(path);
		file = sg_malloc(n + sizeof("/model.bin"));
		if (!file) return sg_error(SG_ERR_NOMEM, "ct2: %s", path);
		memcpy(file, path, n);
		memcpy(file + n, "/model.bin", sizeof("/model.bin"));
	}
	sg_mapped_file map;
	sg_status st = sg_mmap_open(file ? file : path, &map);
	sg_free(file);
	if (st) return sg_error_wrap(st, "ct2");
	st = sg_ct2_parse(map.data, map.size, map.path, out);
	if (st) {
		sg_mmap_close(&map);
		return st;
	}
	out->map = map;
	return SG_OK;
}

static int ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n >= k && !strcmp(s + n - k, suffix);
}

int sg_ct2_detect(const char *path)
{
	if (is_dir(path)) {
		size_t n = strlen(path);
		char *file = sg_malloc(n + sizeof("/model.bin"));
		if (!file) return 0;
		memcpy(file, path, n);
		memcpy(file + n, "/model.bin", sizeof("/model.bin"));
		struct stat sb;
		int yes = !stat(file, &sb) && S_ISREG(sb.st_mode);
		sg_free(file);
		return yes;
	}
	if (ends_with(path, ".gguf") || ends_with(path, ".safetensors")) return 0;
	/* so that a model.bin cut short is refused by this reader, naming what is missing */
	if (!strcmp(path, "model.bin") || ends_with(path, "/model.bin")) return 1;
	FILE *f = fopen(path, "rb");
	if (!f) return 0;
	uint8_t b[4];
	int yes = fread(b, 1, 4, f) == 4 && b[1] == 0 && b[2] == 0 && b[3] == 0;
	fclose(f);
	return yes;
}
