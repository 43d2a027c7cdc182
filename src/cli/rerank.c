/* saragossa rerank: scores documents against a query with a cross-encoder.
 *
 *   rerank -m MODEL --query Q [--top-n N] [--format text|json] [--truncate] DOC...
 *
 * With no DOC arguments, every line of stdin is one document. text prints one "score<TAB>index<TAB>
 * document" line per document, best first; json prints the Jina/Cohere shape the server answers
 * ({"results": [{"index", "relevance_score", "document": {"text"}}]}). Scores are the model's
 * (sentence-transformers' CrossEncoder: sigmoid of the logit for a one-label head). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/alloc.h"
#include "cli/cli.h"
#include "cli/lm_cli.h"
#include "engine/embed.h"
#include "saragossa.h"

#define MAX_DOCS 100000

/* Best score first, ties in input order (qsort_r's context: the scores). */
static int by_score(const void *a, const void *b, void *scores)
{
	const float *s = scores;
	int x = *(const int *)a, y = *(const int *)b;
	if (s[x] != s[y]) return s[x] > s[y] ? -1 : 1;
	return x - y;
}

int sg_cli_rerank(int argc, char **argv)
{
	const char *model = NULL, *backend = NULL, *query = NULL, *format = "text";
	int threads = 0, truncate = 0, rc = 1, n = 0;
	long top_n = 0;
	sg_embed_input *docs = sg_calloc(argc > 0 ? (size_t)argc : 1, sizeof(*docs));
	char *buf = NULL;
	if (!docs) return 1;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v) model = argv[++i];
		else if ((!strcmp(a, "-q") || !strcmp(a, "--query")) && v) query = argv[++i];
		else if (!strcmp(a, "--format") && v) format = argv[++i];
		else if (!strcmp(a, "--backend") && v) backend = argv[++i];
		else if (!strcmp(a, "--threads") && v) threads = atoi(argv[++i]);
		else if (!strcmp(a, "--truncate")) truncate = 1;
		else if (!strcmp(a, "--top-n") && v) {
			if (sg_cli_parse_int(argv[++i], 1, MAX_DOCS, &top_n)) {
				rc = sg_cli_usage_error("rerank", "--top-n must be a positive integer, not '%s'", argv[i]);
				goto done;
			}
		} else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			printf("usage: saragossa rerank -m MODEL --query Q [--top-n N] [--format text|json] [--truncate] DOC...\n"
			       "  no DOC: one document per line of stdin\n");
			rc = 0;
			goto done;
		} else if (a[0] == '-' && a[1]) {
			rc = sg_cli_usage_error("rerank", "unknown or incomplete option '%s'", a);
			goto done;
		} else docs[n++] = (sg_embed_input){.text = a, .len = strlen(a)};
	}
	if (!model) {
		rc = sg_cli_usage_error("rerank", "-m MODEL is required (a cross-encoder)");
		goto done;
	}
	if (!query) {
		rc = sg_cli_usage_error("rerank", "--query Q is required");
		goto done;
	}
	if (strcmp(format, "text") && strcmp(format, "json")) {
		rc = sg_cli_usage_error("rerank", "--format must be text or json, not '%s'", format);
		goto done;
	}
	if (threads < 0 || threads > 256) {
		rc = sg_cli_usage_error("rerank", "--threads must be 0..256");
		goto done;
	}
	if (!n) {
		size_t cap = 1 << 16, len = 0;
		buf = sg_malloc(cap + 1);
		for (size_t k; buf && (k = fread(buf + len, 1, cap - len, stdin)) > 0;) {
			len += k;
			if (len == cap) {
				char *q = sg_realloc(buf, cap * 2 + 1);
				if (!q) sg_free(buf);
				buf = q;
				cap *= 2;
			}
		}
		if (!buf) {
			fprintf(stderr, "saragossa rerank: out of memory reading stdin\n");
			goto done;
		}
		size_t lines = 1;
		for (size_t k = 0; k < len; k++) lines += buf[k] == '\n';
		if (lines > MAX_DOCS) {
			fprintf(stderr, "saragossa rerank: more than %d documents\n", MAX_DOCS);
			goto done;
		}
		sg_free(docs);
		docs = sg_calloc(lines, sizeof(*docs));
		if (!docs) goto done;
		for (char *p = buf; p < buf + len;) {
			char *nl = memchr(p, '\n', (size_t)(buf + len - p));
			size_t l = nl ? (size_t)(nl - p) : (size_t)(buf + len - p);
			if (l && p[l - 1] == '\r') l--;
			docs[n++] = (sg_embed_input){.text = p, .len = l};
			if (!nl) break;
			p = nl + 1;
		}
		if (!n) {
			fprintf(stderr, "saragossa rerank: no documents (give DOC arguments or lines on stdin)\n");
			goto done;
		}
	}
	char path[4096];
	if (sg_cli_model_path("rerank", model, path, sizeof(path))) goto done;
	sg_embedder *e = NULL;
	if (sg_embedder_load(path, backend, threads, &e)) {
		fprintf(stderr, "saragossa rerank: %s\n", sg_last_error());
		goto done;
	}
	float *scores = sg_malloc(sizeof(float) * (size_t)n);
	int *order = sg_malloc(sizeof(int) * (size_t)n);
	if (!scores || !order) fprintf(stderr, "saragossa rerank: out of memory\n");
	else if (sg_embedder_rerank(e, query, strlen(query), docs, n, truncate, scores, NULL))
		fprintf(stderr, "saragossa rerank: %s\n", sg_last_error());
	else {
		for (int i = 0; i < n; i++) order[i] = i;
		qsort_r(order, (size_t)n, sizeof(int), by_score, scores);
		int k = top_n > 0 && top_n < n ? (int)top_n : n;
		if (!strcmp(format, "json")) {
			json_t *res = json_array();
			for (int i = 0; i < k; i++)
				json_array_append_new(res, json_pack("{s:i,s:f,s:{s:s%}}", "index", order[i], "relevance_score",
								     (double)scores[order[i]], "document", "text", docs[order[i]].text,
								     docs[order[i]].len));
			json_t *o = json_pack("{s:o}", "results", res);
			char *txt = o ? json_dumps(o, JSON_REAL_PRECISION(9)) : NULL;
			if (txt) puts(txt);
			free(txt);
			json_decref(o);
		} else
			for (int i = 0; i < k; i++)
				printf("%.9g\t%d\t%.*s\n", (double)scores[order[i]], order[i], (int)docs[order[i]].len, docs[order[i]].text);
		rc = fflush(stdout) ? 1 : 0;
	}
	sg_free(scores);
	sg_free(order);
	sg_embedder_free(e);
done:
	sg_free(docs);
	sg_free(buf);
	return rc;
}
