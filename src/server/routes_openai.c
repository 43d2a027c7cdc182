/* The OpenAI routes (see routes_openai.h). */
#include "server/routes_openai.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/utf8.h"
#include "server/agent.h"
#include "server/response.h"
#include "server/routes_chat_voice.h"

#define BAD "invalid_request_error"

#define TRY(x)                                                                                     \
	do {                                                                                       \
		if ((x) < 0) return err->status;                                                   \
	} while (0)

/* ---- the request ---- */

/* OpenAI logit_bias: {"token id": bias in [-100, 100]}. */
static int parse_logit_bias(const json_t *v, sg_srv_req *r, sg_srv_err *err)
{
	if (!v || json_is_null(v)) return 0;
	if (!json_is_object(v)) return sg_srv_wrong_type(err, "logit_bias", "an object", v);
	size_t n = json_object_size(v);
	if (n > 1024) return -sg_srv_err_set(err, 400, BAD, "logit_bias", "'logit_bias' has %zu entries; at most 1024", n);
	if (!n) return 0;
	r->bias = sg_calloc(n, sizeof *r->bias);
	if (!r->bias) return -sg_srv_oom(err);
	const char *k;
	json_t *b;
	size_t i = 0;
	json_object_foreach((json_t *)v, k, b) {
		char *end;
		long long id = strtoll(k, &end, 10);
		if (!*k || *end || id < 0 || id > INT32_MAX)
			return -sg_srv_err_set(err, 400, BAD, "logit_bias", "'logit_bias' key '%.40s' is not a token id", k);
		if (!json_is_number(b)) return sg_srv_wrong_type(err, "logit_bias", "an object of numbers", b);
		double d = json_number_value(b);
		if (!isfinite(d) || d < -100 || d > 100)
			return -sg_srv_err_set(err, 400, BAD, "logit_bias", "'logit_bias[%s]' = %g is outside [-100, 100]", k, d);
		for (size_t j = 0; j < i; j++)
			if (r->bias[j].token == (int32_t)id)
				return -sg_srv_err_set(err, 400, BAD, "logit_bias", "'logit_bias' names token %lld twice", id);
		r->bias[i].token = (int32_t)id;
		r->bias[i].bias = (float)d;
		i++;
	}
	r->sp.logit_bias = r->bias;
	r->sp.n_logit_bias = i;
	return 0;
}

/* tool_choice: "auto" | "none" | "required" | {"type": "function", "function": {"name"}}. */
static int parse_tool_choice(const json_t *b, sg_srv_req *r, sg_srv_err *err)
{
	json_t *tc = json_object_get(b, "tool_choice");
	r->parallel_tools = 1;
	TRY(sg_srv_get_bool(b, "parallel_tool_calls", "parallel_tool_calls", &r->parallel_tools, err));
	if (!tc || json_is_null(tc)) return 0;
	const char *name = NULL;
	if (sg_srv_has_nul(tc)) return -sg_srv_nul(err, "tool_choice");
	if (json_is_string(tc)) {
		const char *v = json_string_value(tc);
		if (!strcmp(v, "auto")) r->tool_choice = SG_TOOLS_AUTO;
		else if (!strcmp(v, "none")) r->tool_choice = SG_TOOLS_NONE;
		else if (!strcmp(v, "required")) r->tool_choice = SG_TOOLS_REQUIRED;
		else
			return sg_srv_err_set(err, 400, BAD, "tool_choice", "'tool_choice' = '%.40s' is not one of auto, none, required", v);
	} else if (json_is_object(tc)) {
		json_t *f = json_object_get(tc, "function");
		if (sg_srv_has_nul(json_object_get(f, "name"))) return -sg_srv_nul(err, "tool_choice");
		name = json_string_value(json_object_get(f, "name"));
		if (!name) return sg_srv_err_set(err, 400, BAD, "tool_choice", "'tool_choice' must name a function: {\"type\": \"function\", \"function\": {\"name\": ...}}");
	} else return -sg_srv_wrong_type(err, "tool_choice", "a string or an object", tc);
	if (r->tool_choice == SG_TOOLS_NONE) return 0;
	if (!r->tools && (name || r->tool_choice == SG_TOOLS_REQUIRED))
		return sg_srv_err_set(err, 400, BAD, "tool_choice", "'tool_choice' needs 'tools'");
	if (name) {
		int found = 0;
		size_t i;
		json_t *t;
		json_array_foreach(r->tools, i, t) found |= !strcmp(json_string_value(json_object_get(json_object_get(t, "function"), "name")), name);
		if (!found) return sg_srv_err_set(err, 400, BAD, "tool_choice", "'tool_choice' names '%.80s', which is not in 'tools'", name);
		r->tool_choice = SG_TOOLS_NAMED;
		if (sg_srv_dup(&r->tool_name, name, err) < 0) return err->status;
	}
	return 0;
}

/* Reasoning switches: reasoning_effort ("none" turns it off), enable_thinking (an extension),
 * chat_template_kwargs (vLLM's), all of which become chat template variables. */
static int parse_reasoning(const json_t *b, sg_srv_req *r, sg_srv_err *err)
{
	json_t *kw = json_object_get(b, "chat_template_kwargs");
	if (kw && !json_is_null(kw)) {
		if (!json_is_object(kw)) return -sg_srv_wrong_type(err, "chat_template_kwargs", "an object", kw);
		r->kwargs = json_deep_copy(kw);
		json_t *et = json_object_get(kw, "enable_thinking");
		if (json_is_boolean(et)) r->think = json_is_true(et);
	}
	const char *eff = NULL;
	TRY(sg_srv_get_str(b, "reasoning_effort", "reasoning_effort", &eff, err));
	if (eff) {
		static const char *levels[] = {"none", "low", "medium", "high", "minimal"};
		int lv = -1;
		for (int i = 0; i < 5; i++)
			if (!strcmp(eff, levels[i])) lv = i;
		if (lv < 0)
			return sg_srv_err_set(err, 400, BAD, "reasoning_effort", "'reasoning_effort' = '%.40s' is not one of none, minimal, low, medium, high", eff);
		r->think = lv != 0;
		r->reasoning_effort = lv == 4 ? 1 : lv;
	}
	int et = -1;
	TRY(sg_srv_get_bool(b, "enable_thinking", "enable_thinking", &et, err));
	if (et >= 0) r->think = et;
	if (r->think >= 0 || eff) {
		if (!r->kwargs) r->kwargs = json_object();
		if (!r->kwargs) return sg_srv_oom(err);
		if (r->think >= 0) json_object_set_new(r->kwargs, "enable_thinking", json_boolean(r->think));
		if (eff) json_object_set_new(r->kwargs, "reasoning_effort", json_string(eff));
	}
	return 0;
}

/* Sampling fields shared by chat and completions (OpenAI names and ranges). */
static int parse_openai_sampling(const json_t *b, sg_srv_req *r, const sg_srv_limits *lim, sg_srv_err *err)
{
	double d;
	int64_t i;
	int given;
	TRY(given = sg_srv_get_num(b, "temperature", "temperature", 0, 2, &d, err));
	if (given) r->sp.temperature = (float)d;
	TRY(given = sg_srv_get_num(b, "top_p", "top_p", 0, 1, &d, err));
	if (given) {
		if (d <= 0) return sg_srv_err_set(err, 400, BAD, "top_p", "'top_p' = %g must be > 0", d);
		r->sp.top_p = (float)d;
	}
	TRY(given = sg_srv_get_int(b, "top_k", "top_k", -1, 1 << 30, &i, err));
	if (given) r->sp.top_k = i < 0 ? 0 : (int32_t)i;
	TRY(given = sg_srv_get_num(b, "min_p", "min_p", 0, 1, &d, err));
	if (given) r->sp.min_p = (float)d;
	TRY(given = sg_srv_get_num(b, "presence_penalty", "presence_penalty", -2, 2, &d, err));
	if (given) r->sp.presence_penalty = (float)d;
	TRY(given = sg_srv_get_num(b, "frequency_penalty", "frequency_penalty", -2, 2, &d, err));
	if (given) r->sp.frequency_penalty = (float)d;
	TRY(given = sg_srv_get_num(b, "repetition_penalty", "repetition_penalty", 1e-3, 100, &d, err));
	if (given) r->sp.repetition_penalty = (float)d;
	TRY(given = sg_srv_get_int(b, "seed", "seed", INT64_MIN, INT64_MAX, &i, err));
	if (given) r->sp.seed = (uint64_t)i == SG_SAMPLER_SEED_RANDOM ? 0 : (uint64_t)i;
	TRY(sg_srv_parse_stop(json_object_get(b, "stop"), "stop", r, err));
	TRY(parse_logit_bias(json_object_get(b, "logit_bias"), r, err));
	TRY(given = sg_srv_get_int(b, "n", "n", 1, SG_SRV_MAX_CHOICES, &i, err));
	r->n_choices = given ? (int)i : 1;
	int64_t mt = 0;
	int g1, g2;
	TRY(g1 = sg_srv_get_int(b, "max_tokens", "max_tokens", 1, INT32_MAX, &mt, err));
	TRY(g2 = sg_srv_get_int(b, "max_completion_tokens", "max_completion_tokens", 1, INT32_MAX, &mt, err));
	r->max_tokens_given = g1 || g2;
	r->max_tokens = r->max_tokens_given && mt < lim->max_tokens_cap ? (int32_t)mt : lim->max_tokens_cap;
	TRY(sg_srv_get_bool(b, "stream", "stream", &r->stream, err));
	json_t *so = json_object_get(b, "stream_options");
	if (so && !json_is_null(so)) {
		if (!json_is_object(so)) return sg_srv_wrong_type(err, "stream_options", "an object", so) ? err->status : 0;
		TRY(sg_srv_get_bool(so, "include_usage", "stream_options.include_usage", &r->include_usage, err));
	}
	/* the session key: any text, NULs included (two keys differing after a NUL are two sessions) */
	const char *user = NULL;
	size_t user_len = 0;
	TRY(given = sg_srv_get_text(b, "user", "user", &user, &user_len, err));
	if (given && sg_srv_dupn(&r->user, user, user_len, err) < 0) return err->status;
	r->user_len = user_len;
	json_t *rf = json_object_get(b, "response_format");
	if (rf && !json_is_null(rf)) {
		if (!json_is_object(rf)) return sg_srv_wrong_type(err, "response_format", "an object", rf) ? err->status : 0;
		const char *t = NULL;
		TRY(sg_srv_get_str(rf, "type", "response_format.type", &t, err));
		if (t && !strcmp(t, "json_object")) r->json_format = 1;
		else if (t && !strcmp(t, "json_schema")) {
			r->json_format = 2;
			json_t *js = json_object_get(rf, "json_schema");
			if (!json_is_object(js))
				return sg_srv_err_set(err, 400, BAD, "response_format.json_schema",
						      "'response_format.json_schema' (an object with 'schema') is required for type json_schema");
			json_t *sc = json_object_get(js, "schema");
			if (!sc || json_is_null(sc)) sc = json_object();
			else if (!json_is_object(sc) && !json_is_boolean(sc))
				return -sg_srv_wrong_type(err, "response_format.json_schema.schema", "an object", sc) ? err->status : 0;
			else json_incref(sc);
			r->schema = sc;
			TRY(sg_srv_get_bool(js, "strict", "response_format.json_schema.strict", &r->schema_strict, err));
		} else if (t && strcmp(t, "text") != 0)
			return sg_srv_err_set(err, 400, BAD, "response_format.type",
					      "'response_format.type' = '%.40s' is not one of text, json_object, json_schema", t);
	}
	/* speculative decoding: this server's extension field, and OpenAI's predicted output */
	int sst;
	if ((sst = sg_srv_parse_spec(json_object_get(b, "speculative"), "speculative", r, err))) return sst;
	if ((sst = sg_srv_parse_prediction(json_object_get(b, "prediction"), r, err))) return sst;
	return 0;
}

/* An array of token ids (completions prompt, detokenize tokens). */
static int parse_ids(const json_t *a, const char *name, sg_srv_req *r, sg_srv_err *err)
{
	size_t n = json_array_size(a);
	r->prompt_ids = sg_malloc((n ? n : 1) * sizeof *r->prompt_ids);
	if (!r->prompt_ids) return sg_srv_oom(err);
	size_t i;
	json_t *v;
	json_array_foreach(a, i, v) {
		if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
			char nm[64];
			snprintf(nm, sizeof nm, "%s[%zu]", name, i);
			return sg_srv_err_set(err, 400, BAD, nm, "'%s' must be a token id (a non-negative integer)", nm);
		}
		r->prompt_ids[i] = (int32_t)json_integer_value(v);
	}
	r->n_prompt_ids = n;
	return 0;
}

static int parse_oai_chat(const json_t *b, sg_srv_req *r, const sg_srv_limits *lim, sg_srv_err *err)
{
	int st;
	if ((st = sg_srv_parse_model(b, r, 0, err))) return st;
	r->chat = 1;
	TRY(sg_srv_parse_messages(b, r, 0, err));
	if ((st = parse_openai_sampling(b, r, lim, err))) return st;
	if ((st = parse_tool_choice(b, r, err))) return st;
	if ((st = parse_reasoning(b, r, err))) return st;
	if ((st = sg_chat_audio_parse(b, r, err))) return st;
	int given;
	TRY(sg_srv_get_bool(b, "logprobs", "logprobs", &r->logprobs, err));
	int64_t tl = 0;
	TRY(given = sg_srv_get_int(b, "top_logprobs", "top_logprobs", 0, SG_SAMPLER_MAX_LOGPROBS, &tl, err));
	if (given && tl > 0 && !r->logprobs)
		return sg_srv_err_set(err, 400, BAD, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
	r->top_logprobs = (int)tl;
	return 0;
}

static int parse_oai_completion(const json_t *b, sg_srv_req *r, const sg_srv_limits *lim, sg_srv_err *err)
{
	int st;
	if ((st = sg_srv_parse_model(b, r, 0, err))) return st;
	json_t *p = json_object_get(b, "prompt");
	if (!p || json_is_null(p)) return sg_srv_err_set(err, 400, BAD, "prompt", "'prompt' is required");
	if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0))) p = json_array_get(p, 0);
	if (json_is_string(p)) {
		if (sg_srv_dupn(&r->prompt, json_string_value(p), json_string_length(p), err) < 0) return err->status;
		r->prompt_len = json_string_length(p);
	} else if (json_is_array(p)) {
		if (json_array_size(p) && json_is_array(json_array_get(p, 0)))
			return sg_srv_err_set(err, 400, BAD, "prompt", "a batch of prompts is not supported: send one prompt per request");
		if ((st = parse_ids(p, "prompt", r, err))) return st;
		if (!r->n_prompt_ids) return sg_srv_err_set(err, 400, BAD, "prompt", "'prompt' must not be empty");
	} else return -sg_srv_wrong_type(err, "prompt", "a string or an array of token ids", p);
	if ((st = parse_openai_sampling(b, r, lim, err))) return st;
	int64_t lp = 0;
	int given;
	TRY(given = sg_srv_get_int(b, "logprobs", "logprobs", 0, SG_SAMPLER_MAX_LOGPROBS, &lp, err));
	if (given) r->logprobs = 1, r->top_logprobs = (int)lp;
	TRY(sg_srv_get_bool(b, "echo", "echo", &r->echo, err));
	if (r->echo) return sg_srv_err_set(err, 400, BAD, "echo", "'echo' is not supported");
	const char *suffix = NULL;
	size_t suffix_len = 0;
	TRY(sg_srv_get_text(b, "suffix", "suffix", &suffix, &suffix_len, err));
	if (suffix_len) return sg_srv_err_set(err, 400, BAD, "suffix", "'suffix' is not supported");
	int64_t best_of;
	TRY(given = sg_srv_get_int(b, "best_of", "best_of", INT64_MIN, INT64_MAX, &best_of, err));
	if (given && best_of != 1) return sg_srv_err_set(err, 400, BAD, "best_of", "'best_of' must be 1");
	return 0;
}

static int parse_tokenize(const json_t *b, sg_srv_req *r, sg_srv_err *err)
{
	int st;
	if ((st = sg_srv_parse_model(b, r, 0, err))) return st;
	const char *s = NULL;
	size_t n = 0;
	int given;
	TRY(given = sg_srv_get_text(b, "prompt", "prompt", &s, &n, err));
	if (!given) TRY(given = sg_srv_get_text(b, "content", "content", &s, &n, err));
	if (!given) return sg_srv_err_set(err, 400, BAD, "prompt", "'prompt' (a string) is required");
	r->add_special = 1;
	TRY(sg_srv_get_bool(b, "add_special", "add_special", &r->add_special, err));
	r->prompt_len = n;
	return sg_srv_dupn(&r->prompt, s, n, err) < 0 ? err->status : 0;
}

static int parse_detokenize(const json_t *b, sg_srv_req *r, sg_srv_err *err)
{
	int st;
	if ((st = sg_srv_parse_model(b, r, 0, err))) return st;
	json_t *t = json_object_get(b, "tokens");
	if (!t || json_is_null(t)) return sg_srv_err_set(err, 400, BAD, "tokens", "'tokens' (an array of token ids) is required");
	if (!json_is_array(t)) return -sg_srv_wrong_type(err, "tokens", "an array of token ids", t);
	return parse_ids(t, "tokens", r, err);
}

int sg_openai_parse(const json_t *b, sg_srv_req *req, const sg_srv_limits *lim, sg_srv_err *err)
{
	switch (req->route) {
	case SG_ROUTE_OAI_CHAT: return parse_oai_chat(b, req, lim, err);
	case SG_ROUTE_OAI_COMPLETIONS: return parse_oai_completion(b, req, lim, err);
	case SG_ROUTE_TOKENIZE: return parse_tokenize(b, req, err);
	case SG_ROUTE_DETOKENIZE: return parse_detokenize(b, req, err);
	default: return sg_srv_err_set(err, 404, "not_found_error", NULL, "this route takes no request body");
	}
}

/* ---- listings ---- */

json_t *sg_openai_model(const sg_srv_model_info *in)
{
	return json_pack("{s:s,s:s,s:I,s:s,s:i}", "id", in->name, "object", "model", "created", (json_int_t)in->created,
			 "owned_by", "saragossa", "context_length", in->n_ctx);
}

json_t *sg_openai_models(const sg_pool_item *items, int n)
{
	json_t *data = json_array();
	for (int i = 0; i < n; i++) {
		json_t *o = items[i].resident ? sg_openai_model(&items[i].info)
					      : json_pack("{s:s,s:s,s:i,s:s}", "id", items[i].info.name, "object", "model", "created",
							  0, "owned_by", "saragossa");
		json_object_set_new(o, "resident", json_boolean(items[i].resident));
		json_array_append_new(data, o);
	}
	return json_pack("{s:s,s:o}", "object", "list", "data", data);
}

/* ---- generations ---- */

typedef struct gen {
	sg_job *job;
	const sg_srv_req *req;
	sg_srv_model *m;
	const char *model_name;
	int chat, stream;
	int index; /* the choice (n > 1: generated one after the other) */
	int begun, failed; /* begun: the stream's status line is gone */
	int role_sent;     /* this choice's first chunk is */
	char *text; /* non-streamed answer */
	size_t len, cap;
	json_t *lp;                          /* chat: logprobs.content entries */
	json_t *c_tokens, *c_lps, *c_tops, *c_offs; /* completions: the legacy logprobs arrays */
	size_t text_off;
	sg_agent_run *ar;    /* reasoning split, tool calls, constraint; NULL for plain text */
	char *reasoning;     /* non-streamed reasoning */
	size_t rlen, rcap;
	json_t *calls;       /* [{id, name, arguments (text so far), ended}] */
	sg_chat_voice *voice; /* the answer is spoken (modalities audio), else NULL */
	int voice_failed;     /* the voice could not go on: voice_err says why */
	sg_srv_err voice_err;
} gen;

static json_t *token_json(const sg_srv_model *m, int32_t id, float logprob, int with_bytes)
{
	char *s = NULL;
	size_t n = 0;
	if (sg_srv_model_token_bytes(m, id, &s, &n)) n = 0;
	json_t *o = json_object();
	if (n && !sg_utf8_valid((const uint8_t *)s, n)) {
		/* part of a character: named by its bytes as OpenAI does ("bytes:\xe2\x80"), so two such
		 * tokens stay two keys of a completion's top_logprobs */
		char name[6 + 4 * 64 + 1];
		size_t k = (size_t)snprintf(name, sizeof name, "bytes:");
		for (size_t i = 0; i < n && k + 4 < sizeof name; i++) k += (size_t)snprintf(name + k, sizeof name - k, "\\x%02x", (unsigned char)s[i]);
		json_object_set_new(o, "token", json_string(name));
	} else json_object_set_new(o, "token", sg_resp_string(s ? s : "", n));
	json_object_set_new(o, "logprob", json_real(logprob));
	if (with_bytes) {
		json_t *b = json_array();
		for (size_t i = 0; i < n; i++) json_array_append_new(b, json_integer((unsigned char)s[i]));
		json_object_set_new(o, "bytes", b);
	}
	sg_free(s);
	return o;
}

json_t *sg_openai_logprob(const sg_srv_model *m, const sg_sample_result *sr, int top_n)
{
	json_t *e = token_json(m, sr->token, sr->logprob, 1);
	json_t *top = json_array();
	for (int i = 0; i < sr->n_top && i < top_n; i++)
		json_array_append_new(top, token_json(m, sr->top[i].token, sr->top[i].logprob, 1));
	json_object_set_new(e, "top_logprobs", top);
	return e;
}

/* The chat logprobs entry of one sampled token. */
static json_t *chat_logprob(gen *g, const sg_sample_result *sr)
{
	return sg_openai_logprob(g->m, sr, g->req->top_logprobs);
}

static void completion_logprob(gen *g, const sg_sample_result *sr, json_t *tokens, json_t *lps, json_t *tops, json_t *offs)
{
	json_t *t = token_json(g->m, sr->token, sr->logprob, 0);
	json_array_append(tokens, json_object_get(t, "token"));
	json_array_append_new(lps, json_real(sr->logprob));
	json_t *top = json_object();
	for (int i = 0; i < sr->n_top && i < g->req->top_logprobs; i++) {
		json_t *a = token_json(g->m, sr->top[i].token, sr->top[i].logprob, 0);
		json_object_set(top, json_string_value(json_object_get(a, "token")), json_object_get(a, "logprob"));
		json_decref(a);
	}
	json_array_append_new(tops, top);
	json_array_append_new(offs, json_integer((json_int_t)g->text_off));
	json_decref(t);
}

static void write_event(gen *g, json_t *o)
{
	if (sg_resp_line(g->job, o, 1)) g->failed = 1;
}

static json_t *oai_chunk(gen *g)
{
	return json_pack("{s:s,s:s,s:I,s:s,s:s}", "id", g->job->id, "object", g->chat ? "chat.completion.chunk" : "text_completion",
			 "created", (json_int_t)g->job->created, "model", g->model_name, "system_fingerprint", "saragossa");
}

static void begin_stream(gen *g)
{
	if (g->role_sent) return;
	g->role_sent = 1;
	if (!g->begun) {
		g->begun = 1;
		sg_job_begin(g->job, 200, "text/event-stream");
	}
	if (g->chat) {
		json_t *c = oai_chunk(g);
		json_object_set_new(c, "choices",
				    json_pack("[{s:i,s:{s:s,s:s},s:n,s:n}]", "index", g->index, "delta", "role", "assistant", "content", "",
					      "logprobs", "finish_reason"));
		write_event(g, c);
	}
}

static void stream_piece(gen *g, const char *text, size_t len, const sg_sample_result *sr)
{
	begin_stream(g);
	if (g->voice) { /* a spoken answer: its text is the audio's transcript */
		if (sg_chat_voice_text(g->voice, text, len, &g->voice_err)) g->failed = g->voice_failed = 1;
		return;
	}
	json_t *t = sg_resp_string(text, len);
	json_t *c = oai_chunk(g);
	json_t *lp = json_null();
	if (sr && g->req->logprobs) {
		if (g->chat) lp = json_pack("{s:[o]}", "content", chat_logprob(g, sr));
		else {
			json_t *a = json_array(), *b = json_array(), *cc = json_array(), *d = json_array();
			completion_logprob(g, sr, a, b, cc, d);
			lp = json_pack("{s:o,s:o,s:o,s:o}", "tokens", a, "token_logprobs", b, "top_logprobs", cc, "text_offset", d);
		}
	}
	json_t *choice;
	if (g->chat) choice = json_pack("{s:i,s:{s:o},s:o,s:n}", "index", g->index, "delta", "content", t, "logprobs", lp, "finish_reason");
	else choice = json_pack("{s:i,s:o,s:o,s:n}", "index", g->index, "text", t, "logprobs", lp, "finish_reason");
	json_object_set_new(c, "choices", json_pack("[o]", choice));
	write_event(g, c);
}

static int on_event(const sg_gen_event *ev, void *user)
{
	gen *g = user;
	const sg_sample_result *sr = ev->has_token ? ev->sample : NULL;
	if (g->ar) {
		sg_agent_run_feed(g->ar, ev->text, ev->len);
		if (!g->stream && sr && g->req->logprobs && g->chat) json_array_append_new(g->lp, chat_logprob(g, sr));
		g->text_off += ev->len;
		return g->failed || atomic_load(&g->job->cancel);
	}
	if (g->stream) {
		if (ev->len || (sr && g->req->logprobs)) stream_piece(g, ev->text, ev->len, sr);
	} else {
		if (sg_resp_buf_add(&g->text, &g->len, &g->cap, ev->text, ev->len)) return g->failed = 1;
		if (sr && g->req->logprobs) {
			if (g->chat) json_array_append_new(g->lp, chat_logprob(g, sr));
			else completion_logprob(g, sr, g->c_tokens, g->c_lps, g->c_tops, g->c_offs);
		}
	}
	g->text_off += ev->len;
	return g->failed || atomic_load(&g->job->cancel);
}

/* ---- the agent writer: answer text, reasoning and tool calls ---- */

static void ag_text(void *ud, const char *s, size_t n)
{
	gen *g = ud;
	if (g->stream) stream_piece(g, s, n, NULL);
	else if (sg_resp_buf_add(&g->text, &g->len, &g->cap, s, n)) g->failed = 1;
}

static void ag_reasoning(void *ud, const char *s, size_t n)
{
	gen *g = ud;
	if (!g->stream) {
		if (sg_resp_buf_add(&g->reasoning, &g->rlen, &g->rcap, s, n)) g->failed = 1;
		return;
	}
	begin_stream(g);
	json_t *c = oai_chunk(g);
	json_object_set_new(c, "choices", json_pack("[{s:i,s:{s:o},s:n,s:n}]", "index", g->index, "delta", "reasoning_content",
						    sg_resp_string(s, n), "logprobs", "finish_reason"));
	write_event(g, c);
}

static void ag_call_start(void *ud, int index, const char *name)
{
	gen *g = ud;
	char id[64];
	snprintf(id, sizeof id, "call_%s_%d", strchr(g->job->id, '-') ? strchr(g->job->id, '-') + 1 : g->job->id, index);
	sg_resp_call_start(g->calls, index, id, name);
	if (!g->stream) return;
	begin_stream(g);
	json_t *ch = oai_chunk(g);
	json_object_set_new(ch, "choices",
			    json_pack("[{s:i,s:{s:[{s:i,s:s,s:s,s:{s:s,s:s}}]},s:n,s:n}]", "index", g->index, "delta", "tool_calls", "index",
				      index, "id", id, "type", "function", "function", "name", name, "arguments", "", "logprobs",
				      "finish_reason"));
	write_event(g, ch);
}

static void ag_call_args(void *ud, int index, const char *s, size_t n)
{
	gen *g = ud;
	if (!json_array_get(g->calls, (size_t)index)) return;
	if (sg_resp_call_args(g->calls, index, s, n)) {
		g->failed = 1;
		return;
	}
	if (!g->stream) return;
	json_t *ch = oai_chunk(g);
	json_object_set_new(ch, "choices",
			    json_pack("[{s:i,s:{s:[{s:i,s:{s:o}}]},s:n,s:n}]", "index", g->index, "delta", "tool_calls", "index", index,
				      "function", "arguments", sg_resp_string(s, n), "logprobs", "finish_reason"));
	write_event(g, ch);
}

static void ag_call_end(void *ud, int index)
{
	gen *g = ud;
	sg_resp_call_end(g->calls, index);
}

/* The OpenAI tool_calls array of the finished answer. */
static json_t *oai_calls(gen *g)
{
	json_t *a = json_array();
	size_t i;
	json_t *c;
	json_array_foreach(g->calls, i, c) {
		if (!json_is_true(json_object_get(c, "ended"))) continue; /* cut short: returned as text */
		json_array_append_new(a, json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", json_object_get(c, "id"), "type", "function",
						   "function", "name", json_object_get(c, "name"), "arguments",
						   json_object_get(c, "arguments")));
	}
	return a;
}

/* "tool_calls" when the answer ends with complete calls and none came back as text or was cut
 * short; else how the generation ended ("length" for a call max_tokens cut). */
static const char *gen_finish_reason(const gen *g, const sg_gen_result *r)
{
	return sg_agent_run_tool_finish(g->ar) ? "tool_calls" : sg_resp_finish_reason(r);
}

static void finish_with(gen *g, const sg_srv_err *e);

/* The end of one choice: its last chunk (streamed), or its choice object (whole answer). NULL
 * with g->failed set when an error was answered instead (the spoken answer could not go on). */
static json_t *finish_choice(gen *g, const sg_gen_result *r)
{
	const sg_srv_req *q = g->req;
	sg_srv_err ve;
	if (g->stream) {
		begin_stream(g);
		if (g->voice && sg_chat_voice_end(g->voice, &ve)) {
			finish_with(g, &ve);
			g->failed = 1;
			return NULL;
		}
		json_t *c = oai_chunk(g);
		json_t *choice = g->chat ? json_pack("{s:i,s:{},s:n,s:s}", "index", g->index, "delta", "logprobs", "finish_reason",
						     gen_finish_reason(g, r))
					 : json_pack("{s:i,s:s,s:n,s:s}", "index", g->index, "text", "", "logprobs", "finish_reason",
						     sg_resp_finish_reason(r));
		json_object_set_new(c, "choices", json_pack("[o]", choice));
		json_object_set_new(c, "timings", sg_resp_oai_timings(r));
		write_event(g, c);
		return NULL;
	}
	json_t *audio = g->voice ? sg_chat_voice_message(g->voice, g->text, g->len, &ve) : NULL;
	if (g->voice && !audio) {
		finish_with(g, &ve);
		g->failed = 1;
		return NULL;
	}
	json_t *text = sg_resp_string(g->text ? g->text : "", g->len);
	json_t *lp = json_null();
	if (g->chat) {
		if (q->logprobs) lp = json_pack("{s:O}", "content", g->lp);
		json_t *msg = json_pack("{s:s,s:o}", "role", "assistant", "content", text);
		if (g->rlen) json_object_set_new(msg, "reasoning_content", sg_resp_string(g->reasoning, g->rlen));
		if (audio) { /* OpenAI's spoken answer: the text is the audio's transcript */
			json_object_set_new(msg, "audio", audio);
			json_object_set_new(msg, "content", json_null());
		}
		if (sg_agent_run_calls(g->ar)) {
			json_object_set_new(msg, "tool_calls", oai_calls(g));
			if (!g->len) json_object_set_new(msg, "content", json_null());
		}
		return json_pack("{s:i,s:o,s:o,s:s}", "index", g->index, "message", msg, "logprobs", lp, "finish_reason",
				 gen_finish_reason(g, r));
	}
	if (q->logprobs)
		lp = json_pack("{s:O,s:O,s:O,s:O}", "tokens", g->c_tokens, "token_logprobs", g->c_lps, "top_logprobs", g->c_tops,
			       "text_offset", g->c_offs);
	return json_pack("{s:i,s:o,s:o,s:s}", "index", g->index, "text", text, "logprobs", lp, "finish_reason",
			 sg_resp_finish_reason(r));
}

/* The end of the answer: the usage chunk and [DONE] (streamed), or the whole response with its
 * choices; usage counts the prompt once and every choice's tokens. */
static void finish_all(gen *g, json_t *choices, const sg_gen_result *usage)
{
	if (g->stream) {
		begin_stream(g);
		if (g->req->include_usage) {
			json_t *c = oai_chunk(g);
			json_object_set_new(c, "choices", json_array());
			json_object_set_new(c, "usage", sg_resp_oai_usage(usage));
			write_event(g, c);
		}
		if (sg_job_write(g->job, "data: [DONE]\n\n", 14)) g->failed = 1;
		json_decref(choices);
		return;
	}
	json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:s}", "id", g->job->id, "object", g->chat ? "chat.completion" : "text_completion",
			      "created", (json_int_t)g->job->created, "model", g->model_name, "system_fingerprint", "saragossa");
	json_object_set_new(o, "choices", choices);
	json_object_set_new(o, "usage", sg_resp_oai_usage(usage));
	json_object_set_new(o, "timings", sg_resp_oai_timings(usage));
	sg_resp_send(g->job, 200, o);
}

/* After the status line is gone an error becomes the stream's last event. */
static void finish_with(gen *g, const sg_srv_err *e)
{
	json_t *body = sg_resp_error_body(g->req->route, e);
	if (g->begun) write_event(g, body);
	else sg_resp_send(g->job, e->status, body);
}

static void finish_error(gen *g, sg_status st)
{
	sg_srv_err e;
	sg_resp_err_engine(&e, st);
	finish_with(g, &e);
}

/* The answer's JSON was not finished (max_tokens, the context, or a stop string cut it): the
 * deltas sent so far are a valid JSON prefix; a stream ends with this error instead of [DONE]. */
static void finish_incomplete(gen *g, const sg_gen_result *r)
{
	sg_srv_err e;
	sg_resp_err_incomplete(&e, r);
	if (g->stream) begin_stream(g);
	finish_with(g, &e);
}

static void gen_free(gen *g)
{
	sg_agent_run_free(g->ar);
	sg_free(g->reasoning);
	json_decref(g->calls);
	sg_free(g->text);
	json_decref(g->lp);
	json_decref(g->c_tokens);
	json_decref(g->c_lps);
	json_decref(g->c_tops);
	json_decref(g->c_offs);
	sg_chat_voice_free(g->voice);
}

/* One choice generated into g. 1 when it ended well (its end written or kept in choices), 0
 * when the answer is over (an error was answered, or the client is gone). */
static int run_choice(sg_job *job, gen *g, json_t *choices, sg_gen_result *r)
{
	sg_agent_out ao = {.ud = g, .text = ag_text, .reasoning = ag_reasoning, .call_start = ag_call_start,
			   .call_args = ag_call_args, .call_end = ag_call_end};
	sg_status st = SG_OK;
	memset(r, 0, sizeof *r);
	if (job->agent && (st = sg_agent_run_new(job->agent, job->model, &ao, &g->ar))) {
		SG_WARN("serve: %s failed: %s", job->id, sg_last_error());
		finish_error(g, st);
		return 0;
	}
	sg_gen_params p = sg_resp_gen_params(job);
	p.on_event = on_event;
	p.user = g;
	p.constraint = sg_agent_run_constraint(g->ar);
	/* n > 1 with a seed: choice i samples with seed + i (repeatable, and the choices differ) */
	if (p.sampler.seed != SG_SAMPLER_SEED_RANDOM) p.sampler.seed += (uint64_t)g->index;
	st = sg_resp_generate(job, &p, r);
	if (g->ar && !st) sg_agent_run_finish(g->ar, r);
	if (atomic_load(&job->cancel)) {
		SG_INFO("serve: %s cancelled after %zu tokens (client gone)", job->id, r->n_generated);
		return 0;
	}
	if (g->voice_failed) {
		SG_WARN("serve: %s: %s", job->id, g->voice_err.message);
		finish_with(g, &g->voice_err);
		return 0;
	}
	if (st) {
		SG_WARN("serve: %s failed: %s", job->id, sg_last_error());
		finish_error(g, st);
		return 0;
	}
	if (job->agent && job->agent->json && !sg_agent_run_complete(g->ar)) {
		SG_WARN("serve: %s: the JSON answer was unfinished after %zu tokens (%s)", job->id, r->n_generated, sg_resp_finish_reason(r));
		finish_incomplete(g, r);
		return 0;
	}
	json_t *c = finish_choice(g, r);
	if (c) json_array_append_new(choices, c);
	sg_resp_log_done(job, g->model_name, r, gen_finish_reason(g, r));
	return !g->failed;
}

void sg_openai_run(sg_job *job)
{
	const sg_srv_req *q = &job->req;
	json_t *choices = json_array();
	sg_gen_result total = {0}, r;
	int begun = 0, ok = 1;
	gen g = {0};
	for (int i = 0; ok && i < (q->n_choices > 1 ? q->n_choices : 1); i++) {
		if (i) gen_free(&g);
		g = (gen){.job = job, .req = q, .m = job->model, .stream = q->stream, .chat = q->route == SG_ROUTE_OAI_CHAT, .index = i,
			  .begun = begun};
		g.model_name = sg_srv_model_info_get(job->model)->name;
		g.lp = json_array();
		g.c_tokens = json_array();
		g.c_lps = json_array();
		g.c_tops = json_array();
		g.c_offs = json_array();
		g.calls = json_array();
		/* a spoken answer (modalities audio) is one choice */
		int voice_oom = 0;
		if (g.chat && q->audio_out && q->n_choices > 1) {
			sg_srv_err e;
			sg_srv_err_set(&e, 400, BAD, "n", "'n' = %d: a spoken answer (modalities audio) has one choice", q->n_choices);
			finish_with(&g, &e);
			ok = 0;
			break;
		}
		if (g.chat) g.voice = sg_chat_voice_new(job, g.model_name, &voice_oom);
		if (voice_oom) {
			sg_srv_err e;
			sg_srv_err_set(&e, 500, "server_error", NULL, "the spoken answer cannot be set up (out of memory)");
			finish_with(&g, &e);
			ok = 0;
			break;
		}
		ok = run_choice(job, &g, choices, &r);
		begun = g.begun;
		if (!i) total = r; /* the prompt (and what the cache gave it) counts once */
		else total.n_generated += r.n_generated;
	}
	if (ok) finish_all(&g, choices, &total);
	else json_decref(choices);
	sg_job_finish(job);
	gen_free(&g);
}
