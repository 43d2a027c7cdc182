/*
 * The flags table. Every environment variable that changes what saragossa does lives here, with
 * its default and a one-line description: kill-switches for optimised paths (so any of them can
 * be turned off to bisect a wrong answer) and tunables. Modules read them through sg_flag_*().
 */
#include "base/flags.h"
#include "base/error.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const sg_flag table[] = {
	{"SARAGOSSA_LOG", SG_FLAG_STR, "info", "log level: debug, info, warn, error or off"},
	{"SARAGOSSA_THREADS", SG_FLAG_INT, "0", "CPU worker threads (0 = one per core)"},
	{"SARAGOSSA_SIMD", SG_FLAG_STR, "auto",
	 "CPU kernel set: auto (best the CPU has), avx512, avx2, neon or scalar (reference kernels only)"},
	{"SARAGOSSA_CPU_INT8_DOT", SG_FLAG_BOOL, "1",
	 "CPU: quantized weights take 8-bit activations and integer dot products (0: f32 reference kernels)"},
	{"SARAGOSSA_CPU_GEMM", SG_FLAG_BOOL, "1",
	 "CPU: many-token matmuls (prefill) run the blocked GEMM kernels (0: the one-token kernel per token)"},
	{"SARAGOSSA_CPU_ATTN_SPLIT_KV", SG_FLAG_BOOL, "1",
	 "CPU: attention with few heads also splits the kv length across threads (0: heads only)"},
	{"SARAGOSSA_CACHE_DIR", SG_FLAG_STR, "",
	 "saragossa's own cache (models, tools); empty = $XDG_CACHE_HOME/saragossa or ~/.cache/saragossa"},
	{"SARAGOSSA_CHUNK", SG_FLAG_INT, "256", "prompt tokens per forward chunk (1 = token by token, the decode path)"},
	{"SARAGOSSA_KV_TYPE", SG_FLAG_STR, "f32", "KV cache element type on the CPU: f32 or f16"},
	{"SARAGOSSA_HUB_RETRIES", SG_FLAG_INT, "3",
	 "times a cut Hugging Face download is resumed (with Range) before pull gives up"},
	{"SARAGOSSA_API_KEY", SG_FLAG_STR, "", "bearer token `serve` requires on TCP (same as --api-key)"},
	{"SARAGOSSA_TOKENIZER_CACHE", SG_FLAG_BOOL, "on", "per-thread cache of recently tokenized BPE words"},
};

#define N_FLAGS ((int)(sizeof(table) / sizeof(table[0])))

typedef struct {
	const char *text; /* effective value as text (env or default) */
	int from_env;
	int invalid;
	int64_t ival; /* parsed bool/int */
} flag_value;

static flag_value values[N_FLAGS];
static pthread_once_t once = PTHREAD_ONCE_INIT;

int sg_parse_bool(const char *s, int *out)
{
	static const char *yes[] = {"1", "on", "true", "yes"}, *no[] = {"0", "off", "false", "no"};
	for (int i = 0; i < 4; i++) {
		if (strcasecmp(s, yes[i]) == 0) return *out = 1, 0;
		if (strcasecmp(s, no[i]) == 0) return *out = 0, 0;
	}
	return -1;
}

int sg_parse_int(const char *s, int64_t *out)
{
	if (!s || !*s) return -1;
	errno = 0;
	char *end;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s) return -1;
	int64_t mul = 1;
	if (*end) {
		switch (*end) {
		case 'k': case 'K': mul = 1024; break;
		case 'm': case 'M': mul = 1024 * 1024; break;
		case 'g': case 'G': mul = 1024LL * 1024 * 1024; break;
		default: return -1;
		}
		if (end[1]) return -1;
	}
	if (v > INT64_MAX / mul || v < INT64_MIN / mul) return -1;
	*out = (int64_t)v * mul;
	return 0;
}

static int parse_value(const sg_flag *f, const char *text, int64_t *iv)
{
	int b;
	switch (f->kind) {
	case SG_FLAG_BOOL:
		if (sg_parse_bool(text, &b)) return -1;
		*iv = b;
		return 0;
	case SG_FLAG_INT: return sg_parse_int(text, iv);
	case SG_FLAG_STR: *iv = 0; return 0;
	}
	return -1;
}

static void load(void)
{
	for (int i = 0; i < N_FLAGS; i++) {
		const sg_flag *f = &table[i];
		flag_value *v = &values[i];
		const char *env = getenv(f->name);
		v->from_env = env != NULL;
		v->invalid = 0;
		v->text = env ? env : f->def;
		if (parse_value(f, v->text, &v->ival)) {
			fprintf(stderr, "saragossa warn: %s='%s' is not a valid %s; using the default '%s'\n",
				f->name, env, f->kind == SG_FLAG_BOOL ? "boolean" : "integer", f->def);
			v->invalid = 1;
			v->text = f->def;
			SG_ASSERT(parse_value(f, f->def, &v->ival) == 0);
		}
	}
}

static int find(const char *name)
{
	pthread_once(&once, load);
	for (int i = 0; i < N_FLAGS; i++)
		if (strcmp(table[i].name, name) == 0) return i;
	fprintf(stderr, "saragossa: flag %s is not in the registry (src/base/flags.c)\n", name);
	SG_ASSERT(!"flag registered");
}

int sg_flag_bool(const char *name)
{
	int i = find(name);
	SG_ASSERT(table[i].kind == SG_FLAG_BOOL);
	return (int)values[i].ival;
}

int64_t sg_flag_int(const char *name)
{
	int i = find(name);
	SG_ASSERT(table[i].kind == SG_FLAG_INT);
	return values[i].ival;
}

const char *sg_flag_str(const char *name) { return values[find(name)].text; }

int sg_flag_is_invalid(const char *name) { return values[find(name)].invalid; }

int sg_flags_count(void) { return N_FLAGS; }

const sg_flag *sg_flag_at(int i, const char **value, int *from_env)
{
	pthread_once(&once, load);
	if (i < 0 || i >= N_FLAGS) return NULL;
	if (value) *value = values[i].text;
	if (from_env) *from_env = values[i].from_env;
	return &table[i];
}

void sg_flags_reload(void)
{
	pthread_once(&once, load);
	load();
}
