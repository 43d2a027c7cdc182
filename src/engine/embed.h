/*
 * Text embeddings: an encoder with its tokenizer and sentence-transformers' pooling, as one
 * loaded object every caller (CLI, server and library) embeds through; cross-encoders (an
 * encoder with a classification head) load the same way and score (query, document) pairs. Immutable
 * once loaded; each call allocates what it needs.
 */
#ifndef SG_ENGINE_EMBED_H
#define SG_ENGINE_EMBED_H

#include <stddef.h>
#include <stdint.h>

#include "saragossa.h"

typedef struct sg_embedder sg_embedder;

/* Loads the encoder of folder `path` (models/bert.h), its pooling (formats/stconfig.h) and its
 * tokenizer.json when present (a folder without one embeds token ids only). backend: "cpu",
 * "cuda", "auto" or NULL (the SARAGOSSA_BACKEND flag); n_threads 0 = the default. The caller
 * owns *out (sg_embedder_free). */
sg_status sg_embedder_load(const char *path, const char *backend, int n_threads, sg_embedder **out);
void sg_embedder_free(sg_embedder *e);

/* Floats per embedding. */
int sg_embedder_dim(const sg_embedder *e);
/* The most tokens one input may have: max_position_embeddings, or sentence-transformers'
 * max_seq_length when the folder says a smaller one. */
int sg_embedder_max_tokens(const sg_embedder *e);
/* 1 if the folder has a tokenizer (sg_embedder_embed_text works). */
int sg_embedder_has_tokenizer(const sg_embedder *e);

/* The embedding of one input given as n token ids (special tokens included, as the tokenizer
 * would add them) into out[dim]. More than max_tokens ids is SG_ERR_RANGE naming the limit. */
sg_status sg_embedder_embed_ids(sg_embedder *e, const int32_t *ids, int n, float *out);

/* The embedding of text[0..len) (UTF-8), tokenized with the special tokens the tokenizer adds.
 * An input longer than max_tokens is SG_ERR_RANGE naming both counts unless `truncate`, which
 * keeps the first max_tokens - 1 tokens and the closing special token (sentence-transformers'
 * truncation). *n_tokens (may be NULL) gets the tokens embedded. */
sg_status sg_embedder_embed_text(sg_embedder *e, const char *text, size_t len, int truncate, float *out, int *n_tokens);

/* The vocabulary size, and the type of the encoder's weights ("F32", "BF16"...: its first
 * query projection's). */
int sg_embedder_n_vocab(const sg_embedder *e);
const char *sg_embedder_weight_type(const sg_embedder *e);

/* config.json's model_type ("bert", "xlm-roberta", "mpnet", or a decoder embedder's "qwen3"...). */
const char *sg_embedder_model_type(const sg_embedder *e);

/* 1 if the model L2-normalises its embeddings (a Normalize module). */
int sg_embedder_normalizes(const sg_embedder *e);

/* Matryoshka truncation of n embeddings in place: rows [n][dim] become rows [n][keep] (packed at
 * the start of vecs), each re-normalised to unit length when the model normalises (a truncated
 * unit vector is no longer one; Ollama and the OpenAI API return unit vectors at any dimensions).
 * keep outside [1, dim] is SG_ERR_RANGE naming both. */
sg_status sg_embedder_truncate(const sg_embedder *e, float *vecs, int n, int keep);

/* One input of a batch: text[0..len) when text is set, else n_ids token ids (special tokens
 * included). Borrowed for the call. */
typedef struct sg_embed_input {
	const char *text;
	size_t len;
	const int32_t *ids;
	int n_ids;
} sg_embed_input;

/*
 * The embeddings of n inputs into out [n][dim] (row i for input i), run as packed batches: the
 * inputs are tokenized and checked first (an error names the input, "input 3: ...", and nothing
 * is embedded), then taken longest first in chunks of at most SARAGOSSA_EMBED_BATCH_TOKENS
 * tokens, each chunk one sg_bert_forward_batch; so the working memory is bounded by the chunk
 * whatever n is. SARAGOSSA_EMBED_BATCH=0 runs one input per forward instead, as a decoder
 * embedder (a language model with an embedding head) always does. truncate as in
 * sg_embedder_embed_text; n_tokens (may be NULL) gets each input's token count.
 */
sg_status sg_embedder_embed_batch(sg_embedder *e, const sg_embed_input *in, int n, int truncate, float *out, int *n_tokens);

/* As sg_embedder_embed_batch, with `prompt` put before each text input (sentence-transformers'
 * prompts: the prompt and the text are tokenized as one string; token-id inputs are taken as they
 * are). prompt NULL: the model's default prompt (config_sentence_transformers.json's
 * default_prompt_name), if it has one; "": none. sg_embedder_embed_batch is this with NULL. When
 * the Pooling module says include_prompt false, the prompt's tokens are left out of mean and max
 * pooling. */
sg_status sg_embedder_embed_batch_prompt(sg_embedder *e, const char *prompt, const sg_embed_input *in, int n, int truncate,
					 float *out, int *n_tokens);

/* The model's named prompts (config_sentence_transformers.json): how many, and the i-th name. */
int sg_embedder_n_prompts(const sg_embedder *e);
const char *sg_embedder_prompt_name(const sg_embedder *e, int i);
/* The text of prompt `name` into *text (borrowed from e); name NULL: the default prompt's, or
 * NULL when there is none. An unknown name is SG_ERR_INVALID_ARG listing the model's prompts. */
sg_status sg_embedder_prompt(const sg_embedder *e, const char *name, const char **text);

/* 1 if the model is a cross-encoder (a sequence classifier with one label, or more): it scores
 * (query, document) pairs with sg_embedder_rerank and makes no embeddings. */
int sg_embedder_is_reranker(const sg_embedder *e);

/*
 * Relevance scores of n documents for one query into scores[n]: each pair is encoded as the
 * tokenizer's pair template does ([CLS] query [SEP] document [SEP], token types 0 then 1), run in
 * packed batches as sg_embedder_embed_batch, and scored as sentence-transformers' CrossEncoder
 * does: the first label's logit through the activation config.json names
 * (sentence_transformers.activation_fn), else sigmoid for a one-label head. A pair longer than
 * max_tokens is SG_ERR_RANGE naming the document unless `truncate`, which cuts tokens from the
 * longer of query and document one at a time (the tokenizer's longest_first). n_tokens (may be
 * NULL) gets each pair's token count. SG_ERR_UNSUPPORTED when the model is not a reranker.
 */
sg_status sg_embedder_rerank(sg_embedder *e, const char *query, size_t qlen, const sg_embed_input *docs, int n, int truncate,
			     float *scores, int *n_tokens);

#endif
