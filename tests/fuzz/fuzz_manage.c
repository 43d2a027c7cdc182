/* Fuzz target: the bodies of Ollama's model management routes (/api/pull's parser and name
 * mapping, /api/delete and /api/copy against a pool of two configured models that are never
 * loaded) and the /metrics text with the bytes as a model name and a route (label escaping).
 * The first byte picks what the rest is. Invariants: an error is a 4xx/5xx with a terminated
 * message; a parsed pull names a hub reference; the exposition has no raw newline or
 * unescaped quote inside a label value. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "hub/repo.h"
#include "server/job.h"
#include "server/metrics.h"
#include "server/pool.h"
#include "server/request.h"
#include "server/routes_manage.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_err(int st, const sg_srv_err *e)
{
	if (st < 400 || st > 599 || e->status != st) __builtin_trap();
	if (strnlen(e->message, sizeof e->message) == sizeof e->message) __builtin_trap();
}

/* Every label value between quotes: no raw newline, every quote inside escaped. */
static void check_exposition(const char *t, size_t n)
{
	int in = 0;
	for (size_t i = 0; i < n; i++) {
		if (t[i] == '\\' && in) {
			if (i + 1 >= n || (t[i + 1] != '\\' && t[i + 1] != '"' && t[i + 1] != 'n')) __builtin_trap();
			i++;
			continue;
		}
		if (t[i] == '"') in = !in;
		if (in && t[i] == '\n') __builtin_trap();
	}
	if (in) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1) return 0;
	const char *body = (const char *)data + 1;
	size_t len = size - 1;
	sg_srv_err e;
	int st;
	switch (data[0] % 4) {
	case 0: {
		char name[128], ref[256];
		int stream;
		st = sg_manage_pull_parse(body, len, name, ref, &stream, &e);
		if (st) check_err(st, &e);
		else {
			sg_hub_ref r;
			if (sg_hub_parse_ref(ref, &r) || !name[0] || (stream != 0 && stream != 1)) __builtin_trap();
		}
		break;
	}
	case 1:
	case 2: {
		sg_server_model_spec specs[2] = {{.name = "a", .path = "/nonexistent/a"}, {.name = "b", .path = "/nonexistent/b"}};
		sg_pool *p;
		if (sg_pool_new(specs, 2, 0, 0, NULL, &p)) return 0;
		if (data[0] % 4 == 1) {
			sg_job *j = sg_job_new();
			if (j) {
				st = sg_manage_delete_prepare(p, j, body, len, &e);
				if (st) check_err(st, &e);
				else if (!j->run || !j->work) __builtin_trap();
				sg_job_unref(j);
			}
		} else {
			st = sg_manage_copy(p, body, len, &e);
			if (st) check_err(st, &e);
			else if (sg_pool_count(p) < 2 || sg_pool_count(p) > 3) __builtin_trap();
		}
		sg_pool_free(p);
		break;
	}
	default: {
		char *name = sg_strndup(body, len);
		sg_metrics *m = sg_metrics_new();
		if (name && m) {
			sg_metrics_request(m, name, 200);
			sg_gen_result r = {.n_prompt = 3, .n_generated = 2, .prefill_s = 0.1, .decode_s = 0.1, .ttft_s = 0.1};
			sg_metrics_generation(m, name, &r);
			sg_metrics_model res = {.name = name, .bytes = 1};
			sg_metrics_gauges g = {.resident = &res, .n_resident = 1, .n_configured = 1};
			size_t n = 0;
			char *t = sg_metrics_render(m, &g, &n);
			if (t) check_exposition(t, n);
			sg_free(t);
		}
		sg_metrics_free(m);
		sg_free(name);
	}
	}
	return 0;
}
