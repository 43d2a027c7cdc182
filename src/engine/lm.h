/* A language model bound for generation: weights, one conversation state (session), tokenizer,
 * chat template and end-of-turn ids, tied to the generation loop (engine/generate.h). The server
 * (one per served model) and the CLI's run/generate verbs both load their models through here.
 *
 * Thread rules: the tokenizer calls, chat_prompt and the accessors of immutable data may run on
 * any thread; state and detok belong to the one thread that generates.
 *
 * Usage:
 *
 *     sg_lm *lm;
 *     sg_lm_params lp = sg_lm_default_params();
 *     if (sg_lm_load(path, &lp, &lm)) ... sg_last_error() ...
 *     int32_t *ids; size_t n;
 *     sg_lm_tokenize(lm, "Hello", 5, 1, &ids, &n);
 *     sg_gen_params p = sg_gen_default_params();
 *     p.prompt = ids; p.n_prompt = n; p.eos_ids = sg_lm_eos(lm, &p.n_eos);
 *     sg_gen_result r;
 *     sg_generate(sg_lm_state(lm), sg_lm_detok(lm), &p, &r);
 *     sg_free(ids);
 *     sg_lm_free(lm);
 */
#ifndef SG_ENGINE_LM_H
#define SG_ENGINE_LM_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/generate.h"
#include "text/template/chat_template.h"
#include "saragossa.h"

typedef struct sg_lm sg_lm;
typedef struct sg_session sg_session;
typedef struct sg_tokenizer sg_tokenizer;

typedef struct sg_lm_params {
	int32_t n_ctx;       /* context the state holds; 0 = the session default (the model's, capped) */
	int n_threads;       /* CPU threads; 0 = SARAGOSSA_THREADS, else one per core */
	const char *backend; /* "cpu", "cuda"; NULL = the model loader's default */
	int no_memory_check; /* 1: skip sg_lm_check_memory (the caller guards memory itself) */
} sg_lm_params;

/* Pieces of the binding the server's own model state uses too. */
/* The ids that end an answer: the tokenizer's EOS, the end-of-turn tokens chat templates close an
 * assistant turn with, and generation_config.json's eos_token_id beside `path`. At most cap ids,
 * each in [0, n_vocab), no repeats; returns how many. */
size_t sg_lm_find_eos(const sg_tokenizer *tok, int32_t n_vocab, const char *path, int32_t *eos, size_t cap);
/* A chat template for a model without one: Gemma files get Gemma's turn format, others none
 * (*out NULL, SG_OK). */
sg_status sg_lm_fallback_template(const sg_model *model, const sg_tokenizer *tok, sg_chat_template **out);

sg_lm_params sg_lm_default_params(void);

/* Bytes of weights on disk: the .gguf file, or every *.safetensors file of a folder. 0 when
 * nothing is found. */
uint64_t sg_lm_weight_file_bytes(const char *path);

/* Before loading: refuses (SG_ERR_NOMEM) a model whose weights are larger than the memory it may
 * take: SARAGOSSA_MEM_LIMIT when > 0, else the memory available now (sg_mem_available); the
 * message states both numbers. SARAGOSSA_MEM_LIMIT=-1 (or unknown available memory) skips it. */
sg_status sg_lm_check_memory(const char *path);

/* Loads the model at path (a folder or a .gguf, already resolved): checks memory, then loads the
 * weights, a session, the tokenizer, the chat template (a Gemma model without one gets Gemma's
 * turn format; others may have none) and the EOS/EOT ids. Caller owns *out (sg_lm_free). */
sg_status sg_lm_load(const char *path, const sg_lm_params *p, sg_lm **out);
void sg_lm_free(sg_lm *lm);

sg_model *sg_lm_model(const sg_lm *lm);
/* The session the binding evaluates in (the server drives it with its own prefix-cache hooks). */
sg_session *sg_lm_session(const sg_lm *lm);
const sg_tokenizer *sg_lm_tokenizer(const sg_lm *lm);
int32_t sg_lm_n_ctx(const sg_lm *lm);
int32_t sg_lm_n_vocab(const sg_lm *lm);
/* 1 when the model has a chat template (its own or the Gemma fallback). */
int sg_lm_has_template(const sg_lm *lm);

/* Renders messages (and tools, may be NULL) with the chat template, generation prompt appended.
 * *out: heap string (sg_free). SG_ERR_NOT_FOUND when the model has no template. */
sg_status sg_lm_chat_prompt(const sg_lm *lm, const json_t *messages, const json_t *tools, char **out, size_t *len);
/* The same with every template parameter (kwargs such as enable_thinking, no generation prompt...). */
struct sg_chat_params;
sg_status sg_lm_chat_render(const sg_lm *lm, const struct sg_chat_params *p, char **out, size_t *len);

/* Text -> ids (*ids heap, sg_free). add_special: BOS etc. as the tokenizer's config says; a
 * templated chat prompt already spells them, so it is encoded without. */
sg_status sg_lm_tokenize(const sg_lm *lm, const char *text, size_t len, int add_special, int32_t **ids, size_t *n);
/* Ids -> text (*out heap, sg_free); SG_ERR_RANGE names an id outside the vocabulary. */
sg_status sg_lm_detokenize(const sg_lm *lm, const int32_t *ids, size_t n, char **out, size_t *len);
/* One token's own bytes (may be a partial UTF-8 sequence), for logprobs. *out heap. */
sg_status sg_lm_token_bytes(const sg_lm *lm, int32_t id, char **out, size_t *len);

/* End-of-sequence / end-of-turn ids ([*n], owned by lm). */
const int32_t *sg_lm_eos(const sg_lm *lm, size_t *n);

/* The conversation state and the streaming detokenizer, for sg_generate. */
sg_gen_state *sg_lm_state(sg_lm *lm);
const sg_gen_detok *sg_lm_detok(sg_lm *lm);

#endif
