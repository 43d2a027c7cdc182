/* Request bodies: the fields and parts every API's parser shares (see request.h). */
#include "server/request.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/json.h"
#include "saragossa.h"

#define BAD "invalid_request_error"

int sg_srv_route_is_ollama(sg_srv_route r)
{
	return (r >= SG_ROUTE_OLLAMA_CHAT && r <= SG_ROUTE_OLLAMA_EMBED) || r == SG_ROUTE_OLLAMA_EMBEDDINGS ||
	       (r >= SG_ROUTE_OLLAMA_PULL && r <= SG_ROUTE_OLLAMA_COPY);
}

int sg_srv_route_is_anthropic(sg_srv_route r)
{
	return r == SG_ROUTE_ANTHROPIC_MESSAGES || r == SG_ROUTE_ANTHROPIC_COUNT;
}

int sg_srv_err_set(sg_srv_err *e, int status, const char *type, const char *param, const char *fmt, ...)
{
	e->status = status;
	e->type = type ? type : BAD;
	snprintf(e->param, sizeof e->param, "%s", param ? param : "");
	e->code[0] = 0;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof e->message, fmt, ap);
	va_end(ap);
	return status;
}

void sg_srv_req_free(sg_srv_req *r)
{
	sg_free(r->model);
	json_decref(r->messages);
	json_decref(r->tools);
	sg_free(r->prompt);
	sg_free(r->prompt_ids);
	sg_free(r->system);
	sg_free(r->bias);
	for (size_t i = 0; i < r->n_stop; i++) sg_free(r->stop[i]);
	sg_free(r->user);
	json_decref(r->schema);
	sg_free(r->tool_name);
	json_decref(r->kwargs);
	sg_free(r->prediction);
	json_decref(r->rsp);
	memset(r, 0, sizeof *r);
}

int sg_srv_req_begin(sg_srv_route route, const char *body, size_t len, const sg_srv_limits *lim, sg_srv_req *req,
		     json_t **json, sg_srv_err *err)
{
	*json = NULL;
	memset(req, 0, sizeof *req);
	memset(err, 0, sizeof *err);
	req->route = route;
	req->sp = sg_sampler_default_params();
	/* OpenAI's defaults: plain softmax sampling at temperature 1, no filters. */
	req->sp.temperature = 1.0f;
	req->sp.top_k = 0;
	req->sp.top_p = 1.0f;
	req->sp.min_p = 0.0f;
	req->sp.penalty_last_n = -1;
	req->max_tokens = lim->max_tokens_cap;
	req->think = -1;
	req->parallel_tools = 1;
	req->spec = -1;
	return sg_srv_body_object(body, len, json, err);
}

int sg_srv_body_object(const char *body, size_t len, json_t **json, sg_srv_err *err)
{
	*json = NULL;
	if (!body || len == 0) return sg_srv_err_set(err, 400, BAD, NULL, "the request body is empty: a JSON object is expected");
	json_t *b;
	if (sg_json_parse(body, len, "request body", &b) != SG_OK)
		return sg_srv_err_set(err, 400, BAD, NULL, "%s", sg_last_error());
	if (!json_is_object(b)) {
		int st = sg_srv_err_set(err, 400, BAD, NULL, "the request body must be a JSON object, got %s", sg_json_type_name(b));
		json_decref(b);
		return st;
	}
	*json = b;
	return 0;
}

int sg_srv_wrong_type(sg_srv_err *e, const char *name, const char *want, const json_t *v)
{
	return -sg_srv_err_set(e, 400, BAD, name, "'%s' must be %s, got %s", name, want, sg_json_type_name(v));
}

int sg_srv_get_num(const json_t *o, const char *key, const char *name, double lo, double hi, double *out, sg_srv_err *e)
{
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v)) return 0;
	if (!json_is_number(v)) return sg_srv_wrong_type(e, name, "a number", v);
	double d = json_number_value(v);
	if (!isfinite(d) || d < lo || d > hi)
		return -sg_srv_err_set(e, 400, BAD, name, "'%s' = %g is outside [%g, %g]", name, d, lo, hi);
	*out = d;
	return 1;
}

int sg_srv_get_int(const json_t *o, const char *key, const char *name, int64_t lo, int64_t hi, int64_t *out, sg_srv_err *e)
{
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v)) return 0;
	int64_t x;
	if (json_is_integer(v)) x = json_integer_value(v);
	else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && fabs(json_real_value(v)) < 9e15)
		x = (int64_t)json_real_value(v);
	else return sg_srv_wrong_type(e, name, "an integer", v);
	if (x < lo || x > hi)
		return -sg_srv_err_set(e, 400, BAD, name, "'%s' = %lld is outside [%lld, %lld]", name, (long long)x,
				       (long long)lo, (long long)hi);
	*out = x;
	return 1;
}

int sg_srv_get_bool(const json_t *o, const char *key, const char *name, int *out, sg_srv_err *e)
{
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v)) return 0;
	if (!json_is_boolean(v)) return sg_srv_wrong_type(e, name, "a boolean", v);
	*out = json_is_true(v);
	return 1;
}

int sg_srv_has_nul(const json_t *v)
{
	return json_is_string(v) && memchr(json_string_value(v), 0, json_string_length(v)) != NULL;
}

int sg_srv_nul(sg_srv_err *e, const char *name)
{
	return -sg_srv_err_set(e, 400, BAD, name, "'%s' must not contain U+0000 (a NUL character)", name);
}

int sg_srv_get_str(const json_t *o, const char *key, const char *name, const char **out, sg_srv_err *e)
{
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v)) return 0;
	if (!json_is_string(v)) return sg_srv_wrong_type(e, name, "a string", v);
	if (sg_srv_has_nul(v)) return sg_srv_nul(e, name);
	*out = json_string_value(v);
	return 1;
}

int sg_srv_get_text(const json_t *o, const char *key, const char *name, const char **out, size_t *len, sg_srv_err *e)
{
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v)) return 0;
	if (!json_is_string(v)) return sg_srv_wrong_type(e, name, "a string", v);
	*out = json_string_value(v);
	*len = json_string_length(v);
	return 1;
}

#define TRY(x)                                                                                     \
	do {                                                                                       \
		if ((x) < 0) return err->status;                                                   \
	} while (0)

static int spec_type(const char *t, const char *name, int *out, sg_srv_err *err)
{
	if (!strcmp(t, "ngram")) *out = 1;
	else if (!strcmp(t, "draft")) *out = 2;
	else if (!strcmp(t, "mtp")) *out = 3;
	else if (!strcmp(t, "none")) *out = 0;
	else return sg_srv_err_set(err, 400, BAD, name, "'%s' = '%.40s' is not one of ngram, draft, mtp, none", name, t);
	return 0;
}

int sg_srv_parse_spec(const json_t *v, const char *name, sg_srv_req *r, sg_srv_err *err)
{
	if (!v || json_is_null(v)) return 0;
	char nm[96];
	if (json_is_string(v)) {
		if (sg_srv_has_nul(v)) return -sg_srv_nul(err, name);
		return spec_type(json_string_value(v), name, &r->spec, err);
	}
	if (!json_is_object(v)) return -sg_srv_wrong_type(err, name, "a string or an object", v);
	const char *t = NULL;
	snprintf(nm, sizeof nm, "%s.type", name);
	TRY(sg_srv_get_str(v, "type", nm, &t, err));
	int st;
	if (t && (st = spec_type(t, nm, &r->spec, err))) return st;
	if (!t) r->spec = 1;
	int64_t x = 0;
	int given;
	snprintf(nm, sizeof nm, "%s.draft_max", name);
	TRY(given = sg_srv_get_int(v, "draft_max", nm, 1, 256, &x, err));
	if (given) r->draft_max = (int32_t)x;
	snprintf(nm, sizeof nm, "%s.draft_min", name);
	TRY(given = sg_srv_get_int(v, "draft_min", nm, 1, 256, &x, err));
	if (given) r->draft_min = (int32_t)x;
	if (r->draft_max && r->draft_min > r->draft_max)
		return sg_srv_err_set(err, 400, BAD, name, "'%s': draft_min %d is above draft_max %d", name, r->draft_min, r->draft_max);
	return 0;
}

int sg_srv_parse_prediction(const json_t *v, sg_srv_req *r, sg_srv_err *err)
{
	if (!v || json_is_null(v)) return 0;
	if (!json_is_object(v)) return -sg_srv_wrong_type(err, "prediction", "an object", v);
	const char *t = NULL;
	TRY(sg_srv_get_str(v, "type", "prediction.type", &t, err));
	if (!t || strcmp(t, "content"))
		return sg_srv_err_set(err, 400, BAD, "prediction.type", "'prediction.type' must be 'content'");
	json_t *c = json_object_get(v, "content");
	if (json_is_string(c)) return sg_srv_dupn(&r->prediction, json_string_value(c), json_string_length(c), err) < 0 ? err->status : (r->prediction_len = json_string_length(c), 0);
	if (!json_is_array(c)) return -sg_srv_wrong_type(err, "prediction.content", "a string or an array of text parts", c);
	size_t total = 0, i;
	json_t *part;
	json_array_foreach(c, i, part) {
		json_t *tx = json_object_get(part, "text");
		if (!json_is_object(part) || !json_is_string(tx))
			return -sg_srv_wrong_type(err, "prediction.content[]", "an object with 'text'", part);
		total += json_string_length(tx);
	}
	r->prediction = sg_malloc(total + 1);
	if (!r->prediction) return sg_srv_oom(err);
	json_array_foreach(c, i, part) {
		json_t *tx = json_object_get(part, "text");
		memcpy(r->prediction + r->prediction_len, json_string_value(tx), json_string_length(tx));
		r->prediction_len += json_string_length(tx);
	}
	r->prediction[total] = 0;
	return 0;
}

int sg_srv_oom(sg_srv_err *err)
{
	return sg_srv_err_set(err, 500, "server_error", NULL, "out of memory");
}

int sg_srv_dup(char **dst, const char *s, sg_srv_err *err)
{
	*dst = sg_strdup(s);
	return *dst ? 0 : -sg_srv_oom(err);
}

int sg_srv_dupn(char **dst, const char *s, size_t n, sg_srv_err *err)
{
	*dst = sg_malloc(n + 1);
	if (!*dst) return -sg_srv_oom(err);
	if (n) memcpy(*dst, s, n);
	(*dst)[n] = 0;
	return 0;
}

/* One stop string appended with its length. */
static int add_stop(sg_srv_req *r, const json_t *s, const char *name, size_t i, sg_srv_err *err)
{
	if (json_string_length(s) > 1024)
		return -sg_srv_err_set(err, 400, BAD, name, "'%s[%zu]' is longer than 1024 bytes", name, i);
	if (sg_srv_dupn(&r->stop[r->n_stop], json_string_value(s), json_string_length(s), err) < 0) return -1;
	r->stop_len[r->n_stop++] = json_string_length(s);
	return 0;
}

/* stop: a string or an array of strings (OpenAI), the array form only for Ollama. */
int sg_srv_parse_stop(const json_t *v, const char *name, sg_srv_req *r, sg_srv_err *err)
{
	if (!v || json_is_null(v)) return 0;
	if (json_is_string(v)) return json_string_length(v) ? add_stop(r, v, name, 0, err) : 0;
	if (!json_is_array(v)) return sg_srv_wrong_type(err, name, "a string or an array of strings", v);
	if (json_array_size(v) > SG_SRV_MAX_STOP)
		return -sg_srv_err_set(err, 400, BAD, name, "'%s' has %zu entries; at most %d are allowed", name,
				       json_array_size(v), SG_SRV_MAX_STOP);
	size_t i;
	json_t *s;
	json_array_foreach(v, i, s) {
		if (!json_is_string(s)) {
			char n[64];
			snprintf(n, sizeof n, "%s[%zu]", name, i);
			return sg_srv_wrong_type(err, n, "a string", s);
		}
		if (json_string_length(s) && add_stop(r, s, name, i, err) < 0) return -1;
	}
	return 0;
}

/* message.content: a string, null, or an array of {type:"text", text}; flattened to a string. */
static int flatten_content(json_t *msg, size_t idx, sg_srv_err *err)
{
	char name[96];
	snprintf(name, sizeof name, "messages[%zu].content", idx);
	json_t *c = json_object_get(msg, "content");
	if (!c || json_is_null(c) || json_is_string(c)) return 0;
	if (!json_is_array(c)) return sg_srv_wrong_type(err, name, "a string or an array of content parts", c);
	size_t total = 0, i;
	json_t *part;
	json_array_foreach(c, i, part) {
		const char *type = NULL;
		if (!json_is_object(part)) return sg_srv_wrong_type(err, name, "an array of content part objects", part);
		snprintf(name, sizeof name, "messages[%zu].content[%zu].type", idx, i);
		json_t *t = json_object_get(part, "type");
		if (!t || !json_is_string(t)) return sg_srv_wrong_type(err, name, "a string", t ? t : json_null());
		if (sg_srv_has_nul(t)) return sg_srv_nul(err, name);
		type = json_string_value(t);
		if (strcmp(type, "text") != 0)
			return -sg_srv_err_set(err, 400, BAD, name, "content part type '%.40s' is not supported (only 'text')", type);
		snprintf(name, sizeof name, "messages[%zu].content[%zu].text", idx, i);
		json_t *tx = json_object_get(part, "text");
		if (!tx || !json_is_string(tx)) return sg_srv_wrong_type(err, name, "a string", tx ? tx : json_null());
		total += json_string_length(tx);
	}
	char *buf = sg_malloc(total + 1);
	if (!buf) return -sg_srv_oom(err);
	size_t off = 0;
	json_array_foreach(c, i, part) {
		json_t *tx = json_object_get(part, "text");
		memcpy(buf + off, json_string_value(tx), json_string_length(tx));
		off += json_string_length(tx);
	}
	json_t *s = json_stringn_nocheck(buf, off);
	sg_free(buf);
	if (!s || json_object_set_new(msg, "content", s)) return -sg_srv_oom(err);
	return 0;
}

/* An assistant message's tool_calls: OpenAI sends each call's arguments as a JSON string;
 * templates index into them (arguments.items(), | tojson), so a string holding a JSON object is
 * replaced by the object, as the reference servers do before templating. */
static int normalize_tool_calls(json_t *msg, size_t idx, sg_srv_err *err)
{
	json_t *tc = json_object_get(msg, "tool_calls");
	char name[96];
	snprintf(name, sizeof name, "messages[%zu].tool_calls", idx);
	if (!tc || json_is_null(tc)) return 0;
	if (!json_is_array(tc)) return sg_srv_wrong_type(err, name, "an array", tc);
	size_t i;
	json_t *c;
	json_array_foreach(tc, i, c) {
		snprintf(name, sizeof name, "messages[%zu].tool_calls[%zu]", idx, i);
		if (!json_is_object(c)) return sg_srv_wrong_type(err, name, "an object", c);
		json_t *f = json_object_get(c, "function");
		snprintf(name, sizeof name, "messages[%zu].tool_calls[%zu].function", idx, i);
		if (!json_is_object(f)) return sg_srv_wrong_type(err, name, "an object", f ? f : json_null());
		snprintf(name, sizeof name, "messages[%zu].tool_calls[%zu].function.name", idx, i);
		if (!json_is_string(json_object_get(f, "name")))
			return sg_srv_wrong_type(err, name, "a string", json_object_get(f, "name") ? json_object_get(f, "name") : json_null());
		json_t *a = json_object_get(f, "arguments");
		if (json_is_string(a)) {
			json_t *o = json_loadb(json_string_value(a), json_string_length(a), 0, NULL);
			if (json_is_object(o)) json_object_set_new(f, "arguments", o);
			else json_decref(o);
		}
	}
	return 0;
}

/* tools: [{"type": "function", "function": {"name", "description", "parameters"}}]. */
static int parse_tools(json_t *tools, sg_srv_req *r, sg_srv_err *err)
{
	if (!tools || json_is_null(tools)) return 0;
	if (!json_is_array(tools)) return sg_srv_wrong_type(err, "tools", "an array", tools);
	size_t i;
	json_t *t;
	json_array_foreach(tools, i, t) {
		char name[64];
		snprintf(name, sizeof name, "tools[%zu]", i);
		if (!json_is_object(t)) return sg_srv_wrong_type(err, name, "an object", t);
		json_t *f = json_object_get(t, "function");
		snprintf(name, sizeof name, "tools[%zu].function", i);
		if (!json_is_object(f)) return sg_srv_wrong_type(err, name, "an object", f ? f : json_null());
		snprintf(name, sizeof name, "tools[%zu].function.name", i);
		json_t *n = json_object_get(f, "name");
		if (!json_is_string(n) || !json_string_length(n)) return sg_srv_wrong_type(err, name, "a non-empty string", n ? n : json_null());
		if (sg_srv_has_nul(n)) return sg_srv_nul(err, name);
		json_t *pa = json_object_get(f, "parameters");
		snprintf(name, sizeof name, "tools[%zu].function.parameters", i);
		if (pa && !json_is_null(pa) && !json_is_object(pa)) return sg_srv_wrong_type(err, name, "an object (a JSON Schema)", pa);
	}
	if (json_array_size(tools)) r->tools = json_incref(tools);
	return 0;
}

int sg_srv_parse_messages(const json_t *body, sg_srv_req *r, int ollama, sg_srv_err *err)
{
	json_t *m = json_object_get(body, "messages");
	if (!m || json_is_null(m)) return -sg_srv_err_set(err, 400, BAD, "messages", "'messages' is required");
	if (!json_is_array(m)) return sg_srv_wrong_type(err, "messages", "an array", m);
	if (!json_array_size(m) && !ollama)
		return -sg_srv_err_set(err, 400, BAD, "messages", "'messages' must not be empty");
	r->messages = json_deep_copy(m);
	if (!r->messages) return -sg_srv_oom(err);
	static const char *roles[] = {"system", "developer", "user", "assistant", "tool", "function"};
	size_t i;
	json_t *msg;
	json_array_foreach(r->messages, i, msg) {
		char name[96];
		snprintf(name, sizeof name, "messages[%zu]", i);
		if (!json_is_object(msg)) return sg_srv_wrong_type(err, name, "an object", msg);
		snprintf(name, sizeof name, "messages[%zu].role", i);
		json_t *role = json_object_get(msg, "role");
		if (!role) return -sg_srv_err_set(err, 400, BAD, name, "'%s' is required", name);
		if (!json_is_string(role)) return sg_srv_wrong_type(err, name, "a string", role);
		if (sg_srv_has_nul(role)) return sg_srv_nul(err, name);
		int known = 0;
		for (size_t k = 0; k < sizeof roles / sizeof *roles; k++) known |= !strcmp(json_string_value(role), roles[k]);
		if (!known)
			return -sg_srv_err_set(err, 400, BAD, name, "'%s' = '%.40s' is not one of system, developer, user, assistant, tool",
					       name, json_string_value(role));
		if (ollama) {
			json_t *img = json_object_get(msg, "images");
			if (img && json_is_array(img) && json_array_size(img))
				return -sg_srv_err_set(err, 400, BAD, "images", "images are not supported by this server");
			json_t *c = json_object_get(msg, "content");
			snprintf(name, sizeof name, "messages[%zu].content", i);
			if (c && !json_is_null(c) && !json_is_string(c)) return sg_srv_wrong_type(err, name, "a string", c);
		} else if (flatten_content(msg, i, err) < 0) return -1;
		if (normalize_tool_calls(msg, i, err) < 0) return -1;
		/* An assistant turn that only calls tools has content null; templates concatenate it
		 * as a string (as the reference servers do, it becomes ""). */
		json_t *ct = json_object_get(msg, "content");
		if ((!ct || json_is_null(ct)) && json_object_get(msg, "tool_calls")) json_object_set_new(msg, "content", json_string(""));
	}
	return parse_tools(json_object_get(body, "tools"), r, err);
}

int sg_srv_parse_model(const json_t *b, sg_srv_req *r, int required, sg_srv_err *err)
{
	const char *m = NULL;
	int given;
	TRY(given = sg_srv_get_str(b, "model", "model", &m, err));
	if (!given && required) return sg_srv_err_set(err, 400, BAD, "model", "'model' is required");
	return sg_srv_dup(&r->model, m ? m : "", err) < 0 ? err->status : 0;
}
