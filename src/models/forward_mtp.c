/*
 * Multi-token prediction (see forward.h): the MTP module of Qwen3-Next / Qwen3.5 checkpoints, one
 * full-attention layer (index desc.n_layer, its own KV cache) over the projection of the next
 * token's normed embedding and the normed hidden state, as vLLM and SGLang compose it. The
 * concatenation is built in host memory (a row is [embedding | hidden]); the layer runs through
 * the hybrid path's attention and MLP blocks.
 */
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "models/forward.h"
#include "models/forward_hybrid.h"

static sg_status norm(const sg_model *m, const sg_btensor *x, const sg_btensor *w, sg_btensor *y)
{
	return m->be->ops->rmsnorm(m->be, x, w, m->desc.norm_eps, m->desc.norm_offset, y);
}

sg_status sg_forward_hidden_rows(const sg_model *m, sg_fwd_state *s, int n, float *out)
{
	const sg_model_desc *d = &m->desc;
	if (n < 1 || n > s->chunk) return SG_FAIL(SG_ERR_INVALID_ARG, "%d hidden rows (chunk %d)", n, s->chunk);
	sg_btensor x = sg_fwd_view2(&s->x, d->dim, n), h = sg_fwd_view2(&s->xb, d->dim, n);
	SG_FWD_OK(norm(m, &x, &m->out_norm, &h));
	return m->be->ops->read(m->be, &h, 0, out, sizeof(float) * (size_t)n * (size_t)d->dim);
}

sg_status sg_forward_mtp(const sg_model *m, sg_fwd_state *s, const int32_t *next, const float *hidden, int n, int pos0,
			 float *out, float *logits)
{
	const sg_model_desc *d = &m->desc;
	sg_backend *be = m->be;
	const sg_backend_ops *o = be->ops;
	if (!m->has_mtp || !s->mtp_in.data) return SG_FAIL(SG_ERR_UNSUPPORTED, "the model has no MTP module");
	if (n < 1 || n > s->chunk || pos0 < 0 || pos0 + n > s->n_ctx)
		return SG_FAIL(SG_ERR_INVALID_ARG, "%d MTP rows at position %d (chunk %d, context %d)", n, pos0, s->chunk, s->n_ctx);
	for (int i = 0; i < n; i++)
		if (next[i] < 0 || next[i] >= d->n_vocab)
			return SG_FAIL(SG_ERR_RANGE, "MTP token %d is outside the vocabulary [0, %d)", next[i], d->n_vocab);
	size_t D = (size_t)d->dim;
	int32_t p[n];
	for (int t = 0; t < n; t++) p[t] = pos0 + t;
	sg_btensor ids = sg_fwd_view2(&s->ids, n, 1), pos = sg_fwd_view2(&s->pos, n, 1);
	SG_FWD_OK(o->write(be, &ids, 0, next, sizeof(int32_t) * (size_t)n));
	SG_FWD_OK(o->write(be, &pos, 0, p, sizeof(int32_t) * (size_t)n));
	s->pos0 = pos0;
	s->ring_rows_of = 0;
	float *buf = sg_malloc(sizeof(float) * (size_t)n * 4 * D);
	if (!buf) return SG_FAIL(SG_ERR_NOMEM, "%d MTP rows", n);
	float *cat = buf, *e = buf + (size_t)n * 2 * D, *h = e + (size_t)n * D;
	sg_btensor x = sg_fwd_view2(&s->x, d->dim, n), xb = sg_fwd_view2(&s->xb, d->dim, n);
	sg_btensor in = sg_fwd_view2(&s->mtp_in, 2 * (int64_t)D, n);
	sg_status st = o->embed(be, &m->tok_embd, &ids, &xb);
	if (!st && d->embed_scale != 1.0f) st = o->scale(be, &xb, d->embed_scale, &xb);
	if (!st) st = norm(m, &xb, &m->mtp_norm_emb, &xb);
	if (!st) st = o->read(be, &xb, 0, e, sizeof(float) * (size_t)n * D);
	if (!st) st = o->write(be, &x, 0, hidden, sizeof(float) * (size_t)n * D);
	if (!st) st = norm(m, &x, &m->mtp_norm_hid, &x);
	if (!st) st = o->read(be, &x, 0, h, sizeof(float) * (size_t)n * D);
	/* rows [norm(embedding) | norm(hidden)] */
	for (int r = 0; r < n && !st; r++) {
		memcpy(cat + (size_t)r * 2 * D, e + (size_t)r * D, sizeof(float) * D);
		memcpy(cat + (size_t)r * 2 * D + D, h + (size_t)r * D, sizeof(float) * D);
	}
	if (!st) st = o->write(be, &in, 0, cat, sizeof(float) * (size_t)n * 2 * D);
	sg_free(buf);
	if (!st) st = o->matmul(be, &m->mtp_fc, &in, NULL, &x);
	if (!st) st = sg_fwd_hybrid_attn_layer(m, s, d->n_layer, n);
	if (!st) st = norm(m, &x, &m->mtp_norm, &xb);
	if (!st) st = o->read(be, &xb, 0, out, sizeof(float) * (size_t)n * D);
	if (st || !logits) return st;
	sg_btensor xl = sg_btensor_rows_view(&s->xb, n - 1, 1), lg = sg_fwd_view2(&s->logits, d->n_vocab, 1);
	SG_FWD_OK(o->matmul(be, &m->output, &xl, NULL, &lg));
	if (d->final_softcap > 0) SG_FWD_OK(o->softcap(be, &lg, d->final_softcap, &lg));
	return o->read(be, &lg, 0, logits, sizeof(float) * (size_t)d->n_vocab);
}
