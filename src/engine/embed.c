/* Text embeddings: tokenizer -> encoder (or a decoder's last hidden state) -> pooling (see embed.h). */
#include "engine/embed.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/flags.h"
#include "base/json.h"
#include "base/mmap.h"
#include "formats/model_desc.h"
#include "formats/qtypes.h"
#include "formats/safetensors.h"
#include "formats/stconfig.h"
#include "models/bert.h"
#include "models/forward.h"
#include "models/model.h"
#include "text/template/chat_template.h"
#include "text/tokenizer/tokenizer.h"

/* Decoders used as embedders: the context one input may have at most (the KV cache of one call
 * is sized to the input; this bounds it). */
#define LM_MAX_TOKENS 8192

/* A sentence-transformers Dense module on the pooled vector: y = act(W x + b). */
typedef enum { ACT_IDENTITY, ACT_TANH, ACT_RELU, ACT_SIGMOID, ACT_GELU } dense_act;

typedef struct dense_layer {
	int in, out;
	dense_act act;
	float *w; /* [out][in] */
	float *b; /* [out], or NULL */
} dense_layer;

struct sg_embedder {
	sg_bert *enc;     /* an encoder, or NULL when lm is set */
	sg_model *lm;     /* a decoder with an embedding head (last-token pooling) */
	sg_tokenizer *tok; /* NULL: ids only */
	sg_st_config pool;
	sg_st_prompts prompts; /* config_sentence_transformers.json's */
	dense_layer dense[SG_ST_MAX_DENSE]; /* [pool.n_dense] */
	int hid;               /* the encoder's (decoder's) hidden size: what the pooling sees */
	int dim, max_tokens;   /* dim: the embedding's size, after the Dense modules */
	int n_labels; /* > 0: a cross-encoder with this many labels */
	/* an LLM reranker (a decoder scoring a pair by its yes/no logits at the last position): the
	 * chat template that renders a pair as messages of the roles "query" and "document" */
	sg_chat_template *rr_tmpl;
	int32_t rr_true, rr_false; /* LogitScore's token ids; rr_false -1: the true logit alone */
	int sigmoid;  /* cross-encoder: 1 = sigmoid of the logit, 0 = the logit itself */
};

int sg_embedder_dim(const sg_embedder *e) { return e->dim; }
int sg_embedder_max_tokens(const sg_embedder *e) { return e->max_tokens; }
int sg_embedder_has_tokenizer(const sg_embedder *e) { return e->tok != NULL; }
int sg_embedder_is_reranker(const sg_embedder *e) { return e->n_labels > 0; }
int sg_embedder_normalizes(const sg_embedder *e) { return e->pool.normalize; }
int sg_embedder_n_vocab(const sg_embedder *e) { return e->lm ? e->lm->desc.n_vocab : sg_bert_desc(e->enc)->n_vocab; }

const char *sg_embedder_model_type(const sg_embedder *e)
{
	const char *t = e->lm ? e->lm->desc.model_type : sg_bert_desc(e->enc)->model_type;
	return *t ? t : "bert";
}

const char *sg_embedder_weight_type(const sg_embedder *e)
{
	if (!e->lm) return sg_type_name(sg_bert_weight_type(e->enc));
	/* a decoder: its first query projection's, as an encoder's */
	return sg_type_name(e->lm->desc.n_layer > 0 && e->lm->layers[0].wq.data ? e->lm->layers[0].wq.type : e->lm->tok_embd.type);
}

sg_status sg_embedder_truncate(const sg_embedder *e, float *vecs, int n, int keep)
{
	if (keep < 1 || keep > e->dim)
		return sg_error(SG_ERR_RANGE, "embed: dimensions %d is outside [1, %d], the model's embedding size", keep, e->dim);
	for (int i = 0; i < n; i++) {
		float *dst = vecs + (size_t)i * (size_t)keep;
		memmove(dst, vecs + (size_t)i * (size_t)e->dim, sizeof(float) * (size_t)keep);
		if (!e->pool.normalize) continue;
		double ss = 0.0;
		for (int j = 0; j < keep; j++) ss += (double)dst[j] * dst[j];
		double norm = sqrt(ss);
		if (norm < 1e-12) norm = 1e-12;
		for (int j = 0; j < keep; j++) dst[j] = (float)(dst[j] / norm);
	}
	return SG_OK;
}

/* sentence-transformers' CrossEncoder activation: config.json's sentence_transformers.activation_fn
 * (or the older sbert_ce_default_activation_function), else sigmoid for one label, else identity. */
static sg_status read_activation(const char *path, sg_embedder *e)
{
	char cf[4096];
	json_t *j = NULL;
	e->sigmoid = e->n_labels == 1;
	if (snprintf(cf, sizeof(cf), "%s/config.json", path) >= (int)sizeof(cf) || sg_json_load_file(cf, 1 << 20, &j)) {
		sg_error_clear();
		return SG_OK;
	}
	const char *fn = NULL;
	json_t *stj = json_object_get(j, "sentence_transformers");
	if (json_is_object(stj)) fn = json_string_value(json_object_get(stj, "activation_fn"));
	if (!fn) fn = json_string_value(json_object_get(j, "sbert_ce_default_activation_function"));
	sg_status st = SG_OK;
	if (fn && strstr(fn, "Sigmoid")) e->sigmoid = 1;
	else if (fn && strstr(fn, "Identity")) e->sigmoid = 0;
	else if (fn) st = sg_error(SG_ERR_UNSUPPORTED, "%s: activation_fn '%.200s' (Sigmoid and Identity run)", cf, fn);
	json_decref(j);
	return st;
}

void sg_embedder_free(sg_embedder *e)
{
	if (!e) return;
	sg_bert_free(e->enc);
	if (e->lm) sg_model_free(e->lm);
	sg_tokenizer_free(e->tok);
	sg_chat_template_free(e->rr_tmpl);
	sg_st_prompts_free(&e->prompts);
	for (int i = 0; i < SG_ST_MAX_DENSE; i++) {
		sg_free(e->dense[i].w);
		sg_free(e->dense[i].b);
	}
	sg_free(e);
}

int sg_embedder_n_prompts(const sg_embedder *e) { return e->prompts.n; }
const char *sg_embedder_prompt_name(const sg_embedder *e, int i) { return i >= 0 && i < e->prompts.n ? e->prompts.names[i] : NULL; }

sg_status sg_embedder_prompt(const sg_embedder *e, const char *name, const char **text)
{
	*text = NULL;
	if (!name) {
		if (e->prompts.dflt >= 0) *text = e->prompts.texts[e->prompts.dflt];
		return SG_OK;
	}
	for (int i = 0; i < e->prompts.n; i++)
		if (!strcmp(e->prompts.names[i], name)) {
			*text = e->prompts.texts[i];
			return SG_OK;
		}
	char names[512] = "";
	size_t off = 0;
	for (int i = 0; i < e->prompts.n && off < sizeof(names); i++)
		off += (size_t)snprintf(names + off, sizeof(names) - off, "%s'%s'", i ? ", " : "", e->prompts.names[i]);
	return sg_error(SG_ERR_INVALID_ARG, "embed: prompt name '%.100s' is not one of the model's prompts (%s)", name,
			e->prompts.n ? names : "it has none");
}

/* One tensor of a Dense module's model.safetensors as float32 (n values), or an error naming it. */
static sg_status dense_tensor(const sg_safetensors *sf, const char *file, const char *name, int64_t n, float **out)
{
	for (int i = 0; i < sf->n_tensors; i++) {
		const sg_tensor *t = &sf->tensors[i];
		if (strcmp(t->name, name)) continue;
		if (t->type != SG_TYPE_F32 && t->type != SG_TYPE_F16 && t->type != SG_TYPE_BF16)
			return sg_error(SG_ERR_UNSUPPORTED, "%s: %s is %s (F32, F16 and BF16 load)", file, name, sg_type_name(t->type));
		if (sg_tensor_nelem(t) != n)
			return sg_error(SG_ERR_FORMAT, "%s: %s has %lld values, the config says %lld", file, name,
					(long long)sg_tensor_nelem(t), (long long)n);
		if (!(*out = sg_malloc(sizeof(float) * (size_t)n))) return sg_error(SG_ERR_NOMEM, "%s: %s", file, name);
		sg_dequantize_ref(t->type, t->data, *out, n);
		return SG_OK;
	}
	return sg_error(SG_ERR_FORMAT, "%s: no tensor %s", file, name);
}

/* The Dense module in folder dir/sub: its config.json (in_features, out_features, bias,
 * activation_function) and model.safetensors (linear.weight [out][in], linear.bias). */
static sg_status load_dense(const char *dir, const char *sub, int in_expected, dense_layer *d)
{
	char cf[4096], wf[4096];
	if (snprintf(cf, sizeof(cf), "%s/%s/config.json", dir, sub) >= (int)sizeof(cf) ||
	    snprintf(wf, sizeof(wf), "%s/%s/model.safetensors", dir, sub) >= (int)sizeof(wf))
		return sg_error(SG_ERR_INVALID_ARG, "model path of %zu bytes is too long", strlen(dir));
	json_t *j = NULL;
	sg_status st = sg_json_load_file(cf, 1 << 20, &j);
	if (st) return st;
	int64_t in = 0, out = 0;
	int bias = 1;
	const char *act = "torch.nn.modules.activation.Tanh";
	if ((st = sg_json_get_int(j, "in_features", &in)) || (st = sg_json_get_int(j, "out_features", &out)))
		st = sg_error_wrap(st, "%s", cf);
	if (!st && (st = sg_json_get_bool(j, "bias", &bias)) == SG_ERR_NOT_FOUND) st = SG_OK;
	if (!st && (st = sg_json_get_str(j, "activation_function", &act)) == SG_ERR_NOT_FOUND) st = SG_OK;
	else if (st == SG_ERR_FORMAT) sg_error_wrap(st, "%s", cf);
	for (int k = 0; !st && k < 2; k++) {
		const char *key = k ? "module_output_name" : "module_input_name", *v = NULL;
		if (!sg_json_get_str(j, key, &v) && strcmp(v, "sentence_embedding"))
			st = sg_error(SG_ERR_UNSUPPORTED, "%s: %s '%.100s' (Dense modules on the sentence embedding run)", cf, key, v);
	}
	sg_error_clear();
	if (!st && (in < 1 || out < 1 || in > (1 << 16) || out > (1 << 16)))
		st = sg_error(SG_ERR_FORMAT, "%s: in_features %lld, out_features %lld", cf, (long long)in, (long long)out);
	if (!st && in != in_expected)
		st = sg_error(SG_ERR_FORMAT, "%s: in_features %lld, but the vector before it has %d values", cf, (long long)in, in_expected);
	static const struct {
		const char *name;
		dense_act act;
	} acts[] = {{"Identity", ACT_IDENTITY}, {"Tanh", ACT_TANH}, {"ReLU", ACT_RELU}, {"Sigmoid", ACT_SIGMOID}, {"GELU", ACT_GELU}};
	int found = -1;
	for (size_t k = 0; !st && k < sizeof(acts) / sizeof(acts[0]); k++) {
		size_t la = strlen(act), ln = strlen(acts[k].name);
		if (la >= ln && !strcmp(act + la - ln, acts[k].name) && (la == ln || act[la - ln - 1] == '.')) found = (int)k;
	}
	if (!st && found < 0)
		st = sg_error(SG_ERR_UNSUPPORTED, "%s: activation_function '%.200s' (Identity, Tanh, ReLU, Sigmoid, GELU run)", cf, act);
	if (!st) {
		d->in = (int)in;
		d->out = (int)out;
		d->act = acts[found].act;
	}
	json_decref(j);
	if (st) return st;
	struct stat sb;
	char bin[4096];
	if (stat(wf, &sb) != 0) {
		if (snprintf(bin, sizeof(bin), "%s/%s/pytorch_model.bin", dir, sub) < (int)sizeof(bin) && stat(bin, &sb) == 0)
			return sg_error(SG_ERR_UNSUPPORTED, "%s holds pytorch_model.bin (a pickle, not read): save the module as model.safetensors",
					sub);
		return sg_error(SG_ERR_IO, "%s: not found", wf);
	}
	char *data = NULL;
	size_t len = 0;
	if ((st = sg_read_file(wf, (size_t)1 << 30, &data, &len))) return st;
	sg_safetensors sf;
	memset(&sf, 0, sizeof(sf));
	st = sg_safetensors_parse((const uint8_t *)data, len, wf, 0, &sf);
	if (!st) st = dense_tensor(&sf, wf, "linear.weight", (int64_t)d->in * d->out, &d->w);
	if (!st && bias) st = dense_tensor(&sf, wf, "linear.bias", d->out, &d->b);
	sg_safetensors_free(&sf);
	sg_free(data);
	return st;
}

static float activate(dense_act a, double x)
{
	switch (a) {
	case ACT_TANH: return (float)tanh(x);
	case ACT_RELU: return (float)(x > 0 ? x : 0);
	case ACT_SIGMOID: return (float)(1.0 / (1.0 + exp(-x)));
	case ACT_GELU: return (float)(0.5 * x * (1.0 + erf(x / sqrt(2.0))));
	case ACT_IDENTITY:
	default: return (float)x;
	}
}

/* hidden [n][hid] -> out [dim]: the pooling, the Dense modules, the Normalize; or with pooled
 * (hid floats, the backend's pooling of the rows; hidden unused) the modules after the pooling. */
static sg_status pool_head(const sg_embedder *e, const float *hidden, const int32_t *mask, int n, const float *pooled, float *out)
{
	if (!e->pool.n_dense && !pooled) return sg_pool(&e->pool, hidden, mask, n, e->hid, out);
	int wmax = e->hid;
	for (int i = 0; i < e->pool.n_dense; i++) wmax = e->dense[i].out > wmax ? e->dense[i].out : wmax;
	float *a = sg_malloc(sizeof(float) * 2 * (size_t)wmax);
	if (!a) return sg_error(SG_ERR_NOMEM, "embed: a head of %d values", wmax);
	float *b = a + wmax;
	sg_st_config raw = e->pool;
	raw.normalize = 0;
	sg_status st = SG_OK;
	if (pooled) memcpy(a, pooled, sizeof(float) * (size_t)e->hid);
	else st = sg_pool(&raw, hidden, mask, n, e->hid, a);
	for (int l = 0; !st && l < e->pool.n_dense; l++) {
		const dense_layer *d = &e->dense[l];
		for (int j = 0; j < d->out; j++) {
			const float *w = d->w + (size_t)j * (size_t)d->in;
			double acc = d->b ? d->b[j] : 0.0;
			for (int i = 0; i < d->in; i++) acc += (double)w[i] * a[i];
			b[j] = activate(d->act, acc);
		}
		float *t = a;
		a = b;
		b = t;
	}
	if (!st && e->pool.normalize) {
		double ss = 0.0;
		for (int j = 0; j < e->dim; j++) ss += (double)a[j] * a[j];
		double norm = sqrt(ss);
		if (norm < 1e-12) norm = 1e-12;
		for (int j = 0; j < e->dim; j++) a[j] = (float)(a[j] / norm);
	}
	if (!st) memcpy(out, a, sizeof(float) * (size_t)e->dim);
	sg_free(a < b ? a : b);
	return st;
}

/* Sizes the embedder from the hidden width: the Dense modules' widths and the pooled size. */
static sg_status load_head(sg_embedder *e, const char *path)
{
	e->dim = e->hid;
	for (int i = 0; i < e->pool.n_dense; i++) {
		sg_status st = load_dense(path, e->pool.dense[i], e->dim, &e->dense[i]);
		if (st) return st;
		e->dim = e->dense[i].out;
	}
	return SG_OK;
}

/* 1 when the folder's config.json describes a decoder (an LLM) rather than an encoder, 2 when
 * that decoder's attention is bidirectional (EmbeddingGemma); 0 when it is an encoder or cannot
 * be read (the encoder loader then names what is wrong). */
static int is_decoder(const char *path)
{
	char cp[4096];
	char *txt = NULL;
	size_t n = 0;
	json_t *cfg = NULL;
	sg_model_desc d;
	int dec = 0;
	if (snprintf(cp, sizeof(cp), "%s/config.json", path) >= (int)sizeof(cp)) return 0;
	if (sg_read_file(cp, (size_t)16 << 20, &txt, &n)) {
		sg_error_clear();
		return 0;
	}
	if (!sg_json_parse_config(txt, n, "config.json", &cfg) && !sg_model_desc_from_config(cfg, &d)) {
		dec = d.arch != SG_ARCH_BERT && d.arch != SG_ARCH_WHISPER ? 1 + (d.bidirectional != 0) : 0;
		sg_model_desc_free(&d);
	}
	sg_error_clear();
	json_decref(cfg);
	sg_free(txt);
	return dec;
}

/* A decoder as an embedder: only with an embedding head (sentence-transformers' modules.json
 * pooling the last token; Qwen3-Embedding's layout), never a plain chat model. */
/* Renders the pair (query, document) with an LLM reranker's chat template (roles "query" and
 * "document", as sentence-transformers' CrossEncoder gives a pair to a causal LM). */
static sg_status render_pair(const sg_chat_template *ct, const char *q, size_t ql, const char *d, size_t dl, char **out, size_t *len)
{
	json_t *msgs = json_pack("[{s:s,s:s%},{s:s,s:s%}]", "role", "query", "content", q, ql, "role", "document", "content", d, dl);
	if (!msgs) return sg_error(SG_ERR_NOMEM, "rerank: a pair of %zu and %zu bytes", ql, dl);
	sg_chat_params cp = {.messages = msgs};
	sg_status st = sg_chat_template_render(ct, &cp, out, len);
	json_decref(msgs);
	return st;
}

/* 1 when the folder's chat template renders both a "query" and a "document" message (a reranker's
 * template), keeping it in e; 0 when it has none or it ignores or refuses those roles. */
static int pair_template(sg_embedder *e, const char *path)
{
	sg_chat_template *ct = NULL;
	if (sg_chat_template_load(path, &ct)) {
		sg_error_clear();
		return 0;
	}
	static const char q[] = "\x01sg-query\x01", d[] = "\x01sg-document\x01";
	char *txt = NULL;
	size_t len = 0;
	int ok = !render_pair(ct, q, sizeof(q) - 1, d, sizeof(d) - 1, &txt, &len) && strstr(txt, q) && strstr(txt, d);
	sg_error_clear();
	sg_free(txt);
	if (ok) e->rr_tmpl = ct;
	else sg_chat_template_free(ct);
	return ok;
}

/* The LogitScore module's token ids (its config.json: true_token_id, false_token_id or null). */
static sg_status read_logit_score(sg_embedder *e, const char *path)
{
	char cf[4096];
	if (snprintf(cf, sizeof(cf), "%s/%s/config.json", path, e->pool.logit_score) >= (int)sizeof(cf))
		return sg_error(SG_ERR_INVALID_ARG, "model path of %zu bytes is too long", strlen(path));
	json_t *j = NULL;
	sg_status st = sg_json_load_file(cf, 1 << 20, &j);
	if (st) return st;
	int64_t t = -1, f = -1;
	if ((st = sg_json_get_int(j, "true_token_id", &t))) st = sg_error_wrap(st, "%s", cf);
	json_t *fv = json_object_get(j, "false_token_id");
	if (!st && fv && !json_is_null(fv) && (st = sg_json_get_int(j, "false_token_id", &f))) st = sg_error_wrap(st, "%s", cf);
	const char *in = NULL;
	if (!st && !sg_json_get_str(j, "module_input_name", &in) && strcmp(in, "causal_logits"))
		st = sg_error(SG_ERR_UNSUPPORTED, "%s: module_input_name '%.100s' (causal_logits runs)", cf, in);
	sg_error_clear();
	json_decref(j);
	if (st) return st;
	e->rr_true = (int32_t)t;
	e->rr_false = (int32_t)f;
	return SG_OK;
}

/* A decoder as an embedder: only with an embedding head (sentence-transformers' modules.json
 * pooling the last token; Qwen3-Embedding's layout), never a plain chat model; or as an LLM
 * reranker: a LogitScore module in modules.json, or no modules.json and a chat template that
 * renders a pair as "query" and "document" messages (Qwen3-Reranker's layout, scored by the
 * logits of "yes" and "no" as sentence-transformers' CrossEncoder does). bidir: the config says
 * bidirectional attention (EmbeddingGemma: any pooling the folder names). */
static sg_status load_lm(sg_embedder *e, const char *path, const char *backend, int n_threads, int bidir)
{
	sg_status st = sg_st_config_load(path, &e->pool);
	if (st) return st;
	int rr = e->pool.logit_score[0] != 0;
	if (rr && (st = read_logit_score(e, path))) return st;
	if (rr && !pair_template(e, path))
		return sg_error(SG_ERR_UNSUPPORTED, "rerank: '%s' has a LogitScore module but no chat template that renders a (query, document) "
						    "pair as messages of those roles",
				path);
	if (!rr && !e->pool.from_folder && pair_template(e, path)) {
		rr = 1;
		e->rr_true = e->rr_false = -2; /* "yes" and "no", looked up once the tokenizer is loaded */
	}
	/* a causal decoder's states see only what came before: its embedding is the last token's; a
	 * bidirectional one (EmbeddingGemma) pools over every token, as an encoder does */
	if (!rr && (!e->pool.from_folder || (e->pool.mode != SG_POOL_LAST && !bidir)))
		return sg_error(SG_ERR_UNSUPPORTED, "embed: '%s' is a language model without an embedding head (a sentence-transformers "
						    "modules.json pooling the last token, as Qwen3-Embedding has) or a reranker's chat "
						    "template (one that renders \"query\" and \"document\" messages)", path);
	if (rr && bidir)
		return sg_error(SG_ERR_UNSUPPORTED, "rerank: '%s' has bidirectional attention (an embedding model), not a reranker's causal LM", path);
	sg_model_params mp = sg_model_default_params();
	mp.n_threads = n_threads;
	if (backend) mp.backend = backend;
	if ((st = sg_model_load(path, &mp, &e->lm))) return st;
	const sg_model_desc *d = &e->lm->desc;
	if (d->arch == SG_ARCH_QWEN3_NEXT || d->arch == SG_ARCH_GEMMA4 || (d->arch == SG_ARCH_GEMMA3 && !d->bidirectional))
		return sg_error(SG_ERR_UNSUPPORTED, "embed: '%s' (%s): decoder embedders and rerankers run the llama, mistral and qwen "
						    "families, and Gemma 3 with bidirectional attention (EmbeddingGemma)",
				path, d->model_type);
	e->hid = e->dim = d->dim;
	e->max_tokens = d->max_ctx > 0 && d->max_ctx < LM_MAX_TOKENS ? d->max_ctx : LM_MAX_TOKENS;
	if (e->pool.max_seq_length > 0 && e->pool.max_seq_length < e->max_tokens) e->max_tokens = e->pool.max_seq_length;
	if (rr) {
		e->n_labels = 1;
		return SG_OK;
	}
	if (e->pool.dim > 0 && e->pool.dim != e->hid)
		return sg_error(SG_ERR_FORMAT, "embed: '%s': the Pooling module expects %d dims, the model has %d", path, e->pool.dim,
				e->hid);
	return load_head(e, path);
}

sg_status sg_embedder_load(const char *path, const char *backend, int n_threads, sg_embedder **out)
{
	*out = NULL;
	sg_embedder *e = sg_calloc(1, sizeof(*e));
	if (!e) return sg_error(SG_ERR_NOMEM, "embed: loading '%s'", path);
	sg_bert_params bp = sg_bert_default_params();
	bp.backend = backend;
	bp.n_threads = n_threads;
	struct stat s;
	int dec = stat(path, &s) == 0 && S_ISDIR(s.st_mode) ? is_decoder(path) : 0, lm = dec > 0;
	sg_status st = lm ? load_lm(e, path, backend, n_threads, dec == 2) : sg_bert_load(path, &bp, &e->enc);
	if (!st && lm) {
		/* load_lm read the pooling and the sizes */
	} else if (!st && stat(path, &s) == 0 && S_ISDIR(s.st_mode)) st = sg_st_config_load(path, &e->pool);
	else if (!st) e->pool = sg_st_config_default();
	if (!st && !lm) {
		const sg_model_desc *d = sg_bert_desc(e->enc);
		e->hid = e->dim = d->dim;
		e->max_tokens = sg_bert_max_tokens(e->enc);
		if (e->pool.max_seq_length > 0 && e->pool.max_seq_length < e->max_tokens) e->max_tokens = e->pool.max_seq_length;
		if (e->pool.dim > 0 && e->pool.dim != e->hid)
			st = sg_error(SG_ERR_FORMAT, "embed: '%s': the Pooling module expects %d dims, the encoder has %d", path,
				      e->pool.dim, e->hid);
		if (!st) st = load_head(e, path);
	}
	if (!st && e->enc) e->n_labels = sg_bert_n_labels(e->enc);
	if (!st && e->n_labels > 0) st = read_activation(path, e);
	e->prompts.dflt = -1;
	if (!st && stat(path, &s) == 0 && S_ISDIR(s.st_mode)) st = sg_st_prompts_load(path, &e->prompts);
	char tj[4096];
	if (!st && snprintf(tj, sizeof(tj), "%s/tokenizer.json", path) < (int)sizeof(tj) && stat(tj, &s) == 0)
		st = sg_tokenizer_load(path, &e->tok);
	if (!st && e->rr_tmpl && !e->tok) st = sg_error(SG_ERR_FORMAT, "rerank: '%s' has no tokenizer.json", path);
	if (!st && e->rr_tmpl && e->rr_true == -2) {
		e->rr_true = sg_tokenizer_token_id(e->tok, "yes", 3);
		e->rr_false = sg_tokenizer_token_id(e->tok, "no", 2);
		if (e->rr_true < 0 || e->rr_false < 0)
			st = sg_error(SG_ERR_UNSUPPORTED, "rerank: '%s': the vocabulary has no 'yes' and 'no' tokens for a reranker's LogitScore", path);
	}
	if (!st && e->rr_tmpl) {
		int32_t nv = e->lm->desc.n_vocab;
		if (e->rr_true < 0 || e->rr_true >= nv || e->rr_false >= nv)
			st = sg_error(SG_ERR_FORMAT, "rerank: '%s': LogitScore token ids %d and %d outside the vocabulary of %d", path, e->rr_true,
				      e->rr_false, nv);
	}
	if (st) {
		sg_embedder_free(e);
		return st;
	}
	*out = e;
	return SG_OK;
}

/* The decoder's final-normed states pooled: the last token's (a causal decoder), or the
 * Pooling module's over every token (a bidirectional one, run as one chunk: each token sees the
 * others on both sides), with the first `skip` tokens left out of mean and max pooling; then
 * the Dense modules and the Normalize. Each call has its own forward state sized to the input,
 * so calls may run at once. */
static sg_status embed_lm(sg_embedder *e, const int32_t *ids, int n, int skip, float *out)
{
	const sg_model_desc *d = &e->lm->desc;
	for (int i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= d->n_vocab)
			return sg_error(SG_ERR_RANGE, "embed: token %d = %d is outside the vocabulary [0, %d)", i, ids[i], d->n_vocab);
	sg_fwd_state fs;
	memset(&fs, 0, sizeof(fs));
	int all = d->bidirectional; /* every token's state */
	/* include_prompt false: the prompt's tokens are masked out of mean and max pooling */
	int masked = all && skip > 0 && skip < n && (e->pool.mode == SG_POOL_MEAN || e->pool.mode == SG_POOL_MAX);
	float *h = sg_malloc(sizeof(float) * (size_t)e->hid * (size_t)(all ? n : 1));
	int32_t *mask = masked ? sg_malloc(sizeof(int32_t) * (size_t)n) : NULL;
	if (!h || (masked && !mask)) {
		sg_free(h);
		return sg_error(SG_ERR_NOMEM, "embed: the states of %d tokens", n);
	}
	for (int i = 0; mask && i < n; i++) mask[i] = i >= skip;
	sg_status st = sg_fwd_state_init(e->lm, n, all || n < 256 ? n : 256, SG_TYPE_F32, &fs);
	if (!st && all) st = sg_forward(e->lm, &fs, ids, n, 0, SG_LOGITS_NONE);
	if (!st && all) st = sg_forward_hidden_rows(e->lm, &fs, n, h);
	else if (!st) st = sg_forward_hidden_last(e->lm, &fs, ids, n, h);
	sg_fwd_state_free(e->lm, &fs);
	if (!st) st = all ? pool_head(e, h, mask, n, NULL, out) : pool_head(e, h, NULL, 1, NULL, out);
	sg_free(mask);
	sg_free(h);
	return st;
}

sg_status sg_embedder_embed_ids(sg_embedder *e, const int32_t *ids, int n, float *out)
{
	if (n < 1) return sg_error(SG_ERR_INVALID_ARG, "embed: an input of no tokens");
	if (n > e->max_tokens)
		return sg_error(SG_ERR_RANGE, "embed: an input of %d tokens exceeds the model's limit of %d", n, e->max_tokens);
	if (e->lm) return embed_lm(e, ids, n, 0, out);
	float *h = sg_malloc(sizeof(float) * (size_t)n * (size_t)e->hid);
	if (!h) return sg_error(SG_ERR_NOMEM, "embed: %d tokens", n);
	sg_status st = sg_bert_forward(e->enc, ids, NULL, NULL, n, h);
	if (!st) st = pool_head(e, h, NULL, n, NULL, out);
	sg_free(h);
	return st;
}

sg_status sg_embedder_embed_text(sg_embedder *e, const char *text, size_t len, int truncate, float *out, int *n_tokens)
{
	if (!e->tok) return sg_error(SG_ERR_UNSUPPORTED, "embed: the model folder has no tokenizer.json (give token ids)");
	sg_tokens t = {0};
	sg_status st = sg_tokenizer_encode(e->tok, text, len, 1, &t);
	if (!st && t.n == 0) st = sg_error(SG_ERR_INVALID_ARG, "embed: the text has no tokens");
	if (!st && t.n > (size_t)e->max_tokens) {
		if (!truncate)
			st = sg_error(SG_ERR_RANGE, "embed: an input of %zu tokens exceeds the model's limit of %d (truncate to embed its start)",
				      t.n, e->max_tokens);
		else {
			/* keep the closing special token ([SEP]) as the tokenizer's truncation does */
			int32_t last = t.ids[t.n - 1];
			t.n = (size_t)e->max_tokens;
			if (sg_tokenizer_is_special(e->tok, last)) t.ids[t.n - 1] = last;
		}
	}
	if (!st) st = sg_embedder_embed_ids(e, t.ids, (int)t.n, out);
	if (!st && n_tokens) *n_tokens = (int)t.n;
	sg_tokens_free(&t);
	return st;
}

/* One tokenized input of a batch. */
typedef struct tok_input {
	int32_t *ids;   /* [n]: owned when own */
	int32_t *types; /* [n] or NULL (all 0); owned */
	int n, own, index;
	int skip; /* leading tokens left out of mean / max pooling (a prompt with include_prompt false) */
} tok_input;

static sg_status tokenize_text(sg_embedder *e, const char *prompt, const char *text, size_t len, int truncate, tok_input *t)
{
	/* sentence-transformers prepends the prompt to the text, then tokenizes the whole */
	char *joined = NULL;
	if (prompt && *prompt) {
		size_t pl = strlen(prompt);
		if (!(joined = sg_malloc(pl + len + 1))) return sg_error(SG_ERR_NOMEM, "embed: an input of %zu bytes", pl + len);
		memcpy(joined, prompt, pl);
		memcpy(joined + pl, text, len);
		joined[pl + len] = 0;
		text = joined;
		len += pl;
	}
	if (!e->tok) return sg_error(SG_ERR_UNSUPPORTED, "embed: the model folder has no tokenizer.json (give token ids)");
	sg_tokens k = {0};
	sg_status st = sg_tokenizer_encode(e->tok, text, len, 1, &k);
	if (!st && k.n == 0) st = sg_error(SG_ERR_INVALID_ARG, "embed: the text has no tokens");
	if (!st && k.n > (size_t)e->max_tokens) {
		if (!truncate)
			st = sg_error(SG_ERR_RANGE, "embed: an input of %zu tokens exceeds the model's limit of %d (truncate to embed its start)",
				      k.n, e->max_tokens);
		else {
			int32_t last = k.ids[k.n - 1];
			k.n = (size_t)e->max_tokens;
			if (sg_tokenizer_is_special(e->tok, last)) k.ids[k.n - 1] = last;
		}
	}
	sg_free(joined);
	if (st) {
		sg_tokens_free(&k);
		return st;
	}
	t->ids = k.ids;
	t->n = (int)k.n;
	t->own = 1;
	return SG_OK;
}

static void free_toks(tok_input *t, int n)
{
	for (int i = 0; t && i < n; i++) {
		if (t[i].own) sg_free(t[i].ids);
		sg_free(t[i].types);
	}
	sg_free(t);
}

static int by_len_desc(const void *a, const void *b)
{
	const tok_input *x = a, *y = b;
	if (x->n != y->n) return x->n > y->n ? -1 : 1;
	return x->index - y->index;
}

/* Runs the tokenized inputs t[0..n) (sorted here, longest first) in packed chunks; for each
 * input calls done(user, index, hidden [len][dim]) with its last hidden state. */
typedef sg_status (*hidden_fn)(void *user, sg_embedder *e, const tok_input *t, const float *hidden);

/* The backend pooling mode of the embedder's Pooling module where sg_bert_forward_batch_pooled can
 * take the chunk t[i..j) (each input pooled over all of its tokens), else -1. */
static int chunk_pool_mode(const sg_embedder *e, const tok_input *t, int i, int j)
{
	if (!e->enc || !sg_bert_can_pool(e->enc)) return -1;
	for (int k = i; k < j; k++)
		if (t[k].skip > 0 && t[k].skip < t[k].n) return -1; /* a prompt left out of the pooling */
	switch (e->pool.mode) {
	case SG_POOL_MEAN: return SG_BPOOL_MEAN;
	case SG_POOL_CLS: return SG_BPOOL_FIRST;
	case SG_POOL_LAST: return SG_BPOOL_LAST;
	case SG_POOL_MAX: return SG_BPOOL_MAX;
	default: return -1;
	}
}

static sg_status run_chunks(sg_embedder *e, tok_input *t, int n, hidden_fn done, hidden_fn pooled_done, void *user)
{
	qsort(t, (size_t)n, sizeof(*t), by_len_desc);
	int batched = sg_flag_bool("SARAGOSSA_EMBED_BATCH");
	int64_t budget = sg_flag_int("SARAGOSSA_EMBED_BATCH_TOKENS");
	if (budget < e->max_tokens) budget = e->max_tokens; /* the longest input always fits */
	if (!batched) budget = 0;
	int64_t cap = budget > 0 ? budget : e->max_tokens;
	int32_t *ids = sg_malloc(sizeof(int32_t) * (size_t)cap * 2);
	int *lens = sg_malloc(sizeof(int) * (size_t)(cap < n ? cap : n));
	float *h = sg_malloc(sizeof(float) * (size_t)cap * (size_t)e->hid);
	sg_status st = ids && lens && h ? SG_OK : sg_error(SG_ERR_NOMEM, "embed: a batch of %lld tokens", (long long)cap);
	for (int i = 0; i < n && !st;) {
		/* the next chunk: inputs i..j-1, N tokens */
		int j = i, any_types = 0;
		int64_t N = 0;
		while (j < n && (j == i || (budget > 0 && N + t[j].n <= budget))) {
			memcpy(ids + N, t[j].ids, sizeof(int32_t) * (size_t)t[j].n);
			if (t[j].types) any_types = 1;
			lens[j - i] = t[j].n;
			N += t[j++].n;
		}
		int32_t *types = any_types ? ids + cap : NULL;
		for (int k = i, r = 0; types && k < j; r += t[k++].n)
			for (int q = 0; q < t[k].n; q++) types[r + q] = t[k].types ? t[k].types[q] : 0;
		int mode = pooled_done ? chunk_pool_mode(e, t, i, j) : -1;
		if (mode >= 0) { /* one vector a sequence back (h holds cap >= j - i of them) */
			st = sg_bert_forward_batch_pooled(e->enc, ids, types, lens, j - i, mode, h);
			for (int64_t k = 0; !st && i < j; k++) st = pooled_done(user, e, &t[i++], h + k * e->hid);
			continue;
		}
		st = j - i == 1 ? sg_bert_forward(e->enc, ids, types, NULL, t[i].n, h)
				: sg_bert_forward_batch(e->enc, ids, types, lens, j - i, h);
		for (int64_t off = 0; !st && i < j; off += t[i++].n) st = done(user, e, &t[i], h + off * e->hid);
	}
	sg_free(ids);
	sg_free(lens);
	sg_free(h);
	return st;
}

typedef struct embed_out {
	float *out;
	int *n_tokens;
} embed_out;

static sg_status pool_one(void *user, sg_embedder *e, const tok_input *t, const float *hidden)
{
	embed_out *o = user;
	if (o->n_tokens) o->n_tokens[t->index] = t->n;
	float *dst = o->out + (size_t)t->index * (size_t)e->dim;
	if (t->skip <= 0 || t->skip >= t->n || (e->pool.mode != SG_POOL_MEAN && e->pool.mode != SG_POOL_MAX))
		return pool_head(e, hidden, NULL, t->n, NULL, dst);
	/* include_prompt false: the prompt's tokens ([CLS] and the prompt's own) are masked out */
	int32_t *mask = sg_malloc(sizeof(int32_t) * (size_t)t->n);
	if (!mask) return sg_error(SG_ERR_NOMEM, "embed: a mask of %d tokens", t->n);
	for (int i = 0; i < t->n; i++) mask[i] = i >= t->skip;
	sg_status st = pool_head(e, hidden, mask, t->n, NULL, dst);
	sg_free(mask);
	return st;
}

/* pool_one for an input pooled by the backend: vec is its pooled state (hid floats). */
static sg_status pooled_one(void *user, sg_embedder *e, const tok_input *t, const float *vec)
{
	embed_out *o = user;
	if (o->n_tokens) o->n_tokens[t->index] = t->n;
	return pool_head(e, NULL, NULL, t->n, vec, o->out + (size_t)t->index * (size_t)e->dim);
}

/* The tokens of the prompt alone, less a closing special token: what include_prompt false leaves
 * out of the pooling (sentence-transformers' prompt length). */
static sg_status prompt_tokens(sg_embedder *e, const char *prompt, int *n)
{
	*n = 0;
	if (!prompt || !*prompt || e->pool.include_prompt || !e->tok) return SG_OK;
	sg_tokens k = {0};
	sg_status st = sg_tokenizer_encode(e->tok, prompt, strlen(prompt), 1, &k);
	if (!st) *n = (int)k.n - (k.n > 0 && sg_tokenizer_is_special(e->tok, k.ids[k.n - 1]));
	sg_tokens_free(&k);
	return st;
}

sg_status sg_embedder_embed_batch(sg_embedder *e, const sg_embed_input *in, int n, int truncate, float *out, int *n_tokens)
{
	return sg_embedder_embed_batch_prompt(e, NULL, in, n, truncate, out, n_tokens);
}

sg_status sg_embedder_embed_batch_prompt(sg_embedder *e, const char *prompt, const sg_embed_input *in, int n, int truncate,
					 float *out, int *n_tokens)
{
	if (n < 1) return sg_error(SG_ERR_INVALID_ARG, "embed: no inputs");
	if (!prompt && e->prompts.dflt >= 0) prompt = e->prompts.texts[e->prompts.dflt];
	if (e->n_labels) return sg_error(SG_ERR_UNSUPPORTED, "embed: the model is a reranker (a cross-encoder): it scores pairs and makes no embeddings");
	tok_input *t = sg_calloc((size_t)n, sizeof(*t));
	if (!t) return sg_error(SG_ERR_NOMEM, "embed: %d inputs", n);
	int skip = 0;
	sg_status st = prompt_tokens(e, prompt, &skip);
	for (int i = 0; i < n && !st; i++) {
		t[i].index = i;
		if (in[i].text) {
			st = tokenize_text(e, prompt, in[i].text, in[i].len, truncate, &t[i]);
			t[i].skip = skip;
		}
		else if (in[i].n_ids < 1) st = sg_error(SG_ERR_INVALID_ARG, "embed: an input of no tokens");
		else if (in[i].n_ids > e->max_tokens)
			st = sg_error(SG_ERR_RANGE, "embed: an input of %d tokens exceeds the model's limit of %d", in[i].n_ids, e->max_tokens);
		else {
			/* checked here, where the input's index is known, rather than in the batch */
			int nv = sg_embedder_n_vocab(e);
			for (int k = 0; k < in[i].n_ids && !st; k++)
				if (in[i].ids[k] < 0 || in[i].ids[k] >= nv)
					st = sg_error(SG_ERR_RANGE, "embed: token %d = %d is outside the vocabulary [0, %d)", k, in[i].ids[k], nv);
			t[i].ids = (int32_t *)in[i].ids;
			t[i].n = in[i].n_ids;
		}
		if (st) sg_error_wrap(st, "input %d", i);
	}
	embed_out o = {out, n_tokens};
	/* a decoder embedder: one input per forward (its own KV state each), in the inputs' order */
	for (int i = 0; e->lm && i < n && !st; i++) {
		st = embed_lm(e, t[i].ids, t[i].n, t[i].skip, out + (size_t)i * (size_t)e->dim);
		if (st) sg_error_wrap(st, "input %d", i);
		else if (n_tokens) n_tokens[i] = t[i].n;
	}
	if (!st && !e->lm) st = run_chunks(e, t, n, pool_one, pooled_one, &o);
	free_toks(t, n);
	return st;
}

typedef struct rerank_out {
	float *scores;
	int *n_tokens;
} rerank_out;

static sg_status score_one(void *user, sg_embedder *e, const tok_input *t, const float *hidden)
{
	rerank_out *o = user;
	float logits[64];
	if (e->n_labels > 64) return sg_error(SG_ERR_UNSUPPORTED, "rerank: %d labels (at most 64)", e->n_labels);
	sg_status st = sg_bert_classify(e->enc, hidden, logits);
	if (st) return st;
	float z = logits[0];
	o->scores[t->index] = e->sigmoid ? (float)(1.0 / (1.0 + exp(-(double)z))) : z;
	if (o->n_tokens) o->n_tokens[t->index] = t->n;
	return SG_OK;
}

/* [CLS] q [SEP] d [SEP] with types 0.. then 1.. (BERT), or <s> q </s></s> d </s> with types 0
 * (the RoBERTa family); q holds the query with its special tokens ([CLS] q [SEP]), d the document
 * without any. */
static sg_status make_pair(sg_embedder *e, const sg_tokens *q, const int32_t *d, int nd, int truncate, tok_input *t)
{
	int dbl = sg_bert_pair_double_sep(e->enc), extra = 3 + dbl;
	int nq = (int)q->n - 2, max = e->max_tokens;
	if (nq < 0) return sg_error(SG_ERR_UNSUPPORTED, "rerank: the tokenizer adds no [CLS]/[SEP] to pair inputs with");
	if (nq + nd + extra > max) {
		if (!truncate)
			return sg_error(SG_ERR_RANGE, "rerank: the query and document make %d tokens, over the model's limit of %d (truncate to score their start)",
					nq + nd + extra, max);
		/* longest_first: one token at a time from the longer side (the document on a tie) */
		while (nq + nd + extra > max && (nq > 0 || nd > 0)) {
			if (nd >= nq) nd--;
			else nq--;
		}
	}
	int n = nq + nd + extra;
	t->ids = sg_malloc(sizeof(int32_t) * (size_t)n);
	t->types = sg_malloc(sizeof(int32_t) * (size_t)n);
	if (!t->ids || !t->types) return sg_error(SG_ERR_NOMEM, "rerank: a pair of %d tokens", n);
	t->own = 1;
	t->n = n;
	int32_t sep = q->ids[q->n - 1];
	t->ids[0] = q->ids[0];
	memcpy(t->ids + 1, q->ids + 1, sizeof(int32_t) * (size_t)nq);
	t->ids[nq + 1] = sep;
	if (dbl) t->ids[nq + 2] = sep;
	if (nd) memcpy(t->ids + nq + 2 + dbl, d, sizeof(int32_t) * (size_t)nd); /* an empty document has no ids */
	t->ids[n - 1] = sep;
	for (int i = 0; i < n; i++) t->types[i] = dbl ? 0 : i >= nq + 2;
	return SG_OK;
}

/* The logits of the last of n tokens (the decoder run from position 0) into logits [n_vocab]. */
static sg_status lm_last_logits(sg_embedder *e, const int32_t *ids, int n, float *logits)
{
	const sg_model *m = e->lm;
	sg_fwd_state fs;
	memset(&fs, 0, sizeof(fs));
	int chunk = n < 256 ? n : 256;
	sg_status st = sg_fwd_state_init(m, n, chunk, SG_TYPE_F32, &fs);
	for (int pos = 0; !st && pos < n; pos += chunk) {
		int k = n - pos < chunk ? n - pos : chunk;
		st = sg_forward(m, &fs, ids + pos, k, pos, pos + k == n ? SG_LOGITS_LAST : SG_LOGITS_NONE);
	}
	if (!st) st = m->be->ops->read(m->be, &fs.logits, 0, logits, sizeof(float) * (size_t)m->desc.n_vocab);
	sg_fwd_state_free(m, &fs);
	return st;
}

/* An LLM reranker: each pair rendered by the chat template, tokenized as apply_chat_template does
 * (no special tokens added), scored logit(true) - logit(false) at the last position. */
static sg_status rerank_llm(sg_embedder *e, const char *query, size_t qlen, const sg_embed_input *docs, int n, float *scores,
			    int *n_tokens)
{
	int32_t nv = e->lm->desc.n_vocab;
	float *logits = sg_malloc(sizeof(float) * (size_t)nv);
	if (!logits) return sg_error(SG_ERR_NOMEM, "rerank: logits of %d", nv);
	sg_status st = SG_OK;
	for (int i = 0; i < n && !st; i++) {
		char *txt = NULL;
		size_t len = 0;
		sg_tokens t = {0};
		if (!docs[i].text) st = sg_error(SG_ERR_INVALID_ARG, "rerank: documents are text");
		if (!st) st = render_pair(e->rr_tmpl, query, qlen, docs[i].text, docs[i].len, &txt, &len);
		if (!st) st = sg_tokenizer_encode(e->tok, txt, len, 0, &t);
		if (!st && (t.n < 1 || t.n > (size_t)e->max_tokens))
			st = sg_error(SG_ERR_RANGE, "rerank: the query and document make a prompt of %zu tokens, over the model's limit of %d "
						    "(an LLM reranker's prompts are not truncated)",
				      t.n, e->max_tokens);
		if (!st) st = lm_last_logits(e, t.ids, (int)t.n, logits);
		if (!st) {
			double z = (double)logits[e->rr_true] - (e->rr_false >= 0 ? (double)logits[e->rr_false] : 0.0);
			scores[i] = e->sigmoid ? (float)(1.0 / (1.0 + exp(-z))) : (float)z;
			if (n_tokens) n_tokens[i] = (int)t.n;
		}
		sg_tokens_free(&t);
		sg_free(txt);
		if (st) sg_error_wrap(st, "document %d", i);
	}
	sg_free(logits);
	return st;
}

sg_status sg_embedder_rerank(sg_embedder *e, const char *query, size_t qlen, const sg_embed_input *docs, int n, int truncate,
			     float *scores, int *n_tokens)
{
	if (e->rr_tmpl && n >= 1) return rerank_llm(e, query, qlen, docs, n, scores, n_tokens);
	if (!e->n_labels)
		return sg_error(SG_ERR_UNSUPPORTED, "rerank: the model has no classification head (it is an embedding model, not a cross-encoder)");
	if (!e->tok) return sg_error(SG_ERR_UNSUPPORTED, "rerank: the model folder has no tokenizer.json");
	if (n < 1) return sg_error(SG_ERR_INVALID_ARG, "rerank: no documents");
	sg_tokens q = {0};
	sg_status st = sg_tokenizer_encode(e->tok, query, qlen, 1, &q);
	if (!st && (q.n < 2 || !sg_tokenizer_is_special(e->tok, q.ids[0]) || !sg_tokenizer_is_special(e->tok, q.ids[q.n - 1])))
		st = sg_error(SG_ERR_UNSUPPORTED, "rerank: the tokenizer does not wrap an input in special tokens ([CLS] ... [SEP])");
	tok_input *t = st ? NULL : sg_calloc((size_t)n, sizeof(*t));
	if (!st && !t) st = sg_error(SG_ERR_NOMEM, "rerank: %d documents", n);
	for (int i = 0; i < n && !st; i++) {
		sg_tokens d = {0};
		t[i].index = i;
		if (!docs[i].text) st = sg_error(SG_ERR_INVALID_ARG, "rerank: documents are text");
		if (!st) st = sg_tokenizer_encode(e->tok, docs[i].text, docs[i].len, 0, &d);
		if (!st) st = make_pair(e, &q, d.ids, (int)d.n, truncate, &t[i]);
		sg_tokens_free(&d);
		if (st) sg_error_wrap(st, "document %d", i);
	}
	rerank_out o = {scores, n_tokens};
	if (!st) st = run_chunks(e, t, n, score_one, NULL, &o);
	free_toks(t, n);
	sg_tokens_free(&q);
	return st;
}
