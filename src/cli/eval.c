/*
 * saragossa eval: run token ids through a model as one prompt. The parity interface:
 *   --logits-out FILE  float32 little-endian logits of every prompt position, [T][vocab]
 *   --greedy N         the N greedy next-token ids, space-separated, one line on stdout
 * Nothing else goes to stdout. Bad input (an id past the vocabulary, an empty prompt, a prompt
 * longer than the context) is a one-line error and exit status 1.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "cli/cli.h"
#include "cli/lm_cli.h"
#include "models/model.h"
#include "saragossa.h"

static int fail(void)
{
	fprintf(stderr, "saragossa eval: %s\n", sg_last_error());
	return 1;
}

/* "1, 2,3" -> ids; returns the count, -1 on a malformed list (message printed). */
static int parse_tokens(const char *s, int32_t **out)
{
	size_t cap = 16, n = 0;
	int32_t *v = sg_malloc(cap * sizeof(int32_t));
	if (!v) return -1;
	const char *p = s;
	while (*p) {
		while (*p == ' ' || *p == '\t') p++;
		if (!*p) break;
		errno = 0;
		char *end;
		long long x = strtoll(p, &end, 10);
		if (end == p || errno || x < INT32_MIN || x > INT32_MAX) {
			fprintf(stderr, "saragossa eval: --tokens: '%.20s' is not a token id\n", p);
			sg_free(v);
			return -1;
		}
		if (n == cap) {
			int32_t *nv = sg_realloc(v, 2 * cap * sizeof(int32_t));
			if (!nv) {
				sg_free(v);
				return -1;
			}
			v = nv;
			cap *= 2;
		}
		v[n++] = (int32_t)x;
		p = end;
		while (*p == ' ' || *p == '\t') p++;
		if (*p == ',') p++;
		else if (*p) {
			fprintf(stderr, "saragossa eval: --tokens: unexpected '%c' (want ids separated by commas)\n", *p);
			sg_free(v);
			return -1;
		}
	}
	*out = v;
	return (int)n;
}

static int argmax(const float *x, int n)
{
	int best = 0;
	for (int i = 1; i < n; i++)
		if (x[i] > x[best]) best = i;
	return best;
}

static int int_arg(const char *verb, const char *name, const char *v, int lo, int *out)
{
	char *end;
	errno = 0;
	long x = v ? strtol(v, &end, 10) : 0;
	if (!v || !*v || *end || errno || x < lo || x > 1 << 30) {
		sg_cli_usage_error(verb, "%s wants an integer >= %d, got '%s'", name, lo, v ? v : "");
		return -1;
	}
	*out = (int)x;
	return 0;
}

int sg_cli_eval(int argc, char **argv)
{
	const char *model_path = NULL, *tokens_arg = NULL, *logits_path = NULL, *backend = NULL, *kv = NULL;
	int greedy = 0, threads = 0, chunk = 0, ctx = 0;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int rc = 0;
		if (!strcmp(a, "--model")) model_path = v;
		else if (!strcmp(a, "--tokens")) tokens_arg = v;
		else if (!strcmp(a, "--logits-out")) logits_path = v;
		else if (!strcmp(a, "--backend")) backend = v;
		else if (!strcmp(a, "--kv")) kv = v;
		else if (!strcmp(a, "--greedy")) rc = int_arg("eval", a, v, 0, &greedy);
		else if (!strcmp(a, "--threads")) rc = int_arg("eval", a, v, 0, &threads);
		else if (!strcmp(a, "--chunk")) rc = int_arg("eval", a, v, 1, &chunk);
		else if (!strcmp(a, "--ctx")) rc = int_arg("eval", a, v, 1, &ctx);
		else if (!strcmp(a, "--expert-cache")) rc = v ? sg_cli_expert_cache_opt("eval", v) : 0;
		else return sg_cli_usage_error("eval", "unknown argument '%s'", a);
		if (rc) return 2;
		if (!v) return sg_cli_usage_error("eval", "%s needs a value", a);
		i++;
	}
	if (!model_path || !tokens_arg) return sg_cli_usage_error("eval", "--model and --tokens are required");
	if (kv && strcmp(kv, "f32") && strcmp(kv, "f16")) return sg_cli_usage_error("eval", "--kv is f32 or f16");
	int32_t *toks = NULL;
	int T = parse_tokens(tokens_arg, &toks);
	if (T < 0) return 1;
	if (T == 0) {
		sg_free(toks);
		fprintf(stderr, "saragossa eval: empty prompt: --tokens holds no token ids\n");
		return 1;
	}
	sg_model_params mp = sg_model_default_params();
	mp.backend = backend;
	mp.n_threads = threads;
	sg_model *m = NULL;
	sg_session *s = NULL;
	float *logits = NULL;
	int rc = 1;
	if (sg_model_load_ex(model_path, &mp, sg_cli_expert_on(), &m)) {
		rc = fail();
		goto done;
	}
	int max = sg_model_n_ctx_train(m), need = T + greedy;
	if (!ctx) ctx = max > 0 && need > max ? max : need;
	if (sg_cli_expert_apply("eval", m, ctx)) goto done;
	if (need > ctx) {
		if (greedy)
			fprintf(stderr, "saragossa eval: prompt of %d tokens plus %d greedy tokens exceeds the context of %d tokens\n",
				T, greedy, ctx);
		else fprintf(stderr, "saragossa eval: prompt of %d tokens exceeds the context of %d tokens\n", T, ctx);
		goto done;
	}
	sg_session_params sp = sg_session_default_params();
	sp.n_ctx = ctx;
	sp.n_batch = chunk;
	if (kv) sp.kv_type = !strcmp(kv, "f16") ? SG_KV_F16 : SG_KV_F32;
	if (sg_session_new(m, &sp, &s)) {
		rc = fail();
		goto done;
	}
	int V = sg_model_n_vocab(m);
	if (logits_path && !(logits = sg_malloc(sizeof(float) * (size_t)T * (size_t)V))) {
		fprintf(stderr, "saragossa eval: out of memory for %d x %d logits\n", T, V);
		goto done;
	}
	if (sg_session_eval(s, toks, T, logits)) {
		rc = fail();
		goto done;
	}
	if (logits_path) {
		FILE *f = fopen(logits_path, "wb");
		/* float32 little-endian: the host order on every platform this builds for */
		size_t nw = f ? fwrite(logits, sizeof(float) * (size_t)V, (size_t)T, f) : 0;
		if (!f || nw != (size_t)T || fclose(f)) {
			fprintf(stderr, "saragossa eval: cannot write %s: %s\n", logits_path, strerror(errno));
			goto done;
		}
	}
	for (int i = 0; i < greedy; i++) {
		int32_t next = argmax(sg_session_logits(s), V);
		printf(i ? " %d" : "%d", next);
		if (i + 1 < greedy && sg_session_eval(s, &next, 1, NULL)) {
			printf("\n");
			rc = fail();
			goto done;
		}
	}
	if (greedy) printf("\n");
	sg_cli_expert_metrics(m, stderr); /* stdout stays the parity interface */
	rc = 0;
done:
	sg_free(logits);
	sg_free(toks);
	sg_session_free(s);
	sg_model_free(m);
	return rc;
}
