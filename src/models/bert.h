/*
 * BERT-family encoders (BERT, MiniLM, BGE and the like: model_type "bert"): learned absolute
 * positions and token types, post-norm blocks (LayerNorm after each residual add), a plain
 * GELU MLP, bidirectional attention over a sequence's own tokens. The encoder is not a decoder:
 * it has no KV cache, no logits and no sampling, so it gets its own small forward here, written
 * against the backend op table like the decoder's, and its own loader, which reads the same
 * description (formats/hfconfig.c) and binds through the same binder (models/model.c).
 *
 * A loaded sg_bert is immutable; sg_bert_forward allocates what one call needs and frees it.
 */
#ifndef SG_MODELS_BERT_H
#define SG_MODELS_BERT_H

#include <stdint.h>

#include "formats/model_desc.h"
#include "formats/stconfig.h"
#include "saragossa.h"

typedef struct sg_bert sg_bert;

typedef struct sg_bert_params {
	const char *backend; /* "cpu", "cuda", "auto"; NULL = the SARAGOSSA_BACKEND flag, else auto */
	int n_threads;       /* CPU threads, 0 = the default */
} sg_bert_params;

sg_bert_params sg_bert_default_params(void);

/* Loads the encoder of the Hugging Face folder `path` (config.json with model_type "bert",
 * "roberta", "xlm-roberta" or "mpnet",
 * safetensors): every weight bound with its expected type and shape, the pooler's dense layer
 * when present. GGUF files and other model types are SG_ERR_UNSUPPORTED naming what runs.
 * The caller owns *out (sg_bert_free). */
sg_status sg_bert_load(const char *path, const sg_bert_params *p, sg_bert **out);
void sg_bert_free(sg_bert *b);

const sg_model_desc *sg_bert_desc(const sg_bert *b);
/* The most tokens one sequence may have: max_position_embeddings, less pad_token_id + 1 for the
 * families whose positions start after the pad id (RoBERTa, XLM-R, MPNet: 514 -> 512). */
int sg_bert_max_tokens(const sg_bert *b);
/* The type of the encoder's projection weights (the first layer's query), an sg_type. */
int sg_bert_weight_type(const sg_bert *b);
/* 1 if the checkpoint has BERT's pooler (dense + tanh on the first token). */
int sg_bert_has_pooler(const sg_bert *b);

/*
 * Runs one sequence of n tokens (1 <= n <= max_position_embeddings) and writes its last hidden
 * state, n * dim floats, to hidden (caller's memory). type_ids NULL means every token is of type
 * 0; mask NULL means every token is real. Tokens whose mask is 0 are padding: no token attends
 * to them, and their own rows are computed as transformers computes them (their queries attend
 * to the real tokens), so the whole [n][dim] block matches the reference. Positions are 0..n-1
 * whatever the mask. An id outside the vocabulary, a type outside [0, type_vocab_size), n out
 * of range or a mask with no real token is an error naming the value; nothing is computed.
 * (RoBERTa-style families: positions from the ids, see bert.c; a family without token types
 * takes type_ids of 0 only.)
 */
sg_status sg_bert_forward(sg_bert *b, const int32_t *ids, const int32_t *type_ids, const int32_t *mask, int n,
			  float *hidden);

/*
 * Runs n_seq sequences at once, packed: ids (and type_ids, NULL = all type 0) hold the sequences
 * one after another, sequence s being lens[s] tokens (1 <= lens[s] <= max_position_embeddings),
 * N = sum(lens) in all; hidden (caller's, N * dim floats) gets each sequence's last hidden state
 * in the same packed order. No padding: every projection runs once over the N rows as one GEMM,
 * attention runs per sequence over its own rows. A sequence's rows equal sg_bert_forward's on it
 * alone up to the GEMM's summation order (the batching invariance test states the tolerance).
 * Bad ids or types are refused by value, naming the sequence, before anything is computed.
 */
sg_status sg_bert_forward_batch(sg_bert *b, const int32_t *ids, const int32_t *type_ids, const int *lens, int n_seq,
				float *hidden);

/* sg_bert_forward_batch, each sequence's rows then pooled where they are (the backend's pool_rows:
 * mode an sg_bpool): pooled (n_seq * dim floats) gets one vector a sequence, the same bits as
 * sg_pool over the rows sg_bert_forward_batch gives, without reading every row back.
 * SG_ERR_UNSUPPORTED when the backend has no pool_rows or SARAGOSSA_EMBED_POOL_OP is 0. */
int sg_bert_can_pool(const sg_bert *b);
sg_status sg_bert_forward_batch_pooled(sg_bert *b, const int32_t *ids, const int32_t *type_ids, const int *lens, int n_seq, int mode,
				       float *pooled);

/* Labels of the checkpoint's sequence classifier head (BertForSequenceClassification's
 * "classifier"), 0 when it has none. */
int sg_bert_n_labels(const sg_bert *b);
/* 1 for the RoBERTa family (RoBERTa, XLM-RoBERTa): a pair is <s> A </s></s> B </s> with every token
 * type 0; 0 for BERT's [CLS] A [SEP] B [SEP] with types 0 then 1. */
int sg_bert_pair_double_sep(const sg_bert *b);
/* The classifier's logits [n_labels] of a last hidden state [n][dim]: classifier(pooler(h)).
 * SG_ERR_UNSUPPORTED when the checkpoint has no head. */
sg_status sg_bert_classify(sg_bert *b, const float *hidden, float *logits);

/* BERT's pooler output of a last hidden state [n][dim]: tanh(W h[0] + b) into out [dim].
 * SG_ERR_UNSUPPORTED when the checkpoint has no pooler. */
sg_status sg_bert_pooler(sg_bert *b, const float *hidden, float *out);

/* Pools a last hidden state [n][dim] with mask (NULL: all real) as sentence-transformers'
 * Pooling module does (see sg_st_config), then L2-normalises when p->normalize; out holds dim
 * floats. SG_ERR_INVALID_ARG when the mask has no real token. */
sg_status sg_pool(const sg_st_config *p, const float *hidden, const int32_t *mask, int n, int dim, float *out);

#endif
