/* Multi-token prediction in a session (see session.h). */
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "engine/session.h"

void sg_session_mtp_free(sg_session *s)
{
	sg_free(s->mtp_rows);
	sg_free(s->mtp_h);
	sg_free(s->mtp_in);
	sg_free(s->mtp_out);
	sg_free(s->mtp_next);
	sg_free(s->mtp_logits);
	s->mtp_rows = s->mtp_h = s->mtp_in = s->mtp_out = s->mtp_logits = NULL;
	s->mtp_next = NULL;
	s->mtp = 0;
}

int sg_session_has_mtp(const sg_session *s) { return s->m->has_mtp; }

sg_status sg_session_mtp_enable(sg_session *s, int on)
{
	if (!on) {
		sg_session_mtp_free(s);
		return SG_OK;
	}
	if (!s->m->has_mtp) return SG_FAIL(SG_ERR_UNSUPPORTED, "the model has no MTP module (mtp.* tensors)");
	if (s->mtp) return SG_OK;
	size_t D = (size_t)s->m->desc.dim, B = (size_t)s->n_batch + 1;
	s->mtp_rows = sg_malloc(sizeof(float) * B * D);
	s->mtp_h = sg_malloc(sizeof(float) * D);
	s->mtp_in = sg_malloc(sizeof(float) * B * D);
	s->mtp_out = sg_malloc(sizeof(float) * B * D);
	s->mtp_next = sg_malloc(sizeof(int32_t) * B);
	s->mtp_logits = sg_malloc(sizeof(float) * (size_t)s->m->desc.n_vocab);
	if (!s->mtp_rows || !s->mtp_h || !s->mtp_in || !s->mtp_out || !s->mtp_next || !s->mtp_logits) {
		sg_session_mtp_free(s);
		return SG_FAIL(SG_ERR_NOMEM, "MTP buffers");
	}
	s->mtp = 1;
	s->mtp_h_pos = -1;
	s->mtp_rows_n = 0;
	return SG_OK;
}

void sg_session_mtp_forget(sg_session *s)
{
	s->mtp_rows_n = 0;
	s->mtp_h_pos = -1;
}

void sg_session_mtp_moved(sg_session *s)
{
	if (!s->mtp) return;
	/* the hidden state of the new last position, when the last chunk evaluated it */
	int p = s->n_past - 1;
	if (p >= s->mtp_rows_pos0 && p < s->mtp_rows_pos0 + s->mtp_rows_n) {
		size_t D = (size_t)s->m->desc.dim;
		memcpy(s->mtp_h, s->mtp_rows + (size_t)(p - s->mtp_rows_pos0) * D, sizeof(float) * D);
		s->mtp_h_pos = p;
	} else if (s->mtp_h_pos != p) {
		s->mtp_h_pos = -1;
	}
}

sg_status sg_session_mtp_after_eval(sg_session *s, const int32_t *tokens, int n, int pos0)
{
	size_t D = (size_t)s->m->desc.dim;
	/* the chunk's hidden states, before the module overwrites the chunk buffers */
	sg_status st = sg_forward_hidden_rows(s->m, &s->fs, n, s->mtp_out);
	if (st) return st;
	/* rows: the previous chunk's last position with this chunk's first token, then each row of
	 * this chunk but the last with the token after it */
	int k = 0, start = pos0;
	if (pos0 > 0 && s->mtp_h_pos == pos0 - 1) {
		memcpy(s->mtp_in, s->mtp_h, sizeof(float) * D);
		s->mtp_next[k++] = tokens[0];
		start = pos0 - 1;
	}
	for (int i = 0; i + 1 < n; i++) {
		memcpy(s->mtp_in + (size_t)k * D, s->mtp_out + (size_t)i * D, sizeof(float) * D);
		s->mtp_next[k++] = tokens[i + 1];
	}
	memcpy(s->mtp_rows, s->mtp_out, sizeof(float) * (size_t)n * D);
	s->mtp_rows_pos0 = pos0;
	s->mtp_rows_n = n;
	memcpy(s->mtp_h, s->mtp_rows + (size_t)(n - 1) * D, sizeof(float) * D);
	s->mtp_h_pos = pos0 + n - 1;
	/* (at most n rows: the chunk's size; the outputs are not needed) */
	if (k > 0) st = sg_forward_mtp(s->m, &s->fs, s->mtp_next, s->mtp_in, k, start, s->mtp_out, NULL);
	s->dev_last = 0;
	return st;
}

sg_status sg_session_mtp_draft(sg_session *s, int32_t token, int max, int32_t *out, int *n_out, float *logits)
{
	*n_out = 0;
	if (!s->mtp) return SG_FAIL(SG_ERR_UNSUPPORTED, "MTP drafting is not on in this session");
	int V = s->m->desc.n_vocab;
	if (token < 0 || token >= V) return SG_FAIL(SG_ERR_RANGE, "token %d is outside the vocabulary [0, %d)", token, V);
	if (s->n_past < 1 || s->mtp_h_pos != s->n_past - 1) return SG_OK; /* no hidden state to draft from */
	/* guess k runs at position n_past - 1 + k */
	if (max > s->n_ctx - s->n_past + 1) max = s->n_ctx - s->n_past + 1;
	size_t D = (size_t)s->m->desc.dim;
	memcpy(s->mtp_in, s->mtp_h, sizeof(float) * D);
	int32_t t = token;
	s->dev_last = 0;
	for (int k = 0; k < max; k++) {
		sg_status st = sg_forward_mtp(s->m, &s->fs, &t, s->mtp_in, 1, s->n_past - 1 + k, s->mtp_out, s->mtp_logits);
		if (st) return st;
		int32_t best = 0;
		for (int32_t i = 1; i < V; i++)
			if (s->mtp_logits[i] > s->mtp_logits[best]) best = i;
		if (logits) memcpy(logits + (size_t)k * (size_t)V, s->mtp_logits, sizeof(float) * (size_t)V);
		out[(*n_out)++] = best;
		memcpy(s->mtp_in, s->mtp_out, sizeof(float) * D);
		t = best;
	}
	return SG_OK;
}
