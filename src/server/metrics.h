/* The numbers `saragossa serve` shows on GET /metrics, in Prometheus' text exposition format
 * 0.0.4: requests by route and status, tokens in and out, prefill and decode speeds and time to
 * first token (histograms), prefix-cache hits, misses and reused tokens, per model where it
 * applies; plus the gauges read at scrape time (resident models, queue depth, memory guard,
 * cache size), which the caller passes in.
 *
 * Thread-safe: connection threads count requests, the worker counts generations, a scrape
 * reads everything; one mutex guards the tables. The tables are bounded: past
 * SG_METRICS_MAX_SERIES routes x statuses (or models) the extra ones are counted under the
 * label value "other". */
#ifndef SG_SERVER_METRICS_H
#define SG_SERVER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/generate.h"

#define SG_METRICS_MAX_SERIES 64

typedef struct sg_metrics sg_metrics;

/* NULL when out of memory (every function below then does nothing). */
sg_metrics *sg_metrics_new(void);
void sg_metrics_free(sg_metrics *m);

/* One answered request: its route (the path pattern, e.g. "/v1/chat/completions"; NULL:
 * "other") and HTTP status. */
void sg_metrics_request(sg_metrics *m, const char *route, int status);
/* One generation that ran on model (finished, stopped or cancelled): its tokens, speeds and
 * what the prefix cache gave it. */
void sg_metrics_generation(sg_metrics *m, const char *model, const sg_gen_result *r);

/* What a scrape reads from elsewhere (the pool, the queue, the guard). */
typedef struct sg_metrics_model {
	const char *name;
	uint64_t bytes; /* weights */
} sg_metrics_model;

typedef struct sg_metrics_gauges {
	int n_configured;
	const sg_metrics_model *resident; /* [n_resident] */
	int n_resident;
	int queue_waiting, queue_running;
	int prefix_cache_on;
	uint64_t cache_blocks, cache_bytes;
	uint64_t guard_refusals, guard_evicted_blocks, guard_evicted_models;
} sg_metrics_gauges;

/* The whole exposition (HELP and TYPE lines, label values escaped) as a heap string (sg_free),
 * *len its bytes; NULL when out of memory. */
char *sg_metrics_render(sg_metrics *m, const sg_metrics_gauges *g, size_t *len);

/* A label value escaped as the format wants (\\, \" and \n) into out[cap] (cut short, still
 * terminated, when it does not fit). Returns out. */
char *sg_metrics_escape(const char *v, char *out, size_t cap);

#endif
