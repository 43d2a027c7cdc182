/* Ollama's model management over the server's pool: POST /api/pull (a download from the
 * Hugging Face hub through hub/, with Ollama's progress lines, after which the model is served
 * under the name pulled), DELETE /api/delete (the model is unloaded and forgotten; a pulled
 * model's files leave the cache too), POST /api/copy (a second name for a model's files).
 *
 * Ollama's model names map onto hub references: "org/name", "org/name:Q4_K_M",
 * "org/name:file.gguf", "org/name@revision" and the same with Ollama's "hf.co/" (or
 * "huggingface.co/") prefix; a ":latest" tag means none. Errors are Ollama's {"error": "..."}. */
#ifndef SG_SERVER_ROUTES_MANAGE_H
#define SG_SERVER_ROUTES_MANAGE_H

#include <stddef.h>

#include "server/job.h"
#include "server/pool.h"
#include "server/request.h"

/* The downloads under way: at most SG_MANAGE_MAX_PULLS at once, each on its own thread (a pull
 * may take minutes: it runs beside the inference worker, not on it). */
#define SG_MANAGE_MAX_PULLS 4
typedef struct sg_pulls sg_pulls;
sg_pulls *sg_pulls_new(void);
/* Stops the downloads under way (they end at their next bytes), waits for their threads and
 * refuses new ones (503); free runs stop first. */
void sg_pulls_stop(sg_pulls *p);
void sg_pulls_free(sg_pulls *p);

/* The body of /api/pull: {"model" (or "name"): NAME, "stream"?: bool (default true), "insecure"?:
 * bool (ignored)} into name (as given) and ref (the hub reference it names). 0, or the status set
 * in *e (a bad body or field, a name that is no hub reference). */
int sg_manage_pull_parse(const char *body, size_t len, char name[128], char ref[256], int *stream, sg_srv_err *e);

/* POST /api/pull: parses body[0..len) ({"model" or "name", "stream", "insecure"}) into a job
 * (job->req.route and .stream set) and starts its download thread, which writes the answer to
 * the job (NDJSON progress lines, or one object when stream is false) and adds the model to
 * pool when it is in place. 0, or the status set in *e (nothing started). */
int sg_manage_pull_start(sg_pulls *pulls, sg_pool *pool, sg_job *job, const char *body, size_t len, sg_srv_err *e);

/* DELETE /api/delete: parses the body ({"model" or "name"}) and prepares job to run on the
 * worker (which unloads the model, then removes it and, for a pulled one no other name
 * shares, its files). 0, or the status set in *e (404 for a model not served). */
int sg_manage_delete_prepare(sg_pool *pool, sg_job *job, const char *body, size_t len, sg_srv_err *e);

/* POST /api/copy ({"source", "destination"}): serves source's files under destination too. 0,
 * or the status set in *e. */
int sg_manage_copy(sg_pool *pool, const char *body, size_t len, sg_srv_err *e);

#endif
