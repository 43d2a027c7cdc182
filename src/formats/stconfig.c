/*
 * sentence-transformers' modules.json and Pooling config.json (see stconfig.h). Both are small
 * JSON files from the model folder, untrusted: every field is type-checked, the Pooling path is
 * kept inside the folder.
 */
#include "formats/stconfig.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/json.h"

#define ST_MAX_BYTES (1u << 20) /* these files are a few hundred bytes */

sg_st_config sg_st_config_default(void)
{
	sg_st_config c = {.mode = SG_POOL_MEAN, .normalize = 0, .from_folder = 0, .dim = 0, .max_seq_length = 0,
			 .include_prompt = 1};
	return c;
}

/* 1 if type names sentence-transformers' module `cls` ("sentence_transformers.models.Pooling",
 * or the bare class name). */
static int is_module(const char *type, const char *cls)
{
	size_t lt = strlen(type), lc = strlen(cls);
	if (lt < lc || strcmp(type + lt - lc, cls)) return 0;
	return lt == lc || type[lt - lc - 1] == '.';
}

/* A relative path inside the folder: not absolute, no ".." component, no backslash. */
static int safe_path(const char *p)
{
	if (p[0] == '/' || strchr(p, '\\')) return 0;
	for (const char *s = p; *s;) {
		size_t n = strcspn(s, "/");
		if (n == 2 && s[0] == '.' && s[1] == '.') return 0;
		s += n;
		if (*s == '/') s++;
	}
	return 1;
}

sg_status sg_st_config_modules(const json_t *modules, sg_st_config *out, char *pool_path, size_t cap)
{
	*out = sg_st_config_default();
	out->from_folder = 1;
	if (cap) pool_path[0] = '\0';
	if (!json_is_array(modules))
		return sg_error(SG_ERR_FORMAT, "modules.json: expected an array of modules, found %s", sg_json_type_name(modules));
	int pooling = 0;
	for (size_t i = 0; i < json_array_size(modules); i++) {
		const json_t *m = json_array_get(modules, i);
		const char *type = NULL, *path = "";
		if (!json_is_object(m))
			return sg_error(SG_ERR_FORMAT, "modules.json: entry %zu is %s, not an object", i, sg_json_type_name(m));
		sg_status st = sg_json_get_str(m, "type", &type);
		if (st == SG_ERR_NOT_FOUND) return sg_error(SG_ERR_FORMAT, "modules.json: entry %zu has no \"type\"", i);
		if (st) return sg_error_wrap(st, "modules.json: entry %zu", i);
		st = sg_json_get_str(m, "path", &path);
		if (st && st != SG_ERR_NOT_FOUND) return sg_error_wrap(st, "modules.json: entry %zu", i);
		if (is_module(type, "Transformer")) continue;
		if (is_module(type, "Normalize")) {
			out->normalize = 1;
			continue;
		}
		if (is_module(type, "LogitScore")) {
			if (pooling || !path[0] || !safe_path(path) || strlen(path) >= SG_ST_PATH_BYTES)
				return sg_error(SG_ERR_FORMAT, "modules.json: entry %zu: LogitScore path '%.200s' is not a folder inside the model%s", i,
						path, pooling ? " (or it follows a Pooling)" : "");
			memcpy(out->logit_score, path, strlen(path) + 1);
			continue;
		}
		if (is_module(type, "Dense")) {
			if (!pooling || out->normalize)
				return sg_error(SG_ERR_UNSUPPORTED, "modules.json: entry %zu: a Dense module %s is not supported (only between the "
								    "Pooling and the Normalize)",
						i, pooling ? "after the Normalize" : "on token states (before the Pooling)");
			if (out->n_dense == SG_ST_MAX_DENSE)
				return sg_error(SG_ERR_UNSUPPORTED, "modules.json: entry %zu: more than %d Dense modules", i, SG_ST_MAX_DENSE);
			if (!path[0] || !safe_path(path) || strlen(path) >= SG_ST_PATH_BYTES)
				return sg_error(SG_ERR_FORMAT, "modules.json: entry %zu: Dense path '%.200s' is not a folder inside the model", i, path);
			memcpy(out->dense[out->n_dense++], path, strlen(path) + 1);
			continue;
		}
		if (is_module(type, "Pooling")) {
			if (pooling++)
				return sg_error(SG_ERR_UNSUPPORTED, "modules.json: entry %zu: a second Pooling module", i);
			if (!path[0] || !safe_path(path))
				return sg_error(SG_ERR_FORMAT, "modules.json: entry %zu: Pooling path '%s' is not a folder inside the model", i, path);
			if (strlen(path) >= cap)
				return sg_error(SG_ERR_FORMAT, "modules.json: entry %zu: Pooling path of %zu bytes (at most %zu)", i,
						strlen(path), cap ? cap - 1 : 0);
			memcpy(pool_path, path, strlen(path) + 1);
			continue;
		}
		return sg_error(SG_ERR_UNSUPPORTED, "modules.json: entry %zu: module '%s' is not supported (Transformer, Pooling, Dense, Normalize, LogitScore are)",
				i, type);
	}
	return SG_OK;
}

static const struct {
	const char *key, *name;
	int mode; /* sg_pool_mode, or -1: not supported */
} modes[] = {
	{"pooling_mode_cls_token", "cls", SG_POOL_CLS},
	{"pooling_mode_mean_tokens", "mean", SG_POOL_MEAN},
	{"pooling_mode_max_tokens", "max", SG_POOL_MAX},
	{"pooling_mode_lasttoken", "lasttoken", SG_POOL_LAST},
	{"pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len_tokens", -1},
	{"pooling_mode_weightedmean_tokens", "weightedmean", -1},
};
#define N_MODES ((int)(sizeof(modes) / sizeof(modes[0])))

sg_status sg_st_config_pooling(const json_t *pooling, sg_st_config *out)
{
	if (!json_is_object(pooling))
		return sg_error(SG_ERR_FORMAT, "pooling config: expected an object, found %s", sg_json_type_name(pooling));
	int64_t dim = 0;
	sg_status st = sg_json_get_int(pooling, "word_embedding_dimension", &dim);
	if (st && st != SG_ERR_NOT_FOUND) return sg_error_wrap(st, "pooling config");
	if (dim < 0 || dim > (1 << 20)) return sg_error(SG_ERR_FORMAT, "pooling config: word_embedding_dimension %lld", (long long)dim);
	out->dim = (int)dim;
	const char *named = NULL;
	st = sg_json_get_str(pooling, "pooling_mode", &named);
	if (st && st != SG_ERR_NOT_FOUND) return sg_error_wrap(st, "pooling config");
	int found = -1, count = 0;
	for (int i = 0; i < N_MODES; i++) {
		int on = 0;
		if (named) on = !strcmp(named, modes[i].name) || (!strcmp(named, "mean_tokens") && modes[i].mode == SG_POOL_MEAN);
		else if ((st = sg_json_get_bool(pooling, modes[i].key, &on)) && st != SG_ERR_NOT_FOUND)
			return sg_error_wrap(st, "pooling config");
		if (!on) continue;
		if (modes[i].mode < 0) return sg_error(SG_ERR_UNSUPPORTED, "pooling config: %s pooling is not supported (cls, mean, max, lasttoken are)", modes[i].name);
		found = modes[i].mode;
		count++;
	}
	if (named && found < 0)
		return sg_error(SG_ERR_UNSUPPORTED, "pooling config: pooling_mode '%s' is not supported (cls, mean, max, lasttoken are)", named);
	if (count == 0) return sg_error(SG_ERR_FORMAT, "pooling config: no pooling mode is set");
	if (count > 1) return sg_error(SG_ERR_UNSUPPORTED, "pooling config: %d pooling modes at once (concatenated) are not supported", count);
	out->mode = (sg_pool_mode)found;
	int inc = 1;
	st = sg_json_get_bool(pooling, "include_prompt", &inc);
	if (st && st != SG_ERR_NOT_FOUND) return sg_error_wrap(st, "pooling config");
	out->include_prompt = st == SG_ERR_NOT_FOUND ? 1 : inc;
	return SG_OK;
}

void sg_st_prompts_free(sg_st_prompts *p)
{
	for (int i = 0; p && i < p->n; i++) {
		sg_free(p->names[i]);
		sg_free(p->texts[i]);
	}
	if (p) {
		sg_free(p->names);
		sg_free(p->texts);
		memset(p, 0, sizeof(*p));
		p->dflt = -1;
	}
}

sg_status sg_st_prompts_parse(const json_t *cfg, sg_st_prompts *out)
{
	memset(out, 0, sizeof(*out));
	out->dflt = -1;
	if (!json_is_object(cfg))
		return sg_error(SG_ERR_FORMAT, "config_sentence_transformers.json: expected an object, found %s", sg_json_type_name(cfg));
	json_t *pr = json_object_get(cfg, "prompts");
	if (pr && !json_is_null(pr) && !json_is_object(pr))
		return sg_error(SG_ERR_FORMAT, "config_sentence_transformers.json: prompts is %s, not an object", sg_json_type_name(pr));
	size_t n = json_is_object(pr) ? json_object_size(pr) : 0;
	if (n > 4096) return sg_error(SG_ERR_FORMAT, "config_sentence_transformers.json: %zu prompts", n);
	if (n) {
		out->names = sg_calloc(n, sizeof(char *));
		out->texts = sg_calloc(n, sizeof(char *));
		if (!out->names || !out->texts) {
			sg_st_prompts_free(out);
			return sg_error(SG_ERR_NOMEM, "config_sentence_transformers.json: %zu prompts", n);
		}
	}
	const char *key;
	json_t *v;
	json_object_foreach(pr, key, v)
	{
		if (!json_is_string(v)) {
			sg_status st = sg_error(SG_ERR_FORMAT, "config_sentence_transformers.json: prompt '%.100s' is %s, not a string", key,
						sg_json_type_name(v));
			sg_st_prompts_free(out);
			return st;
		}
		out->names[out->n] = sg_strdup(key);
		out->texts[out->n] = sg_strdup(json_string_value(v));
		if (!out->names[out->n] || !out->texts[out->n]) {
			out->n++;
			sg_st_prompts_free(out);
			return sg_error(SG_ERR_NOMEM, "config_sentence_transformers.json: prompt '%.100s'", key);
		}
		out->n++;
	}
	json_t *d = json_object_get(cfg, "default_prompt_name");
	if (d && !json_is_null(d)) {
		const char *name = json_string_value(d);
		for (int i = 0; name && i < out->n; i++)
			if (!strcmp(out->names[i], name)) out->dflt = i;
		if (out->dflt < 0) {
			sg_status st = name ? sg_error(SG_ERR_FORMAT, "config_sentence_transformers.json: default_prompt_name '%.100s' names no prompt", name)
					    : sg_error(SG_ERR_FORMAT, "config_sentence_transformers.json: default_prompt_name is %s, not a string",
						       sg_json_type_name(d));
			sg_st_prompts_free(out);
			return st;
		}
	}
	return SG_OK;
}

sg_status sg_st_config_sbert(const json_t *sbert, sg_st_config *out)
{
	if (!json_is_object(sbert))
		return sg_error(SG_ERR_FORMAT, "sentence_bert_config.json: expected an object, found %s", sg_json_type_name(sbert));
	int64_t v = 0;
	sg_status st = sg_json_get_int(sbert, "max_seq_length", &v);
	if (st == SG_ERR_NOT_FOUND || json_is_null(json_object_get(sbert, "max_seq_length"))) return SG_OK;
	if (st) return sg_error_wrap(st, "sentence_bert_config.json");
	if (v < 1 || v > (1 << 24))
		return sg_error(SG_ERR_FORMAT, "sentence_bert_config.json: max_seq_length %lld", (long long)v);
	out->max_seq_length = (int)v;
	return SG_OK;
}

static int exists(const char *path)
{
	struct stat s;
	return stat(path, &s) == 0;
}

sg_status sg_st_prompts_load(const char *dir, sg_st_prompts *out)
{
	memset(out, 0, sizeof(*out));
	out->dflt = -1;
	char path[4096];
	if (snprintf(path, sizeof(path), "%s/config_sentence_transformers.json", dir) >= (int)sizeof(path))
		return sg_error(SG_ERR_INVALID_ARG, "model path of %zu bytes is too long", strlen(dir));
	if (!exists(path)) return SG_OK;
	json_t *j = NULL;
	sg_status st = sg_json_load_file(path, ST_MAX_BYTES, &j);
	if (!st) st = sg_st_prompts_parse(j, out);
	json_decref(j);
	return st ? sg_error_wrap(st, "%s", path) : SG_OK;
}

sg_status sg_st_config_load(const char *dir, sg_st_config *out)
{
	*out = sg_st_config_default();
	char path[4096], pool[1024];
	if (snprintf(path, sizeof(path), "%s/modules.json", dir) >= (int)sizeof(path))
		return sg_error(SG_ERR_INVALID_ARG, "model path of %zu bytes is too long", strlen(dir));
	json_t *j = NULL;
	sg_status st = SG_OK;
	char sb[4096];
	if (snprintf(sb, sizeof(sb), "%s/sentence_bert_config.json", dir) >= (int)sizeof(sb))
		return sg_error(SG_ERR_INVALID_ARG, "model path of %zu bytes is too long", strlen(dir));
	if (exists(sb)) {
		if (!(st = sg_json_load_file(sb, ST_MAX_BYTES, &j))) st = sg_st_config_sbert(j, out);
		json_decref(j);
		j = NULL;
		if (st) return sg_error_wrap(st, "%s", sb);
	}
	if (!exists(path)) return SG_OK;
	int max_len = out->max_seq_length;
	st = sg_json_load_file(path, ST_MAX_BYTES, &j);
	if (!st) st = sg_st_config_modules(j, out, pool, sizeof(pool));
	out->max_seq_length = max_len;
	json_decref(j);
	j = NULL;
	if (!st && pool[0]) {
		if (snprintf(path, sizeof(path), "%s/%s/config.json", dir, pool) >= (int)sizeof(path))
			return sg_error(SG_ERR_INVALID_ARG, "model path of %zu bytes is too long", strlen(dir));
		st = sg_json_load_file(path, ST_MAX_BYTES, &j);
		if (!st) st = sg_st_config_pooling(j, out);
		json_decref(j);
	}
	return st;
}
