/* The model pool of `saragossa serve`: the configured models (--model NAME=PATH, any number up
 * to SG_SERVER_MAX_MODELS) of which at most RETI_SERVE_MODEL_POOL are resident. A request for a
 * configured model that is not resident loads it on the inference worker; a full pool first
 * evicts its least recently used idle model (RETI_SERVE_LRU=0: refuses the load with 503
 * instead, models then stay until restart). The pool also owns what the resident models share:
 * the block prefix cache and the memory guard, which checks every load and may evict cache
 * blocks, then idle models, to make room.
 *
 * Threads: connection threads find, acquire and release models (a reference keeps a model
 * resident while a request uses it: tokenizing, queued, generating); loads, evictions and the
 * prefix cache belong to the worker. */
#ifndef SG_SERVER_POOL_H
#define SG_SERVER_POOL_H

#include <jansson.h>

#include "engine/prefix_cache.h"
#include "server/memguard.h"
#include "server/metrics.h"
#include "server/model.h"
#include "server/request.h"
#include "server/server.h"

typedef struct sg_pool sg_pool;

/* A pool over the configured models (names must be unique: else SG_ERR_INVALID_ARG). Reads the
 * pool, LRU, prefix-cache and guard flags; prefix_cache 0 turns the cache off whatever the
 * flag says (--no-prefix-cache). spec (copied; may be NULL) is every model's speculative
 * decoding. Loads nothing yet. */
sg_status sg_pool_new(const sg_server_model_spec *specs, int n, int32_t n_ctx, int prefix_cache, const sg_srv_spec *spec,
		      sg_pool **out);
/* Loads the first min(n, pool size) models (at start-up, before serving). */
sg_status sg_pool_load_initial(sg_pool *p);
/* Unloads everything. */
void sg_pool_free(sg_pool *p);

int sg_pool_count(const sg_pool *p);
/* Index of a configured model ("" or NULL: the first text model), -1 when unknown. */
int sg_pool_find(sg_pool *p, const char *name);
/* Index of a configured speech-to-text model: the one named, else ("" or OpenAI's "whisper-1"
 * when no model has that name) the first --stt-model; -1 when none. */
int sg_pool_find_stt(sg_pool *p, const char *name);
/* Index of a configured text-to-speech model: the one named, else ("" or OpenAI's tts-1,
 * tts-1-hd, gpt-4o-mini-tts... when no model has that name) the first --tts-model; -1 when none. */
int sg_pool_find_tts(sg_pool *p, const char *name);
/* 1 when configured model i is a speech-to-text model. */
int sg_pool_is_stt(const sg_pool *p, int i);
/* As sg_pool_find, but "" or NULL names the first model of the kind (embed 1: the first
 * --embed-model, 0: the first text model); a name finds a model of any kind. */
int sg_pool_find_kind(sg_pool *p, const char *name, int embed);
/* What a configured model is: a served model is exactly one kind. */
typedef enum { SG_POOL_TEXT, SG_POOL_STT, SG_POOL_EMBED, SG_POOL_TTS } sg_pool_kind;
sg_pool_kind sg_pool_kind_of(const sg_pool *p, int i);
/* "a, b, c" of the configured names into buf. */
void sg_pool_names(sg_pool *p, char *buf, size_t cap);

/* The resident model i with a reference taken, or NULL when it is not resident. */
sg_srv_model *sg_pool_acquire(sg_pool *p, int i);
void sg_pool_release(sg_pool *p, sg_srv_model *m);

/* Worker only: makes model i resident. Returns 0, or an HTTP status (503) with e filled: the
 * pool is full and LRU is off, every resident model is in use, or the memory guard refused. */
int sg_pool_ensure(sg_pool *p, int i, sg_srv_err *e);

/* What the listings (/v1/models, /api/tags, /api/ps) show of a configured model. */
typedef struct sg_pool_item {
	int resident;
	int pulled;             /* added by /api/pull (its files are in the Hugging Face cache) */
	sg_srv_model_info info; /* a resident model's; else name, path and size_bytes (on disk) only */
} sg_pool_item;
/* The configured models in order, at most cap of them (SG_SERVER_MAX_MODELS is enough): how many. */
int sg_pool_list(sg_pool *p, sg_pool_item *items, int cap);
/* Worker: copies the cache and guard numbers for sg_pool_stats (after each request). */
void sg_pool_publish(sg_pool *p);
/* {"resident": n, "pool": cap, "prefix_cache": {...}, "memory_guard": {...}} for /health, as
 * last published. */
json_t *sg_pool_stats(sg_pool *p);

/* What /metrics counts (owned by the pool; NULL when it could not be made). */
sg_metrics *sg_pool_metrics(sg_pool *p);

/* The pool's part of a /metrics scrape: configured and resident models (names copied into
 * names[cap], pointed at by resident[]), prefix-cache size and guard counts as last published;
 * queue numbers left 0. */
void sg_pool_gauges(sg_pool *p, sg_metrics_gauges *g, sg_metrics_model *resident, char (*names)[128], int cap);

/* Models added and removed while serving (Ollama's /api/pull, /api/copy, /api/delete).
 * add: a new configured model name -> path (not loaded yet; kind says which routes serve it;
 * pulled_ref, when not NULL, is the hub reference it was pulled from, which /api/delete
 * removes from the cache). A name already served keeps its slot and takes the new path. 0, or
 * the status set in *e (a bad name, 507 when SG_SERVER_MAX_MODELS are served). Any thread. */
int sg_pool_add(sg_pool *p, const char *name, const char *path, sg_pool_kind kind, const char *pulled_ref, sg_srv_err *e);
/* Worker only: unloads model i (when resident) and forgets it. 0, or 404 / 409 (a request
 * holds it) set in *e. */
int sg_pool_remove(sg_pool *p, int i, sg_srv_err *e);
/* Model i's path (and the hub reference it was pulled from, "" when not pulled): 1, or 0
 * when there is no such model. */
int sg_pool_path(sg_pool *p, int i, char *path, size_t cap, char *ref, size_t ref_cap);
/* How many other served names share model i's files (copies made by /api/copy). */
int sg_pool_others_use(sg_pool *p, int i);

/* RETI_SERVE_PREFIX_BLOCK_TOKENS, whether the cache is on or off: prefills are cut at its
 * multiples either way, so both do the same arithmetic. */
int sg_pool_block_tokens(const sg_pool *p);
/* The shared prefix cache (NULL when off; each resident model's engine uses it) and the memory
 * guard (each engine asks it through its memory hook). Worker only. */
sg_prefix_cache *sg_pool_prefix_cache(sg_pool *p);
sg_memguard *sg_pool_guard(sg_pool *p);

#endif
