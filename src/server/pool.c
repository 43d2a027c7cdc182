/* The model pool (see pool.h). */
#include "server/pool.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/backend.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/flags.h"
#include "base/log.h"
#include "engine/draft.h"
#include "engine/expert_cache.h"
#include "engine/session.h"
#include "server/metrics.h"

typedef struct entry {
	char name[128];
	char path[4096];
	int stt;         /* a Whisper model (the audio routes) */
	int embed;       /* an embedding model or cross-encoder (--embed-model) */
	int tts;         /* a text-to-speech model (--tts-model) */
	char vocab[4096]; /* stt: the vocabulary file when the model carries none (--stt-vocab); "" none */
	sg_srv_model *m; /* NULL when not resident */
	int refs;        /* requests using m */
	uint64_t used;   /* tick of the last acquire: the LRU order */
	int pulled;      /* added by /api/pull: its files are in the Hugging Face cache */
	char ref[256];   /* what was pulled (the hub reference), for removing its files */
} entry;

/* A slot whose model was deleted (/api/delete) has an empty name: every lookup skips it, and
 * a later add may reuse it once nothing holds it. */
#define LIVE(en) ((en)->name[0] != 0)

struct sg_pool {
	pthread_mutex_t mu; /* guards entries' m, refs, used */
	entry e[SG_SERVER_MAX_MODELS];
	int n, cap, lru;
	int32_t n_ctx;
	sg_srv_spec spec;     /* every model's speculative decoding */
	char draft_path[4096];
	uint64_t tick;
	sg_prefix_cache *pc;
	sg_memguard guard;
	sg_status load_st; /* the last failed load's status */
	int block_tokens;
	int accel;            /* RETI_SERVE_BACKEND is a GPU: model weights go to device memory */
	const char *accel_be; /* that accelerator's backend name, whose device memory the guard reads
			       * before any model is resident there; NULL: none */
	/* what /health shows, copied by the worker under mu (connection threads never read the
	 * cache or the guard themselves) */
	uint64_t pub_blocks, pub_bytes, pub_ev_blocks, pub_ev_models, pub_refusals;
	sg_metrics *metrics; /* what /metrics counts (NULL when out of memory: nothing is counted) */
};

static void free_snapshot(void *p) { sg_snapshot_free(p); }

/* The guard's accelerator term: the device memory of the GPU the models run on, read from a
 * resident model's backend, else from the pool's own measuring backend. Worker only. */
static void accel_probe(void *user, sg_mem_probe *out)
{
	sg_pool *p = user;
	uint64_t f = 0, t = 0;
	int have = 0;
	pthread_mutex_lock(&p->mu);
	for (int i = 0; i < p->n && !have; i++)
		if (p->e[i].m && sg_srv_model_lm(p->e[i].m)) have = sg_lm_device_memory(sg_srv_model_lm(p->e[i].m), &f, &t);
	pthread_mutex_unlock(&p->mu);
	if (!have && p->accel_be) {
		have = sg_backend_device_memory(p->accel_be, 0, &f, &t) == SG_OK;
		if (!have) SG_WARN("serve: cannot read the accelerator's memory: %s", sg_last_error());
	}
	if (!have) return;
	out->have_accel = 1;
	out->accel_free = f;
	out->accel_total = t;
}

sg_status sg_pool_new(const sg_server_model_spec *specs, int n, int32_t n_ctx, int prefix_cache, const sg_srv_spec *spec,
		      sg_pool **out)
{
	*out = NULL;
	if (n < 0 || n > SG_SERVER_MAX_MODELS)
		return sg_error(SG_ERR_INVALID_ARG, "serve: %d models configured; at most %d", n, SG_SERVER_MAX_MODELS);
	for (int i = 0; i < n; i++)
		for (int k = 0; k < i; k++)
			if (!strcmp(specs[k].name, specs[i].name))
				return sg_error(SG_ERR_INVALID_ARG, "serve: model name '%s' is given twice", specs[i].name);
	int64_t cap = sg_flag_int("RETI_SERVE_MODEL_POOL");
	if (cap < 1) return sg_error(SG_ERR_INVALID_ARG, "serve: RETI_SERVE_MODEL_POOL=%lld (want >= 1)", (long long)cap);
	sg_pool *p = sg_calloc(1, sizeof *p);
	if (!p) return SG_FAIL(SG_ERR_NOMEM, "model pool");
	sg_status st = sg_memguard_init(&p->guard);
	p->guard.accel_probe = accel_probe;
	p->guard.accel_user = p;
	p->accel_be = sg_srv_backend_accel();
	p->accel = p->accel_be != NULL;
	if (!st && prefix_cache && sg_flag_bool("RETI_SERVE_PREFIX_CACHE")) {
		sg_pc_params pp = sg_pc_default_params();
		pp.free_payload = free_snapshot;
		st = sg_pc_new(&pp, &p->pc);
		if (st) sg_error_wrap(st, "serve: prefix cache");
	}
	if (st) {
		sg_free(p);
		return st;
	}
	pthread_mutex_init(&p->mu, NULL);
	p->metrics = sg_metrics_new();
	p->n = n;
	p->cap = cap > SG_SERVER_MAX_MODELS ? SG_SERVER_MAX_MODELS : (int)cap;
	p->lru = sg_flag_bool("RETI_SERVE_LRU");
	p->block_tokens = (int)sg_flag_int("RETI_SERVE_PREFIX_BLOCK_TOKENS");
	if (p->block_tokens < 1) p->block_tokens = 256;
	p->n_ctx = n_ctx;
	if (spec) {
		p->spec = *spec;
		if (spec->draft_path) snprintf(p->draft_path, sizeof p->draft_path, "%s", spec->draft_path);
		p->spec.draft_path = p->draft_path[0] ? p->draft_path : NULL;
	}
	for (int i = 0; i < n; i++) {
		snprintf(p->e[i].name, sizeof p->e[i].name, "%s", specs[i].name);
		snprintf(p->e[i].path, sizeof p->e[i].path, "%s", specs[i].path);
		p->e[i].stt = specs[i].stt;
		p->e[i].embed = specs[i].embed;
		p->e[i].tts = specs[i].tts;
		snprintf(p->e[i].vocab, sizeof p->e[i].vocab, "%s", specs[i].vocab ? specs[i].vocab : "");
	}
	*out = p;
	return SG_OK;
}

/* Unloads e unless a request holds it (force: at shutdown). 1 when it was unloaded. */
static int unload(sg_pool *p, entry *e, int force)
{
	sg_srv_model *m;
	pthread_mutex_lock(&p->mu);
	m = force || !e->refs ? e->m : NULL;
	if (m) e->m = NULL;
	pthread_mutex_unlock(&p->mu);
	if (!m) return 0;
	/* the engine drops the model's cache blocks as it is freed */
	SG_INFO("serve: unloaded model '%s'", e->name);
	sg_srv_model_free(m);
	return 1;
}

void sg_pool_free(sg_pool *p)
{
	if (!p) return;
	for (int i = 0; i < p->n; i++) unload(p, &p->e[i], 1);
	sg_pc_free(p->pc);
	sg_metrics_free(p->metrics);
	pthread_mutex_destroy(&p->mu);
	sg_free(p);
}

int sg_pool_count(const sg_pool *p)
{
	int n = 0;
	pthread_mutex_lock((pthread_mutex_t *)&p->mu);
	for (int i = 0; i < p->n; i++) n += LIVE(&p->e[i]);
	pthread_mutex_unlock((pthread_mutex_t *)&p->mu);
	return n;
}
sg_metrics *sg_pool_metrics(sg_pool *p) { return p->metrics; }
int sg_pool_block_tokens(const sg_pool *p) { return p->block_tokens; }
sg_prefix_cache *sg_pool_prefix_cache(sg_pool *p) { return p->pc; }
sg_memguard *sg_pool_guard(sg_pool *p) { return &p->guard; }

int sg_pool_find_kind(sg_pool *p, const char *name, int embed)
{
	int r = -1;
	pthread_mutex_lock(&p->mu);
	for (int i = 0; i < p->n && r < 0; i++)
		if (LIVE(&p->e[i]) &&
		    (name && *name ? !strcmp(p->e[i].name, name) : p->e[i].embed == embed && (embed || (!p->e[i].stt && !p->e[i].tts))))
			r = i;
	pthread_mutex_unlock(&p->mu);
	return r;
}

int sg_pool_find(sg_pool *p, const char *name)
{
	return sg_pool_find_kind(p, name, 0);
}

int sg_pool_find_stt(sg_pool *p, const char *name)
{
	int i = name && *name ? sg_pool_find(p, name) : -1;
	if (i >= 0) return i;
	/* no model of that name: "" and OpenAI's "whisper-1" (what its clients send) mean the first
	 * speech-to-text model */
	if (name && *name && strcmp(name, "whisper-1")) return -1;
	int r = -1;
	pthread_mutex_lock(&p->mu);
	for (int k = 0; k < p->n && r < 0; k++)
		if (LIVE(&p->e[k]) && p->e[k].stt) r = k;
	pthread_mutex_unlock(&p->mu);
	return r;
}

/* OpenAI's speech model names: what its clients send for text-to-speech */
static int openai_tts_name(const char *name)
{
	return !strcmp(name, "tts-1") || !strcmp(name, "tts-1-hd") || !strncmp(name, "gpt-4o-mini-tts", 15);
}

int sg_pool_find_tts(sg_pool *p, const char *name)
{
	int i = name && *name ? sg_pool_find(p, name) : -1;
	if (i >= 0) return i;
	if (name && *name && !openai_tts_name(name)) return -1;
	int r = -1;
	pthread_mutex_lock(&p->mu);
	for (int k = 0; k < p->n && r < 0; k++)
		if (LIVE(&p->e[k]) && p->e[k].tts) r = k;
	pthread_mutex_unlock(&p->mu);
	return r;
}

int sg_pool_is_stt(const sg_pool *p, int i)
{
	return i >= 0 && i < p->n && p->e[i].stt;
}

sg_pool_kind sg_pool_kind_of(const sg_pool *p, int i)
{
	if (i < 0 || i >= p->n) return SG_POOL_TEXT;
	return p->e[i].stt ? SG_POOL_STT : p->e[i].embed ? SG_POOL_EMBED : p->e[i].tts ? SG_POOL_TTS : SG_POOL_TEXT;
}

void sg_pool_names(sg_pool *p, char *buf, size_t cap)
{
	size_t o = 0;
	buf[0] = 0;
	pthread_mutex_lock(&p->mu);
	for (int i = 0; i < p->n && o + 2 < cap; i++)
		if (LIVE(&p->e[i])) o += (size_t)snprintf(buf + o, cap - o, "%s%s", o ? ", " : "", p->e[i].name);
	pthread_mutex_unlock(&p->mu);
}

sg_srv_model *sg_pool_acquire(sg_pool *p, int i)
{
	pthread_mutex_lock(&p->mu);
	sg_srv_model *m = i >= 0 && i < p->n ? p->e[i].m : NULL;
	if (m) {
		p->e[i].refs++;
		p->e[i].used = ++p->tick;
	}
	pthread_mutex_unlock(&p->mu);
	return m;
}

void sg_pool_release(sg_pool *p, sg_srv_model *m)
{
	if (!m) return;
	pthread_mutex_lock(&p->mu);
	for (int i = 0; i < p->n; i++)
		if (p->e[i].m == m && p->e[i].refs > 0) p->e[i].refs--;
	pthread_mutex_unlock(&p->mu);
}

/* The least recently used resident model nobody uses, other than the one generating through
 * keep (may be NULL); -1 if none. */
static int idle_lru(sg_pool *p, const sg_lm *keep)
{
	int best = -1;
	pthread_mutex_lock(&p->mu);
	for (int i = 0; i < p->n; i++) {
		entry *e = &p->e[i];
		if (!e->m || e->refs || (keep && sg_srv_model_lm(e->m) == keep)) continue;
		if (best < 0 || e->used < p->e[best].used) best = i;
	}
	pthread_mutex_unlock(&p->mu);
	return best;
}

static int resident(sg_pool *p)
{
	int r = 0;
	pthread_mutex_lock(&p->mu);
	for (int i = 0; i < p->n; i++) r += p->e[i].m != NULL;
	pthread_mutex_unlock(&p->mu);
	return r;
}

/* ---- the guard's evictors ---- */

static int evict_block(void *user)
{
	sg_pool *p = user;
	return p->pc && sg_pc_evict_lru(p->pc) > 0;
}

typedef struct model_evictor {
	sg_pool *p;
	const sg_lm *keep;
} model_evictor;

static __thread model_evictor cur_evictor;

static int evict_model(void *user)
{
	model_evictor *me = user;
	int i = idle_lru(me->p, me->keep);
	if (i < 0) return 0;
	SG_INFO("serve: memory guard evicts idle model '%s'", me->p->e[i].name);
	return unload(me->p, &me->p->e[i], 0);
}

/* Shrinks the expert slot cache of one resident model by an eighth (at least one layer's
 * experts, never below one layer's): the emptied slots' memory goes back to the system and the
 * output stays the same (evicted experts are read again when asked for). 1 when a cache shrank. */
static int shrink_experts(void *user)
{
	sg_pool *p = user;
	int done = 0;
	pthread_mutex_lock(&p->mu);
	for (int i = 0; i < p->n && !done; i++) {
		sg_lm *lm = p->e[i].m ? sg_srv_model_lm(p->e[i].m) : NULL;
		sg_xc_stats st;
		if (!lm || !sg_xc_stats_get(sg_lm_model(lm), &st)) continue;
		int64_t step = st.slots / 8;
		int64_t before = st.slots, after = sg_xc_resize(sg_lm_model(lm), before - (step > 1 ? step : 1));
		if (after < before) {
			SG_INFO("serve: memory guard shrinks the expert cache of '%s' from %lld to %lld slots", p->e[i].name,
				(long long)before, (long long)after);
			done = 1;
		}
	}
	pthread_mutex_unlock(&p->mu);
	return done;
}

/* The guard's evictors in its order: cache blocks, expert cache slots, then idle models other
 * than keep's. */
static int evictors(sg_pool *p, const sg_lm *keep, sg_mem_evictor ev[3])
{
	/* one worker thread: its evictor context lives in thread-local storage */
	cur_evictor.p = p;
	cur_evictor.keep = keep;
	/* block snapshots are device memory on a GPU (SARAGOSSA_SNAPSHOT_RESIDENT), else host memory; a
	 * model holds both (its mapping, its device tensors) */
	ev[0] = (sg_mem_evictor){.evict = evict_block,
				 .user = p,
				 .counter = &p->guard.evicted_blocks,
				 .frees = p->accel && sg_flag_bool("SARAGOSSA_SNAPSHOT_RESIDENT") ? SG_MEM_FREES_HOST | SG_MEM_FREES_ACCEL : SG_MEM_FREES_HOST};
	ev[1] = (sg_mem_evictor){.evict = shrink_experts, .user = p, .counter = NULL, .frees = SG_MEM_FREES_HOST};
	ev[2] = (sg_mem_evictor){.evict = evict_model,
				 .user = &cur_evictor,
				 .counter = &p->guard.evicted_models,
				 .frees = SG_MEM_FREES_HOST | SG_MEM_FREES_ACCEL};
	return 3;
}

/* The engine's memory hook: the guard, with cache blocks and the idle models other than the
 * one asking as what it may evict. Worker only. */
static sg_status reserve(void *user, const sg_lm *lm, const char *what, uint64_t bytes, int on_device)
{
	sg_pool *p = user;
	sg_mem_evictor ev[3];
	int n_ev = evictors(p, lm, ev);
	return sg_memguard_reserve(&p->guard, what, bytes, on_device ? SG_MEM_ACCEL : SG_MEM_HOST, ev, n_ev);
}

/* Bytes a model will take once loaded: its weight files (mapped and touched). */
static uint64_t weight_bytes(const char *path)
{
	struct stat st;
	if (stat(path, &st)) return 0;
	if (!S_ISDIR(st.st_mode)) return (uint64_t)st.st_size;
	char f[4200];
	snprintf(f, sizeof f, "%s/model.safetensors", path);
	if (!stat(f, &st)) return (uint64_t)st.st_size;
	snprintf(f, sizeof f, "%s/model.bin", path); /* a CTranslate2 folder (Whisper) */
	if (!stat(f, &st)) return (uint64_t)st.st_size;
	/* a Piper voice's folder: its .onnx files */
	uint64_t total = 0;
	DIR *d = opendir(path);
	for (struct dirent *de; d && (de = readdir(d));) {
		size_t l = strlen(de->d_name);
		if (l > 5 && !strcmp(de->d_name + l - 5, ".onnx") &&
		    snprintf(f, sizeof f, "%s/%s", path, de->d_name) < (int)sizeof f && !stat(f, &st))
			total += (uint64_t)st.st_size;
	}
	if (d) closedir(d);
	return total;
}

static int load(sg_pool *p, int i, sg_srv_err *e)
{
	entry *en = &p->e[i];
	uint64_t need = weight_bytes(en->path);
	/* an expert cache reads the experts into a pool the planner (auto) or its size bounds, not
	 * the whole file: the trunk is what the load maps and touches */
	sg_xc_spec xs;
	char xerr[200];
	if (!en->stt && !en->embed && !sg_xc_parse(sg_flag_str("SARAGOSSA_EXPERT_CACHE"), &xs, xerr, sizeof xerr) && xs.mode != SG_XC_OFF)
		need = 0;
	/* a text model loads the draft model beside it: its weights count too (its KV rows are
	 * asked for per request, as the target's) */
	int with_draft = !en->stt && !en->embed && p->spec.draft_path && sg_drafter_enabled("model");
	if (with_draft) need += weight_bytes(p->spec.draft_path);
	/* on a GPU the weights are uploaded to device memory (the KV cache too, allocated whole at
	 * load); on the CPU they are mapped and touched in host memory */
	sg_mem_where where = p->accel ? SG_MEM_ACCEL : SG_MEM_HOST;
	char what[200];
	snprintf(what, sizeof what, "model '%s'%s", en->name, with_draft ? " with its draft model" : "");
	if (p->guard.on) {
		/* Refuse before evicting anything when even an empty pool and cache could not hold it. */
		uint64_t reclaim = where == SG_MEM_HOST && p->pc ? sg_pc_bytes(p->pc) : 0;
		pthread_mutex_lock(&p->mu);
		for (int k = 0; k < p->n; k++)
			if (p->e[k].m && !p->e[k].refs) reclaim += sg_srv_model_info_get(p->e[k].m)->size_bytes;
		pthread_mutex_unlock(&p->mu);
		if (sg_memguard_could_fit(&p->guard, what, need, where, reclaim))
			return sg_srv_err_set(e, 503, "server_error", "model", "%s", sg_last_error());
	}
	if (resident(p) >= p->cap) {
		int v = idle_lru(p, NULL);
		if (!p->lru)
			return sg_srv_err_set(e, 503, "server_error", "model",
					      "model '%s' is not loaded and the pool of %d models is full; RETI_SERVE_LRU=0 keeps "
					      "loaded models until restart",
					      en->name, p->cap);
		if (v < 0)
			return sg_srv_err_set(e, 503, "server_busy", "model",
					      "model '%s' is not loaded and every one of the %d resident models is in use; retry shortly",
					      en->name, p->cap);
		SG_INFO("serve: pool full, evicting the least recently used model '%s'", p->e[v].name);
		if (!unload(p, &p->e[v], 0))
			return sg_srv_err_set(e, 503, "server_busy", "model", "model '%s' is not loaded and the pool is busy; retry shortly",
					      en->name);
	}
	sg_mem_evictor ev[3];
	int n_ev = evictors(p, NULL, ev);
	if (sg_memguard_reserve(&p->guard, what, need, where, ev, n_ev))
		return sg_srv_err_set(e, 503, "server_error", "model", "%s", sg_last_error());
	sg_srv_model *m = NULL;
	SG_INFO("serve: loading %s from %s", en->name, en->path);
	sg_status st = en->stt     ? sg_srv_model_load_stt(en->name, en->path, en->vocab[0] ? en->vocab : NULL, &m)
		       : en->embed ? sg_srv_model_load_embed(en->name, en->path, &m)
		       : en->tts   ? sg_srv_model_load_tts(en->name, en->path, &m)
				   : sg_srv_model_load(en->name, en->path, p->n_ctx, &p->spec, &m);
	p->load_st = st;
	if (st)
		return sg_srv_err_set(e, st == SG_ERR_NOMEM ? 503 : 500, "server_error", "model", "model '%s': %s", en->name,
				      sg_last_error());
	sg_lm *lm = sg_srv_model_lm(m);
	if (lm) {
		sg_lm_set_prefix_cache(lm, p->pc, p->block_tokens);
		sg_lm_set_hooks(lm, &(sg_lm_hooks){.user = p, .reserve = reserve});
		sg_lm *dl = sg_srv_model_draft_lm(m);
		if (dl) sg_lm_set_hooks(dl, &(sg_lm_hooks){.user = p, .reserve = reserve});
	}
	pthread_mutex_lock(&p->mu);
	en->m = m;
	en->refs = 0;
	en->used = ++p->tick;
	pthread_mutex_unlock(&p->mu);
	return 0;
}

int sg_pool_ensure(sg_pool *p, int i, sg_srv_err *e)
{
	if (i < 0 || i >= p->n) return sg_srv_err_set(e, 404, "not_found_error", "model", "no model %d", i);
	pthread_mutex_lock(&p->mu);
	int have = p->e[i].m != NULL, live = LIVE(&p->e[i]);
	pthread_mutex_unlock(&p->mu);
	if (!live) return sg_srv_err_set(e, 404, "not_found_error", "model", "the model was deleted");
	int r = have ? 0 : load(p, i, e);
	sg_pool_publish(p);
	return r;
}

sg_status sg_pool_load_initial(sg_pool *p)
{
	for (int i = 0; i < p->n && i < p->cap; i++) {
		sg_srv_err e;
		p->load_st = SG_ERR_NOMEM;
		if (load(p, i, &e)) return sg_error(p->load_st ? p->load_st : SG_ERR_NOMEM, "serve: %s", e.message);
	}
	sg_pool_publish(p);
	return SG_OK;
}

/* ---- listings ---- */

int sg_pool_list(sg_pool *p, sg_pool_item *items, int cap)
{
	int n = 0;
	pthread_mutex_lock(&p->mu);
	for (int i = 0; i < p->n && n < cap; i++) {
		if (!LIVE(&p->e[i])) continue;
		sg_pool_item *it = &items[n++];
		it->pulled = p->e[i].pulled;
		it->resident = p->e[i].m != NULL;
		if (it->resident) {
			it->info = *sg_srv_model_info_get(p->e[i].m);
			continue;
		}
		/* what is known without loading it */
		memset(&it->info, 0, sizeof it->info);
		snprintf(it->info.name, sizeof it->info.name, "%s", p->e[i].name);
		snprintf(it->info.path, sizeof it->info.path, "%s", p->e[i].path);
		it->info.size_bytes = weight_bytes(p->e[i].path);
	}
	pthread_mutex_unlock(&p->mu);
	return n;
}

void sg_pool_publish(sg_pool *p)
{
	pthread_mutex_lock(&p->mu);
	p->pub_blocks = p->pc ? sg_pc_blocks(p->pc) : 0;
	p->pub_bytes = p->pc ? sg_pc_bytes(p->pc) : 0;
	p->pub_ev_blocks = p->guard.evicted_blocks;
	p->pub_ev_models = p->guard.evicted_models;
	p->pub_refusals = p->guard.refusals;
	pthread_mutex_unlock(&p->mu);
}

json_t *sg_pool_stats(sg_pool *p)
{
	int r = resident(p);
	pthread_mutex_lock(&p->mu);
	json_t *pc = p->pc ? json_pack("{s:b,s:I,s:I,s:i}", "enabled", 1, "blocks", (json_int_t)p->pub_blocks, "bytes",
				       (json_int_t)p->pub_bytes, "block_tokens", p->block_tokens)
			   : json_pack("{s:b}", "enabled", 0);
	json_t *g = json_pack("{s:b,s:I,s:I,s:I,s:I}", "enabled", p->guard.on, "cap_bytes", (json_int_t)p->guard.cap,
			      "evicted_blocks", (json_int_t)p->pub_ev_blocks, "evicted_models", (json_int_t)p->pub_ev_models,
			      "refusals", (json_int_t)p->pub_refusals);
	pthread_mutex_unlock(&p->mu);
	return json_pack("{s:i,s:i,s:i,s:o,s:o}", "configured", p->n, "resident", r, "pool", p->cap, "prefix_cache", pc,
			 "memory_guard", g);
}

/* ---- models added and removed while serving (/api/pull, /api/copy, /api/delete) ---- */

int sg_pool_add(sg_pool *p, const char *name, const char *path, sg_pool_kind kind, const char *pulled_ref, sg_srv_err *e)
{
	if (!name || !*name || strlen(name) >= sizeof p->e[0].name)
		return sg_srv_err_set(e, 400, NULL, "model", "a model name is 1 to %zu bytes", sizeof p->e[0].name - 1);
	if (strlen(path) >= sizeof p->e[0].path) return sg_srv_err_set(e, 400, NULL, "model", "the model's path is too long");
	pthread_mutex_lock(&p->mu);
	int slot = -1;
	for (int i = 0; i < p->n; i++) {
		entry *en = &p->e[i];
		if (LIVE(en) && !strcmp(en->name, name)) {
			/* the same name again: a pull that found it up to date, or a newer commit (used from
			 * the next load; a resident copy stays until it is evicted or deleted) */
			int same = !strcmp(en->path, path);
			if (!same) snprintf(en->path, sizeof en->path, "%s", path);
			pthread_mutex_unlock(&p->mu);
			return 0;
		}
		if (slot < 0 && !LIVE(en) && !en->m && !en->refs) slot = i;
	}
	if (slot < 0 && p->n < SG_SERVER_MAX_MODELS) slot = p->n++;
	if (slot < 0) {
		pthread_mutex_unlock(&p->mu);
		return sg_srv_err_set(e, 507, "server_error", "model",
				      "the server serves at most %d models; delete one first (DELETE /api/delete)", SG_SERVER_MAX_MODELS);
	}
	entry *en = &p->e[slot];
	memset(en, 0, sizeof *en);
	snprintf(en->name, sizeof en->name, "%s", name);
	snprintf(en->path, sizeof en->path, "%s", path);
	en->stt = kind == SG_POOL_STT;
	en->embed = kind == SG_POOL_EMBED;
	if (pulled_ref) {
		en->pulled = 1;
		snprintf(en->ref, sizeof en->ref, "%s", pulled_ref);
	}
	pthread_mutex_unlock(&p->mu);
	SG_INFO("serve: model '%s' added (%s)", name, path);
	return 0;
}

int sg_pool_path(sg_pool *p, int i, char *path, size_t cap, char *ref, size_t ref_cap)
{
	int ok = 0;
	pthread_mutex_lock(&p->mu);
	if (i >= 0 && i < p->n && LIVE(&p->e[i])) {
		ok = 1;
		if (path) snprintf(path, cap, "%s", p->e[i].path);
		if (ref) snprintf(ref, ref_cap, "%s", p->e[i].pulled ? p->e[i].ref : "");
	}
	pthread_mutex_unlock(&p->mu);
	return ok;
}

int sg_pool_others_use(sg_pool *p, int i)
{
	int n = 0;
	pthread_mutex_lock(&p->mu);
	for (int k = 0; k < p->n; k++)
		if (k != i && LIVE(&p->e[k]) && i >= 0 && i < p->n && !strcmp(p->e[k].path, p->e[i].path)) n++;
	pthread_mutex_unlock(&p->mu);
	return n;
}

int sg_pool_remove(sg_pool *p, int i, sg_srv_err *e)
{
	pthread_mutex_lock(&p->mu);
	entry *en = i >= 0 && i < p->n ? &p->e[i] : NULL;
	if (!en || !LIVE(en)) {
		pthread_mutex_unlock(&p->mu);
		return sg_srv_err_set(e, 404, "not_found_error", "model", "no such model");
	}
	if (en->refs) {
		pthread_mutex_unlock(&p->mu);
		return sg_srv_err_set(e, 409, "server_busy", "model", "model '%s' is in use by %d request%s; retry when they are done",
				      en->name, en->refs, en->refs == 1 ? "" : "s");
	}
	sg_srv_model *m = en->m;
	en->m = NULL;
	char name[sizeof en->name];
	snprintf(name, sizeof name, "%s", en->name);
	en->name[0] = 0;
	pthread_mutex_unlock(&p->mu);
	if (m) sg_srv_model_free(m);
	SG_INFO("serve: model '%s' deleted%s", name, m ? " (unloaded)" : "");
	sg_pool_publish(p);
	return 0;
}

void sg_pool_gauges(sg_pool *p, sg_metrics_gauges *g, sg_metrics_model *resident, char (*names)[128], int cap)
{
	memset(g, 0, sizeof *g);
	g->resident = resident;
	pthread_mutex_lock(&p->mu);
	for (int i = 0; i < p->n; i++) {
		if (!LIVE(&p->e[i])) continue;
		g->n_configured++;
		if (!p->e[i].m || g->n_resident >= cap) continue;
		snprintf(names[g->n_resident], 128, "%s", p->e[i].name);
		resident[g->n_resident].name = names[g->n_resident];
		resident[g->n_resident].bytes = sg_srv_model_info_get(p->e[i].m)->size_bytes;
		g->n_resident++;
	}
	g->prefix_cache_on = p->pc != NULL;
	g->cache_blocks = p->pub_blocks;
	g->cache_bytes = p->pub_bytes;
	g->guard_refusals = p->pub_refusals;
	g->guard_evicted_blocks = p->pub_ev_blocks;
	g->guard_evicted_models = p->pub_ev_models;
	pthread_mutex_unlock(&p->mu);
}
