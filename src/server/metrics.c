/* Prometheus metrics of the server (see metrics.h). */
#include "server/metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"

/* Bucket bounds ("le") of the histograms; +Inf is implied. */
static const double RATE_BOUNDS[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000};
static const double TTFT_BOUNDS[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
#define N_RATE (sizeof RATE_BOUNDS / sizeof *RATE_BOUNDS)
#define N_TTFT (sizeof TTFT_BOUNDS / sizeof *TTFT_BOUNDS)
#define LABEL_MAX 128

typedef struct histo {
	uint64_t bucket[N_RATE + 1 > N_TTFT + 1 ? N_RATE + 1 : N_TTFT + 1]; /* counts per bound, not cumulated */
	uint64_t count;
	double sum;
} histo;

typedef struct req_series {
	char route[LABEL_MAX];
	int status;
	uint64_t n;
} req_series;

typedef struct model_series {
	char name[LABEL_MAX];
	uint64_t generations, prompt_tokens, generated_tokens;
	uint64_t cache_hits, cache_misses, reused_tokens;
	histo prefill, decode, ttft;
} model_series;

struct sg_metrics {
	pthread_mutex_t mu;
	req_series req[SG_METRICS_MAX_SERIES + 1]; /* the last one: "other" */
	int n_req;
	model_series model[SG_METRICS_MAX_SERIES + 1];
	int n_model;
};

sg_metrics *sg_metrics_new(void)
{
	sg_metrics *m = sg_calloc(1, sizeof *m);
	if (m) pthread_mutex_init(&m->mu, NULL);
	return m;
}

void sg_metrics_free(sg_metrics *m)
{
	if (!m) return;
	pthread_mutex_destroy(&m->mu);
	sg_free(m);
}

void sg_metrics_request(sg_metrics *m, const char *route, int status)
{
	if (!m) return;
	if (!route) route = "other";
	pthread_mutex_lock(&m->mu);
	int i;
	for (i = 0; i < m->n_req; i++)
		if (m->req[i].status == status && !strcmp(m->req[i].route, route)) break;
	if (i == m->n_req) {
		if (m->n_req < SG_METRICS_MAX_SERIES) {
			m->n_req++;
			snprintf(m->req[i].route, LABEL_MAX, "%s", route);
		} else {
			i = SG_METRICS_MAX_SERIES;
			snprintf(m->req[i].route, LABEL_MAX, "other");
		}
		m->req[i].status = status;
	}
	m->req[i].n++;
	pthread_mutex_unlock(&m->mu);
}

static void observe(histo *h, const double *bounds, size_t nb, double v)
{
	size_t b = 0;
	while (b < nb && v > bounds[b]) b++;
	h->bucket[b]++;
	h->count++;
	h->sum += v;
}

/* Under mu: the series of model (made when new; "other" when the table is full). */
static model_series *model_of(sg_metrics *m, const char *name)
{
	for (int i = 0; i < m->n_model; i++)
		if (!strcmp(m->model[i].name, name)) return &m->model[i];
	if (m->n_model < SG_METRICS_MAX_SERIES) {
		model_series *s = &m->model[m->n_model++];
		snprintf(s->name, LABEL_MAX, "%s", name);
		return s;
	}
	model_series *s = &m->model[SG_METRICS_MAX_SERIES];
	snprintf(s->name, LABEL_MAX, "other");
	return s;
}

void sg_metrics_generation(sg_metrics *m, const char *model, const sg_gen_result *r)
{
	if (!m || !r) return;
	pthread_mutex_lock(&m->mu);
	model_series *s = model_of(m, model ? model : "");
	s->generations++;
	s->prompt_tokens += r->n_prompt;
	s->generated_tokens += r->n_generated;
	if (r->n_cached) s->cache_hits++;
	else s->cache_misses++;
	s->reused_tokens += r->n_cached;
	size_t prefilled = r->n_prompt > r->n_cached ? r->n_prompt - r->n_cached : 0;
	if (prefilled && r->prefill_s > 0) observe(&s->prefill, RATE_BOUNDS, N_RATE, (double)prefilled / r->prefill_s);
	/* decode speed: the tokens after the first over the time after it (the first is the prefill's) */
	if (r->n_generated > 1 && r->decode_s > 0)
		observe(&s->decode, RATE_BOUNDS, N_RATE, (double)(r->n_generated - 1) / r->decode_s);
	if (r->n_generated && r->ttft_s > 0) observe(&s->ttft, TTFT_BOUNDS, N_TTFT, r->ttft_s);
	pthread_mutex_unlock(&m->mu);
}

char *sg_metrics_escape(const char *v, char *out, size_t cap)
{
	size_t o = 0;
	if (!cap) return out;
	for (const char *p = v ? v : ""; *p; p++) {
		const char *rep = *p == '\\' ? "\\\\" : *p == '"' ? "\\\"" : *p == '\n' ? "\\n" : NULL;
		size_t n = rep ? 2 : 1;
		if (o + n >= cap) break;
		if (rep) memcpy(out + o, rep, 2);
		else out[o] = *p;
		o += n;
	}
	out[o] = 0;
	return out;
}

/* ---- rendering ---- */

typedef struct buf {
	char *s;
	size_t len, cap;
	int oom;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...)
{
	if (b->oom) return;
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->oom = 1;
			return;
		}
		if (b->len + (size_t)n < b->cap) {
			b->len += (size_t)n;
			return;
		}
		size_t cap = b->cap * 2 + (size_t)n + 1;
		char *s = sg_realloc(b->s, cap);
		if (!s) {
			b->oom = 1;
			return;
		}
		b->s = s;
		b->cap = cap;
	}
}

static void head(buf *b, const char *name, const char *type, const char *help)
{
	put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void histogram(buf *b, const char *name, const char *model, const histo *h, const double *bounds, size_t nb)
{
	uint64_t cum = 0;
	for (size_t i = 0; i < nb; i++) {
		cum += h->bucket[i];
		put(b, "%s_bucket{model=\"%s\",le=\"%g\"} %llu\n", name, model, bounds[i], (unsigned long long)cum);
	}
	put(b, "%s_bucket{model=\"%s\",le=\"+Inf\"} %llu\n", name, model, (unsigned long long)h->count);
	put(b, "%s_sum{model=\"%s\"} %.17g\n", name, model, h->sum);
	put(b, "%s_count{model=\"%s\"} %llu\n", name, model, (unsigned long long)h->count);
}

typedef enum { F_GENERATIONS, F_PROMPT, F_GENERATED, F_HITS, F_MISSES, F_REUSED } model_field;

static uint64_t field(const model_series *s, model_field f)
{
	switch (f) {
	case F_GENERATIONS: return s->generations;
	case F_PROMPT: return s->prompt_tokens;
	case F_GENERATED: return s->generated_tokens;
	case F_HITS: return s->cache_hits;
	case F_MISSES: return s->cache_misses;
	case F_REUSED: return s->reused_tokens;
	}
	return 0;
}

static const struct {
	const char *name, *help;
	model_field f;
} MODEL_COUNTERS[] = {
	{"saragossa_generations_total", "Generations run (finished, stopped or cancelled), by model.", F_GENERATIONS},
	{"saragossa_prompt_tokens_total", "Prompt tokens of the generations (tokens in), by model.", F_PROMPT},
	{"saragossa_generated_tokens_total", "Tokens generated (tokens out), by model.", F_GENERATED},
	{"saragossa_prefix_cache_hits_total", "Generations whose prompt reused cached tokens, by model.", F_HITS},
	{"saragossa_prefix_cache_misses_total", "Generations that reused no cached token, by model.", F_MISSES},
	{"saragossa_prefix_cache_reused_tokens_total", "Prompt tokens restored from the prefix cache instead of prefilled, by model.",
	 F_REUSED},
};

char *sg_metrics_render(sg_metrics *m, const sg_metrics_gauges *g, size_t *len)
{
	buf b = {.cap = 8192};
	b.s = sg_malloc(b.cap);
	if (!b.s) return NULL;
	b.s[0] = 0;
	char esc[2 * LABEL_MAX + 8], esc2[2 * LABEL_MAX + 8];
	if (m) pthread_mutex_lock(&m->mu);
	head(&b, "saragossa_http_requests_total", "counter", "HTTP requests answered, by route and status.");
	for (int i = 0; m && i <= SG_METRICS_MAX_SERIES; i++) {
		if (i >= m->n_req && i < SG_METRICS_MAX_SERIES) continue;
		const req_series *r = &m->req[i];
		if (!r->n) continue;
		put(&b, "saragossa_http_requests_total{route=\"%s\",status=\"%d\"} %llu\n", sg_metrics_escape(r->route, esc, sizeof esc),
		    r->status, (unsigned long long)r->n);
	}
	int nm = m ? m->n_model + (m->model[SG_METRICS_MAX_SERIES].generations ? 1 : 0) : 0;
	for (size_t k = 0; k < sizeof MODEL_COUNTERS / sizeof *MODEL_COUNTERS; k++) {
		head(&b, MODEL_COUNTERS[k].name, "counter", MODEL_COUNTERS[k].help);
		for (int i = 0; i < nm; i++) {
			const model_series *s = i < m->n_model ? &m->model[i] : &m->model[SG_METRICS_MAX_SERIES];
			put(&b, "%s{model=\"%s\"} %llu\n", MODEL_COUNTERS[k].name, sg_metrics_escape(s->name, esc, sizeof esc),
			    (unsigned long long)field(s, MODEL_COUNTERS[k].f));
		}
	}
	static const struct {
		const char *name, *help;
		int which;
	} HISTOS[] = {
		{"saragossa_prefill_tokens_per_second", "Prefill speed of a generation (prompt tokens not reused, per second).", 0},
		{"saragossa_decode_tokens_per_second", "Decode speed of a generation (tokens after the first, per second).", 1},
		{"saragossa_time_to_first_token_seconds", "Time from the start of a generation to its first token.", 2},
	};
	for (size_t k = 0; k < 3; k++) {
		head(&b, HISTOS[k].name, "histogram", HISTOS[k].help);
		for (int i = 0; i < nm; i++) {
			const model_series *s = i < m->n_model ? &m->model[i] : &m->model[SG_METRICS_MAX_SERIES];
			sg_metrics_escape(s->name, esc, sizeof esc);
			if (HISTOS[k].which == 0) histogram(&b, HISTOS[k].name, esc, &s->prefill, RATE_BOUNDS, N_RATE);
			else if (HISTOS[k].which == 1) histogram(&b, HISTOS[k].name, esc, &s->decode, RATE_BOUNDS, N_RATE);
			else histogram(&b, HISTOS[k].name, esc, &s->ttft, TTFT_BOUNDS, N_TTFT);
		}
	}
	if (m) pthread_mutex_unlock(&m->mu);
	if (g) {
		head(&b, "saragossa_models_configured", "gauge", "Models the server serves (loaded or not).");
		put(&b, "saragossa_models_configured %d\n", g->n_configured);
		head(&b, "saragossa_models_resident", "gauge", "Models loaded in memory.");
		put(&b, "saragossa_models_resident %d\n", g->n_resident);
		head(&b, "saragossa_model_resident", "gauge", "1 for each model loaded in memory.");
		for (int i = 0; i < g->n_resident; i++)
			put(&b, "saragossa_model_resident{model=\"%s\"} 1\n", sg_metrics_escape(g->resident[i].name, esc, sizeof esc));
		head(&b, "saragossa_model_resident_bytes", "gauge", "Weight bytes of each loaded model.");
		for (int i = 0; i < g->n_resident; i++)
			put(&b, "saragossa_model_resident_bytes{model=\"%s\"} %llu\n",
			    sg_metrics_escape(g->resident[i].name, esc2, sizeof esc2), (unsigned long long)g->resident[i].bytes);
		head(&b, "saragossa_queue_depth", "gauge", "Requests waiting for the inference worker.");
		put(&b, "saragossa_queue_depth %d\n", g->queue_waiting);
		head(&b, "saragossa_queue_running", "gauge", "1 while the inference worker runs a request.");
		put(&b, "saragossa_queue_running %d\n", g->queue_running);
		head(&b, "saragossa_prefix_cache_blocks", "gauge", "Blocks held by the prefix cache.");
		put(&b, "saragossa_prefix_cache_blocks %llu\n", (unsigned long long)g->cache_blocks);
		head(&b, "saragossa_prefix_cache_bytes", "gauge", "Bytes held by the prefix cache.");
		put(&b, "saragossa_prefix_cache_bytes %llu\n", (unsigned long long)g->cache_bytes);
		head(&b, "saragossa_memory_guard_refusals_total", "counter",
		     "Allocations the memory guard refused (answered 503 instead of running out of memory).");
		put(&b, "saragossa_memory_guard_refusals_total %llu\n", (unsigned long long)g->guard_refusals);
		head(&b, "saragossa_memory_guard_evictions_total", "counter", "What the memory guard evicted to make room.");
		put(&b, "saragossa_memory_guard_evictions_total{what=\"cache_blocks\"} %llu\n", (unsigned long long)g->guard_evicted_blocks);
		put(&b, "saragossa_memory_guard_evictions_total{what=\"models\"} %llu\n", (unsigned long long)g->guard_evicted_models);
	}
	if (b.oom) {
		sg_free(b.s);
		return NULL;
	}
	*len = b.len;
	return b.s;
}
