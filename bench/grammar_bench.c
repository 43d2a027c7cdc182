/* Per-token cost of constrained decoding on a real vocabulary: trie build time, then the time of
 * sg_grammar_mask at a set of named states (typical and worst cases), then a generation walk
 * (random allowed tokens through a schema) reporting mean, p99 and max per token.
 *
 *   bench/grammar_bench.sh [MODEL.gguf]      builds this and runs it on the model's vocabulary
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <time.h>

#include "base/timer.h"
#include "text/grammar/grammar.h"
#include "text/grammar/json_schema.h"
#include "text/grammar/token_trie.h"

typedef struct {
	uint8_t **tok;
	uint32_t *len;
	int n, eot;
	int *special, n_special;
} vocab;

static int load(const char *path, vocab *v)
{
	FILE *f = fopen(path, "rb");
	if (!f) return -1;
	uint32_t hdr[2];
	if (fread(hdr, 4, 2, f) != 2) return -1;
	v->n = (int)hdr[0];
	v->eot = (int)hdr[1];
	v->tok = calloc((size_t)v->n, sizeof(uint8_t *));
	v->len = calloc((size_t)v->n, sizeof(uint32_t));
	v->special = calloc((size_t)v->n, sizeof(int));
	for (int i = 0; i < v->n; i++) {
		uint8_t kind;
		uint32_t l;
		if (fread(&kind, 1, 1, f) != 1 || fread(&l, 4, 1, f) != 1) return -1;
		v->tok[i] = malloc(l + 1);
		if (l && fread(v->tok[i], 1, l, f) != l) return -1;
		v->len[i] = l;
		if (kind && i != v->eot) v->special[v->n_special++] = i;
	}
	fclose(f);
	return 0;
}

/* Thread CPU time: on a shared machine, wall time would mostly measure preemption. */
static uint64_t cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int popcount_mask(const uint32_t *m, int words)
{
	int c = 0;
	for (int i = 0; i < words; i++) c += __builtin_popcount(m[i]);
	return c;
}

/* Median of reps timings of the mask at the state after `prefix`. */
static void at_state(const char *label, const sg_grammar *g, const char *prefix, const sg_token_trie *t)
{
	sg_grammar_state *s;
	sg_grammar_state_new(g, &s);
	if (sg_grammar_advance(s, (const uint8_t *)prefix, strlen(prefix)) != SG_OK) {
		printf("%-44s  prefix rejected!\n", label);
		return;
	}
	uint32_t *m = calloc((size_t)t->words, 4);
	double ts[31];
	for (int r = 0; r < 31; r++) {
		uint64_t t0 = cpu_ns();
		sg_grammar_mask(s, t, m);
		ts[r] = (double)(cpu_ns() - t0) / 1e3;
	}
	double first = ts[0];
	qsort(ts, 31, sizeof(double), cmp_d);
	printf("| %-44s | %8.1f | %8.1f | %8.1f | %7d |\n", label, first, ts[15], ts[30], popcount_mask(m, t->words));
	free(m);
	sg_grammar_state_free(s);
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Generates through the mask, picking allowed tokens at random (with a bias to short ones so
 * documents end), and reports the per-token cost distribution. */
static void walk(const char *label, const sg_grammar *g, const vocab *v, const sg_token_trie *t, int steps)
{
	sg_grammar_state *s;
	sg_grammar_state_new(g, &s);
	uint32_t *m = calloc((size_t)t->words, 4);
	int *allowed = malloc((size_t)v->n * sizeof(int));
	double *ts = malloc((size_t)steps * sizeof(double));
	int n = 0, docs = 0;
	for (int i = 0; i < steps; i++) {
		uint64_t t0 = cpu_ns();
		sg_grammar_mask(s, t, m);
		ts[n++] = (double)(cpu_ns() - t0) / 1e3;
		int na = 0;
		for (int w = 0; w < t->words; w++)
			for (uint32_t b = m[w]; b; b &= b - 1) allowed[na++] = w * 32 + __builtin_ctz(b);
		if (na == 0) break;
		int pick = allowed[next() % (uint64_t)na];
		for (int k = 0; k < 3; k++) { /* prefer shorter tokens: documents finish */
			int c = allowed[next() % (uint64_t)na];
			if (v->len[c] < v->len[pick]) pick = c;
		}
		if ((m[v->eot >> 5] >> (v->eot & 31)) & 1) pick = v->eot;
		if (pick == v->eot) {
			sg_grammar_state_reset(s);
			docs++;
			continue;
		}
		sg_grammar_advance(s, v->tok[pick], v->len[pick]);
	}
	qsort(ts, (size_t)n, sizeof(double), cmp_d);
	double sum = 0;
	for (int i = 0; i < n; i++) sum += ts[i];
	printf("| %-44s | %8.1f | %8.1f | %8.1f | %5d | %4d |\n", label, sum / n, ts[n * 99 / 100], ts[n - 1], n, docs);
	free(m);
	free(allowed);
	free(ts);
	sg_grammar_state_free(s);
}

static sg_grammar *schema(const char *text)
{
	json_t *j = json_loads(text, 0, NULL);
	sg_grammar *g = NULL;
	if (sg_json_schema_compile(j, 1, &g, NULL, 0) != SG_OK) {
		fprintf(stderr, "schema: %s\n", sg_last_error());
		exit(1);
	}
	json_decref(j);
	return g;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: grammar_bench VOCAB.bin\n");
		return 2;
	}
	vocab v = {0};
	if (load(argv[1], &v)) {
		fprintf(stderr, "cannot read %s\n", argv[1]);
		return 1;
	}
	uint64_t t0 = sg_time_ns();
	sg_token_trie *t;
	int eot[] = {v.eot};
	if (sg_token_trie_build((const uint8_t *const *)v.tok, v.len, v.n, v.special, v.n_special, eot, 1, &t) != SG_OK) {
		fprintf(stderr, "%s\n", sg_last_error());
		return 1;
	}
	printf("vocabulary %d tokens (%d special); trie build %.1f ms; trie nodes %u, non-plain tokens %u "
	       "(their trie: %u nodes), longest token %u bytes\n\n",
	       v.n, v.n_special, (double)(sg_time_ns() - t0) / 1e6, t->all.n, t->impure.tok_off[t->impure.n],
	       t->impure.n, t->all.max_depth);

	sg_grammar *jo;
	sg_grammar_json_object(&jo);
	sg_grammar *sc = schema(
		"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":40},"
		"\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},\"email\":{\"type\":\"string\"},"
		"\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"red\",\"green\",\"blue\"]},\"maxItems\":4},"
		"\"extra\":{\"type\":\"object\",\"additionalProperties\":{\"type\":\"number\"}}},"
		"\"required\":[\"name\",\"age\",\"tags\"],\"additionalProperties\":false}");
	sg_grammar *amb = schema("{\"type\":\"object\",\"properties\":{\"v\":{\"anyOf\":[{\"type\":\"string\",\"maxLength\":50},"
				 "{\"type\":\"string\",\"minLength\":2}]}},\"required\":[\"v\"]}");

	/* eight tagged alternatives sharing their first property: eight live stacks at its value */
	char many[4096];
	size_t k = (size_t)snprintf(many, sizeof(many), "{\"anyOf\":[");
	for (int i = 0; i < 8; i++)
		k += (size_t)snprintf(many + k, sizeof(many) - k,
				      "%s{\"type\":\"object\",\"properties\":{\"kind\":{\"enum\":[\"kind_%d\",\"alt\"]},"
				      "\"v%d\":{\"type\":\"string\"}},\"required\":[\"kind\",\"v%d\"],"
				      "\"additionalProperties\":false}",
				      i ? "," : "", i, i, i);
	snprintf(many + k, sizeof(many) - k, "]}");
	sg_grammar *eight = schema(many);

	printf("Mask cost at fixed states (thread CPU microseconds per call on a fresh state: the first call,\n"
	       "then the median and max of 31 calls; allowed tokens)\n\n");
	printf("| %-44s | %8s | %8s | %8s | %7s |\n", "state", "first", "median", "max", "allowed");
	printf("|%.46s|%.10s|%.10s|%.10s|%.9s|\n", "----------------------------------------------", "----------", "----------", "----------", "---------");
	at_state("json_object: start", jo, "", t);
	at_state("json_object: after '{'", jo, "{", t);
	at_state("json_object: in a key", jo, "{\"na", t);
	at_state("json_object: after ':'", jo, "{\"name\":", t);
	at_state("json_object: in a string value (plain path)", jo, "{\"name\": \"Ada Lov", t);
	at_state("json_object: in a number", jo, "{\"n\": 12", t);
	at_state("json_object: after a value", jo, "{\"n\": 12.5", t);
	at_state("json_object: after an escape '\\u00'", jo, "{\"s\": \"x\\u00", t);
	at_state("json_object: inside a UTF-8 sequence", jo, "{\"s\": \"x\xe2\x82", t);
	at_state("schema: start", sc, "", t);
	at_state("schema: declared key", sc, "{\"na", t);
	at_state("schema: string maxLength 40, 3 left", sc, "{\"name\": \"abcdefghijklmnopqrstuvwxyzabcdefghijklm", t);
	at_state("schema: bounded integer", sc, "{\"name\": \"A\", \"age\": 1", t);
	at_state("schema: enum item", sc, "{\"name\": \"A\", \"age\": 1, \"tags\": [\"gr", t);
	at_state("schema: additional key (plain path)", sc, "{\"name\": \"A\", \"age\": 1, \"tags\": [], \"extra\": {\"ab", t);
	at_state("anyOf of two strings (2 stacks)", amb, "{\"v\": \"abc", t);
	at_state("anyOf of 8 objects: shared key value (8)", eight, "{\"kind\": \"", t);
	at_state("anyOf of 8 objects: after the shared value", eight, "{\"kind\": \"alt\", ", t);
	printf("\nGeneration walks (thread CPU microseconds of the mask per token)\n\n");
	printf("| %-44s | %8s | %8s | %8s | %5s | %4s |\n", "grammar", "mean", "p99", "max", "tokens", "docs");
	printf("|%.46s|%.10s|%.10s|%.10s|%.7s|%.6s|\n", "----------------------------------------------", "----------", "----------", "----------", "-------", "------");
	walk("json_object", jo, &v, t, 3000);
	walk("schema (object, enum, bounds, additional)", sc, &v, t, 3000);
	walk("anyOf of two strings", amb, &v, t, 1000);
	sg_grammar_free(jo);
	sg_grammar_free(sc);
	sg_grammar_free(amb);
	sg_grammar_free(eight);
	sg_token_trie_free(t);
	return 0;
}
