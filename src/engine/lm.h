/* The engine: a language model bound for generation. Weights, one conversation state (session),
 * tokenizer, chat template and end-of-turn ids, the block prefix cache (engine/prefix_cache.h:
 * block snapshots taken as a prefill crosses each boundary, the deepest cached boundary of a
 * prompt restored before it, session keys as chain roots) and the generation loop
 * (engine/generate.h). The server (one per served model, all sharing the pool's cache), the
 * CLI's run/generate verbs and the library all generate through here.
 *
 * Thread rules: the tokenizer calls, chat_prompt and the accessors of immutable data may run on
 * any thread; state, detok and sg_lm_generate belong to the one thread that generates.
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
 *     sg_lm_generate(lm, NULL, &p, &r);   // or sg_generate(sg_lm_state(lm), sg_lm_detok(lm), &p, &r)
 *     sg_free(ids);
 *     sg_lm_free(lm);
 */
#ifndef SG_ENGINE_LM_H
#define SG_ENGINE_LM_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/generate.h"
#include "engine/prefix_cache.h"
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
	int no_prefix_cache; /* 1: no prefix cache of its own (the caller shares one through
			      * sg_lm_set_prefix_cache, or wants none); RETI_SERVE_PREFIX_CACHE=0 also says no */
	const char *expert_cache; /* MoE: "off", "auto", a size or "P%" (expert_cache.h); NULL = SARAGOSSA_EXPERT_CACHE */
} sg_lm_params;

/* Pieces of the binding, for a caller that assembles a model of its own. */
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
/* The session the binding evaluates in. */
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

/* The conversation state and the streaming detokenizer, for sg_generate. A generation run straight
 * through them reuses the live state's common prefix (sg_generate's own rule) and cuts its prefill
 * at block boundaries, but neither consults nor fills the prefix cache: sg_lm_generate does. */
sg_gen_state *sg_lm_state(sg_lm *lm);
const sg_gen_detok *sg_lm_detok(sg_lm *lm);

/* ---- the prefix cache and the memory guard ---- */

/* What the engine asks of whoever guards memory (the server's memory guard) before it grows its
 * footprint. */
typedef struct sg_lm_hooks {
	void *user;
	/* `bytes` more of host memory (on_device 0) or of the accelerator's (1) for `what` ("a
	 * prefix-cache block", "the KV cache rows of positions a..b"): SG_OK to go ahead, else a
	 * status with the last error set. A refused cache block is skipped (a block is an
	 * optimisation, never a reason to fail); refused KV rows fail the generation. NULL: yes. */
	sg_status (*reserve)(void *user, const sg_lm *lm, const char *what, uint64_t bytes, int on_device);
} sg_lm_hooks;

/* Puts pc (borrowed, may be NULL: no cache) in place of the lm's own cache, which is freed. The
 * blocks lm adds are tagged with it and dropped from pc by sg_lm_free. block_tokens (>= 1; else
 * RETI_SERVE_PREFIX_BLOCK_TOKENS) cuts every prefill at its multiples, cache on or off, so a cold
 * run, a run restored at a boundary and a run without the cache do the same arithmetic; it must
 * be pc's block size. */
void sg_lm_set_prefix_cache(sg_lm *lm, sg_prefix_cache *pc, int block_tokens);
/* The cache lm uses (its own or a shared one), NULL when off. */
sg_prefix_cache *sg_lm_prefix_cache(const sg_lm *lm);
/* Copies h (NULL: no hooks). */
void sg_lm_set_hooks(sg_lm *lm, const sg_lm_hooks *h);
/* Asks the memory hook for the KV rows up to n_total positions (the context bounds it) that no
 * earlier call or generation reached, and counts them as reached: for a session evaluated
 * outside sg_lm_generate (a draft model's, driven by its drafter). */
sg_status sg_lm_reserve_positions(sg_lm *lm, size_t n_total);

/* 1 when the model runs on an accelerator whose backend reports its device memory (the
 * mem_info op): *free_bytes and *total_bytes are filled; 0 for host memory (the CPU). */
int sg_lm_device_memory(const sg_lm *lm, uint64_t *free_bytes, uint64_t *total_bytes);

/* ---- generation ---- */

typedef struct sg_lm_turn {
	const char *session_key; /* partitions the prefix cache (the chain root); NULL or "": none */
	size_t session_key_len;  /* its bytes (a key may hold a NUL byte); 0: it ends at its NUL */
	/* 1: the prompt continues the caller's own conversation (an interactive chat): the live
	 * state's common prefix is kept whatever built it, which is fastest but, where the forward
	 * is not chunk-invariant (sg_session_chunk_invariant), not bit-identical to a cold run.
	 * 0: only state a cold run would have built is reused (blocks, or the live state where the
	 * forward is chunk-invariant), and with the cache off the state starts over: an answer
	 * never depends on the requests before it (the server). */
	int continues;
	/* Called once the state is placed, before the prefill: prompt tokens reused (not
	 * prefilled), and the token where the prompt left the best cached chain (-1: none). May
	 * be NULL. */
	void (*on_reuse)(void *user, size_t reused, long diverged);
	void *user;
} sg_lm_turn;

/* One generation of p (p->prompt is the whole conversation so far) through the engine: the
 * memory hook is asked for the KV rows the generation may reach for the first time; the state
 * is put at the longest reusable prefix of the prompt (the live state's, else the deepest block
 * boundary whose whole chain is cached for the session, restored); the rest is prefilled in
 * pieces that end on block boundaries, each new boundary at or before the prompt's end taken
 * into the cache as it is reached; then sg_generate decodes. turn NULL: no session key, not a
 * continuation. Errors and *res as sg_generate's; a refused KV reservation is SG_ERR_NOMEM. */
sg_status sg_lm_generate(sg_lm *lm, const sg_lm_turn *turn, const sg_gen_params *p, sg_gen_result *res);

#endif
