/* tokenizer.json (+ tokenizer_config.json) into a tok_spec, and loading by path: a folder, a
 * tokenizer.json file, or a .gguf file. */
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/json.h"
#include "base/mmap.h"
#include "text/tokenizer/tokenizer_int.h"

#define MAX_JSON_BYTES ((size_t)512 << 20)

static const char *token_name(const json_t *v)
{
	if (json_is_string(v)) return json_string_value(v);
	return json_string_value(json_object_get(v, "content"));
}

static int cfg_flag(const json_t *cfg, const char *k)
{
	const json_t *v = json_object_get(cfg, k);
	return json_is_boolean(v) ? json_is_true(v) : -1;
}

static sg_status parse_added(const json_t *arr, added_tok **out, int *n)
{
	*out = NULL;
	*n = 0;
	if (!arr || json_is_null(arr)) return SG_OK;
	if (!json_is_array(arr)) return SG_FAIL(SG_ERR_FORMAT, "tokenizer: added_tokens must be an array");
	size_t k = json_array_size(arr);
	added_tok *v = sg_calloc(k ? k : 1, sizeof(*v));
	if (!v) return SG_FAIL(SG_ERR_NOMEM, "added tokens");
	for (size_t i = 0; i < k; i++) {
		const json_t *e = json_array_get(arr, i), *c = json_object_get(e, "content"), *id = json_object_get(e, "id");
		if (!json_is_string(c) || !json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= SG_TOK_MAX_ID) {
			sg_free(v);
			return SG_FAIL(SG_ERR_FORMAT, "tokenizer: added_tokens[%zu] needs a string content and an id below %d", i, SG_TOK_MAX_ID);
		}
		added_tok *a = &v[i];
		a->id = (int32_t)json_integer_value(id);
		a->content = (sg_str){json_string_value(c), (uint32_t)json_string_length(c)};
		a->special = json_is_true(json_object_get(e, "special"));
		a->lstrip = json_is_true(json_object_get(e, "lstrip"));
		a->rstrip = json_is_true(json_object_get(e, "rstrip"));
		a->single_word = json_is_true(json_object_get(e, "single_word"));
		const json_t *nz = json_object_get(e, "normalized");
		a->normalized = json_is_boolean(nz) ? json_is_true(nz) : !a->special;
	}
	*out = v;
	*n = (int)k;
	return SG_OK;
}

/* Unigram's vocab: [[piece, score], ...] (ids are the positions). */
static sg_status unigram_vocab(const json_t *model, sg_str **vout, double **sout, int32_t *n, int32_t *unk_id)
{
	const json_t *vocab = json_object_get(model, "vocab"), *unk = json_object_get(model, "unk_id");
	if (!json_is_array(vocab) || !json_array_size(vocab) || json_array_size(vocab) >= SG_TOK_MAX_ID)
		return SG_FAIL(SG_ERR_FORMAT, "tokenizer.json: a Unigram model.vocab must be a non-empty array of [piece, score]");
	if (unk && !json_is_null(unk) && (!json_is_integer(unk) || json_integer_value(unk) < 0 ||
					  json_integer_value(unk) >= (json_int_t)json_array_size(vocab)))
		return SG_FAIL(SG_ERR_FORMAT, "tokenizer.json: Unigram unk_id must be null or an index into the %zu pieces",
			       json_array_size(vocab));
	size_t k = json_array_size(vocab);
	sg_str *v = sg_calloc(k + 1, sizeof(sg_str));
	double *sc = sg_calloc(k + 1, sizeof(double));
	if (!v || !sc) {
		sg_free(v);
		sg_free(sc);
		return SG_FAIL(SG_ERR_NOMEM, "vocab");
	}
	for (size_t i = 0; i < k; i++) {
		const json_t *e = json_array_get(vocab, i), *p = json_array_get(e, 0), *x = json_array_get(e, 1);
		if (json_array_size(e) != 2 || !json_is_string(p) || !json_is_number(x) || !isfinite(json_number_value(x))) {
			sg_free(v);
			sg_free(sc);
			return SG_FAIL(SG_ERR_FORMAT, "tokenizer.json: Unigram vocab entry %zu is not [piece, finite score]", i);
		}
		v[i] = (sg_str){json_string_value(p), (uint32_t)json_string_length(p)};
		sc[i] = json_number_value(x);
	}
	*vout = v;
	*sout = sc;
	*n = (int32_t)k;
	*unk_id = json_is_integer(unk) ? (int32_t)json_integer_value(unk) : -1;
	return SG_OK;
}

static int empty_or_null(const json_t *v) { return !v || json_is_null(v) || (json_is_string(v) && !json_string_length(v)); }

sg_status sg_tok_json_spec(const json_t *root, const json_t *cfg, sg_tokenizer **out)
{
	*out = NULL;
	const json_t *model = json_object_get(root, "model");
	if (!json_is_object(model)) return SG_FAIL(SG_ERR_FORMAT, "tokenizer.json: no \"model\" object");
	const char *type = json_string_value(json_object_get(model, "type"));
	tok_spec s = {0};
	if (!type) type = json_object_get(model, "merges") ? "BPE" : "?";
	if (!strcmp(type, "BPE")) s.model = MODEL_BPE;
	else if (!strcmp(type, "WordPiece")) s.model = MODEL_WORDPIECE;
	else if (!strcmp(type, "Unigram")) s.model = MODEL_UNIGRAM;
	else return SG_FAIL(SG_ERR_UNSUPPORTED, "tokenizer.json: model type '%s' is not supported (BPE, WordPiece and Unigram are)", type);
	if (s.model == MODEL_BPE && (!empty_or_null(json_object_get(model, "continuing_subword_prefix")) ||
				     !empty_or_null(json_object_get(model, "end_of_word_suffix"))))
		return SG_FAIL(SG_ERR_UNSUPPORTED, "tokenizer.json: BPE with continuing_subword_prefix/end_of_word_suffix is not supported");
	const json_t *vocab = json_object_get(model, "vocab");
	sg_str *v = NULL;
	double *scores = NULL;
	sg_str *m = NULL;
	added_tok *added = NULL;
	sg_status st = SG_OK;
	if (s.model == MODEL_UNIGRAM) {
		if ((st = unigram_vocab(model, &v, &scores, &s.n_vocab, &s.unk_id))) return st;
		s.vocab = v;
		s.scores = scores;
		goto common;
	}
	if (!json_is_object(vocab)) return SG_FAIL(SG_ERR_FORMAT, "tokenizer.json: model.vocab must be an object");
	int64_t max_id = -1;
	const char *key;
	const json_t *val;
	json_object_foreach((json_t *)vocab, key, val)
	{
		if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) >= SG_TOK_MAX_ID)
			return SG_FAIL(SG_ERR_FORMAT, "tokenizer.json: vocab entry '%s' has no valid id (0..%d)", key, SG_TOK_MAX_ID - 1);
		if (json_integer_value(val) > max_id) max_id = json_integer_value(val);
	}
	v = sg_calloc((size_t)(max_id + 2), sizeof(sg_str));
	if (!v) return SG_FAIL(SG_ERR_NOMEM, "vocab");
	size_t key_len;
	json_object_keylen_foreach((json_t *)vocab, key, key_len, val)
	{
		v[json_integer_value(val)] = (sg_str){key, (uint32_t)key_len}; /* a key may hold a NUL */
	}
	s.vocab = v;
	s.n_vocab = (int32_t)(max_id + 1);
	const json_t *merges = json_object_get(model, "merges");
	if (s.model == MODEL_BPE && json_is_array(merges)) {
		size_t k = json_array_size(merges);
		m = sg_calloc(2 * (k ? k : 1), sizeof(sg_str));
		if (!m) {
			st = SG_FAIL(SG_ERR_NOMEM, "merges");
			goto done;
		}
		for (size_t i = 0; i < k; i++) {
			const json_t *e = json_array_get(merges, i);
			if (json_is_string(e)) {
				const char *str = json_string_value(e), *sp = strchr(str, ' ');
				if (!sp || strchr(sp + 1, ' ')) {
					st = SG_FAIL(SG_ERR_FORMAT, "tokenizer.json: merge %zu ('%s') is not two tokens", i, str);
					goto done;
				}
				m[2 * i] = (sg_str){str, (uint32_t)(sp - str)};
				m[2 * i + 1] = (sg_str){sp + 1, (uint32_t)strlen(sp + 1)};
			} else if (json_is_string(json_array_get(e, 0)) && json_is_string(json_array_get(e, 1)) && json_array_size(e) == 2) {
				m[2 * i] = (sg_str){json_string_value(json_array_get(e, 0)), (uint32_t)json_string_length(json_array_get(e, 0))};
				m[2 * i + 1] = (sg_str){json_string_value(json_array_get(e, 1)), (uint32_t)json_string_length(json_array_get(e, 1))};
			} else {
				st = SG_FAIL(SG_ERR_FORMAT, "tokenizer.json: merge %zu is neither \"a b\" nor [a, b]", i);
				goto done;
			}
		}
		s.merges = m;
		s.n_merges = (int32_t)k;
	}
common:
	s.unk = json_string_value(json_object_get(model, "unk_token"));
	s.byte_fallback = json_is_true(json_object_get(model, "byte_fallback"));
	s.fuse_unk = json_is_true(json_object_get(model, "fuse_unk"));
	s.ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
	s.wp_prefix = json_string_value(json_object_get(model, "continuing_subword_prefix"));
	s.wp_max_chars = (int)json_integer_value(json_object_get(model, "max_input_chars_per_word"));
	s.normalizer = json_object_get(root, "normalizer");
	s.pre_tokenizer = json_object_get(root, "pre_tokenizer");
	s.post_processor = json_object_get(root, "post_processor");
	s.decoder = json_object_get(root, "decoder");
	if ((st = parse_added(json_object_get(root, "added_tokens"), &added, &s.n_added))) goto done;
	s.added = added;
	s.add_bos = cfg_flag(cfg, "add_bos_token");
	s.add_eos = cfg_flag(cfg, "add_eos_token");
	s.bos = token_name(json_object_get(cfg, "bos_token"));
	s.eos = token_name(json_object_get(cfg, "eos_token"));
	st = sg_tok_build(&s, out);
done:
	sg_free(v);
	sg_free(scores);
	sg_free(m);
	sg_free(added);
	return st;
}

sg_status sg_tokenizer_from_json(const char *json, size_t len, const char *config, size_t config_len, sg_tokenizer **out)
{
	*out = NULL;
	json_t *root = NULL, *cfg = NULL;
	sg_status st = sg_json_parse_config(json, len, "tokenizer.json", &root);
	if (st) return st;
	if (config && (st = sg_json_parse_config(config, config_len, "tokenizer_config.json", &cfg))) {
		json_decref(root);
		return st;
	}
	st = sg_tok_json_spec(root, cfg, out);
	json_decref(root);
	json_decref(cfg);
	return st;
}

static int ends_with(const char *s, const char *suf)
{
	size_t n = strlen(s), k = strlen(suf);
	return n >= k && !strcmp(s + n - k, suf);
}

sg_status sg_tokenizer_load(const char *path, sg_tokenizer **out) { return sg_tokenizer_load_with(path, NULL, out); }

sg_status sg_tokenizer_load_with(const char *path, const sg_gguf *parsed, sg_tokenizer **out)
{
	*out = NULL;
	struct stat sb;
	if (!path || stat(path, &sb)) return SG_FAIL(SG_ERR_NOT_FOUND, "tokenizer: '%s' does not exist", path ? path : "(null)");
	if (!S_ISDIR(sb.st_mode) && ends_with(path, ".gguf")) return sg_tokenizer_load_gguf(path, parsed, out);
	char *tj = NULL, *tc = NULL, *json = NULL, *cfg = NULL;
	size_t jn = 0, cn = 0;
	sg_status st;
	size_t pl = strlen(path);
	if (S_ISDIR(sb.st_mode)) {
		tj = sg_malloc(pl + 32);
		tc = sg_malloc(pl + 32);
		if (!tj || !tc) {
			st = SG_FAIL(SG_ERR_NOMEM, "path");
			goto done;
		}
		snprintf(tj, pl + 32, "%s/tokenizer.json", path);
		snprintf(tc, pl + 32, "%s/tokenizer_config.json", path);
	} else {
		tj = sg_strdup(path);
		const char *slash = strrchr(path, '/');
		size_t dl = slash ? (size_t)(slash - path + 1) : 0;
		tc = sg_malloc(dl + 32);
		if (!tj || !tc) {
			st = SG_FAIL(SG_ERR_NOMEM, "path");
			goto done;
		}
		memcpy(tc, path, dl);
		snprintf(tc + dl, 32, "tokenizer_config.json");
	}
	if ((st = sg_read_file(tj, MAX_JSON_BYTES, &json, &jn))) {
		sg_error_wrap(st, "tokenizer: cannot read %s", tj);
		goto done;
	}
	if (stat(tc, &sb) == 0 && (st = sg_read_file(tc, MAX_JSON_BYTES, &cfg, &cn))) goto done;
	st = sg_tokenizer_from_json(json, jn, cfg, cn, out);
	if (st) sg_error_wrap(st, "%s", tj);
done:
	sg_free(tj);
	sg_free(tc);
	sg_free(json);
	sg_free(cfg);
	return st;
}
