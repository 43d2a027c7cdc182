/*
 * The /metrics counters and their text: label values escaped, histogram buckets cumulative with
 * +Inf equal to the count, HELP and TYPE before every family, the series tables bounded ("other"
 * past them), and the counts exact when two threads count at once.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "server/metrics.h"

static char *render(sg_metrics *m, const sg_metrics_gauges *g)
{
	size_t n = 0;
	char *t = sg_metrics_render(m, g, &n);
	cr_assert(t && strlen(t) == n);
	return t;
}

Test(metrics, label_values_are_escaped)
{
	char out[64];
	cr_assert_str_eq(sg_metrics_escape("a\"b\\c\nd", out, sizeof out), "a\\\"b\\\\c\\nd");
	cr_assert_str_eq(sg_metrics_escape("\"\"\"", out, 5), "\\\"\\\""); /* cut between escapes, still terminated */
	sg_metrics *m = sg_metrics_new();
	sg_gen_result r = {.n_prompt = 10, .n_cached = 4, .n_generated = 5, .prefill_s = 0.5, .decode_s = 0.4, .ttft_s = 0.2};
	sg_metrics_generation(m, "we\"ird\nname", &r);
	char *t = render(m, NULL);
	cr_assert(strstr(t, "saragossa_generated_tokens_total{model=\"we\\\"ird\\nname\"} 5\n"), "%s", t);
	cr_assert(strstr(t, "saragossa_prefix_cache_reused_tokens_total{model=\"we\\\"ird\\nname\"} 4\n"));
	cr_assert(strstr(t, "saragossa_prefix_cache_hits_total{model=\"we\\\"ird\\nname\"} 1\n"));
	sg_free(t);
	sg_metrics_free(m);
}

Test(metrics, histograms_are_cumulative_and_end_at_the_count)
{
	sg_metrics *m = sg_metrics_new();
	/* decode speeds 4/0.4 = 10, 4/0.04 = 100, 4/0.004 = 1000 tok/s; a one-token answer has none */
	double dec[] = {0.4, 0.04, 0.004};
	for (int i = 0; i < 3; i++) {
		sg_gen_result r = {.n_prompt = 8, .n_generated = 5, .prefill_s = 0.1, .decode_s = dec[i], .ttft_s = 0.03};
		sg_metrics_generation(m, "x", &r);
	}
	sg_gen_result one = {.n_prompt = 8, .n_generated = 1, .prefill_s = 0.1, .ttft_s = 0.03};
	sg_metrics_generation(m, "x", &one);
	char *t = render(m, NULL);
	cr_assert(strstr(t, "saragossa_decode_tokens_per_second_bucket{model=\"x\",le=\"5\"} 0\n"), "%s", t);
	cr_assert(strstr(t, "saragossa_decode_tokens_per_second_bucket{model=\"x\",le=\"10\"} 1\n"));
	cr_assert(strstr(t, "saragossa_decode_tokens_per_second_bucket{model=\"x\",le=\"100\"} 2\n"));
	cr_assert(strstr(t, "saragossa_decode_tokens_per_second_bucket{model=\"x\",le=\"1000\"} 3\n"));
	cr_assert(strstr(t, "saragossa_decode_tokens_per_second_bucket{model=\"x\",le=\"+Inf\"} 3\n"));
	cr_assert(strstr(t, "saragossa_decode_tokens_per_second_count{model=\"x\"} 3\n"));
	cr_assert(strstr(t, "saragossa_time_to_first_token_seconds_count{model=\"x\"} 4\n"));
	cr_assert(strstr(t, "saragossa_generations_total{model=\"x\"} 4\n"));
	cr_assert(strstr(t, "saragossa_prefix_cache_misses_total{model=\"x\"} 4\n"));
	/* every family is announced before its samples */
	cr_assert(strstr(t, "# HELP saragossa_decode_tokens_per_second ") < strstr(t, "# TYPE saragossa_decode_tokens_per_second histogram\n"));
	cr_assert(strstr(t, "# TYPE saragossa_decode_tokens_per_second histogram\n") < strstr(t, "saragossa_decode_tokens_per_second_bucket"));
	sg_free(t);
	sg_metrics_free(m);
}

Test(metrics, gauges_come_from_the_caller)
{
	sg_metrics_model res[2] = {{"a", 100}, {"b\"", 200}};
	sg_metrics_gauges g = {.n_configured = 3, .resident = res, .n_resident = 2, .queue_waiting = 4, .queue_running = 1,
			       .guard_refusals = 7, .guard_evicted_models = 2};
	char *t = render(NULL, &g); /* no counters (out of memory at start): the gauges still render */
	cr_assert(strstr(t, "saragossa_models_configured 3\n") && strstr(t, "saragossa_models_resident 2\n"), "%s", t);
	cr_assert(strstr(t, "saragossa_model_resident{model=\"b\\\"\"} 1\n"));
	cr_assert(strstr(t, "saragossa_model_resident_bytes{model=\"a\"} 100\n"));
	cr_assert(strstr(t, "saragossa_queue_depth 4\n") && strstr(t, "saragossa_queue_running 1\n"));
	cr_assert(strstr(t, "saragossa_memory_guard_refusals_total 7\n"));
	cr_assert(strstr(t, "saragossa_memory_guard_evictions_total{what=\"models\"} 2\n"));
	sg_free(t);
}

Test(metrics, tables_are_bounded)
{
	sg_metrics *m = sg_metrics_new();
	char name[32];
	for (int i = 0; i < SG_METRICS_MAX_SERIES + 10; i++) {
		snprintf(name, sizeof name, "/r%d", i);
		sg_metrics_request(m, name, 200);
	}
	char *t = render(m, NULL);
	cr_assert(strstr(t, "saragossa_http_requests_total{route=\"other\",status=\"200\"} 10\n"), "%s", t);
	cr_assert(strstr(t, "saragossa_http_requests_total{route=\"/r0\",status=\"200\"} 1\n"));
	sg_free(t);
	sg_metrics_free(m);
}

static void *count(void *arg)
{
	sg_metrics *m = arg;
	sg_gen_result r = {.n_prompt = 1, .n_generated = 2, .decode_s = 0.01, .ttft_s = 0.01};
	for (int i = 0; i < 20000; i++) {
		sg_metrics_request(m, i % 2 ? "/a" : "/b", 200 + i % 3);
		sg_metrics_generation(m, "m", &r);
	}
	return NULL;
}

Test(metrics, two_threads_count_exactly)
{
	sg_metrics *m = sg_metrics_new();
	pthread_t th[2];
	for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, count, m);
	for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
	char *t = render(m, NULL);
	cr_assert(strstr(t, "saragossa_generations_total{model=\"m\"} 40000\n"), "%s", t);
	cr_assert(strstr(t, "saragossa_generated_tokens_total{model=\"m\"} 80000\n"));
	cr_assert(strstr(t, "saragossa_decode_tokens_per_second_count{model=\"m\"} 40000\n"));
	/* 20000 per thread: /a at odd i, statuses 200..202 */
	unsigned long total = 0;
	for (const char *p = t; (p = strstr(p, "saragossa_http_requests_total{")); p++) {
		const char *sp = strchr(p, '}');
		total += strtoul(sp + 2, NULL, 10);
	}
	cr_assert_eq(total, 40000);
	sg_free(t);
	sg_metrics_free(m);
}
