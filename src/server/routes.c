/* Response bodies of the OpenAI and Ollama routes (see routes.h). */
#include "server/routes.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/utf8.h"
#include "engine/prefix_cache.h"
#include "server/pool.h"
#include "saragossa.h"
#include "server/agent.h"

void sg_routes_rfc3339(char *buf, size_t cap)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	gmtime_r(&ts.tv_sec, &tm);
	char d[32];
	strftime(d, sizeof d, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf, cap, "%s.%06ldZ", d, ts.tv_nsec / 1000);
}

static void rfc3339_of(int64_t t, char *buf, size_t cap)
{
	time_t tt = (time_t)t;
	struct tm tm;
	gmtime_r(&tt, &tm);
	strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

json_t *sg_routes_error_body(sg_srv_route route, const sg_srv_err *e)
{
	if (sg_srv_route_is_ollama(route)) return json_pack("{s:s}", "error", e->message);
	if (sg_srv_route_is_anthropic(route)) return sg_routes_anthropic_error(e);
	return json_pack("{s:{s:s,s:s,s:o,s:o}}", "error", "message", e->message, "type", e->type ? e->type : "invalid_request_error",
			 "param", e->param[0] ? json_string(e->param) : json_null(), "code",
			 e->code[0] ? json_string(e->code) : json_null());
}

json_t *sg_routes_oai_model(const sg_srv_model *m)
{
	const sg_srv_model_info *in = sg_srv_model_info_get(m);
	return json_pack("{s:s,s:s,s:I,s:s,s:i}", "id", in->name, "object", "model", "created", (json_int_t)in->created,
			 "owned_by", "saragossa", "context_length", in->n_ctx);
}

json_t *sg_routes_oai_models(sg_srv_model *const *models, int n)
{
	json_t *data = json_array();
	for (int i = 0; i < n; i++) json_array_append_new(data, sg_routes_oai_model(models[i]));
	return json_pack("{s:s,s:o}", "object", "list", "data", data);
}

static json_t *ollama_details(const sg_srv_model_info *in)
{
	return json_pack("{s:s,s:s,s:s,s:[s],s:s,s:s}", "parent_model", "", "format", in->format, "family", in->arch, "families",
			 in->arch, "parameter_size", "", "quantization_level", in->quant);
}

static void digest_of(const sg_srv_model_info *in, char out[65])
{
	/* A stable identifier for the listing (not a content hash: hashing gigabytes per listing
	 * would stall it). */
	uint64_t h = 1469598103934665603ull;
	for (const char *p = in->path; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
	h ^= in->size_bytes;
	snprintf(out, 65, "%016llx%016llx%016llx%016llx", (unsigned long long)h, (unsigned long long)(h * 31),
		 (unsigned long long)(h * 131), (unsigned long long)(h * 1031));
}

json_t *sg_routes_ollama_tags(sg_srv_model *const *models, int n, int ps)
{
	json_t *arr = json_array();
	for (int i = 0; i < n; i++) {
		const sg_srv_model_info *in = sg_srv_model_info_get(models[i]);
		char when[40], digest[65];
		rfc3339_of(in->created, when, sizeof when);
		digest_of(in, digest);
		json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:o}", "name", in->name, "model", in->name, "size",
				      (json_int_t)in->size_bytes, "digest", digest, "details", ollama_details(in));
		if (ps) {
			json_object_set_new(o, "expires_at", json_string("2999-01-01T00:00:00Z"));
			json_object_set_new(o, "size_vram", json_integer(0));
		} else json_object_set_new(o, "modified_at", json_string(when));
		json_array_append_new(arr, o);
	}
	return json_pack("{s:o}", "models", arr);
}

json_t *sg_routes_ollama_show(const sg_srv_model *m)
{
	const sg_srv_model_info *in = sg_srv_model_info_get(m);
	char when[40];
	rfc3339_of(in->created, when, sizeof when);
	json_t *info = json_pack("{s:s,s:i,s:i}", "general.architecture", in->arch, "context_length", in->n_ctx, "vocab_size",
				 in->n_vocab);
	return json_pack("{s:s,s:s,s:s,s:o,s:o,s:[s],s:s}", "modelfile", "", "parameters", "", "template", "", "details",
			 ollama_details(in), "model_info", info, "capabilities", "completion", "modified_at", when);
}

/* ---- generations ---- */

typedef struct gen {
	sg_job *job;
	const sg_srv_req *req;
	sg_srv_model *m;
	const char *model_name;
	int ollama, stream;
	int begun, failed;
	char *text; /* non-streamed answer */
	size_t len, cap;
	json_t *lp;                          /* chat: logprobs.content entries */
	json_t *c_tokens, *c_lps, *c_tops, *c_offs; /* completions: the legacy logprobs arrays */
	size_t text_off;
	sg_agent_run *ar;    /* reasoning split, tool calls, constraint; NULL for plain text */
	char *reasoning;     /* non-streamed reasoning */
	size_t rlen, rcap;
	json_t *calls;       /* [{id, name, arguments (text so far)}] */
} gen;

static int buf_add(char **b, size_t *len, size_t *cap, const char *s, size_t n)
{
	if (*len + n + 1 > *cap) {
		size_t c = *cap ? *cap * 2 : 4096;
		while (c < *len + n + 1) c *= 2;
		char *nb = sg_realloc(*b, c);
		if (!nb) return -1;
		*b = nb;
		*cap = c;
	}
	memcpy(*b + *len, s, n);
	*len += n;
	return 0;
}

/* Bytes as a JSON string, invalid UTF-8 replaced by U+FFFD (a token may be half a character). */
static json_t *lossy_string(const char *s, size_t n)
{
	if (sg_utf8_valid((const uint8_t *)s, n)) return json_stringn(s, n);
	char *b = sg_malloc(n * 3 + 1);
	if (!b) return json_string("");
	size_t o = 0;
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		int l = sg_utf8_decode((const uint8_t *)s + i, n - i, &cp);
		if (l) {
			memcpy(b + o, s + i, (size_t)l);
			o += (size_t)l;
			i += (size_t)l;
		} else {
			memcpy(b + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
		}
	}
	json_t *r = json_stringn(b, o);
	sg_free(b);
	return r;
}

static json_t *token_json(gen *g, int32_t id, float logprob, int with_bytes)
{
	char *s = NULL;
	size_t n = 0;
	if (sg_srv_model_token_bytes(g->m, id, &s, &n)) n = 0;
	json_t *o = json_object();
	json_object_set_new(o, "token", lossy_string(s ? s : "", n));
	json_object_set_new(o, "logprob", json_real(logprob));
	if (with_bytes) {
		json_t *b = json_array();
		for (size_t i = 0; i < n; i++) json_array_append_new(b, json_integer((unsigned char)s[i]));
		json_object_set_new(o, "bytes", b);
	}
	sg_free(s);
	return o;
}

/* The chat logprobs entry of one sampled token. */
static json_t *chat_logprob(gen *g, const sg_sample_result *sr)
{
	json_t *e = token_json(g, sr->token, sr->logprob, 1);
	json_t *top = json_array();
	for (int i = 0; i < sr->n_top && i < g->req->top_logprobs; i++)
		json_array_append_new(top, token_json(g, sr->top[i].token, sr->top[i].logprob, 1));
	json_object_set_new(e, "top_logprobs", top);
	return e;
}

static void completion_logprob(gen *g, const sg_sample_result *sr, json_t *tokens, json_t *lps, json_t *tops, json_t *offs)
{
	json_t *t = token_json(g, sr->token, sr->logprob, 0);
	json_array_append(tokens, json_object_get(t, "token"));
	json_array_append_new(lps, json_real(sr->logprob));
	json_t *top = json_object();
	for (int i = 0; i < sr->n_top && i < g->req->top_logprobs; i++) {
		json_t *a = token_json(g, sr->top[i].token, sr->top[i].logprob, 0);
		json_object_set(top, json_string_value(json_object_get(a, "token")), json_object_get(a, "logprob"));
		json_decref(a);
	}
	json_array_append_new(tops, top);
	json_array_append_new(offs, json_integer((json_int_t)g->text_off));
	json_decref(t);
}

static void write_json_line(gen *g, json_t *o, int sse)
{
	char *s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!s) {
		g->failed = 1;
		return;
	}
	int r = sse ? sg_job_write(g->job, "data: ", 6) : 0;
	r |= sg_job_write(g->job, s, strlen(s));
	r |= sg_job_write(g->job, sse ? "\n\n" : "\n", sse ? 2 : 1);
	free(s);
	if (r) g->failed = 1;
}

static json_t *oai_chunk(gen *g)
{
	int chat = g->req->route == SG_ROUTE_OAI_CHAT;
	return json_pack("{s:s,s:s,s:I,s:s,s:s}", "id", g->job->id, "object", chat ? "chat.completion.chunk" : "text_completion",
			 "created", (json_int_t)g->job->created, "model", g->model_name, "system_fingerprint", "saragossa");
}

static void begin_stream(gen *g)
{
	if (g->begun) return;
	g->begun = 1;
	if (g->ollama) {
		sg_job_begin(g->job, 200, "application/x-ndjson");
		return;
	}
	sg_job_begin(g->job, 200, "text/event-stream");
	if (g->req->route == SG_ROUTE_OAI_CHAT) {
		json_t *c = oai_chunk(g);
		json_object_set_new(c, "choices",
				    json_pack("[{s:i,s:{s:s,s:s},s:n,s:n}]", "index", 0, "delta", "role", "assistant", "content", "",
					      "logprobs", "finish_reason"));
		write_json_line(g, c, 1);
	}
}

static void stream_piece(gen *g, const char *text, size_t len, const sg_sample_result *sr)
{
	begin_stream(g);
	json_t *t = lossy_string(text, len);
	if (g->ollama) {
		char when[48];
		sg_routes_rfc3339(when, sizeof when);
		json_t *o = json_pack("{s:s,s:s}", "model", g->model_name, "created_at", when);
		if (g->req->route == SG_ROUTE_OLLAMA_CHAT)
			json_object_set_new(o, "message", json_pack("{s:s,s:o}", "role", "assistant", "content", t));
		else json_object_set_new(o, "response", t);
		json_object_set_new(o, "done", json_false());
		write_json_line(g, o, 0);
		return;
	}
	json_t *c = oai_chunk(g);
	json_t *lp = json_null();
	if (sr && g->req->logprobs) {
		if (g->req->route == SG_ROUTE_OAI_CHAT) lp = json_pack("{s:[o]}", "content", chat_logprob(g, sr));
		else {
			json_t *a = json_array(), *b = json_array(), *cc = json_array(), *d = json_array();
			completion_logprob(g, sr, a, b, cc, d);
			lp = json_pack("{s:o,s:o,s:o,s:o}", "tokens", a, "token_logprobs", b, "top_logprobs", cc, "text_offset", d);
		}
	}
	json_t *choice;
	if (g->req->route == SG_ROUTE_OAI_CHAT)
		choice = json_pack("{s:i,s:{s:o},s:o,s:n}", "index", 0, "delta", "content", t, "logprobs", lp, "finish_reason");
	else choice = json_pack("{s:i,s:o,s:o,s:n}", "index", 0, "text", t, "logprobs", lp, "finish_reason");
	json_object_set_new(c, "choices", json_pack("[o]", choice));
	write_json_line(g, c, 1);
}

static int on_event(const sg_gen_event *ev, void *user)
{
	gen *g = user;
	const sg_sample_result *sr = ev->has_token ? ev->sample : NULL;
	if (g->ar) {
		sg_agent_run_feed(g->ar, ev->text, ev->len);
		if (!g->stream && sr && g->req->logprobs && g->req->route == SG_ROUTE_OAI_CHAT)
			json_array_append_new(g->lp, chat_logprob(g, sr));
		g->text_off += ev->len;
		return g->failed || atomic_load(&g->job->cancel);
	}
	if (g->stream) {
		if (ev->len || (sr && g->req->logprobs)) stream_piece(g, ev->text, ev->len, sr);
	} else {
		if (g->len + ev->len + 1 > g->cap) {
			size_t cap = g->cap ? g->cap * 2 : 4096;
			while (cap < g->len + ev->len + 1) cap *= 2;
			char *n = sg_realloc(g->text, cap);
			if (!n) return g->failed = 1;
			g->text = n;
			g->cap = cap;
		}
		memcpy(g->text + g->len, ev->text, ev->len);
		g->len += ev->len;
		if (sr && g->req->logprobs) {
			if (g->req->route == SG_ROUTE_OAI_CHAT) json_array_append_new(g->lp, chat_logprob(g, sr));
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
	else if (buf_add(&g->text, &g->len, &g->cap, s, n)) g->failed = 1;
}

static void ag_reasoning(void *ud, const char *s, size_t n)
{
	gen *g = ud;
	if (!g->stream) {
		if (buf_add(&g->reasoning, &g->rlen, &g->rcap, s, n)) g->failed = 1;
		return;
	}
	begin_stream(g);
	json_t *t = lossy_string(s, n);
	if (g->ollama) {
		char when[48];
		sg_routes_rfc3339(when, sizeof when);
		json_t *o = json_pack("{s:s,s:s,s:{s:s,s:s,s:o},s:b}", "model", g->model_name, "created_at", when, "message", "role",
				      "assistant", "content", "", "thinking", t, "done", 0);
		write_json_line(g, o, 0);
		return;
	}
	json_t *c = oai_chunk(g);
	json_object_set_new(c, "choices", json_pack("[{s:i,s:{s:o},s:n,s:n}]", "index", 0, "delta", "reasoning_content", t,
						    "logprobs", "finish_reason"));
	write_json_line(g, c, 1);
}

static json_t *call_at(gen *g, int index)
{
	return json_array_get(g->calls, (size_t)index);
}

static void ag_call_start(void *ud, int index, const char *name)
{
	gen *g = ud;
	char id[64];
	snprintf(id, sizeof id, "call_%s_%d", strchr(g->job->id, '-') ? strchr(g->job->id, '-') + 1 : g->job->id, index);
	while (json_array_size(g->calls) <= (size_t)index)
		json_array_append_new(g->calls, json_pack("{s:s,s:s,s:s}", "id", "", "name", "", "arguments", ""));
	json_t *c = call_at(g, index);
	json_object_set_new(c, "id", json_string(id));
	json_object_set_new(c, "name", json_string(name));
	if (!g->stream || g->ollama) return;
	begin_stream(g);
	json_t *ch = oai_chunk(g);
	json_object_set_new(ch, "choices",
			    json_pack("[{s:i,s:{s:[{s:i,s:s,s:s,s:{s:s,s:s}}]},s:n,s:n}]", "index", 0, "delta", "tool_calls", "index",
				      index, "id", id, "type", "function", "function", "name", name, "arguments", "", "logprobs",
				      "finish_reason"));
	write_json_line(g, ch, 1);
}

static void ag_call_args(void *ud, int index, const char *s, size_t n)
{
	gen *g = ud;
	json_t *c = call_at(g, index);
	if (!c) return;
	const char *old = json_string_value(json_object_get(c, "arguments"));
	size_t ol = json_string_length(json_object_get(c, "arguments"));
	char *b = sg_malloc(ol + n + 1);
	if (!b) {
		g->failed = 1;
		return;
	}
	memcpy(b, old, ol);
	memcpy(b + ol, s, n);
	json_object_set_new(c, "arguments", lossy_string(b, ol + n));
	sg_free(b);
	if (!g->stream || g->ollama) return;
	json_t *ch = oai_chunk(g);
	json_object_set_new(ch, "choices",
			    json_pack("[{s:i,s:{s:[{s:i,s:{s:o}}]},s:n,s:n}]", "index", 0, "delta", "tool_calls", "index", index,
				      "function", "arguments", lossy_string(s, n), "logprobs", "finish_reason"));
	write_json_line(g, ch, 1);
}

/* Ollama's form of a call: {"function": {"name", "arguments": {...}}}. */
static json_t *ollama_call(json_t *c)
{
	const char *a = json_string_value(json_object_get(c, "arguments"));
	json_t *args = a ? json_loads(a, 0, NULL) : NULL;
	if (!args) args = json_object();
	return json_pack("{s:{s:O,s:o}}", "function", "name", json_object_get(c, "name"), "arguments", args);
}

static void ag_call_end(void *ud, int index)
{
	gen *g = ud;
	json_t *c = call_at(g, index);
	if (!c) return;
	json_object_set_new(c, "ended", json_true());
	if (!g->stream || !g->ollama) return;
	begin_stream(g);
	char when[48];
	sg_routes_rfc3339(when, sizeof when);
	json_t *o = json_pack("{s:s,s:s,s:{s:s,s:s,s:[o]},s:b}", "model", g->model_name, "created_at", when, "message", "role",
			      "assistant", "content", "", "tool_calls", ollama_call(c), "done", 0);
	write_json_line(g, o, 0);
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

static json_t *usage_json(const sg_gen_result *r)
{
	return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)r->n_prompt, "completion_tokens",
			 (json_int_t)r->n_generated, "total_tokens", (json_int_t)(r->n_prompt + r->n_generated),
			 "prompt_tokens_details", "cached_tokens", (json_int_t)r->n_cached);
}

static void ollama_final(gen *g, json_t *o, const sg_gen_result *r)
{
	json_int_t prefill_ns = (json_int_t)(r->prefill_s * 1e9), decode_ns = (json_int_t)(r->decode_s * 1e9);
	json_object_set_new(o, "done", json_true());
	json_object_set_new(o, "done_reason", json_string(r->finish == SG_GEN_LENGTH ? "length" : "stop"));
	json_object_set_new(o, "total_duration", json_integer((json_int_t)((r->ttft_s + r->decode_s) * 1e9)));
	json_object_set_new(o, "load_duration", json_integer(0));
	json_object_set_new(o, "prompt_eval_count", json_integer((json_int_t)r->n_prompt));
	json_object_set_new(o, "prompt_eval_duration", json_integer(prefill_ns));
	json_object_set_new(o, "eval_count", json_integer((json_int_t)r->n_generated));
	json_object_set_new(o, "eval_duration", json_integer(decode_ns));
}

static const char *finish_reason(const sg_gen_result *r)
{
	return r->finish == SG_GEN_LENGTH ? "length" : "stop";
}

/* With tool calls: "tool_calls" when every call parsed, "stop" when one came back as text. */
static const char *gen_finish_reason(const gen *g, const sg_gen_result *r)
{
	if (sg_agent_run_malformed(g->ar)) return "stop";
	if (sg_agent_run_calls(g->ar)) return "tool_calls";
	return finish_reason(r);
}

static void finish_ok(gen *g, const sg_gen_result *r)
{
	const sg_srv_req *q = g->req;
	int chat = q->route == SG_ROUTE_OAI_CHAT || q->route == SG_ROUTE_OLLAMA_CHAT;
	if (g->ollama) {
		char when[48];
		sg_routes_rfc3339(when, sizeof when);
		json_t *o = json_pack("{s:s,s:s}", "model", g->model_name, "created_at", when);
		json_t *content = g->stream ? json_string("") : lossy_string(g->text ? g->text : "", g->len);
		if (chat) {
			json_t *msg = json_pack("{s:s,s:o}", "role", "assistant", "content", content);
			if (!g->stream && g->rlen) json_object_set_new(msg, "thinking", lossy_string(g->reasoning, g->rlen));
			if (!g->stream && json_array_size(g->calls)) {
				json_t *tc = json_array();
				size_t i;
				json_t *c;
				json_array_foreach(g->calls, i, c) if (json_is_true(json_object_get(c, "ended")))
					json_array_append_new(tc, ollama_call(c));
				json_object_set_new(msg, "tool_calls", tc);
			}
			json_object_set_new(o, "message", msg);
		} else json_object_set_new(o, "response", content);
		ollama_final(g, o, r);
		if (g->stream) {
			begin_stream(g);
			write_json_line(g, o, 0);
			return;
		}
		char *s = json_dumps(o, JSON_COMPACT);
		json_decref(o);
		sg_job_respond(g->job, s ? 200 : 500, "application/json", s ? s : "", s ? strlen(s) : 0);
		free(s);
		return;
	}
	if (g->stream) {
		begin_stream(g);
		json_t *c = oai_chunk(g);
		json_t *choice = chat ? json_pack("{s:i,s:{},s:n,s:s}", "index", 0, "delta", "logprobs", "finish_reason",
						  gen_finish_reason(g, r))
				      : json_pack("{s:i,s:s,s:n,s:s}", "index", 0, "text", "", "logprobs", "finish_reason",
						  finish_reason(r));
		json_object_set_new(c, "choices", json_pack("[o]", choice));
		write_json_line(g, c, 1);
		if (q->include_usage) {
			c = oai_chunk(g);
			json_object_set_new(c, "choices", json_array());
			json_object_set_new(c, "usage", usage_json(r));
			write_json_line(g, c, 1);
		}
		if (sg_job_write(g->job, "data: [DONE]\n\n", 14)) g->failed = 1;
		return;
	}
	json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:s}", "id", g->job->id, "object", chat ? "chat.completion" : "text_completion",
			      "created", (json_int_t)g->job->created, "model", g->model_name, "system_fingerprint", "saragossa");
	json_t *text = lossy_string(g->text ? g->text : "", g->len);
	json_t *lp = json_null();
	json_t *choice;
	if (chat) {
		if (q->logprobs) lp = json_pack("{s:O}", "content", g->lp);
		json_t *msg = json_pack("{s:s,s:o}", "role", "assistant", "content", text);
		if (g->rlen) json_object_set_new(msg, "reasoning_content", lossy_string(g->reasoning, g->rlen));
		if (sg_agent_run_calls(g->ar)) {
			json_object_set_new(msg, "tool_calls", oai_calls(g));
			if (!g->len) json_object_set_new(msg, "content", json_null());
		}
		choice = json_pack("{s:i,s:o,s:o,s:s}", "index", 0, "message", msg, "logprobs", lp, "finish_reason",
				   gen_finish_reason(g, r));
	} else {
		if (q->logprobs)
			lp = json_pack("{s:O,s:O,s:O,s:O}", "tokens", g->c_tokens, "token_logprobs", g->c_lps, "top_logprobs",
				       g->c_tops, "text_offset", g->c_offs);
		choice = json_pack("{s:i,s:o,s:o,s:s}", "index", 0, "text", text, "logprobs", lp, "finish_reason",
				   finish_reason(r));
	}
	json_object_set_new(o, "choices", json_pack("[o]", choice));
	json_object_set_new(o, "usage", usage_json(r));
	char *s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	sg_job_respond(g->job, s ? 200 : 500, "application/json", s ? s : "", s ? strlen(s) : 0);
	free(s);
}

static void finish_error(gen *g, sg_status st)
{
	sg_srv_err e;
	/* out of memory (the memory guard's refusal): the server is fine, the request does not fit */
	int status = st == SG_ERR_RANGE || st == SG_ERR_INVALID_ARG ? 400 : st == SG_ERR_NOMEM ? 503 : 500;
	sg_srv_err_set(&e, status, status == 400 ? "invalid_request_error" : "server_error", NULL, "%s", sg_last_error());
	json_t *body = sg_routes_error_body(g->req->route, &e);
	if (g->begun) {
		/* The status line is gone: the error becomes the stream's last event. */
		write_json_line(g, body, !g->ollama);
		return;
	}
	char *s = json_dumps(body, JSON_COMPACT);
	json_decref(body);
	sg_job_respond(g->job, status, "application/json", s ? s : "", s ? strlen(s) : 0);
	free(s);
}

/* The answer's JSON was not finished (max_tokens, the context, or a stop string cut it). */
static void finish_incomplete(gen *g, const sg_gen_result *r)
{
	sg_srv_err e;
	sg_srv_err_set(&e, 400, "incomplete_json", "max_tokens",
		       "the JSON answer was not finished when the generation ended (%s after %zu tokens): raise max_tokens",
		       finish_reason(r), r->n_generated);
	snprintf(e.code, sizeof e.code, "incomplete_json");
	json_t *body = sg_routes_error_body(g->req->route, &e);
	if (g->stream) {
		/* The deltas sent so far are a valid JSON prefix; the stream ends with this error
		 * instead of [DONE]. */
		begin_stream(g);
		write_json_line(g, body, !g->ollama);
		return;
	}
	char *s = json_dumps(body, JSON_COMPACT);
	json_decref(body);
	sg_job_respond(g->job, 400, "application/json", s ? s : "", s ? strlen(s) : 0);
	free(s);
}

/* What the prefix cache reused, for the response headers (set before the status is). */
static void note_reuse(void *user, size_t reused, long diverged)
{
	sg_job *job = user;
	job->reused_prefix = (long)reused;
	job->prefix_miss = diverged;
}

void sg_routes_run_generation(sg_job *job)
{
	if (sg_srv_route_is_anthropic(job->req.route)) {
		sg_routes_anthropic_run(job);
		return;
	}
	const sg_srv_req *q = &job->req;
	gen g = {.job = job, .req = q, .m = job->model, .stream = q->stream};
	g.ollama = sg_srv_route_is_ollama(q->route);
	g.model_name = sg_srv_model_info_get(job->model)->name;
	g.lp = json_array();
	g.c_tokens = json_array();
	g.c_lps = json_array();
	g.c_tops = json_array();
	g.c_offs = json_array();
	g.calls = json_array();
	sg_agent_out ao = {.ud = &g, .text = ag_text, .reasoning = ag_reasoning, .call_start = ag_call_start,
			   .call_args = ag_call_args, .call_end = ag_call_end};
	sg_status st = SG_OK;
	if (job->agent && (st = sg_agent_run_new(job->agent, job->model, &ao, &g.ar))) {
		SG_WARN("serve: %s failed: %s", job->id, sg_last_error());
		finish_error(&g, st);
		goto done;
	}

	sg_gen_params p = sg_gen_default_params();
	p.prompt = job->prompt;
	p.n_prompt = job->n_prompt;
	p.sampler = q->sp;
	p.eos_ids = sg_srv_model_eos(job->model, &p.n_eos);
	p.stop = (const char *const *)q->stop;
	p.n_stop = q->n_stop;
	p.max_tokens = q->max_tokens;
	p.cancel = &job->cancel;
	p.on_event = on_event;
	p.user = &g;
	p.constraint = sg_agent_run_constraint(g.ar);
	sg_gen_result r;
	memset(&r, 0, sizeof r);
	/* the session key partitions the prefix cache */
	sg_lm_turn turn = {.session_key = job->session, .on_reuse = note_reuse, .user = job};
	st = sg_lm_generate(sg_srv_model_lm(job->model), &turn, &p, &r);
	if (g.ar && !st) sg_agent_run_finish(g.ar);
	if (job->user) sg_pool_publish(job->user);
	if (atomic_load(&job->cancel)) {
		SG_INFO("serve: %s cancelled after %zu tokens (client gone)", job->id, r.n_generated);
	} else if (st) {
		SG_WARN("serve: %s failed: %s", job->id, sg_last_error());
		finish_error(&g, st);
	} else if (job->agent && job->agent->json && !sg_agent_run_complete(g.ar)) {
		SG_WARN("serve: %s: the JSON answer was unfinished after %zu tokens (%s)", job->id, r.n_generated, finish_reason(&r));
		finish_incomplete(&g, &r);
	} else {
		finish_ok(&g, &r);
		double pre = r.n_prompt - r.n_cached;
		SG_INFO("serve: %s %s: prompt %zu tokens (%zu cached), prefill %.1f tok/s, ttft %.1f ms, %zu tokens at %.1f tok/s, %s",
			job->id, g.model_name, r.n_prompt, r.n_cached, r.prefill_s > 0 ? pre / r.prefill_s : 0, r.ttft_s * 1e3,
			r.n_generated, r.decode_s > 0 && r.n_generated > 1 ? (double)(r.n_generated - 1) / r.decode_s : 0,
			gen_finish_reason(&g, &r));
	}
done:
	sg_job_finish(job);
	sg_agent_run_free(g.ar);
	sg_free(g.reasoning);
	json_decref(g.calls);
	sg_free(g.text);
	json_decref(g.lp);
	json_decref(g.c_tokens);
	json_decref(g.c_lps);
	json_decref(g.c_tops);
	json_decref(g.c_offs);
}
