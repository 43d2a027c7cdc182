/* Request bodies -> generation parameters (see request.h). */
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
	return r >= SG_ROUTE_OLLAMA_CHAT && r <= SG_ROUTE_OLLAMA_EMBED;
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
	memset(r, 0, sizeof *r);
}

/* Field access: absent and null mean "not given" (returns 0); a present value of the wrong
 * type or out of range is a 400 naming the field. A return of 1 means "given". */

static int wrong_type(sg_srv_err *e, const char *name, const char *want, const json_t *v)
{
	return -sg_srv_err_set(e, 400, BAD, name, "'%s' must be %s, got %s", name, want, sg_json_type_name(v));
}

static int get_num(const json_t *o, const char *key, const char *name, double lo, double hi, double *out, sg_srv_err *e)
{
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v)) return 0;
	if (!json_is_number(v)) return wrong_type(e, name, "a number", v);
	double d = json_number_value(v);
	if (!isfinite(d) || d < lo || d > hi)
		return -sg_srv_err_set(e, 400, BAD, name, "'%s' = %g is outside [%g, %g]", name, d, lo, hi);
	*out = d;
	return 1;
}

static int get_int(const json_t *o, const char *key, const char *name, int64_t lo, int64_t hi, int64_t *out, sg_srv_err *e)
{
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v)) return 0;
	int64_t x;
	if (json_is_integer(v)) x = json_integer_value(v);
	else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && fabs(json_real_value(v)) < 9e15)
		x = (int64_t)json_real_value(v);
	else return wrong_type(e, name, "an integer", v);
	if (x < lo || x > hi)
		return -sg_srv_err_set(e, 400, BAD, name, "'%s' = %lld is outside [%lld, %lld]", name, (long long)x,
				       (long long)lo, (long long)hi);
	*out = x;
	return 1;
}

static int get_bool(const json_t *o, const char *key, const char *name, int *out, sg_srv_err *e)
{
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v)) return 0;
	if (!json_is_boolean(v)) return wrong_type(e, name, "a boolean", v);
	*out = json_is_true(v);
	return 1;
}

static int get_str(const json_t *o, const char *key, const char *name, const char **out, sg_srv_err *e)
{
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v)) return 0;
	if (!json_is_string(v)) return wrong_type(e, name, "a string", v);
	*out = json_string_value(v);
	return 1;
}

#define TRY(x)                                                                                     \
	do {                                                                                       \
		if ((x) < 0) return err->status;                                                   \
	} while (0)

static int oom(sg_srv_err *err)
{
	return sg_srv_err_set(err, 500, "server_error", NULL, "out of memory");
}

static int dup_field(char **dst, const char *s, sg_srv_err *err)
{
	*dst = sg_strdup(s);
	return *dst ? 0 : -oom(err);
}

/* stop: a string or an array of strings (OpenAI), the array form only for Ollama. */
static int parse_stop(const json_t *v, const char *name, sg_srv_req *r, sg_srv_err *err)
{
	if (!v || json_is_null(v)) return 0;
	if (json_is_string(v)) {
		if (!json_string_length(v)) return 0;
		return dup_field(&r->stop[r->n_stop++], json_string_value(v), err);
	}
	if (!json_is_array(v)) return wrong_type(err, name, "a string or an array of strings", v);
	if (json_array_size(v) > SG_SRV_MAX_STOP)
		return -sg_srv_err_set(err, 400, BAD, name, "'%s' has %zu entries; at most %d are allowed", name,
				       json_array_size(v), SG_SRV_MAX_STOP);
	size_t i;
	json_t *s;
	json_array_foreach(v, i, s) {
		if (!json_is_string(s)) {
			char n[64];
			snprintf(n, sizeof n, "%s[%zu]", name, i);
			return wrong_type(err, n, "a string", s);
		}
		if (!json_string_length(s)) continue;
		if (json_string_length(s) > 1024)
			return -sg_srv_err_set(err, 400, BAD, name, "'%s[%zu]' is longer than 1024 bytes", name, i);
		if (dup_field(&r->stop[r->n_stop++], json_string_value(s), err) < 0) return -1;
	}
	return 0;
}

/* OpenAI logit_bias: {"token id": bias in [-100, 100]}. */
static int parse_logit_bias(const json_t *v, sg_srv_req *r, sg_srv_err *err)
{
	if (!v || json_is_null(v)) return 0;
	if (!json_is_object(v)) return wrong_type(err, "logit_bias", "an object", v);
	size_t n = json_object_size(v);
	if (n > 1024) return -sg_srv_err_set(err, 400, BAD, "logit_bias", "'logit_bias' has %zu entries; at most 1024", n);
	if (!n) return 0;
	r->bias = sg_calloc(n, sizeof *r->bias);
	if (!r->bias) return -oom(err);
	const char *k;
	json_t *b;
	size_t i = 0;
	json_object_foreach((json_t *)v, k, b) {
		char *end;
		long long id = strtoll(k, &end, 10);
		if (!*k || *end || id < 0 || id > INT32_MAX)
			return -sg_srv_err_set(err, 400, BAD, "logit_bias", "'logit_bias' key '%.40s' is not a token id", k);
		if (!json_is_number(b)) return wrong_type(err, "logit_bias", "an object of numbers", b);
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

/* message.content: a string, null, or an array of {type:"text", text}; flattened to a string. */
static int flatten_content(json_t *msg, size_t idx, sg_srv_err *err)
{
	char name[96];
	snprintf(name, sizeof name, "messages[%zu].content", idx);
	json_t *c = json_object_get(msg, "content");
	if (!c || json_is_null(c) || json_is_string(c)) return 0;
	if (!json_is_array(c)) return wrong_type(err, name, "a string or an array of content parts", c);
	size_t total = 0, i;
	json_t *part;
	json_array_foreach(c, i, part) {
		const char *type = NULL;
		if (!json_is_object(part)) return wrong_type(err, name, "an array of content part objects", part);
		snprintf(name, sizeof name, "messages[%zu].content[%zu].type", idx, i);
		json_t *t = json_object_get(part, "type");
		if (!t || !json_is_string(t)) return wrong_type(err, name, "a string", t ? t : json_null());
		type = json_string_value(t);
		if (strcmp(type, "text") != 0)
			return -sg_srv_err_set(err, 400, BAD, name, "content part type '%.40s' is not supported (only 'text')", type);
		snprintf(name, sizeof name, "messages[%zu].content[%zu].text", idx, i);
		json_t *tx = json_object_get(part, "text");
		if (!tx || !json_is_string(tx)) return wrong_type(err, name, "a string", tx ? tx : json_null());
		total += json_string_length(tx);
	}
	char *buf = sg_malloc(total + 1);
	if (!buf) return -oom(err);
	size_t off = 0;
	json_array_foreach(c, i, part) {
		json_t *tx = json_object_get(part, "text");
		memcpy(buf + off, json_string_value(tx), json_string_length(tx));
		off += json_string_length(tx);
	}
	json_t *s = json_stringn_nocheck(buf, off);
	sg_free(buf);
	if (!s || json_object_set_new(msg, "content", s)) return -oom(err);
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
	if (!json_is_array(tc)) return wrong_type(err, name, "an array", tc);
	size_t i;
	json_t *c;
	json_array_foreach(tc, i, c) {
		snprintf(name, sizeof name, "messages[%zu].tool_calls[%zu]", idx, i);
		if (!json_is_object(c)) return wrong_type(err, name, "an object", c);
		json_t *f = json_object_get(c, "function");
		snprintf(name, sizeof name, "messages[%zu].tool_calls[%zu].function", idx, i);
		if (!json_is_object(f)) return wrong_type(err, name, "an object", f ? f : json_null());
		snprintf(name, sizeof name, "messages[%zu].tool_calls[%zu].function.name", idx, i);
		if (!json_is_string(json_object_get(f, "name")))
			return wrong_type(err, name, "a string", json_object_get(f, "name") ? json_object_get(f, "name") : json_null());
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
	if (!json_is_array(tools)) return wrong_type(err, "tools", "an array", tools);
	size_t i;
	json_t *t;
	json_array_foreach(tools, i, t) {
		char name[64];
		snprintf(name, sizeof name, "tools[%zu]", i);
		if (!json_is_object(t)) return wrong_type(err, name, "an object", t);
		json_t *f = json_object_get(t, "function");
		snprintf(name, sizeof name, "tools[%zu].function", i);
		if (!json_is_object(f)) return wrong_type(err, name, "an object", f ? f : json_null());
		snprintf(name, sizeof name, "tools[%zu].function.name", i);
		json_t *n = json_object_get(f, "name");
		if (!json_is_string(n) || !json_string_length(n)) return wrong_type(err, name, "a non-empty string", n ? n : json_null());
		json_t *pa = json_object_get(f, "parameters");
		snprintf(name, sizeof name, "tools[%zu].function.parameters", i);
		if (pa && !json_is_null(pa) && !json_is_object(pa)) return wrong_type(err, name, "an object (a JSON Schema)", pa);
	}
	if (json_array_size(tools)) r->tools = json_incref(tools);
	return 0;
}

/* tool_choice: "auto" | "none" | "required" | {"type": "function", "function": {"name"}}. */
static int parse_tool_choice(const json_t *b, sg_srv_req *r, sg_srv_err *err)
{
	json_t *tc = json_object_get(b, "tool_choice");
	r->parallel_tools = 1;
	TRY(get_bool(b, "parallel_tool_calls", "parallel_tool_calls", &r->parallel_tools, err));
	if (!tc || json_is_null(tc)) return 0;
	const char *name = NULL;
	if (json_is_string(tc)) {
		const char *v = json_string_value(tc);
		if (!strcmp(v, "auto")) r->tool_choice = SG_TOOLS_AUTO;
		else if (!strcmp(v, "none")) r->tool_choice = SG_TOOLS_NONE;
		else if (!strcmp(v, "required")) r->tool_choice = SG_TOOLS_REQUIRED;
		else
			return sg_srv_err_set(err, 400, BAD, "tool_choice", "'tool_choice' = '%.40s' is not one of auto, none, required", v);
	} else if (json_is_object(tc)) {
		json_t *f = json_object_get(tc, "function");
		name = json_string_value(json_object_get(f, "name"));
		if (!name) return sg_srv_err_set(err, 400, BAD, "tool_choice", "'tool_choice' must name a function: {\"type\": \"function\", \"function\": {\"name\": ...}}");
	} else return -wrong_type(err, "tool_choice", "a string or an object", tc);
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
		if (dup_field(&r->tool_name, name, err) < 0) return err->status;
	}
	return 0;
}

/* Reasoning switches: reasoning_effort ("none" turns it off), enable_thinking (an extension),
 * chat_template_kwargs (vLLM's), all of which become chat template variables. */
static int parse_reasoning(const json_t *b, sg_srv_req *r, sg_srv_err *err)
{
	json_t *kw = json_object_get(b, "chat_template_kwargs");
	if (kw && !json_is_null(kw)) {
		if (!json_is_object(kw)) return -wrong_type(err, "chat_template_kwargs", "an object", kw);
		r->kwargs = json_deep_copy(kw);
		json_t *et = json_object_get(kw, "enable_thinking");
		if (json_is_boolean(et)) r->think = json_is_true(et);
	}
	const char *eff = NULL;
	TRY(get_str(b, "reasoning_effort", "reasoning_effort", &eff, err));
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
	TRY(get_bool(b, "enable_thinking", "enable_thinking", &et, err));
	if (et >= 0) r->think = et;
	if (r->think >= 0 || eff) {
		if (!r->kwargs) r->kwargs = json_object();
		if (!r->kwargs) return oom(err);
		if (r->think >= 0) json_object_set_new(r->kwargs, "enable_thinking", json_boolean(r->think));
		if (eff) json_object_set_new(r->kwargs, "reasoning_effort", json_string(eff));
	}
	return 0;
}

static int parse_messages(const json_t *body, sg_srv_req *r, int ollama, sg_srv_err *err)
{
	json_t *m = json_object_get(body, "messages");
	if (!m || json_is_null(m)) return -sg_srv_err_set(err, 400, BAD, "messages", "'messages' is required");
	if (!json_is_array(m)) return wrong_type(err, "messages", "an array", m);
	if (!json_array_size(m) && !ollama)
		return -sg_srv_err_set(err, 400, BAD, "messages", "'messages' must not be empty");
	r->messages = json_deep_copy(m);
	if (!r->messages) return -oom(err);
	static const char *roles[] = {"system", "developer", "user", "assistant", "tool", "function"};
	size_t i;
	json_t *msg;
	json_array_foreach(r->messages, i, msg) {
		char name[96];
		snprintf(name, sizeof name, "messages[%zu]", i);
		if (!json_is_object(msg)) return wrong_type(err, name, "an object", msg);
		snprintf(name, sizeof name, "messages[%zu].role", i);
		json_t *role = json_object_get(msg, "role");
		if (!role) return -sg_srv_err_set(err, 400, BAD, name, "'%s' is required", name);
		if (!json_is_string(role)) return wrong_type(err, name, "a string", role);
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
			if (c && !json_is_null(c) && !json_is_string(c)) return wrong_type(err, name, "a string", c);
		} else if (flatten_content(msg, i, err) < 0) return -1;
		if (normalize_tool_calls(msg, i, err) < 0) return -1;
		/* An assistant turn that only calls tools has content null; templates concatenate it
		 * as a string (as the reference servers do, it becomes ""). */
		json_t *ct = json_object_get(msg, "content");
		if ((!ct || json_is_null(ct)) && json_object_get(msg, "tool_calls")) json_object_set_new(msg, "content", json_string(""));
	}
	return parse_tools(json_object_get(body, "tools"), r, err);
}

/* Sampling fields shared by chat and completions (OpenAI names and ranges). */
static int parse_openai_sampling(const json_t *b, sg_srv_req *r, const sg_srv_limits *lim, sg_srv_err *err)
{
	double d;
	int64_t i;
	int given;
	TRY(given = get_num(b, "temperature", "temperature", 0, 2, &d, err));
	if (given) r->sp.temperature = (float)d;
	TRY(given = get_num(b, "top_p", "top_p", 0, 1, &d, err));
	if (given) {
		if (d <= 0) return sg_srv_err_set(err, 400, BAD, "top_p", "'top_p' = %g must be > 0", d);
		r->sp.top_p = (float)d;
	}
	TRY(given = get_int(b, "top_k", "top_k", -1, 1 << 30, &i, err));
	if (given) r->sp.top_k = i < 0 ? 0 : (int32_t)i;
	TRY(given = get_num(b, "min_p", "min_p", 0, 1, &d, err));
	if (given) r->sp.min_p = (float)d;
	TRY(given = get_num(b, "presence_penalty", "presence_penalty", -2, 2, &d, err));
	if (given) r->sp.presence_penalty = (float)d;
	TRY(given = get_num(b, "frequency_penalty", "frequency_penalty", -2, 2, &d, err));
	if (given) r->sp.frequency_penalty = (float)d;
	TRY(given = get_num(b, "repetition_penalty", "repetition_penalty", 1e-3, 100, &d, err));
	if (given) r->sp.repetition_penalty = (float)d;
	TRY(given = get_int(b, "seed", "seed", INT64_MIN, INT64_MAX, &i, err));
	if (given) r->sp.seed = (uint64_t)i == SG_SAMPLER_SEED_RANDOM ? 0 : (uint64_t)i;
	TRY(parse_stop(json_object_get(b, "stop"), "stop", r, err));
	TRY(parse_logit_bias(json_object_get(b, "logit_bias"), r, err));
	TRY(given = get_int(b, "n", "n", INT64_MIN, INT64_MAX, &i, err));
	if (given && i != 1)
		return sg_srv_err_set(err, 400, BAD, "n", "'n' = %lld is not supported: this server returns one choice (n = 1)",
				      (long long)i);
	int64_t mt = 0;
	int g1, g2;
	TRY(g1 = get_int(b, "max_tokens", "max_tokens", 1, INT32_MAX, &mt, err));
	TRY(g2 = get_int(b, "max_completion_tokens", "max_completion_tokens", 1, INT32_MAX, &mt, err));
	r->max_tokens_given = g1 || g2;
	r->max_tokens = r->max_tokens_given && mt < lim->max_tokens_cap ? (int32_t)mt : lim->max_tokens_cap;
	TRY(get_bool(b, "stream", "stream", &r->stream, err));
	json_t *so = json_object_get(b, "stream_options");
	if (so && !json_is_null(so)) {
		if (!json_is_object(so)) return wrong_type(err, "stream_options", "an object", so) ? err->status : 0;
		TRY(get_bool(so, "include_usage", "stream_options.include_usage", &r->include_usage, err));
	}
	const char *user = NULL;
	TRY(given = get_str(b, "user", "user", &user, err));
	if (given && dup_field(&r->user, user, err) < 0) return err->status;
	json_t *rf = json_object_get(b, "response_format");
	if (rf && !json_is_null(rf)) {
		if (!json_is_object(rf)) return wrong_type(err, "response_format", "an object", rf) ? err->status : 0;
		const char *t = NULL;
		TRY(get_str(rf, "type", "response_format.type", &t, err));
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
				return -wrong_type(err, "response_format.json_schema.schema", "an object", sc) ? err->status : 0;
			else json_incref(sc);
			r->schema = sc;
			TRY(get_bool(js, "strict", "response_format.json_schema.strict", &r->schema_strict, err));
		} else if (t && strcmp(t, "text") != 0)
			return sg_srv_err_set(err, 400, BAD, "response_format.type",
					      "'response_format.type' = '%.40s' is not one of text, json_object, json_schema", t);
	}
	return 0;
}

static int parse_model_field(const json_t *b, sg_srv_req *r, int required, sg_srv_err *err)
{
	const char *m = NULL;
	int given;
	TRY(given = get_str(b, "model", "model", &m, err));
	if (!given && required) return sg_srv_err_set(err, 400, BAD, "model", "'model' is required");
	return dup_field(&r->model, m ? m : "", err) < 0 ? err->status : 0;
}

/* An array of token ids (completions prompt, detokenize tokens). */
static int parse_ids(const json_t *a, const char *name, sg_srv_req *r, sg_srv_err *err)
{
	size_t n = json_array_size(a);
	r->prompt_ids = sg_malloc((n ? n : 1) * sizeof *r->prompt_ids);
	if (!r->prompt_ids) return oom(err);
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
	if ((st = parse_model_field(b, r, 0, err))) return st;
	r->chat = 1;
	TRY(parse_messages(b, r, 0, err));
	if ((st = parse_openai_sampling(b, r, lim, err))) return st;
	if ((st = parse_tool_choice(b, r, err))) return st;
	if ((st = parse_reasoning(b, r, err))) return st;
	int given;
	TRY(get_bool(b, "logprobs", "logprobs", &r->logprobs, err));
	int64_t tl = 0;
	TRY(given = get_int(b, "top_logprobs", "top_logprobs", 0, SG_SAMPLER_MAX_LOGPROBS, &tl, err));
	if (given && tl > 0 && !r->logprobs)
		return sg_srv_err_set(err, 400, BAD, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
	r->top_logprobs = (int)tl;
	return 0;
}

static int parse_oai_completion(const json_t *b, sg_srv_req *r, const sg_srv_limits *lim, sg_srv_err *err)
{
	int st;
	if ((st = parse_model_field(b, r, 0, err))) return st;
	json_t *p = json_object_get(b, "prompt");
	if (!p || json_is_null(p)) return sg_srv_err_set(err, 400, BAD, "prompt", "'prompt' is required");
	if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0))) p = json_array_get(p, 0);
	if (json_is_string(p)) {
		if (dup_field(&r->prompt, json_string_value(p), err) < 0) return err->status;
	} else if (json_is_array(p)) {
		if (json_array_size(p) && json_is_array(json_array_get(p, 0)))
			return sg_srv_err_set(err, 400, BAD, "prompt", "a batch of prompts is not supported: send one prompt per request");
		if ((st = parse_ids(p, "prompt", r, err))) return st;
		if (!r->n_prompt_ids) return sg_srv_err_set(err, 400, BAD, "prompt", "'prompt' must not be empty");
	} else return -wrong_type(err, "prompt", "a string or an array of token ids", p);
	if ((st = parse_openai_sampling(b, r, lim, err))) return st;
	int64_t lp = 0;
	int given;
	TRY(given = get_int(b, "logprobs", "logprobs", 0, SG_SAMPLER_MAX_LOGPROBS, &lp, err));
	if (given) r->logprobs = 1, r->top_logprobs = (int)lp;
	TRY(get_bool(b, "echo", "echo", &r->echo, err));
	if (r->echo) return sg_srv_err_set(err, 400, BAD, "echo", "'echo' is not supported");
	const char *suffix = NULL;
	TRY(get_str(b, "suffix", "suffix", &suffix, err));
	if (suffix && *suffix) return sg_srv_err_set(err, 400, BAD, "suffix", "'suffix' is not supported");
	int64_t best_of;
	TRY(given = get_int(b, "best_of", "best_of", INT64_MIN, INT64_MAX, &best_of, err));
	if (given && best_of != 1) return sg_srv_err_set(err, 400, BAD, "best_of", "'best_of' must be 1");
	return 0;
}

/* Ollama "options": llama.cpp-style names mapped onto the sampler. */
static int parse_ollama_options(const json_t *b, sg_srv_req *r, const sg_srv_limits *lim, sg_srv_err *err)
{
	r->max_tokens = lim->max_tokens_cap;
	json_t *o = json_object_get(b, "options");
	if (!o || json_is_null(o)) return 0;
	if (!json_is_object(o)) return -wrong_type(err, "options", "an object", o);
	double d;
	int64_t i;
	int given;
	TRY(given = get_int(o, "num_predict", "options.num_predict", -2, INT32_MAX, &i, err));
	if (given && i == 0) return sg_srv_err_set(err, 400, BAD, "options.num_predict", "options.num_predict must not be 0");
	if (given && i > 0 && i < lim->max_tokens_cap) r->max_tokens = (int32_t)i, r->max_tokens_given = 1;
	TRY(given = get_num(o, "temperature", "options.temperature", 0, 100, &d, err));
	if (given) r->sp.temperature = (float)d;
	TRY(given = get_int(o, "top_k", "options.top_k", -1, 1 << 30, &i, err));
	if (given) r->sp.top_k = i < 0 ? 0 : (int32_t)i;
	TRY(given = get_num(o, "top_p", "options.top_p", 0, 1, &d, err));
	if (given) r->sp.top_p = d <= 0 ? 1.0f : (float)d;
	TRY(given = get_num(o, "min_p", "options.min_p", 0, 1, &d, err));
	if (given) r->sp.min_p = (float)d;
	TRY(given = get_int(o, "seed", "options.seed", INT64_MIN, INT64_MAX, &i, err));
	if (given) r->sp.seed = (uint64_t)i == SG_SAMPLER_SEED_RANDOM ? 0 : (uint64_t)i;
	TRY(given = get_num(o, "repeat_penalty", "options.repeat_penalty", 1e-3, 100, &d, err));
	if (given) r->sp.repetition_penalty = (float)d;
	TRY(given = get_int(o, "repeat_last_n", "options.repeat_last_n", -1, 1 << 30, &i, err));
	if (given) r->sp.penalty_last_n = (int32_t)i;
	TRY(given = get_num(o, "presence_penalty", "options.presence_penalty", -100, 100, &d, err));
	if (given) r->sp.presence_penalty = (float)d;
	TRY(given = get_num(o, "frequency_penalty", "options.frequency_penalty", -100, 100, &d, err));
	if (given) r->sp.frequency_penalty = (float)d;
	TRY(parse_stop(json_object_get(o, "stop"), "options.stop", r, err));
	return 0;
}

static int parse_ollama_common(const json_t *b, sg_srv_req *r, const sg_srv_limits *lim, sg_srv_err *err)
{
	int st;
	if ((st = parse_model_field(b, r, 1, err))) return st;
	r->stream = 1; /* Ollama streams unless told not to */
	TRY(get_bool(b, "stream", "stream", &r->stream, err));
	json_t *f = json_object_get(b, "format");
	if (f && !json_is_null(f)) {
		if (json_is_string(f)) {
			if (!strcmp(json_string_value(f), "json")) r->json_format = 1;
			else if (json_string_length(f))
				return sg_srv_err_set(err, 400, BAD, "format", "format must be \"json\" or a JSON schema object");
		} else if (json_is_object(f)) {
			r->json_format = 2;
			r->schema = json_incref(f);
		} else return -wrong_type(err, "format", "\"json\" or a JSON schema object", f);
	}
	json_t *ka = json_object_get(b, "keep_alive");
	if (ka && !json_is_null(ka) && !json_is_string(ka) && !json_is_number(ka))
		return -wrong_type(err, "keep_alive", "a duration string or a number of seconds", ka);
	/* Ollama's own defaults (they differ from OpenAI's). */
	r->sp.temperature = 0.8f;
	r->sp.top_k = 40;
	r->sp.top_p = 0.9f;
	r->sp.min_p = 0.0f;
	r->sp.repetition_penalty = 1.1f;
	r->sp.penalty_last_n = 64;
	return parse_ollama_options(b, r, lim, err);
}

static int parse_ollama_generate(const json_t *b, sg_srv_req *r, const sg_srv_limits *lim, sg_srv_err *err)
{
	int st;
	if ((st = parse_ollama_common(b, r, lim, err))) return st;
	const char *s = NULL;
	TRY(get_str(b, "prompt", "prompt", &s, err));
	if (dup_field(&r->prompt, s ? s : "", err) < 0) return err->status;
	s = NULL;
	TRY(get_str(b, "system", "system", &s, err));
	if (s && dup_field(&r->system, s, err) < 0) return err->status;
	TRY(get_bool(b, "raw", "raw", &r->raw, err));
	s = NULL;
	TRY(get_str(b, "template", "template", &s, err));
	if (s && *s) snprintf(r->note, sizeof r->note, "the 'template' field is ignored: the model's own chat template is used");
	s = NULL;
	TRY(get_str(b, "suffix", "suffix", &s, err));
	if (s && *s) return sg_srv_err_set(err, 400, BAD, "suffix", "suffix (fill-in-the-middle) is not supported");
	json_t *img = json_object_get(b, "images");
	if (img && json_is_array(img) && json_array_size(img))
		return sg_srv_err_set(err, 400, BAD, "images", "images are not supported by this server");
	return 0;
}

static int parse_ollama_chat(const json_t *b, sg_srv_req *r, const sg_srv_limits *lim, sg_srv_err *err)
{
	int st;
	if ((st = parse_ollama_common(b, r, lim, err))) return st;
	r->chat = 1;
	TRY(parse_messages(b, r, 1, err));
	r->parallel_tools = 1;
	/* think: true/false, or a level ("low", "medium", "high"). */
	json_t *th = json_object_get(b, "think");
	if (th && !json_is_null(th)) {
		if (json_is_boolean(th)) r->think = json_is_true(th);
		else if (json_is_string(th)) {
			const char *v = json_string_value(th);
			r->reasoning_effort = !strcmp(v, "low") ? 1 : !strcmp(v, "medium") ? 2 : !strcmp(v, "high") ? 3 : 0;
			if (!r->reasoning_effort) return sg_srv_err_set(err, 400, BAD, "think", "think must be a boolean or one of low, medium, high");
			r->think = 1;
		} else return -wrong_type(err, "think", "a boolean or a level", th);
		r->kwargs = json_pack("{s:b}", "enable_thinking", r->think);
		if (!r->kwargs) return oom(err);
	}
	return 0;
}

static int parse_tokenize(const json_t *b, sg_srv_req *r, sg_srv_err *err)
{
	int st;
	if ((st = parse_model_field(b, r, 0, err))) return st;
	const char *s = NULL;
	int given;
	TRY(given = get_str(b, "prompt", "prompt", &s, err));
	if (!given) TRY(given = get_str(b, "content", "content", &s, err));
	if (!given) return sg_srv_err_set(err, 400, BAD, "prompt", "'prompt' (a string) is required");
	r->add_special = 1;
	TRY(get_bool(b, "add_special", "add_special", &r->add_special, err));
	return dup_field(&r->prompt, s, err) < 0 ? err->status : 0;
}

static int parse_detokenize(const json_t *b, sg_srv_req *r, sg_srv_err *err)
{
	int st;
	if ((st = parse_model_field(b, r, 0, err))) return st;
	json_t *t = json_object_get(b, "tokens");
	if (!t || json_is_null(t)) return sg_srv_err_set(err, 400, BAD, "tokens", "'tokens' (an array of token ids) is required");
	if (!json_is_array(t)) return -wrong_type(err, "tokens", "an array of token ids", t);
	return parse_ids(t, "tokens", r, err);
}

int sg_srv_parse_request(sg_srv_route route, const char *body, size_t len, const sg_srv_limits *lim,
			 sg_srv_req *req, sg_srv_err *err)
{
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
	if (len == 0) return sg_srv_err_set(err, 400, BAD, NULL, "the request body is empty: a JSON object is expected");
	json_t *b;
	if (sg_json_parse(body, len, "request body", &b) != SG_OK)
		return sg_srv_err_set(err, 400, BAD, NULL, "%s", sg_last_error());
	int st;
	if (!json_is_object(b)) {
		st = sg_srv_err_set(err, 400, BAD, NULL, "the request body must be a JSON object, got %s", sg_json_type_name(b));
	} else {
		switch (route) {
		case SG_ROUTE_OAI_CHAT: st = parse_oai_chat(b, req, lim, err); break;
		case SG_ROUTE_OAI_COMPLETIONS: st = parse_oai_completion(b, req, lim, err); break;
		case SG_ROUTE_OLLAMA_CHAT: st = parse_ollama_chat(b, req, lim, err); break;
		case SG_ROUTE_OLLAMA_GENERATE: st = parse_ollama_generate(b, req, lim, err); break;
		case SG_ROUTE_TOKENIZE: st = parse_tokenize(b, req, err); break;
		case SG_ROUTE_DETOKENIZE: st = parse_detokenize(b, req, err); break;
		case SG_ROUTE_ANTHROPIC_MESSAGES:
		case SG_ROUTE_ANTHROPIC_COUNT: st = sg_srv_parse_anthropic(b, req, lim, err); break;
		default: st = sg_srv_err_set(err, 404, "not_found_error", NULL, "this route takes no request body");
		}
	}
	json_decref(b);
	if (st < 0) st = err->status;
	if (st == 0 && req->logprobs) {
		req->sp.logprobs = 1;
		req->sp.top_logprobs = req->top_logprobs;
	}
	return st;
}
