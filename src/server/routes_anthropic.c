/* The Anthropic Messages API (POST /v1/messages, POST /v1/messages/count_tokens), enough for
 * Claude Code: the request is converted to the OpenAI message shapes the chat templates take
 * (system blocks -> a system message, tool_use -> tool_calls, tool_result -> tool messages,
 * thinking -> reasoning_content), generated through the same agent machinery as the OpenAI
 * routes, and answered as content blocks (text, thinking, tool_use) or as the Messages SSE event
 * sequence: message_start, ping, (content_block_start, content_block_delta*, content_block_stop)*,
 * message_delta, message_stop. */
#include "server/routes_anthropic.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/json.h"
#include "base/log.h"
#include "server/agent.h"
#include "server/pool.h"
#include "server/response.h"

#define BAD "invalid_request_error"

/* ---- the request ---- */

static int bad(sg_srv_err *e, const char *param, const char *fmt, const char *a, const char *b)
{
	return sg_srv_err_set(e, 400, BAD, param, fmt, a, b);
}

static int want(sg_srv_err *e, const char *name, const char *what, const json_t *v)
{
	return sg_srv_err_set(e, 400, BAD, name, "%s: expected %s, got %s", name, what, v ? sg_json_type_name(v) : "nothing");
}

/* The 400 (returned) when o[key] is a string holding a NUL byte (JSON's \u0000), else 0: a
 * name, id or type holds none, and read as a C string it would end there ("tool\u0000x" would
 * be "tool"). Text is carried with its length instead. */
static int nul_in(const json_t *o, const char *key, const char *name, sg_srv_err *e)
{
	return sg_srv_has_nul(json_object_get(o, key)) ? -sg_srv_nul(e, name) : 0;
}

/* A text or an array of text blocks (system, tool_result content) as one string. cache_control and
 * citations are accepted and ignored. */
static int blocks_text(const json_t *v, const char *name, json_t **out, sg_srv_err *e)
{
	*out = NULL;
	if (!v || json_is_null(v)) {
		*out = json_string("");
		return 0;
	}
	if (json_is_string(v)) {
		*out = json_incref((json_t *)v);
		return 0;
	}
	if (!json_is_array(v)) return want(e, name, "a string or an array of text blocks", v);
	size_t total = 0, i;
	json_t *b;
	json_array_foreach(v, i, b) {
		char nm[96];
		snprintf(nm, sizeof nm, "%s.%zu", name, i);
		const char *type = json_string_value(json_object_get(b, "type"));
		if (!type) return want(e, nm, "a content block with a type", b);
		if (nul_in(b, "type", nm, e)) return e->status;
		if (!strcmp(type, "image") || !strcmp(type, "document"))
			return sg_srv_err_set(e, 400, BAD, nm, "%s: %s input is not supported: the model is text-only", nm, type);
		if (strcmp(type, "text") != 0)
			return sg_srv_err_set(e, 400, BAD, nm, "%s: a block of type '%.40s' is not allowed here (only text)", nm, type);
		if (!json_is_string(json_object_get(b, "text"))) return want(e, nm, "a text block with a string 'text'", b);
		total += json_string_length(json_object_get(b, "text")) + 1;
	}
	char *buf = sg_malloc(total + 1);
	if (!buf) return sg_srv_err_set(e, 500, "server_error", NULL, "out of memory");
	size_t o = 0;
	json_array_foreach(v, i, b) {
		json_t *t = json_object_get(b, "text");
		if (o) buf[o++] = '\n';
		memcpy(buf + o, json_string_value(t), json_string_length(t));
		o += json_string_length(t);
	}
	*out = json_stringn(buf, o);
	sg_free(buf);
	return *out ? 0 : sg_srv_err_set(e, 400, BAD, name, "%s: the text is not valid UTF-8", name);
}

/* The name of the tool_use block with this id in the earlier messages (tool messages carry it:
 * several templates print the function name with the result). */
static const char *tool_name_of(const json_t *msgs, const char *id)
{
	size_t i, k;
	json_t *m, *c;
	json_array_foreach(msgs, i, m) {
		json_array_foreach(json_object_get(m, "tool_calls"), k, c) {
			const char *cid = json_string_value(json_object_get(c, "id"));
			if (cid && !strcmp(cid, id))
				return json_string_value(json_object_get(json_object_get(c, "function"), "name"));
		}
	}
	return NULL;
}

/* One Anthropic message -> one or more OpenAI-shaped messages appended to out. */
static int convert_message(const json_t *msg, size_t idx, json_t *out, sg_srv_err *e)
{
	char name[96];
	snprintf(name, sizeof name, "messages.%zu", idx);
	if (!json_is_object(msg)) return want(e, name, "an object", msg);
	const char *role = json_string_value(json_object_get(msg, "role"));
	snprintf(name, sizeof name, "messages.%zu.role", idx);
	if (nul_in(msg, "role", name, e)) return e->status;
	if (!role || (strcmp(role, "user") && strcmp(role, "assistant")))
		return sg_srv_err_set(e, 400, BAD, name, "%s: must be 'user' or 'assistant'", name);
	int user = !strcmp(role, "user");
	json_t *content = json_object_get(msg, "content");
	snprintf(name, sizeof name, "messages.%zu.content", idx);
	if (json_is_string(content)) {
		json_array_append_new(out, json_pack("{s:s,s:O}", "role", role, "content", content));
		return 0;
	}
	if (!json_is_array(content)) return want(e, name, "a string or an array of content blocks", content);
	char *text = NULL, *thinking = NULL;
	size_t tl = 0, thl = 0;
	json_t *calls = json_array();
	size_t i;
	json_t *b;
	int st = 0;
	json_array_foreach(content, i, b) {
		char nm[96];
		snprintf(nm, sizeof nm, "messages.%zu.content.%zu", idx, i);
		const char *type = json_string_value(json_object_get(b, "type"));
		if (!json_is_object(b) || !type) {
			st = want(e, nm, "a content block with a type", b);
			break;
		}
		if ((st = nul_in(b, "type", nm, e))) break;
		/* the block's text, whole: it may hold NULs */
		const char *piece = NULL;
		size_t n = 0;
		char **acc = &text;
		size_t *accl = &tl;
		if (!strcmp(type, "text")) {
			piece = json_string_value(json_object_get(b, "text"));
			n = json_string_length(json_object_get(b, "text"));
			if (!piece) {
				st = want(e, nm, "a text block with a string 'text'", b);
				break;
			}
		} else if (!strcmp(type, "image") || !strcmp(type, "document")) {
			st = sg_srv_err_set(e, 400, BAD, nm, "%s: %s input is not supported: the model is text-only", nm, type);
			break;
		} else if (!strcmp(type, "thinking")) {
			if (user) {
				st = bad(e, nm, "%s: a %s block is only allowed in assistant messages", nm, type);
				break;
			}
			piece = json_string_value(json_object_get(b, "thinking"));
			n = json_string_length(json_object_get(b, "thinking"));
			acc = &thinking;
			accl = &thl;
		} else if (!strcmp(type, "redacted_thinking")) {
			continue;
		} else if (!strcmp(type, "tool_use")) {
			const char *id = json_string_value(json_object_get(b, "id"));
			const char *fn = json_string_value(json_object_get(b, "name"));
			json_t *input = json_object_get(b, "input");
			if ((st = nul_in(b, "id", nm, e)) || (st = nul_in(b, "name", nm, e))) break;
			if (user || !id || !fn || !json_is_object(input)) {
				st = user ? bad(e, nm, "%s: a %s block is only allowed in assistant messages", nm, type)
					  : want(e, nm, "a tool_use block with id, name and an input object", b);
				break;
			}
			json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:s,s:O}}", "id", id, "type", "function", "function",
							       "name", fn, "arguments", input));
			continue;
		} else if (!strcmp(type, "tool_result")) {
			const char *id = json_string_value(json_object_get(b, "tool_use_id"));
			if ((st = nul_in(b, "tool_use_id", nm, e))) break;
			if (!user || !id) {
				st = !user ? bad(e, nm, "%s: a %s block is only allowed in user messages", nm, type)
					   : want(e, nm, "a tool_result block with a tool_use_id", b);
				break;
			}
			json_t *rt;
			snprintf(nm, sizeof nm, "messages.%zu.content.%zu.content", idx, i);
			if ((st = blocks_text(json_object_get(b, "content"), nm, &rt, e))) break;
			json_t *tm = json_pack("{s:s,s:s,s:o}", "role", "tool", "tool_call_id", id, "content", rt);
			const char *tn = tool_name_of(out, id);
			if (tn) json_object_set_new(tm, "name", json_string(tn));
			json_array_append_new(out, tm);
			continue;
		} else {
			st = bad(e, nm, "%s: content block type '%.40s' is not supported", nm, type);
			break;
		}
		if (!piece) continue;
		char *nb = sg_realloc(*acc, *accl + n + 2);
		if (!nb) {
			st = sg_srv_err_set(e, 500, "server_error", NULL, "out of memory");
			break;
		}
		*acc = nb;
		if (*accl) nb[(*accl)++] = '\n';
		memcpy(nb + *accl, piece, n);
		*accl += n;
		nb[*accl] = 0;
	}
	if (!st && (text || thinking || json_array_size(calls) || !user)) {
		json_t *m = json_pack("{s:s,s:o}", "role", role, "content", json_stringn(text ? text : "", tl));
		if (thinking) json_object_set_new(m, "reasoning_content", json_stringn(thinking, thl));
		if (json_array_size(calls)) json_object_set(m, "tool_calls", calls);
		json_array_append_new(out, m);
	}
	sg_free(text);
	sg_free(thinking);
	json_decref(calls);
	return st;
}

/* tools: custom tools {name, description, input_schema} -> OpenAI function tools. Anthropic's
 * server tools (web search, code execution...: a versioned type and no input_schema) are not run
 * here and are left out. */
static int convert_tools(const json_t *tools, sg_srv_req *r, sg_srv_err *e)
{
	if (!tools || json_is_null(tools)) return 0;
	if (!json_is_array(tools)) return want(e, "tools", "an array", tools);
	json_t *out = json_array();
	size_t i;
	json_t *t;
	json_array_foreach(tools, i, t) {
		char nm[64];
		snprintf(nm, sizeof nm, "tools.%zu", i);
		if (!json_is_object(t)) {
			json_decref(out);
			return want(e, nm, "an object", t);
		}
		const char *type = json_string_value(json_object_get(t, "type"));
		json_t *schema = json_object_get(t, "input_schema");
		if (nul_in(t, "type", nm, e) || nul_in(t, "name", nm, e)) {
			json_decref(out);
			return e->status;
		}
		if (type && strcmp(type, "custom") != 0 && !schema) continue;
		const char *name = json_string_value(json_object_get(t, "name"));
		if (!name || !*name || !json_is_object(schema)) {
			json_decref(out);
			return want(e, nm, "a tool with a name and an input_schema object", t);
		}
		json_t *desc = json_object_get(t, "description");
		json_t *fn = json_pack("{s:s,s:O}", "name", name, "parameters", schema);
		if (json_is_string(desc)) json_object_set(fn, "description", desc);
		json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", fn));
	}
	if (json_array_size(out)) r->tools = out;
	else json_decref(out);
	return 0;
}

static int parse_tool_choice(const json_t *tc, sg_srv_req *r, sg_srv_err *e)
{
	r->parallel_tools = 1;
	if (!tc || json_is_null(tc)) return 0;
	const char *type = json_string_value(json_object_get(tc, "type"));
	if (!json_is_object(tc) || !type) return want(e, "tool_choice", "an object with a type", tc);
	if (nul_in(tc, "type", "tool_choice.type", e) || nul_in(tc, "name", "tool_choice.name", e)) return e->status;
	if (json_is_true(json_object_get(tc, "disable_parallel_tool_use"))) r->parallel_tools = 0;
	if (!strcmp(type, "auto")) r->tool_choice = SG_TOOLS_AUTO;
	else if (!strcmp(type, "none")) r->tool_choice = SG_TOOLS_NONE;
	else if (!strcmp(type, "any")) r->tool_choice = SG_TOOLS_REQUIRED;
	else if (!strcmp(type, "tool")) {
		const char *name = json_string_value(json_object_get(tc, "name"));
		if (!name) return want(e, "tool_choice.name", "a string", json_object_get(tc, "name"));
		r->tool_choice = SG_TOOLS_NAMED;
		r->tool_name = sg_strdup(name);
		if (!r->tool_name) return sg_srv_err_set(e, 500, "server_error", NULL, "out of memory");
	} else return bad(e, "tool_choice.type", "tool_choice.type: '%.40s' is not one of auto, any, tool, none%s", type, "");
	if (r->tool_choice >= SG_TOOLS_REQUIRED) {
		if (!r->tools) return bad(e, "tool_choice", "tool_choice: '%s' needs tools%s", type, "");
		if (r->tool_choice == SG_TOOLS_NAMED) {
			int found = 0;
			size_t i;
			json_t *t;
			json_array_foreach(r->tools, i, t) found |= !strcmp(
				json_string_value(json_object_get(json_object_get(t, "function"), "name")), r->tool_name);
			if (!found) return bad(e, "tool_choice.name", "tool_choice.name: '%.80s' is not in tools%s", r->tool_name, "");
		}
	}
	return 0;
}

static int get_number(const json_t *b, const char *key, double lo, double hi, double *out, sg_srv_err *e)
{
	json_t *v = json_object_get(b, key);
	if (!v || json_is_null(v)) return 0;
	if (!json_is_number(v)) return want(e, key, "a number", v);
	double d = json_number_value(v);
	if (!(d >= lo && d <= hi)) return sg_srv_err_set(e, 400, BAD, key, "%s: %g is outside [%g, %g]", key, d, lo, hi);
	*out = d;
	return -1; /* given */
}

int sg_anthropic_parse(const json_t *b, sg_srv_req *r, const sg_srv_limits *lim, sg_srv_err *e)
{
	int st;
	int count = r->route == SG_ROUTE_ANTHROPIC_COUNT;
	const char *model = json_string_value(json_object_get(b, "model"));
	if (!model) return want(e, "model", "a string", json_object_get(b, "model"));
	if (nul_in(b, "model", "model", e)) return e->status;
	if (!(r->model = sg_strdup(model))) return sg_srv_err_set(e, 500, "server_error", NULL, "out of memory");
	r->chat = 1;
	json_t *mt = json_object_get(b, "max_tokens");
	if (!count) {
		if (!json_is_integer(mt) || json_integer_value(mt) < 1)
			return want(e, "max_tokens", "an integer >= 1 (it is required)", mt);
		r->max_tokens_given = 1;
		r->max_tokens = json_integer_value(mt) < lim->max_tokens_cap ? (int32_t)json_integer_value(mt) : lim->max_tokens_cap;
	}
	json_t *msgs = json_object_get(b, "messages");
	if (!json_is_array(msgs)) return want(e, "messages", "an array", msgs);
	if (!json_array_size(msgs)) return sg_srv_err_set(e, 400, BAD, "messages", "messages: at least one message is required");
	r->messages = json_array();
	if (!r->messages) return sg_srv_err_set(e, 500, "server_error", NULL, "out of memory");
	json_t *sys = json_object_get(b, "system");
	if (sys && !json_is_null(sys)) {
		json_t *text;
		if ((st = blocks_text(sys, "system", &text, e))) return st;
		json_array_append_new(r->messages, json_pack("{s:s,s:o}", "role", "system", "content", text));
	}
	size_t i;
	json_t *m;
	json_array_foreach(msgs, i, m) if ((st = convert_message(m, i, r->messages, e))) return st;
	if ((st = convert_tools(json_object_get(b, "tools"), r, e))) return st;
	if ((st = parse_tool_choice(json_object_get(b, "tool_choice"), r, e))) return st;
	json_t *stops = json_object_get(b, "stop_sequences");
	if (stops && !json_is_null(stops)) {
		if (!json_is_array(stops)) return want(e, "stop_sequences", "an array of strings", stops);
		if (json_array_size(stops) > SG_SRV_MAX_STOP)
			return sg_srv_err_set(e, 400, BAD, "stop_sequences", "stop_sequences: at most %d are allowed", SG_SRV_MAX_STOP);
		json_t *sv;
		json_array_foreach(stops, i, sv) {
			if (!json_is_string(sv)) return want(e, "stop_sequences", "an array of strings", sv);
			if (!json_string_length(sv)) continue;
			if (sg_srv_dupn(&r->stop[r->n_stop], json_string_value(sv), json_string_length(sv), e) < 0) return e->status;
			r->stop_len[r->n_stop++] = json_string_length(sv);
		}
	}
	double d;
	if ((st = get_number(b, "temperature", 0, 1, &d, e)) > 0) return st;
	if (st) r->sp.temperature = (float)d;
	if ((st = get_number(b, "top_p", 0, 1, &d, e)) > 0) return st;
	if (st && d > 0) r->sp.top_p = (float)d;
	if ((st = get_number(b, "top_k", 0, 1 << 30, &d, e)) > 0) return st;
	if (st) r->sp.top_k = (int32_t)d;
	json_t *stream = json_object_get(b, "stream");
	if (stream && !json_is_null(stream)) {
		if (!json_is_boolean(stream)) return want(e, "stream", "a boolean", stream);
		r->stream = json_is_true(stream);
	}
	/* the session key: any text, NULs included */
	json_t *uid = json_object_get(json_object_get(b, "metadata"), "user_id");
	if (json_is_string(uid)) {
		if (sg_srv_dupn(&r->user, json_string_value(uid), json_string_length(uid), e) < 0) return e->status;
		r->user_len = json_string_length(uid);
	}
	json_t *th = json_object_get(b, "thinking");
	if (th && !json_is_null(th)) {
		const char *type = json_string_value(json_object_get(th, "type"));
		if (!type) return want(e, "thinking", "an object with a type", th);
		if (nul_in(th, "type", "thinking.type", e)) return e->status;
		if (!strcmp(type, "enabled")) {
			json_t *bt = json_object_get(th, "budget_tokens");
			if (!json_is_integer(bt) || json_integer_value(bt) < 1)
				return want(e, "thinking.budget_tokens", "an integer >= 1", bt);
			r->think = 1;
			r->reasoning_budget = json_integer_value(bt) > INT32_MAX ? INT32_MAX : (int32_t)json_integer_value(bt);
		} else if (!strcmp(type, "disabled")) r->think = 0;
		else if (!strcmp(type, "adaptive")) r->think = 1;
		else return bad(e, "thinking.type", "thinking.type: '%.40s' is not one of enabled, disabled%s", type, "");
		r->kwargs = json_pack("{s:b}", "enable_thinking", r->think);
	}
	return 0;
}

/* ---- the response ---- */

enum { B_NONE, B_TEXT, B_THINKING, B_TOOL };

typedef struct agen {
	sg_job *job;
	const sg_srv_req *req;
	const char *model_name;
	int stream, begun, failed;
	int placed;      /* the engine placed the state (the prefix cache answered) */
	int kind;        /* the open block's kind */
	int index;       /* the open block's index (stream) */
	int n_blocks;
	json_t *content; /* the blocks (non-stream) */
	char *buf;       /* the open block's text / thinking / input JSON */
	size_t len, cap;
	char tool_id[64], tool_name[256];
} agen;

static void sse(agen *g, const char *event, json_t *data)
{
	if (sg_resp_event(g->job, event, data)) g->failed = 1;
}

static json_t *usage(const sg_job *job, const sg_gen_result *r)
{
	size_t cached = r ? r->n_cached : job->reused_prefix > 0 ? (size_t)job->reused_prefix : 0;
	return json_pack("{s:I,s:I,s:I,s:i}", "input_tokens", (json_int_t)(r ? r->n_prompt : job->n_prompt) - (json_int_t)cached,
			 "output_tokens", (json_int_t)(r ? r->n_generated : 0), "cache_read_input_tokens", (json_int_t)cached,
			 "cache_creation_input_tokens", 0);
}

static void begin(agen *g)
{
	if (g->begun || !g->stream) return;
	g->begun = 1;
	sg_job_begin(g->job, 200, "text/event-stream");
	sse(g, "message_start",
	    json_pack("{s:s,s:{s:s,s:s,s:s,s:s,s:[],s:n,s:n,s:o}}", "type", "message_start", "message", "id", g->job->id, "type",
		      "message", "role", "assistant", "model", g->model_name, "content", "stop_reason", "stop_sequence", "usage",
		      usage(g->job, NULL)));
	sse(g, "ping", json_pack("{s:s}", "type", "ping"));
}

static void close_block(agen *g)
{
	if (g->kind == B_NONE) return;
	if (g->stream) {
		sse(g, "content_block_stop", json_pack("{s:s,s:i}", "type", "content_block_stop", "index", g->index));
	} else {
		json_t *b = NULL;
		json_t *t = json_stringn(g->buf ? g->buf : "", g->len);
		if (!t) t = json_string("");
		if (g->kind == B_TEXT) b = json_pack("{s:s,s:o}", "type", "text", "text", t);
		else if (g->kind == B_THINKING) b = json_pack("{s:s,s:o,s:s}", "type", "thinking", "thinking", t, "signature", "");
		else {
			json_t *in = json_loadb(g->buf ? g->buf : "{}", g->len ? g->len : 2, 0, NULL);
			json_decref(t);
			b = json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id", g->tool_id, "name", g->tool_name, "input",
				      json_is_object(in) ? in : json_object());
			if (in && !json_is_object(in)) json_decref(in);
		}
		json_array_append_new(g->content, b);
	}
	g->kind = B_NONE;
	g->len = 0;
	g->n_blocks++;
}

static void open_block(agen *g, int kind)
{
	close_block(g);
	g->kind = kind;
	g->index = g->n_blocks;
	if (!g->stream) return;
	begin(g);
	json_t *cb;
	if (kind == B_TEXT) cb = json_pack("{s:s,s:s}", "type", "text", "text", "");
	else if (kind == B_THINKING) cb = json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking", "", "signature", "");
	else cb = json_pack("{s:s,s:s,s:s,s:{}}", "type", "tool_use", "id", g->tool_id, "name", g->tool_name, "input");
	sse(g, "content_block_start", json_pack("{s:s,s:i,s:o}", "type", "content_block_start", "index", g->index, "content_block", cb));
}

static void delta(agen *g, int kind, const char *s, size_t n)
{
	if (!n) return;
	if (g->kind != kind) open_block(g, kind);
	if (!g->stream) {
		if (g->len + n + 1 > g->cap) {
			size_t c = g->cap ? g->cap * 2 : 1024;
			while (c < g->len + n + 1) c *= 2;
			char *nb = sg_realloc(g->buf, c);
			if (!nb) {
				g->failed = 1;
				return;
			}
			g->buf = nb;
			g->cap = c;
		}
		memcpy(g->buf + g->len, s, n);
		g->len += n;
		return;
	}
	json_t *t = json_stringn(s, n);
	if (!t) return; /* the detokenizer releases complete UTF-8 only; nothing to send otherwise */
	json_t *d = kind == B_TEXT       ? json_pack("{s:s,s:o}", "type", "text_delta", "text", t)
		    : kind == B_THINKING ? json_pack("{s:s,s:o}", "type", "thinking_delta", "thinking", t)
					 : json_pack("{s:s,s:o}", "type", "input_json_delta", "partial_json", t);
	sse(g, "content_block_delta", json_pack("{s:s,s:i,s:o}", "type", "content_block_delta", "index", g->index, "delta", d));
}

static void a_text(void *ud, const char *s, size_t n)
{
	delta(ud, B_TEXT, s, n);
}

static void a_reasoning(void *ud, const char *s, size_t n)
{
	delta(ud, B_THINKING, s, n);
}

static void a_call_start(void *ud, int index, const char *name)
{
	agen *g = ud;
	snprintf(g->tool_id, sizeof g->tool_id, "toolu_%s_%d", g->job->id + 4, index);
	snprintf(g->tool_name, sizeof g->tool_name, "%s", name);
	open_block(g, B_TOOL);
}

static void a_call_args(void *ud, int index, const char *s, size_t n)
{
	(void)index;
	delta(ud, B_TOOL, s, n);
}

static void a_call_end(void *ud, int index)
{
	(void)index;
	agen *g = ud;
	if (g->kind == B_TOOL && !g->stream && !g->len) delta(g, B_TOOL, "{}", 2);
	close_block(g);
}

/* A call that will not end (cut short, or malformed): a whole message leaves its block out (an
 * input that is not the call's would break the tool's schema); a stream closes the block it
 * announced, and stop_reason says why (max_tokens). */
static void a_call_void(void *ud, int index)
{
	(void)index;
	agen *g = ud;
	if (g->kind != B_TOOL) return;
	if (g->stream) {
		close_block(g);
		return;
	}
	g->kind = B_NONE;
	g->len = 0;
}

typedef struct ev_ctx {
	agen *g;
	sg_agent_run *ar;
} ev_ctx;

static int on_event(const sg_gen_event *ev, void *user)
{
	ev_ctx *c = user;
	sg_agent_run_feed(c->ar, ev->text, ev->len);
	return c->g->failed || atomic_load(&c->g->job->cancel);
}

static void respond_error(agen *g, int status, const char *type, const char *msg)
{
	sg_srv_err e;
	sg_srv_err_set(&e, status, type, NULL, "%s", msg);
	json_t *body = sg_resp_error_body(g->req->route, &e);
	if (g->begun) sse(g, "error", body);
	else sg_resp_send(g->job, status, body);
}

/* The prefix cache has placed the state: message_start reports what it reused. */
static void reused(void *user, size_t n, long diverged)
{
	agen *g = user;
	g->job->reused_prefix = (long)n;
	g->job->prefix_miss = diverged;
	g->placed = 1;
	begin(g);
}

void sg_anthropic_run(sg_job *job)
{
	const sg_srv_req *q = &job->req;
	agen g = {.job = job, .req = q, .stream = q->stream};
	g.model_name = q->model && *q->model ? q->model : sg_srv_model_info_get(job->model)->name;
	g.content = json_array();
	sg_agent_out ao = {.ud = &g, .text = a_text, .reasoning = a_reasoning, .call_start = a_call_start,
			   .call_args = a_call_args, .call_end = a_call_end, .call_void = a_call_void};
	sg_agent_run *ar = NULL;
	sg_status st = sg_agent_run_new(job->agent, job->model, &ao, &ar);
	if (st) {
		respond_error(&g, 500, "api_error", sg_last_error());
		goto done;
	}
	ev_ctx ctx = {&g, ar};
	sg_gen_params p = sg_resp_gen_params(job);
	p.on_event = on_event;
	p.user = &ctx;
	p.constraint = sg_agent_run_constraint(ar);
	/* the prefix cache: the session's longest cached prefix is restored before message_start,
	 * whose usage reports it, goes out (before the prefill: the client sees the stream open) */
	sg_lm_turn turn = {.session_key = job->session, .session_key_len = job->session_len, .on_reuse = reused, .user = &g};
	sg_gen_result r;
	st = sg_resp_reserve_draft(job, &p);
	if (!st) st = sg_lm_generate(sg_srv_model_lm(job->model), &turn, &p, &r);
	if (job->user) sg_pool_publish(job->user);
	if (st && !g.placed) {
		/* the memory guard refused the KV rows, or the cache could not place the state */
		respond_error(&g, st == SG_ERR_NOMEM ? 503 : 500, st == SG_ERR_NOMEM ? "overloaded_error" : "api_error",
			      sg_last_error());
		goto done;
	}
	if (atomic_load(&job->cancel)) {
		SG_INFO("serve: %s cancelled after %zu tokens (client gone)", job->id, r.n_generated);
		goto done;
	}
	if (st) {
		SG_WARN("serve: %s failed: %s", job->id, sg_last_error());
		respond_error(&g, st == SG_ERR_RANGE || st == SG_ERR_INVALID_ARG ? 400 : 500,
			      st == SG_ERR_RANGE || st == SG_ERR_INVALID_ARG ? BAD : "api_error", sg_last_error());
		goto done;
	}
	sg_agent_run_finish(ar, &r);
	close_block(&g);
	const char *reason = "end_turn";
	json_t *stop_seq = json_null();
	if (sg_agent_run_tool_finish(ar)) reason = "tool_use";
	else if (r.finish == SG_GEN_LENGTH) reason = "max_tokens";
	else if (r.stop_index >= 0 && (size_t)r.stop_index < q->n_stop) {
		reason = "stop_sequence";
		stop_seq = json_stringn(q->stop[r.stop_index], q->stop_len[r.stop_index]);
	}
	if (g.stream) {
		json_t *u = usage(job, &r);
		sse(&g, "message_delta",
		    json_pack("{s:s,s:{s:s,s:o},s:o}", "type", "message_delta", "delta", "stop_reason", reason, "stop_sequence",
			      stop_seq, "usage", u));
		sse(&g, "message_stop", json_pack("{s:s}", "type", "message_stop"));
	} else {
		json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:O,s:s,s:o,s:o}", "id", job->id, "type", "message", "role", "assistant",
				      "model", g.model_name, "content", g.content, "stop_reason", reason, "stop_sequence", stop_seq,
				      "usage", usage(job, &r));
		sg_resp_send(job, 200, o);
	}
	SG_INFO("serve: %s %s: prompt %zu tokens (%zu cached), %zu tokens, %s", job->id, g.model_name, r.n_prompt, r.n_cached,
		r.n_generated, reason);
done:
	sg_job_finish(job);
	sg_agent_run_free(ar);
	json_decref(g.content);
	sg_free(g.buf);
}
