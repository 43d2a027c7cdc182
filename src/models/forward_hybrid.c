/*
 * The layer path of the hybrid and next-generation decoders, over the same op table as
 * forward.c and driven by the same description: what a layer does follows from its fields, not
 * from the architecture's name.
 *
 *   linear-attention layer (kind SG_LAYER_LINEAR_ATTN, Qwen3-Next / Qwen3.5):
 *     h = norm(x); qkv, z, b, a = h W; qkv = silu(conv(qkv | conv state));
 *     o = gated delta rule(qkv, a, b | delta state); o = rmsnorm(o) w silu(z); x += o Wout
 *   attention layer: as forward.c plus an output gate (att *= sigmoid(gate), q_proj holding
 *     [q | gate] per head), K/V read from another layer's cache (kv_source), v = k (k_eq_v),
 *     a scale-free norm on v (v_norm)
 *   MLP: dense and/or routed experts; a shared expert gated by sigmoid(h w); Gemma 4's experts
 *     beside the dense MLP, routed from the residual with their own norms
 *   Gemma 4 per-layer input: x += norm(((gelu(x Wg) * pli) Wp)), pli built from the scaled
 *     embeddings and a per-layer embedding table; then x *= layer_scalar.
 *
 * Recurrent state (conv and delta-rule states) lives in the forward state, is reset when a
 * chunk starts at position 0, and is saved and restored by session snapshots.
 */
#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "models/forward_hybrid.h"

int sg_fwd_is_hybrid(const sg_model *m)
{
	const sg_model_desc *d = &m->desc;
	if (m->hy.layers) return 1;
	if (d->attn_output_gate || d->v_norm || d->per_layer_input_dim || d->shared_expert_ffn_dim || d->moe_beside_dense)
		return 1;
	for (int i = 0; i < d->n_layer; i++)
		if (d->layers[i].kind == SG_LAYER_LINEAR_ATTN || d->layers[i].kv_source != i || d->layers[i].k_eq_v) return 1;
	return 0;
}

static int64_t lin_channels(const sg_model_desc *d)
{
	return 2 * (int64_t)d->lin_n_k_head * d->lin_k_head_dim + (int64_t)d->lin_n_v_head * d->lin_v_head_dim;
}

sg_status sg_fwd_hybrid_init(const sg_model *m, sg_fwd_state *s)
{
	const sg_model_desc *d = &m->desc;
	sg_backend *be = m->be;
	const sg_backend_ops *o = be->ops;
	int chunk = s->chunk, L = d->n_layer;
	if (!o->short_conv || !o->gated_delta || !o->gated_rmsnorm || !o->sigmoid_mul || !o->gather_cols ||
	    !o->glu_split || !o->moe_weight_scale)
		return SG_FAIL(SG_ERR_UNSUPPORTED, "backend %s lacks the linear-attention stages", o->name);
	s->hybrid = 1;
	s->conv = sg_calloc((size_t)L, sizeof(sg_btensor));
	s->ssm = sg_calloc((size_t)L, sizeof(sg_btensor));
	if (!s->conv || !s->ssm) return SG_FAIL(SG_ERR_NOMEM, "%d layers", L);
	int64_t C = lin_channels(d), Vd = (int64_t)d->lin_n_v_head * d->lin_v_head_dim, K = d->lin_conv_kernel;
	int any_lin = 0;
	int64_t qd2 = 0;
	sg_status st = SG_OK;
	for (int i = 0; i < L && !st; i++) {
		const sg_layer_desc *l = &d->layers[i];
		if (l->kind == SG_LAYER_LINEAR_ATTN) {
			any_lin = 1;
			int64_t ce[4] = {C, K > 1 ? K - 1 : 1, 1, 1}, se[4] = {d->lin_v_head_dim, d->lin_k_head_dim, d->lin_n_v_head, 1};
			st = o->tensor_alloc(be, SG_TYPE_F32, ce, &s->conv[i]);
			if (!st) st = o->tensor_alloc(be, SG_TYPE_F32, se, &s->ssm[i]);
		} else if (d->attn_output_gate && 2 * (int64_t)l->n_head * l->head_dim > qd2) {
			qd2 = 2 * (int64_t)l->n_head * l->head_dim;
		}
		/* linear layers and layers reading another layer's K/V keep no cache of their own */
		if (l->kind == SG_LAYER_LINEAR_ATTN || l->kv_source != i) {
			o->tensor_free(be, &s->kv[i].k);
			o->tensor_free(be, &s->kv[i].v);
			s->kv[i].rows = 0;
		}
	}
	int64_t raw = qd2, raw2 = 1;
	if (any_lin) {
		if (C + Vd > raw) raw = C + Vd; /* fused qkvz */
		raw2 = 2 * (int64_t)d->lin_n_v_head;
		if (!st) st = sg_fwd_alloc2(be, SG_TYPE_F32, C, chunk, &s->lqkv);
		if (!st) st = sg_fwd_alloc2(be, SG_TYPE_F32, C, chunk, &s->lconv);
		if (!st) st = sg_fwd_alloc2(be, SG_TYPE_F32, Vd, chunk, &s->lz);
		if (!st) st = sg_fwd_alloc2(be, SG_TYPE_F32, Vd, chunk, &s->lo);
		if (!st) st = sg_fwd_alloc2(be, SG_TYPE_F32, d->lin_n_v_head, chunk, &s->la);
		if (!st) st = sg_fwd_alloc2(be, SG_TYPE_F32, d->lin_n_v_head, chunk, &s->lb);
	}
	if (!st && raw > 0) st = sg_fwd_alloc2(be, SG_TYPE_F32, raw, chunk, &s->raw);
	if (!st) st = sg_fwd_alloc2(be, SG_TYPE_F32, raw2, chunk, &s->raw2);
	if (!st && qd2) st = sg_fwd_alloc2(be, SG_TYPE_F32, qd2 / 2, chunk, &s->gate);
	if (!st) st = sg_fwd_alloc2(be, SG_TYPE_F32, d->dim, chunk, &s->sh);
	if (!st) st = sg_fwd_alloc2(be, SG_TYPE_F32, 1, chunk, &s->shg);
	/* the shared expert's hidden width may pass the widest MLP the base state sized g, u for */
	if (!st && d->shared_expert_ffn_dim > s->g.ne[0]) {
		o->tensor_free(be, &s->g);
		o->tensor_free(be, &s->u);
		st = sg_fwd_alloc2(be, SG_TYPE_F32, d->shared_expert_ffn_dim, chunk, &s->g);
		if (!st) st = sg_fwd_alloc2(be, SG_TYPE_F32, d->shared_expert_ffn_dim, chunk, &s->u);
	}
	if (!st && d->per_layer_input_dim > 0) {
		st = sg_fwd_alloc2(be, SG_TYPE_F32, d->dim, chunk, &s->x0);
		if (!st) st = sg_fwd_alloc2(be, SG_TYPE_F32, d->per_layer_input_dim, chunk, &s->pl);
		if (!st) st = sg_fwd_alloc2(be, SG_TYPE_F32, d->per_layer_input_dim, chunk, &s->pl2);
		if (!st) st = sg_fwd_alloc2(be, SG_TYPE_I32, chunk, L, &s->pl_ids);
	}
	if (!st && d->moe_beside_dense && d->n_expert > 0) {
		st = sg_fwd_alloc2(be, SG_TYPE_F32, 2 * (int64_t)d->moe_ffn_dim, (int64_t)chunk * d->n_expert_used, &s->gu);
		if (!st) st = sg_fwd_alloc2(be, SG_TYPE_F32, d->dim, chunk, &s->h2);
	}
	return st;
}

void sg_fwd_hybrid_free(const sg_model *m, sg_fwd_state *s)
{
	sg_backend *be = m->be;
	for (int i = 0; s->conv && i < m->desc.n_layer; i++) be->ops->tensor_free(be, &s->conv[i]);
	for (int i = 0; s->ssm && i < m->desc.n_layer; i++) be->ops->tensor_free(be, &s->ssm[i]);
	sg_free(s->conv);
	sg_free(s->ssm);
	s->conv = s->ssm = NULL;
	sg_btensor *bufs[] = {&s->lqkv, &s->lconv, &s->lz, &s->lo, &s->la, &s->lb, &s->raw, &s->raw2, &s->gate,
			      &s->sh, &s->shg, &s->x0, &s->pl, &s->pl2, &s->pl_ids, &s->gu, &s->h2};
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		if (bufs[i]->data) be->ops->tensor_free(be, bufs[i]);
	s->hybrid = 0;
}

static sg_status norm(const sg_model *m, const sg_btensor *x, const sg_btensor *w, sg_btensor *y)
{
	return m->be->ops->rmsnorm(m->be, x, w, m->desc.norm_eps, m->desc.norm_offset, y);
}

static sg_status linear_block(const sg_model *m, sg_fwd_state *s, int li, int n)
{
	const sg_model_desc *d = &m->desc;
	const sg_layer_weights *lw = &m->layers[li];
	const sg_hybrid_layer *hl = &m->hy.layers[li];
	sg_backend *be = m->be;
	const sg_backend_ops *o = be->ops;
	int Hv = d->lin_n_v_head, dv = d->lin_v_head_dim;
	int64_t C = lin_channels(d), Vd = (int64_t)Hv * dv;
	sg_btensor x = sg_fwd_view2(&s->x, d->dim, n), h = sg_fwd_view2(&s->xb, d->dim, n);
	sg_btensor qkv = sg_fwd_view2(&s->lqkv, C, n), cv = sg_fwd_view2(&s->lconv, C, n), z = sg_fwd_view2(&s->lz, Vd, n);
	sg_btensor a = sg_fwd_view2(&s->la, Hv, n), b = sg_fwd_view2(&s->lb, Hv, n), out = sg_fwd_view2(&s->lo, Vd, n);

	/* the norm and the input projections: one fused stage (the composition where a backend has
	 * none: the same ops in the same order) */
	sg_matmul_multi pr = {.x = &x, .norm = &lw->attn_norm, .eps = d->norm_eps, .norm_offset = d->norm_offset, .xn = &h};
	if (hl->lin_qkvz.data) {
		sg_btensor raw = sg_fwd_view2(&s->raw, C + Vd, n), raw2 = sg_fwd_view2(&s->raw2, 2 * (int64_t)Hv, n);
		pr.nw = 2, pr.w[0] = &hl->lin_qkvz, pr.w[1] = &hl->lin_ba, pr.y[0] = &raw, pr.y[1] = &raw2;
		SG_FWD_OK(sg_backend_matmul_multi(be, &pr));
		SG_FWD_OK(o->gather_cols(be, &raw, &m->hy.idx_qkv, &qkv));
		SG_FWD_OK(o->gather_cols(be, &raw, &m->hy.idx_z, &z));
		SG_FWD_OK(o->gather_cols(be, &raw2, &m->hy.idx_b, &b));
		SG_FWD_OK(o->gather_cols(be, &raw2, &m->hy.idx_a, &a));
	} else {
		pr.nw = 3, pr.w[0] = &hl->lin_qkv, pr.w[1] = &hl->lin_z, pr.w[2] = &hl->lin_b, pr.y[0] = &qkv, pr.y[1] = &z, pr.y[2] = &b;
		SG_FWD_OK(sg_backend_matmul_multi(be, &pr));
		SG_FWD_OK(o->matmul(be, &hl->lin_a, &h, NULL, &a));
	}
	SG_FWD_OK(o->short_conv(be, &qkv, &hl->conv_w, &s->conv[li], &cv));
	sg_gdn_params p = {d->lin_n_k_head, Hv, d->lin_k_head_dim, dv, 1e-6f};
	SG_FWD_OK(o->gated_delta(be, &cv, &a, &b, &hl->a_log, &hl->dt_bias, &p, &s->ssm[li], &out));
	sg_btensor oh = sg_fwd_view2(&s->lo, dv, (int64_t)n * Hv), zh = sg_fwd_view2(&s->lz, dv, (int64_t)n * Hv);
	SG_FWD_OK(o->gated_rmsnorm(be, &oh, &hl->lin_norm, &zh, d->norm_eps, &oh));
	sg_matmul_multi op = {.x = &out, .nw = 1, .w = {&hl->lin_out}, .y = {&h}, .residual = &x, .out = &x};
	return sg_backend_matmul_multi(be, &op);
}

static sg_status attention_block(const sg_model *m, sg_fwd_state *s, int li, int n)
{
	const sg_model_desc *d = &m->desc;
	const sg_layer_desc *l = &d->layers[li];
	const sg_layer_weights *lw = &m->layers[li];
	sg_backend *be = m->be;
	const sg_backend_ops *o = be->ops;
	int src = l->kv_source, own = src == li;
	int64_t hd = l->head_dim, qd = l->n_head * hd, kd = l->n_kv_head * hd;
	sg_btensor x = sg_fwd_view2(&s->x, d->dim, n), h = sg_fwd_view2(&s->xb, d->dim, n);
	sg_btensor q = sg_fwd_view2(&s->q, qd, n), k = sg_fwd_view2(&s->k, kd, n), v = sg_fwd_view2(&s->v, kd, n);
	sg_btensor att = sg_fwd_view2(&s->att, qd, n), pos = sg_fwd_view2(&s->pos, n, 1), gate = {0};

	/* the norm and q (with its gate), k, v: one fused stage */
	sg_btensor raw = sg_fwd_view2(&s->raw, 2 * qd, n);
	sg_matmul_multi pr = {.x = &x, .norm = &lw->attn_norm, .eps = d->norm_eps, .norm_offset = d->norm_offset, .xn = &h, .nw = 1,
	                      .w = {&lw->wq}, .bias = {sg_fwd_opt(&lw->bq)}, .y = {d->attn_output_gate ? &raw : &q}};
	if (own) {
		pr.w[pr.nw] = &lw->wk, pr.bias[pr.nw] = sg_fwd_opt(&lw->bk), pr.y[pr.nw++] = &k;
		if (!l->k_eq_v) pr.w[pr.nw] = &lw->wv, pr.bias[pr.nw] = sg_fwd_opt(&lw->bv), pr.y[pr.nw++] = &v;
	}
	SG_FWD_OK(sg_backend_matmul_multi(be, &pr));
	if (d->attn_output_gate) {
		gate = sg_fwd_view2(&s->gate, qd, n);
		SG_FWD_OK(o->gather_cols(be, &raw, &m->hy.idx_q, &q));
		SG_FWD_OK(o->gather_cols(be, &raw, &m->hy.idx_gate, &gate));
	}
	if (own && l->k_eq_v) SG_FWD_OK(o->scale(be, &k, 1.0f, &v)); /* v is the raw key projection */
	if (d->qk_norm) {
		sg_btensor qh = sg_fwd_view2(&s->q, hd, n * l->n_head), kh = sg_fwd_view2(&s->k, hd, n * l->n_kv_head);
		SG_FWD_OK(norm(m, &qh, &lw->q_norm, &qh));
		if (own) SG_FWD_OK(norm(m, &kh, &lw->k_norm, &kh));
	}
	if (own && d->v_norm) {
		sg_btensor vh = sg_fwd_view2(&s->v, hd, n * l->n_kv_head);
		SG_FWD_OK(o->rmsnorm(be, &vh, NULL, d->norm_eps, 0.0f, &vh));
	}
	sg_rope_params rp = sg_fwd_rope(m, l);
	sg_kv_layer *kv = &s->kv[src];
	if (l->n_rot > 0) {
		SG_FWD_OK(o->rope(be, &q, &pos, &rp));
		if (own) SG_FWD_OK(o->rope(be, &k, &pos, &rp));
	}
	if (own) {
		const sg_btensor *rows = &pos;
		sg_btensor ring_rows = sg_fwd_view2(&s->ring_rows, n, 1);
		if (kv->ring) {
			if (s->ring_rows_of != kv->rows) {
				int32_t r[n];
				for (int t = 0; t < n; t++) r[t] = (s->pos0 + t) % kv->rows;
				SG_FWD_OK(o->write(be, &ring_rows, 0, r, sizeof(int32_t) * (size_t)n));
				s->ring_rows_of = kv->rows;
			}
			rows = &ring_rows;
		}
		SG_FWD_OK(o->kv_store(be, &k, &v, rows, &kv->k, &kv->v));
	}
	sg_attn_params ap = {
		.scale = d->query_scale,
		.softcap = d->attn_softcap,
		.window = l->kind == SG_LAYER_SLIDING_ATTN ? l->sliding_window : 0,
		.causal = 1,
	};
	SG_FWD_OK(o->attention(be, &q, &kv->k, &kv->v, &pos, &ap, &att));
	if (gate.data) SG_FWD_OK(o->sigmoid_mul(be, &att, &gate, &att));
	if (!d->sandwich_norm) { /* o and the residual add: one fused stage */
		sg_matmul_multi wo = {.x = &att, .nw = 1, .w = {&lw->wo}, .y = {&h}, .residual = &x, .out = &x};
		return sg_backend_matmul_multi(be, &wo);
	}
	SG_FWD_OK(o->matmul(be, &lw->wo, &att, NULL, &h));
	SG_FWD_OK(norm(m, &h, &lw->post_attn_norm, &h));
	return o->add(be, &x, &h, &x);
}

/* Routed experts of h into out [n][D] (softmax router; Gemma 4: per-expert scale, fused
 * gate_up). rin is the router's input. */
static sg_status experts(const sg_model *m, sg_fwd_state *s, int li, int n, const sg_btensor *rin, const sg_btensor *h,
			 sg_btensor *out)
{
	const sg_model_desc *d = &m->desc;
	const sg_layer_weights *lw = &m->layers[li];
	const sg_hybrid_layer *hl = &m->hy.layers[li];
	sg_backend *be = m->be;
	const sg_backend_ops *o = be->ops;
	int k = d->n_expert_used;
	int64_t F = d->moe_ffn_dim;
	sg_btensor rl = sg_fwd_view2(&s->rl, d->n_expert, n), ids = sg_fwd_view2(&s->eids, k, n), w = sg_fwd_view2(&s->ew, k, n);
	sg_btensor g = sg_fwd_view2(&s->g, F, (int64_t)n * k), u = sg_fwd_view2(&s->u, F, (int64_t)n * k);
	sg_btensor ey = sg_fwd_view2(&s->ey, d->dim, (int64_t)n * k);
	SG_FWD_OK(o->matmul(be, &lw->router, rin, NULL, &rl));
	SG_FWD_OK(o->moe_route(be, &rl, SG_ROUTER_SOFTMAX, k, d->norm_topk_prob, &ids, &w));
	if (hl->expert_scale.data) SG_FWD_OK(o->moe_weight_scale(be, &w, &ids, &hl->expert_scale));
	SG_FWD_OK(sg_model_fetch_experts(m, li, &ids, h));
	if (hl->gate_up_exps.data) {
		sg_btensor gu = sg_fwd_view2(&s->gu, 2 * F, (int64_t)n * k);
		SG_FWD_OK(o->moe_matmul(be, &hl->gate_up_exps, h, &ids, &gu));
		SG_FWD_OK(o->glu_split(be, &gu, d->act, &g));
	} else {
		SG_FWD_OK(sg_backend_moe_glu(be, &lw->gate_exps, &lw->up_exps, h, &ids, d->act, &g, &u));
	}
	SG_FWD_OK(o->moe_matmul(be, &lw->down_exps, &g, &ids, &ey));
	return o->moe_combine(be, &ey, &w, out);
}

static sg_status mlp_block(const sg_model *m, sg_fwd_state *s, int li, int n)
{
	const sg_model_desc *d = &m->desc;
	const sg_layer_desc *l = &d->layers[li];
	const sg_layer_weights *lw = &m->layers[li];
	const sg_hybrid_layer *hl = &m->hy.layers[li];
	sg_backend *be = m->be;
	const sg_backend_ops *o = be->ops;
	sg_btensor x = sg_fwd_view2(&s->x, d->dim, n), h = sg_fwd_view2(&s->xb, d->dim, n), sh = sg_fwd_view2(&s->sh, d->dim, n);

	/* the norm with the stage after it where that is a fused one (the same ops where a backend
	 * composes it) */
	sg_matmul_multi gu = {.x = &x, .norm = &lw->ffn_norm, .eps = d->norm_eps, .norm_offset = d->norm_offset, .xn = &h, .nw = 2,
	                      .glu = 1, .act = d->act};
	if (l->moe && !d->moe_beside_dense) {
		if (hl->sh_gate.data) { /* the shared expert first: the routed output overwrites h */
			int64_t Fs = hl->sh_gate.ne[1];
			sg_btensor g = sg_fwd_view2(&s->g, Fs, n), u = sg_fwd_view2(&s->u, Fs, n), sg = sg_fwd_view2(&s->shg, 1, n);
			gu.w[0] = &hl->sh_gate, gu.w[1] = &hl->sh_up, gu.y[0] = &g, gu.y[1] = &u;
			SG_FWD_OK(sg_backend_matmul_multi(be, &gu));
			SG_FWD_OK(o->matmul(be, &hl->sh_down, &g, NULL, &sh));
			if (hl->sh_gate_inp.data) {
				SG_FWD_OK(o->matmul(be, &hl->sh_gate_inp, &h, NULL, &sg));
				SG_FWD_OK(o->sigmoid_mul(be, &sh, &sg, &sh));
			}
		} else {
			SG_FWD_OK(norm(m, &x, &lw->ffn_norm, &h));
		}
		SG_FWD_OK(experts(m, s, li, n, &h, &h, &h));
		if (hl->sh_gate.data) SG_FWD_OK(o->add(be, &h, &sh, &h));
	} else {
		int64_t F = lw->gate.ne[1];
		sg_btensor g = sg_fwd_view2(&s->g, F, n), u = sg_fwd_view2(&s->u, F, n);
		gu.w[0] = &lw->gate, gu.w[1] = &lw->up, gu.y[0] = &g, gu.y[1] = &u;
		SG_FWD_OK(sg_backend_matmul_multi(be, &gu));
		if (!l->moe && !d->sandwich_norm) { /* down and the residual add: one fused stage */
			sg_matmul_multi dn = {.x = &g, .nw = 1, .w = {&lw->down}, .y = {&h}, .residual = &x, .out = &x};
			return sg_backend_matmul_multi(be, &dn);
		}
		SG_FWD_OK(o->matmul(be, &lw->down, &g, NULL, &h));
		if (l->moe) { /* Gemma 4: experts beside the dense MLP, from the residual */
			SG_FWD_OK(norm(m, &h, &hl->post_ffn_norm1, &h));
			SG_FWD_OK(o->rmsnorm(be, &x, &hl->router_scale, d->norm_eps, 0.0f, &sh));
			SG_FWD_OK(o->scale(be, &sh, 1.0f / sqrtf((float)d->dim), &sh));
			/* the router input stays in sh until routing is done; the experts read e */
			sg_btensor rin = sh, e = sg_fwd_view2(&s->h2, d->dim, n);
			SG_FWD_OK(norm(m, &x, &hl->pre_ffn_norm2, &e));
			SG_FWD_OK(experts(m, s, li, n, &rin, &e, &sh));
			SG_FWD_OK(norm(m, &sh, &hl->post_ffn_norm2, &sh));
			SG_FWD_OK(o->add(be, &h, &sh, &h));
		}
	}
	if (d->sandwich_norm) SG_FWD_OK(norm(m, &h, &lw->post_ffn_norm, &h));
	return o->add(be, &x, &h, &x);
}

/* Gemma 4 per-layer input of layer li, added to the residual. */
static sg_status per_layer_block(const sg_model *m, sg_fwd_state *s, int li, int n)
{
	const sg_model_desc *d = &m->desc;
	const sg_hybrid_layer *hl = &m->hy.layers[li];
	sg_backend *be = m->be;
	const sg_backend_ops *o = be->ops;
	int64_t P = d->per_layer_input_dim;
	sg_btensor x = sg_fwd_view2(&s->x, d->dim, n), h = sg_fwd_view2(&s->xb, d->dim, n), x0 = sg_fwd_view2(&s->x0, d->dim, n);
	sg_btensor pl = sg_fwd_view2(&s->pl, P, n), pl2 = sg_fwd_view2(&s->pl2, P, n);
	sg_btensor ids = sg_btensor_rows_view(&s->pl_ids, li, 1);
	ids.ne[0] = n;
	ids.row_bytes = sizeof(int32_t) * (size_t)n;
	/* context part: this layer's rows of the model projection of the embeddings, normed */
	sg_btensor wp = sg_btensor_rows_view(&m->hy.pl_model_proj, li * P, P);
	SG_FWD_OK(o->matmul(be, &wp, &x0, NULL, &pl));
	SG_FWD_OK(o->scale(be, &pl, 1.0f / sqrtf((float)d->dim), &pl));
	SG_FWD_OK(o->rmsnorm(be, &pl, &m->hy.pl_proj_norm, d->norm_eps, d->norm_offset, &pl));
	/* token part: row id * n_layer + li of the per-layer table */
	SG_FWD_OK(o->embed(be, &m->hy.pl_embd, &ids, &pl2));
	SG_FWD_OK(o->scale(be, &pl2, sqrtf((float)P), &pl2));
	SG_FWD_OK(o->add(be, &pl, &pl2, &pl));
	SG_FWD_OK(o->scale(be, &pl, (float)(1.0 / sqrt(2.0)), &pl));
	SG_FWD_OK(o->matmul(be, &hl->pl_gate, &x, NULL, &pl2));
	SG_FWD_OK(o->glu(be, &pl2, &pl, d->act, &pl2));
	SG_FWD_OK(o->matmul(be, &hl->pl_proj, &pl2, NULL, &h));
	SG_FWD_OK(norm(m, &h, &hl->pl_norm, &h));
	return o->add(be, &x, &h, &x);
}

static sg_status zero(sg_backend *be, sg_btensor *t)
{
	size_t bytes = (size_t)sg_btensor_rows(t) * t->row_bytes;
	void *z = sg_calloc(1, bytes);
	if (!z) return SG_FAIL(SG_ERR_NOMEM, "%zu bytes", bytes);
	sg_status st = be->ops->write(be, t, 0, z, bytes);
	sg_free(z);
	return st;
}

sg_status sg_fwd_hybrid_attn_layer(const sg_model *m, sg_fwd_state *s, int li, int n)
{
	SG_FWD_OK(attention_block(m, s, li, n));
	return mlp_block(m, s, li, n);
}

sg_status sg_fwd_hybrid_layers(const sg_model *m, sg_fwd_state *s, const int32_t *tokens, int n, int pos0)
{
	const sg_model_desc *d = &m->desc;
	sg_backend *be = m->be;
	const sg_backend_ops *o = be->ops;
	int L = d->n_layer;
	if (pos0 == 0) /* a new sequence: the recurrent state starts from zero */
		for (int i = 0; i < L; i++) {
			if (s->conv[i].data) SG_FWD_OK(zero(be, &s->conv[i]));
			if (s->ssm[i].data) SG_FWD_OK(zero(be, &s->ssm[i]));
		}
	if (d->per_layer_input_dim > 0) {
		sg_btensor x = sg_fwd_view2(&s->x, d->dim, n), x0 = sg_fwd_view2(&s->x0, d->dim, n);
		SG_FWD_OK(o->scale(be, &x, 1.0f, &x0));
		int32_t *ids = sg_malloc(sizeof(int32_t) * (size_t)L * (size_t)n);
		if (!ids) return SG_FAIL(SG_ERR_NOMEM, "%d x %d ids", L, n);
		sg_status st = SG_OK;
		for (int t = 0; t < n && !st; t++)
			if (tokens[t] < 0 || tokens[t] >= m->hy.pl_vocab)
				st = SG_FAIL(SG_ERR_RANGE, "token %d is outside the per-layer vocabulary [0, %lld)", tokens[t],
					     (long long)m->hy.pl_vocab);
		for (int li = 0; li < L; li++)
			for (int t = 0; t < n; t++) ids[li * n + t] = tokens[t] * L + li;
		/* rows of n ids, one per layer, packed at the start of the [L][chunk] buffer */
		for (int li = 0; li < L && !st; li++)
			st = o->write(be, &s->pl_ids, (size_t)li * s->pl_ids.row_bytes, ids + (size_t)li * n,
				      sizeof(int32_t) * (size_t)n);
		sg_free(ids);
		if (st) return st;
	}
	for (int li = 0; li < L; li++) {
		if (d->layers[li].kind == SG_LAYER_LINEAR_ATTN) SG_FWD_OK(linear_block(m, s, li, n));
		else SG_FWD_OK(attention_block(m, s, li, n));
		SG_FWD_OK(mlp_block(m, s, li, n));
		if (d->per_layer_input_dim > 0) SG_FWD_OK(per_layer_block(m, s, li, n));
		float ls = m->hy.layer_scalar ? m->hy.layer_scalar[li] : 1.0f;
		if (ls != 1.0f) {
			sg_btensor x = sg_fwd_view2(&s->x, d->dim, n);
			SG_FWD_OK(o->scale(be, &x, ls, &x));
		}
	}
	return SG_OK;
}
