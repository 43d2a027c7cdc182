/* Ollama's model management routes (see routes_manage.h). */
#include "server/routes_manage.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/log.h"
#include "base/timer.h"
#include "hub/cache.h"
#include "hub/repo.h"
#include "hub/resolve.h"
#include "server/response.h"

#define BAD "invalid_request_error"

/* ---- names ---- */

/* A model name from a body: o["model"], else o["name"] (Ollama's older field). 0 with *out, or
 * the status set in *e. */
static int name_field(const json_t *o, const char *key, const char *alt, const char **out, sg_srv_err *e)
{
	const char *k = alt && !json_object_get(o, key) && json_object_get(o, alt) ? alt : key;
	*out = NULL;
	int given = sg_srv_get_str(o, k, k, out, e);
	if (given < 0) return -given;
	if (!given || !**out) return sg_srv_err_set(e, 400, BAD, key, "'%s' (a model name) is required", key);
	if (strlen(*out) > 127) return sg_srv_err_set(e, 400, BAD, key, "'%s' is longer than 127 bytes", key);
	return 0;
}

/* The hub reference an Ollama model name stands for, into ref[cap]: 0, or a 400 set in *e. */
static int hub_ref_of(const char *name, char *ref, size_t cap, sg_srv_err *e)
{
	const char *s = name;
	if (!strncmp(s, "hf.co/", 6)) s += 6;
	else if (!strncmp(s, "huggingface.co/", 15)) s += 15;
	snprintf(ref, cap, "%s", s);
	size_t n = strlen(ref);
	if (n > 7 && !strcmp(ref + n - 7, ":latest")) ref[n - 7] = 0;
	sg_hub_ref r;
	if (!sg_hub_looks_like_repo(ref) || sg_hub_parse_ref(ref, &r))
		return sg_srv_err_set(e, 400, BAD, "model",
				      "'%.128s' is not a model this server can pull: name a Hugging Face repo (org/name, "
				      "org/name:Q4_K_M, org/name:file.gguf, org/name@revision, or the same after hf.co/)%s%.300s",
				      name, sg_hub_looks_like_repo(ref) ? ": " : "", sg_hub_looks_like_repo(ref) ? sg_last_error() : "");
	return 0;
}

/* ---- /api/pull ---- */

typedef struct pull_work {
	sg_pool *pool;
	char name[128]; /* the name the model is served under: as the client wrote it */
	char ref[256];  /* the hub reference */
	int stream;
	int begun;
	uint64_t last_ns;  /* when the last progress line went out */
	int64_t last_done; /* its byte count */
} pull_work;

typedef struct pull_slot {
	pthread_t th;
	int used;      /* a thread was started here and not yet joined */
	int done;      /* it has finished (joinable at once) */
	sg_job *job;   /* its job (a reference), to cancel it */
	struct sg_pulls *owner;
} pull_slot;

struct sg_pulls {
	pthread_mutex_t mu;
	pull_slot slot[SG_MANAGE_MAX_PULLS];
	int stopped; /* the server is shutting down: no new pull */
};

sg_pulls *sg_pulls_new(void)
{
	sg_pulls *p = sg_calloc(1, sizeof *p);
	if (p) pthread_mutex_init(&p->mu, NULL);
	return p;
}

void sg_pulls_stop(sg_pulls *p)
{
	if (!p) return;
	pthread_mutex_lock(&p->mu);
	p->stopped = 1;
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < SG_MANAGE_MAX_PULLS; i++) {
		pthread_mutex_lock(&p->mu);
		pull_slot *s = &p->slot[i];
		int used = s->used;
		if (used && s->job) atomic_store(&s->job->cancel, 1);
		s->used = 0;
		pthread_mutex_unlock(&p->mu);
		if (used) pthread_join(s->th, NULL);
	}
}

void sg_pulls_free(sg_pulls *p)
{
	if (!p) return;
	sg_pulls_stop(p);
	pthread_mutex_destroy(&p->mu);
	sg_free(p);
}

static void line(sg_job *job, pull_work *w, json_t *o)
{
	if (!w->begun) {
		w->begun = 1;
		sg_job_begin(job, 200, "application/x-ndjson");
	}
	sg_resp_line(job, o, 0);
}

static void status_line(sg_job *job, pull_work *w, const char *status)
{
	if (w->stream) line(job, w, json_pack("{s:s}", "status", status));
}

/* The hub's progress hook: Ollama's lines, bytes at most every 200 ms (and at each file's start
 * and end). Stops the download when the client is gone. */
static int on_progress(void *user, const sg_hub_progress *p)
{
	sg_job *job = user;
	pull_work *w = job->work;
	if (atomic_load(&job->cancel)) return 1;
	if (!w->stream) return 0;
	uint64_t now = sg_time_ns();
	if (p->phase == SG_HUB_FILE_BYTES && now - w->last_ns < 200000000ull && p->completed != p->total) return 0;
	w->last_ns = now;
	char digest[200];
	snprintf(digest, sizeof digest, "%s%s", sg_hub_is_sha256(p->digest) ? "sha256:" : "", p->digest);
	if (p->phase == SG_HUB_FILE_VERIFY) {
		line(job, w, json_pack("{s:s,s:s}", "status", "verifying sha256 digest", "digest", digest));
		return 0;
	}
	if (p->phase == SG_HUB_FILE_DONE) return 0;
	if (p->phase == SG_HUB_FILE_BYTES && p->completed == w->last_done) return 0;
	w->last_done = p->completed;
	char status[1200];
	snprintf(status, sizeof status, "downloading %s", p->file);
	line(job, w, json_pack("{s:s,s:s,s:I,s:I}", "status", status, "digest", digest, "total",
			       (json_int_t)(p->total >= 0 ? p->total : 0), "completed", (json_int_t)p->completed));
	return 0;
}

static int pull_status(sg_status st)
{
	switch (st) {
	case SG_ERR_NOT_FOUND: return 404;
	case SG_ERR_INVALID_ARG: return 400;
	case SG_ERR_IO: return 502; /* the hub could not be reached, or the transfer failed */
	default: return 500;
	}
}

static void pull_fail(sg_job *job, pull_work *w, int status, const char *msg)
{
	json_t *o = json_pack("{s:s}", "error", msg);
	if (w->begun) {
		sg_resp_line(job, o, 0);
		return;
	}
	sg_resp_send(job, status, o);
}

static void pull_run(sg_job *job)
{
	pull_work *w = job->work;
	status_line(job, w, "pulling manifest");
	sg_hub_opts opts = {.update = 1, .quiet = 1, .on_progress = on_progress, .progress_user = job};
	sg_hub_model m;
	sg_status st = sg_hub_resolve(w->ref, &opts, &m);
	if (atomic_load(&job->cancel)) {
		SG_INFO("serve: pull of %s stopped (client gone)", w->ref);
		return;
	}
	if (st) {
		SG_WARN("serve: pull of %s failed: %s", w->ref, sg_last_error());
		pull_fail(job, w, pull_status(st), sg_last_error());
		return;
	}
	SG_INFO("serve: pulled %s: %d files, %llu bytes downloaded (%s)", w->ref, m.files_downloaded,
		(unsigned long long)m.bytes_downloaded, m.path);
	status_line(job, w, "writing manifest");
	sg_srv_err e;
	/* a model pulled from the hub is a text model; only a cached copy outside the hub's cache
	 * (a local folder of the same name) is left where it is on delete */
	if (sg_pool_add(w->pool, w->name, m.path, SG_POOL_TEXT, m.source == SG_HUB_SRC_HF_CACHE ? w->ref : NULL, &e)) {
		pull_fail(job, w, e.status, e.message);
		return;
	}
	json_t *ok = json_pack("{s:s}", "status", "success");
	if (w->stream) line(job, w, ok);
	else sg_resp_send(job, 200, ok);
}

static void *pull_thread(void *arg)
{
	pull_slot *s = arg;
	sg_job *job = s->job;
	pull_run(job);
	sg_job_finish(job);
	pthread_mutex_lock(&s->owner->mu);
	s->job = NULL;
	s->done = 1;
	pthread_mutex_unlock(&s->owner->mu);
	sg_job_unref(job);
	return NULL;
}

static void free_work(void *w) { sg_free(w); }

int sg_manage_pull_parse(const char *body, size_t len, char name[128], char ref[256], int *stream, sg_srv_err *e)
{
	json_t *b;
	int st = sg_srv_body_object(body, len, &b, e);
	if (st) return st;
	const char *nm;
	int insecure = 0, given;
	*stream = 1;
	if ((st = name_field(b, "model", "name", &nm, e))) goto out;
	if ((given = sg_srv_get_bool(b, "stream", "stream", stream, e)) < 0 ||
	    (given = sg_srv_get_bool(b, "insecure", "insecure", &insecure, e)) < 0) {
		st = -given;
		goto out;
	}
	if ((st = hub_ref_of(nm, ref, 256, e))) goto out;
	snprintf(name, 128, "%s", nm);
out:
	json_decref(b);
	return st;
}

int sg_manage_pull_start(sg_pulls *pulls, sg_pool *pool, sg_job *job, const char *body, size_t len, sg_srv_err *e)
{
	pull_work *w = sg_calloc(1, sizeof *w);
	if (!w) return sg_srv_oom(e);
	int st = sg_manage_pull_parse(body, len, w->name, w->ref, &w->stream, e);
	if (st) goto out;
	w->pool = pool;
	job->req.stream = w->stream;
	job->work = w;
	job->work_free = free_work;
	w = NULL;
	pthread_mutex_lock(&pulls->mu);
	pull_slot *slot = NULL;
	for (int i = 0; i < SG_MANAGE_MAX_PULLS; i++) {
		pull_slot *s = &pulls->slot[i];
		if (s->used && s->done) { /* a finished one: its thread is reaped here */
			pthread_join(s->th, NULL);
			s->used = 0;
		}
		if (!s->used && !slot) slot = s;
	}
	if (!slot || pulls->stopped) {
		pthread_mutex_unlock(&pulls->mu);
		st = sg_srv_err_set(e, 503, "server_busy", NULL, "%d pulls are already under way; retry when one is done",
				    SG_MANAGE_MAX_PULLS);
		goto out;
	}
	memset(slot, 0, sizeof *slot);
	slot->owner = pulls;
	slot->job = job;
	slot->used = 1;
	sg_job_ref(job);
	if (pthread_create(&slot->th, NULL, pull_thread, slot)) {
		slot->used = 0;
		slot->job = NULL;
		pthread_mutex_unlock(&pulls->mu);
		sg_job_unref(job);
		st = sg_srv_err_set(e, 500, "server_error", NULL, "cannot start the download thread");
		goto out;
	}
	pthread_mutex_unlock(&pulls->mu);
out:
	sg_free(w);
	return st;
}

/* ---- /api/delete ---- */

typedef struct delete_work {
	sg_pool *pool;
	int index;
	char name[128];
} delete_work;

static void delete_run(sg_job *job)
{
	delete_work *w = job->work;
	char path[4096], ref[256];
	sg_srv_err e;
	if (!sg_pool_path(w->pool, w->index, path, sizeof path, ref, sizeof ref)) {
		sg_resp_send(job, 404, json_pack("{s:s}", "error", "the model was deleted meanwhile"));
		return;
	}
	int shared = sg_pool_others_use(w->pool, w->index);
	if (sg_pool_remove(w->pool, w->index, &e)) {
		sg_resp_send(job, e.status, sg_resp_error_body(SG_ROUTE_OLLAMA_DELETE, &e));
		return;
	}
	if (ref[0] && !shared) {
		char what[512];
		uint64_t freed = 0;
		if (sg_hub_remove(ref, what, sizeof what, &freed))
			SG_WARN("serve: model '%s' deleted, but its files stay: %s", w->name, sg_last_error());
		else SG_INFO("serve: removed %s (%llu bytes)", what, (unsigned long long)freed);
	}
	sg_resp_send(job, 200, json_pack("{s:s}", "status", "success"));
}

int sg_manage_delete_prepare(sg_pool *pool, sg_job *job, const char *body, size_t len, sg_srv_err *e)
{
	json_t *b;
	int st = sg_srv_body_object(body, len, &b, e);
	if (st) return st;
	const char *name;
	if ((st = name_field(b, "model", "name", &name, e))) goto out;
	int i = sg_pool_find(pool, name);
	if (i < 0) {
		st = sg_srv_err_set(e, 404, "not_found_error", "model", "model '%.128s' not found", name);
		goto out;
	}
	delete_work *w = sg_calloc(1, sizeof *w);
	if (!w) {
		st = sg_srv_oom(e);
		goto out;
	}
	w->pool = pool;
	w->index = i;
	snprintf(w->name, sizeof w->name, "%s", name);
	job->work = w;
	job->work_free = free_work;
	job->run = delete_run;
out:
	json_decref(b);
	return st;
}

/* ---- /api/copy ---- */

int sg_manage_copy(sg_pool *pool, const char *body, size_t len, sg_srv_err *e)
{
	json_t *b;
	int st = sg_srv_body_object(body, len, &b, e);
	if (st) return st;
	const char *src, *dst;
	char path[4096], ref[256];
	if ((st = name_field(b, "source", NULL, &src, e)) || (st = name_field(b, "destination", NULL, &dst, e))) goto out;
	int i = sg_pool_find(pool, src);
	if (i < 0 || !sg_pool_path(pool, i, path, sizeof path, ref, sizeof ref)) {
		st = sg_srv_err_set(e, 404, "not_found_error", "source", "model '%.128s' not found", src);
		goto out;
	}
	int d = sg_pool_find(pool, dst);
	if (d == i) goto out; /* a copy onto itself: nothing to do */
	if (d >= 0) {
		st = sg_srv_err_set(e, 409, BAD, "destination", "a model named '%.128s' is already served; delete it first", dst);
		goto out;
	}
	/* the copy shares the files (and the hub reference: the last name deleted removes them) */
	st = sg_pool_add(pool, dst, path, sg_pool_kind_of(pool, i), ref[0] ? ref : NULL, e);
out:
	json_decref(b);
	return st;
}
