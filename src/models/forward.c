/*
 * The generic decoder forward over the backend op table. Every switch comes from the model
 * description (qk_norm, sandwich_norm, norm_offset, attn_bias, layer kinds, moe, softcaps,
 * embed_scale); nothing here asks which architecture runs.
 *
 * Per chunk of n tokens:
 *   x = embed(tokens) * embed_scale
 *   per layer:  h = norm(x); q,k,v = h W (+b); [qk-norm]; rope(q,k); cache <- k,v
 *               a = attention(q, cache) Wo; [post-norm]; x += a
 *               h = norm(x); m = mlp(h) (dense GLU or routed experts); [post-norm]; x += m
 *   logits = norm(x) Wout; [final softcap]
 */
#include "models/forward.h"

#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/flags.h"
#include "base/log.h"
#include "base/timer.h"
#include "models/forward_hybrid.h"

static int kv_rows_for(const sg_layer_desc *l, int n_ctx, int chunk, int *ring)
{
	*ring = 0;
	if (l->kind == SG_LAYER_SLIDING_ATTN && l->sliding_window > 0) {
		/* a chunk's newest key must not overwrite a row its oldest query still needs */
		int64_t need = (int64_t)l->sliding_window + chunk;
		if (need < n_ctx) {
			*ring = 1;
			return (int)need;
		}
	}
	return n_ctx;
}

sg_status sg_fwd_state_init(const sg_model *m, int n_ctx, int chunk, sg_type kv_type, sg_fwd_state *s)
{
	const sg_model_desc *d = &m->desc;
	sg_backend *be = m->be;
	memset(s, 0, sizeof(*s));
	s->n_ctx = n_ctx;
	s->chunk = chunk;
	s->kv_type = kv_type;
	sg_backend_caps caps;
	sg_backend_caps_get(be, &caps);
	s->capture = caps.capture;
	s->capture_hybrid = caps.capture_hybrid;
	if (n_ctx < 1 || chunk < 1) return SG_FAIL(SG_ERR_INVALID_ARG, "n_ctx %d, chunk %d (want >= 1)", n_ctx, chunk);
	if (kv_type != SG_TYPE_F32 && kv_type != SG_TYPE_F16)
		return SG_FAIL(SG_ERR_INVALID_ARG, "KV cache type %s (F32 or F16)", sg_type_name(kv_type));
	int n_kv = d->n_layer + (m->has_mtp ? 1 : 0); /* the MTP layer's cache after the stack's */
	s->kv = sg_calloc((size_t)n_kv, sizeof(sg_kv_layer));
	if (!s->kv) return SG_FAIL(SG_ERR_NOMEM, "%d layers", d->n_layer);
	int64_t qw = 0, kw = 0, fw = d->ffn_dim, kx = d->n_expert_used > 0 ? d->n_expert_used : 1;
	sg_status st = SG_OK;
	for (int i = 0; i < n_kv && !st; i++) {
		const sg_layer_desc *l = &d->layers[i];
		sg_kv_layer *kv = &s->kv[i];
		kv->rows = kv_rows_for(l, n_ctx, chunk, &kv->ring);
		int64_t ne[4] = {l->head_dim, l->n_kv_head, kv->rows, 1};
		st = be->ops->tensor_alloc(be, kv_type, ne, &kv->k);
		if (!st) st = be->ops->tensor_alloc(be, kv_type, ne, &kv->v);
		if ((int64_t)l->n_head * l->head_dim > qw) qw = (int64_t)l->n_head * l->head_dim;
		if ((int64_t)l->n_kv_head * l->head_dim > kw) kw = (int64_t)l->n_kv_head * l->head_dim;
		if (l->ffn_dim > fw) fw = l->ffn_dim;
	}
	if (d->moe_ffn_dim * kx > fw) fw = d->moe_ffn_dim * kx; /* g, u hold [k][F] per token */
	if (!st) st = sg_fwd_alloc2(be, SG_TYPE_I32, chunk, 1, &s->ids);
	if (!st) st = sg_fwd_alloc2(be, SG_TYPE_I32, chunk, 1, &s->pos);
	if (!st) st = sg_fwd_alloc2(be, SG_TYPE_I32, chunk, 1, &s->ring_rows);
	if (!st) st = sg_fwd_alloc2(be, SG_TYPE_F32, d->dim, chunk, &s->x);
	if (!st) st = sg_fwd_alloc2(be, SG_TYPE_F32, d->dim, chunk, &s->xb);
	if (!st) st = sg_fwd_alloc2(be, SG_TYPE_F32, qw, chunk, &s->q);
	if (!st) st = sg_fwd_alloc2(be, SG_TYPE_F32, kw, chunk, &s->k);
	if (!st) st = sg_fwd_alloc2(be, SG_TYPE_F32, kw, chunk, &s->v);
	if (!st) st = sg_fwd_alloc2(be, SG_TYPE_F32, qw, chunk, &s->att);
	if (!st) st = sg_fwd_alloc2(be, SG_TYPE_F32, fw, chunk, &s->g);
	if (!st) st = sg_fwd_alloc2(be, SG_TYPE_F32, fw, chunk, &s->u);
	/* one row: every-position logits ([chunk][V], 256 MiB for a 262k vocabulary) are allocated
	 * when first asked for */
	if (!st) st = sg_fwd_alloc2(be, SG_TYPE_F32, d->n_vocab, 1, &s->logits);
	if (!st) st = sg_fwd_alloc2(be, SG_TYPE_I32, 1, 1, &s->amax);
	if (!st && d->n_expert > 0) {
		st = sg_fwd_alloc2(be, SG_TYPE_F32, d->n_expert, chunk, &s->rl);
		if (!st) st = sg_fwd_alloc2(be, SG_TYPE_I32, kx, chunk, &s->eids);
		if (!st) st = sg_fwd_alloc2(be, SG_TYPE_F32, kx, chunk, &s->ew);
		if (!st) st = sg_fwd_alloc2(be, SG_TYPE_F32, d->dim, chunk * kx, &s->ey);
	}
	if (!st && sg_fwd_is_hybrid(m)) st = sg_fwd_hybrid_init(m, s);
	if (!st && m->has_mtp) st = sg_fwd_alloc2(be, SG_TYPE_F32, 2 * (int64_t)d->dim, chunk, &s->mtp_in);
	if (st) sg_fwd_state_free(m, s);
	return st;
}

static void verify_graphs_free(sg_backend *be, sg_fwd_state *s)
{
	for (int n = 0; n < SG_FWD_VERIFY_GRAPHS; n++) {
		sg_backend_graph_free(be, s->graph_v[n]);
		s->graph_v[n] = NULL;
	}
}

void sg_fwd_state_free(const sg_model *m, sg_fwd_state *s)
{
	sg_backend *be = m->be;
	sg_fwd_hybrid_free(m, s);
	sg_backend_graph_free(be, s->graph);
	sg_backend_graph_free(be, s->graph_tc);
	verify_graphs_free(be, s);
	if (s->kv)
		for (int i = 0; i < m->desc.n_layer + (m->has_mtp ? 1 : 0); i++) {
			be->ops->tensor_free(be, &s->kv[i].k);
			be->ops->tensor_free(be, &s->kv[i].v);
		}
	sg_free(s->kv);
	sg_btensor *bufs[] = {&s->ids, &s->pos, &s->ring_rows, &s->x, &s->xb, &s->q, &s->k, &s->v, &s->att,
			      &s->g, &s->u, &s->rl, &s->eids, &s->ew, &s->ey, &s->logits, &s->amax, &s->amax_rows, &s->tc_ids, &s->tc_out,
			      &s->mtp_in};
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		if (bufs[i]->data) be->ops->tensor_free(be, bufs[i]);
	memset(s, 0, sizeof(*s));
}

/* x <- x / rms(x) * (w + offset) over rows of width w->ne[0]. */
static sg_status norm(const sg_model *m, const sg_btensor *x, const sg_btensor *w, sg_btensor *y)
{
	return m->be->ops->rmsnorm(m->be, x, w, m->desc.norm_eps, m->desc.norm_offset, y);
}

static sg_status attention_block(const sg_model *m, sg_fwd_state *s, int li, int n)
{
	const sg_model_desc *d = &m->desc;
	const sg_layer_desc *l = &d->layers[li];
	const sg_layer_weights *lw = &m->layers[li];
	sg_backend *be = m->be;
	const sg_backend_ops *o = be->ops;
	int64_t hd = l->head_dim, qd = l->n_head * hd, kd = l->n_kv_head * hd;
	sg_btensor x = sg_fwd_view2(&s->x, d->dim, n), h = sg_fwd_view2(&s->xb, d->dim, n);
	sg_btensor q = sg_fwd_view2(&s->q, qd, n), k = sg_fwd_view2(&s->k, kd, n), v = sg_fwd_view2(&s->v, kd, n);
	sg_btensor att = sg_fwd_view2(&s->att, qd, n), pos = sg_fwd_view2(&s->pos, n, 1);

	/* norm + q, k, v: one fused stage (a GPU runs it as two kernels for one token) */
	sg_matmul_multi qkv = {
		.x = &x, .norm = &lw->attn_norm, .eps = d->norm_eps, .norm_offset = d->norm_offset, .xn = &h, .nw = 3,
		.w = {&lw->wq, &lw->wk, &lw->wv}, .bias = {sg_fwd_opt(&lw->bq), sg_fwd_opt(&lw->bk), sg_fwd_opt(&lw->bv)},
		.y = {&q, &k, &v},
	};
	SG_FWD_OK(sg_backend_matmul_multi(be, &qkv));
	sg_kv_layer *kv = &s->kv[li];
	/* a backend's fused stage: qk-norm, both ropes and the cache store in one go (a ring cache
	 * stores at rows that differ from the positions, so it keeps the separate ops) */
	int fuse = !kv->ring && l->n_rot > 0 && (!d->qk_norm || o->attn_prep_norm);
	if (d->qk_norm && !fuse) {
		sg_btensor qh = sg_fwd_view2(&s->q, hd, n * l->n_head), kh = sg_fwd_view2(&s->k, hd, n * l->n_kv_head);
		SG_FWD_OK(norm(m, &qh, &lw->q_norm, &qh));
		SG_FWD_OK(norm(m, &kh, &lw->k_norm, &kh));
	}
	sg_rope_params rp = sg_fwd_rope(m, l);
	const sg_btensor *rows = &pos;
	sg_btensor ring_rows = sg_fwd_view2(&s->ring_rows, n, 1);
	if (kv->ring) {
		if (s->ring_rows_of != kv->rows) { /* positions are known on the host: no round trip */
			int32_t r[n];
			for (int t = 0; t < n; t++) r[t] = (s->pos0 + t) % kv->rows;
			SG_FWD_OK(o->write(be, &ring_rows, 0, r, sizeof(int32_t) * (size_t)n));
			s->ring_rows_of = kv->rows;
		}
		rows = &ring_rows;
	}
	sg_attn_params ap = {
		.scale = d->query_scale,
		.softcap = d->attn_softcap,
		.window = l->kind == SG_LAYER_SLIDING_ATTN ? l->sliding_window : 0,
		/* a ring cache is read as causal because the window is shorter than it; a bidirectional
		 * stack (one chunk from position 0, never a ring) sees both sides, its window too */
		.causal = !d->bidirectional,
		.feeds_matmul = !d->sandwich_norm,
		.rows_live = s->pos0 + n,
	};
	if (fuse && o->attention_prep) { /* the prep inside the attention where the backend can */
		const sg_btensor *qn = d->qk_norm ? &lw->q_norm : NULL, *kn = d->qk_norm ? &lw->k_norm : NULL;
		SG_FWD_OK(o->attention_prep(be, &q, &k, &v, &pos, &rp, qn, kn, d->norm_eps, d->norm_offset, &kv->k, &kv->v, &ap, &att));
	} else {
		if (fuse && d->qk_norm) {
			SG_FWD_OK(o->attn_prep_norm(be, &q, &k, &v, &pos, &rp, &lw->q_norm, &lw->k_norm, d->norm_eps, d->norm_offset, &kv->k, &kv->v));
		} else if (fuse) {
			SG_FWD_OK(sg_backend_attn_prep(be, &q, &k, &v, &pos, &rp, &kv->k, &kv->v));
		} else {
			if (l->n_rot > 0) {
				SG_FWD_OK(o->rope(be, &q, &pos, &rp));
				SG_FWD_OK(o->rope(be, &k, &pos, &rp));
			}
			SG_FWD_OK(o->kv_store(be, &k, &v, rows, &kv->k, &kv->v));
		}
		SG_FWD_OK(o->attention(be, &q, &kv->k, &kv->v, &pos, &ap, &att));
	}
	if (d->sandwich_norm) {
		SG_FWD_OK(o->matmul(be, &lw->wo, &att, NULL, &h));
		SG_FWD_OK(norm(m, &h, &lw->post_attn_norm, &h));
		return o->add(be, &x, &h, &x);
	}
	sg_matmul_multi wo = {.x = &att, .nw = 1, .w = {&lw->wo}, .y = {&h}, .residual = &x, .out = &x, .x_fed = 1};
	return sg_backend_matmul_multi(be, &wo);
}

static sg_status mlp_block(const sg_model *m, sg_fwd_state *s, int li, int n)
{
	const sg_model_desc *d = &m->desc;
	const sg_layer_desc *l = &d->layers[li];
	const sg_layer_weights *lw = &m->layers[li];
	sg_backend *be = m->be;
	const sg_backend_ops *o = be->ops;
	sg_btensor x = sg_fwd_view2(&s->x, d->dim, n), h = sg_fwd_view2(&s->xb, d->dim, n);

	if (!l->moe) {
		int64_t F = lw->gate.ne[1];
		sg_btensor g = sg_fwd_view2(&s->g, F, n), u = sg_fwd_view2(&s->u, F, n);
		sg_matmul_multi gu = {
			.x = &x, .norm = &lw->ffn_norm, .eps = d->norm_eps, .norm_offset = d->norm_offset, .xn = &h, .nw = 2,
			.w = {&lw->gate, &lw->up}, .y = {&g, &u}, .glu = 1, .act = d->act,
		};
		SG_FWD_OK(sg_backend_matmul_multi(be, &gu));
		if (d->sandwich_norm) {
			SG_FWD_OK(o->matmul(be, &lw->down, &g, NULL, &h));
			SG_FWD_OK(norm(m, &h, &lw->post_ffn_norm, &h));
			return o->add(be, &x, &h, &x);
		}
		sg_matmul_multi down = {.x = &g, .nw = 1, .w = {&lw->down}, .y = {&h}, .residual = &x, .out = &x};
		return sg_backend_matmul_multi(be, &down);
	}
	{
		int k = d->n_expert_used;
		int64_t F = lw->gate_exps.ne[1];
		sg_btensor rl = sg_fwd_view2(&s->rl, d->n_expert, n), ids = sg_fwd_view2(&s->eids, k, n), w = sg_fwd_view2(&s->ew, k, n);
		sg_btensor g = sg_fwd_view2(&s->g, F, (int64_t)n * k), u = sg_fwd_view2(&s->u, F, (int64_t)n * k);
		sg_btensor ey = sg_fwd_view2(&s->ey, d->dim, (int64_t)n * k);
		/* the norm and the router one fused stage: a GPU hands the normalised x to the experts
		 * already rounded to 8 bits */
		sg_matmul_multi router = {.x = &x,
		                          .norm = &lw->ffn_norm,
		                          .eps = d->norm_eps,
		                          .norm_offset = d->norm_offset,
		                          .xn = &h,
		                          .nw = 1,
		                          .w = {&lw->router},
		                          .y = {&rl},
		                          .feeds_moe = 1};
		SG_FWD_OK(sg_backend_matmul_multi(be, &router));
		SG_FWD_OK(o->moe_route(be, &rl, SG_ROUTER_SOFTMAX, k, d->norm_topk_prob, &ids, &w));
		SG_FWD_OK(sg_model_fetch_experts(m, li, &ids, &h));
		SG_FWD_OK(sg_backend_moe_glu(be, &lw->gate_exps, &lw->up_exps, &h, &ids, d->act, &g, &u));
		SG_FWD_OK(o->moe_matmul(be, &lw->down_exps, &g, &ids, &ey));
		if (!d->sandwich_norm) return sg_backend_moe_combine_add(be, &ey, &w, &x, &x, &h);
		SG_FWD_OK(o->moe_combine(be, &ey, &w, &h));
	}
	if (d->sandwich_norm) SG_FWD_OK(norm(m, &h, &lw->post_ffn_norm, &h));
	return o->add(be, &x, &h, &x);
}

/* Everything of a chunk after its ids and positions are on the device: the layers and the
 * logits `mode` asks for. No host copies (outside ring caches), so a one-token step can be
 * recorded as a graph. */
static sg_status layers_and_head(const sg_model *m, sg_fwd_state *s, const int32_t *tokens, int n, int pos0,
				 sg_logits_mode mode);

static sg_status forward_body(const sg_model *m, sg_fwd_state *s, const int32_t *tokens, int n, int pos0, sg_logits_mode mode)
{
	const sg_model_desc *d = &m->desc;
	sg_backend *be = m->be;
	const sg_backend_ops *o = be->ops;
	sg_btensor ids = sg_fwd_view2(&s->ids, n, 1), x = sg_fwd_view2(&s->x, d->dim, n);
	SG_FWD_OK(o->embed(be, &m->tok_embd, &ids, &x));
	if (d->embed_scale != 1.0f) SG_FWD_OK(o->scale(be, &x, d->embed_scale, &x));
	return layers_and_head(m, s, tokens, n, pos0, mode);
}

/* The layers over the chunk's embeddings in s->x, then the logits `mode` asks for. */
static sg_status layers_and_head(const sg_model *m, sg_fwd_state *s, const int32_t *tokens, int n, int pos0,
				 sg_logits_mode mode)
{
	const sg_model_desc *d = &m->desc;
	sg_backend *be = m->be;
	const sg_backend_ops *o = be->ops;
	if (s->hybrid) SG_FWD_OK(sg_fwd_hybrid_layers(m, s, tokens, n, pos0));
	for (int li = 0; li < d->n_layer && !s->hybrid; li++) {
		SG_FWD_OK(attention_block(m, s, li, n));
		SG_FWD_OK(mlp_block(m, s, li, n));
	}
	if (mode == SG_LOGITS_NONE) return SG_OK;
	if (mode == SG_LOGITS_ALL && s->logits.ne[1] < n) {
		sg_backend_graph_free(be, s->graph); /* they write the old buffer */
		sg_backend_graph_free(be, s->graph_tc);
		s->graph = s->graph_tc = NULL;
		verify_graphs_free(be, s);
		o->tensor_free(be, &s->logits);
		/* rows for this step rounded up to a power of two, at least 32 (a verify step of the
		 * default 16 guesses has 17), not the whole chunk: n_vocab x chunk floats (311 MB for a 152k
		 * vocabulary and 512 tokens) that the first verify step allocated and zeroed for its rows */
		int64_t rows = 32;
		while (rows < n) rows *= 2;
		SG_FWD_OK(sg_fwd_alloc2(be, SG_TYPE_F32, d->n_vocab, rows < s->chunk ? rows : s->chunk, &s->logits));
	}
	/* only the rows whose logits are wanted go through the final norm and the head */
	int r0 = mode == SG_LOGITS_ALL ? 0 : n - 1, nr = n - r0;
	sg_btensor xl = sg_btensor_rows_view(&s->x, r0, nr), h = sg_fwd_view2(&s->xb, d->dim, nr);
	sg_btensor lg = sg_fwd_view2(&s->logits, d->n_vocab, nr);
	/* the final norm and the head: one fused stage (a GPU runs the 8-bit GEMV kernels on it) */
	sg_matmul_multi head = {.x = &xl, .norm = &m->out_norm, .eps = d->norm_eps, .norm_offset = d->norm_offset, .xn = &h, .nw = 1,
				.w = {&m->output}, .y = {&lg}};
	SG_FWD_OK(sg_backend_matmul_multi(be, &head));
	if (d->final_softcap > 0) SG_FWD_OK(o->softcap(be, &lg, d->final_softcap, &lg));
	return SG_OK;
}

/* The rows every ring cache of the state has (0: no ring cache, -1: rings of several sizes). */
static int ring_size(const sg_model *m, const sg_fwd_state *s)
{
	int r = 0;
	for (int i = 0; i < m->desc.n_layer; i++)
		if (s->kv[i].ring && s->kv[i].rows) { /* a layer reading another's cache has none */
			if (r && r != s->kv[i].rows) return -1;
			r = s->kv[i].rows;
		}
	return r;
}

/* Copies a chunk's ids and positions to the device, and the ring rows of the positions when the
 * ring caches share one size (then no layer writes them: a decode step stays free of host copies
 * and can be recorded). */
static sg_status forward_inputs(const sg_model *m, sg_fwd_state *s, const int32_t *tokens, int n, int pos0)
{
	sg_backend *be = m->be;
	/* every token must see the keys of the whole input, which only one chunk from position 0
	 * has: a later chunk's keys would be missing from the earlier tokens' attention */
	if (m->desc.bidirectional && pos0 != 0)
		return SG_FAIL(SG_ERR_UNSUPPORTED, "%s has bidirectional attention (an embedding model): it runs one chunk from position "
						   "0 and does not generate (asked: position %d)",
			       m->desc.model_type, pos0);
	int32_t p[n];
	for (int t = 0; t < n; t++) p[t] = pos0 + t;
	sg_btensor ids = sg_fwd_view2(&s->ids, n, 1), pos = sg_fwd_view2(&s->pos, n, 1);
	SG_FWD_OK(be->ops->write(be, &ids, 0, tokens, sizeof(int32_t) * (size_t)n));
	SG_FWD_OK(be->ops->write(be, &pos, 0, p, sizeof(int32_t) * (size_t)n));
	s->ring_rows_of = 0;
	s->pos0 = pos0;
	int R = ring_size(m, s);
	if (R > 0) {
		for (int t = 0; t < n; t++) p[t] = (pos0 + t) % R;
		sg_btensor rr = sg_fwd_view2(&s->ring_rows, n, 1);
		SG_FWD_OK(be->ops->write(be, &rr, 0, p, sizeof(int32_t) * (size_t)n));
		s->ring_rows_of = R;
	}
	return SG_OK;
}

sg_status sg_forward(const sg_model *m, sg_fwd_state *s, const int32_t *tokens, int n, int pos0, sg_logits_mode mode)
{
	if (n < 1 || n > s->chunk || pos0 < 0 || pos0 + n > s->n_ctx)
		return SG_FAIL(SG_ERR_INVALID_ARG, "%d tokens at position %d (chunk %d, context %d)", n, pos0, s->chunk,
			       s->n_ctx);
	SG_FWD_OK(forward_inputs(m, s, tokens, n, pos0));
	return forward_body(m, s, tokens, n, pos0, mode);
}

sg_status sg_forward_embd(const sg_model *m, sg_fwd_state *s, const float *embd, int n, int pos0, sg_logits_mode mode)
{
	const sg_model_desc *d = &m->desc;
	sg_backend *be = m->be;
	if (s->hybrid) return SG_FAIL(SG_ERR_UNSUPPORTED, "embeddings input to a hybrid (recurrent) stack");
	if (n < 1 || n > s->chunk || pos0 < 0 || pos0 + n > s->n_ctx)
		return SG_FAIL(SG_ERR_INVALID_ARG, "%d rows at position %d (chunk %d, context %d)", n, pos0, s->chunk, s->n_ctx);
	if (mode != SG_LOGITS_NONE && !m->output.data) return SG_FAIL(SG_ERR_INVALID_ARG, "logits of a stack without a head");
	int32_t zero[n];
	memset(zero, 0, sizeof(zero));
	SG_FWD_OK(forward_inputs(m, s, zero, n, pos0));
	sg_btensor x = sg_fwd_view2(&s->x, d->dim, n);
	SG_FWD_OK(be->ops->write(be, &x, 0, embd, sizeof(float) * (size_t)n * (size_t)d->dim));
	SG_FWD_OK(layers_and_head(m, s, NULL, n, pos0, mode));
	if (mode != SG_LOGITS_NONE) return SG_OK;
	sg_btensor xl = sg_btensor_rows_view(&s->x, n - 1, 1), h = sg_fwd_view2(&s->xb, d->dim, 1);
	return be->ops->rmsnorm(be, &xl, &m->out_norm, d->norm_eps, d->norm_offset, &h);
}

sg_status sg_forward_hidden_last(const sg_model *m, sg_fwd_state *s, const int32_t *tokens, int n, float *out)
{
	const sg_model_desc *d = &m->desc;
	sg_backend *be = m->be;
	if (s->hybrid) return SG_FAIL(SG_ERR_UNSUPPORTED, "hidden states of a hybrid (recurrent) stack");
	if (n < 1 || n > s->n_ctx) return SG_FAIL(SG_ERR_INVALID_ARG, "%d tokens (context %d)", n, s->n_ctx);
	int k = 0;
	for (int p = 0; p < n; p += k) {
		k = n - p < s->chunk ? n - p : s->chunk;
		SG_FWD_OK(sg_forward(m, s, tokens + p, k, p, SG_LOGITS_NONE));
	}
	/* the last chunk's last row through the final norm, as the head would see it */
	sg_btensor xl = sg_btensor_rows_view(&s->x, k - 1, 1), h = sg_fwd_view2(&s->xb, d->dim, 1);
	SG_FWD_OK(be->ops->rmsnorm(be, &xl, &m->out_norm, d->norm_eps, d->norm_offset, &h));
	return be->ops->read(be, &h, 0, out, sizeof(float) * (size_t)d->dim);
}

int sg_fwd_decode_graphs(const sg_model *m, const sg_fwd_state *s)
{
	/* routed experts from a slot cache: each MoE layer's ids are read back mid-step */
	if (s->graph_off || !s->capture || m->xsrc.fetch) return 0;
	/* hybrid stacks: their recurrent state lives in device tensors each step updates in place, so
	 * a replay continues it (caps.capture_hybrid); Gemma 4's per-layer inputs are rows the host
	 * computes from the token and copies mid-step, so those stacks stay per-op */
	if (s->hybrid && (!s->capture_hybrid || m->desc.per_layer_input_dim > 0)) return 0;
	/* ring caches of several sizes: a layer's rows are written from the host mid-step */
	return ring_size(m, s) >= 0;
}

/* The decode step's ops after its inputs: layers, last-token logits, then their argmax (tc = 0)
 * or their sampling candidates. */
static sg_status decode_body(const sg_model *m, sg_fwd_state *s, const int32_t *token, int pos, int tc)
{
	SG_FWD_OK(forward_body(m, s, token, 1, pos, SG_LOGITS_LAST));
	sg_btensor lg = sg_fwd_view2(&s->logits, m->desc.n_vocab, 1);
	if (tc) return m->be->ops->top_candidates(m->be, &lg, s->tc_k, s->tc_m ? &s->tc_ids : NULL, &s->tc_out);
	return m->be->ops->argmax(m->be, &lg, &s->amax);
}

/* A step's tokens: one decode step (n = 1; tc: ending in sampling candidates) or an exact step
 * of n tokens with every position's logits. */
typedef struct {
	const int32_t *tokens;
	int n, pos, tc;
} fwd_step;

static sg_status step_body(const sg_model *m, sg_fwd_state *s, const fwd_step *t)
{
	if (t->n == 1) return decode_body(m, s, t->tokens, t->pos, t->tc);
	return forward_body(m, s, t->tokens, t->n, t->pos, SG_LOGITS_ALL);
}

/* A step whose inputs are on the device (forward_inputs) through the graph slot *gp: replayed
 * when recorded and not stale; else run per-op (which also sizes the scratch the recording needs:
 * nothing may grow while recording) and, with graphs, recorded for the next such step. The
 * recording executes nothing; the inputs stay in s->ids / s->pos, rewritten before every launch.
 * A failed recording sets *off: later steps of the kind stay per-op. */
static sg_status recorded_step(const sg_model *m, sg_fwd_state *s, const fwd_step *t, int graphs, sg_backend_graph **gp,
			       int *off, const char *what)
{
	sg_backend *be = m->be;
	if (graphs && *gp) {
		if (!be->ops->graph_stale(be, *gp)) return be->ops->graph_replay(be, *gp);
		SG_DEBUG("%s %s graph of %d tokens: stale (the backend's scratch moved), recorded again", be->ops->name, what, t->n);
		sg_backend_graph_free(be, *gp);
		*gp = NULL;
	}
	SG_FWD_OK(step_body(m, s, t));
	if (!graphs) return SG_OK;
	const uint64_t t0 = sg_time_ns();
	sg_backend_graph *g = NULL;
	sg_status st = be->ops->capture_begin(be);
	if (!st) {
		st = step_body(m, s, t);
		if (!st) st = be->ops->capture_end(be, &g);
		else be->ops->capture_abort(be);
	}
	if (st) { /* this step already ran */
		SG_WARN("%s %s graph: recording failed (%s); running op by op", be->ops->name, what, sg_last_error());
		*off = 1;
	} else {
		*gp = g;
		SG_DEBUG("%s %s graph of %d tokens recorded in %.3f ms", be->ops->name, what, t->n, (double)(sg_time_ns() - t0) / 1e6);
	}
	return SG_OK;
}

/* One decode step through the graph slot *gp (recorded on first use, replayed after). */
static sg_status decode_step(const sg_model *m, sg_fwd_state *s, int32_t token, int pos, int tc, sg_backend_graph **gp)
{
	if (pos < 0 || pos + 1 > s->n_ctx)
		return SG_FAIL(SG_ERR_INVALID_ARG, "a token at position %d (context %d)", pos, s->n_ctx);
	SG_FWD_OK(forward_inputs(m, s, &token, 1, pos));
	/* a hybrid step at position 0 first zeroes the recurrent state from the host: per-op, and
	 * neither recorded nor replayed */
	int graphs = sg_fwd_decode_graphs(m, s) && !(s->hybrid && pos == 0);
	const fwd_step t = {.tokens = &token, .n = 1, .pos = pos, .tc = tc};
	return recorded_step(m, s, &t, graphs, gp, &s->graph_off, "decode");
}

sg_status sg_forward_exact(const sg_model *m, sg_fwd_state *s, const int32_t *tokens, int n, int pos0)
{
	/* the logits buffer grows (and drops every recording) on the first step of n tokens */
	const int64_t after = sg_flag_int("SARAGOSSA_VERIFY_GRAPHS");
	if (n < 2 || n >= SG_FWD_VERIFY_GRAPHS || s->graph_v_off || s->hybrid || m->has_mtp || s->logits.ne[1] < n ||
	    !sg_fwd_decode_graphs(m, s) || after <= 0)
		return sg_forward(m, s, tokens, n, pos0, SG_LOGITS_ALL);
	/* a token count is recorded once it has run `after` times op by op: a recording costs several
	 * steps' time, which one answer's few steps of a count do not win back */
	if (!s->graph_v[n] && ++s->graph_v_uses[n] < after) return sg_forward(m, s, tokens, n, pos0, SG_LOGITS_ALL);
	if (pos0 < 0 || n > s->chunk || pos0 + n > s->n_ctx)
		return SG_FAIL(SG_ERR_INVALID_ARG, "%d tokens at position %d (chunk %d, context %d)", n, pos0, s->chunk,
			       s->n_ctx);
	SG_FWD_OK(forward_inputs(m, s, tokens, n, pos0));
	const fwd_step t = {.tokens = tokens, .n = n, .pos = pos0};
	return recorded_step(m, s, &t, 1, &s->graph_v[n], &s->graph_v_off, "verify");
}

sg_status sg_forward_rows_argmax(const sg_model *m, sg_fwd_state *s, int n, int32_t *ids)
{
	sg_backend *be = m->be;
	if (n < 1 || n > s->chunk || s->logits.ne[1] < n)
		return SG_FAIL(SG_ERR_INVALID_ARG, "the argmax of %d rows (chunk %d, %lld rows of logits)", n, s->chunk, (long long)s->logits.ne[1]);
	if (!be->ops->argmax) return sg_error(SG_ERR_UNSUPPORTED, "the %s backend has no argmax", be->ops->name);
	if (!s->amax_rows.data) SG_FWD_OK(sg_fwd_alloc2(be, SG_TYPE_I32, s->chunk, 1, &s->amax_rows));
	sg_btensor lg = sg_fwd_view2(&s->logits, m->desc.n_vocab, n), out = sg_fwd_view2(&s->amax_rows, n, 1);
	SG_FWD_OK(be->ops->argmax(be, &lg, &out));
	return be->ops->read(be, &s->amax_rows, 0, ids, sizeof(int32_t) * (size_t)n);
}

sg_status sg_forward_decode(const sg_model *m, sg_fwd_state *s, int32_t token, int pos)
{
	return decode_step(m, s, token, pos, 0, &s->graph);
}

sg_status sg_forward_decode_top(const sg_model *m, sg_fwd_state *s, int32_t token, int pos, int k, const int32_t *ids,
				int mids)
{
	sg_backend *be = m->be;
	if (!be->ops->top_candidates) return sg_error(SG_ERR_UNSUPPORTED, "the %s backend has no sampling candidates", be->ops->name);
	if (k < 1 || k > m->desc.n_vocab || mids < 0 || (mids && !ids))
		return SG_FAIL(SG_ERR_INVALID_ARG, "%d candidates and %d ids for a vocabulary of %d", k, mids, m->desc.n_vocab);
	if (k != s->tc_k || mids != s->tc_m) {
		sg_backend_graph_free(be, s->graph_tc); /* it reads and writes the old buffers */
		s->graph_tc = NULL;
		if (s->tc_ids.data) be->ops->tensor_free(be, &s->tc_ids);
		if (s->tc_out.data) be->ops->tensor_free(be, &s->tc_out);
		s->tc_k = s->tc_m = 0;
		sg_status st = sg_fwd_alloc2(be, SG_TYPE_I32, mids > 0 ? mids : 1, 1, &s->tc_ids);
		if (!st) st = sg_fwd_alloc2(be, SG_TYPE_I32, 2 * k + mids, 1, &s->tc_out);
		if (st) return st;
		s->tc_k = k;
		s->tc_m = mids;
	}
	if (mids) SG_FWD_OK(be->ops->write(be, &s->tc_ids, 0, ids, sizeof(int32_t) * (size_t)mids));
	return decode_step(m, s, token, pos, 1, &s->graph_tc);
}
