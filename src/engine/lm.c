/* A language model bound to the generation loop (see lm.h). */
#include "engine/lm.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/flags.h"
#include "base/json.h"
#include "base/progress.h"
#include "base/sysinfo.h"
#include "engine/session.h"
#include "models/model.h"
#include "text/template/chat_template.h"
#include "text/tokenizer/tokenizer.h"

#define MAX_EOS 16

struct sg_lm {
	sg_model *model;
	sg_session *session;
	sg_tokenizer *tok;
	sg_chat_template *tmpl; /* NULL: no template */
	sg_detok *detok;
	int32_t n_ctx, n_vocab;
	int32_t eos[MAX_EOS];
	size_t n_eos;
	sg_gen_model ops;
	sg_gen_detok dt_ops;
	sg_gen_state state;
};

sg_lm_params sg_lm_default_params(void)
{
	return (sg_lm_params){0};
}

sg_model *sg_lm_model(const sg_lm *lm)
{
	return lm->model;
}

sg_session *sg_lm_session(const sg_lm *lm)
{
	return lm->session;
}

const sg_tokenizer *sg_lm_tokenizer(const sg_lm *lm)
{
	return lm->tok;
}

int32_t sg_lm_n_ctx(const sg_lm *lm)
{
	return lm->n_ctx;
}

int32_t sg_lm_n_vocab(const sg_lm *lm)
{
	return lm->n_vocab;
}

int sg_lm_has_template(const sg_lm *lm)
{
	return lm->tmpl != NULL;
}

const int32_t *sg_lm_eos(const sg_lm *lm, size_t *n)
{
	*n = lm->n_eos;
	return lm->eos;
}

sg_gen_state *sg_lm_state(sg_lm *lm)
{
	return &lm->state;
}

const sg_gen_detok *sg_lm_detok(sg_lm *lm)
{
	return &lm->dt_ops;
}

static int ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n >= k && !strcmp(s + n - k, suffix);
}

uint64_t sg_lm_weight_file_bytes(const char *path)
{
	struct stat st;
	if (stat(path, &st)) return 0;
	if (!S_ISDIR(st.st_mode)) return (uint64_t)st.st_size;
	/* A folder: the weights are its safetensors files (shards included), or the one .gguf a
	 * folder may stand for. */
	DIR *d = opendir(path);
	if (!d) return 0;
	uint64_t total = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!ends_with(e->d_name, ".safetensors") && !ends_with(e->d_name, ".gguf")) continue;
		char p[4200];
		snprintf(p, sizeof p, "%s/%s", path, e->d_name);
		if (!stat(p, &st) && S_ISREG(st.st_mode)) total += (uint64_t)st.st_size;
	}
	closedir(d);
	return total;
}

sg_status sg_lm_check_memory(const char *path)
{
	int64_t limit = sg_flag_int("SARAGOSSA_MEM_LIMIT");
	if (limit < 0) return SG_OK;
	uint64_t avail = limit > 0 ? (uint64_t)limit : sg_mem_available();
	uint64_t need = sg_lm_weight_file_bytes(path);
	if (!avail || need <= avail) return SG_OK;
	char n[32], a[32];
	sg_format_bytes(need, n, sizeof n);
	sg_format_bytes(avail, a, sizeof a);
	return sg_error(SG_ERR_NOMEM,
			"not enough memory for %s: its weights need %s, %s %s (free memory or pick a smaller "
			"quantization; SARAGOSSA_MEM_LIMIT=-1 loads anyway)",
			path, n, a, limit > 0 ? "allowed by SARAGOSSA_MEM_LIMIT" : "available");
}

/* One token, only its argmax back (the session's greedy step: on a GPU, one recorded graph and a
 * 4-byte read instead of the logits) */
static sg_status op_eval_greedy(void *self, int32_t token, size_t n_past, int32_t *next)
{
	sg_lm *lm = self;
	if ((size_t)sg_session_position(lm->session) != n_past)
		return sg_error(SG_ERR_INTERNAL, "lm: session at %d, the loop expects %zu", sg_session_position(lm->session),
				n_past);
	return sg_session_decode_greedy(lm->session, token, next);
}

/* One token, only its sampling candidates back (sg_session_decode_top). */
static sg_status op_eval_top(void *self, int32_t token, size_t n_past, int32_t k, const int32_t *ids, int32_t m,
			     int32_t *top_ids, float *top_v, float *v)
{
	sg_lm *lm = self;
	if ((size_t)sg_session_position(lm->session) != n_past)
		return sg_error(SG_ERR_INTERNAL, "lm: session at %d, the loop expects %zu", sg_session_position(lm->session),
				n_past);
	return sg_session_decode_top(lm->session, token, k, ids, m, top_ids, top_v, v);
}

static sg_status op_eval(void *self, const int32_t *t, size_t n, size_t n_past, float *logits)
{
	sg_lm *lm = self;
	if ((size_t)sg_session_position(lm->session) != n_past)
		return sg_error(SG_ERR_INTERNAL, "lm: session at %d, the loop expects %zu", sg_session_position(lm->session),
				n_past);
	sg_status s = sg_session_eval(lm->session, t, (int)n, NULL);
	if (s) return s;
	const float *l = sg_session_logits(lm->session);
	if (!l) return sg_error(SG_ERR_INTERNAL, "lm: no logits after eval");
	memcpy(logits, l, (size_t)lm->n_vocab * sizeof *logits);
	return SG_OK;
}

/* Rolls the session back to its first keep tokens (sg_session_truncate says when it cannot). */
static sg_status op_truncate(void *self, size_t keep)
{
	sg_lm *lm = self;
	if (keep > (size_t)INT32_MAX) return sg_error(SG_ERR_INVALID_ARG, "truncate to %zu", keep);
	return sg_session_truncate(lm->session, (int)keep);
}

static sg_status op_reset(void *self)
{
	sg_lm *lm = self;
	sg_session_reset(lm->session);
	return SG_OK;
}

static sg_status dt_push(void *self, int32_t tok, const char **piece, size_t *len)
{
	return sg_detok_push(((sg_lm *)self)->detok, tok, piece, len);
}

static sg_status dt_flush(void *self, const char **piece, size_t *len)
{
	return sg_detok_flush(((sg_lm *)self)->detok, piece, len);
}

static void dt_reset(void *self)
{
	sg_lm *lm = self;
	/* A fresh stream per generation: nothing of the last answer is held back. */
	sg_detok *d = NULL;
	if (sg_detok_create(lm->tok, 1, &d) == SG_OK) {
		sg_detok_free(lm->detok);
		lm->detok = d;
	}
}

static void add_eos(int32_t *eos, size_t *n, size_t cap, int32_t n_vocab, int32_t id)
{
	if (id < 0 || id >= n_vocab || *n >= cap) return;
	for (size_t i = 0; i < *n; i++)
		if (eos[i] == id) return;
	eos[(*n)++] = id;
}

size_t sg_lm_find_eos(const sg_tokenizer *tok, int32_t n_vocab, const char *path, int32_t *eos, size_t cap)
{
	size_t n = 0;
	add_eos(eos, &n, cap, n_vocab, sg_tokenizer_eos(tok));
	static const char *eot[] = {"<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<|endoftext|>", "<|eom_id|>",
				    "</s>", "<turn|>", "<|return|>"};
	for (size_t i = 0; i < sizeof eot / sizeof *eot; i++)
		add_eos(eos, &n, cap, n_vocab, sg_tokenizer_token_id(tok, eot[i], strlen(eot[i])));
	char p[4200];
	snprintf(p, sizeof p, "%s/generation_config.json", path);
	json_t *g;
	if (sg_json_load_file(p, 1 << 20, &g) == SG_OK) {
		json_t *e = json_object_get(g, "eos_token_id");
		if (json_is_integer(e)) add_eos(eos, &n, cap, n_vocab, (int32_t)json_integer_value(e));
		size_t i;
		json_t *v;
		if (json_is_array(e))
			json_array_foreach(e, i, v) if (json_is_integer(v)) add_eos(eos, &n, cap, n_vocab, (int32_t)json_integer_value(v));
		json_decref(g);
	}
	return n;
}

/* Gemma's turn format, for Gemma files that carry no template (the GGUF conversions of the
 * base models often do not): a system message is folded into the first user turn. Templates
 * render with trim_blocks (as transformers does), which eats a newline right after a block tag:
 * the one after the role is written as an expression. */
static const char GEMMA_TEMPLATE[] =
	"{{ bos_token }}"
	"{% if messages[0]['role'] == 'system' %}{% set first = messages[0]['content'] + '\n\n' %}"
	"{% set rest = messages[1:] %}{% else %}{% set first = '' %}{% set rest = messages %}{% endif %}"
	"{% for m in rest %}<start_of_turn>{% if m['role'] == 'assistant' %}model{% else %}user{% endif %}{{ '\\n' }}"
	"{% if loop.first %}{{ first }}{% endif %}{{ m['content'] | trim }}<end_of_turn>\n{% endfor %}"
	"{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}";

/* A model without a chat template of its own: Gemma files get Gemma's turn format; others have
 * none (raw completions still work). */
sg_status sg_lm_fallback_template(const sg_model *model, const sg_tokenizer *tok, sg_chat_template **out)
{
	*out = NULL;
	if (strncmp(sg_model_arch(model), "gemma", 5) != 0 || sg_tokenizer_token_id(tok, "<start_of_turn>", 15) < 0)
		return SG_OK;
	size_t n = 0;
	const char *bos = sg_tokenizer_token(tok, sg_tokenizer_bos(tok), &n);
	json_t *special = json_pack("{s:s%}", "bos_token", bos ? bos : "", bos ? n : 0);
	sg_status s = sg_chat_template_from_source(GEMMA_TEMPLATE, sizeof GEMMA_TEMPLATE - 1, special, out);
	json_decref(special);
	return s;
}

sg_status sg_lm_load(const char *path, const sg_lm_params *p, sg_lm **out)
{
	static const sg_lm_params defaults = {0};
	if (!p) p = &defaults;
	*out = NULL;
	sg_status s = p->no_memory_check ? SG_OK : sg_lm_check_memory(path);
	if (s) return s;
	sg_lm *lm = sg_calloc(1, sizeof *lm);
	if (!lm) return SG_FAIL(SG_ERR_NOMEM, "model state");
	sg_model_params mp = sg_model_default_params();
	mp.n_threads = p->n_threads;
	if (p->backend) mp.backend = p->backend;
	if ((s = sg_model_load(path, &mp, &lm->model))) goto fail;
	sg_session_params sp = sg_session_default_params();
	sp.n_ctx = p->n_ctx;
	if ((s = sg_session_new(lm->model, &sp, &lm->session))) goto fail;
	/* a GGUF file is parsed once: the vocabulary and template read the weights' parse */
	const sg_gguf *gguf = sg_model_gguf(lm->model);
	if ((s = sg_tokenizer_load_with(path, gguf, &lm->tok))) {
		sg_error_wrap(s, "tokenizer");
		goto fail;
	}
	s = sg_chat_template_load_with(path, gguf, &lm->tmpl);
	if (s == SG_ERR_NOT_FOUND) s = sg_lm_fallback_template(lm->model, lm->tok, &lm->tmpl);
	if (s) goto fail;
	if ((s = sg_detok_create(lm->tok, 1, &lm->detok))) goto fail;
	lm->n_ctx = sg_session_n_ctx(lm->session);
	lm->n_vocab = sg_model_n_vocab(lm->model);
	lm->n_eos = sg_lm_find_eos(lm->tok, lm->n_vocab, path, lm->eos, MAX_EOS);
	lm->ops = (sg_gen_model){.self = lm, .n_vocab = lm->n_vocab, .n_ctx = lm->n_ctx, .eval = op_eval,
				 .truncate = op_truncate, .reset = op_reset, .eval_greedy = op_eval_greedy,
				 .eval_top = op_eval_top, .top_max = sg_session_top_max(lm->session)};
	lm->dt_ops = (sg_gen_detok){.self = lm, .push = dt_push, .flush = dt_flush, .reset = dt_reset};
	sg_gen_state_init(&lm->state, &lm->ops);
	*out = lm;
	return SG_OK;
fail:
	sg_lm_free(lm);
	return s;
}

void sg_lm_free(sg_lm *lm)
{
	if (!lm) return;
	sg_gen_state_free(&lm->state);
	sg_detok_free(lm->detok);
	sg_chat_template_free(lm->tmpl);
	sg_tokenizer_free(lm->tok);
	sg_session_free(lm->session);
	sg_model_free(lm->model);
	sg_free(lm);
}

sg_status sg_lm_chat_prompt(const sg_lm *lm, const json_t *messages, const json_t *tools, char **out, size_t *len)
{
	if (!lm->tmpl) return sg_error(SG_ERR_NOT_FOUND, "the model has no chat template");
	sg_chat_params p = {.messages = messages, .tools = tools, .add_generation_prompt = 1};
	return sg_chat_template_render(lm->tmpl, &p, out, len);
}

sg_status sg_lm_chat_render(const sg_lm *lm, const sg_chat_params *p, char **out, size_t *len)
{
	if (!lm->tmpl) return sg_error(SG_ERR_NOT_FOUND, "the model has no chat template");
	return sg_chat_template_render(lm->tmpl, p, out, len);
}

sg_status sg_lm_tokenize(const sg_lm *lm, const char *text, size_t len, int add_special, int32_t **ids, size_t *n)
{
	sg_tokens t = {0};
	sg_status s = sg_tokenizer_encode(lm->tok, text, len, add_special, &t);
	if (s) {
		sg_tokens_free(&t);
		return s;
	}
	*ids = t.ids;
	*n = t.n;
	return SG_OK;
}

sg_status sg_lm_detokenize(const sg_lm *lm, const int32_t *ids, size_t n, char **out, size_t *len)
{
	for (size_t i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= lm->n_vocab)
			return sg_error(SG_ERR_RANGE, "token %zu is id %d, outside the vocabulary [0, %d)", i, ids[i], lm->n_vocab);
	return sg_tokenizer_decode(lm->tok, ids, n, 0, out, len);
}

sg_status sg_lm_token_bytes(const sg_lm *lm, int32_t id, char **out, size_t *len)
{
	return sg_tokenizer_decode(lm->tok, &id, 1, 0, out, len);
}
