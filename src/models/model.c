/*
 * Model loading: open the weights (HF safetensors folder, MLX-quantized folder or GGUF), read
 * the description, pick the family, bind every weight with its expected type and shape, and
 * hand the bytes to the backend in place (the CPU backend keeps pointers into the mmap; only
 * the small norm and bias vectors stored in 16-bit floats are widened to F32 copies).
 */
#include "models/model.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/flags.h"
#include "base/log.h"

static const sg_family *const families[] = {&sg_family_llama, &sg_family_qwen3, &sg_family_qwen3_moe,
					    &sg_family_gemma3, &sg_family_qwen3_next, &sg_family_gemma4};
#define N_FAMILIES ((int)(sizeof(families) / sizeof(families[0])))

static const char *const supported = "llama, mistral, qwen2, qwen3, qwen3_moe, gemma3, qwen3_next, qwen3_5(_moe), gemma4";

sg_model_params sg_model_default_params(void)
{
	sg_model_params p = {.backend = NULL, .n_threads = 0};
	return p;
}

/* layout: sg_btensor.layout asked of tensor_bind (0, -1 to keep the file's row order, or
 * SG_LAYOUT_MATMUL_ONLY) */
static sg_status bind_tensor_as(sg_model *m, const sg_tensor *t, int layout, sg_btensor *out)
{
	memset(out, 0, sizeof(*out));
	out->layout = layout;
	if (t->n_dims > 4)
		return sg_error(SG_ERR_UNSUPPORTED, "%s: %d dimensions (at most 4)", t->name, t->n_dims);
	out->type = t->type;
	for (int i = 0; i < 4; i++) out->ne[i] = i < t->n_dims ? t->ne[i] : 1;
	out->data = (void *)t->data;
	if (t->type == SG_TYPE_MLX_AFFINE) {
		out->mlx = t->mlx;
		out->scales = t->scales->data;
		out->biases = t->biases->data;
	}
	sg_status st = m->be->ops->tensor_bind(m->be, out);
	return st ? sg_error_wrap(st, "%s", t->name) : SG_OK;
}

sg_status sg_model_bind_tensor(sg_model *m, const sg_tensor *t, sg_btensor *out) { return bind_tensor_as(m, t, 0, out); }

/* A norm weight or bias: F32 is used in place, a 16-bit float vector is widened once. */
static sg_status bind_vector(sg_model *m, const sg_tensor *t, sg_btensor *out)
{
	if (t->type == SG_TYPE_F32) return sg_model_bind_tensor(m, t, out);
	int64_t n = sg_tensor_nelem(t);
	int64_t ne[4] = {n, 1, 1, 1};
	float *tmp = sg_malloc(sizeof(float) * (size_t)n);
	if (!tmp) return sg_error(SG_ERR_NOMEM, "%s: %lld values", t->name, (long long)n);
	sg_dequantize_ref(t->type, t->data, tmp, n);
	sg_status st = m->be->ops->tensor_alloc(m->be, SG_TYPE_F32, ne, out);
	if (!st) st = m->be->ops->write(m->be, out, 0, tmp, sizeof(float) * (size_t)n);
	sg_free(tmp);
	return st;
}

typedef struct want {
	const char *name; /* GGUF-style, may hold {L} */
	int type;         /* sg_type or SG_WANT_* */
	int n_dims;
	int64_t ne[3];
	int optional;
	int vector;       /* 1: norm or bias, widened to F32; SG_WANT_ROWS_SPLIT: kept in file row order */
	sg_btensor *out;
} want;

static sg_status bind_wants(sg_model *m, const want *ws, int n, int layer)
{
	sg_bind specs[32] = {0};
	const sg_tensor *found[32] = {0};
	SG_ASSERT(n <= 32);
	for (int i = 0; i < n; i++) {
		specs[i] = (sg_bind){ws[i].name, ws[i].type, ws[i].n_dims, {ws[i].ne[0], ws[i].ne[1], ws[i].ne[2], 1},
				     ws[i].optional, &found[i]};
	}
	sg_status st = sg_weights_bind(m->w, m->fam->names, specs, n, layer);
	for (int i = 0; i < n && !st; i++) {
		if (!found[i]) continue;
		int vec = ws[i].vector == 1;
		int layout = ws[i].vector == SG_WANT_ROWS_SPLIT ? -1 : ws[i].vector == SG_WANT_MATMUL_ONLY ? SG_LAYOUT_MATMUL_ONLY : 0;
		st = vec ? bind_vector(m, found[i], ws[i].out) : bind_tensor_as(m, found[i], layout, ws[i].out);
		if (!st && !vec) m->weight_bytes += found[i]->nbytes;
	}
	return st;
}

sg_status sg_model_hybrid_prepare(sg_model *m)
{
	/* GGUF converters rename and transform these tensors (A stored as -exp(A_log), fused
	 * layouts of their own): binding them under our names would run wrong numbers */
	if (m->w->format == SG_WEIGHTS_GGUF)
		return sg_error(SG_ERR_UNSUPPORTED, "model: GGUF files of %s are not supported (use the Hugging Face or MLX folder)",
				m->desc.model_type);
	m->hy.layers = sg_calloc((size_t)m->desc.n_layer, sizeof(sg_hybrid_layer));
	return m->hy.layers ? SG_OK : sg_error(SG_ERR_NOMEM, "model: %d layers", m->desc.n_layer);
}

static sg_status bind_layer(sg_model *m, int i)
{
	const sg_model_desc *d = &m->desc;
	const sg_layer_desc *l = &d->layers[i];
	sg_layer_weights *lw = &m->layers[i];
	int64_t D = d->dim, hd = l->head_dim, qd = (int64_t)l->n_head * hd, kd = (int64_t)l->n_kv_head * hd;
	int64_t F = l->ffn_dim, E = d->n_expert;
	want ws[32];
	int n = 0;
	/* hybrid layers: linear attention has no q/k/v (the family binds its own); a layer reading
	 * another's K/V has no k/v; k = v layers have no v; an output gate doubles q's rows */
	int attn = l->kind != SG_LAYER_LINEAR_ATTN, own_kv = attn && l->kv_source == i;
	int64_t qrows = d->attn_output_gate ? 2 * qd : qd;
	ws[n++] = (want){"blk.{L}.attn_norm.weight", SG_WANT_FLOAT, 1, {D}, 0, 1, &lw->attn_norm};
	if (attn) {
	ws[n++] = (want){"blk.{L}.attn_q.weight", SG_WANT_MATMUL, 2, {D, qrows}, 0, 0, &lw->wq};
	if (own_kv) ws[n++] = (want){"blk.{L}.attn_k.weight", SG_WANT_MATMUL, 2, {D, kd}, 0, 0, &lw->wk};
	if (own_kv && !l->k_eq_v) ws[n++] = (want){"blk.{L}.attn_v.weight", SG_WANT_MATMUL, 2, {D, kd}, 0, 0, &lw->wv};
	ws[n++] = (want){"blk.{L}.attn_output.weight", SG_WANT_MATMUL, 2, {qd, D}, 0, 0, &lw->wo};
	}
	if (d->attn_bias && attn) {
		ws[n++] = (want){"blk.{L}.attn_q.bias", SG_WANT_FLOAT, 1, {qd}, 0, 1, &lw->bq};
		ws[n++] = (want){"blk.{L}.attn_k.bias", SG_WANT_FLOAT, 1, {kd}, 0, 1, &lw->bk};
		ws[n++] = (want){"blk.{L}.attn_v.bias", SG_WANT_FLOAT, 1, {kd}, 0, 1, &lw->bv};
	}
	if (d->qk_norm && attn) {
		ws[n++] = (want){"blk.{L}.attn_q_norm.weight", SG_WANT_FLOAT, 1, {hd}, 0, 1, &lw->q_norm};
		if (own_kv) ws[n++] = (want){"blk.{L}.attn_k_norm.weight", SG_WANT_FLOAT, 1, {hd}, 0, 1, &lw->k_norm};
	}
	if (d->sandwich_norm) {
		ws[n++] = (want){"blk.{L}.post_attention_norm.weight", SG_WANT_FLOAT, 1, {D}, 0, 1, &lw->post_attn_norm};
		ws[n++] = (want){"blk.{L}.post_ffw_norm.weight", SG_WANT_FLOAT, 1, {D}, 0, 1, &lw->post_ffn_norm};
	}
	ws[n++] = (want){"blk.{L}.ffn_norm.weight", SG_WANT_FLOAT, 1, {D}, 0, 1, &lw->ffn_norm};
	if (l->moe) ws[n++] = (want){"blk.{L}.ffn_gate_inp.weight", SG_WANT_MATMUL, 2, {D, E}, 0, 0, &lw->router};
	if (!l->moe || d->moe_beside_dense) {
		ws[n++] = (want){"blk.{L}.ffn_gate.weight", SG_WANT_MATMUL, 2, {D, F}, 0, 0, &lw->gate};
		ws[n++] = (want){"blk.{L}.ffn_up.weight", SG_WANT_MATMUL, 2, {D, F}, 0, 0, &lw->up};
		ws[n++] = (want){"blk.{L}.ffn_down.weight", SG_WANT_MATMUL, 2, {F, D}, 0, 0, &lw->down};
	}
	sg_status st = bind_wants(m, ws, n, i);
	if (!st && l->moe)
		st = m->fam->experts ? m->fam->experts(m, i, lw) : sg_model_bind_experts(m, i, lw, NULL);
	return st;
}

sg_status sg_model_bind_layer(sg_model *m, int i) { return bind_layer(m, i); }

static sg_status bind_all(sg_model *m)
{
	const sg_model_desc *d = &m->desc;
	int64_t D = d->dim, V = d->n_vocab;
	m->layers = sg_calloc((size_t)d->n_layer, sizeof(sg_layer_weights));
	if (!m->layers) return sg_error(SG_ERR_NOMEM, "model: %d layers", d->n_layer);
	want g[] = {
		{"token_embd.weight", SG_WANT_MATMUL, 2, {D, V}, 0, 0, &m->tok_embd},
		{"output_norm.weight", SG_WANT_FLOAT, 1, {D}, 0, 1, &m->out_norm},
		{"output.weight", SG_WANT_MATMUL, 2, {D, V}, 1, 0, &m->output},
	};
	sg_status st = bind_wants(m, g, 3, -1);
	if (st) return st;
	/* the embedding's one row per token is not a decode cost; the head reads the whole matrix */
	const sg_tensor *te = sg_weights_lookup(m->w, m->fam->names, "token_embd.weight");
	m->weight_bytes -= te->nbytes;
	if (!m->output.data) {
		m->output = m->tok_embd;
		m->output.owned = 0;
		m->weight_bytes += te->nbytes;
	}
	for (int i = 0; i < d->n_layer && !st; i++) st = bind_layer(m, i);
	if (!st && m->fam->bind_extra) st = m->fam->bind_extra(m);
	return st;
}

sg_status sg_model_bind_wants(sg_model *m, const sg_want *ws, int n, int layer)
{
	want w[32];
	if (n < 1 || n > 32) return n ? sg_error(SG_ERR_INVALID_ARG, "model: %d weights in one bind (1 to 32)", n) : SG_OK;
	for (int i = 0; i < n; i++)
		w[i] = (want){ws[i].name, ws[i].type, ws[i].n_dims, {ws[i].ne[0], ws[i].ne[1], ws[i].ne[2]}, ws[i].optional,
			      ws[i].vector, ws[i].out};
	return bind_wants(m, w, n, layer);
}

sg_status sg_model_index_tensor(sg_model *m, const int32_t *v, int64_t n, sg_btensor *out)
{
	int64_t ne[4] = {n, 1, 1, 1};
	sg_status st = m->be->ops->tensor_alloc(m->be, SG_TYPE_I32, ne, out);
	return st ? st : m->be->ops->write(m->be, out, 0, v, sizeof(int32_t) * (size_t)n);
}

static const sg_family *find_family(sg_arch a)
{
	for (int f = 0; f < N_FAMILIES; f++)
		for (const sg_arch *p = families[f]->archs; *p; p++)
			if (*p == a) return families[f];
	return NULL;
}

static sg_status check_runnable(const sg_model_desc *d)
{
	/* linear attention, shared K/V, output gates, per-layer inputs and shared experts run in
	 * forward_hybrid.c, for the families that bind their weights */
	int hybrid_family = d->arch == SG_ARCH_QWEN3_NEXT || d->arch == SG_ARCH_GEMMA4;
	for (int i = 0; i < d->n_layer && !hybrid_family; i++) {
		const sg_layer_desc *l = &d->layers[i];
		if (l->kind == SG_LAYER_LINEAR_ATTN || l->kv_source != i || l->k_eq_v)
			return sg_error(SG_ERR_UNSUPPORTED, "unsupported architecture '%s': layer %d needs %s", d->model_type,
					i, l->kind == SG_LAYER_LINEAR_ATTN ? "linear attention" : "shared K/V");
	}
	if (d->norm != SG_NORM_RMS || d->mlp != SG_MLP_GATED ||
	    (!hybrid_family && (d->v_norm || d->attn_output_gate || d->per_layer_input_dim || d->shared_expert_ffn_dim)))
		return sg_error(SG_ERR_UNSUPPORTED, "unsupported architecture '%s' (this build runs %s)", d->model_type,
				supported);
	if (d->act != SG_ACT_SILU && d->act != SG_ACT_GELU_TANH)
		return sg_error(SG_ERR_UNSUPPORTED, "'%s': hidden activation %d has no gated kernel", d->model_type,
				(int)d->act);
	return SG_OK;
}

void sg_model_free(sg_model *m)
{
	if (!m) return;
	if (m->xsrc.free) m->xsrc.free(m->xsrc.ctx);
	memset(&m->xsrc, 0, sizeof m->xsrc);
	sg_free(m->xloc);
	sg_free(m->xloc_set);
	if (m->be) {
		sg_backend *be = m->be;
		int nl = m->desc.n_layer + (m->has_mtp ? 1 : 0);
		if (m->layers)
			for (int i = 0; i < nl; i++) {
				sg_btensor *t = (sg_btensor *)&m->layers[i];
				for (size_t k = 0; k < sizeof(sg_layer_weights) / sizeof(sg_btensor); k++)
					if (t[k].data) be->ops->tensor_free(be, &t[k]);
			}
		if (m->hy.layers)
			for (int i = 0; i < nl; i++) {
				sg_btensor *t = (sg_btensor *)&m->hy.layers[i];
				for (size_t k = 0; k < sizeof(sg_hybrid_layer) / sizeof(sg_btensor); k++)
					if (t[k].data) be->ops->tensor_free(be, &t[k]);
			}
		sg_btensor *hy[] = {&m->hy.pl_embd_full, &m->hy.pl_model_proj, &m->hy.pl_proj_norm, &m->hy.idx_q,
				    &m->hy.idx_gate, &m->hy.idx_qkv, &m->hy.idx_z, &m->hy.idx_b, &m->hy.idx_a,
				    &m->mtp_fc, &m->mtp_norm_emb, &m->mtp_norm_hid, &m->mtp_norm};
		for (size_t k = 0; k < sizeof(hy) / sizeof(hy[0]); k++)
			if (hy[k]->data) be->ops->tensor_free(be, hy[k]);
		if (m->output.data && m->output.data != m->tok_embd.data) be->ops->tensor_free(be, &m->output);
		if (m->tok_embd.data) be->ops->tensor_free(be, &m->tok_embd);
		if (m->out_norm.data) be->ops->tensor_free(be, &m->out_norm);
		if (!m->inner) sg_backend_free(be);
	}
	sg_free(m->layers);
	sg_free(m->hy.layers);
	sg_free(m->hy.layer_scalar);
	sg_model_desc_free(&m->desc);
	if (!m->inner) sg_weights_close(m->w);
	sg_free(m);
}

sg_status sg_model_open_backend(const char *who, const char *name, int n_threads, sg_backend **out)
{
	sg_backend_params bp = sg_backend_default_params();
	bp.n_threads = n_threads;
	if (strcmp(name, "auto")) return sg_backend_open(name, &bp, out);
	const char *accel = sg_backend_auto_accel(); /* NULL: no usable device, the CPU */
	if (accel && sg_backend_open(accel, &bp, out) == SG_OK) return SG_OK;
	if (accel) sg_log(SG_LOG_INFO, "%s: not on the %s backend (%s): running on the CPU", who, accel, sg_last_error());
	return sg_backend_open("cpu", &bp, out);
}

sg_status sg_model_load(const char *path, const sg_model_params *params, sg_model **out)
{
	return sg_model_load_ex(path, params, 0, out);
}

sg_status sg_model_load_ex(const char *path, const sg_model_params *params, int defer_experts, sg_model **out)
{
	*out = NULL;
	sg_model_params dp = sg_model_default_params();
	if (!params) params = &dp;
	const char *be_name = params->backend ? params->backend : sg_flag_str("SARAGOSSA_BACKEND");
	if (!be_name || !*be_name) be_name = "auto";
	if (!strcmp(be_name, "auto")) {
		/* the accelerator when this build has one, a device is usable and it takes the model
		 * (with experts deferred: its trunk, the slot cache then sized by the caller), else the CPU */
		sg_model_params p = *params;
		const char *accel = sg_backend_auto_accel(); /* NULL: the CPU, quietly */
		if (accel) {
			p.backend = accel;
			if (sg_model_load_ex(path, &p, defer_experts, out) == SG_OK) return SG_OK;
			sg_log(SG_LOG_INFO, "model: not on the %s backend (%s): loading on the CPU", accel, sg_last_error());
		}
		p.backend = "cpu";
		return sg_model_load_ex(path, &p, defer_experts, out);
	}
	if (!sg_backend_known(be_name))
		return sg_error(SG_ERR_UNSUPPORTED, "model: backend '%s' (this build runs: auto, %s)", be_name, sg_backend_names());
	sg_model *m = sg_calloc(1, sizeof(*m));
	if (!m) return sg_error(SG_ERR_NOMEM, "model: loading '%s'", path ? path : "");
	m->defer_experts = defer_experts;
	sg_status st = sg_weights_open(path, &m->w);
	if (!st) {
		if (m->w->format == SG_WEIGHTS_GGUF) st = sg_model_desc_from_gguf(&m->w->gguf, &m->desc);
		else if (!m->w->config)
			st = sg_error(SG_ERR_FORMAT, "model: '%s' has safetensors but no config.json beside them", path);
		else st = sg_model_desc_from_config(m->w->config, &m->desc);
	}
	if (!st && !(m->fam = find_family(m->desc.arch)))
		st = sg_error(SG_ERR_UNSUPPORTED, "unsupported architecture '%s' (%s): this build runs %s",
			      m->desc.model_type, sg_arch_name(m->desc.arch), supported);
	if (!st) st = check_runnable(&m->desc);
	if (!st) {
		sg_backend_params bp = sg_backend_default_params();
		bp.n_threads = params->n_threads;
		st = sg_backend_open(be_name, &bp, &m->be);
	}
	if (!st && defer_experts) {
		sg_backend_caps caps;
		sg_backend_caps_get(m->be, &caps);
		if (!caps.expert_table && !caps.expert_slots)
			st = sg_error(SG_ERR_UNSUPPORTED, "expert cache: the %s backend does not read routed experts from a slot cache: "
					  "run the model on the cpu backend or with --expert-cache off", be_name);
	}
	m->rope_neox = 1;
	if (!st && m->fam->adjust) st = m->fam->adjust(m);
	if (!st) st = bind_all(m);
	if (st) {
		sg_error_wrap(st, "model '%s'", path);
		sg_model_free(m);
		return st;
	}
	*out = m;
	return SG_OK;
}

sg_status sg_model_build_inner(sg_weights *w, sg_backend *be, const sg_family *fam, sg_model_desc *desc,
			       sg_model **out)
{
	*out = NULL;
	sg_model *m = sg_calloc(1, sizeof(*m));
	if (!m) return sg_error(SG_ERR_NOMEM, "model: an inner stack");
	m->desc = *desc;
	memset(desc, 0, sizeof(*desc));
	m->w = w;
	m->be = be;
	m->fam = fam;
	m->inner = 1;
	m->rope_neox = 1;
	sg_status st = check_runnable(&m->desc);
	int64_t D = m->desc.dim, V = m->desc.n_vocab;
	want g[] = {
		{"output_norm.weight", SG_WANT_FLOAT, 1, {D}, 0, 1, &m->out_norm},
		{"output.weight", SG_WANT_MATMUL, 2, {D, V}, 1, 0, &m->output},
	};
	if (!st) st = (m->layers = sg_calloc((size_t)m->desc.n_layer, sizeof(sg_layer_weights))) ? SG_OK
		       : sg_error(SG_ERR_NOMEM, "model: %d layers", m->desc.n_layer);
	if (!st) st = bind_wants(m, g, 2, -1);
	for (int i = 0; i < m->desc.n_layer && !st; i++) st = bind_layer(m, i);
	if (st) {
		sg_model_free(m);
		return st;
	}
	*out = m;
	return SG_OK;
}

int sg_model_n_vocab(const sg_model *m) { return m->desc.n_vocab; }
int sg_model_n_ctx_train(const sg_model *m) { return m->desc.max_ctx; }
const char *sg_model_arch(const sg_model *m) { return m->desc.model_type; }
const sg_gguf *sg_model_gguf(const sg_model *m) { return m->w->format == SG_WEIGHTS_GGUF ? &m->w->gguf : NULL; }
