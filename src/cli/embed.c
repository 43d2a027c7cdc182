/* saragossa embed: text (or token ids) -> embedding vectors with an encoder model.
 *
 *   embed -m MODEL [--format json|jsonl] [--truncate] [--backend B] [--threads N] TEXT...
 *   embed -m MODEL --tokens I,J,K [--tokens ...]     token ids in (special tokens included)
 *
 * With neither TEXT nor --tokens, every line of stdin is one input. json prints one JSON array
 * holding one vector per input; jsonl prints one vector per line. Floats are printed with 9
 * significant digits, enough to read back the same f32. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "cli/cli.h"
#include "cli/lm_cli.h"
#include "engine/embed.h"
#include "saragossa.h"

#define MAX_INPUTS 100000

typedef struct input {
	const char *text; /* NULL: ids */
	size_t len;
	int32_t *ids;
	int n_ids;
} input;

typedef struct inputs {
	input *v;
	int n, cap;
} inputs;

static int push(inputs *in, input x)
{
	if (in->n == MAX_INPUTS) return -1;
	if (in->n == in->cap) {
		int cap = in->cap ? in->cap * 2 : 16;
		input *v = sg_realloc(in->v, sizeof(input) * (size_t)cap);
		if (!v) return -1;
		in->v = v;
		in->cap = cap;
	}
	in->v[in->n++] = x;
	return 0;
}

/* "1,2,3" -> ids; 0 on success, else prints why and returns 1 */
static int parse_ids(const char *s, input *out)
{
	size_t cap = 1;
	for (const char *p = s; *p; p++) cap += *p == ',';
	out->ids = sg_malloc(sizeof(int32_t) * cap);
	if (!out->ids) return 1;
	out->n_ids = 0;
	const char *p = s;
	for (;;) {
		char *end;
		errno = 0;
		long v = strtol(p, &end, 10);
		if (end == p || errno || v < INT32_MIN || v > INT32_MAX || (*end && *end != ',')) {
			fprintf(stderr, "saragossa embed: --tokens '%s': not a list of token ids\n", s);
			return 1;
		}
		out->ids[out->n_ids++] = (int32_t)v;
		if (!*end) return 0;
		p = end + 1;
	}
}

static void print_vec(const float *v, int dim)
{
	putchar('[');
	for (int j = 0; j < dim; j++) printf(j ? ",%.9g" : "%.9g", (double)v[j]);
	putchar(']');
}

int sg_cli_embed(int argc, char **argv)
{
	const char *model = NULL, *backend = NULL, *format = "json";
	int threads = 0, truncate = 0, rc = 1;
	inputs in = {0};
	char *stdin_buf = NULL;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v) model = argv[++i];
		else if (!strcmp(a, "--format") && v) format = argv[++i];
		else if (!strcmp(a, "--backend") && v) backend = argv[++i];
		else if (!strcmp(a, "--threads") && v) threads = atoi(argv[++i]);
		else if (!strcmp(a, "--truncate")) truncate = 1;
		else if (!strcmp(a, "--tokens") && v) {
			input x = {0};
			if (parse_ids(argv[++i], &x) || push(&in, x)) {
				sg_free(x.ids);
				goto done;
			}
		} else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			printf("usage: saragossa embed -m MODEL [--format json|jsonl] [--truncate] [--tokens I,J,K]... [TEXT...]\n");
			rc = 0;
			goto done;
		} else if (a[0] == '-' && a[1]) {
			rc = sg_cli_usage_error("embed", "unknown or incomplete option '%s'", a);
			goto done;
		} else if (push(&in, (input){.text = a, .len = strlen(a)})) {
			fprintf(stderr, "saragossa embed: more than %d inputs\n", MAX_INPUTS);
			goto done;
		}
	}
	if (!model) {
		rc = sg_cli_usage_error("embed", "-m MODEL is required");
		goto done;
	}
	if (strcmp(format, "json") && strcmp(format, "jsonl")) {
		rc = sg_cli_usage_error("embed", "--format must be json or jsonl, not '%s'", format);
		goto done;
	}
	if (threads < 0 || threads > 256) {
		rc = sg_cli_usage_error("embed", "--threads must be 0..256");
		goto done;
	}
	if (!in.n) {
		/* one input per line of stdin */
		size_t cap = 1 << 16, len = 0;
		stdin_buf = sg_malloc(cap + 1);
		for (size_t k; stdin_buf && (k = fread(stdin_buf + len, 1, cap - len, stdin)) > 0;) {
			len += k;
			if (len == cap) {
				char *q = sg_realloc(stdin_buf, cap * 2 + 1);
				if (!q) sg_free(stdin_buf);
				stdin_buf = q;
				cap *= 2;
			}
		}
		if (!stdin_buf) {
			fprintf(stderr, "saragossa embed: out of memory reading stdin\n");
			goto done;
		}
		stdin_buf[len] = 0;
		for (char *p = stdin_buf; *p;) {
			char *nl = strchr(p, '\n');
			size_t l = nl ? (size_t)(nl - p) : strlen(p);
			if (l && p[l - 1] == '\r') l--;
			if (push(&in, (input){.text = p, .len = l})) {
				fprintf(stderr, "saragossa embed: more than %d inputs\n", MAX_INPUTS);
				goto done;
			}
			if (!nl) break;
			p = nl + 1;
		}
		if (!in.n) {
			fprintf(stderr, "saragossa embed: no input (give TEXT arguments, --tokens, or lines on stdin)\n");
			goto done;
		}
	}
	char path[4096];
	if (sg_cli_model_path("embed", model, path, sizeof(path))) goto done;
	sg_embedder *e = NULL;
	if (sg_embedder_load(path, backend, threads, &e)) {
		fprintf(stderr, "saragossa embed: %s\n", sg_last_error());
		goto done;
	}
	int dim = sg_embedder_dim(e), jsonl = !strcmp(format, "jsonl");
	float *vec = sg_malloc(sizeof(float) * (size_t)dim * (size_t)in.n);
	int ok = vec != NULL;
	if (!ok) fprintf(stderr, "saragossa embed: out of memory for %d vectors\n", in.n);
	/* every input is embedded before anything is printed: an error prints no partial output */
	for (int i = 0; i < in.n && ok; i++) {
		const input *x = &in.v[i];
		sg_status st = x->text ? sg_embedder_embed_text(e, x->text, x->len, truncate, vec + (size_t)i * dim, NULL)
				       : sg_embedder_embed_ids(e, x->ids, x->n_ids, vec + (size_t)i * dim);
		if (st) {
			fprintf(stderr, "saragossa embed: input %d: %s\n", i + 1, sg_last_error());
			ok = 0;
		}
	}
	if (ok) {
		if (!jsonl) putchar('[');
		for (int i = 0; i < in.n; i++) {
			if (!jsonl && i) putchar(',');
			print_vec(vec + (size_t)i * dim, dim);
			if (jsonl) putchar('\n');
		}
		if (!jsonl) printf("]\n");
		rc = fflush(stdout) ? 1 : 0;
	}
	sg_free(vec);
	sg_embedder_free(e);
done:
	for (int i = 0; i < in.n; i++) sg_free(in.v[i].ids);
	sg_free(in.v);
	sg_free(stdin_buf);
	return rc;
}
