/* The Ollama routes (see routes_ollama.h). */
#include "server/routes_ollama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/log.h"
#include "hub/cache.h"
#include "hub/repo.h"
#include "server/agent.h"
#include "server/response.h"

#define BAD "invalid_request_error"

#define TRY(x)                                                                                     \
	do {                                                                                       \
		if ((x) < 0) return err->status;                                                   \
	} while (0)

/* ---- the request ---- */

/* Ollama "options": llama.cpp-style names mapped onto the sampler. */
static int parse_ollama_options(const json_t *b, sg_srv_req *r, const sg_srv_limits *lim, sg_srv_err *err)
{
	r->max_tokens = lim->max_tokens_cap;
	json_t *o = json_object_get(b, "options");
	if (!o || json_is_null(o)) return 0;
	if (!json_is_object(o)) return -sg_srv_wrong_type(err, "options", "an object", o);
	double d;
	int64_t i;
	int given;
	TRY(given = sg_srv_get_int(o, "num_predict", "options.num_predict", -2, INT32_MAX, &i, err));
	if (given && i == 0) return sg_srv_err_set(err, 400, BAD, "options.num_predict", "options.num_predict must not be 0");
	if (given && i > 0 && i < lim->max_tokens_cap) r->max_tokens = (int32_t)i, r->max_tokens_given = 1;
	TRY(given = sg_srv_get_num(o, "temperature", "options.temperature", 0, 100, &d, err));
	if (given) r->sp.temperature = (float)d;
	TRY(given = sg_srv_get_int(o, "top_k", "options.top_k", -1, 1 << 30, &i, err));
	if (given) r->sp.top_k = i < 0 ? 0 : (int32_t)i;
	TRY(given = sg_srv_get_num(o, "top_p", "options.top_p", 0, 1, &d, err));
	if (given) r->sp.top_p = d <= 0 ? 1.0f : (float)d;
	TRY(given = sg_srv_get_num(o, "min_p", "options.min_p", 0, 1, &d, err));
	if (given) r->sp.min_p = (float)d;
	TRY(given = sg_srv_get_int(o, "seed", "options.seed", INT64_MIN, INT64_MAX, &i, err));
	if (given) r->sp.seed = (uint64_t)i == SG_SAMPLER_SEED_RANDOM ? 0 : (uint64_t)i;
	TRY(given = sg_srv_get_num(o, "repeat_penalty", "options.repeat_penalty", 1e-3, 100, &d, err));
	if (given) r->sp.repetition_penalty = (float)d;
	TRY(given = sg_srv_get_int(o, "repeat_last_n", "options.repeat_last_n", -1, 1 << 30, &i, err));
	if (given) r->sp.penalty_last_n = (int32_t)i;
	TRY(given = sg_srv_get_num(o, "presence_penalty", "options.presence_penalty", -100, 100, &d, err));
	if (given) r->sp.presence_penalty = (float)d;
	TRY(given = sg_srv_get_num(o, "frequency_penalty", "options.frequency_penalty", -100, 100, &d, err));
	if (given) r->sp.frequency_penalty = (float)d;
	TRY(sg_srv_parse_stop(json_object_get(o, "stop"), "options.stop", r, err));
	int st;
	if ((st = sg_srv_parse_spec(json_object_get(o, "speculative"), "options.speculative", r, err))) return st;
	return 0;
}

static int parse_ollama_common(const json_t *b, sg_srv_req *r, const sg_srv_limits *lim, sg_srv_err *err)
{
	int st;
	if ((st = sg_srv_parse_model(b, r, 1, err))) return st;
	r->stream = 1; /* Ollama streams unless told not to */
	TRY(sg_srv_get_bool(b, "stream", "stream", &r->stream, err));
	json_t *f = json_object_get(b, "format");
	if (f && !json_is_null(f)) {
		if (json_is_string(f)) {
			if (sg_srv_has_nul(f)) return -sg_srv_nul(err, "format");
			if (!strcmp(json_string_value(f), "json")) r->json_format = 1;
			else if (json_string_length(f))
				return sg_srv_err_set(err, 400, BAD, "format", "format must be \"json\" or a JSON schema object");
		} else if (json_is_object(f)) {
			r->json_format = 2;
			r->schema = json_incref(f);
		} else return -sg_srv_wrong_type(err, "format", "\"json\" or a JSON schema object", f);
	}
	json_t *ka = json_object_get(b, "keep_alive");
	if (ka && !json_is_null(ka) && !json_is_string(ka) && !json_is_number(ka))
		return -sg_srv_wrong_type(err, "keep_alive", "a duration string or a number of seconds", ka);
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
	/* prompt and system are text: NULs included, with their lengths */
	const char *s = NULL;
	size_t n = 0;
	TRY(sg_srv_get_text(b, "prompt", "prompt", &s, &n, err));
	if (sg_srv_dupn(&r->prompt, s ? s : "", n, err) < 0) return err->status;
	r->prompt_len = n;
	s = NULL;
	n = 0;
	TRY(sg_srv_get_text(b, "system", "system", &s, &n, err));
	if (s && sg_srv_dupn(&r->system, s, n, err) < 0) return err->status;
	r->system_len = n;
	TRY(sg_srv_get_bool(b, "raw", "raw", &r->raw, err));
	n = 0;
	TRY(sg_srv_get_text(b, "template", "template", &s, &n, err));
	if (n) snprintf(r->note, sizeof r->note, "the 'template' field is ignored: the model's own chat template is used");
	n = 0;
	TRY(sg_srv_get_text(b, "suffix", "suffix", &s, &n, err));
	if (n) return sg_srv_err_set(err, 400, BAD, "suffix", "suffix (fill-in-the-middle) is not supported");
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
	TRY(sg_srv_parse_messages(b, r, 1, err));
	r->parallel_tools = 1;
	/* think: true/false, or a level ("low", "medium", "high"). */
	json_t *th = json_object_get(b, "think");
	if (th && !json_is_null(th)) {
		if (json_is_boolean(th)) r->think = json_is_true(th);
		else if (json_is_string(th)) {
			if (sg_srv_has_nul(th)) return -sg_srv_nul(err, "think");
			const char *v = json_string_value(th);
			r->reasoning_effort = !strcmp(v, "low") ? 1 : !strcmp(v, "medium") ? 2 : !strcmp(v, "high") ? 3 : 0;
			if (!r->reasoning_effort) return sg_srv_err_set(err, 400, BAD, "think", "think must be a boolean or one of low, medium, high");
			r->think = 1;
		} else return -sg_srv_wrong_type(err, "think", "a boolean or a level", th);
		r->kwargs = json_pack("{s:b}", "enable_thinking", r->think);
		if (!r->kwargs) return sg_srv_oom(err);
	}
	return 0;
}

int sg_ollama_parse(const json_t *b, sg_srv_req *req, const sg_srv_limits *lim, sg_srv_err *err)
{
	switch (req->route) {
	case SG_ROUTE_OLLAMA_CHAT: return parse_ollama_chat(b, req, lim, err);
	case SG_ROUTE_OLLAMA_GENERATE: return parse_ollama_generate(b, req, lim, err);
	default: return sg_srv_err_set(err, 404, "not_found_error", NULL, "this route takes no request body");
	}
}

/* ---- listings ---- */

/* Ollama's parameter_size: "494.0M", "8.0B" ("" when not counted). */
static void param_size(uint64_t n, char *out, size_t cap)
{
	if (!n) snprintf(out, cap, "%s", "");
	else if (n >= 1000000000ull) snprintf(out, cap, "%.1fB", (double)n / 1e9);
	else if (n >= 1000000ull) snprintf(out, cap, "%.1fM", (double)n / 1e6);
	else if (n >= 1000ull) snprintf(out, cap, "%.1fK", (double)n / 1e3);
	else snprintf(out, cap, "%llu", (unsigned long long)n);
}

static json_t *details(const sg_srv_model_info *in)
{
	char ps[32];
	param_size(in->n_params, ps, sizeof ps);
	json_t *fam = in->arch[0] ? json_pack("[s]", in->arch) : json_null();
	return json_pack("{s:s,s:s,s:s,s:o,s:s,s:s}", "parent_model", "", "format", in->format, "family", in->arch, "families",
			 fam, "parameter_size", ps, "quantization_level", in->quant);
}

/* What a listing knows of a model that is not loaded: its format and weight type as its files
 * say, and their time. */
static void describe_unloaded(sg_srv_model_info *in, int64_t *mtime)
{
	struct stat st;
	*mtime = stat(in->path, &st) ? 0 : (int64_t)st.st_mtime;
	size_t n = strlen(in->path);
	if (n > 5 && !strcmp(in->path + n - 5, ".gguf")) {
		snprintf(in->format, sizeof in->format, "gguf");
		char q[48];
		const char *base = strrchr(in->path, '/');
		if (sg_hub_quant_from_name(base ? base + 1 : in->path, q, sizeof q)) snprintf(in->quant, sizeof in->quant, "%.31s", q);
	} else {
		char f[16], q[48];
		sg_hub_describe_folder(in->path, f, sizeof f, q, sizeof q);
		snprintf(in->format, sizeof in->format, "%s", f);
		snprintf(in->quant, sizeof in->quant, "%.31s", q);
	}
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

json_t *sg_ollama_tags(const sg_pool_item *items, int n, int ps)
{
	json_t *arr = json_array();
	/* the resident models first, then (tags only) the configured ones with what is known
	 * without loading them */
	for (int i = 0; i < n; i++) {
		if (!items[i].resident) continue;
		const sg_srv_model_info *in = &items[i].info;
		char when[40], digest[65];
		sg_resp_rfc3339_of(in->created, when, sizeof when);
		digest_of(in, digest);
		json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:o}", "name", in->name, "model", in->name, "size",
				      (json_int_t)in->size_bytes, "digest", digest, "details", details(in));
		if (ps) {
			/* a model stays loaded until the pool or the memory guard evicts it, or it is deleted:
			 * no keep_alive timer, so no time it expires at */
			json_object_set_new(o, "expires_at", json_string("2999-01-01T00:00:00Z"));
			json_object_set_new(o, "size_vram", json_integer(sg_srv_backend_accel() ? (json_int_t)in->size_bytes : 0));
			json_object_set_new(o, "context_length", json_integer(in->n_ctx));
		} else json_object_set_new(o, "modified_at", json_string(when));
		json_array_append_new(arr, o);
	}
	for (int i = 0; i < n && !ps; i++) {
		if (items[i].resident) continue;
		sg_srv_model_info in = items[i].info;
		int64_t mtime;
		char when[40], digest[65];
		describe_unloaded(&in, &mtime);
		sg_resp_rfc3339_of(mtime, when, sizeof when);
		digest_of(&in, digest);
		json_array_append_new(arr, json_pack("{s:s,s:s,s:I,s:s,s:s,s:o}", "name", in.name, "model", in.name, "size",
						     (json_int_t)in.size_bytes, "digest", digest, "modified_at", when, "details",
						     details(&in)));
	}
	return json_pack("{s:o}", "models", arr);
}

/* Ollama's "parameters" text: one "name value" line each; here the stop tokens (the model's
 * end-of-turn ids) and the context size. */
static json_t *parameters(const sg_srv_model *m)
{
	char buf[2048];
	size_t o = 0, n_eos = 0;
	const int32_t *eos = sg_srv_model_lm(m) ? sg_srv_model_eos(m, &n_eos) : NULL;
	buf[0] = 0;
	for (size_t i = 0; i < n_eos && o < sizeof buf - 200; i++) {
		char *t = NULL;
		size_t len = 0;
		if (sg_srv_model_token_bytes(m, eos[i], &t, &len)) continue;
		json_t *q = json_stringn(t, len);
		char *qs = q ? json_dumps(q, JSON_ENCODE_ANY) : NULL;
		if (qs && strlen(qs) < 150) o += (size_t)snprintf(buf + o, sizeof buf - o, "stop %s\n", qs);
		free(qs);
		json_decref(q);
		sg_free(t);
	}
	snprintf(buf + o, sizeof buf - o, "num_ctx %d", sg_srv_model_info_get(m)->n_ctx);
	return json_string(buf);
}

json_t *sg_ollama_show(const sg_srv_model *m)
{
	const sg_srv_model_info *in = sg_srv_model_info_get(m);
	char when[40], key[96];
	sg_resp_rfc3339_of(in->created, when, sizeof when);
	json_t *info = json_pack("{s:s,s:i,s:i,s:I}", "general.architecture", in->arch, "context_length", in->n_ctx, "vocab_size",
				 in->n_vocab, "general.parameter_count", (json_int_t)in->n_params);
	/* and under the architecture's own prefix, as Ollama writes GGUF keys */
	snprintf(key, sizeof key, "%s.context_length", in->arch);
	json_object_set_new(info, key, json_integer(in->n_ctx));
	snprintf(key, sizeof key, "%s.vocab_size", in->arch);
	json_object_set_new(info, key, json_integer(in->n_vocab));
	/* Ollama's capability names: an embedding model (or a reranker) "embedding", else "completion"
	 * (with "tools" when its template takes tools and "thinking" when it reasons); a Whisper
	 * model, which Ollama does not serve, "transcription"; a voice model "speech" */
	const char *tpl = sg_srv_model_template(m);
	json_t *caps = json_array();
	if (sg_srv_model_embedder(m)) json_array_append_new(caps, json_string("embedding"));
	else if (sg_srv_model_stt(m)) json_array_append_new(caps, json_string("transcription"));
	else if (sg_srv_model_tts(m)) json_array_append_new(caps, json_string("speech"));
	else {
		json_array_append_new(caps, json_string("completion"));
		if (tpl && strstr(tpl, "tools")) json_array_append_new(caps, json_string("tools"));
		if (sg_srv_model_agent_get(m)->think_start[0]) json_array_append_new(caps, json_string("thinking"));
	}
	char modelfile[4200];
	snprintf(modelfile, sizeof modelfile, "FROM %s\n", in->path);
	return json_pack("{s:s,s:o,s:s,s:o,s:o,s:o,s:s}", "modelfile", modelfile, "parameters",
			 sg_srv_model_lm(m) ? parameters(m) : json_string(""), "template", tpl ? tpl : "", "details", details(in),
			 "model_info", info, "capabilities", caps, "modified_at", when);
}

json_t *sg_ollama_loaded(const sg_srv_model *m, int chat)
{
	char when[48];
	sg_resp_rfc3339(when, sizeof when);
	json_t *o = json_pack("{s:s,s:s,s:b,s:s}", "model", sg_srv_model_info_get(m)->name, "created_at", when, "done", 1,
			      "done_reason", "load");
	if (chat) json_object_set_new(o, "message", json_pack("{s:s,s:s}", "role", "assistant", "content", ""));
	else json_object_set_new(o, "response", json_string(""));
	return o;
}

/* ---- generations: NDJSON lines ---- */

typedef struct gen {
	sg_job *job;
	const sg_srv_req *req;
	const char *model_name;
	int chat, stream;
	int begun, failed;
	char *text; /* non-streamed answer */
	size_t len, cap;
	sg_agent_run *ar;    /* reasoning split, tool calls, constraint; NULL for plain text */
	char *reasoning;     /* non-streamed reasoning */
	size_t rlen, rcap;
	json_t *calls;       /* [{id, name, arguments (text so far), ended}] */
} gen;

static void write_line(gen *g, json_t *o)
{
	if (sg_resp_line(g->job, o, 0)) g->failed = 1;
}

static void begin_stream(gen *g)
{
	if (g->begun) return;
	g->begun = 1;
	sg_job_begin(g->job, 200, "application/x-ndjson");
}

/* {"model", "created_at"} of every line. */
static json_t *line(gen *g)
{
	char when[48];
	sg_resp_rfc3339(when, sizeof when);
	return json_pack("{s:s,s:s}", "model", g->model_name, "created_at", when);
}

static void stream_piece(gen *g, const char *text, size_t len)
{
	begin_stream(g);
	json_t *t = sg_resp_string(text, len);
	json_t *o = line(g);
	if (g->chat) json_object_set_new(o, "message", json_pack("{s:s,s:o}", "role", "assistant", "content", t));
	else json_object_set_new(o, "response", t);
	json_object_set_new(o, "done", json_false());
	write_line(g, o);
}

static int on_event(const sg_gen_event *ev, void *user)
{
	gen *g = user;
	if (g->ar) sg_agent_run_feed(g->ar, ev->text, ev->len);
	else if (g->stream) {
		if (ev->len) stream_piece(g, ev->text, ev->len);
	} else if (sg_resp_buf_add(&g->text, &g->len, &g->cap, ev->text, ev->len)) return g->failed = 1;
	return g->failed || atomic_load(&g->job->cancel);
}

/* ---- the agent writer: answer text, reasoning and tool calls ---- */

static void ag_text(void *ud, const char *s, size_t n)
{
	gen *g = ud;
	if (g->stream) stream_piece(g, s, n);
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
	json_t *o = line(g);
	json_object_set_new(o, "message",
			    json_pack("{s:s,s:s,s:o}", "role", "assistant", "content", "", "thinking", sg_resp_string(s, n)));
	json_object_set_new(o, "done", json_false());
	write_line(g, o);
}

static void ag_call_start(void *ud, int index, const char *name)
{
	gen *g = ud;
	char id[64];
	snprintf(id, sizeof id, "call_%s_%d", strchr(g->job->id, '-') ? strchr(g->job->id, '-') + 1 : g->job->id, index);
	sg_resp_call_start(g->calls, index, id, name);
}

static void ag_call_args(void *ud, int index, const char *s, size_t n)
{
	gen *g = ud;
	if (sg_resp_call_args(g->calls, index, s, n)) g->failed = 1;
}

/* A call goes out whole, once its arguments are complete. */
static void ag_call_end(void *ud, int index)
{
	gen *g = ud;
	json_t *c = json_array_get(g->calls, (size_t)index);
	if (!c) return;
	sg_resp_call_end(g->calls, index);
	if (!g->stream) return;
	begin_stream(g);
	json_t *o = line(g);
	json_object_set_new(o, "message", json_pack("{s:s,s:s,s:[o]}", "role", "assistant", "content", "", "tool_calls",
						    sg_resp_ollama_call(c)));
	json_object_set_new(o, "done", json_false());
	write_line(g, o);
}

static void final_fields(json_t *o, const sg_gen_result *r)
{
	json_int_t prefill_ns = (json_int_t)(r->prefill_s * 1e9), decode_ns = (json_int_t)(r->decode_s * 1e9);
	json_object_set_new(o, "done", json_true());
	json_object_set_new(o, "done_reason", json_string(sg_resp_finish_reason(r)));
	json_object_set_new(o, "total_duration", json_integer((json_int_t)((r->ttft_s + r->decode_s) * 1e9)));
	json_object_set_new(o, "load_duration", json_integer(0));
	json_object_set_new(o, "prompt_eval_count", json_integer((json_int_t)r->n_prompt));
	json_object_set_new(o, "prompt_eval_duration", json_integer(prefill_ns));
	json_object_set_new(o, "eval_count", json_integer((json_int_t)r->n_generated));
	if (r->n_verify) { /* speculative decoding (this server's fields) */
		json_object_set_new(o, "draft_count", json_integer((json_int_t)r->n_drafted));
		json_object_set_new(o, "draft_accepted_count", json_integer((json_int_t)r->n_accepted));
		json_object_set_new(o, "verify_count", json_integer((json_int_t)r->n_verify));
	}
	json_object_set_new(o, "eval_duration", json_integer(decode_ns));
}

static void finish_ok(gen *g, const sg_gen_result *r)
{
	json_t *o = line(g);
	json_t *content = g->stream ? json_string("") : sg_resp_string(g->text ? g->text : "", g->len);
	if (g->chat) {
		json_t *msg = json_pack("{s:s,s:o}", "role", "assistant", "content", content);
		if (!g->stream && g->rlen) json_object_set_new(msg, "thinking", sg_resp_string(g->reasoning, g->rlen));
		if (!g->stream && json_array_size(g->calls)) {
			json_t *tc = json_array();
			size_t i;
			json_t *c;
			json_array_foreach(g->calls, i, c) if (json_is_true(json_object_get(c, "ended")))
				json_array_append_new(tc, sg_resp_ollama_call(c));
			json_object_set_new(msg, "tool_calls", tc);
		}
		json_object_set_new(o, "message", msg);
	} else json_object_set_new(o, "response", content);
	final_fields(o, r);
	if (g->stream) {
		begin_stream(g);
		write_line(g, o);
		return;
	}
	sg_resp_send(g->job, 200, o);
}

/* After the status line is gone an error becomes the stream's last line. */
static void finish_with(gen *g, const sg_srv_err *e)
{
	json_t *body = sg_resp_error_body(g->req->route, e);
	if (g->begun) write_line(g, body);
	else sg_resp_send(g->job, e->status, body);
}

static void finish_error(gen *g, sg_status st)
{
	sg_srv_err e;
	sg_resp_err_engine(&e, st);
	finish_with(g, &e);
}

/* The answer's JSON (format) was not finished when the generation ended. */
static void finish_incomplete(gen *g, const sg_gen_result *r)
{
	sg_srv_err e;
	sg_resp_err_incomplete(&e, r);
	if (g->stream) begin_stream(g);
	finish_with(g, &e);
}

void sg_ollama_run(sg_job *job)
{
	const sg_srv_req *q = &job->req;
	gen g = {.job = job, .req = q, .stream = q->stream, .chat = q->route == SG_ROUTE_OLLAMA_CHAT};
	g.model_name = sg_srv_model_info_get(job->model)->name;
	g.calls = json_array();
	sg_agent_out ao = {.ud = &g, .text = ag_text, .reasoning = ag_reasoning, .call_start = ag_call_start,
			   .call_args = ag_call_args, .call_end = ag_call_end};
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
	} else if (job->agent && job->agent->json && !sg_agent_run_complete(g.ar)) {
		SG_WARN("serve: %s: the JSON answer was unfinished after %zu tokens (%s)", job->id, r.n_generated, sg_resp_finish_reason(&r));
		finish_incomplete(&g, &r);
	} else {
		finish_ok(&g, &r);
		sg_resp_log_done(job, g.model_name, &r, sg_agent_run_tool_finish(g.ar) ? "tool_calls" : sg_resp_finish_reason(&r));
	}
done:
	sg_job_finish(job);
	sg_agent_run_free(g.ar);
	sg_free(g.reasoning);
	json_decref(g.calls);
	sg_free(g.text);
}
