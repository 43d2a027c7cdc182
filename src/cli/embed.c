/* saragossa embed: text (or token ids) -> embedding vectors with an encoder model.
 *
 *   embed [-m MODEL] [--format json|jsonl|npy] [-o FILE] [--dimensions N] [--truncate]
 *         [--prompt-name NAME | --prompt TEXT] [--backend B] [--threads N] [TEXT... | -f FILE]
 *   embed -m MODEL --tokens I,J,K [--tokens ...]     token ids in (special tokens included)
 *
 * With neither TEXT, -f nor --tokens, every line of stdin is one input (-f FILE: every line of
 * FILE). json prints one JSON array holding one vector per input; jsonl prints one vector per
 * line; npy writes a NumPy .npy file, float32 [n][dim] little-endian, to -o FILE or stdout.
 * Floats in text formats are printed with 9 significant digits, enough to read back the same
 * f32. --dimensions keeps the first N dimensions (Matryoshka), re-normalised when the model
 * normalises. --prompt-name puts one of the model's prompts (config_sentence_transformers.json,
 * e.g. "query") before each text, --prompt any text; neither: the model's default prompt, if it
 * names one (sentence-transformers' encode). Without -m, the default embedding model (all-MiniLM-L6-v2) in saragossa's models
 * folder. All inputs run as packed batches (engine/embed.h). */
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

/* Reads all of f into a NUL-terminated heap buffer (*len bytes); NULL when out of memory. */
static char *slurp(FILE *f, size_t *len)
{
	size_t cap = 1 << 16, n = 0;
	char *buf = sg_malloc(cap + 1);
	for (size_t k; buf && (k = fread(buf + n, 1, cap - n, f)) > 0;) {
		n += k;
		if (n == cap) {
			char *q = sg_realloc(buf, cap * 2 + 1);
			if (!q) sg_free(buf);
			buf = q;
			cap *= 2;
		}
	}
	if (buf) buf[n] = 0;
	*len = n;
	return buf;
}

/* One input per line of buf (a trailing CR dropped; an empty last line is no input). */
static int push_lines(inputs *in, char *buf, size_t len)
{
	for (char *p = buf; p < buf + len;) {
		char *nl = memchr(p, '\n', (size_t)(buf + len - p));
		size_t l = nl ? (size_t)(nl - p) : (size_t)(buf + len - p);
		if (l && p[l - 1] == '\r') l--;
		if (push(in, (input){.text = p, .len = l})) {
			fprintf(stderr, "saragossa embed: more than %d inputs\n", MAX_INPUTS);
			return 1;
		}
		if (!nl) break;
		p = nl + 1;
	}
	return 0;
}

/* NumPy's .npy format version 1.0: magic, version, a little-endian u16 header length, a Python
 * dict literal padded with spaces to a multiple of 64 bytes ending in a newline, then the data. */
static int write_npy(FILE *f, const float *v, int n, int dim)
{
	char hdr[128];
	int h = snprintf(hdr, sizeof hdr, "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }", n, dim);
	int total = (10 + h + 1 + 63) / 64 * 64;
	int pad = total - 10 - h - 1;
	unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)((total - 10) & 0xff),
				 (unsigned char)((total - 10) >> 8)};
	if (fwrite(pre, 1, 10, f) != 10 || fwrite(hdr, 1, (size_t)h, f) != (size_t)h) return 1;
	for (int i = 0; i < pad; i++)
		if (fputc(' ', f) == EOF) return 1;
	if (fputc('\n', f) == EOF) return 1;
	/* floats are written as the host holds them: every target saragossa builds for is little-endian */
	size_t cnt = (size_t)n * (size_t)dim;
	return fwrite(v, sizeof(float), cnt, f) != cnt;
}

int sg_cli_embed(int argc, char **argv)
{
	const char *model = NULL, *backend = NULL, *format = "json", *file = NULL, *outp = NULL;
	const char *prompt_name = NULL, *prompt = NULL;
	int threads = 0, truncate = 0, rc = 1;
	long dims = 0;
	inputs in = {0};
	char *stdin_buf = NULL;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v) model = argv[++i];
		else if (!strcmp(a, "--format") && v) format = argv[++i];
		else if (!strcmp(a, "--backend") && v) backend = argv[++i];
		else if (!strcmp(a, "--threads") && v) threads = atoi(argv[++i]);
		else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && v) file = argv[++i];
		else if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && v) outp = argv[++i];
		else if (!strcmp(a, "--prompt-name") && v) prompt_name = argv[++i];
		else if (!strcmp(a, "--prompt") && v) prompt = argv[++i];
		else if (!strcmp(a, "--dimensions") && v) {
			if (sg_cli_parse_int(argv[++i], 1, 1 << 20, &dims)) {
				rc = sg_cli_usage_error("embed", "--dimensions must be a positive integer, not '%s'", argv[i]);
				goto done;
			}
		} else if (!strcmp(a, "--truncate")) truncate = 1;
		else if (!strcmp(a, "--tokens") && v) {
			input x = {0};
			if (parse_ids(argv[++i], &x) || push(&in, x)) {
				sg_free(x.ids);
				goto done;
			}
		} else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			printf("usage: saragossa embed [-m MODEL] [--format json|jsonl|npy] [-o FILE] [--dimensions N] [--truncate]\n"
			       "                       [--prompt-name NAME | --prompt TEXT] [--tokens I,J,K]... [TEXT... | -f FILE]\n"
			       "  no TEXT, -f or --tokens: one input per line of stdin\n"
			       "  --prompt-name: one of the model's prompts (e.g. query) before each text; --prompt: any text\n"
			       "  -m: default " SG_CLI_DEFAULT_EMBED_MODEL_NAME " (SARAGOSSA_DEFAULT_EMBED_MODEL overrides)\n");
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
	if (strcmp(format, "json") && strcmp(format, "jsonl") && strcmp(format, "npy")) {
		rc = sg_cli_usage_error("embed", "--format must be json, jsonl or npy, not '%s'", format);
		goto done;
	}
	if (threads < 0 || threads > 256) {
		rc = sg_cli_usage_error("embed", "--threads must be 0..256");
		goto done;
	}
	if (prompt_name && prompt) {
		rc = sg_cli_usage_error("embed", "--prompt-name and --prompt are exclusive");
		goto done;
	}
	if (file && in.n) {
		rc = sg_cli_usage_error("embed", "-f FILE and TEXT/--tokens arguments are exclusive");
		goto done;
	}
	if (!in.n) {
		FILE *f = file ? fopen(file, "rb") : stdin;
		if (!f) {
			fprintf(stderr, "saragossa embed: -f '%s': %s\n", file, strerror(errno));
			goto done;
		}
		size_t len = 0;
		stdin_buf = slurp(f, &len);
		if (file) fclose(f);
		if (!stdin_buf) {
			fprintf(stderr, "saragossa embed: out of memory reading %s\n", file ? file : "stdin");
			goto done;
		}
		if (push_lines(&in, stdin_buf, len)) goto done;
		if (!in.n) {
			fprintf(stderr, "saragossa embed: no input (give TEXT arguments, --tokens, -f FILE or lines on stdin)\n");
			goto done;
		}
	}
	char path[4096];
	if (sg_cli_embed_model_path("embed", model, path, sizeof(path))) goto done;
	sg_embedder *e = NULL;
	if (sg_embedder_load(path, backend, threads, &e)) {
		fprintf(stderr, "saragossa embed: %s\n", sg_last_error());
		goto done;
	}
	if (prompt_name && sg_embedder_prompt(e, prompt_name, &prompt)) {
		fprintf(stderr, "saragossa embed: --prompt-name: %s\n", sg_last_error());
		sg_embedder_free(e);
		goto done;
	}
	int dim = sg_embedder_dim(e), jsonl = !strcmp(format, "jsonl"), npy = !strcmp(format, "npy");
	float *vec = sg_malloc(sizeof(float) * (size_t)dim * (size_t)in.n);
	sg_embed_input *ei = sg_calloc((size_t)in.n, sizeof(*ei));
	int ok = vec && ei;
	if (!ok) fprintf(stderr, "saragossa embed: out of memory for %d vectors\n", in.n);
	for (int i = 0; i < in.n && ok; i++)
		ei[i] = (sg_embed_input){.text = in.v[i].text, .len = in.v[i].len, .ids = in.v[i].ids, .n_ids = in.v[i].n_ids};
	/* every input is embedded before anything is printed: an error prints no partial output */
	if (ok && sg_embedder_embed_batch_prompt(e, prompt, ei, in.n, truncate, vec, NULL)) {
		fprintf(stderr, "saragossa embed: %s\n", sg_last_error());
		ok = 0;
	}
	if (ok && dims && sg_embedder_truncate(e, vec, in.n, (int)dims)) {
		fprintf(stderr, "saragossa embed: --dimensions: %s\n", sg_last_error());
		ok = 0;
	}
	if (ok && dims) dim = (int)dims;
	FILE *out = stdout;
	if (ok && outp && !(out = fopen(outp, "wb"))) {
		fprintf(stderr, "saragossa embed: -o '%s': %s\n", outp, strerror(errno));
		ok = 0;
	}
	if (ok && npy) {
		rc = write_npy(out, vec, in.n, dim);
	} else if (ok) {
		if (!jsonl) fputc('[', out);
		for (int i = 0; i < in.n; i++) {
			if (!jsonl && i) fputc(',', out);
			fputc('[', out);
			for (int j = 0; j < dim; j++) fprintf(out, j ? ",%.9g" : "%.9g", (double)vec[(size_t)i * dim + j]);
			fputc(']', out);
			if (jsonl) fputc('\n', out);
		}
		if (!jsonl) fputs("]\n", out);
		rc = 0;
	}
	if (ok) {
		if (fflush(out) || (out != stdout && fclose(out))) rc = 1;
		if (rc) fprintf(stderr, "saragossa embed: writing the output failed\n");
	}
	sg_free(vec);
	sg_free(ei);
	sg_embedder_free(e);
done:
	for (int i = 0; i < in.n; i++) sg_free(in.v[i].ids);
	sg_free(in.v);
	sg_free(stdin_buf);
	return rc;
}
