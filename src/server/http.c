/* The HTTP side of `saragossa serve` (see server.h): listeners, routing, auth, body limits and
 * deadlines, and the hand-off of generations to the inference worker. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/flags.h"
#include "base/json.h"
#include "base/log.h"
#include "base/timer.h"
#include "server/agent.h"
#include "server/http_raw.h"
#include "server/job.h"
#include "server/listen.h"
#include "server/metrics.h"
#include "server/model.h"
#include "server/pool.h"
#include "server/request.h"
#include "server/response.h"
#include "server/multipart.h"
#include "server/routes.h"
#include "server/routes_audio.h"
#include "server/routes_chat_voice.h"
#include "server/routes_embed.h"
#include "server/routes_manage.h"
#include "server/routes_ollama.h"
#include "server/routes_openai.h"
#include "server/routes_responses.h"
#include "server/routes_speech.h"
#include "server/server.h"
#include "server/web.h"

typedef struct listener {
	struct MHD_Daemon *d;
	int auth; /* TCP listeners check the bearer token */
	struct server *srv;
} listener;

/* One open connection as the read deadline sees it (its MHD socket context). The deadline bounds
 * the whole request, headers included: libmicrohttpd's own timeout is an idle timer that every
 * byte resets, so a client sending one byte a second would hold a connection for ever, and the
 * handler is not called before the headers are complete. The watchdog thread closes a
 * connection whose request is still being read S seconds after the connection opened (or after
 * its previous answer was sent, on a kept-alive connection). Under server.watch_mu. */
typedef struct conn_watch {
	struct MHD_Connection *c;
	int fd;
	uint64_t since_ns;   /* when this request's read began */
	int reading;         /* the request is being read: the deadline applies */
	int requested;       /* its request line arrived: a 408 answers it (else the connection just closes) */
	int answered;        /* an error was written on the socket (408, or a bad Content-Length's) */
	sg_srv_route route;  /* the error format its URL asks for */
	struct conn_watch *prev, *next;
} conn_watch;

typedef struct server {
	sg_server_opts o;
	sg_pool *pool; /* configured models, the resident ones, prefix cache, memory guard */
	sg_rsp_store *responses; /* stored /v1/responses (previous_response_id) */
	sg_queue *queue;
	sg_pulls *pulls; /* /api/pull downloads under way */
	listener ls[3];
	int n_ls;
	int unix_fd;
	atomic_ulong next_id;
	pthread_mutex_t watch_mu;
	pthread_cond_t watch_cv;
	conn_watch *watching; /* the open connections */
	int watch_stop, watch_running;
	pthread_t watchdog;
} server;

static int stop_pipe[2] = {-1, -1};

void sg_server_stop(void)
{
	if (stop_pipe[1] >= 0) {
		char c = 1;
		ssize_t w = write(stop_pipe[1], &c, 1);
		(void)w;
	}
}

sg_server_opts sg_server_default_opts(void)
{
	sg_server_opts o;
	memset(&o, 0, sizeof o);
	o.host = "127.0.0.1";
	o.max_tokens_cap = 4096;
	o.max_body = 4u << 20;
	o.max_upload = 25u << 20;
	o.queue = 16;
	o.read_timeout_s = 30;
	o.max_connections = 64;
	return o;
}

/* ---- routing ---- */

typedef struct route_def {
	const char *path;
	sg_srv_route route;
	const char *method;
} route_def;

static const route_def routes[] = {
	{"/health", SG_ROUTE_HEALTH, "GET"},
	{"/v1/models", SG_ROUTE_OAI_MODELS, "GET"},
	{"/v1/chat/completions", SG_ROUTE_OAI_CHAT, "POST"},
	{"/v1/completions", SG_ROUTE_OAI_COMPLETIONS, "POST"},
	{"/v1/embeddings", SG_ROUTE_OAI_EMBEDDINGS, "POST"},
	{"/v1/audio/transcriptions", SG_ROUTE_OAI_TRANSCRIPTIONS, "POST"},
	{"/v1/audio/translations", SG_ROUTE_OAI_TRANSLATIONS, "POST"},
	{"/v1/audio/speech", SG_ROUTE_OAI_SPEECH, "POST"},
	{"/tokenize", SG_ROUTE_TOKENIZE, "POST"},
	{"/detokenize", SG_ROUTE_DETOKENIZE, "POST"},
	{"/api/chat", SG_ROUTE_OLLAMA_CHAT, "POST"},
	{"/api/generate", SG_ROUTE_OLLAMA_GENERATE, "POST"},
	{"/api/tags", SG_ROUTE_OLLAMA_TAGS, "GET"},
	{"/api/show", SG_ROUTE_OLLAMA_SHOW, "POST"},
	{"/api/ps", SG_ROUTE_OLLAMA_PS, "GET"},
	{"/api/version", SG_ROUTE_OLLAMA_VERSION, "GET"},
	{"/api/embed", SG_ROUTE_OLLAMA_EMBED, "POST"},
	{"/api/embeddings", SG_ROUTE_OLLAMA_EMBEDDINGS, "POST"},
	{"/v1/rerank", SG_ROUTE_RERANK, "POST"},
	{"/rerank", SG_ROUTE_RERANK, "POST"},
	{"/reranking", SG_ROUTE_RERANK, "POST"},
	{"/v1/messages", SG_ROUTE_ANTHROPIC_MESSAGES, "POST"},
	{"/v1/messages/count_tokens", SG_ROUTE_ANTHROPIC_COUNT, "POST"},
	{"/", SG_ROUTE_WEB, "GET"}, /* the chat page (Ollama clients probe "/": a 200 too) */
	{"/metrics", SG_ROUTE_METRICS, "GET"},
	{"/api/pull", SG_ROUTE_OLLAMA_PULL, "POST"},
	{"/api/delete", SG_ROUTE_OLLAMA_DELETE, "DELETE"},
	{"/api/copy", SG_ROUTE_OLLAMA_COPY, "POST"},
	{"/v1/responses", SG_ROUTE_OAI_RESPONSES, "POST"},
	{"/v1/responses/", SG_ROUTE_OAI_RESPONSE_ITEM, "GET"}, /* + {id}: GET, DELETE (by prefix) */
};

/* The request this connection thread answers (libmicrohttpd runs one thread per connection),
 * for /metrics' count of answers by route and status. */
static _Thread_local struct {
	struct server *s;
	const char *path; /* the route's path, NULL when no route matched */
} cur_req;

static enum MHD_Result queue_response(struct MHD_Connection *c, int status, struct MHD_Response *r)
{
	if (cur_req.s) sg_metrics_request(sg_pool_metrics(cur_req.s->pool), cur_req.path, status);
	return MHD_queue_response(c, (unsigned)status, r);
}

/* Per-request state kept across the handler's calls (made when the request line arrives). */
typedef struct conn_req {
	int begun;            /* the handler's first call is done */
	const route_def *rt;
	const char *model_id; /* GET /v1/models/{id} */
	const char *item;     /* /v1/responses/{id}[/input_items]: what follows the prefix */
	int del;              /* ... asked with DELETE */
	char *body;
	size_t len, cap;
	int answered; /* a response was queued before the body ended */
} conn_req;

/* ---- responses ---- */

/* The prefix cache's report on a generation's response. */
static void prefix_headers(struct MHD_Response *r, const sg_job *j)
{
	char v[32];
	if (!j || j->reused_prefix < 0) return;
	snprintf(v, sizeof v, "%ld", j->reused_prefix);
	MHD_add_response_header(r, "x-saragossa-reused-prefix-tokens", v);
	if (j->prefix_miss >= 0) {
		snprintf(v, sizeof v, "%ld", j->prefix_miss);
		MHD_add_response_header(r, "x-saragossa-prefix-miss", v);
	}
}

static enum MHD_Result send_bytes_job(struct MHD_Connection *c, int status, const char *ctype, const char *body, size_t len,
				      int retry_after, const sg_job *j)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
	if (!r) return MHD_NO;
	prefix_headers(r, j);
	MHD_add_response_header(r, "Content-Type", ctype);
	MHD_add_response_header(r, "Server", "saragossa");
	if (retry_after) MHD_add_response_header(r, "Retry-After", "1");
	if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
	enum MHD_Result ret = queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result send_bytes(struct MHD_Connection *c, int status, const char *ctype, const char *body, size_t len,
				  int retry_after)
{
	return send_bytes_job(c, status, ctype, body, len, retry_after, NULL);
}

static enum MHD_Result send_json(struct MHD_Connection *c, int status, json_t *o)
{
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (!s) return send_bytes(c, 500, "application/json", "{\"error\":\"out of memory\"}", 25, 0);
	enum MHD_Result r = send_bytes(c, status, "application/json", s, strlen(s), 0);
	free(s);
	return r;
}

static enum MHD_Result send_err(struct MHD_Connection *c, sg_srv_route route, const sg_srv_err *e)
{
	char *s = NULL;
	json_t *o = sg_resp_error_body(route, e);
	if (o) s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	enum MHD_Result r = s ? send_bytes(c, e->status, "application/json", s, strlen(s), e->status == 503)
			      : send_bytes(c, 500, "application/json", "{\"error\":\"out of memory\"}", 25, 0);
	free(s);
	return r;
}

static enum MHD_Result fail(struct MHD_Connection *c, sg_srv_route route, int status, const char *type, const char *param,
			    const char *code, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static enum MHD_Result fail(struct MHD_Connection *c, sg_srv_route route, int status, const char *type, const char *param,
			    const char *code, const char *fmt, ...)
{
	sg_srv_err e;
	va_list ap;
	va_start(ap, fmt);
	char msg[512];
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	sg_srv_err_set(&e, status, type, param, "%s", msg);
	if (code) snprintf(e.code, sizeof e.code, "%s", code);
	return send_err(c, route, &e);
}

/* ---- models ---- */

static enum MHD_Result unknown_model(struct MHD_Connection *c, server *s, sg_srv_route route, const char *name)
{
	char list[1024];
	sg_pool_names(s->pool, list, sizeof list);
	if (!sg_pool_count(s->pool))
		snprintf(list, sizeof list, "(none: start the server with --model, --stt-model, --embed-model or --tts-model NAME=PATH)");
	return fail(c, route, 404, "not_found_error", "model", "model_not_found", "model '%.200s' not found; available: %s",
		    name && *name ? name : "(default)", list);
}

static int run_job_wait(struct MHD_Connection *c, server *s, sg_job *j);

static int is_audio(sg_srv_route r)
{
	return r == SG_ROUTE_OAI_TRANSCRIPTIONS || r == SG_ROUTE_OAI_TRANSLATIONS;
}

/* The largest body a route takes: an audio upload has its own limit (--max-upload). */
static size_t body_limit(const server *s, sg_srv_route r)
{
	return is_audio(r) ? s->o.max_upload : s->o.max_body;
}

/* The kind of model a route serves, as the pool knows them. */
static sg_pool_kind route_kind(sg_srv_route r)
{
	if (is_audio(r)) return SG_POOL_STT;
	if (r == SG_ROUTE_OAI_SPEECH) return SG_POOL_TTS;
	if (r == SG_ROUTE_OAI_EMBEDDINGS || r == SG_ROUTE_OLLAMA_EMBED || r == SG_ROUTE_OLLAMA_EMBEDDINGS || r == SG_ROUTE_RERANK)
		return SG_POOL_EMBED;
	return SG_POOL_TEXT;
}

/* A text route (chat, completion, tokenize) that names an embedding model. */
static enum MHD_Result not_text_model(struct MHD_Connection *c, sg_srv_route route, const char *name)
{
	return fail(c, route, 400, NULL, "model", "model_not_supported",
		    "model '%.200s' is an embedding model (served with --embed-model): it makes embeddings (/v1/embeddings, "
		    "/api/embed) or rerank scores (/v1/rerank) and cannot generate text",
		    name);
}

static void load_run(sg_job *j)
{
	sg_srv_err e;
	if (sg_pool_ensure(j->user, j->user_i, &e)) {
		json_t *b = sg_resp_error_body(j->req.route, &e);
		char *t = b ? json_dumps(b, JSON_COMPACT) : NULL;
		json_decref(b);
		sg_job_respond(j, e.status, "application/json", t ? t : "", t ? strlen(t) : 0);
		free(t);
		return;
	}
	sg_job_respond(j, 200, "application/json", "{}", 2);
}

/* The model a request names, resident and referenced (the caller releases it): a configured
 * model that is not resident is loaded first, on the worker, behind the requests already
 * queued. NULL when it failed: then *ret is the answer already queued. */
static sg_srv_model *acquire_model(struct MHD_Connection *c, server *s, sg_srv_route route, const char *name,
				   enum MHD_Result *ret)
{
	sg_pool_kind want = route_kind(route);
	int i = want == SG_POOL_STT   ? sg_pool_find_stt(s->pool, name)
		: want == SG_POOL_TTS ? sg_pool_find_tts(s->pool, name)
				      : sg_pool_find_kind(s->pool, name, want == SG_POOL_EMBED);
	sg_pool_kind have = i >= 0 ? sg_pool_kind_of(s->pool, i) : want;
	/* a model of another kind is refused before it is loaded, with what it is and what the route
	 * needs (/api/show describes a model of any kind) */
	if (have != want && route != SG_ROUTE_OLLAMA_SHOW) {
		static const char *const kinds[] = {"a text", "a speech-to-text", "an embedding", "a text-to-speech"};
		if (want == SG_POOL_TTS) {
			*ret = fail(c, route, 400, NULL, "model", "model_not_supported",
				    "model '%.200s' is %s model: /v1/audio/speech needs a text-to-speech model (--tts-model)", name,
				    kinds[have]);
		} else if (have == SG_POOL_TTS) {
			*ret = fail(c, route, 400, NULL, "model", "model_not_supported",
				    "model '%.200s' is a text-to-speech model: it speaks on /v1/audio/speech (and speaks the chat "
				    "answers that ask for audio), it cannot serve this route",
				    name);
		} else if (want == SG_POOL_TEXT && have == SG_POOL_EMBED) {
			*ret = not_text_model(c, route, name);
		} else if (want == SG_POOL_EMBED && have == SG_POOL_TEXT) {
			*ret = fail(c, route, 400, NULL, "model", "model_not_supported",
				    "model '%.200s' generates text and has no embedding head: serve an embedding model with "
				    "--embed-model NAME=PATH",
				    name);
		} else if (want == SG_POOL_TEXT) { /* a speech-to-text model */
			*ret = fail(c, route, 400, NULL, "model", "model_not_supported",
				    "model '%.200s' is a speech-to-text model: use /v1/audio/transcriptions", name);
		} else if (want == SG_POOL_STT) {
			*ret = fail(c, route, 400, NULL, "model", "model_not_supported",
				    "model '%.200s' is %s model: the audio routes need a speech-to-text model (--stt-model)", name,
				    have == SG_POOL_EMBED ? "an embedding" : "a text");
		} else { /* the embedding routes, a speech-to-text model */
			*ret = fail(c, route, 400, NULL, "model", "model_not_supported",
				    "model '%.200s' is a speech-to-text model: the embedding and rerank routes need an embedding "
				    "model (--embed-model)",
				    name);
		}
		return NULL;
	}
	/* on the Anthropic routes a Claude model name the server does not serve ("claude-sonnet-4-5",
	 * what Claude Code asks for) means the default model */
	if (i < 0 && sg_srv_route_is_anthropic(route) && name && !strncmp(name, "claude", 6)) i = sg_pool_find(s->pool, NULL);
	if (i < 0) {
		*ret = unknown_model(c, s, route, name);
		return NULL;
	}
	for (int attempt = 0; attempt < 3; attempt++) {
		sg_srv_model *m = sg_pool_acquire(s->pool, i);
		if (m) return m;
		sg_job *j = sg_job_new();
		if (!j) break;
		j->req.route = route;
		j->run = load_run;
		j->user = s->pool;
		j->user_i = i;
		int st = run_job_wait(c, s, j);
		if (st < 0) {
			*ret = MHD_NO;
			return NULL;
		}
		if (st != 200) {
			pthread_mutex_lock(&j->mu);
			*ret = send_bytes(c, st, "application/json", j->out ? j->out : "", j->out_len, st == 503);
			pthread_mutex_unlock(&j->mu);
			sg_job_unref(j);
			return NULL;
		}
		sg_job_unref(j);
	}
	*ret = fail(c, route, 503, "server_busy", "model", NULL, "model '%.200s' was unloaded again before it could be used; retry",
		    name && *name ? name : "(default)");
	return NULL;
}

/* ---- streaming responses ---- */

typedef struct stream_ctx {
	sg_job *job;
	int sock;
} stream_ctx;

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	stream_ctx *sc = cls;
	sg_job *j = sc->job;
	for (;;) {
		pthread_mutex_lock(&j->mu);
		if (j->out_len) {
			size_t n = j->out_len < max ? j->out_len : max;
			memcpy(buf, j->out, n);
			memmove(j->out, j->out + n, j->out_len - n);
			j->out_len -= n;
			pthread_mutex_unlock(&j->mu);
			return (ssize_t)n;
		}
		int done = j->state == SG_JOB_DONE;
		pthread_mutex_unlock(&j->mu);
		if (done) return MHD_CONTENT_READER_END_OF_STREAM;
		if (sg_job_wait(j, SG_JOB_DONE, sc->sock)) return MHD_CONTENT_READER_END_WITH_ERROR;
	}
}

static void stream_free(void *cls)
{
	stream_ctx *sc = cls;
	/* Freed before the end: the client went away or the write failed. */
	atomic_store(&sc->job->cancel, 1);
	sg_job_unref(sc->job);
	sg_free(sc);
}

static int conn_fd(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	return ci ? ci->connect_fd : -1;
}

/* Queues j and waits until it is done: its status, 503 when the queue is full, -1 when the
 * client went away (j is then released). */
static int run_job_wait(struct MHD_Connection *c, server *s, sg_job *j)
{
	if (sg_queue_push(s->queue, j)) {
		static const char busy[] =
			"{\"error\":{\"message\":\"the server is busy: the queue is full; retry shortly\",\"type\":\"server_busy\"}}";
		sg_job_respond(j, 503, "application/json", busy, sizeof busy - 1);
		return 503;
	}
	if (sg_job_wait(j, SG_JOB_DONE, conn_fd(c))) {
		sg_job_unref(j);
		return -1;
	}
	pthread_mutex_lock(&j->mu);
	int st = j->status ? j->status : 500;
	pthread_mutex_unlock(&j->mu);
	return st;
}

static void send_raw_error(struct MHD_Connection *c, const conn_req *cr, int status, const char *reason, const char *code,
			   const char *msg);
static void send_timeout_raw(int fd, sg_srv_route route, int timeout_s);

static enum MHD_Result answer_job(struct MHD_Connection *c, sg_job *j);

/* Queues the job, waits for its status, and answers (whole, or as a stream). */
static enum MHD_Result run_job(struct MHD_Connection *c, server *s, sg_job *j)
{
	sg_srv_route route = j->req.route;
	if (sg_queue_push(s->queue, j)) {
		sg_job_unref(j);
		return fail(c, route, 503, "server_busy", NULL, "queue_full",
			    "the server is busy: %d requests are already waiting; retry shortly", s->o.queue);
	}
	return answer_job(c, j);
}

/* Waits for a job already started (queued, or on its own thread) and answers with it: whole,
 * or as a stream when it asks for one. Takes the caller's reference. */
static enum MHD_Result answer_job(struct MHD_Connection *c, sg_job *j)
{
	/* No idle timer while the worker has the request: the client's liveness is watched on its
	 * socket instead (the read deadline is restored when the request completes). */
	MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0);
	int sock = conn_fd(c);
	if (sg_job_wait(j, j->req.stream ? SG_JOB_STREAMING : SG_JOB_DONE, sock)) {
		sg_job_unref(j);
		return MHD_NO;
	}
	pthread_mutex_lock(&j->mu);
	int status = j->status ? j->status : 500;
	const char *ctype = j->content_type ? j->content_type : "application/json";
	int done = j->state == SG_JOB_DONE;
	pthread_mutex_unlock(&j->mu);
	if (!j->req.stream || (done && status != 200)) {
		if (!done && sg_job_wait(j, SG_JOB_DONE, sock)) {
			sg_job_unref(j);
			return MHD_NO;
		}
		pthread_mutex_lock(&j->mu);
		enum MHD_Result r = send_bytes_job(c, status, ctype, j->out ? j->out : "", j->out_len, status == 503, j);
		pthread_mutex_unlock(&j->mu);
		sg_job_unref(j);
		return r;
	}
	stream_ctx *sc = sg_calloc(1, sizeof *sc);
	if (!sc) {
		atomic_store(&j->cancel, 1);
		sg_job_unref(j);
		return MHD_NO;
	}
	sc->job = j;
	sc->sock = sock;
	struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, sc, stream_free);
	if (!r) {
		stream_free(sc);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", ctype);
	MHD_add_response_header(r, "Cache-Control", "no-cache");
	prefix_headers(r, j);
	MHD_add_response_header(r, "Server", "saragossa");
	enum MHD_Result ret = queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

/* ---- generation routes ---- */

static int tokenize_prompt(const sg_srv_model *m, sg_srv_req *q, sg_agent_plan *plan, int32_t **ids, size_t *n,
			   sg_srv_err *e)
{
	char *text = NULL;
	size_t len = 0;
	int add_special = 0;
	sg_status st = SG_OK;
	if (q->chat) {
		st = sg_srv_model_chat_prompt(m, q->messages, q->tools, q->kwargs, &text, &len);
		if (st == SG_OK) sg_agent_plan_prompt(plan, text, len);
	} else if (q->prompt_ids) {
		*ids = q->prompt_ids;
		*n = q->n_prompt_ids;
		q->prompt_ids = NULL;
		q->n_prompt_ids = 0;
		int32_t nv = sg_srv_model_info_get(m)->n_vocab;
		for (size_t i = 0; i < *n; i++)
			if ((*ids)[i] >= nv)
				return sg_srv_err_set(e, 400, NULL, "prompt", "prompt token %zu is id %d, outside the vocabulary [0, %d)", i,
						      (*ids)[i], nv);
		return 0;
	} else if (q->route == SG_ROUTE_OLLAMA_GENERATE && !q->raw) {
		/* system and prompt are text that may hold NULs: passed with their lengths */
		json_t *msgs = json_array();
		if (q->system)
			json_array_append_new(msgs, json_pack("{s:s,s:o}", "role", "system", "content",
							      json_stringn(q->system, q->system_len)));
		json_array_append_new(msgs, json_pack("{s:s,s:o}", "role", "user", "content",
						      json_stringn(q->prompt ? q->prompt : "", q->prompt_len)));
		st = sg_srv_model_chat_prompt(m, msgs, NULL, NULL, &text, &len);
		json_decref(msgs);
	} else {
		len = q->prompt ? q->prompt_len : 0;
		text = sg_malloc(len + 1);
		if (!text) return sg_srv_err_set(e, 500, "server_error", NULL, "out of memory");
		if (len) memcpy(text, q->prompt, len);
		add_special = 1;
	}
	if (st) {
		int status = st == SG_ERR_NOT_FOUND || st == SG_ERR_UNSUPPORTED ? 400 : st == SG_ERR_NOMEM ? 500 : 400;
		return sg_srv_err_set(e, status, NULL, "messages", "%s", sg_last_error());
	}
	st = sg_srv_model_tokenize(m, text, len, add_special, ids, n);
	sg_free(text);
	if (st) return sg_srv_err_set(e, 400, NULL, q->chat ? "messages" : "prompt", "%s", sg_last_error());
	return 0;
}

static void release_job_model(sg_job *j)
{
	sg_pool_release(j->user, j->model);
}

static enum MHD_Result handle_generation(struct MHD_Connection *c, server *s, conn_req *cr)
{
	sg_srv_route route = cr->rt->route;
	sg_srv_limits lim = {.max_tokens_cap = s->o.max_tokens_cap};
	sg_srv_err e;
	sg_job *j = sg_job_new();
	if (!j) return fail(c, route, 500, "server_error", NULL, NULL, "out of memory");
	if (sg_srv_parse_request(route, cr->body, cr->len, &lim, &j->req, &e) ||
	    (route == SG_ROUTE_OAI_RESPONSES && sg_responses_prepare(s->responses, j, &e))) {
		sg_job_unref(j);
		return send_err(c, route, &e);
	}
	sg_srv_req *q = &j->req;
	enum MHD_Result mr;
	sg_srv_model *m = acquire_model(c, s, route, q->model, &mr);
	if (!m) {
		sg_job_unref(j);
		return mr;
	}
	if (sg_srv_model_embedder(m)) {
		enum MHD_Result r = not_text_model(c, route, sg_srv_model_info_get(m)->name);
		sg_pool_release(s->pool, m);
		sg_job_unref(j);
		return r;
	}
	j->model = m;
	j->user = s->pool;
	j->on_free = release_job_model;
	if (q->audio_out) { /* a spoken answer: the first voice model is held with the request */
		if (sg_pool_find_tts(s->pool, "") < 0) {
			sg_job_unref(j);
			return fail(c, route, 400, NULL, "modalities", "model_not_supported",
				    "the answer cannot be spoken: this server has no text-to-speech model (--tts-model NAME=MODEL)");
		}
		sg_srv_model *v = acquire_model(c, s, SG_ROUTE_OAI_SPEECH, "", &mr);
		if (!v || sg_chat_audio_attach(j, v, s->pool, &e)) {
			sg_job_unref(j);
			return v ? send_err(c, route, &e) : mr;
		}
	}
	/* the prefix-cache session: the header, else the OpenAI `user` field (Anthropic's
	 * metadata.user_id), kept whole: keys that differ after a NUL are different sessions */
	const char *key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-saragossa-session");
	size_t key_len = key ? strlen(key) : 0;
	if (!key_len) key = q->user, key_len = q->user_len;
	if (key_len) {
		if (!(j->session = sg_malloc(key_len + 1))) {
			sg_job_unref(j);
			return fail(c, route, 500, "server_error", NULL, NULL, "out of memory");
		}
		memcpy(j->session, key, key_len);
		j->session[key_len] = 0;
		j->session_len = key_len;
	}
	const sg_srv_model_info *in = sg_srv_model_info_get(m);
	/* logit_bias ids are checked here, where the vocabulary is known, so the 400 names the field */
	for (size_t i = 0; i < q->sp.n_logit_bias; i++)
		if (q->sp.logit_bias[i].token >= in->n_vocab) {
			enum MHD_Result r = fail(c, route, 400, NULL, "logit_bias", NULL,
						 "'logit_bias' names token %d, outside the vocabulary [0, %d) of model '%s'",
						 q->sp.logit_bias[i].token, in->n_vocab, in->name);
			sg_job_unref(j);
			return r;
		}
	if (q->note[0]) SG_INFO("serve: %s", q->note);
	if (sg_agent_plan_make(m, q, &j->agent, &e)) {
		sg_job_unref(j);
		return send_err(c, route, &e);
	}
	/* Ollama's "load" request: no prompt, nothing to generate. */
	if (sg_srv_route_is_ollama(route) && ((q->chat && !json_array_size(q->messages)) || (!q->chat && q->prompt && !q->prompt_len))) {
		json_t *o = sg_ollama_loaded(m, q->chat);
		sg_job_unref(j);
		return send_json(c, 200, o);
	}
	if (route == SG_ROUTE_ANTHROPIC_COUNT) {
		int32_t *ids = NULL;
		size_t n = 0;
		enum MHD_Result r = tokenize_prompt(m, q, NULL, &ids, &n, &e) ? send_err(c, route, &e)
										: send_json(c, 200, json_pack("{s:I}", "input_tokens", (json_int_t)n));
		sg_free(ids);
		sg_job_unref(j);
		return r;
	}
	if (tokenize_prompt(m, q, j->agent, &j->prompt, &j->n_prompt, &e)) {
		sg_job_unref(j);
		return send_err(c, route, &e);
	}
	if (j->n_prompt == 0) {
		sg_job_unref(j);
		return fail(c, route, 400, NULL, "prompt", NULL, "the prompt is empty after tokenization");
	}
	if (j->n_prompt >= (size_t)in->n_ctx) {
		enum MHD_Result r = fail(c, route, 400, NULL, q->chat ? "messages" : "prompt", "context_length_exceeded",
					 "the prompt has %zu tokens, but the context of model '%s' holds %d tokens (and at least one "
					 "must be left to answer)",
					 j->n_prompt, in->name, in->n_ctx);
		sg_job_unref(j);
		return r;
	}
	unsigned long id = atomic_fetch_add(&s->next_id, 1);
	snprintf(j->id, sizeof j->id, "%s%08lx%08lx",
		 route == SG_ROUTE_OAI_CHAT	   ? "chatcmpl-"
		 : route == SG_ROUTE_OAI_RESPONSES ? "resp_"
		 : sg_srv_route_is_anthropic(route) ? "msg_"
						    : "cmpl-",
		 (unsigned long)time(NULL), id);
	j->created = (int64_t)time(NULL);
	j->run = sg_routes_run_generation;
	return run_job(c, s, j);
}

/* ---- other routes ---- */

static enum MHD_Result handle_tokenize(struct MHD_Connection *c, server *s, conn_req *cr)
{
	sg_srv_route route = cr->rt->route;
	sg_srv_limits lim = {.max_tokens_cap = s->o.max_tokens_cap};
	sg_srv_err e;
	sg_srv_req q;
	enum MHD_Result r;
	sg_srv_model *m = NULL;
	if (sg_srv_parse_request(route, cr->body, cr->len, &lim, &q, &e)) {
		r = send_err(c, route, &e);
		goto out;
	}
	m = acquire_model(c, s, route, q.model, &r);
	if (!m) goto out;
	if (sg_srv_model_embedder(m)) {
		r = not_text_model(c, route, sg_srv_model_info_get(m)->name);
		goto out;
	}
	if (route == SG_ROUTE_TOKENIZE) {
		int32_t *ids = NULL;
		size_t n = 0;
		if (sg_srv_model_tokenize(m, q.prompt, q.prompt_len, q.add_special, &ids, &n)) {
			r = fail(c, route, 400, NULL, "prompt", NULL, "%s", sg_last_error());
			goto out;
		}
		json_t *a = json_array();
		for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
		sg_free(ids);
		r = send_json(c, 200, json_pack("{s:o,s:I,s:i}", "tokens", a, "count", (json_int_t)n, "max_model_len",
						sg_srv_model_info_get(m)->n_ctx));
	} else {
		char *text = NULL;
		size_t len = 0;
		if (sg_srv_model_detokenize(m, q.prompt_ids, q.n_prompt_ids, &text, &len)) {
			r = fail(c, route, 400, NULL, "tokens", NULL, "%s", sg_last_error());
			goto out;
		}
		json_t *t = json_stringn(text, len);
		sg_free(text);
		if (!t) t = json_string("");
		r = send_json(c, 200, json_pack("{s:o}", "prompt", t));
	}
out:
	sg_pool_release(s->pool, m);
	sg_srv_req_free(&q);
	return r;
}

/* The body of a route that only names a model (/api/show, the embedding routes): a JSON object
 * with a string "model" (or alt, when given and "model" is absent). 0 with *b (the body, a new
 * reference) and *name, else the status set in *e. */
static int body_model(const conn_req *cr, const char *alt, json_t **b, const char **name, sg_srv_err *e)
{
	int st = sg_srv_body_object(cr->body, cr->len, b, e);
	if (st) return st;
	const char *key = alt && !json_object_get(*b, "model") && json_object_get(*b, alt) ? alt : "model";
	*name = NULL;
	int given = sg_srv_get_str(*b, key, key, name, e);
	if (given < 0) return -given;
	if (!given) return sg_srv_err_set(e, 400, NULL, "model", "'model' (a string) is required");
	return 0;
}

static enum MHD_Result handle_show(struct MHD_Connection *c, server *s, conn_req *cr)
{
	json_t *b = NULL;
	const char *name;
	sg_srv_err e;
	enum MHD_Result r;
	if (body_model(cr, "name", &b, &name, &e)) {
		r = send_err(c, SG_ROUTE_OLLAMA_SHOW, &e);
	} else {
		sg_srv_model *m = acquire_model(c, s, SG_ROUTE_OLLAMA_SHOW, name, &r);
		if (m) r = send_json(c, 200, sg_ollama_show(m));
		sg_pool_release(s->pool, m);
	}
	json_decref(b);
	return r;
}

static json_t *oai_models(server *s)
{
	sg_pool_item items[SG_SERVER_MAX_MODELS];
	int n = sg_pool_list(s->pool, items, SG_SERVER_MAX_MODELS);
	return sg_openai_models(items, n);
}

/* The worker's half of an embedding or rerank request: the model is resident and held. */
static void embed_job_run(sg_job *j)
{
	sg_srv_err e;
	json_t *out = NULL;
	const sg_embed_req *r = j->work;
	sg_embedder *emb = sg_srv_model_embedder(j->model);
	const char *name = sg_srv_model_info_get(j->model)->name;
	int st = emb ? sg_embed_run(emb, name, r, 0, &out, &e)
		     : sg_srv_err_set(&e, 400, NULL, "model", "model '%.200s' generates text and has no embedding head: serve an embedding "
							      "model with --embed-model NAME=PATH",
				      name);
	if (!emb) snprintf(e.code, sizeof e.code, "model_not_supported");
	json_t *b = st ? sg_resp_error_body(r->route, &e) : out;
	/* 9 significant digits: enough to read back the same f32 */
	char *t = b ? json_dumps(b, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
	json_decref(b);
	if (!t) st = 500;
	sg_job_respond(j, st ? (t ? e.status : 500) : 200, "application/json", t ? t : "{\"error\":\"out of memory\"}",
		       t ? strlen(t) : 25);
	free(t);
}

static void free_embed_req(void *w)
{
	sg_embed_req_free(w);
	sg_free(w);
}

/* /v1/embeddings, /api/embed, /api/embeddings, /v1/rerank: parsed here, run by the worker on an
 * --embed-model (a text model named here is refused there, with the reason). */
static enum MHD_Result handle_embed(struct MHD_Connection *c, server *s, conn_req *cr)
{
	sg_srv_route route = cr->rt->route;
	sg_srv_err e;
	sg_job *j = sg_job_new();
	sg_embed_req *r = sg_calloc(1, sizeof *r);
	if (!j || !r) {
		sg_job_unref(j);
		sg_free(r);
		return fail(c, route, 500, "server_error", NULL, NULL, "out of memory");
	}
	j->work = r;
	j->work_free = free_embed_req;
	j->req.route = route;
	int max_inputs = (int)sg_flag_int("SARAGOSSA_SERVE_EMBED_MAX_INPUTS");
	if (sg_embed_req_parse(route, cr->body, cr->len, max_inputs > 0 ? max_inputs : 1, r, &e)) {
		sg_job_unref(j);
		return send_err(c, route, &e);
	}
	enum MHD_Result mr;
	sg_srv_model *m = acquire_model(c, s, route, r->model, &mr);
	if (!m) {
		sg_job_unref(j);
		return mr;
	}
	j->model = m;
	j->user = s->pool;
	j->on_free = release_job_model;
	j->run = embed_job_run;
	return run_job(c, s, j);
}

/* /v1/audio/transcriptions and /v1/audio/translations: the form is read here, the transcription
 * runs on the worker (routes_audio.c). */
static enum MHD_Result handle_audio(struct MHD_Connection *c, server *s, conn_req *cr)
{
	sg_srv_route route = cr->rt->route;
	sg_srv_err e;
	sg_multipart *mp = sg_malloc(sizeof *mp);
	sg_audio_req *q = sg_calloc(1, sizeof *q);
	sg_job *j = mp && q ? sg_job_new() : NULL;
	if (!j) {
		sg_free(mp);
		sg_free(q);
		return fail(c, route, 500, "server_error", NULL, NULL, "out of memory");
	}
	j->extra = q;
	j->extra_free = sg_audio_req_destroy;
	j->req.route = route;
	const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
	int bad = sg_multipart_parse(ct, cr->body, cr->len, mp, &e);
	if (!bad) bad = sg_audio_parse(route, mp, q, &e);
	sg_free(mp);
	if (bad) {
		sg_job_unref(j);
		return send_err(c, route, &e);
	}
	/* the upload is copied into the request: the connection's buffer can go */
	sg_free(cr->body);
	cr->body = NULL;
	cr->len = cr->cap = 0;
	j->req.stream = q->stream;
	enum MHD_Result mr;
	sg_srv_model *m = acquire_model(c, s, route, q->model, &mr);
	if (!m) {
		sg_job_unref(j);
		return mr;
	}
	j->model = m;
	j->user = s->pool;
	j->on_free = release_job_model;
	j->created = (int64_t)time(NULL);
	j->run = sg_audio_run;
	return run_job(c, s, j);
}

/* Ollama's /api/pull (on its own thread), /api/delete (on the worker), /api/copy. */
static enum MHD_Result handle_manage(struct MHD_Connection *c, server *s, conn_req *cr)
{
	sg_srv_route route = cr->rt->route;
	sg_srv_err e;
	if (route == SG_ROUTE_OLLAMA_COPY)
		return sg_manage_copy(s->pool, cr->body, cr->len, &e) ? send_err(c, route, &e)
								       : send_json(c, 200, json_pack("{s:s}", "status", "success"));
	sg_job *j = sg_job_new();
	if (!j) return fail(c, route, 500, "server_error", NULL, NULL, "out of memory");
	j->req.route = route;
	int bad = route == SG_ROUTE_OLLAMA_PULL ? sg_manage_pull_start(s->pulls, s->pool, j, cr->body, cr->len, &e)
						: sg_manage_delete_prepare(s->pool, j, cr->body, cr->len, &e);
	if (bad) {
		sg_job_unref(j);
		return send_err(c, route, &e);
	}
	return route == SG_ROUTE_OLLAMA_PULL ? answer_job(c, j) : run_job(c, s, j);
}

/* GET /metrics: the counters and the gauges read now. */
static enum MHD_Result send_metrics(struct MHD_Connection *c, server *s)
{
	sg_metrics_gauges g;
	sg_metrics_model res[SG_SERVER_MAX_MODELS];
	char names[SG_SERVER_MAX_MODELS][128];
	sg_pool_gauges(s->pool, &g, res, names, SG_SERVER_MAX_MODELS);
	sg_queue_stats(s->queue, &g.queue_waiting, &g.queue_running);
	size_t n = 0;
	char *t = sg_metrics_render(sg_pool_metrics(s->pool), &g, &n);
	if (!t) return fail(c, SG_ROUTE_METRICS, 500, "server_error", NULL, NULL, "out of memory");
	enum MHD_Result r = send_bytes(c, 200, "text/plain; version=0.0.4; charset=utf-8", t, n, 0);
	sg_free(t);
	return r;
}

/* /v1/audio/speech: the body is read and the voice checked here, the speech runs on the worker
 * (routes_speech.c). */
static enum MHD_Result handle_speech(struct MHD_Connection *c, server *s, conn_req *cr)
{
	sg_srv_route route = cr->rt->route;
	sg_srv_err e;
	sg_speech_req *q = sg_calloc(1, sizeof *q);
	sg_job *j = q ? sg_job_new() : NULL;
	if (!j) {
		sg_free(q);
		return fail(c, route, 500, "server_error", NULL, NULL, "out of memory");
	}
	j->extra = q;
	j->extra_free = sg_speech_req_destroy;
	j->req.route = route;
	if (sg_speech_parse(cr->body, cr->len, q, &e)) {
		sg_job_unref(j);
		return send_err(c, route, &e);
	}
	enum MHD_Result mr;
	sg_srv_model *m = acquire_model(c, s, route, q->model, &mr);
	if (!m) {
		sg_job_unref(j);
		return mr;
	}
	j->model = m;
	j->user = s->pool;
	j->on_free = release_job_model;
	if (sg_speech_resolve_voice(q, sg_srv_model_tts(m), &e)) {
		sg_job_unref(j);
		return send_err(c, route, &e);
	}
	j->req.stream = q->stream;
	j->created = (int64_t)time(NULL);
	j->run = sg_speech_run;
	return run_job(c, s, j);
}

static enum MHD_Result dispatch(struct MHD_Connection *c, server *s, conn_req *cr)
{
	size_t page_len = 0;
	const char *page;
	switch (cr->rt->route) {
	case SG_ROUTE_WEB:
		page = sg_web_page(&page_len);
		return send_bytes(c, 200, "text/html; charset=utf-8", page, page_len, 0);
	case SG_ROUTE_METRICS: return send_metrics(c, s);
	case SG_ROUTE_OLLAMA_PULL:
	case SG_ROUTE_OLLAMA_DELETE:
	case SG_ROUTE_OLLAMA_COPY: return handle_manage(c, s, cr);
	case SG_ROUTE_HEALTH: {
		int waiting, running;
		sg_queue_stats(s->queue, &waiting, &running);
		return send_json(c, 200, json_pack("{s:s,s:i,s:b,s:i,s:o}", "status", "ok", "models", sg_pool_count(s->pool), "busy",
						   running, "queued", waiting, "pool", sg_pool_stats(s->pool)));
	}
	case SG_ROUTE_OAI_MODELS:
		if (cr->model_id) {
			json_t *all = oai_models(s), *d;
			size_t k;
			json_array_foreach(json_object_get(all, "data"), k, d) {
				if (!strcmp(json_string_value(json_object_get(d, "id")), cr->model_id)) {
					json_incref(d);
					json_decref(all);
					return send_json(c, 200, d);
				}
			}
			json_decref(all);
			return unknown_model(c, s, SG_ROUTE_OAI_MODELS, cr->model_id);
		}
		return send_json(c, 200, oai_models(s));
	case SG_ROUTE_OLLAMA_TAGS:
	case SG_ROUTE_OLLAMA_PS: {
		sg_pool_item items[SG_SERVER_MAX_MODELS];
		int n = sg_pool_list(s->pool, items, SG_SERVER_MAX_MODELS);
		return send_json(c, 200, sg_ollama_tags(items, n, cr->rt->route == SG_ROUTE_OLLAMA_PS));
	}
	case SG_ROUTE_OLLAMA_VERSION: return send_json(c, 200, json_pack("{s:s}", "version", sg_version()));
	case SG_ROUTE_OLLAMA_SHOW: return handle_show(c, s, cr);
	case SG_ROUTE_OLLAMA_EMBED:
	case SG_ROUTE_OLLAMA_EMBEDDINGS:
	case SG_ROUTE_RERANK:
	case SG_ROUTE_OAI_EMBEDDINGS: return handle_embed(c, s, cr);
	case SG_ROUTE_OAI_TRANSCRIPTIONS:
	case SG_ROUTE_OAI_TRANSLATIONS: return handle_audio(c, s, cr);
	case SG_ROUTE_OAI_SPEECH: return handle_speech(c, s, cr);
	case SG_ROUTE_TOKENIZE:
	case SG_ROUTE_DETOKENIZE: return handle_tokenize(c, s, cr);
	case SG_ROUTE_OAI_CHAT:
	case SG_ROUTE_OAI_COMPLETIONS:
	case SG_ROUTE_OLLAMA_CHAT:
	case SG_ROUTE_OLLAMA_GENERATE:
	case SG_ROUTE_ANTHROPIC_MESSAGES:
	case SG_ROUTE_OAI_RESPONSES:
	case SG_ROUTE_ANTHROPIC_COUNT: return handle_generation(c, s, cr);
	case SG_ROUTE_OAI_RESPONSE_ITEM: {
		json_t *o;
		sg_srv_err e;
		int st = sg_responses_item(s->responses, cr->del ? "DELETE" : "GET", cr->item, &o, &e);
		return st == 200 ? send_json(c, 200, o) : send_err(c, SG_ROUTE_OAI_RESPONSE_ITEM, &e);
	}
	case SG_ROUTE_NONE: break;
	}
	return fail(c, SG_ROUTE_NONE, 500, "server_error", NULL, NULL, "unrouted request");
}

/* The route format an unknown path's error is written in: Ollama's under /api/. */
static sg_srv_route fallback_route(const char *url)
{
	return strncmp(url, "/api/", 5) == 0 ? SG_ROUTE_OLLAMA_VERSION : SG_ROUTE_NONE;
}

/* ---- the read deadline (see conn_watch) ---- */

static conn_watch *watch_of(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	return ci ? ci->socket_context : NULL;
}

/* The connection this thread serves (libmicrohttpd runs one thread per connection), for the
 * error log hook below. */
static _Thread_local conn_watch *thread_watch;

/* MHD_OPTION_NOTIFY_CONNECTION: a connection opened or closed (it is closed after this). */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode code)
{
	server *s = ((listener *)cls)->srv;
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		conn_watch *w = sg_calloc(1, sizeof *w);
		if (!w) return; /* unwatched: only libmicrohttpd's idle timer applies */
		w->c = c;
		w->fd = conn_fd(c);
		w->since_ns = sg_time_ns();
		w->reading = 1;
		pthread_mutex_lock(&s->watch_mu);
		w->next = s->watching;
		if (w->next) w->next->prev = w;
		s->watching = w;
		pthread_mutex_unlock(&s->watch_mu);
		*socket_context = w;
		return;
	}
	conn_watch *w = *socket_context;
	if (!w) return;
	pthread_mutex_lock(&s->watch_mu);
	if (w->prev) w->prev->next = w->next;
	else s->watching = w->next;
	if (w->next) w->next->prev = w->prev;
	pthread_mutex_unlock(&s->watch_mu);
	if (thread_watch == w) thread_watch = NULL;
	sg_free(w);
	*socket_context = NULL;
}

/* The route a request line's URI names (for the format of an error written before the handler
 * runs), else the fallback format. */
static sg_srv_route route_of_uri(const char *uri)
{
	size_t n = strcspn(uri, "?");
	for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
		if (strlen(routes[i].path) == n && !strncmp(uri, routes[i].path, n)) return routes[i].route;
	return fallback_route(uri);
}

/* MHD_OPTION_URI_LOG_CALLBACK: a request line arrived (before its headers). Its return value is
 * the request's state (*con_cls in the handler). */
static void *on_request_line(void *cls, const char *uri, struct MHD_Connection *c)
{
	server *s = ((listener *)cls)->srv;
	conn_watch *w = watch_of(c);
	thread_watch = w;
	if (w) {
		pthread_mutex_lock(&s->watch_mu);
		w->requested = 1;
		w->route = route_of_uri(uri);
		pthread_mutex_unlock(&s->watch_mu);
	}
	return sg_calloc(1, sizeof(conn_req));
}

/* The request has been read, or answered before its end: the deadline stops. 0 when the
 * deadline fired first (the connection is being closed). */
static int watch_read_done(server *s, struct MHD_Connection *c)
{
	conn_watch *w = watch_of(c);
	if (!w) return 1;
	pthread_mutex_lock(&s->watch_mu);
	int ok = !w->answered;
	w->reading = 0;
	pthread_mutex_unlock(&s->watch_mu);
	return ok;
}

/* Takes the right to write an error on w's socket: 1 once. */
static int watch_claim(server *s, conn_watch *w)
{
	if (!w) return 1;
	pthread_mutex_lock(&s->watch_mu);
	int ok = !w->answered;
	w->answered = 1;
	w->reading = 0;
	pthread_mutex_unlock(&s->watch_mu);
	return ok;
}

/* An answer was sent whole on a connection kept alive: the next request's read begins. */
static void watch_next_request(server *s, conn_watch *w)
{
	if (!w) return;
	pthread_mutex_lock(&s->watch_mu);
	w->since_ns = sg_time_ns();
	w->reading = 1;
	w->requested = 0;
	w->answered = 0;
	pthread_mutex_unlock(&s->watch_mu);
}

/* Every 100 ms: a connection whose request is still arriving past the deadline gets a 408 (when
 * its request line came; else nothing, as for a connection that never sends a request) and is
 * shut, which wakes its thread to close it. Under watch_mu, so the socket cannot be closed (and
 * its descriptor reused) meanwhile: on_connection unlinks it, under the lock, before that. */
static void *watchdog_main(void *arg)
{
	server *s = arg;
	uint64_t limit = (uint64_t)s->o.read_timeout_s * 1000000000ull;
	pthread_mutex_lock(&s->watch_mu);
	while (!s->watch_stop) {
		uint64_t now = sg_time_ns();
		for (conn_watch *w = s->watching; w; w = w->next) {
			if (!w->reading || w->answered || now - w->since_ns <= limit) continue;
			w->answered = 1;
			w->reading = 0;
			SG_INFO("serve: closed a connection whose request was still arriving after %d s", s->o.read_timeout_s);
			if (w->requested) send_timeout_raw(w->fd, w->route, s->o.read_timeout_s);
			shutdown(w->fd, SHUT_RDWR);
		}
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100000000L;
		if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
		pthread_cond_timedwait(&s->watch_cv, &s->watch_mu, &ts);
	}
	pthread_mutex_unlock(&s->watch_mu);
	return NULL;
}

/* A Content-Length that is not a number, or past 2^64 - 1. */
/* libmicrohttpd's error log (MHD_OPTION_EXTERNAL_LOGGER), into the debug log. It is also the one
 * hook for a request whose Content-Length is not a number: libmicrohttpd 0.9.75 answers it with a
 * 400 (413 past 2^64) whose status line and headers it writes twice (it builds the reply again
 * once the request counts as read), and calls no handler on that path, only this log just
 * before. So when it logs while a request's headers are in and their Content-Length is bad, the
 * answer goes out here, in the API's error format, and the socket is shut so that its own reply
 * goes nowhere. */
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	server *s = ((listener *)cls)->srv;
	char msg[256];
	vsnprintf(msg, sizeof msg, fmt, ap);
	msg[strcspn(msg, "\n")] = 0;
	SG_DEBUG("serve: libmicrohttpd: %s", msg);
	conn_watch *w = thread_watch;
	if (!w || !w->requested) return;
	struct MHD_Connection *c = w->c;
	const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	int too_large;
	if (!cl || MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING) ||
	    !sg_http_bad_content_length(cl, &too_large) || !watch_claim(s, w))
		return;
	char m[160];
	snprintf(m, sizeof m, too_large ? "the Content-Length header '%.40s' is past the largest body size"
					: "the Content-Length header '%.40s' is not a number of bytes", cl);
	sg_http_send_raw(w->fd, w->route, too_large ? 413 : 400, too_large ? "Content Too Large" : "Bad Request",
		 too_large ? "request_too_large" : "invalid_content_length", m);
	shutdown(w->fd, SHUT_RDWR);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method, const char *version,
			       const char *upload, size_t *upload_size, void **con_cls)
{
	listener *l = cls;
	server *s = l->srv;
	conn_req *cr = *con_cls;
	if (!cr) { /* on_request_line made none (out of memory) */
		cr = sg_calloc(1, sizeof *cr);
		if (!cr) return MHD_NO;
		*con_cls = cr;
	}
	if (!cr->begun) {
		cr->begun = 1;
		const route_def *path_match = NULL;
		for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
			if (!strcmp(url, routes[i].path)) {
				path_match = &routes[i];
				break;
			}
		}
		if (!path_match && !strncmp(url, "/v1/models/", 11) && url[11]) {
			path_match = &routes[1];
			cr->model_id = url + 11;
		}
		if (!path_match && !strncmp(url, "/v1/responses/", 14) && url[14]) {
			path_match = &routes[sizeof routes / sizeof *routes - 1];
			cr->item = url + 14;
		}
		sg_srv_route fr = path_match ? path_match->route : fallback_route(url);
		cur_req.s = s;
		cur_req.path = path_match ? path_match->path : NULL;
		/* an answer queued now ends the read: the deadline must not write on its socket too */
		/* /health and the page itself need no key (the page asks for it, for its API calls) */
		if (l->auth && !(path_match && (path_match->route == SG_ROUTE_HEALTH || path_match->route == SG_ROUTE_WEB)) &&
		    !sg_server_auth_ok(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization"), s->o.api_key) &&
		    !sg_server_api_key_ok(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key"), s->o.api_key)) {
			cr->answered = 1;
			if (!watch_read_done(s, c)) return MHD_NO;
			return fail(c, fr, 401, "authentication_error", NULL, "invalid_api_key",
				    "missing or wrong API key: send the header 'Authorization: Bearer <key>' (or 'x-api-key: <key>')");
		}
		if (!path_match) {
			cr->answered = 1;
			if (!watch_read_done(s, c)) return MHD_NO;
			return fail(c, fr, 404, "not_found_error", NULL, NULL, "no route for %.200s %.200s", method, url);
		}
		int head_ok = (!strcmp(method, "HEAD") && !strcmp(path_match->method, "GET")) ||
			      (cr->item && !strcmp(method, "DELETE"));
		if (strcmp(method, path_match->method) != 0 && !head_ok) {
			cr->answered = 1;
			if (!watch_read_done(s, c)) return MHD_NO;
			return fail(c, fr, 405, "invalid_request_error", NULL, "method_not_allowed",
				    "%.200s takes %s, not %.20s", url, cr->item ? "GET or DELETE" : path_match->method, method);
		}
		cr->rt = path_match;
		cr->del = cr->item && !strcmp(method, "DELETE");
		const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
		if (cl && strtoull(cl, NULL, 10) > body_limit(s, fr)) {
			cr->answered = 1;
			if (!watch_read_done(s, c)) return MHD_NO;
			return fail(c, fr, 413, "invalid_request_error", NULL, "request_too_large",
				    "the request body has %.20s bytes; the limit is %zu (%s)", cl, body_limit(s, fr),
				    is_audio(fr) ? "--max-upload" : "--max-body");
		}
		return MHD_YES;
	}
	if (*upload_size) {
		size_t n = *upload_size;
		*upload_size = 0;
		if (cr->answered) return MHD_YES;
		/* (a body arriving too slowly is the watchdog's: the deadline covers the whole request) */
		if (cr->len + n > body_limit(s, cr->rt->route)) {
			cr->answered = 1;
			if (!watch_read_done(s, c)) return MHD_NO;
			char msg[128];
			snprintf(msg, sizeof msg, "the request body is over the limit of %zu bytes (%s)", body_limit(s, cr->rt->route),
				 is_audio(cr->rt->route) ? "--max-upload" : "--max-body");
			send_raw_error(c, cr, 413, "Content Too Large", "request_too_large", msg);
			return MHD_NO;
		}
		if (cr->len + n + 1 > cr->cap) {
			size_t cap = cr->cap ? cr->cap : 4096;
			while (cap < cr->len + n + 1) cap *= 2;
			char *nb = sg_realloc(cr->body, cap);
			if (!nb) return MHD_NO;
			cr->body = nb;
			cr->cap = cap;
		}
		memcpy(cr->body + cr->len, upload, n);
		cr->len += n;
		cr->body[cr->len] = 0;
		return MHD_YES;
	}
	if (cr->answered) return MHD_YES;
	cr->answered = 1;
	/* the request is in: the deadline stops (unless it fired first) */
	if (!watch_read_done(s, c)) return MHD_NO;
	return dispatch(c, s, cr);
}

/* An error written straight to the socket, for the moments libmicrohttpd cannot send a queued
 * response: the body is still arriving (it would wait for the rest), or the connection is being
 * closed for silence past the deadline. The caller then drops the connection. */
static void send_raw_error(struct MHD_Connection *c, const conn_req *cr, int status, const char *reason, const char *code,
			   const char *msg)
{
	sg_http_send_raw(conn_fd(c), cr->rt ? cr->rt->route : SG_ROUTE_NONE, status, reason, code, msg);
}

static void send_timeout_raw(int fd, sg_srv_route route, int timeout_s)
{
	char msg[96];
	snprintf(msg, sizeof msg, "the request did not arrive within %d s", timeout_s);
	sg_http_send_raw(fd, route, 408, "Request Timeout", "request_timeout", msg);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
	listener *l = cls;
	server *s = l->srv;
	conn_req *cr = *con_cls;
	conn_watch *w = watch_of(c);
	/* libmicrohttpd's idle timer ran out while the request was arriving: a 408, unless the
	 * watchdog (or the Content-Length check) already answered */
	if (cr && toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED && !cr->answered && watch_claim(s, w))
		send_timeout_raw(conn_fd(c), w ? w->route : cr->rt ? cr->rt->route : SG_ROUTE_NONE, s->o.read_timeout_s);
	if (cr) {
		sg_free(cr->body);
		sg_free(cr);
		*con_cls = NULL;
	}
	if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) {
		MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)s->o.read_timeout_s);
		watch_next_request(s, w);
	}
}

/* ---- listeners ---- */

static sg_status start_listener(server *s, int unix_fd, const char *host, int port)
{
	listener *l = &s->ls[s->n_ls];
	l->srv = s;
	l->auth = unix_fd < 0;
	/* one thread per connection: the Content-Length hook (on_mhd_log) relies on it */
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL | MHD_USE_ERROR_LOG;
	struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	if (unix_fd < 0) {
		const char *h = !strcmp(host, "localhost") ? "127.0.0.1" : host;
		if (inet_pton(AF_INET, h, &in.sin_addr) != 1)
			return sg_error(SG_ERR_INVALID_ARG, "serve: --host '%s' is not an IPv4 address", host);
	}
	struct MHD_OptionItem opts[] = {
		{MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)on_mhd_log, l},
		{MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)completed, l},
		{MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, l},
		{MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)on_request_line, l},
		{MHD_OPTION_UNESCAPE_CALLBACK, (intptr_t)sg_http_unescape_url, l},
		{MHD_OPTION_CONNECTION_TIMEOUT, s->o.read_timeout_s, NULL},
		{MHD_OPTION_CONNECTION_LIMIT, s->o.max_connections, NULL},
		{MHD_OPTION_THREAD_STACK_SIZE, 512 * 1024, NULL},
		{unix_fd >= 0 ? MHD_OPTION_LISTEN_SOCKET : MHD_OPTION_SOCK_ADDR, unix_fd >= 0 ? unix_fd : 0,
		 unix_fd >= 0 ? NULL : (void *)&in},
		{MHD_OPTION_END, 0, NULL},
	};
	l->d = MHD_start_daemon(flags, unix_fd >= 0 ? 0 : (uint16_t)port, NULL, NULL, handler, l, MHD_OPTION_ARRAY, opts,
				MHD_OPTION_END);
	if (!l->d) {
		if (unix_fd >= 0) return sg_error(SG_ERR_IO, "serve: cannot serve on the Unix socket");
		return sg_error(SG_ERR_IO, "serve: cannot listen on %s:%d (in use, or not allowed)", host, port);
	}
	s->n_ls++;
	return SG_OK;
}

static void on_signal(int sig)
{
	(void)sig;
	sg_server_stop();
}

sg_status sg_server_run(const sg_server_opts *opts)
{
	server *s = sg_calloc(1, sizeof *s);
	if (!s) return SG_FAIL(SG_ERR_NOMEM, "server state");
	s->o = *opts;
	s->unix_fd = -1;
	pthread_mutex_init(&s->watch_mu, NULL);
	pthread_cond_init(&s->watch_cv, NULL);
	sg_status st = SG_OK;
	if ((s->o.port || s->o.ollama_port) && (!s->o.api_key || !*s->o.api_key)) {
		st = sg_error(SG_ERR_INVALID_ARG,
			      "serve: TCP (--port/--ollama-port) needs an API key: pass --api-key KEY or set SARAGOSSA_API_KEY "
			      "(clients send 'Authorization: Bearer KEY'); the Unix socket needs none");
		goto out;
	}
	if ((s->o.port || s->o.ollama_port) && !sg_http_is_loopback(s->o.host))
		SG_WARN("serve: listening on %s, reachable from other machines; the API key is required on every request",
			s->o.host);
	if (!s->o.socket_path && !s->o.port && !s->o.ollama_port) {
		st = sg_error(SG_ERR_INVALID_ARG, "serve: no listener (give --socket PATH and/or --port N)");
		goto out;
	}
	sg_srv_spec spec = {.mode = s->o.spec_mode, .draft_path = s->o.draft_model, .draft_max = s->o.draft_max,
			    .draft_min = s->o.draft_min};
	if ((st = sg_pool_new(s->o.models, s->o.n_models, s->o.n_ctx, !s->o.no_prefix_cache, &spec, &s->pool))) goto out;
	if ((st = sg_pool_load_initial(s->pool))) goto out;
	if (!(s->responses = sg_rsp_store_new((int)sg_flag_int("SARAGOSSA_SERVE_RESPONSES_MAX")))) {
		st = SG_FAIL(SG_ERR_NOMEM, "response store");
		goto out;
	}
	if (pipe2(stop_pipe, O_CLOEXEC)) {
		st = sg_error(SG_ERR_IO, "serve: pipe: %s", strerror(errno));
		goto out;
	}
	s->queue = sg_queue_start(s->o.queue);
	s->pulls = sg_pulls_new();
	if (!s->queue || !s->pulls) {
		st = SG_FAIL(SG_ERR_NOMEM, "worker thread");
		goto out;
	}
	signal(SIGPIPE, SIG_IGN);
	if (pthread_create(&s->watchdog, NULL, watchdog_main, s)) {
		st = SG_FAIL(SG_ERR_NOMEM, "read-deadline thread");
		goto out;
	}
	s->watch_running = 1;
	if (s->o.socket_path) {
		if ((st = sg_srv_open_unix(s->o.socket_path, &s->unix_fd))) goto out;
		if ((st = start_listener(s, s->unix_fd, NULL, 0))) goto out;
		fprintf(stderr, "saragossa serve: listening on unix:%s\n", s->o.socket_path);
	}
	if (s->o.port) {
		if ((st = start_listener(s, -1, s->o.host, s->o.port))) goto out;
		fprintf(stderr, "saragossa serve: listening on http://%s:%d\n", s->o.host, s->o.port);
	}
	if (s->o.ollama_port && s->o.ollama_port != s->o.port) {
		if ((st = start_listener(s, -1, s->o.host, s->o.ollama_port))) goto out;
		fprintf(stderr, "saragossa serve: listening on http://%s:%d (Ollama clients)\n", s->o.host, s->o.ollama_port);
	}
	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	fflush(stderr);
	for (;;) {
		char ch;
		ssize_t r = read(stop_pipe[0], &ch, 1);
		if (r == 1 || (r < 0 && errno != EINTR)) break;
	}
	fprintf(stderr, "saragossa serve: shutting down\n");
out:
	if (s->queue) sg_queue_stop(s->queue);
	sg_pulls_stop(s->pulls);
	if (s->watch_running) {
		pthread_mutex_lock(&s->watch_mu);
		s->watch_stop = 1;
		pthread_cond_signal(&s->watch_cv);
		pthread_mutex_unlock(&s->watch_mu);
		pthread_join(s->watchdog, NULL);
	}
	for (int i = 0; i < s->n_ls; i++) MHD_stop_daemon(s->ls[i].d);
	sg_queue_free(s->queue);
	sg_pulls_free(s->pulls);
	if (s->unix_fd >= 0) {
		close(s->unix_fd);
		unlink(s->o.socket_path);
	}
	sg_pool_free(s->pool);
	sg_rsp_store_free(s->responses);
	pthread_cond_destroy(&s->watch_cv);
	pthread_mutex_destroy(&s->watch_mu);
	for (int i = 0; i < 2; i++)
		if (stop_pipe[i] >= 0) close(stop_pipe[i]), stop_pipe[i] = -1;
	sg_free(s);
	return st;
}
