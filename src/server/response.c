/* Response builders shared by the routes (see response.h). */
#include "server/response.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/log.h"
#include "base/utf8.h"
#include "engine/draft.h"
#include "server/metrics.h"
#include "server/model.h"
#include "server/pool.h"

/* Anthropic's error types for the statuses this server answers with. */
static json_t *anthropic_error(const sg_srv_err *e)
{
	const char *type = e->type ? e->type : "invalid_request_error";
	if (e->status == 401) type = "authentication_error";
	else if (e->status == 403) type = "permission_error";
	else if (e->status == 404) type = "not_found_error";
	else if (e->status == 413) type = "request_too_large";
	else if (e->status == 429) type = "rate_limit_error";
	else if (e->status == 503) type = "overloaded_error";
	else if (e->status >= 500) type = "api_error";
	else if (strcmp(type, "incomplete_json") != 0) type = "invalid_request_error";
	return json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", type, "message", e->message);
}

json_t *sg_resp_error_body(sg_srv_route route, const sg_srv_err *e)
{
	if (sg_srv_route_is_ollama(route)) return json_pack("{s:s}", "error", e->message);
	if (sg_srv_route_is_anthropic(route)) return anthropic_error(e);
	return json_pack("{s:{s:s,s:s,s:o,s:o}}", "error", "message", e->message, "type", e->type ? e->type : "invalid_request_error",
			 "param", e->param[0] ? json_string(e->param) : json_null(), "code",
			 e->code[0] ? json_string(e->code) : json_null());
}

int sg_resp_status(sg_status st)
{
	return st == SG_ERR_RANGE || st == SG_ERR_INVALID_ARG ? 400 : st == SG_ERR_NOMEM ? 503 : 500;
}

json_t *sg_resp_string(const char *s, size_t n)
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

void sg_resp_rfc3339(char *buf, size_t cap)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	gmtime_r(&ts.tv_sec, &tm);
	char d[32];
	strftime(d, sizeof d, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf, cap, "%s.%06ldZ", d, ts.tv_nsec / 1000);
}

void sg_resp_rfc3339_of(int64_t t, char *buf, size_t cap)
{
	time_t tt = (time_t)t;
	struct tm tm;
	gmtime_r(&tt, &tm);
	strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

int sg_resp_buf_add(char **b, size_t *len, size_t *cap, const char *s, size_t n)
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
	(*b)[*len] = 0;
	return 0;
}

int sg_resp_line(sg_job *job, json_t *o, int sse)
{
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (!s) return -1;
	int r = sse ? sg_job_write(job, "data: ", 6) : 0;
	r |= sg_job_write(job, s, strlen(s));
	r |= sg_job_write(job, sse ? "\n\n" : "\n", sse ? 2 : 1);
	free(s);
	return r ? -1 : 0;
}

int sg_resp_event(sg_job *job, const char *event, json_t *data)
{
	char *s = data ? json_dumps(data, JSON_COMPACT) : NULL;
	json_decref(data);
	if (!s) return -1;
	char head[64];
	int hn = snprintf(head, sizeof head, "event: %s\ndata: ", event);
	int r = sg_job_write(job, head, (size_t)hn);
	r |= sg_job_write(job, s, strlen(s));
	r |= sg_job_write(job, "\n\n", 2);
	free(s);
	return r ? -1 : 0;
}

void sg_resp_send(sg_job *job, int status, json_t *o)
{
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	sg_job_respond(job, s ? status : 500, "application/json", s ? s : "", s ? strlen(s) : 0);
	free(s);
}

json_t *sg_resp_oai_usage(const sg_gen_result *r)
{
	json_t *u = json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)r->n_prompt, "completion_tokens",
			      (json_int_t)r->n_generated, "total_tokens", (json_int_t)(r->n_prompt + r->n_generated),
			      "prompt_tokens_details", "cached_tokens", (json_int_t)r->n_cached);
	/* speculative decoding, in OpenAI's predicted-output fields: guesses kept and dropped */
	if (u && r->n_verify)
		json_object_set_new(u, "completion_tokens_details",
				    json_pack("{s:I,s:I,s:I}", "accepted_prediction_tokens", (json_int_t)r->n_accepted,
					      "rejected_prediction_tokens", (json_int_t)(r->n_drafted - r->n_accepted),
					      "verify_steps", (json_int_t)r->n_verify));
	return u;
}

json_t *sg_resp_oai_timings(const sg_gen_result *r)
{
	size_t prefilled = r->n_prompt > r->n_cached ? r->n_prompt - r->n_cached : 0;
	double pre_ms = r->prefill_s * 1e3, dec_ms = r->decode_s * 1e3;
	/* decode speed over the tokens after the first (the first comes out of the prefill) */
	double dec_tps = r->n_generated > 1 && r->decode_s > 0 ? (double)(r->n_generated - 1) / r->decode_s : 0;
	return json_pack("{s:I,s:I,s:f,s:f,s:I,s:f,s:f,s:f}", "cache_n", (json_int_t)r->n_cached, "prompt_n",
			 (json_int_t)prefilled, "prompt_ms", pre_ms, "prompt_per_second",
			 r->prefill_s > 0 ? (double)prefilled / r->prefill_s : 0.0, "predicted_n", (json_int_t)r->n_generated,
			 "predicted_ms", dec_ms, "predicted_per_second", dec_tps, "ttft_ms", r->ttft_s * 1e3);
}

void sg_resp_call_start(json_t *calls, int index, const char *id, const char *name)
{
	while (json_array_size(calls) <= (size_t)index)
		json_array_append_new(calls, json_pack("{s:s,s:s,s:s}", "id", "", "name", "", "arguments", ""));
	json_t *c = json_array_get(calls, (size_t)index);
	json_object_set_new(c, "id", json_string(id));
	json_object_set_new(c, "name", json_string(name));
}

int sg_resp_call_args(json_t *calls, int index, const char *s, size_t n)
{
	json_t *c = json_array_get(calls, (size_t)index);
	if (!c) return 0;
	const char *old = json_string_value(json_object_get(c, "arguments"));
	size_t ol = json_string_length(json_object_get(c, "arguments"));
	char *b = sg_malloc(ol + n + 1);
	if (!b) return -1;
	memcpy(b, old, ol);
	memcpy(b + ol, s, n);
	json_object_set_new(c, "arguments", sg_resp_string(b, ol + n));
	sg_free(b);
	return 0;
}

void sg_resp_call_end(json_t *calls, int index)
{
	json_t *c = json_array_get(calls, (size_t)index);
	if (c) json_object_set_new(c, "ended", json_true());
}

json_t *sg_resp_ollama_call(const json_t *c)
{
	const char *a = json_string_value(json_object_get(c, "arguments"));
	json_t *args = a ? json_loads(a, 0, NULL) : NULL;
	if (!args) args = json_object();
	return json_pack("{s:{s:O,s:o}}", "function", "name", json_object_get(c, "name"), "arguments", args);
}

sg_gen_params sg_resp_gen_params(sg_job *job)
{
	const sg_srv_req *q = &job->req;
	sg_gen_params p = sg_gen_default_params();
	p.prompt = job->prompt;
	p.n_prompt = job->n_prompt;
	p.sampler = q->sp;
	p.eos_ids = sg_srv_model_eos(job->model, &p.n_eos);
	p.stop = (const char *const *)q->stop;
	p.stop_lens = q->stop_len;
	p.n_stop = q->n_stop;
	p.max_tokens = q->max_tokens;
	p.cancel = &job->cancel;
	/* speculative decoding: the request's choice, else the model's; a prediction is an n-gram
	 * drafter's reference (its guesses are checked like any other, so a wrong one costs time
	 * only) */
	int mode = q->spec;
	if (q->prediction && mode < 0) mode = SG_SRV_SPEC_NGRAM;
	p.draft_max = q->draft_max;
	p.draft_min = q->draft_min;
	p.drafter = sg_srv_model_drafter(job->model, mode, &p.draft_max, &p.draft_min);
	if (p.drafter && q->prediction && mode == SG_SRV_SPEC_NGRAM && !job->drafter) {
		int32_t *ids = NULL;
		size_t n = 0;
		if (sg_srv_model_tokenize(job->model, q->prediction, q->prediction_len, 0, &ids, &n) == SG_OK &&
		    sg_drafter_ngram(SG_DRAFT_NGRAM_MIN, SG_DRAFT_NGRAM_MAX, &job->drafter) == SG_OK && sg_drafter_ngram_reference(job->drafter, ids, n) == SG_OK)
			p.drafter = sg_drafter_ops(job->drafter);
		else SG_WARN("serve: %s: the prediction is not used: %s", job->id, sg_last_error());
		sg_free(ids);
	}
	return p;
}

const char *sg_resp_finish_reason(const sg_gen_result *r) { return r->finish == SG_GEN_LENGTH ? "length" : "stop"; }

void sg_resp_err_engine(sg_srv_err *e, sg_status st)
{
	int status = sg_resp_status(st);
	sg_srv_err_set(e, status, status == 400 ? "invalid_request_error" : "server_error", NULL, "%s", sg_last_error());
}

void sg_resp_err_incomplete(sg_srv_err *e, const sg_gen_result *r)
{
	sg_srv_err_set(e, 400, "incomplete_json", "max_tokens",
		       "the JSON answer was not finished when the generation ended (%s after %zu tokens): raise max_tokens",
		       sg_resp_finish_reason(r), r->n_generated);
	snprintf(e->code, sizeof e->code, "incomplete_json");
}

/* What the prefix cache reused, for the response headers (set before the status is). */
static void note_reuse(void *user, size_t reused, long diverged)
{
	sg_job *job = user;
	job->reused_prefix = (long)reused;
	job->prefix_miss = diverged;
}

sg_status sg_resp_reserve_draft(sg_job *job, const sg_gen_params *p)
{
	sg_lm *dl = sg_srv_model_draft_lm(job->model);
	if (!dl || !sg_srv_model_is_draft(job->model, p->drafter)) return SG_OK;
	return sg_lm_reserve_positions(dl, p->n_prompt + (size_t)(p->max_tokens > 0 ? p->max_tokens : 0));
}

sg_status sg_resp_generate(sg_job *job, const sg_gen_params *p, sg_gen_result *r)
{
	memset(r, 0, sizeof *r);
	sg_lm_turn turn = {.session_key = job->session, .session_key_len = job->session_len, .on_reuse = note_reuse,
			   .user = job};
	sg_status st = sg_resp_reserve_draft(job, p);
	if (!st) st = sg_lm_generate(sg_srv_model_lm(job->model), &turn, p, r);
	if (job->user) {
		sg_pool_publish(job->user);
		sg_metrics_generation(sg_pool_metrics(job->user), sg_srv_model_info_get(job->model)->name, r);
	}
	return st;
}

void sg_resp_log_done(const sg_job *job, const char *model, const sg_gen_result *r, const char *finish)
{
	double pre = r->n_prompt - r->n_cached;
	SG_INFO("serve: %s %s: prompt %zu tokens (%zu cached), prefill %.1f tok/s, ttft %.1f ms, %zu tokens at %.1f tok/s, %s",
		job->id, model, r->n_prompt, r->n_cached, r->prefill_s > 0 ? pre / r->prefill_s : 0, r->ttft_s * 1e3,
		r->n_generated, r->decode_s > 0 && r->n_generated > 1 ? (double)(r->n_generated - 1) / r->decode_s : 0, finish);
	if (r->n_verify)
		SG_INFO("serve: %s speculative: %zu of %zu guesses kept (%.1f%%), %.2f tokens per verify step", job->id, r->n_accepted,
			r->n_drafted, r->n_drafted ? 100.0 * (double)r->n_accepted / (double)r->n_drafted : 0.0,
			(double)(r->n_accepted + r->n_verify) / (double)r->n_verify);
}
