/*
 * Text embeddings: an encoder with its tokenizer and sentence-transformers' pooling, as one
 * loaded object every caller (CLI, later the server and the library) embeds through. Immutable
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

#endif
