/* saragossa tokenize / detokenize: text <-> ids with a model's tokenizer.
 *
 *   tokenize --model M [--no-special]            stdin text -> ids on one line
 *   tokenize --model M --batch [--threads N]     stdin JSON array of strings -> one line of ids
 *                                                each; with N threads every thread encodes the
 *                                                whole batch and all must agree
 *   detokenize --model M [--skip-special] [--stream]   stdin ids -> text
 *   detokenize --model M --batch ...             stdin JSON array of id arrays -> one JSON
 *                                                string per line
 * --time prints the encode/decode time (excluding loading) on stderr. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/json.h"
#include "base/utf8.h"
#include "cli/cli.h"
#include "saragossa.h"
#include "text/tokenizer/tokenizer.h"

typedef struct opts {
	const char *model;
	int no_special, batch, threads, skip_special, stream, time;
} opts;

static int parse(const char *verb, int argc, char **argv, opts *o)
{
	memset(o, 0, sizeof(*o));
	o->threads = 1;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--model") && i + 1 < argc) o->model = argv[++i];
		else if (!strcmp(a, "--threads") && i + 1 < argc) o->threads = atoi(argv[++i]);
		else if (!strcmp(a, "--no-special") && !strcmp(verb, "tokenize")) o->no_special = 1;
		else if (!strcmp(a, "--skip-special") && !strcmp(verb, "detokenize")) o->skip_special = 1;
		else if (!strcmp(a, "--stream") && !strcmp(verb, "detokenize")) o->stream = 1;
		else if (!strcmp(a, "--batch")) o->batch = 1;
		else if (!strcmp(a, "--time")) o->time = 1;
		else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			printf("usage: saragossa %s --model M [options]   (see docs)\n", verb);
			return 1;
		} else return sg_cli_usage_error(verb, "unknown or incomplete option '%s'", a);
	}
	if (!o->model) return sg_cli_usage_error(verb, "--model is required");
	if (o->threads < 1 || o->threads > 256) return sg_cli_usage_error(verb, "--threads must be 1..256");
	return 0;
}

static char *read_stdin(size_t *n)
{
	size_t cap = 1 << 16, len = 0;
	char *p = sg_malloc(cap + 1);
	if (!p) return NULL;
	for (;;) {
		if (len == cap) {
			char *q = sg_realloc(p, cap * 2 + 1);
			if (!q) {
				sg_free(p);
				return NULL;
			}
			p = q;
			cap *= 2;
		}
		size_t k = fread(p + len, 1, cap - len, stdin);
		if (!k) break;
		len += k;
	}
	p[len] = 0;
	*n = len;
	return p;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* CPU time of the calling thread: unlike the wall clock, it does not grow when other processes
 * share the cores. */
static double cpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void print_ids(FILE *f, const sg_tokens *t)
{
	for (size_t i = 0; i < t->n; i++) fprintf(f, i ? " %d" : "%d", t->ids[i]);
	fputc('\n', f);
}

typedef struct job {
	const sg_tokenizer *tok;
	json_t *arr;
	int add_special;
	sg_tokens *res; /* [n] */
	sg_status st;
	char err[256];
} job;

static void *encode_all(void *p)
{
	job *j = p;
	size_t n = json_array_size(j->arr);
	for (size_t i = 0; i < n; i++) {
		const json_t *s = json_array_get(j->arr, i);
		j->st = sg_tokenizer_encode(j->tok, json_string_value(s), json_string_length(s), j->add_special, &j->res[i]);
		if (j->st) {
			snprintf(j->err, sizeof(j->err), "string %zu: %s", i, sg_last_error());
			break;
		}
	}
	return NULL;
}

static int tokenize_batch(const sg_tokenizer *tok, const opts *o, const char *in, size_t n)
{
	json_t *arr;
	if (sg_json_parse(in, n, "stdin", &arr)) {
		fprintf(stderr, "saragossa: %s\n", sg_last_error());
		return 1;
	}
	size_t k = json_array_size(arr);
	for (size_t i = 0; i < k; i++)
		if (!json_is_string(json_array_get(arr, i))) {
			fprintf(stderr, "saragossa: --batch wants a JSON array of strings (item %zu is not)\n", i);
			json_decref(arr);
			return 1;
		}
	job *jobs = sg_calloc((size_t)o->threads, sizeof(job));
	pthread_t *th = sg_calloc((size_t)o->threads, sizeof(pthread_t));
	int rc = 0;
	if (!jobs || !th) return 1;
	for (int t = 0; t < o->threads; t++) {
		jobs[t] = (job){tok, arr, !o->no_special, sg_calloc(k ? k : 1, sizeof(sg_tokens)), SG_OK, ""};
		if (!jobs[t].res) return 1;
	}
	double t0 = now();
	for (int t = 1; t < o->threads; t++) pthread_create(&th[t], NULL, encode_all, &jobs[t]);
	encode_all(&jobs[0]);
	for (int t = 1; t < o->threads; t++) pthread_join(th[t], NULL);
	double dt = now() - t0;
	for (int t = 0; t < o->threads && !rc; t++) {
		if (jobs[t].st) {
			fprintf(stderr, "saragossa: tokenize: %s\n", jobs[t].err);
			rc = 1;
			break;
		}
		for (size_t i = 0; t && i < k && !rc; i++)
			if (jobs[t].res[i].n != jobs[0].res[i].n ||
			    memcmp(jobs[t].res[i].ids, jobs[0].res[i].ids, jobs[0].res[i].n * sizeof(int32_t))) {
				fprintf(stderr, "saragossa: tokenize: thread %d gave other ids than thread 0 for string %zu\n", t, i);
				rc = 1;
			}
	}
	if (!rc)
		for (size_t i = 0; i < k; i++) print_ids(stdout, &jobs[0].res[i]);
	if (o->time) {
		size_t bytes = 0;
		for (size_t i = 0; i < k; i++) bytes += json_string_length(json_array_get(arr, i));
		fprintf(stderr, "encode_seconds %.6f bytes %zu strings %zu threads %d\n", dt, bytes * (size_t)o->threads, k, o->threads);
	}
	for (int t = 0; t < o->threads; t++) {
		for (size_t i = 0; i < k; i++) sg_tokens_free(&jobs[t].res[i]);
		sg_free(jobs[t].res);
	}
	sg_free(jobs);
	sg_free(th);
	json_decref(arr);
	return rc;
}

int sg_cli_tokenize(int argc, char **argv)
{
	opts o;
	int r = parse("tokenize", argc, argv, &o);
	if (r) return r == 1 ? 0 : r;
	sg_tokenizer *tok;
	if (sg_tokenizer_load(o.model, &tok)) {
		fprintf(stderr, "saragossa: %s\n", sg_last_error());
		return 1;
	}
	size_t n;
	char *in = read_stdin(&n);
	if (!in) {
		sg_tokenizer_free(tok);
		fprintf(stderr, "saragossa: out of memory reading stdin\n");
		return 1;
	}
	int rc = 0;
	if (o.batch) {
		rc = tokenize_batch(tok, &o, in, n);
	} else {
		sg_tokens ids = {0};
		double t0 = now(), c0 = cpu_now();
		if (sg_tokenizer_encode(tok, in, n, !o.no_special, &ids)) {
			fprintf(stderr, "saragossa: tokenize: %s\n", sg_last_error());
			rc = 1;
		} else {
			if (o.time) fprintf(stderr, "encode_seconds %.6f cpu_seconds %.6f bytes %zu\n", now() - t0, cpu_now() - c0, n);
			print_ids(stdout, &ids);
		}
		sg_tokens_free(&ids);
	}
	sg_free(in);
	sg_tokenizer_free(tok);
	return rc;
}

/* Decodes ids into a heap string, through the streaming detokenizer when asked (then every
 * piece must be valid UTF-8). */
static int decode_one(const sg_tokenizer *tok, const opts *o, const int32_t *ids, size_t n, char **out, size_t *len)
{
	if (!o->stream) return sg_tokenizer_decode(tok, ids, n, o->skip_special, out, len) ? -1 : 0;
	sg_detok *d;
	if (sg_detok_create(tok, o->skip_special, &d)) return -1;
	size_t cap = 256, k = 0;
	char *buf = sg_malloc(cap);
	int rc = buf ? 0 : -1;
	for (size_t i = 0; i <= n && !rc; i++) {
		const char *p;
		size_t pl;
		if (i < n ? sg_detok_push(d, ids[i], &p, &pl) : sg_detok_flush(d, &p, &pl)) {
			rc = -1;
			break;
		}
		if (!sg_utf8_valid((const uint8_t *)p, pl)) {
			fprintf(stderr, "saragossa: detokenize: streamed piece after id %zu is not valid UTF-8\n", i);
			rc = -1;
			break;
		}
		while (k + pl + 1 > cap) {
			char *q = sg_realloc(buf, cap *= 2);
			if (!q) {
				rc = -1;
				break;
			}
			buf = q;
		}
		if (rc) break;
		memcpy(buf + k, p, pl);
		k += pl;
	}
	sg_detok_free(d);
	if (rc) {
		sg_free(buf);
		return -1;
	}
	buf[k] = 0;
	*out = buf;
	*len = k;
	return 0;
}

int sg_cli_detokenize(int argc, char **argv)
{
	opts o;
	int r = parse("detokenize", argc, argv, &o);
	if (r) return r == 1 ? 0 : r;
	sg_tokenizer *tok;
	if (sg_tokenizer_load(o.model, &tok)) {
		fprintf(stderr, "saragossa: %s\n", sg_last_error());
		return 1;
	}
	size_t n;
	char *in = read_stdin(&n);
	int rc = 0;
	sg_tokens ids = {0};
	json_t *arr = NULL;
	if (!in) {
		rc = 1;
		goto done;
	}
	if (o.batch) {
		if (sg_json_parse(in, n, "stdin", &arr)) {
			fprintf(stderr, "saragossa: %s\n", sg_last_error());
			rc = 1;
			goto done;
		}
	} else {
		arr = json_array();
		json_t *one = json_array();
		char *p = in, *end;
		for (;;) {
			while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r' || *p == ',') p++;
			if (!*p) break;
			long v = strtol(p, &end, 10);
			if (end == p) {
				fprintf(stderr, "saragossa: detokenize: '%.20s' is not a token id\n", p);
				rc = 1;
				json_decref(one);
				goto done;
			}
			json_array_append_new(one, json_integer(v));
			p = end;
		}
		json_array_append_new(arr, one);
	}
	double t0 = now();
	for (size_t i = 0; i < json_array_size(arr) && !rc; i++) {
		const json_t *a = json_array_get(arr, i), *v;
		size_t k;
		ids.n = 0;
		json_array_foreach(a, k, v) sg_tokens_push(&ids, (int32_t)json_integer_value(v));
		char *text;
		size_t len;
		if (decode_one(tok, &o, ids.ids, ids.n, &text, &len)) {
			fprintf(stderr, "saragossa: detokenize: %s\n", sg_last_error());
			rc = 1;
			break;
		}
		if (o.batch) {
			json_t *s = json_stringn(text, len);
			char *dump = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
			if (dump) puts(dump);
			free(dump);
			json_decref(s);
		} else {
			fwrite(text, 1, len, stdout);
		}
		sg_free(text);
	}
	if (o.time) fprintf(stderr, "decode_seconds %.6f\n", now() - t0);
done:
	json_decref(arr);
	sg_tokens_free(&ids);
	sg_free(in);
	sg_tokenizer_free(tok);
	return rc;
}
