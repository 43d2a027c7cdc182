/* The Responses API (see routes_responses.h): the request translated into a chat request, the
 * answer written as output items (whole or as typed SSE events), and the store. */
#include "server/routes_responses.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/json.h"
#include "base/log.h"
#include "server/agent.h"
#include "server/response.h"
#include "server/routes_openai.h"

#define BAD "invalid_request_error"

#define TRY(x)                                                                                     \
	do {                                                                                       \
		if ((x) < 0) return err->status;                                                   \
	} while (0)

/* ---- the store ---- */

typedef struct rsp_entry {
	char id[48];
	char *session; /* the prefix-cache key its generation used [session_len], or NULL */
	size_t session_len;
	json_t *messages; /* the conversation through its output, as chat messages */
	json_t *input;    /* its input items */
	json_t *response; /* the response object */
	uint64_t used;    /* LRU stamp */
} rsp_entry;

struct sg_rsp_store {
	pthread_mutex_t mu;
	int cap, n;
	uint64_t clock;
	rsp_entry *e; /* [cap] */
};

sg_rsp_store *sg_rsp_store_new(int capacity)
{
	if (capacity < 1) capacity = 1;
	sg_rsp_store *s = sg_calloc(1, sizeof *s);
	if (!s) return NULL;
	s->e = sg_calloc((size_t)capacity, sizeof *s->e);
	if (!s->e) {
		sg_free(s);
		return NULL;
	}
	s->cap = capacity;
	pthread_mutex_init(&s->mu, NULL);
	return s;
}

static void entry_clear(rsp_entry *e)
{
	sg_free(e->session);
	json_decref(e->messages);
	json_decref(e->input);
	json_decref(e->response);
	memset(e, 0, sizeof *e);
}

void sg_rsp_store_free(sg_rsp_store *s)
{
	if (!s) return;
	for (int i = 0; i < s->n; i++) entry_clear(&s->e[i]);
	pthread_mutex_destroy(&s->mu);
	sg_free(s->e);
	sg_free(s);
}

int sg_rsp_store_count(sg_rsp_store *s)
{
	pthread_mutex_lock(&s->mu);
	int n = s->n;
	pthread_mutex_unlock(&s->mu);
	return n;
}

/* Under mu. */
static rsp_entry *find(sg_rsp_store *s, const char *id)
{
	for (int i = 0; i < s->n; i++)
		if (!strcmp(s->e[i].id, id)) return &s->e[i];
	return NULL;
}

/* Takes the entry (its references and session); the least recently used goes when full. */
static void store_put(sg_rsp_store *s, rsp_entry *in)
{
	pthread_mutex_lock(&s->mu);
	rsp_entry *e = find(s, in->id);
	if (!e && s->n < s->cap) e = &s->e[s->n++];
	if (!e) {
		e = &s->e[0];
		for (int i = 1; i < s->n; i++)
			if (s->e[i].used < e->used) e = &s->e[i];
		SG_INFO("serve: the response store is full (%d): %s goes", s->cap, e->id);
	}
	entry_clear(e);
	*e = *in;
	e->used = ++s->clock;
	pthread_mutex_unlock(&s->mu);
}

/* ---- the request ---- */

/* The text of a content value: a string, or an array of text parts (input_text, output_text,
 * text, refusal); other parts (images, files, audio) are refused. */
static int content_text(const json_t *c, const char *name, json_t **out, sg_srv_err *err)
{
	char nm[96];
	if (json_is_string(c)) {
		*out = json_incref((json_t *)c);
		return 0;
	}
	if (!json_is_array(c)) return -sg_srv_wrong_type(err, name, "a string or an array of content parts", c ? c : json_null());
	size_t total = 0, i;
	json_t *p;
	json_array_foreach(c, i, p) {
		snprintf(nm, sizeof nm, "%s[%zu]", name, i);
		if (!json_is_object(p)) return -sg_srv_wrong_type(err, nm, "an object", p);
		const char *t = NULL;
		snprintf(nm, sizeof nm, "%s[%zu].type", name, i);
		TRY(sg_srv_get_str(p, "type", nm, &t, err));
		if (!t) return sg_srv_err_set(err, 400, BAD, nm, "'%s' is required", nm);
		if (strcmp(t, "input_text") && strcmp(t, "output_text") && strcmp(t, "text") && strcmp(t, "refusal"))
			return sg_srv_err_set(err, 400, BAD, nm, "'%s' = '%.40s' is not supported: this server reads text parts "
								 "(input_text, output_text)", nm, t);
		json_t *tx = json_object_get(p, strcmp(t, "refusal") ? "text" : "refusal");
		snprintf(nm, sizeof nm, "%s[%zu].text", name, i);
		if (!json_is_string(tx)) return -sg_srv_wrong_type(err, nm, "a string", tx ? tx : json_null());
		total += json_string_length(tx);
	}
	char *buf = sg_malloc(total + 1);
	if (!buf) return sg_srv_oom(err);
	size_t off = 0;
	json_array_foreach(c, i, p) {
		const char *t = json_string_value(json_object_get(p, "type"));
		json_t *tx = json_object_get(p, strcmp(t, "refusal") ? "text" : "refusal");
		memcpy(buf + off, json_string_value(tx), json_string_length(tx));
		off += json_string_length(tx);
	}
	*out = json_stringn_nocheck(buf, off);
	sg_free(buf);
	return *out ? 0 : sg_srv_oom(err);
}

/* A required string field of an item (no NUL): 0 with *out, or the 400. */
static int item_str(const json_t *it, const char *key, const char *base, const char **out, sg_srv_err *err)
{
	char nm[96];
	snprintf(nm, sizeof nm, "%s.%s", base, key);
	*out = NULL;
	TRY(sg_srv_get_str(it, key, nm, out, err));
	if (!*out) return sg_srv_err_set(err, 400, BAD, nm, "'%s' (a string) is required", nm);
	return 0;
}

/* The name of the function call call_id in the chat messages so far, or NULL. */
static const char *call_name(const json_t *msgs, const char *call_id)
{
	size_t i, k;
	json_t *m, *c;
	json_array_foreach(msgs, i, m) json_array_foreach(json_object_get(m, "tool_calls"), k, c) {
		const char *id = json_string_value(json_object_get(c, "id"));
		if (id && !strcmp(id, call_id))
			return json_string_value(json_object_get(json_object_get(c, "function"), "name"));
	}
	return NULL;
}

/* One input item appended to the chat messages: a message, a function call (joined to the
 * assistant turn before it), a function call's output (a tool message); reasoning items are
 * dropped (templates drop past reasoning anyway). */
static int add_item(const json_t *it, size_t idx, json_t *msgs, sg_srv_err *err)
{
	char base[48], nm[96];
	snprintf(base, sizeof base, "input[%zu]", idx);
	if (!json_is_object(it)) return -sg_srv_wrong_type(err, base, "an object (an input item)", it);
	const char *type = NULL;
	snprintf(nm, sizeof nm, "%s.type", base);
	TRY(sg_srv_get_str(it, "type", nm, &type, err));
	if (!type && json_object_get(it, "role")) type = "message";
	if (!type) return sg_srv_err_set(err, 400, BAD, nm, "'%s' is required (message, function_call, function_call_output)", nm);
	if (!strcmp(type, "message")) {
		const char *role;
		if (item_str(it, "role", base, &role, err)) return err->status;
		snprintf(nm, sizeof nm, "%s.role", base);
		if (strcmp(role, "user") && strcmp(role, "system") && strcmp(role, "developer") && strcmp(role, "assistant"))
			return sg_srv_err_set(err, 400, BAD, nm, "'%s' = '%.40s' is not one of user, system, developer, assistant", nm,
					      role);
		json_t *text;
		snprintf(nm, sizeof nm, "%s.content", base);
		json_t *c = json_object_get(it, "content");
		if (!c || json_is_null(c)) return sg_srv_err_set(err, 400, BAD, nm, "'%s' is required", nm);
		if (content_text(c, nm, &text, err)) return err->status;
		json_array_append_new(msgs, json_pack("{s:s,s:o}", "role", role, "content", text));
		return 0;
	}
	if (!strcmp(type, "function_call")) {
		const char *name, *args, *call_id;
		if (item_str(it, "name", base, &name, err) || item_str(it, "call_id", base, &call_id, err)) return err->status;
		snprintf(nm, sizeof nm, "%s.arguments", base);
		json_t *a = json_object_get(it, "arguments");
		if (!json_is_string(a)) return -sg_srv_wrong_type(err, nm, "a string (JSON)", a ? a : json_null());
		args = json_string_value(a);
		/* templates index into the arguments: an object where the string holds one */
		json_t *ao = json_loads(args, 0, NULL);
		if (!json_is_object(ao)) {
			json_decref(ao);
			ao = json_incref(a);
		}
		json_t *call = json_pack("{s:s,s:s,s:{s:s,s:o}}", "id", call_id, "type", "function", "function", "name", name,
					 "arguments", ao);
		json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
		if (!last || strcmp(json_string_value(json_object_get(last, "role")), "assistant")) {
			last = json_pack("{s:s,s:s}", "role", "assistant", "content", "");
			json_array_append_new(msgs, last);
		}
		json_t *tc = json_object_get(last, "tool_calls");
		if (!tc) json_object_set_new(last, "tool_calls", tc = json_array());
		json_array_append_new(tc, call);
		return 0;
	}
	if (!strcmp(type, "function_call_output")) {
		const char *call_id;
		if (item_str(it, "call_id", base, &call_id, err)) return err->status;
		json_t *text;
		snprintf(nm, sizeof nm, "%s.output", base);
		json_t *o = json_object_get(it, "output");
		if (!o || json_is_null(o)) return sg_srv_err_set(err, 400, BAD, nm, "'%s' is required", nm);
		if (content_text(o, nm, &text, err)) return err->status;
		json_t *m = json_pack("{s:s,s:s,s:o}", "role", "tool", "tool_call_id", call_id, "content", text);
		const char *fn = call_name(msgs, call_id);
		if (fn) json_object_set_new(m, "name", json_string(fn));
		json_array_append_new(msgs, m);
		return 0;
	}
	if (!strcmp(type, "reasoning")) return 0;
	return sg_srv_err_set(err, 400, BAD, nm, "'%s' = '%.40s' is not supported: this server takes message, function_call, "
						 "function_call_output and reasoning items", nm, type);
}

/* input (a string or items) into chat messages after msgs' instructions; also the input items
 * kept for /input_items (a string becomes one user message item). */
static int parse_input(const json_t *b, json_t *msgs, json_t *items, sg_srv_err *err)
{
	json_t *in = json_object_get(b, "input");
	if (!in || json_is_null(in)) return sg_srv_err_set(err, 400, BAD, "input", "'input' is required");
	if (json_is_string(in)) {
		json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "user", "content", in));
		json_array_append_new(items, json_pack("{s:s,s:s,s:[{s:s,s:O}]}", "type", "message", "role", "user", "content",
						       "type", "input_text", "text", in));
		return 0;
	}
	if (!json_is_array(in)) return -sg_srv_wrong_type(err, "input", "a string or an array of input items", in);
	if (!json_array_size(in)) return sg_srv_err_set(err, 400, BAD, "input", "'input' must not be empty");
	size_t i;
	json_t *it;
	json_array_foreach(in, i, it) {
		if (add_item(it, i, msgs, err)) return err->status;
		json_t *c = json_deep_copy(it);
		if (!json_object_get(c, "type")) json_object_set_new(c, "type", json_string("message"));
		json_array_append_new(items, c);
	}
	return 0;
}

/* tools: the Responses shape ({type: "function", name, description, parameters, strict}) into
 * the chat shape; tools of other types (hosted tools: web_search, file_search, ...) cannot run
 * here and are left out, with a note. */
static int parse_tools(const json_t *b, json_t *chat, json_t *echo, sg_srv_req *r, sg_srv_err *err)
{
	json_t *t = json_object_get(b, "tools");
	json_t *ctools = json_array(), *etools = json_array();
	json_object_set_new(chat, "tools", ctools);
	json_object_set_new(echo, "tools", etools);
	if (!t || json_is_null(t)) return 0;
	if (!json_is_array(t)) return -sg_srv_wrong_type(err, "tools", "an array", t);
	size_t i, skipped = 0;
	json_t *tl;
	json_array_foreach(t, i, tl) {
		char nm[64];
		snprintf(nm, sizeof nm, "tools[%zu]", i);
		if (!json_is_object(tl)) return -sg_srv_wrong_type(err, nm, "an object", tl);
		const char *type = NULL;
		snprintf(nm, sizeof nm, "tools[%zu].type", i);
		TRY(sg_srv_get_str(tl, "type", nm, &type, err));
		if (!type) return sg_srv_err_set(err, 400, BAD, nm, "'%s' is required", nm);
		if (strcmp(type, "function")) {
			skipped++;
			continue;
		}
		const char *name = NULL;
		snprintf(nm, sizeof nm, "tools[%zu].name", i);
		TRY(sg_srv_get_str(tl, "name", nm, &name, err));
		if (!name || !*name) return sg_srv_err_set(err, 400, BAD, nm, "'%s' (a non-empty string) is required", nm);
		json_t *pa = json_object_get(tl, "parameters");
		snprintf(nm, sizeof nm, "tools[%zu].parameters", i);
		if (pa && !json_is_null(pa) && !json_is_object(pa)) return -sg_srv_wrong_type(err, nm, "an object (a JSON Schema)", pa);
		json_t *d = json_object_get(tl, "description");
		snprintf(nm, sizeof nm, "tools[%zu].description", i);
		if (d && !json_is_null(d) && !json_is_string(d)) return -sg_srv_wrong_type(err, nm, "a string", d);
		int strict = -1;
		snprintf(nm, sizeof nm, "tools[%zu].strict", i);
		TRY(sg_srv_get_bool(tl, "strict", nm, &strict, err));
		json_t *f = json_pack("{s:s}", "name", name);
		if (json_is_string(d)) json_object_set(f, "description", d);
		json_object_set_new(f, "parameters", pa && json_is_object(pa) ? json_deep_copy(pa) : json_pack("{s:s,s:{}}", "type", "object", "properties"));
		json_array_append_new(ctools, json_pack("{s:s,s:o}", "type", "function", "function", f));
		json_t *e = json_pack("{s:s,s:s,s:O,s:O,s:b}", "type", "function", "name", name, "description", json_is_string(d) ? d : json_null(),
				      "parameters", json_object_get(f, "parameters"), "strict", strict != 0);
		json_array_append_new(etools, e);
	}
	if (skipped)
		snprintf(r->note, sizeof r->note, "%zu tool%s of a hosted type (not function) left out: this server runs function tools",
			 skipped, skipped == 1 ? "" : "s");
	return 0;
}

/* tool_choice: "auto" | "none" | "required" | {type: "function", name}. */
static int parse_tool_choice(const json_t *b, json_t *chat, json_t *echo, sg_srv_err *err)
{
	json_t *tc = json_object_get(b, "tool_choice");
	if (!tc || json_is_null(tc)) {
		json_object_set_new(echo, "tool_choice", json_string("auto"));
		return 0;
	}
	if (json_is_string(tc)) {
		json_object_set(chat, "tool_choice", tc);
		json_object_set(echo, "tool_choice", tc);
		return 0;
	}
	if (!json_is_object(tc)) return -sg_srv_wrong_type(err, "tool_choice", "a string or an object", tc);
	const char *type = NULL, *name = NULL;
	TRY(sg_srv_get_str(tc, "type", "tool_choice.type", &type, err));
	if (!type || strcmp(type, "function"))
		return sg_srv_err_set(err, 400, BAD, "tool_choice.type",
				      "'tool_choice' as an object must be {\"type\": \"function\", \"name\": ...} (other tool types are not served)");
	TRY(sg_srv_get_str(tc, "name", "tool_choice.name", &name, err));
	if (!name) return sg_srv_err_set(err, 400, BAD, "tool_choice.name", "'tool_choice.name' (a string) is required");
	json_object_set_new(chat, "tool_choice", json_pack("{s:s,s:{s:s}}", "type", "function", "function", "name", name));
	json_object_set_new(echo, "tool_choice", json_pack("{s:s,s:s}", "type", "function", "name", name));
	return 0;
}

/* text.format: text | json_object | json_schema {name, schema, strict, description}. */
static int parse_text(const json_t *b, json_t *chat, json_t *echo, sg_srv_err *err)
{
	json_t *t = json_object_get(b, "text");
	json_object_set_new(echo, "text", json_pack("{s:{s:s}}", "format", "type", "text"));
	if (!t || json_is_null(t)) return 0;
	if (!json_is_object(t)) return -sg_srv_wrong_type(err, "text", "an object", t);
	const char *verb = NULL;
	TRY(sg_srv_get_str(t, "verbosity", "text.verbosity", &verb, err));
	json_t *f = json_object_get(t, "format");
	if (!f || json_is_null(f)) return 0;
	if (!json_is_object(f)) return -sg_srv_wrong_type(err, "text.format", "an object", f);
	const char *type = NULL;
	TRY(sg_srv_get_str(f, "type", "text.format.type", &type, err));
	if (!type) return sg_srv_err_set(err, 400, BAD, "text.format.type", "'text.format.type' is required");
	json_object_set_new(echo, "text", json_pack("{s:O}", "format", f));
	if (!strcmp(type, "text")) return 0;
	if (!strcmp(type, "json_object")) {
		json_object_set_new(chat, "response_format", json_pack("{s:s}", "type", "json_object"));
		return 0;
	}
	if (strcmp(type, "json_schema"))
		return sg_srv_err_set(err, 400, BAD, "text.format.type", "'text.format.type' = '%.40s' is not one of text, json_object, json_schema",
				      type);
	const char *name = NULL;
	TRY(sg_srv_get_str(f, "name", "text.format.name", &name, err));
	json_t *sc = json_object_get(f, "schema");
	if (!sc || json_is_null(sc))
		return sg_srv_err_set(err, 400, BAD, "text.format.schema", "'text.format.schema' (a JSON Schema) is required for json_schema");
	if (!json_is_object(sc) && !json_is_boolean(sc)) return -sg_srv_wrong_type(err, "text.format.schema", "an object", sc);
	int strict = -1;
	TRY(sg_srv_get_bool(f, "strict", "text.format.strict", &strict, err));
	json_t *js = json_pack("{s:s,s:O}", "name", name ? name : "output", "schema", sc);
	if (strict >= 0) json_object_set_new(js, "strict", json_boolean(strict));
	json_object_set_new(chat, "response_format", json_pack("{s:s,s:o}", "type", "json_schema", "json_schema", js));
	return 0;
}

/* metadata: at most 16 string values, keys up to 64 and values up to 512 characters. */
static int parse_metadata(const json_t *b, json_t *echo, sg_srv_err *err)
{
	json_t *m = json_object_get(b, "metadata");
	if (!m || json_is_null(m)) {
		json_object_set_new(echo, "metadata", json_object());
		return 0;
	}
	if (!json_is_object(m)) return -sg_srv_wrong_type(err, "metadata", "an object of strings", m);
	if (json_object_size(m) > 16)
		return sg_srv_err_set(err, 400, BAD, "metadata", "'metadata' has %zu keys; at most 16", json_object_size(m));
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)m, k, v) {
		if (strlen(k) > 64) return sg_srv_err_set(err, 400, BAD, "metadata", "a 'metadata' key is longer than 64 characters");
		if (!json_is_string(v)) return -sg_srv_wrong_type(err, "metadata", "an object of strings", v);
		if (json_string_length(v) > 512)
			return sg_srv_err_set(err, 400, BAD, "metadata", "'metadata[%.64s]' is longer than 512 characters", k);
	}
	json_object_set(echo, "metadata", m);
	return 0;
}

/* Fields copied to the chat body as they are (the same names and meaning there). */
static const char *const passthrough[] = {"model", "temperature", "top_p", "parallel_tool_calls", "stream", "seed", "top_k",
					  "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "stop",
					  "enable_thinking", "chat_template_kwargs", "speculative", "logit_bias"};

static int translate(const json_t *b, json_t *chat, json_t *rsp, sg_srv_req *r, sg_srv_err *err)
{
	json_t *echo = json_object_get(rsp, "echo");
	for (size_t i = 0; i < sizeof passthrough / sizeof *passthrough; i++) {
		json_t *v = json_object_get(b, passthrough[i]);
		if (v) json_object_set(chat, passthrough[i], v);
	}
	/* instructions: a system message first (a continued response does not inherit them) */
	json_t *msgs = json_array(), *items = json_array();
	json_object_set_new(chat, "messages", msgs);
	json_object_set_new(rsp, "input", items);
	const char *instr = NULL;
	size_t instr_len = 0;
	int given;
	TRY(given = sg_srv_get_text(b, "instructions", "instructions", &instr, &instr_len, err));
	if (given) {
		json_array_append_new(msgs, json_pack("{s:s,s:o}", "role", "system", "content", json_stringn(instr, instr_len)));
		json_object_set(echo, "instructions", json_object_get(b, "instructions"));
	} else json_object_set_new(echo, "instructions", json_null());
	json_object_set_new(rsp, "n_instructions", json_integer(given));
	if (parse_input(b, msgs, items, err)) return err->status;
	if (parse_tools(b, chat, echo, r, err) || parse_tool_choice(b, chat, echo, err) || parse_text(b, chat, echo, err) ||
	    parse_metadata(b, echo, err))
		return err->status;
	/* max_output_tokens */
	int64_t mt;
	TRY(given = sg_srv_get_int(b, "max_output_tokens", "max_output_tokens", 1, INT32_MAX, &mt, err));
	if (given) json_object_set_new(chat, "max_completion_tokens", json_integer(mt));
	json_object_set_new(echo, "max_output_tokens", given ? json_integer(mt) : json_null());
	/* reasoning: {effort, summary} */
	json_t *re = json_object_get(b, "reasoning");
	json_object_set_new(echo, "reasoning", json_pack("{s:n,s:n}", "effort", "summary"));
	if (re && !json_is_null(re)) {
		if (!json_is_object(re)) return -sg_srv_wrong_type(err, "reasoning", "an object", re);
		const char *eff = NULL, *sum = NULL;
		TRY(sg_srv_get_str(re, "effort", "reasoning.effort", &eff, err));
		TRY(sg_srv_get_str(re, "summary", "reasoning.summary", &sum, err));
		if (eff) {
			static const char *const levels[] = {"none", "minimal", "low", "medium", "high", "xhigh"};
			int ok = 0;
			for (size_t i = 0; i < 6; i++) ok |= !strcmp(eff, levels[i]);
			if (!ok)
				return sg_srv_err_set(err, 400, BAD, "reasoning.effort",
						      "'reasoning.effort' = '%.40s' is not one of none, minimal, low, medium, high, xhigh", eff);
			json_object_set_new(chat, "reasoning_effort", json_string(strcmp(eff, "xhigh") ? eff : "high"));
			json_object_set_new(json_object_get(echo, "reasoning"), "effort", json_string(eff));
		}
		if (sum) json_object_set_new(json_object_get(echo, "reasoning"), "summary", json_string(sum));
	}
	/* the session key: prompt_cache_key (what replaced user), else user */
	const char *key = NULL;
	TRY(sg_srv_get_str(b, "user", "user", &key, err));
	json_object_set_new(echo, "user", key ? json_string(key) : json_null());
	TRY(given = sg_srv_get_text(b, "prompt_cache_key", "prompt_cache_key", &key, &instr_len, err));
	if (given) json_object_set_new(chat, "user", json_stringn(key, instr_len));
	else if (json_object_get(b, "user")) json_object_set(chat, "user", json_object_get(b, "user"));
	/* the store */
	int store = 1;
	TRY(sg_srv_get_bool(b, "store", "store", &store, err));
	json_object_set_new(rsp, "store", json_boolean(store));
	json_object_set_new(echo, "store", json_boolean(store));
	const char *prev = NULL;
	TRY(sg_srv_get_str(b, "previous_response_id", "previous_response_id", &prev, err));
	json_object_set_new(echo, "previous_response_id", prev ? json_string(prev) : json_null());
	int bg = 0;
	TRY(sg_srv_get_bool(b, "background", "background", &bg, err));
	if (bg) return sg_srv_err_set(err, 400, BAD, "background", "'background' responses are not supported: leave it false");
	const char *trunc = NULL;
	TRY(sg_srv_get_str(b, "truncation", "truncation", &trunc, err));
	if (trunc && strcmp(trunc, "auto") && strcmp(trunc, "disabled"))
		return sg_srv_err_set(err, 400, BAD, "truncation", "'truncation' = '%.40s' is not one of auto, disabled", trunc);
	json_object_set_new(echo, "truncation", json_string("disabled"));
	json_t *inc = json_object_get(b, "include");
	if (inc && !json_is_null(inc) && !json_is_array(inc)) return -sg_srv_wrong_type(err, "include", "an array of strings", inc);
	/* logprobs of the answer's tokens: asked for by include, top_logprobs alternatives each */
	size_t k;
	json_t *iv;
	int lp = 0;
	json_array_foreach(inc, k, iv) lp |= json_is_string(iv) && !strcmp(json_string_value(iv), "message.output_text.logprobs");
	int64_t tl = 0;
	TRY(given = sg_srv_get_int(b, "top_logprobs", "top_logprobs", 0, SG_SAMPLER_MAX_LOGPROBS, &tl, err));
	json_object_set_new(echo, "top_logprobs", given ? json_integer(tl) : json_null());
	if (lp) {
		json_object_set_new(chat, "logprobs", json_true());
		json_object_set_new(chat, "top_logprobs", json_integer(tl));
	}
	/* echoed as given (numbers checked by the chat parser) */
	json_t *v;
	json_object_set_new(echo, "temperature", (v = json_object_get(b, "temperature")) && json_is_number(v) ? json_copy(v) : json_real(1));
	json_object_set_new(echo, "top_p", (v = json_object_get(b, "top_p")) && json_is_number(v) ? json_copy(v) : json_real(1));
	json_object_set_new(echo, "parallel_tool_calls", json_boolean(!json_is_false(json_object_get(b, "parallel_tool_calls"))));
	return 0;
}

int sg_responses_parse(const json_t *b, sg_srv_req *r, const sg_srv_limits *lim, sg_srv_err *err)
{
	json_t *chat = json_object(), *rsp = json_object();
	if (!chat || !rsp) {
		json_decref(chat);
		json_decref(rsp);
		return sg_srv_oom(err);
	}
	json_object_set_new(rsp, "echo", json_object());
	r->rsp = rsp;
	int st = translate(b, chat, rsp, r, err);
	if (!st) {
		/* the chat request the rest of the server runs */
		char note[sizeof r->note];
		memcpy(note, r->note, sizeof note);
		r->route = SG_ROUTE_OAI_CHAT;
		st = sg_openai_parse(chat, r, lim, err);
		r->route = SG_ROUTE_OAI_RESPONSES;
		if (!r->note[0]) memcpy(r->note, note, sizeof note);
	}
	json_decref(chat);
	return st < 0 ? err->status : st;
}

/* ---- previous_response_id ---- */

typedef struct rsp_ctx {
	sg_rsp_store *store;
} rsp_ctx;

int sg_responses_prepare(sg_rsp_store *s, sg_job *job, sg_srv_err *err)
{
	sg_srv_req *q = &job->req;
	rsp_ctx *cx = sg_calloc(1, sizeof *cx);
	if (!cx) return sg_srv_oom(err);
	cx->store = s;
	job->extra = cx;
	job->extra_free = sg_free;
	const char *prev = json_string_value(json_object_get(json_object_get(q->rsp, "echo"), "previous_response_id"));
	if (!prev) return 0;
	json_t *msgs = NULL;
	char *session = NULL;
	size_t session_len = 0;
	pthread_mutex_lock(&s->mu);
	rsp_entry *e = find(s, prev);
	if (e) {
		e->used = ++s->clock;
		msgs = json_deep_copy(e->messages);
		if (e->session && (session = sg_malloc(e->session_len + 1))) {
			memcpy(session, e->session, e->session_len + 1);
			session_len = e->session_len;
		}
	}
	pthread_mutex_unlock(&s->mu);
	if (!e) {
		sg_srv_err_set(err, 404, "not_found_error", "previous_response_id",
			       "previous response with id '%.100s' not found (it was never stored, was deleted, or the store "
			       "evicted it: SARAGOSSA_SERVE_RESPONSES_MAX)", prev);
		snprintf(err->code, sizeof err->code, "previous_response_not_found");
		return 404;
	}
	if (!msgs) return sg_srv_oom(err);
	/* the stored conversation goes after this request's instructions, before its input */
	size_t at = (size_t)json_integer_value(json_object_get(q->rsp, "n_instructions"));
	size_t i;
	json_t *m;
	json_array_foreach(msgs, i, m) json_array_insert(q->messages, at + i, m);
	json_decref(msgs);
	if (!q->user && session) {
		q->user = session;
		q->user_len = session_len;
	} else sg_free(session);
	return 0;
}

/* ---- the answer ---- */

typedef struct rgen {
	sg_job *job;
	const sg_srv_req *req;
	json_t *resp;   /* the response object; output inside */
	json_t *output; /* borrowed */
	int stream, begun, failed;
	long seq;
	int open;       /* the output index of the message or reasoning item being written, -1 none */
	int open_kind;  /* 1 message, 2 reasoning */
	char *buf;      /* its text */
	size_t len, cap;
	char *text, *reasoning; /* all the answer and reasoning text (the stored assistant turn) */
	size_t tlen, tcap, rlen, rcap;
	json_t *calls;    /* sg_resp_call_* record */
	json_t *call_out; /* call index -> output index */
	int n_items;      /* ids */
	json_t *lp_new;   /* logprobs of the tokens whose text has not come out yet */
	json_t *lp_item;  /* logprobs of the message being written */
	sg_agent_run *ar;
} rgen;

static const char *id_tail(const rgen *g)
{
	const char *u = strchr(g->job->id, '_');
	return u ? u + 1 : g->job->id;
}

static void emit(rgen *g, const char *type, json_t *o)
{
	if (!g->stream || !o) {
		json_decref(o);
		return;
	}
	json_object_set_new(o, "type", json_string(type));
	json_object_set_new(o, "sequence_number", json_integer(g->seq++));
	if (sg_resp_event(g->job, type, o)) g->failed = 1;
}

static void begin(rgen *g)
{
	if (g->begun || !g->stream) return;
	g->begun = 1;
	sg_job_begin(g->job, 200, "text/event-stream");
	emit(g, "response.created", json_pack("{s:O}", "response", g->resp));
	emit(g, "response.in_progress", json_pack("{s:O}", "response", g->resp));
}

static const char *item_id(const rgen *g, int idx)
{
	return json_string_value(json_object_get(json_array_get(g->output, (size_t)idx), "id"));
}

/* The content part being written: its text, and (an output_text part) the logprobs lp (a
 * borrowed array, copied; NULL: none yet). */
static json_t *text_part(const rgen *g, const char *s, size_t n, json_t *lp)
{
	if (g->open_kind == 2) return json_pack("{s:s,s:o}", "type", "reasoning_text", "text", sg_resp_string(s, n));
	return json_pack("{s:s,s:o,s:[],s:o}", "type", "output_text", "text", sg_resp_string(s, n), "annotations", "logprobs",
			 lp ? json_copy(lp) : json_array());
}

/* Ends the message or reasoning item being written. */
static void close_open(rgen *g)
{
	if (g->open < 0) return;
	json_t *item = json_array_get(g->output, (size_t)g->open);
	const char *id = item_id(g, g->open);
	json_t *done = g->open_kind == 2 ? json_pack("{s:s,s:i,s:i,s:o}", "item_id", id, "output_index", g->open, "content_index", 0,
						     "text", sg_resp_string(g->buf ? g->buf : "", g->len))
					 : json_pack("{s:s,s:i,s:i,s:o,s:o}", "item_id", id, "output_index", g->open, "content_index", 0,
						     "text", sg_resp_string(g->buf ? g->buf : "", g->len), "logprobs", json_copy(g->lp_item));
	emit(g, g->open_kind == 2 ? "response.reasoning_text.done" : "response.output_text.done", done);
	json_t *part = text_part(g, g->buf ? g->buf : "", g->len, g->lp_item);
	json_array_clear(g->lp_item);
	emit(g, "response.content_part.done",
	     json_pack("{s:s,s:i,s:i,s:O}", "item_id", id, "output_index", g->open, "content_index", 0, "part", part));
	json_object_set_new(item, "content", json_pack("[o]", part));
	json_object_set_new(item, "status", json_string("completed"));
	emit(g, "response.output_item.done", json_pack("{s:i,s:O}", "output_index", g->open, "item", item));
	g->open = -1;
	g->open_kind = 0;
	g->len = 0;
}

/* Opens a message (kind 1) or reasoning (kind 2) item unless one of that kind is open. */
static void open_item(rgen *g, int kind)
{
	if (g->open_kind == kind) return;
	close_open(g);
	begin(g);
	char id[64];
	snprintf(id, sizeof id, "%s_%s_%d", kind == 2 ? "rs" : "msg", id_tail(g), g->n_items++);
	json_t *item = kind == 2 ? json_pack("{s:s,s:s,s:[],s:[],s:s}", "id", id, "type", "reasoning", "summary", "content", "status",
					     "in_progress")
				 : json_pack("{s:s,s:s,s:s,s:s,s:[]}", "id", id, "type", "message", "status", "in_progress", "role",
					     "assistant", "content");
	g->open = (int)json_array_size(g->output);
	g->open_kind = kind;
	g->len = 0;
	json_array_append_new(g->output, item);
	emit(g, "response.output_item.added", json_pack("{s:i,s:O}", "output_index", g->open, "item", item));
	emit(g, "response.content_part.added", json_pack("{s:s,s:i,s:i,s:o}", "item_id", id, "output_index", g->open, "content_index",
							 0, "part", text_part(g, "", 0, NULL)));
}

static void put_text(rgen *g, int kind, const char *s, size_t n)
{
	if (!n) return;
	open_item(g, kind);
	if (sg_resp_buf_add(&g->buf, &g->len, &g->cap, s, n) ||
	    (kind == 1 ? sg_resp_buf_add(&g->text, &g->tlen, &g->tcap, s, n) : sg_resp_buf_add(&g->reasoning, &g->rlen, &g->rcap, s, n))) {
		g->failed = 1;
		return;
	}
	/* the tokens that made this text (reasoning tokens have none to give) */
	json_t *lp = g->lp_new;
	g->lp_new = json_array();
	if (kind == 1) json_array_extend(g->lp_item, lp);
	if (!g->stream || kind != 1) json_decref(lp);
	if (!g->stream) return;
	json_t *d = json_pack("{s:s,s:i,s:i,s:o}", "item_id", item_id(g, g->open), "output_index", g->open, "content_index", 0, "delta",
			      sg_resp_string(s, n));
	if (kind == 1) json_object_set_new(d, "logprobs", lp);
	emit(g, kind == 1 ? "response.output_text.delta" : "response.reasoning_text.delta", d);
}

static void ag_text(void *ud, const char *s, size_t n) { put_text(ud, 1, s, n); }
static void ag_reasoning(void *ud, const char *s, size_t n) { put_text(ud, 2, s, n); }

static void ag_call_start(void *ud, int index, const char *name)
{
	rgen *g = ud;
	close_open(g);
	begin(g);
	char id[64], call_id[64];
	snprintf(id, sizeof id, "fc_%s_%d", id_tail(g), g->n_items++);
	snprintf(call_id, sizeof call_id, "call_%s_%d", id_tail(g), index);
	sg_resp_call_start(g->calls, index, call_id, name);
	int at = (int)json_array_size(g->output);
	json_t *item = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "id", id, "type", "function_call", "status", "in_progress", "arguments", "",
				 "call_id", call_id, "name", name);
	json_array_append_new(g->output, item);
	while (json_array_size(g->call_out) <= (size_t)index) json_array_append_new(g->call_out, json_integer(-1));
	json_array_set_new(g->call_out, (size_t)index, json_integer(at));
	emit(g, "response.output_item.added", json_pack("{s:i,s:O}", "output_index", at, "item", item));
}

static int call_at(const rgen *g, int index)
{
	json_t *v = json_array_get(g->call_out, (size_t)index);
	return v ? (int)json_integer_value(v) : -1;
}

static void ag_call_args(void *ud, int index, const char *s, size_t n)
{
	rgen *g = ud;
	int at = call_at(g, index);
	if (at < 0) return;
	if (sg_resp_call_args(g->calls, index, s, n)) {
		g->failed = 1;
		return;
	}
	if (g->stream)
		emit(g, "response.function_call_arguments.delta",
	     json_pack("{s:s,s:i,s:o}", "item_id", item_id(g, at), "output_index", at, "delta", sg_resp_string(s, n)));
}

static void call_done(rgen *g, int index, const char *status)
{
	int at = call_at(g, index);
	if (at < 0) return;
	json_t *item = json_array_get(g->output, (size_t)at);
	json_t *args = json_object_get(json_array_get(g->calls, (size_t)index), "arguments");
	json_object_set(item, "arguments", args);
	json_object_set_new(item, "status", json_string(status));
	if (!strcmp(status, "completed"))
		emit(g, "response.function_call_arguments.done",
		     json_pack("{s:s,s:i,s:O,s:O}", "item_id", item_id(g, at), "output_index", at, "arguments", args, "name",
			       json_object_get(item, "name")));
	emit(g, "response.output_item.done", json_pack("{s:i,s:O}", "output_index", at, "item", item));
}

static void ag_call_end(void *ud, int index)
{
	rgen *g = ud;
	sg_resp_call_end(g->calls, index);
	call_done(g, index, "completed");
}

/* A call that will not end (cut short, or malformed: its text follows as text). */
static void ag_call_void(void *ud, int index)
{
	rgen *g = ud;
	int at = call_at(g, index);
	if (at < 0) return;
	if (!g->stream && at == (int)json_array_size(g->output) - 1) {
		/* nothing was announced: a whole answer leaves it out */
		json_array_remove(g->output, (size_t)at);
		json_array_set_new(g->call_out, (size_t)index, json_integer(-1));
		return;
	}
	call_done(g, index, "incomplete");
}

static int on_event(const sg_gen_event *ev, void *user)
{
	rgen *g = user;
	if (g->req->logprobs && ev->has_token && ev->sample)
		json_array_append_new(g->lp_new, sg_openai_logprob(g->job->model, ev->sample, g->req->top_logprobs));
	if (g->ar) sg_agent_run_feed(g->ar, ev->text, ev->len);
	else put_text(g, 1, ev->text, ev->len);
	return g->failed || atomic_load(&g->job->cancel);
}

/* The assistant turn of the output, as a chat message (for the store). */
static json_t *assistant_turn(const rgen *g)
{
	json_t *m = json_pack("{s:s,s:o}", "role", "assistant", "content", sg_resp_string(g->text ? g->text : "", g->tlen));
	if (g->rlen) json_object_set_new(m, "reasoning_content", sg_resp_string(g->reasoning, g->rlen));
	json_t *tc = json_array();
	size_t i;
	json_t *c;
	json_array_foreach(g->calls, i, c) {
		if (!json_is_true(json_object_get(c, "ended"))) continue;
		json_t *args = json_loads(json_string_value(json_object_get(c, "arguments")), 0, NULL);
		if (!json_is_object(args)) {
			json_decref(args);
			args = json_object();
		}
		json_array_append_new(tc, json_pack("{s:O,s:s,s:{s:O,s:o}}", "id", json_object_get(c, "id"), "type", "function", "function",
						    "name", json_object_get(c, "name"), "arguments", args));
	}
	if (json_array_size(tc)) json_object_set_new(m, "tool_calls", tc);
	else json_decref(tc);
	return m;
}

/* The response is kept for previous_response_id and GET: its conversation (without this
 * request's instructions), input items and object. */
static void save(rgen *g)
{
	const sg_srv_req *q = g->req;
	const rsp_ctx *cx = g->job->extra;
	if (!cx || !cx->store || !json_is_true(json_object_get(q->rsp, "store"))) return;
	rsp_entry e = {0};
	snprintf(e.id, sizeof e.id, "%s", g->job->id);
	size_t skip = (size_t)json_integer_value(json_object_get(q->rsp, "n_instructions"));
	e.messages = json_array();
	size_t i;
	json_t *m;
	json_array_foreach(q->messages, i, m) if (i >= skip) json_array_append_new(e.messages, json_deep_copy(m));
	json_array_append_new(e.messages, assistant_turn(g));
	e.input = json_deep_copy(json_object_get(q->rsp, "input"));
	e.response = json_deep_copy(g->resp);
	if (g->job->session_len && (e.session = sg_malloc(g->job->session_len + 1))) {
		memcpy(e.session, g->job->session, g->job->session_len + 1);
		e.session_len = g->job->session_len;
	}
	if (!e.messages || !e.input || !e.response) {
		SG_WARN("serve: %s: out of memory storing the response", g->job->id);
		entry_clear(&e);
		return;
	}
	store_put(cx->store, &e);
}

/* Tokens of the reasoning text (usage.output_tokens_details.reasoning_tokens). */
static size_t reasoning_tokens(const rgen *g)
{
	int32_t *ids = NULL;
	size_t n = 0;
	if (!g->rlen || sg_srv_model_tokenize(g->job->model, g->reasoning, g->rlen, 0, &ids, &n)) n = 0;
	sg_free(ids);
	return n;
}

static void finish_ok(rgen *g, const sg_gen_result *r)
{
	close_open(g);
	/* complete calls end the answer whatever came after them (as the chat route's "tool_calls") */
	int cut = !sg_agent_run_tool_finish(g->ar) && (r->finish == SG_GEN_LENGTH || sg_agent_run_cut(g->ar) ||
						       (g->req->json_format && !sg_agent_run_complete(g->ar)));
	json_object_set_new(g->resp, "status", json_string(cut ? "incomplete" : "completed"));
	if (cut) json_object_set_new(g->resp, "incomplete_details", json_pack("{s:s}", "reason", "max_output_tokens"));
	else json_object_set_new(g->resp, "completed_at", json_integer((json_int_t)time(NULL)));
	size_t rt = reasoning_tokens(g);
	json_object_set_new(g->resp, "usage",
			    json_pack("{s:I,s:{s:I},s:I,s:{s:I},s:I}", "input_tokens", (json_int_t)r->n_prompt, "input_tokens_details",
				      "cached_tokens", (json_int_t)r->n_cached, "output_tokens", (json_int_t)r->n_generated,
				      "output_tokens_details", "reasoning_tokens", (json_int_t)(rt < r->n_generated ? rt : r->n_generated),
				      "total_tokens", (json_int_t)(r->n_prompt + r->n_generated)));
	save(g);
	if (g->stream) {
		begin(g);
		emit(g, cut ? "response.incomplete" : "response.completed", json_pack("{s:O}", "response", g->resp));
	} else sg_resp_send(g->job, 200, json_incref(g->resp));
}

static void finish_error(rgen *g, sg_status st)
{
	sg_srv_err e;
	sg_resp_err_engine(&e, st);
	if (g->begun)
		emit(g, "error", json_pack("{s:o,s:s,s:o}", "code", e.code[0] ? json_string(e.code) : json_string(e.type), "message",
					   e.message, "param", json_null()));
	else sg_resp_send(g->job, e.status, sg_resp_error_body(g->req->route, &e));
}

/* The response object before any output: what the request asked for, echoed. */
static json_t *base_response(const sg_job *job)
{
	json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:n,s:n,s:s,s:[],s:n}", "id", job->id, "object", "response", "created_at",
			      (json_int_t)job->created, "status", "in_progress", "error", "incomplete_details", "model",
			      sg_srv_model_info_get(job->model)->name, "output", "usage");
	json_object_update(o, json_object_get(job->req.rsp, "echo"));
	return o;
}

void sg_responses_run(sg_job *job)
{
	const sg_srv_req *q = &job->req;
	rgen g = {.job = job, .req = q, .stream = q->stream, .open = -1};
	g.resp = base_response(job);
	g.output = json_object_get(g.resp, "output");
	g.calls = json_array();
	g.call_out = json_array();
	g.lp_new = json_array();
	g.lp_item = json_array();
	sg_agent_out ao = {.ud = &g, .text = ag_text, .reasoning = ag_reasoning, .call_start = ag_call_start,
			   .call_args = ag_call_args, .call_end = ag_call_end, .call_void = ag_call_void};
	sg_status st = SG_OK;
	if (job->agent && (st = sg_agent_run_new(job->agent, job->model, &ao, &g.ar))) {
		SG_WARN("serve: %s failed: %s", job->id, sg_last_error());
		finish_error(&g, st);
		goto done;
	}
	sg_gen_params p = sg_resp_gen_params(job);
	p.on_event = on_event;
	p.user = &g;
	p.constraint = sg_agent_run_constraint(g.ar);
	sg_gen_result r;
	st = sg_resp_generate(job, &p, &r);
	if (g.ar && !st) sg_agent_run_finish(g.ar, &r);
	if (atomic_load(&job->cancel)) {
		SG_INFO("serve: %s cancelled after %zu tokens (client gone)", job->id, r.n_generated);
	} else if (st) {
		SG_WARN("serve: %s failed: %s", job->id, sg_last_error());
		finish_error(&g, st);
	} else {
		finish_ok(&g, &r);
		sg_resp_log_done(job, sg_srv_model_info_get(job->model)->name, &r,
				 json_string_value(json_object_get(g.resp, "status")));
	}
done:
	sg_job_finish(job);
	sg_agent_run_free(g.ar);
	json_decref(g.resp);
	json_decref(g.calls);
	json_decref(g.call_out);
	json_decref(g.lp_new);
	json_decref(g.lp_item);
	sg_free(g.buf);
	sg_free(g.text);
	sg_free(g.reasoning);
}

/* ---- GET / DELETE ---- */

int sg_responses_item(sg_rsp_store *s, const char *method, const char *rest, json_t **out, sg_srv_err *err)
{
	*out = NULL;
	char id[64];
	const char *slash = strchr(rest, '/');
	size_t n = slash ? (size_t)(slash - rest) : strlen(rest);
	int items = slash && !strcmp(slash, "/input_items");
	if (!n || n >= sizeof id || (slash && !items))
		return sg_srv_err_set(err, 404, "not_found_error", NULL, "no route for %.20s /v1/responses/%.100s", method, rest);
	memcpy(id, rest, n);
	id[n] = 0;
	int del = !strcmp(method, "DELETE");
	if (del && items) return sg_srv_err_set(err, 405, BAD, NULL, "/v1/responses/{id}/input_items takes GET, not DELETE");
	pthread_mutex_lock(&s->mu);
	rsp_entry *e = find(s, id);
	if (e && del) {
		entry_clear(e);
		*e = s->e[--s->n];
		memset(&s->e[s->n], 0, sizeof *e);
		*out = json_pack("{s:s,s:s,s:b}", "id", id, "object", "response.deleted", "deleted", 1);
	} else if (e && items) {
		e->used = ++s->clock;
		json_t *data = json_deep_copy(e->input);
		/* every item gets an id (the ones a client sent without one are named by position) */
		size_t i;
		json_t *it;
		json_array_foreach(data, i, it) if (!json_is_string(json_object_get(it, "id"))) {
			char iid[96];
			snprintf(iid, sizeof iid, "item_%s_%zu", strchr(id, '_') ? strchr(id, '_') + 1 : id, i);
			json_object_set_new(it, "id", json_string(iid));
		}
		size_t cnt = json_array_size(data);
		*out = json_pack("{s:s,s:o,s:O,s:O,s:b}", "object", "list", "data", data, "first_id",
				 cnt ? json_object_get(json_array_get(data, 0), "id") : json_null(), "last_id",
				 cnt ? json_object_get(json_array_get(data, cnt - 1), "id") : json_null(), "has_more", 0);
	} else if (e) {
		e->used = ++s->clock;
		*out = json_deep_copy(e->response);
	}
	pthread_mutex_unlock(&s->mu);
	if (!e) {
		sg_srv_err_set(err, 404, "not_found_error", NULL, "response with id '%.100s' not found", id);
		snprintf(err->code, sizeof err->code, "response_not_found");
		return 404;
	}
	return *out ? 200 : sg_srv_oom(err);
}
