/* A model as the server serves it: the engine (engine/lm.h: weights, tokenizer, chat template, one
 * conversation state, which the single inference worker owns, and the prefix cache it shares
 * with the pool's other models) plus the facts the API routes report and the agent machinery
 * needs (tool-call syntax, reasoning markers, the vocabulary trie).
 *
 * Thread rules: info, tokenize, detokenize, token_bytes and chat_prompt only read immutable data
 * and may run on any connection thread; generations through the engine belong to the worker. */
#ifndef SG_SERVER_MODEL_H
#define SG_SERVER_MODEL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/lm.h"
#include "saragossa.h"

typedef struct sg_srv_model sg_srv_model;

typedef struct sg_srv_model_info {
	char name[128];   /* the name requests use */
	char path[4096];  /* the resolved file or folder */
	char arch[64];    /* architecture ("gemma3", "qwen3", ...) */
	char format[16];  /* "gguf", "safetensors" or "ct2" */
	char quant[32];   /* weight type ("Q4_K_M", "bf16", ...) */
	int32_t n_ctx;    /* context the state holds */
	int32_t n_vocab;
	uint64_t size_bytes; /* weights on disk */
	int64_t created;     /* load time (seconds since the epoch) */
	uint64_t n_params;   /* parameters in the weights (a text model's; 0 when not counted) */
} sg_srv_model_info;

/* Speculative decoding of a served model (serve --spec, --draft-model, --draft-max, --draft-min). */
typedef struct sg_srv_spec {
	int mode;               /* SG_SRV_SPEC_*: what requests get unless they say otherwise */
	const char *draft_path; /* a draft model (resolved), or NULL */
	int32_t draft_max, draft_min;
} sg_srv_spec;
enum { SG_SRV_SPEC_NONE = 0, SG_SRV_SPEC_NGRAM = 1, SG_SRV_SPEC_DRAFT = 2, SG_SRV_SPEC_MTP = 3 };

/* Loads the model at path (already resolved) under name; n_ctx 0 = the model's own maximum,
 * bounded by what memory allows. spec (may be NULL: none): its draft model is loaded beside it
 * (same context and backend) and must share its vocabulary. */
sg_status sg_srv_model_load(const char *name, const char *path, int32_t n_ctx, const sg_srv_spec *spec, sg_srv_model **out);

/* The drafter for a request: `mode` (SG_SRV_SPEC_*, -1: the model's default), NULL for none (or
 * when its flag is off, or the backend cannot verify exactly). *draft_max and *draft_min (0: the
 * model's) are filled in. */
struct sg_gen_drafter;
const struct sg_gen_drafter *sg_srv_model_drafter(const sg_srv_model *m, int mode, int32_t *draft_max, int32_t *draft_min);
/* Loads the Whisper model at path under name (the audio routes'); vocab: the vocabulary file
 * when the model's files carry none (an MLX folder), or NULL. Such a model has no engine
 * (sg_srv_model_lm is NULL) and no tokenizer or template for the text routes: a text route that
 * names it is refused before any of those is asked. */
sg_status sg_srv_model_load_stt(const char *name, const char *path, const char *vocab, sg_srv_model **out);
/* The speech-to-text model, NULL for an LLM or an embedder (worker only: sg_transcribe_*). */
struct sg_stt *sg_srv_model_stt(const sg_srv_model *m);
/* Loads the embedding model or cross-encoder at path (engine/embed.h) under name: it serves the
 * embedding and rerank routes only; the text and audio routes refuse it (sg_srv_model_lm is NULL). */
sg_status sg_srv_model_load_embed(const char *name, const char *path, sg_srv_model **out);
/* Loads the text-to-speech model at path (a Piper voice, ...: sg_tts_load) under name: it serves
 * /v1/audio/speech and speaks chat answers; the text routes refuse it (sg_srv_model_lm is NULL). */
sg_status sg_srv_model_load_tts(const char *name, const char *path, sg_srv_model **out);
/* The text-to-speech model, NULL for any other kind (speaking: worker only; its voices and rate
 * are immutable and may be read anywhere). */
struct sg_tts *sg_srv_model_tts(const sg_srv_model *m);
void sg_srv_model_free(sg_srv_model *m);
/* The embedder of a model loaded by sg_srv_model_load_embed, else NULL (a text model). */
struct sg_embedder *sg_srv_model_embedder(const sg_srv_model *m);

const sg_srv_model_info *sg_srv_model_info_get(const sg_srv_model *m);
/* The chat template's source text as the model's files give it, or NULL (no template, or not a
 * text model). Lives as long as m. */
const char *sg_srv_model_template(const sg_srv_model *m);

/* Renders messages (and tools, may be NULL) with the model's chat template, generation prompt
 * appended; kwargs (an object, may be NULL) are extra template variables (enable_thinking...).
 * *out: heap string (sg_free). SG_ERR_NOT_FOUND when the model has no template. */
sg_status sg_srv_model_chat_prompt(const sg_srv_model *m, const json_t *messages, const json_t *tools,
				   const json_t *kwargs, char **out, size_t *len);

/* What the agent machinery needs to know of a model, found at load: its tool-call syntax (from
 * how its template renders a call) and its reasoning markers (from its vocabulary). */
typedef struct sg_srv_model_agent {
	int syntax;          /* an sg_toolcall_syntax */
	char think_start[16]; /* "<think>", or "" when the model does not reason */
	char think_end[16];  /* "</think>" */
	int32_t think_start_id; /* the start marker as one token, or -1 */
	int32_t think_end_id; /* the end marker as one token, or -1 */
} sg_srv_model_agent;
const sg_srv_model_agent *sg_srv_model_agent_get(const sg_srv_model *m);

/* struct sg_token_trie of the vocabulary, built on first use (inference worker only; ~n_vocab
 * decodes). tok/len give each token's output bytes (the bytes the grammar is advanced with). */
struct sg_token_trie;
sg_status sg_srv_model_trie(sg_srv_model *m, const struct sg_token_trie **trie, const uint8_t *const **tok,
			    const uint32_t **len);

/* Text -> ids (*ids heap, sg_free). add_special: BOS etc. as the tokenizer's config says; a
 * templated chat prompt already spells them, so it is encoded without. */
sg_status sg_srv_model_tokenize(const sg_srv_model *m, const char *text, size_t len, int add_special, int32_t **ids,
				size_t *n);
/* Ids -> text (*out heap, sg_free); SG_ERR_RANGE names an id outside the vocabulary. */
sg_status sg_srv_model_detokenize(const sg_srv_model *m, const int32_t *ids, size_t n, char **out, size_t *len);
/* One token's own bytes (may be a partial UTF-8 sequence), for logprobs. *out heap. */
sg_status sg_srv_model_token_bytes(const sg_srv_model *m, int32_t id, char **out, size_t *len);

/* End-of-sequence / end-of-turn ids. */
const int32_t *sg_srv_model_eos(const sg_srv_model *m, size_t *n);

/* The engine the model generates through (worker only: sg_lm_generate); NULL for an embedding
 * model. */
sg_lm *sg_srv_model_lm(const sg_srv_model *m);
/* The draft model loaded beside it (sg_srv_spec.draft_path), or NULL; whether d is its drafter. */
sg_lm *sg_srv_model_draft_lm(const sg_srv_model *m);
int sg_srv_model_is_draft(const sg_srv_model *m, const struct sg_gen_drafter *d);

/* The accelerator backend RETI_SERVE_BACKEND sends served models to ("cuda": they live in device
 * memory), or NULL for the CPU. */
const char *sg_srv_backend_accel(void);

#endif
