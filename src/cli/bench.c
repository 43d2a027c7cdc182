/*
 * saragossa bench: prompt processing and generation speed, measured like llama-bench's pp/tg:
 *   pp<P>  one prompt of P tokens from an empty context, chunked as a session would (tok/s)
 *   ttft@p<P>  the same prompt's time to first token: the prefill and the first token's argmax
 *          over the logits it returns (ms; the model's share of a request's first-token latency)
 *   tg<N>  N single-token greedy decode steps (the argmax id is the only read back; on CUDA one
 *          graph replay per token unless SARAGOSSA_CUDA_GRAPHS=0), from an empty context or,
 *          with -d D, after an untimed prefill of D tokens (tok/s)
 *   v<K>   with --verify K: speculative verify steps of K tokens (a sampled token and K-1 guesses)
 *          scored with a decode step's bits (sg_session_eval_exact), after the same depth as tg
 *          (tokens scored per second, and the step's cost in decode steps: below K, a verify step
 *          is cheaper than decoding its tokens one by one)
 * --backend cuda runs on the GPU and adds the device-to-device copy bandwidth measured in the same
 * process and each decode line's share of it (bytes read per token: weights + the KV cache rows
 * attended, at the mean depth of the run).
 * Each test runs r times (default 5) after one warm-up; like llama-bench, each line gives the
 * mean tok/s over the repetitions +- their sample standard deviation, with the bytes of weights
 * one decode step reads and the bandwidth that implies. Token ids are a fixed pseudo-random
 * sequence (the speed does not depend on them). MODEL resolves like everywhere else (a path, a
 * name in saragossa's models folder, a Hugging Face repo id).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/alloc.h"
#include "base/timer.h"
#include "cli/cli.h"
#include "cli/lm_cli.h"
#include "engine/expert_cache.h"
#include "engine/session.h"
#include "hub/repo.h"
#include "saragossa.h"

static volatile int32_t bench_sink;

static int fail(void)
{
	fprintf(stderr, "saragossa bench: %s\n", sg_last_error());
	return 1;
}

static int int_arg(const char *name, const char *v, int lo, int *out)
{
	char *end;
	errno = 0;
	long x = v ? strtol(v, &end, 10) : 0;
	if (!v || !*v || *end || errno || x < lo || x > 1 << 20) {
		sg_cli_usage_error("bench", "%s wants an integer >= %d, got '%s'", name, lo, v ? v : "");
		return -1;
	}
	*out = (int)x;
	return 0;
}

static void stats(const double *v, int n, double *mean, double *sd)
{
	double s = 0, q = 0;
	for (int i = 0; i < n; i++) s += v[i];
	*mean = s / n;
	for (int i = 0; i < n; i++) q += (v[i] - *mean) * (v[i] - *mean);
	*sd = n > 1 ? sqrt(q / (n - 1)) : 0;
}

int sg_cli_bench(int argc, char **argv)
{
	const char *model_path = NULL;
	const char *backend = NULL;
	int p = 512, n = 128, reps = 5, threads = 0, chunk = 0, depth = 0, verify = 0, ctx = 0;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int rc = 0;
		if (!strcmp(a, "--model") || !strcmp(a, "-m")) model_path = v;
		else if (!strcmp(a, "-p")) rc = int_arg(a, v, 0, &p);
		else if (!strcmp(a, "-n")) rc = int_arg(a, v, 0, &n);
		else if (!strcmp(a, "-r")) rc = int_arg(a, v, 1, &reps);
		else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) rc = int_arg(a, v, 0, &threads);
		else if (!strcmp(a, "--chunk")) rc = int_arg(a, v, 1, &chunk);
		else if (!strcmp(a, "-d") || !strcmp(a, "--depth")) rc = int_arg(a, v, 0, &depth);
		else if (!strcmp(a, "--verify")) rc = int_arg(a, v, 2, &verify);
		else if (!strcmp(a, "--ctx")) rc = int_arg(a, v, 1, &ctx);
		else if (!strcmp(a, "--backend")) backend = v;
		else if (!strcmp(a, "--expert-cache")) rc = v ? sg_cli_expert_cache_opt("bench", v) : 0;
		else return sg_cli_usage_error("bench", "unknown argument '%s'", a);
		if (rc) return 2;
		if (!v) return sg_cli_usage_error("bench", "%s needs a value", a);
		i++;
	}
	if (!p && !n) return sg_cli_usage_error("bench", "nothing to measure: -p 0 and -n 0");
	/* No --model: the default model, as run and generate use. */
	char path[SG_HUB_PATH_MAX];
	if (sg_cli_model_path("bench", model_path, path, sizeof path)) return 1;
	model_path = path;
	/* with an expert cache the planner checks what is loaded (the trunk and the pool) */
	if (!sg_cli_expert_on() && sg_lm_check_memory(model_path)) return fail();
	sg_model_params mp = sg_model_default_params();
	mp.n_threads = threads;
	mp.backend = backend;
	sg_model *m = NULL;
	sg_session *s = NULL;
	int32_t *toks = NULL;
	double *t = NULL;
	int rc = 1;
	if (sg_model_load_ex(model_path, &mp, sg_cli_expert_on(), &m)) return fail();
	sg_session_params sp = sg_session_default_params();
	int len = p > depth + n ? p : depth + n;
	if (depth + verify > len) len = depth + verify;
	sp.n_ctx = ctx > len + 1 ? ctx : len + 1; /* --ctx: a cache longer than the test needs, as a server's */
	sp.n_batch = chunk;
	if (sg_cli_expert_apply("bench", m, sp.n_ctx)) goto done;
	int V = sg_model_n_vocab(m);
	double tg_mean = 0;
	toks = sg_malloc(sizeof(int32_t) * (size_t)len);
	t = sg_malloc(sizeof(double) * (size_t)(2 * (reps + 1)));
	if (!toks || !t) {
		fprintf(stderr, "saragossa bench: out of memory\n");
		goto done;
	}
	uint32_t x = 12345;
	for (int i = 0; i < len; i++) {
		x = x * 1664525u + 1013904223u;
		toks[i] = (int32_t)((x >> 8) % (uint32_t)V);
	}
	if (sg_session_new(m, &sp, &s)) {
		rc = fail();
		goto done;
	}
	printf("model: %s (%s), %.1f MiB of weights per decode step, threads %d%s, chunk %d, kv %s\n", model_path,
	       sg_model_arch(m), m->weight_bytes / 1048576.0, threads, threads ? "" : " (auto)", s->n_batch,
	       s->fs.kv_type == SG_TYPE_F16 ? "f16" : "f32");
	printf("repetitions: %d (after one warm-up)\n", reps);
	double copy_gbps = 0;
	if (m->be->ops->copy_bandwidth) {
		sg_backend_caps caps;
		const char *what = "";
		sg_backend_caps_get(m->be, &caps);
		if (m->be->ops->copy_bandwidth(m->be, (size_t)1 << 30, &copy_gbps, &what)) {
			rc = fail();
			goto done;
		}
		printf("device: %s, %s %.0f GB/s (read + write), decode graphs ", caps.device, what, copy_gbps);
		if (caps.capture) printf("on\n");
		else printf("off (%s=0)\n", caps.graphs_flag);
	}
	printf("%-8s %25s %12s\n", "test", "tok/s (mean +- sd)", "weights GB/s");
	if (p) {
		double *ft = t + reps + 1; /* time to first token, ms */
		for (int r = 0; r <= reps; r++) { /* r = 0 warms up */
			sg_session_reset(s);
			double t0 = sg_time_s();
			if (sg_session_eval(s, toks, p, NULL)) {
				rc = fail();
				goto done;
			}
			double t1 = sg_time_s();
			const float *l = sg_session_logits(s);
			int32_t first = 0;
			for (int i = 1; l && i < V; i++)
				if (l[i] > l[first]) first = i;
			bench_sink = first; /* the argmax is part of what is timed: keep it */
			ft[r] = (sg_time_s() - t0) * 1e3;
			t[r] = p / (t1 - t0);
		}
		double mean, sd;
		stats(t + 1, reps, &mean, &sd);
		printf("pp%-6d %14.2f +- %7.2f %12s\n", p, mean, sd, "-");
		stats(ft + 1, reps, &mean, &sd);
		char name[32];
		snprintf(name, sizeof name, "ttft@p%d", p);
		printf("%-8s %11.2f ms +- %7.2f\n", name, mean, sd);
		sg_cli_expert_metrics(m, stdout);
		sg_xc_stats_reset(m);
	}
	if (n) {
		/* an expert cache would serve a repeated sequence from the slots its warm-up filled:
		 * each repetition then decodes other tokens, and the figures are the last one's */
		sg_xc_stats xst;
		int vary = sg_xc_stats_get(m, &xst);
		for (int r = 0; r <= reps; r++) {
			if (vary) {
				for (int i = depth; i < depth + n; i++) toks[i] = (int32_t)(((int64_t)toks[i] + 7919) % V);
				sg_xc_stats_reset(m);
			}
			sg_session_reset(s);
			if (depth && sg_session_eval(s, toks, depth, NULL)) {
				rc = fail();
				goto done;
			}
			int32_t next;
			double t0 = sg_time_s();
			for (int i = 0; i < n; i++)
				if (sg_session_decode_greedy(s, toks[depth + i], &next)) {
					rc = fail();
					goto done;
				}
			t[r] = n / (sg_time_s() - t0);
		}
		double mean, sd;
		stats(t + 1, reps, &mean, &sd);
		tg_mean = mean;
		/* KV rows a step reads: every cached position of every layer, K and V */
		double kv = 0, at = depth + (n - 1) / 2.0;
		for (int li = 0; li < m->desc.n_layer; li++) {
			const sg_kv_layer *c = &s->fs.kv[li];
			double rows = at < c->rows ? at + 1 : c->rows;
			kv += 2.0 * rows * (double)c->k.row_bytes * (double)c->k.ne[1];
		}
		double bytes = (double)m->weight_bytes + kv;
		char name[32];
		snprintf(name, sizeof name, depth ? "tg%d@d%d" : "tg%d", n, depth);
		printf("%-8s %14.2f +- %7.2f %12.2f", name, mean, sd, mean * (double)m->weight_bytes / 1e9);
		printf("   %.1f MiB/token (KV %.1f MiB)", bytes / 1048576.0, kv / 1048576.0);
		if (copy_gbps > 0) printf(", %.0f GB/s = %.1f%% of copy", mean * bytes / 1e9, 100.0 * mean * bytes / 1e9 / copy_gbps);
		printf("\n");
		sg_cli_expert_metrics(m, stdout);
	}
	if (verify) {
		if (!sg_session_can_verify(s)) {
			printf("v%-7d the %s backend cannot verify with a decode step's bits\n", verify, m->be->ops->name);
		} else {
			float *rows = sg_malloc(sizeof(float) * (size_t)V * (size_t)verify);
			if (!rows) {
				fprintf(stderr, "saragossa bench: out of memory\n");
				goto done;
			}
			int steps = n > 0 ? (n + verify - 1) / verify : 8;
			/* pass 0: the verify step; pass 1: the same tokens through the prefill path (the
			 * blocked GEMM on the CPU: not a decode step's bits for quantized weights, shown for
			 * what a GEMM that matched the GEMV would buy) */
			for (int pass = 0; pass < 2; pass++) {
			for (int r = 0; r <= reps; r++) {
				sg_session_reset(s);
				if (depth && sg_session_eval(s, toks, depth, NULL)) {
					sg_free(rows);
					rc = fail();
					goto done;
				}
				double t0 = sg_time_s();
				for (int i = 0; i < steps; i++) {
					/* each step scores the same positions again, as a rejected draft would */
					sg_status es = pass ? sg_session_eval(s, toks + depth, verify, rows)
							    : sg_session_eval_exact(s, toks + depth, verify, rows);
					if (es || sg_session_truncate(s, depth)) {
						sg_free(rows);
						rc = fail();
						goto done;
					}
				}
				t[r] = (double)steps * verify / (sg_time_s() - t0);
			}
			double mean, sd;
			stats(t + 1, reps, &mean, &sd);
			char name[32];
			snprintf(name, sizeof name, depth ? "v%d@d%d" : "v%d", verify, depth);
			printf("%-8s %14.2f +- %7.2f %12s", name, mean, sd, "-");
			if (tg_mean > 0) printf("   a step costs %.2f decode steps", (double)verify * tg_mean / mean);
			printf(pass ? " (prefill path, not exact)\n" : "\n");
			}
			sg_free(rows);
		}
	}
	rc = 0;
done:
	sg_free(toks);
	sg_free(t);
	sg_session_free(s);
	sg_model_free(m);
	return rc;
}
