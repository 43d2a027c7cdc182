/*
 * BERT-family encoder: loading and the forward (see bert.h). Per layer, with x [n][D]:
 *
 *   q, k, v = x Wq^T + bq, x Wk^T + bk, x Wv^T + bv
 *   a = attention(q, k, v) over the sequence's real tokens, no causal mask
 *   x = LayerNorm(x + a Wo^T + bo)                  (post-norm)
 *   x = LayerNorm(x + gelu(x Wup^T + bup) Wdown^T + bdown)
 *
 * after x = LayerNorm(word[id] + position[t] + token_type[type]). Everything runs as backend
 * ops; the only host transfers are the inputs and the last hidden state.
 *
 * Families (one forward, tables and the embedding stage differ):
 *   bert                  positions 0..n-1, token types.
 *   roberta, xlm-roberta  BERT's names and blocks; positions count the non-pad tokens from
 *                         pad_token_id + 1, a pad token sits at pad_token_id (transformers'
 *                         create_position_ids_from_input_ids); token type vocabulary of 1.
 *   mpnet                 RoBERTa's positions, no token types, its own names, and a relative
 *                         position bias added to every layer's attention logits: one table
 *                         [32 buckets][H] shared by the layers, bucketed as MPNetEncoder's
 *                         relative_position_bucket (16 per direction, exact below 8, log-spaced
 *                         to 128), computed once per call as an [n][H][n] attention bias.
 *
 * Padding. The attention op reads K/V rows from a cache at the rows kv_store wrote, and with
 * causal = 0 a query sees every row up to the largest query position of the call. So the real
 * tokens' K/V go to rows 0..m-1 (in order), the padding's to rows m..n-1, and every query is
 * given position m-1: each one attends to the m real tokens and never to padding, which is
 * transformers' additive mask, with the padded rows computed as it computes them.
 */
#include "models/bert.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/flags.h"
#include "base/log.h"
#include "models/model.h"

/* One encoder layer's weights as backend tensors. D = dim, F = ffn width. */
typedef struct bert_layer {
	sg_btensor wq, wk, wv, wo;     /* [D][D] each */
	sg_btensor bq, bk, bv, bo;     /* [D] F32 */
	sg_btensor ln1_w, ln1_b;       /* [D] F32: the norm after the attention's residual add */
	sg_btensor up, bup;            /* [F][D], [F] F32 */
	sg_btensor down, bdown;        /* [D][F], [D] F32 */
	sg_btensor ln2_w, ln2_b;       /* [D] F32: the norm after the MLP's residual add */
} bert_layer;

typedef struct bert_acts {
	sg_btensor x, t;          /* [n][D]: the stream, a branch's output */
	sg_btensor q, k, v, a;    /* [n][D]; a: attention output */
	sg_btensor kc, vc;        /* [n][H][hd]: this sequence's K/V, real tokens first */
	sg_btensor h, ones;       /* [n][F]: the MLP's hidden, ones (glu's up operand: plain gelu) */
	sg_btensor ids, pos, types, slots, qpos; /* I32 [n] */
	sg_btensor bias;          /* MPNet: F32 [n][H][n] relative position bias by kv row */
	sg_btensor offs;          /* a packed batch: I32 [n_seq + 1], each sequence's first row */
	sg_btensor pool;          /* a packed batch pooled on the backend: F32 [n_seq][D] */
} bert_acts;

struct sg_bert {
	sg_model m;                /* the binding context: desc, weights, backend, family (names) */
	sg_btensor word;           /* [V][D] any type */
	sg_btensor pos;            /* [P][D] P = max_position_embeddings */
	sg_btensor type;           /* [T][D] T = type_vocab_size */
	sg_btensor emb_ln_w, emb_ln_b; /* [D] F32 */
	sg_btensor pool_w, pool_b; /* [D][D], [D] F32; data NULL when the checkpoint has no pooler */
	sg_btensor rel;            /* MPNet: [32][H] F32 relative attention bias; else data NULL */
	float *rel_host;           /* the same table on the host (the bias is built there) */
	sg_btensor cls_w, cls_b;   /* [C][D], [C] F32: a sequence classifier's head (C labels); data NULL
				    * when the checkpoint has none */
	bert_layer *layers;        /* [n_layer] */
	/* BertForSequenceClassification nests the encoder under "bert.": the name map with that
	 * prefix (strings owned), and the family that uses it; NULL/unused for a plain BertModel */
	sg_name_pair *nested;
	sg_family nested_fam;
	/* a packed batch's activations kept between calls (SARAGOSSA_EMBED_KEEP_ACTS): x..a and h of
	 * ws_n tokens (ones too when ws_ones), the I32 inputs of ws_n, offs of ws_seq + 1; each call
	 * views its first rows (no allocation and free of a dozen device buffers per call) */
	bert_acts ws;
	int64_t ws_n, ws_seq;
	int ws_ones;
};

/* llama.cpp's GGUF names for BERT (the binder's own spelling) and transformers' BertModel names. */
static const sg_name_pair bert_names[] = {
	{"token_embd", "embeddings.word_embeddings"},
	{"position_embd", "embeddings.position_embeddings"},
	{"token_types", "embeddings.token_type_embeddings"},
	{"token_embd_norm", "embeddings.LayerNorm"},
	{"blk.{L}.attn_q", "encoder.layer.{L}.attention.self.query"},
	{"blk.{L}.attn_k", "encoder.layer.{L}.attention.self.key"},
	{"blk.{L}.attn_v", "encoder.layer.{L}.attention.self.value"},
	{"blk.{L}.attn_output", "encoder.layer.{L}.attention.output.dense"},
	{"blk.{L}.attn_output_norm", "encoder.layer.{L}.attention.output.LayerNorm"},
	{"blk.{L}.ffn_up", "encoder.layer.{L}.intermediate.dense"},
	{"blk.{L}.ffn_down", "encoder.layer.{L}.output.dense"},
	{"blk.{L}.layer_output_norm", "encoder.layer.{L}.output.LayerNorm"},
	{"pooler", "pooler.dense"},
	{"cls", "classifier"},
	{0, 0},
};

/* transformers' MPNetModel names (relative_attention_bias has no GGUF spelling: ours). */
static const sg_name_pair mpnet_names[] = {
	{"token_embd", "embeddings.word_embeddings"},
	{"position_embd", "embeddings.position_embeddings"},
	{"token_embd_norm", "embeddings.LayerNorm"},
	{"rel_attn_bias", "encoder.relative_attention_bias"},
	{"blk.{L}.attn_q", "encoder.layer.{L}.attention.attn.q"},
	{"blk.{L}.attn_k", "encoder.layer.{L}.attention.attn.k"},
	{"blk.{L}.attn_v", "encoder.layer.{L}.attention.attn.v"},
	{"blk.{L}.attn_output", "encoder.layer.{L}.attention.attn.o"},
	{"blk.{L}.attn_output_norm", "encoder.layer.{L}.attention.LayerNorm"},
	{"blk.{L}.ffn_up", "encoder.layer.{L}.intermediate.dense"},
	{"blk.{L}.ffn_down", "encoder.layer.{L}.output.dense"},
	{"blk.{L}.layer_output_norm", "encoder.layer.{L}.output.LayerNorm"},
	{"pooler", "pooler.dense"},
	{0, 0},
};

static const sg_arch bert_archs[] = {SG_ARCH_BERT, 0};
static const sg_family bert_family = {"bert", bert_archs, bert_names, NULL, NULL, NULL};
static const sg_family mpnet_family = {"mpnet", bert_archs, mpnet_names, NULL, NULL, NULL};

#define REL_BUCKETS 32 /* transformers' MPNetEncoder.compute_position_bias default */

/* MPNet's bucket of relative position rel = key position - query position: 16 buckets per
 * direction (n = -rel > 0 first), exact below 8, then log-spaced up to 128, computed in float32
 * as torch does (the truncation of the log term at its boundaries follows from that). */
static int rel_bucket(int rel)
{
	int n = -rel, ret = 0, half = REL_BUCKETS / 2, exact = half / 2;
	if (n < 0) ret += half;
	n = n < 0 ? -n : n;
	if (n < exact) return ret + n;
	float l = logf((float)n / (float)exact) / (float)log(128.0 / exact) * (float)(half - exact);
	int v = exact + (int)l;
	return ret + (v < half - 1 ? v : half - 1);
}

sg_bert_params sg_bert_default_params(void)
{
	sg_bert_params p = {.backend = NULL, .n_threads = 0};
	return p;
}

const sg_model_desc *sg_bert_desc(const sg_bert *b) { return &b->m.desc; }

int sg_bert_max_tokens(const sg_bert *b)
{
	const sg_model_desc *d = &b->m.desc;
	return d->pos_pad_id >= 0 ? d->max_ctx - d->pos_pad_id - 1 : d->max_ctx;
}

int sg_bert_has_pooler(const sg_bert *b) { return b->pool_w.data != NULL; }
int sg_bert_weight_type(const sg_bert *b) { return b->m.desc.n_layer > 0 ? (int)b->layers[0].wq.type : (int)b->word.type; }

static void free_tensors(sg_backend *be, sg_btensor *t, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (t[i].data) be->ops->tensor_free(be, &t[i]);
}

void sg_bert_free(sg_bert *b)
{
	if (!b) return;
	sg_backend *be = b->m.be;
	if (be) {
		if (b->layers)
			for (int i = 0; i < b->m.desc.n_layer; i++)
				free_tensors(be, (sg_btensor *)&b->layers[i], sizeof(bert_layer) / sizeof(sg_btensor));
		sg_btensor *g[] = {&b->word, &b->pos,    &b->type,  &b->emb_ln_w, &b->emb_ln_b,
				   &b->pool_w, &b->pool_b, &b->rel, &b->cls_w, &b->cls_b};
		for (size_t i = 0; i < sizeof(g) / sizeof(g[0]); i++) free_tensors(be, g[i], 1);
		free_tensors(be, (sg_btensor *)&b->ws, sizeof(b->ws) / sizeof(sg_btensor));
		sg_backend_free(be);
	}
	sg_free(b->layers);
	sg_free(b->rel_host);
	for (sg_name_pair *np = b->nested; np && np->gguf; np++) sg_free((char *)np->hf);
	sg_free(b->nested);
	sg_model_desc_free(&b->m.desc);
	sg_weights_close(b->m.w);
	sg_free(b);
}

static sg_status bind_all(sg_bert *b)
{
	sg_model *m = &b->m;
	const sg_model_desc *d = &m->desc;
	int64_t D = d->dim, F = d->ffn_dim;
	sg_want g[] = {
		{"token_embd.weight", SG_WANT_MATMUL, 2, {D, d->n_vocab}, 0, 0, &b->word},
		{"position_embd.weight", SG_WANT_MATMUL, 2, {D, d->max_ctx}, 0, 0, &b->pos},
		{"token_embd_norm.weight", SG_WANT_FLOAT, 1, {D}, 0, 1, &b->emb_ln_w},
		{"token_embd_norm.bias", SG_WANT_FLOAT, 1, {D}, 0, 1, &b->emb_ln_b},
		{"pooler.weight", SG_WANT_MATMUL, 2, {D, D}, 1, 0, &b->pool_w},
		{"pooler.bias", SG_WANT_FLOAT, 1, {D}, 1, 1, &b->pool_b},
		{"cls.weight", SG_WANT_MATMUL, 2, {D, -1}, 1, 0, &b->cls_w}, /* optional: MPNet's family has no name for it */
		{"cls.bias", SG_WANT_FLOAT, 1, {-1}, 1, 1, &b->cls_b},
		/* keep these two last: */
		{"token_types.weight", SG_WANT_MATMUL, 2, {D, d->type_vocab_size}, 0, 0, &b->type},
		{"rel_attn_bias.weight", SG_WANT_FLOAT, 2, {d->n_head, REL_BUCKETS}, 0, 1, &b->rel},
	};
	/* the last two are conditional: token types unless the family has none, the bias table for
	 * MPNet (moved into the slot after the kept entries when token types are skipped) */
	int ng = (int)(sizeof(g) / sizeof(g[0])) - 2;
	if (d->type_vocab_size > 0) ng++;
	if (d->rel_buckets) g[ng++] = g[sizeof(g) / sizeof(g[0]) - 1];
	sg_status st = sg_model_bind_wants(m, g, ng, -1);
	if (!st && d->rel_buckets) {
		size_t nb = sizeof(float) * REL_BUCKETS * (size_t)d->n_head;
		if (!(b->rel_host = sg_malloc(nb))) st = sg_error(SG_ERR_NOMEM, "mpnet: relative attention bias");
		else st = m->be->ops->read(m->be, &b->rel, 0, b->rel_host, nb);
	}
	if (!st && (b->pool_w.data != NULL) != (b->pool_b.data != NULL))
		st = sg_error(SG_ERR_FORMAT, "pooler.dense: the weight and the bias must both be present or both absent");
	if (!st && (b->cls_w.data != NULL) != (b->cls_b.data != NULL))
		st = sg_error(SG_ERR_FORMAT, "classifier: the weight and the bias must both be present or both absent");
	if (!st && b->cls_w.data && (b->cls_b.ne[0] != b->cls_w.ne[1] || !b->pool_w.data))
		st = sg_error(SG_ERR_FORMAT, "classifier: %lld labels but a bias of %lld%s", (long long)b->cls_w.ne[1],
			      (long long)b->cls_b.ne[0], b->pool_w.data ? "" : ", and no pooler to feed it");
	/* the layers' projections are read by matmul only, and an encoder has no decode step whose
	 * bits they must keep: the backend may repack them (the CPU's panel GEMM) */
	const int MO = SG_WANT_MATMUL_ONLY;
	for (int i = 0; i < d->n_layer && !st; i++) {
		bert_layer *l = &b->layers[i];
		sg_want w[] = {
			{"blk.{L}.attn_q.weight", SG_WANT_MATMUL, 2, {D, D}, 0, MO, &l->wq},
			{"blk.{L}.attn_k.weight", SG_WANT_MATMUL, 2, {D, D}, 0, MO, &l->wk},
			{"blk.{L}.attn_v.weight", SG_WANT_MATMUL, 2, {D, D}, 0, MO, &l->wv},
			{"blk.{L}.attn_output.weight", SG_WANT_MATMUL, 2, {D, D}, 0, MO, &l->wo},
			{"blk.{L}.attn_q.bias", SG_WANT_FLOAT, 1, {D}, 0, 1, &l->bq},
			{"blk.{L}.attn_k.bias", SG_WANT_FLOAT, 1, {D}, 0, 1, &l->bk},
			{"blk.{L}.attn_v.bias", SG_WANT_FLOAT, 1, {D}, 0, 1, &l->bv},
			{"blk.{L}.attn_output.bias", SG_WANT_FLOAT, 1, {D}, 0, 1, &l->bo},
			{"blk.{L}.attn_output_norm.weight", SG_WANT_FLOAT, 1, {D}, 0, 1, &l->ln1_w},
			{"blk.{L}.attn_output_norm.bias", SG_WANT_FLOAT, 1, {D}, 0, 1, &l->ln1_b},
			{"blk.{L}.ffn_up.weight", SG_WANT_MATMUL, 2, {D, F}, 0, MO, &l->up},
			{"blk.{L}.ffn_up.bias", SG_WANT_FLOAT, 1, {F}, 0, 1, &l->bup},
			{"blk.{L}.ffn_down.weight", SG_WANT_MATMUL, 2, {F, D}, 0, MO, &l->down},
			{"blk.{L}.ffn_down.bias", SG_WANT_FLOAT, 1, {D}, 0, 1, &l->bdown},
			{"blk.{L}.layer_output_norm.weight", SG_WANT_FLOAT, 1, {D}, 0, 1, &l->ln2_w},
			{"blk.{L}.layer_output_norm.bias", SG_WANT_FLOAT, 1, {D}, 0, 1, &l->ln2_b},
		};
		st = sg_model_bind_wants(m, w, (int)(sizeof(w) / sizeof(w[0])), i);
	}
	return st;
}

/* The name map of a checkpoint that nests the encoder under a prefix (a sequence classifier):
 * "bert." keeps BERT's pooler and classifier names; "roberta." (RoBERTa and XLM-RoBERTa) has a
 * classification head of two layers on the first token, classifier.dense (tanh) and
 * classifier.out_proj, which is BERT's pooler and classifier in all but name, so they bind there. */
static sg_status nest_names(sg_bert *b, const char *prefix)
{
	int roberta = !strcmp(prefix, "roberta.");
	size_t n = 0;
	while (bert_names[n].gguf) n++;
	b->nested = sg_calloc(n + 1, sizeof(sg_name_pair));
	if (!b->nested) return sg_error(SG_ERR_NOMEM, "bert: names");
	for (size_t i = 0; i < n; i++) {
		const char *g = bert_names[i].gguf, *hf = bert_names[i].hf, *pre = prefix;
		if (!strcmp(g, "cls")) {
			pre = "";
			if (roberta) hf = "classifier.out_proj";
		} else if (!strcmp(g, "pooler") && roberta) {
			pre = "";
			hf = "classifier.dense";
		}
		size_t len = strlen(hf) + strlen(pre) + 1;
		char *name = sg_malloc(len);
		if (!name) return sg_error(SG_ERR_NOMEM, "bert: names");
		snprintf(name, len, "%s%s", pre, hf);
		b->nested[i] = (sg_name_pair){g, name};
	}
	b->nested_fam = bert_family;
	b->nested_fam.names = b->nested;
	b->m.fam = &b->nested_fam;
	return SG_OK;
}

/* The backend runs a packed batch's attention in one call (and the flag lets it). */
static int packed_attn(const sg_bert *b)
{
	return b->m.be->ops->attention_packed && sg_flag_bool("SARAGOSSA_EMBED_PACKED_ATTN");
}

/* The MLP's exact GELU as the backend's gelu op, where it has one and is not the CPU (whose SIMD GLU
 * kernel runs it against a row of ones): no [n][F] ones to fill and copy to a GPU per call. */
static int gelu_op(const sg_bert *b)
{
	const sg_backend_ops *o = b->m.be->ops;
	return b->m.desc.act == SG_ACT_GELU && o->gelu && strcmp(o->name, "cpu") && sg_flag_bool("SARAGOSSA_EMBED_GELU_OP");
}

sg_status sg_bert_load(const char *path, const sg_bert_params *p, sg_bert **out)
{
	*out = NULL;
	sg_bert_params dp = sg_bert_default_params();
	if (!p) p = &dp;
	const char *be_name = p->backend ? p->backend : sg_flag_str("SARAGOSSA_BACKEND");
	if (!be_name || !*be_name) be_name = "auto";
	sg_bert *b = sg_calloc(1, sizeof(*b));
	if (!b) return sg_error(SG_ERR_NOMEM, "bert: loading '%s'", path ? path : "");
	sg_model *m = &b->m;
	m->fam = &bert_family;
	sg_status st = sg_weights_open(path, &m->w);
	if (!st && m->w->format == SG_WEIGHTS_GGUF)
		st = sg_error(SG_ERR_UNSUPPORTED, "bert: GGUF encoders are not supported (use the Hugging Face folder)");
	if (!st && !m->w->config) st = sg_error(SG_ERR_FORMAT, "bert: safetensors but no config.json beside them");
	if (!st && sg_weights_find(m->w, "bert.embeddings.word_embeddings.weight")) st = nest_names(b, "bert.");
	else if (!st && sg_weights_find(m->w, "roberta.embeddings.word_embeddings.weight")) st = nest_names(b, "roberta.");
	if (!st) st = sg_model_desc_from_config(m->w->config, &m->desc);
	if (!st && m->desc.arch != SG_ARCH_BERT)
		st = sg_error(SG_ERR_UNSUPPORTED, "'%s' is not an encoder this build runs (bert, roberta, xlm-roberta, mpnet)",
			      m->desc.model_type);
	/* MPNet has no token types */
	int types_ok = m->desc.type_vocab_size >= 1 || m->desc.rel_buckets;
	if (!st && (!types_ok || m->desc.max_ctx < 1 || m->desc.n_head < 1 || m->desc.dim % m->desc.n_head))
		st = sg_error(SG_ERR_FORMAT, "config.json: type_vocab_size %d, max_position_embeddings %d, %d heads of hidden size %d",
			      m->desc.type_vocab_size, m->desc.max_ctx, m->desc.n_head, m->desc.dim);
	if (!st && m->desc.rel_buckets) m->fam = &mpnet_family; /* MPNet: its names */
	if (!st && !(b->layers = sg_calloc((size_t)m->desc.n_layer, sizeof(bert_layer))))
		st = sg_error(SG_ERR_NOMEM, "bert: %d layers", m->desc.n_layer);
	if (!st) st = sg_model_open_backend("bert", be_name, p->n_threads, &m->be);
	/* MPNet's attention bias: the CPU's attention op takes it, another backend's packed one (with
	 * SARAGOSSA_EMBED_PACKED_ATTN); auto falls back to the CPU where neither is there */
	if (!st && m->desc.rel_buckets && strcmp(m->be->ops->name, "cpu") && !packed_attn(b)) {
		if (strcmp(be_name, "auto"))
			st = sg_error(SG_ERR_UNSUPPORTED,
				      "mpnet: its relative position bias needs the cpu backend or a packed attention op (asked: %s%s)",
				      be_name, sg_flag_bool("SARAGOSSA_EMBED_PACKED_ATTN") ? "" : ", SARAGOSSA_EMBED_PACKED_ATTN=0");
		else {
			m->be->ops->destroy(m->be);
			m->be = NULL;
			st = sg_model_open_backend("bert", "cpu", p->n_threads, &m->be);
		}
	}
	if (!st) st = bind_all(b);
	if (st) {
		sg_error_wrap(st, "model '%s'", path);
		sg_bert_free(b);
		return st;
	}
	*out = b;
	return SG_OK;
}

/* The activations of n tokens. kv_rows: rows of the K/V caches and the slots (n for one sequence;
 * 0 for a packed batch, whose K/V are the projections' rows: no caches, no slots). */
static sg_status acts_alloc(sg_backend *be, int64_t n, int64_t D, int64_t F, int64_t H, int64_t kv_rows, int ones, bert_acts *a)
{
	int64_t nd[4] = {D, n, 1, 1}, nf[4] = {F, n, 1, 1}, kv[4] = {D / H, H, kv_rows, 1}, ni[4] = {n, 1, 1, 1};
	sg_status st = SG_OK;
	sg_btensor *f[] = {&a->x, &a->t, &a->q, &a->k, &a->v, &a->a};
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]) && !st; i++) st = be->ops->tensor_alloc(be, SG_TYPE_F32, nd, f[i]);
	if (!st && kv_rows) st = be->ops->tensor_alloc(be, SG_TYPE_F32, kv, &a->kc);
	if (!st && kv_rows) st = be->ops->tensor_alloc(be, SG_TYPE_F32, kv, &a->vc);
	if (!st) st = be->ops->tensor_alloc(be, SG_TYPE_F32, nf, &a->h);
	if (!st && ones) st = be->ops->tensor_alloc(be, SG_TYPE_F32, nf, &a->ones);
	sg_btensor *ix[] = {&a->ids, &a->pos, &a->types, &a->qpos};
	for (size_t i = 0; i < sizeof(ix) / sizeof(ix[0]) && !st; i++) st = be->ops->tensor_alloc(be, SG_TYPE_I32, ni, ix[i]);
	if (!st && kv_rows) st = be->ops->tensor_alloc(be, SG_TYPE_I32, ni, &a->slots);
	return st;
}

/* A view of the first n rows (or, for [n] index tensors, values) of a kept tensor. */
static void first_rows(sg_btensor *t, int64_t n, int index)
{
	t->owned = 0;
	if (!t->data) return;
	if (index) {
		t->ne[0] = n;
		t->row_bytes = sizeof(int32_t) * (size_t)n;
	} else {
		t->ne[1] = n;
	}
}

/* The activations of a packed batch of N tokens in n_seq sequences (ones: the GLU's operand;
 * offs: the sequences' first rows for the one-call attention): views of the kept workspace, grown
 * when it is short, or with SARAGOSSA_EMBED_KEEP_ACTS=0 tensors of their own for the caller to
 * free. kc, vc, slots and bias stay empty (a packed batch's K/V are the projections' rows). */
static sg_status batch_acts(sg_bert *b, int64_t N, int n_seq, int ones, int offs, int pool, bert_acts *a)
{
	sg_backend *be = b->m.be;
	const sg_model_desc *d = &b->m.desc;
	int keep = sg_flag_bool("SARAGOSSA_EMBED_KEEP_ACTS");
	bert_acts *w = keep ? &b->ws : a;
	int64_t cap = N, seq = n_seq;
	int w_ones = ones;
	if (keep && N <= b->ws_n && (!ones || b->ws_ones) && (!(offs || pool) || n_seq <= b->ws_seq) && (!pool || b->ws.pool.data))
		goto view;
	if (keep) { /* grow: the larger of what it held and what this call needs */
		cap = N > b->ws_n ? N : b->ws_n;
		seq = n_seq > b->ws_seq ? n_seq : b->ws_seq;
		w_ones = ones || b->ws_ones;
		free_tensors(be, (sg_btensor *)w, sizeof(*w) / sizeof(sg_btensor));
		b->ws_n = b->ws_seq = 0;
		b->ws_ones = 0;
	}
	memset(w, 0, sizeof(*w));
	int64_t no[4] = {seq + 1, 1, 1, 1};
	sg_status st = acts_alloc(be, cap, d->dim, d->ffn_dim, d->n_head, 0, w_ones, w);
	if (!st && (offs || pool || keep)) st = be->ops->tensor_alloc(be, SG_TYPE_I32, no, &w->offs);
	int64_t np[4] = {d->dim, seq, 1, 1};
	if (!st && (pool || (keep && be->ops->pool_rows))) st = be->ops->tensor_alloc(be, SG_TYPE_F32, np, &w->pool);
	if (st) {
		free_tensors(be, (sg_btensor *)w, sizeof(*w) / sizeof(sg_btensor));
		memset(w, 0, sizeof(*w));
		return st;
	}
	if (!keep) return SG_OK;
	b->ws_n = cap;
	b->ws_seq = seq;
	b->ws_ones = w_ones;
view:
	*a = b->ws;
	sg_btensor *r[] = {&a->x, &a->t, &a->q, &a->k, &a->v, &a->a, &a->h, &a->ones};
	for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); i++) first_rows(r[i], N, 0);
	sg_btensor *v[] = {&a->ids, &a->pos, &a->types, &a->qpos};
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) first_rows(v[i], N, 1);
	first_rows(&a->offs, n_seq + 1, 1);
	first_rows(&a->pool, n_seq, 0);
	if (!ones) memset(&a->ones, 0, sizeof(a->ones));
	if (!offs && !pool) memset(&a->offs, 0, sizeof(a->offs));
	if (!pool) memset(&a->pool, 0, sizeof(a->pool));
	return SG_OK;
}

static sg_status check_inputs(const sg_bert *b, const int32_t *ids, const int32_t *types, const int32_t *mask, int n,
			      int *n_real)
{
	const sg_model_desc *d = &b->m.desc;
	int max = sg_bert_max_tokens(b);
	if (n < 1 || n > max) return sg_error(SG_ERR_RANGE, "bert: %d tokens (the model takes 1 to %d)", n, max);
	int m = 0;
	for (int i = 0; i < n; i++) {
		if (ids[i] < 0 || ids[i] >= d->n_vocab)
			return sg_error(SG_ERR_RANGE, "bert: token %d = %d is outside the vocabulary [0, %d)", i, ids[i], d->n_vocab);
		if (types && types[i] && (types[i] < 0 || types[i] >= d->type_vocab_size))
			return sg_error(SG_ERR_RANGE, "bert: token type %d = %d is outside [0, %d)", i, types[i],
					d->type_vocab_size > 0 ? d->type_vocab_size : 1);
		m += !mask || mask[i] != 0;
	}
	if (!m) return sg_error(SG_ERR_INVALID_ARG, "bert: the attention mask has no real token");
	*n_real = m;
	return SG_OK;
}

/* Positions of one sequence's n tokens: 0..n-1, or for the families whose positions start after
 * the pad id (pos_pad_id >= 0), counted over the non-pad tokens from pad_token_id + 1 with a pad
 * token at pad_token_id (from the ids, as transformers' create_position_ids_from_input_ids). */
static void positions(const sg_model_desc *d, const int32_t *ids, int n, int32_t *pos)
{
	for (int i = 0, c = 0; i < n; i++) {
		if (d->pos_pad_id < 0) pos[i] = i;
		else pos[i] = ids[i] == d->pos_pad_id ? d->pos_pad_id : d->pos_pad_id + ++c;
	}
}

/* MPNet's bias of one sequence of n tokens: bias[t][h][row] = table[bucket(j - t)][h], j the
 * token whose K/V sit in row (row_tok[row]; NULL: row j holds token j). The relative positions
 * are the tokens' indices (compute_position_bias without position ids). */
static void rel_bias(const sg_bert *b, const int32_t *row_tok, int n, float *bias)
{
	size_t H = (size_t)b->m.desc.n_head;
	for (int t = 0; t < n; t++)
		for (int r = 0; r < n; r++) {
			const float *e = b->rel_host + (size_t)rel_bucket((row_tok ? row_tok[r] : r) - t) * H;
			for (size_t h = 0; h < H; h++) bias[((size_t)t * H + h) * (size_t)n + (size_t)r] = e[h];
		}
}

/* Attention of a packed batch: sequence s holds rows off..off+len-1 of q, k, v, a. Its own k and
 * v rows, viewed as [len][H][hd], are its cache (no copy); every query is given position len-1,
 * so each attends to exactly its own sequence's tokens. One op call per sequence keeps each
 * sequence's arithmetic that of a call on it alone (the op's split choices look at its shapes).
 * MPNet: a->bias holds each sequence's [len][H][len] bias one after another; each call gets a
 * view of its own. */
static sg_status packed_attention(sg_backend *be, const sg_model_desc *d, bert_acts *a, const int *lens, int n_seq, int one_call)
{
	sg_attn_params ap = {.scale = 0.0f, .causal = 0};
	int64_t D = d->dim, H = d->n_head, hd = D / H, off = 0, boff = 0;
	/* one call for the whole batch where the backend has it (MPNet's bias blocks as they are) */
	if (one_call && a->offs.data) {
		sg_btensor k = a->k, v = a->v;
		int64_t N = a->q.ne[1] * a->q.ne[2] * a->q.ne[3];
		k.ne[0] = v.ne[0] = hd;
		k.ne[1] = v.ne[1] = H;
		k.ne[2] = v.ne[2] = N;
		k.ne[3] = v.ne[3] = 1;
		k.row_bytes = v.row_bytes = sizeof(float) * (size_t)hd;
		k.owned = v.owned = 0;
		ap.bias = a->bias.data ? &a->bias : NULL;
		return be->ops->attention_packed(be, &a->q, &k, &v, &a->offs, n_seq, &ap, &a->a);
	}
	sg_status st = SG_OK;
	for (int s = 0; s < n_seq && !st; s++) {
		int64_t L = lens[s];
		sg_btensor bv = a->bias;
		if (a->bias.data) {
			bv.ne[0] = L;
			bv.ne[1] = H;
			bv.ne[2] = L;
			bv.ne[3] = 1;
			bv.row_bytes = sizeof(float) * (size_t)L;
			bv.data = (char *)a->bias.data + sizeof(float) * (size_t)boff;
			bv.owned = 0;
			boff += L * H * L;
		}
		ap.bias = a->bias.data ? &bv : NULL;
		sg_btensor q = sg_btensor_rows_view(&a->q, off, L), o = sg_btensor_rows_view(&a->a, off, L);
		sg_btensor kc = a->k, vc = a->v, p = a->qpos;
		kc.ne[0] = vc.ne[0] = hd;
		kc.ne[1] = vc.ne[1] = H;
		kc.ne[2] = vc.ne[2] = L;
		kc.ne[3] = vc.ne[3] = 1;
		kc.row_bytes = vc.row_bytes = sizeof(float) * (size_t)hd;
		kc.data = (char *)a->k.data + sizeof(float) * (size_t)(off * D);
		vc.data = (char *)a->v.data + sizeof(float) * (size_t)(off * D);
		p.ne[0] = L;
		p.row_bytes = sizeof(int32_t) * (size_t)L;
		p.data = (char *)a->qpos.data + sizeof(int32_t) * (size_t)off;
		kc.owned = vc.owned = p.owned = 0;
		st = be->ops->attention(be, &q, &kc, &vc, &p, &ap, &o);
		off += L;
	}
	return st;
}

/* The layers over the activations a: one sequence with the K/V rows kv_store places (lens NULL),
 * or n_seq packed sequences of lens[s] tokens each (packed_attention). */
static sg_status run_layers(sg_bert *b, bert_acts *a, const int *lens, int n_seq)
{
	sg_backend *be = b->m.be;
	const sg_model_desc *d = &b->m.desc;
	const sg_backend_ops *o = be->ops;
	float eps = d->norm_eps;
	sg_attn_params ap = {.scale = 0.0f, .causal = 0, .bias = a->bias.data ? &a->bias : NULL};
	sg_status st = o->embed(be, &b->word, &a->ids, &a->x);
	if (!st) st = o->embed(be, &b->pos, &a->pos, &a->t);
	if (!st) st = o->add(be, &a->x, &a->t, &a->x);
	if (!st && b->type.data) st = o->embed(be, &b->type, &a->types, &a->t);
	if (!st && b->type.data) st = o->add(be, &a->x, &a->t, &a->x);
	if (!st) st = o->layernorm(be, &a->x, &b->emb_ln_w, &b->emb_ln_b, eps, &a->x);
	for (int i = 0; i < d->n_layer && !st; i++) {
		const bert_layer *l = &b->layers[i];
		/* q, k and v as one stage: a GPU splits x once for the three (the same products) */
		sg_matmul_multi qkv = {.x = &a->x, .nw = 3, .w = {&l->wq, &l->wk, &l->wv}, .bias = {&l->bq, &l->bk, &l->bv},
				       .y = {&a->q, &a->k, &a->v}};
		st = sg_backend_matmul_multi(be, &qkv);
		if (!st && lens) st = packed_attention(be, d, a, lens, n_seq, packed_attn(b));
		if (!st && !lens) st = o->kv_store(be, &a->k, &a->v, &a->slots, &a->kc, &a->vc);
		if (!st && !lens) st = o->attention(be, &a->q, &a->kc, &a->vc, &a->qpos, &ap, &a->a);
		if (!st) st = o->matmul(be, &l->wo, &a->a, &l->bo, &a->t);
		if (!st) st = o->add(be, &a->x, &a->t, &a->x);
		if (!st) st = o->layernorm(be, &a->x, &l->ln1_w, &l->ln1_b, eps, &a->x);
		if (!st) st = o->matmul(be, &l->up, &a->x, &l->bup, &a->h);
		if (!st) st = a->ones.data ? o->glu(be, &a->h, &a->ones, d->act, &a->h) : o->gelu(be, &a->h, &a->h);
		if (!st) st = o->matmul(be, &l->down, &a->h, &l->bdown, &a->t);
		if (!st) st = o->add(be, &a->x, &a->t, &a->x);
		if (!st) st = o->layernorm(be, &a->x, &l->ln2_w, &l->ln2_b, eps, &a->x);
		if (st) sg_error_wrap(st, "bert: layer %d", i);
	}
	return st;
}

sg_status sg_bert_forward(sg_bert *b, const int32_t *ids, const int32_t *type_ids, const int32_t *mask, int n,
			  float *hidden)
{
	/* without a mask one sequence is a batch of one: the packed op runs its attention (on CUDA
	 * the only attention with MPNet's bias) */
	if (!mask && packed_attn(b)) return sg_bert_forward_batch(b, ids, type_ids, &n, 1, hidden);
	const sg_model_desc *d = &b->m.desc;
	sg_backend *be = b->m.be;
	int m = 0;
	sg_status st = check_inputs(b, ids, type_ids, mask, n, &m);
	if (st) return st;
	int64_t D = d->dim, F = d->ffn_dim, H = d->n_head;
	int32_t *host = sg_malloc(sizeof(int32_t) * (size_t)n * 5);
	int go = gelu_op(b);
	float *ones = go ? NULL : sg_malloc(sizeof(float) * (size_t)n * (size_t)F);
	float *bias = b->rel_host ? sg_malloc(sizeof(float) * (size_t)n * (size_t)H * (size_t)n) : NULL;
	bert_acts a;
	memset(&a, 0, sizeof(a));
	if (!host || (!go && !ones) || (b->rel_host && !bias)) {
		st = sg_error(SG_ERR_NOMEM, "bert: inputs of %d tokens", n);
		goto done;
	}
	int32_t *pos = host, *types = host + n, *slots = host + 2 * n, *qpos = host + 3 * n, *row_tok = host + 4 * n;
	positions(d, ids, n, pos);
	for (int i = 0, r = 0, p = m; i < n; i++) {
		types[i] = type_ids ? type_ids[i] : 0;
		slots[i] = !mask || mask[i] ? r++ : p++; /* real tokens' K/V in rows 0..m-1 */
		qpos[i] = m - 1;                        /* every query sees exactly rows 0..m-1 */
		row_tok[slots[i]] = i;
	}
	if (bias) rel_bias(b, row_tok, n, bias);
	for (int64_t i = 0; ones && i < (int64_t)n * F; i++) ones[i] = 1.0f;
	size_t ni = sizeof(int32_t) * (size_t)n;
	st = acts_alloc(be, n, D, F, d->n_head, n, !go, &a);
	if (!st && bias) {
		int64_t nb[4] = {n, H, n, 1};
		st = be->ops->tensor_alloc(be, SG_TYPE_F32, nb, &a.bias);
		if (!st) st = be->ops->write(be, &a.bias, 0, bias, sizeof(float) * (size_t)n * (size_t)H * (size_t)n);
	}
	if (!st) st = be->ops->write(be, &a.ids, 0, ids, ni);
	if (!st) st = be->ops->write(be, &a.pos, 0, pos, ni);
	if (!st) st = be->ops->write(be, &a.types, 0, types, ni);
	if (!st) st = be->ops->write(be, &a.slots, 0, slots, ni);
	if (!st) st = be->ops->write(be, &a.qpos, 0, qpos, ni);
	if (!st && ones) st = be->ops->write(be, &a.ones, 0, ones, sizeof(float) * (size_t)n * (size_t)F);
	if (!st) st = run_layers(b, &a, NULL, 1);
	if (!st) st = be->ops->read(be, &a.x, 0, hidden, sizeof(float) * (size_t)n * (size_t)D);
done:
	free_tensors(be, (sg_btensor *)&a, sizeof(a) / sizeof(sg_btensor));
	sg_free(host);
	sg_free(ones);
	sg_free(bias);
	return st;
}

sg_status sg_bert_pooler(sg_bert *b, const float *hidden, float *out)
{
	if (!b->pool_w.data) return sg_error(SG_ERR_UNSUPPORTED, "bert: this checkpoint has no pooler");
	sg_backend *be = b->m.be;
	int64_t D = b->m.desc.dim, ne[4] = {D, 1, 1, 1};
	sg_btensor x = {0}, y = {0};
	sg_status st = be->ops->tensor_alloc(be, SG_TYPE_F32, ne, &x);
	if (!st) st = be->ops->tensor_alloc(be, SG_TYPE_F32, ne, &y);
	if (!st) st = be->ops->write(be, &x, 0, hidden, sizeof(float) * (size_t)D);
	if (!st) st = be->ops->matmul(be, &b->pool_w, &x, &b->pool_b, &y);
	if (!st) st = be->ops->read(be, &y, 0, out, sizeof(float) * (size_t)D);
	for (int64_t i = 0; i < D && !st; i++) out[i] = tanhf(out[i]);
	free_tensors(be, &x, 1);
	free_tensors(be, &y, 1);
	return st;
}

sg_status sg_pool(const sg_st_config *p, const float *hidden, const int32_t *mask, int n, int dim, float *out)
{
	int first = -1, last = -1, m = 0;
	for (int i = 0; i < n; i++)
		if (!mask || mask[i]) {
			if (first < 0) first = i;
			last = i;
			m++;
		}
	if (!m || dim < 1) return sg_error(SG_ERR_INVALID_ARG, "pool: %d real tokens of %d, dim %d", m, n, dim);
	/* sums in double: the order-free reference the parity tests hold f32 sums to */
	for (int j = 0; j < dim; j++) {
		double acc = 0.0;
		switch (p->mode) {
		case SG_POOL_CLS: acc = hidden[(size_t)first * (size_t)dim + (size_t)j]; break;
		case SG_POOL_LAST: acc = hidden[(size_t)last * (size_t)dim + (size_t)j]; break;
		case SG_POOL_MAX:
			acc = -INFINITY;
			for (int i = 0; i < n; i++)
				if ((!mask || mask[i]) && hidden[(size_t)i * (size_t)dim + (size_t)j] > acc)
					acc = hidden[(size_t)i * (size_t)dim + (size_t)j];
			break;
		case SG_POOL_MEAN:
		default:
			for (int i = 0; i < n; i++)
				if (!mask || mask[i]) acc += hidden[(size_t)i * (size_t)dim + (size_t)j];
			acc /= m;
			break;
		}
		out[j] = (float)acc;
	}
	if (p->normalize) {
		/* sentence-transformers' Normalize: x / max(|x|, 1e-12) */
		double ss = 0.0;
		for (int j = 0; j < dim; j++) ss += (double)out[j] * out[j];
		double norm = sqrt(ss);
		if (norm < 1e-12) norm = 1e-12;
		for (int j = 0; j < dim; j++) out[j] = (float)(out[j] / norm);
	}
	return SG_OK;
}

int sg_bert_can_pool(const sg_bert *b) { return b->m.be->ops->pool_rows && sg_flag_bool("SARAGOSSA_EMBED_POOL_OP"); }

/* The packed batch into hidden (every row), or with pooled (mode an sg_bpool) each sequence's
 * rows pooled on the backend into pooled. */
static sg_status forward_batch(sg_bert *b, const int32_t *ids, const int32_t *type_ids, const int *lens, int n_seq, float *hidden,
			       int mode, float *pooled)
{
	const sg_model_desc *d = &b->m.desc;
	sg_backend *be = b->m.be;
	if (n_seq < 1) return sg_error(SG_ERR_INVALID_ARG, "bert: a batch of %d sequences", n_seq);
	int64_t N = 0;
	for (int s = 0; s < n_seq; s++) {
		int m = 0;
		sg_status st = check_inputs(b, ids + N, type_ids ? type_ids + N : NULL, NULL, lens[s], &m);
		if (st) return sg_error_wrap(st, "sequence %d of the batch", s);
		N += lens[s];
	}
	if (N > INT32_MAX / 4) return sg_error(SG_ERR_RANGE, "bert: a batch of %lld tokens", (long long)N);
	int64_t D = d->dim, F = d->ffn_dim, H = d->n_head, NB = 0; /* NB: MPNet's bias floats, every sequence's */
	for (int s = 0; b->rel_host && s < n_seq; s++) NB += (int64_t)lens[s] * H * lens[s];
	int32_t *host = sg_malloc(sizeof(int32_t) * (size_t)N * 3);
	int go = gelu_op(b);
	float *ones = go ? NULL : sg_malloc(sizeof(float) * (size_t)N * (size_t)F);
	float *bias = NB ? sg_malloc(sizeof(float) * (size_t)NB) : NULL;
	bert_acts a;
	memset(&a, 0, sizeof(a));
	sg_status st = SG_OK;
	if (!host || (!go && !ones) || (NB && !bias)) {
		st = sg_error(SG_ERR_NOMEM, "bert: a batch of %lld tokens", (long long)N);
		goto done;
	}
	int32_t *pos = host, *types = host + N, *qpos = host + 2 * N;
	/* each sequence's positions and MPNet bias as sg_bert_forward gives it alone */
	for (int s = 0, r = 0; s < n_seq; r += lens[s], s++) {
		positions(d, ids + r, lens[s], pos + r);
		for (int i = 0; i < lens[s]; i++) {
			types[r + i] = type_ids ? type_ids[r + i] : 0;
			qpos[r + i] = lens[s] - 1;
		}
	}
	for (int64_t s = 0, boff = 0; bias && s < n_seq; boff += (int64_t)lens[s] * H * lens[s], s++)
		rel_bias(b, NULL, lens[s], bias + boff);
	for (int64_t i = 0; ones && i < N * F; i++) ones[i] = 1.0f;
	size_t ni = sizeof(int32_t) * (size_t)N;
	st = batch_acts(b, N, n_seq, !go, packed_attn(b), pooled != NULL, &a);
	if (!st && bias) {
		int64_t nb[4] = {NB, 1, 1, 1};
		st = be->ops->tensor_alloc(be, SG_TYPE_F32, nb, &a.bias);
		if (!st) st = be->ops->write(be, &a.bias, 0, bias, sizeof(float) * (size_t)NB);
	}
	if (!st) st = be->ops->write(be, &a.ids, 0, ids, ni);
	if (!st) st = be->ops->write(be, &a.pos, 0, pos, ni);
	if (!st) st = be->ops->write(be, &a.types, 0, types, ni);
	if (!st) st = be->ops->write(be, &a.qpos, 0, qpos, ni);
	if (!st && ones) st = be->ops->write(be, &a.ones, 0, ones, sizeof(float) * (size_t)N * (size_t)F);
	if (!st && (packed_attn(b) || pooled)) {
		int32_t *offs = sg_malloc(sizeof(int32_t) * (size_t)(n_seq + 1));
		if (!offs) st = sg_error(SG_ERR_NOMEM, "bert: a batch of %d sequences", n_seq);
		for (int s = 0; offs && s <= n_seq; s++) offs[s] = s ? offs[s - 1] + lens[s - 1] : 0;
		if (!st) st = be->ops->write(be, &a.offs, 0, offs, sizeof(int32_t) * (size_t)(n_seq + 1));
		sg_free(offs);
	}
	if (!st) st = run_layers(b, &a, lens, n_seq);
	if (!st && pooled) st = be->ops->pool_rows(be, &a.x, &a.offs, n_seq, mode, &a.pool);
	if (!st && pooled) st = be->ops->read(be, &a.pool, 0, pooled, sizeof(float) * (size_t)n_seq * (size_t)D);
	if (!st && !pooled) st = be->ops->read(be, &a.x, 0, hidden, sizeof(float) * (size_t)N * (size_t)D);
done:
	free_tensors(be, (sg_btensor *)&a, sizeof(a) / sizeof(sg_btensor));
	sg_free(host);
	sg_free(ones);
	sg_free(bias);
	return st;
}

sg_status sg_bert_forward_batch(sg_bert *b, const int32_t *ids, const int32_t *type_ids, const int *lens, int n_seq,
				float *hidden)
{
	return forward_batch(b, ids, type_ids, lens, n_seq, hidden, 0, NULL);
}

sg_status sg_bert_forward_batch_pooled(sg_bert *b, const int32_t *ids, const int32_t *type_ids, const int *lens, int n_seq, int mode,
				       float *pooled)
{
	if (!sg_bert_can_pool(b)) return sg_error(SG_ERR_UNSUPPORTED, "bert: the %s backend has no pooling op", b->m.be->ops->name);
	if (mode < SG_BPOOL_MEAN || mode > SG_BPOOL_MAX) return sg_error(SG_ERR_INVALID_ARG, "bert: pooling mode %d", mode);
	return forward_batch(b, ids, type_ids, lens, n_seq, NULL, mode, pooled);
}

int sg_bert_n_labels(const sg_bert *b) { return b->cls_w.data ? (int)b->cls_w.ne[1] : 0; }

int sg_bert_pair_double_sep(const sg_bert *b) { return b->m.desc.pos_pad_id >= 0; }

sg_status sg_bert_classify(sg_bert *b, const float *hidden, float *logits)
{
	int C = sg_bert_n_labels(b);
	if (!C) return sg_error(SG_ERR_UNSUPPORTED, "bert: this checkpoint has no classifier head");
	float *pooled = sg_malloc(sizeof(float) * (size_t)b->m.desc.dim);
	if (!pooled) return sg_error(SG_ERR_NOMEM, "bert: classifier");
	sg_status st = sg_bert_pooler(b, hidden, pooled);
	sg_backend *be = b->m.be;
	int64_t nx[4] = {b->m.desc.dim, 1, 1, 1}, ny[4] = {C, 1, 1, 1};
	sg_btensor x = {0}, y = {0};
	if (!st) st = be->ops->tensor_alloc(be, SG_TYPE_F32, nx, &x);
	if (!st) st = be->ops->tensor_alloc(be, SG_TYPE_F32, ny, &y);
	if (!st) st = be->ops->write(be, &x, 0, pooled, sizeof(float) * (size_t)b->m.desc.dim);
	if (!st) st = be->ops->matmul(be, &b->cls_w, &x, &b->cls_b, &y);
	if (!st) st = be->ops->read(be, &y, 0, logits, sizeof(float) * (size_t)C);
	free_tensors(be, &x, 1);
	free_tensors(be, &y, 1);
	sg_free(pooled);
	return st;
}
