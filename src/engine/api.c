/* The public text-generation calls (saragossa.h, "text generation"): an sg_llm is the engine's
 * binding (engine/lm.h) behind a handle of the public header, and sg_llm_generate runs the
 * engine's generation loop (engine/generate.h) on it, the loop the CLI and the server use.
 *
 * The handle wraps the binding instead of exporting it so that the public ABI does not move
 * when the engine's binding does, and so that every entry point checks its arguments: a NULL
 * pointer or an id out of range is a status and a message naming the function, never a crash.
 */
#include <jansson.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "engine/generate.h"
#include "engine/lm.h"
#include "saragossa.h"

struct sg_llm {
	sg_lm *lm;
};

sg_llm_params sg_llm_default_params(void)
{
	return (sg_llm_params){0};
}

sg_status sg_llm_load(const char *path, const sg_llm_params *params, sg_llm **out)
{
	if (!out) return SG_FAIL(SG_ERR_INVALID_ARG, "out is NULL");
	*out = NULL;
	if (!path || !path[0]) return SG_FAIL(SG_ERR_INVALID_ARG, "path is %s", path ? "empty" : "NULL");
	sg_llm_params p = params ? *params : sg_llm_default_params();
	if (p.n_ctx < 0) return SG_FAIL(SG_ERR_INVALID_ARG, "n_ctx = %d must be >= 0", p.n_ctx);
	if (p.n_threads < 0) return SG_FAIL(SG_ERR_INVALID_ARG, "n_threads = %d must be >= 0", p.n_threads);
	sg_llm *llm = sg_calloc(1, sizeof *llm);
	if (!llm) return SG_FAIL(SG_ERR_NOMEM, "model handle");
	sg_lm_params lp = sg_lm_default_params();
	lp.n_ctx = p.n_ctx;
	lp.n_threads = p.n_threads;
	lp.backend = p.backend;
	lp.expert_cache = p.expert_cache;
	sg_status s = sg_lm_load(path, &lp, &llm->lm);
	if (s) {
		sg_free(llm);
		return s;
	}
	*out = llm;
	return SG_OK;
}

void sg_llm_free(sg_llm *llm)
{
	if (!llm) return;
	sg_lm_free(llm->lm);
	sg_free(llm);
}

sg_model *sg_llm_model(const sg_llm *llm)
{
	return llm ? sg_lm_model(llm->lm) : NULL;
}

int sg_llm_n_ctx(const sg_llm *llm)
{
	return llm ? sg_lm_n_ctx(llm->lm) : 0;
}

int sg_llm_n_vocab(const sg_llm *llm)
{
	return llm ? sg_lm_n_vocab(llm->lm) : 0;
}

const int32_t *sg_llm_eos(const sg_llm *llm, size_t *n)
{
	if (!n) return NULL;
	*n = 0;
	return llm ? sg_lm_eos(llm->lm, n) : NULL;
}

int sg_llm_has_chat_template(const sg_llm *llm)
{
	return llm ? sg_lm_has_template(llm->lm) : 0;
}

/* SG_OK when id is in the model's vocabulary, else SG_ERR_RANGE naming fn, the id and the range. */
static sg_status check_id(const sg_llm *llm, const char *fn, const char *what, size_t i, int32_t id)
{
	int32_t nv = sg_lm_n_vocab(llm->lm);
	if (id >= 0 && id < nv) return SG_OK;
	return sg_error(SG_ERR_RANGE, "%s: %s %zu is id %d, outside the vocabulary [0, %d)", fn, what, i, id, nv);
}

sg_status sg_llm_tokenize(const sg_llm *llm, const char *text, size_t len, int add_special, int32_t **ids, size_t *n)
{
	if (!ids || !n) return SG_FAIL(SG_ERR_INVALID_ARG, "ids and n are required");
	*ids = NULL;
	*n = 0;
	if (!llm) return SG_FAIL(SG_ERR_INVALID_ARG, "llm is NULL");
	if (!text && len) return SG_FAIL(SG_ERR_INVALID_ARG, "text is NULL with len %zu", len);
	return sg_lm_tokenize(llm->lm, text ? text : "", len, add_special != 0, ids, n);
}

sg_status sg_llm_detokenize(const sg_llm *llm, const int32_t *ids, size_t n, char **text, size_t *len)
{
	if (!text || !len) return SG_FAIL(SG_ERR_INVALID_ARG, "text and len are required");
	*text = NULL;
	*len = 0;
	if (!llm) return SG_FAIL(SG_ERR_INVALID_ARG, "llm is NULL");
	if (!ids && n) return SG_FAIL(SG_ERR_INVALID_ARG, "ids is NULL with n %zu", n);
	for (size_t i = 0; i < n; i++) {
		sg_status s = check_id(llm, __func__, "token", i, ids[i]);
		if (s) return s;
	}
	return sg_lm_detokenize(llm->lm, ids, n, text, len);
}

sg_status sg_llm_token_text(const sg_llm *llm, int32_t id, char **text, size_t *len)
{
	if (!text || !len) return SG_FAIL(SG_ERR_INVALID_ARG, "text and len are required");
	*text = NULL;
	*len = 0;
	if (!llm) return SG_FAIL(SG_ERR_INVALID_ARG, "llm is NULL");
	sg_status s = check_id(llm, __func__, "token", 0, id);
	return s ? s : sg_lm_token_bytes(llm->lm, id, text, len);
}

sg_status sg_llm_chat_prompt(const sg_llm *llm, const sg_message *messages, size_t n, int add_generation_prompt,
			     char **prompt, size_t *len)
{
	if (!prompt || !len) return SG_FAIL(SG_ERR_INVALID_ARG, "prompt and len are required");
	*prompt = NULL;
	*len = 0;
	if (!llm) return SG_FAIL(SG_ERR_INVALID_ARG, "llm is NULL");
	if (!messages || !n) return SG_FAIL(SG_ERR_INVALID_ARG, "no messages (a conversation needs at least one)");
	json_t *arr = json_array();
	if (!arr) return SG_FAIL(SG_ERR_NOMEM, "%zu messages", n);
	sg_status s = SG_OK;
	for (size_t i = 0; i < n && !s; i++) {
		const sg_message *m = &messages[i];
		if (!m->role || !m->content) {
			s = SG_FAIL(SG_ERR_INVALID_ARG, "messages[%zu] has no %s", i, m->role ? "content" : "role");
			break;
		}
		/* "s" refuses text that is not UTF-8: the template would render it as is */
		json_t *o = json_pack("{s:s, s:s}", "role", m->role, "content", m->content);
		if (!o || json_array_append_new(arr, o))
			s = SG_FAIL(SG_ERR_INVALID_ARG, "messages[%zu]: role and content must be UTF-8 text", i);
	}
	if (!s) {
		sg_chat_params cp = {.messages = arr, .add_generation_prompt = add_generation_prompt != 0};
		s = sg_lm_chat_render(llm->lm, &cp, prompt, len);
	}
	json_decref(arr);
	return s;
}

sg_llm_gen_params sg_llm_gen_default_params(void)
{
	sg_llm_gen_params p;
	memset(&p, 0, sizeof p);
	p.sampler = sg_sampler_default_params();
	p.max_tokens = 256;
	return p;
}

const char *sg_llm_finish_str(sg_llm_finish f)
{
	switch (f) {
	case SG_LLM_FINISH_STOP: return "stop";
	case SG_LLM_FINISH_LENGTH: return "length";
	case SG_LLM_FINISH_CANCELLED: return "cancelled";
	case SG_LLM_FINISH_NONE: break;
	}
	return "none";
}

typedef struct stream {
	sg_token_fn fn;
	void *user;
} stream;

/* The loop's events as the public callback sees them: a token's event with its id, text released
 * at the end with -1 (empty pieces of the tail are dropped, the final event always comes). */
static int on_event(const sg_gen_event *ev, void *user)
{
	stream *st = user;
	if (!ev->has_token && !ev->is_final && !ev->len) return 0;
	return st->fn(ev->has_token ? ev->token : -1, ev->len ? ev->text : "", ev->len, st->user);
}

static sg_llm_finish public_finish(sg_gen_finish f)
{
	switch (f) {
	case SG_GEN_STOP: return SG_LLM_FINISH_STOP;
	case SG_GEN_LENGTH: return SG_LLM_FINISH_LENGTH;
	case SG_GEN_CANCELLED: return SG_LLM_FINISH_CANCELLED;
	case SG_GEN_NONE: break;
	}
	return SG_LLM_FINISH_NONE;
}

sg_status sg_llm_generate(sg_llm *llm, const int32_t *prompt, size_t n_prompt, const sg_llm_gen_params *params,
			  sg_llm_gen_result *result)
{
	if (result) {
		memset(result, 0, sizeof *result);
		result->stop_index = -1;
	}
	if (!llm || !params) return SG_FAIL(SG_ERR_INVALID_ARG, "%s is NULL", !llm ? "llm" : "params");
	if (!prompt || !n_prompt) return SG_FAIL(SG_ERR_INVALID_ARG, "the prompt is empty");
	if (params->max_tokens <= 0)
		return SG_FAIL(SG_ERR_INVALID_ARG, "max_tokens = %d must be > 0", params->max_tokens);
	if (params->n_stop && !params->stop)
		return SG_FAIL(SG_ERR_INVALID_ARG, "stop is NULL with n_stop %zu", params->n_stop);
	for (size_t i = 0; i < params->n_stop; i++)
		if (!params->stop[i]) return SG_FAIL(SG_ERR_INVALID_ARG, "stop[%zu] is NULL", i);
	/* Checked here as well as in the loop so that the message names this function. */
	for (size_t i = 0; i < n_prompt; i++) {
		sg_status s = check_id(llm, __func__, "prompt token", i, prompt[i]);
		if (s) return s;
	}
	stream st = {.fn = params->on_token, .user = params->user};
	sg_gen_params gp = sg_gen_default_params();
	gp.prompt = prompt;
	gp.n_prompt = n_prompt;
	gp.sampler = params->sampler;
	gp.eos_ids = sg_lm_eos(llm->lm, &gp.n_eos);
	gp.stop = params->stop;
	gp.n_stop = params->n_stop;
	gp.max_tokens = params->max_tokens;
	gp.on_event = params->on_token ? on_event : NULL;
	gp.user = &st;
	sg_gen_result r;
	sg_status s = sg_generate(sg_lm_state(llm->lm), sg_lm_detok(llm->lm), &gp, &r);
	if (result) {
		result->finish = public_finish(r.finish);
		result->stop_index = r.stop_index;
		result->n_prompt = r.n_prompt;
		result->n_cached = r.n_cached;
		result->n_generated = r.n_generated;
		result->prefill_s = r.prefill_s;
		result->ttft_s = r.ttft_s;
		result->decode_s = r.decode_s;
		result->seed = r.seed;
	}
	return s;
}

sg_status sg_llm_reset(sg_llm *llm)
{
	if (!llm) return SG_FAIL(SG_ERR_INVALID_ARG, "llm is NULL");
	return sg_gen_state_reset(sg_lm_state(llm->lm));
}
