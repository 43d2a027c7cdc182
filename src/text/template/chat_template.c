/* Chat templates: locate a model's template(s), collect its special tokens, and render a
 * conversation with the variables transformers' apply_chat_template passes (see chat_template.h). */
#include "text/template/chat_template.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/json.h"
#include "base/mmap.h"
#include "formats/gguf.h"
#include "text/template/jinja.h"

#define MAX_TEMPLATE_FILE (16u << 20)
#define MAX_CONFIG_FILE (64u << 20)

struct sg_chat_template {
	size_t n;
	char **names; /* "default" for a single template */
	sg_jinja_template **tpls;
	json_t *special; /* {"bos_token": "<s>", ...} */
};

void sg_chat_template_free(sg_chat_template *ct)
{
	if (!ct) return;
	for (size_t i = 0; i < ct->n; i++) {
		sg_free(ct->names[i]);
		sg_jinja_free(ct->tpls[i]);
	}
	sg_free(ct->names);
	sg_free(ct->tpls);
	json_decref(ct->special);
	sg_free(ct);
}

static sg_chat_template *ct_new(void)
{
	sg_chat_template *ct = sg_calloc(1, sizeof(*ct));
	if (!ct) return NULL;
	ct->special = json_object();
	if (!ct->special) {
		sg_free(ct);
		return NULL;
	}
	return ct;
}

/* Adds a named template, parsing it now so that syntax errors surface at load time. */
static sg_status ct_add(sg_chat_template *ct, const char *name, const char *src, size_t len, const char *origin)
{
	char label[512];
	snprintf(label, sizeof(label), "%s%s%s%s", origin, strcmp(name, "default") ? " (template '" : "",
		 strcmp(name, "default") ? name : "", strcmp(name, "default") ? "')" : "");
	sg_jinja_template *t;
	sg_status st = sg_jinja_parse(src, len, label, &t);
	if (st) return st;
	char **nn = sg_realloc(ct->names, (ct->n + 1) * sizeof(char *));
	if (!nn) {
		sg_jinja_free(t);
		return SG_FAIL(SG_ERR_NOMEM, "out of memory");
	}
	ct->names = nn;
	sg_jinja_template **nt = sg_realloc(ct->tpls, (ct->n + 1) * sizeof(*nt));
	if (!nt) {
		sg_jinja_free(t);
		return SG_FAIL(SG_ERR_NOMEM, "out of memory");
	}
	ct->tpls = nt;
	ct->names[ct->n] = sg_strdup(name);
	if (!ct->names[ct->n]) {
		sg_jinja_free(t);
		return SG_FAIL(SG_ERR_NOMEM, "out of memory");
	}
	ct->tpls[ct->n++] = t;
	return SG_OK;
}

sg_status sg_chat_template_from_source(const char *src, size_t len, const json_t *special_tokens, sg_chat_template **out)
{
	*out = NULL;
	sg_chat_template *ct = ct_new();
	if (!ct) return SG_FAIL(SG_ERR_NOMEM, "out of memory");
	sg_status st = ct_add(ct, "default", src, len, "chat template");
	if (!st && special_tokens) {
		if (!json_is_object(special_tokens)) st = SG_FAIL(SG_ERR_INVALID_ARG, "special tokens must be a JSON object");
		else if (json_object_update(ct->special, (json_t *)special_tokens)) st = SG_FAIL(SG_ERR_NOMEM, "out of memory");
	}
	if (st) {
		sg_chat_template_free(ct);
		return st;
	}
	*out = ct;
	return SG_OK;
}

const json_t *sg_chat_template_special_tokens(const sg_chat_template *ct) { return ct ? ct->special : NULL; }

static int file_exists(const char *path)
{
	struct stat sb;
	return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static sg_status add_file(sg_chat_template *ct, const char *name, const char *path)
{
	char *buf;
	size_t len;
	sg_status st = sg_read_file(path, MAX_TEMPLATE_FILE, &buf, &len);
	if (st) return st;
	st = ct_add(ct, name, buf, len, path);
	sg_free(buf);
	return st;
}

/* A special token in tokenizer_config.json is a string or an AddedToken object {"content": ...}. */
static void take_special(sg_chat_template *ct, const json_t *cfg)
{
	static const char *const keys[] = {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"};
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		json_t *v = json_object_get(cfg, keys[i]);
		if (json_is_object(v)) v = json_object_get(v, "content");
		if (json_is_string(v)) json_object_set_new(ct->special, keys[i], json_stringn(json_string_value(v), json_string_length(v)));
	}
}

static sg_status load_gguf(sg_chat_template *ct, const char *path, const sg_gguf *parsed);

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static sg_status load_folder(sg_chat_template *ct, const char *dir, const sg_gguf *parsed)
{
	char path[4096];
	sg_status st;
	json_t *cfg = NULL;
	snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
	if (file_exists(path)) {
		st = sg_json_load_file(path, MAX_CONFIG_FILE, &cfg);
		if (st) return st;
		if (!json_is_object(cfg)) {
			json_decref(cfg);
			return sg_error(SG_ERR_FORMAT, "%s: expected a JSON object", path);
		}
		take_special(ct, cfg);
	}
	snprintf(path, sizeof(path), "%s/special_tokens_map.json", dir);
	if (file_exists(path)) {
		json_t *m;
		st = sg_json_load_file(path, MAX_CONFIG_FILE, &m);
		if (st) {
			json_decref(cfg);
			return st;
		}
		take_special(ct, m);
		json_decref(m);
	}

	/* standalone template files take priority over the config's entry */
	snprintf(path, sizeof(path), "%s/chat_template.jinja", dir);
	st = SG_OK;
	if (file_exists(path)) st = add_file(ct, "default", path);
	snprintf(path, sizeof(path), "%s/additional_chat_templates", dir);
	DIR *d = st ? NULL : opendir(path);
	if (d) {
		char *names[256];
		size_t k = 0;
		struct dirent *e;
		while ((e = readdir(d)) && k < 256) {
			size_t l = strlen(e->d_name);
			if (l > 6 && !strcmp(e->d_name + l - 6, ".jinja")) names[k++] = sg_strndup(e->d_name, l - 6);
		}
		closedir(d);
		qsort(names, k, sizeof(char *), cmp_str);
		for (size_t i = 0; i < k; i++) {
			if (!st && names[i]) {
				snprintf(path, sizeof(path), "%s/additional_chat_templates/%s.jinja", dir, names[i]);
				st = add_file(ct, names[i], path);
			}
			sg_free(names[i]);
		}
	}
	if (!st && !ct->n && cfg) {
		json_t *t = json_object_get(cfg, "chat_template");
		snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
		if (json_is_string(t)) st = ct_add(ct, "default", json_string_value(t), json_string_length(t), path);
		else if (json_is_array(t)) {
			size_t i;
			json_t *it;
			json_array_foreach(t, i, it) {
				json_t *nm = json_object_get(it, "name"), *src = json_object_get(it, "template");
				if (!json_is_string(nm) || !json_is_string(src)) {
					st = sg_error(SG_ERR_FORMAT, "%s: chat_template[%zu] must be an object with string 'name' and 'template'", path, i);
					break;
				}
				st = ct_add(ct, json_string_value(nm), json_string_value(src), json_string_length(src), path);
				if (st) break;
			}
		} else if (t && !json_is_null(t))
			st = sg_error(SG_ERR_FORMAT, "%s: chat_template must be a string or a list, found %s", path, sg_json_type_name(t));
	}
	json_decref(cfg);
	if (!st && !ct->n) {
		snprintf(path, sizeof(path), "%s/chat_template.json", dir);
		if (file_exists(path)) {
			json_t *j;
			st = sg_json_load_file(path, MAX_CONFIG_FILE, &j);
			if (!st) {
				json_t *t = json_object_get(j, "chat_template");
				if (json_is_string(t)) st = ct_add(ct, "default", json_string_value(t), json_string_length(t), path);
				json_decref(j);
			}
		}
	}
	if (!st && !ct->n) {
		/* a folder holding exactly one .gguf (and no template files) stands for that file */
		DIR *gd = opendir(dir);
		char one[4096] = "";
		int count = 0;
		struct dirent *e;
		while (gd && (e = readdir(gd))) {
			size_t l = strlen(e->d_name);
			if (l > 5 && !strcmp(e->d_name + l - 5, ".gguf") && count++ == 0)
				snprintf(one, sizeof(one), "%s/%s", dir, e->d_name);
		}
		if (gd) closedir(gd);
		if (count == 1) return load_gguf(ct, one, parsed);
	}
	if (!st && !ct->n)
		st = sg_error(SG_ERR_NOT_FOUND, "%s: no chat template (looked for chat_template.jinja, tokenizer_config.json "
						"\"chat_template\" and chat_template.json)", dir);
	return st;
}

/* ---- GGUF: the template(s) and the special tokens' text ---- */

static sg_status add_gguf(sg_chat_template *ct, const sg_gguf *g)
{
	const char *path = g->path ? g->path : "(gguf)";
	sg_status st = SG_OK;
	for (int64_t i = 0; i < g->n_kv && !st; i++) {
		const sg_gguf_kv *kv = &g->kv[i];
		size_t kl = strlen(kv->key);
		if (kl < 23 || memcmp(kv->key, "tokenizer.chat_template", 23) || (kl > 23 && kv->key[23] != '.')) continue;
		if (kv->type != SG_GGUF_STRING) {
			st = sg_error(SG_ERR_FORMAT, "%s: %s must be a string, found %s", path, kv->key, sg_gguf_vtype_name(kv->type));
			break;
		}
		/* the parser's copy stops at an embedded NUL: use what it holds */
		st = ct_add(ct, kl == 23 ? "default" : kv->key + 24, kv->str, strlen(kv->str), path);
	}
	static const char *const id_keys[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
					      "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.seperator_token_id",
					      "tokenizer.ggml.padding_token_id", "tokenizer.ggml.cls_token_id",
					      "tokenizer.ggml.mask_token_id"};
	static const char *const names[] = {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"};
	const sg_gguf_kv *toks = sg_gguf_find(g, "tokenizer.ggml.tokens");
	for (int k = 0; k < 7 && !st && toks && toks->type == SG_GGUF_ARRAY && toks->arr_type == SG_GGUF_STRING; k++) {
		int64_t id;
		if (sg_gguf_get_int(g, id_keys[k], &id) || id < 0 || (uint64_t)id >= toks->arr_n) continue;
		sg_gguf_str_iter it;
		sg_gguf_str_iter_init(toks, &it);
		const char *s = NULL;
		uint64_t l = 0;
		int ok = 1;
		for (int64_t j = 0; j <= id && ok; j++) ok = sg_gguf_str_next(&it, &s, &l);
		if (ok) json_object_set_new(ct->special, names[k], json_stringn(s, (size_t)l));
	}
	if (!st) sg_error_clear(); /* the absent id keys' lookups; an error above keeps its message */
	if (!st && !ct->n) st = sg_error(SG_ERR_NOT_FOUND, "%s: no tokenizer.chat_template in the GGUF metadata", path);
	return st;
}

/* The GGUF file at `path`: from `parsed` when that is this file, else mapped and parsed here. */
static sg_status load_gguf(sg_chat_template *ct, const char *path, const sg_gguf *parsed)
{
	if (parsed && parsed->path && !strcmp(parsed->path, path)) return add_gguf(ct, parsed);
	sg_mapped_file f;
	sg_status st = sg_mmap_open(path, &f);
	if (st) return st;
	sg_gguf g;
	st = sg_gguf_parse(f.data, f.size, path, 0, &g);
	if (!st) {
		st = add_gguf(ct, &g);
		sg_gguf_free(&g);
	}
	sg_mmap_close(&f);
	return st;
}

sg_status sg_chat_template_from_gguf(const sg_gguf *g, sg_chat_template **out)
{
	*out = NULL;
	if (!g) return SG_FAIL(SG_ERR_INVALID_ARG, "gguf is NULL");
	sg_chat_template *ct = ct_new();
	if (!ct) return SG_FAIL(SG_ERR_NOMEM, "out of memory");
	sg_status st = add_gguf(ct, g);
	if (st) {
		sg_chat_template_free(ct);
		return st;
	}
	*out = ct;
	return SG_OK;
}

sg_status sg_chat_template_load(const char *model_path, sg_chat_template **out)
{
	return sg_chat_template_load_with(model_path, NULL, out);
}

sg_status sg_chat_template_load_with(const char *model_path, const sg_gguf *parsed, sg_chat_template **out)
{
	*out = NULL;
	if (!model_path) return SG_FAIL(SG_ERR_INVALID_ARG, "model path is NULL");
	struct stat sb;
	if (stat(model_path, &sb)) return sg_error(SG_ERR_NOT_FOUND, "%s: no such file or folder", model_path);
	sg_chat_template *ct = ct_new();
	if (!ct) return SG_FAIL(SG_ERR_NOMEM, "out of memory");
	sg_status st;
	if (S_ISDIR(sb.st_mode)) st = load_folder(ct, model_path, parsed);
	else {
		size_t l = strlen(model_path);
		if (l > 5 && !strcmp(model_path + l - 5, ".gguf")) st = load_gguf(ct, model_path, parsed);
		else if (l > 6 && !strcmp(model_path + l - 6, ".jinja")) st = add_file(ct, "default", model_path);
		else st = sg_error(SG_ERR_UNSUPPORTED, "%s: expected a model folder, a .gguf file or a .jinja template", model_path);
	}
	if (st) {
		sg_chat_template_free(ct);
		return st;
	}
	*out = ct;
	return SG_OK;
}

/* transformers' message normalisation: drop null-valued keys, then alias reasoning so templates
 * that read `reasoning_content` and those that read `thinking` both see it. */
static json_t *normalize_message(const json_t *m)
{
	json_t *o = json_object();
	if (!o) return NULL;
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)m, k, v) if (!json_is_null(v)) json_object_set(o, k, v);
	json_t *reasoning = NULL;
	static const char *const fields[] = {"reasoning_content", "thinking", "reasoning"};
	for (int i = 0; i < 3 && !reasoning; i++) reasoning = json_object_get(o, fields[i]);
	if (!reasoning) return o;
	/* {"thinking": r, **message, "reasoning_content": r}: thinking first unless the message has it */
	json_t *r = json_object();
	if (!r) {
		json_decref(o);
		return NULL;
	}
	json_t *th = json_object_get(o, "thinking");
	json_object_set(r, "thinking", th ? th : reasoning);
	json_object_foreach(o, k, v) if (strcmp(k, "thinking")) json_object_set(r, k, v);
	json_object_set(r, "reasoning_content", reasoning);
	json_decref(o);
	return r;
}

sg_status sg_chat_template_render(const sg_chat_template *ct, const sg_chat_params *p, char **out, size_t *out_len)
{
	*out = NULL;
	if (out_len) *out_len = 0;
	if (!ct || !p) return SG_FAIL(SG_ERR_INVALID_ARG, "template or params is NULL");
	if (!json_is_array(p->messages)) return SG_FAIL(SG_ERR_INVALID_ARG, "messages must be a JSON array");
	if (!json_array_size(p->messages))
		return sg_error(SG_ERR_INVALID_ARG, "Cannot apply chat template to an empty conversation. Provide at least one message.");
	if (p->tools && !json_is_null(p->tools)) {
		if (!json_is_array(p->tools)) return sg_error(SG_ERR_INVALID_ARG, "tools must be a JSON array of tool schemas");
		for (size_t i = 0; i < json_array_size(p->tools); i++)
			if (!json_is_object(json_array_get(p->tools, i)))
				return sg_error(SG_ERR_INVALID_ARG, "tools[%zu] must be a JSON object (a tool schema)", i);
	}
	if (p->kwargs && !json_is_object(p->kwargs)) return SG_FAIL(SG_ERR_INVALID_ARG, "kwargs must be a JSON object");
	int has_tools = p->tools && !json_is_null(p->tools);

	/* pick the template as transformers' get_chat_template does */
	const sg_jinja_template *t = NULL;
	if (p->template_name) {
		for (size_t i = 0; i < ct->n; i++)
			if (!strcmp(ct->names[i], p->template_name)) t = ct->tpls[i];
		if (!t) return sg_error(SG_ERR_NOT_FOUND, "no chat template named '%s'", p->template_name);
	} else if (ct->n == 1 && !strcmp(ct->names[0], "default")) t = ct->tpls[0];
	else {
		for (size_t i = 0; i < ct->n && has_tools; i++)
			if (!strcmp(ct->names[i], "tool_use")) t = ct->tpls[i];
		for (size_t i = 0; i < ct->n && !t; i++)
			if (!strcmp(ct->names[i], "default")) t = ct->tpls[i];
		if (!t) return sg_error(SG_ERR_NOT_FOUND, "this model has several chat templates and none is named 'default'");
	}

	json_t *vars = json_object(), *msgs = json_array();
	sg_status st = SG_OK;
	if (!vars || !msgs) st = SG_FAIL(SG_ERR_NOMEM, "out of memory");
	for (size_t i = 0; !st && i < json_array_size(p->messages); i++) {
		json_t *m = json_array_get(p->messages, i);
		if (!json_is_object(m)) {
			st = sg_error(SG_ERR_INVALID_ARG, "messages[%zu] must be a JSON object, found %s", i, sg_json_type_name(m));
			break;
		}
		json_t *nm = normalize_message(m);
		if (!nm) st = SG_FAIL(SG_ERR_NOMEM, "out of memory");
		else json_array_append_new(msgs, nm);
	}
	if (!st) {
		json_object_update(vars, ct->special);
		if (p->kwargs) json_object_update(vars, (json_t *)p->kwargs);
		json_object_set(vars, "messages", msgs);
		json_object_set_new(vars, "tools", has_tools ? json_incref((json_t *)p->tools) : json_null());
		json_object_set_new(vars, "documents", json_null());
		json_object_set_new(vars, "add_generation_prompt", json_boolean(p->add_generation_prompt));
		sg_jinja_limits lim = {0};
		lim.now = p->now;
		st = sg_jinja_render(t, vars, &lim, out, out_len);
	}
	json_decref(msgs);
	json_decref(vars);
	return st;
}
