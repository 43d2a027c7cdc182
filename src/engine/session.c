/*
 * Sessions over the generic forward: validation, prefill in chunks (the matmul path) and decode
 * one token at a time (the matvec path), logits out, snapshot and restore.
 */
#include "engine/session.h"

#include <string.h>
#include <strings.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/flags.h"
#include "base/log.h"

#define DEFAULT_CTX 4096

sg_session_params sg_session_default_params(void)
{
	const char *kv = sg_flag_str("SARAGOSSA_KV_TYPE");
	sg_session_params p = {
		.n_ctx = 0,
		.n_batch = 0,
		.kv_type = kv && !strcasecmp(kv, "f16") ? SG_KV_F16 : kv && !strcasecmp(kv, "f32") ? SG_KV_F32 : SG_KV_AUTO,
	};
	return p;
}

void sg_session_free(sg_session *s)
{
	if (!s) return;
	if (s->fs.kv) sg_fwd_state_free(s->m, &s->fs);
	sg_free(s->tokens);
	sg_free(s->last);
	sg_free(s->tc_host);
	sg_free(s->mark);
	sg_session_mtp_free(s);
	sg_free(s);
}

sg_status sg_session_new(sg_model *m, const sg_session_params *params, sg_session **out)
{
	*out = NULL;
	if (!m) return SG_FAIL(SG_ERR_INVALID_ARG, "no model");
	if (m->desc.bidirectional)
		return sg_error(SG_ERR_UNSUPPORTED, "%s has bidirectional attention: it is an embedding model (saragossa embed), it does "
						    "not generate", m->desc.model_type);
	sg_session_params dp = sg_session_default_params();
	if (!params) params = &dp;
	int n_ctx = params->n_ctx, max = sg_model_n_ctx_train(m);
	if (n_ctx < 0 || params->n_batch < 0)
		return SG_FAIL(SG_ERR_INVALID_ARG, "n_ctx %d, n_batch %d (want >= 0)", n_ctx, params->n_batch);
	if (!n_ctx) n_ctx = max > 0 && max < DEFAULT_CTX ? max : DEFAULT_CTX;
	if (max > 0 && n_ctx > max)
		return SG_FAIL(SG_ERR_RANGE, "context of %d tokens exceeds the model's %d", n_ctx, max);
	int64_t chunk = params->n_batch ? params->n_batch : sg_flag_int("SARAGOSSA_CHUNK");
	sg_backend_caps caps;
	sg_backend_caps_get(m->be, &caps);
	/* 0: the backend's own (a GPU's chunk re-reads every weight once, so it takes larger ones) */
	if (chunk == 0) chunk = caps.prefill_chunk > 0 ? caps.prefill_chunk : 256;
	if (chunk < 1) chunk = 1;
	if (chunk > n_ctx) chunk = n_ctx;
	if (params->kv_type != SG_KV_F32 && params->kv_type != SG_KV_F16 && params->kv_type != SG_KV_AUTO)
		return SG_FAIL(SG_ERR_INVALID_ARG, "kv_type %d", (int)params->kv_type);
	int kv16 = params->kv_type == SG_KV_F16 || (params->kv_type == SG_KV_AUTO && caps.kv_f16);
	sg_session *s = sg_calloc(1, sizeof(*s));
	if (!s) return SG_FAIL(SG_ERR_NOMEM, "session");
	s->m = m;
	s->mark_pos = -1;
	s->n_ctx = n_ctx;
	s->n_batch = (int)chunk;
	s->tokens = sg_calloc((size_t)n_ctx, sizeof(int32_t));
	s->last = sg_calloc((size_t)sg_model_n_vocab(m), sizeof(float));
	sg_status st = s->tokens && s->last ? SG_OK : SG_FAIL(SG_ERR_NOMEM, "session of %d tokens", n_ctx);
	if (!st)
		st = sg_fwd_state_init(m, n_ctx, (int)chunk, kv16 ? SG_TYPE_F16 : SG_TYPE_F32,
				       &s->fs);
	if (st) {
		sg_session_free(s);
		return st;
	}
	*out = s;
	return SG_OK;
}

sg_status sg_session_eval(sg_session *s, const int32_t *tokens, int n, float *logits_out)
{
	if (!s || (!tokens && n > 0)) return SG_FAIL(SG_ERR_INVALID_ARG, "no session or no tokens");
	if (n < 1) return SG_FAIL(SG_ERR_INVALID_ARG, "empty prompt (%d tokens)", n);
	int V = sg_model_n_vocab(s->m);
	for (int i = 0; i < n; i++)
		if (tokens[i] < 0 || tokens[i] >= V)
			return SG_FAIL(SG_ERR_RANGE, "token %d at index %d is outside the vocabulary [0, %d)", tokens[i], i, V);
	if (n > s->n_ctx - s->n_past)
		return SG_FAIL(SG_ERR_RANGE, "%d tokens at position %d exceed the context of %d tokens", n, s->n_past,
			       s->n_ctx);
	const sg_backend_ops *o = s->m->be->ops;
	if (n == 1 && !logits_out && !s->mtp && sg_fwd_decode_graphs(s->m, &s->fs)) {
		/* one decode step replayed from the CUDA graph; the same kernels as the per-op path */
		sg_status st = sg_forward_decode(s->m, &s->fs, tokens[0], s->n_past);
		if (!st) st = o->read(s->m->be, &s->fs.logits, 0, s->last, sizeof(float) * (size_t)V);
		s->has_last = !st;
		if (st) return st;
		s->tokens[s->n_past++] = tokens[0];
		return SG_OK;
	}
	for (int done = 0; done < n;) {
		int c = n - done < s->n_batch ? n - done : s->n_batch;
		int last = done + c == n;
		sg_logits_mode mode = logits_out ? SG_LOGITS_ALL : last ? SG_LOGITS_LAST : SG_LOGITS_NONE;
		sg_status st = s->fs.exact && mode == SG_LOGITS_ALL ? sg_forward_exact(s->m, &s->fs, tokens + done, c, s->n_past + done)
								      : sg_forward(s->m, &s->fs, tokens + done, c, s->n_past + done, mode);
		if (st) {
			s->has_last = 0;
			return st;
		}
		size_t row = sizeof(float) * (size_t)V;
		if (logits_out) st = o->read(s->m->be, &s->fs.logits, 0, logits_out + (size_t)done * V, row * (size_t)c);
		if (!st && last) st = o->read(s->m->be, &s->fs.logits, mode == SG_LOGITS_ALL ? row * (size_t)(c - 1) : 0, s->last, row);
		if (!st && s->mtp) st = sg_session_mtp_after_eval(s, tokens + done, c, s->n_past + done);
		if (st) return st;
		done += c;
	}
	memcpy(s->tokens + s->n_past, tokens, sizeof(int32_t) * (size_t)n);
	s->n_past += n;
	s->has_last = 1;
	s->dev_last = 0;
	return SG_OK;
}

/* The checks of a decode step whose logits stay on the device, and its bookkeeping once done. */
static sg_status device_step_ok(const sg_session *s, int32_t token)
{
	int V = sg_model_n_vocab(s->m);
	if (token < 0 || token >= V) return SG_FAIL(SG_ERR_RANGE, "token %d is outside the vocabulary [0, %d)", token, V);
	if (s->n_past >= s->n_ctx) return SG_FAIL(SG_ERR_RANGE, "the context of %d tokens is full", s->n_ctx);
	return SG_OK;
}

static void device_step_done(sg_session *s, int32_t token)
{
	s->tokens[s->n_past++] = token;
	s->dev_last = s->n_past;
	s->dev_row = 0;
}

sg_status sg_session_decode_greedy(sg_session *s, int32_t token, int32_t *next)
{
	*next = -1;
	sg_status st = device_step_ok(s, token);
	if (st) return st;
	s->has_last = 0;
	st = sg_forward_decode(s->m, &s->fs, token, s->n_past);
	if (!st) st = s->m->be->ops->read(s->m->be, &s->fs.amax, 0, next, sizeof(int32_t));
	if (st) return st;
	device_step_done(s, token);
	return SG_OK;
}

int sg_session_top_max(const sg_session *s)
{
	return s->m->be->ops->top_candidates ? SG_BACKEND_TOPC_MAX : 0;
}

sg_status sg_session_decode_top(sg_session *s, int32_t token, int k, const int32_t *ids, int m, int32_t *top_ids,
				float *top_v, float *v)
{
	sg_status st = device_step_ok(s, token);
	if (st) return st;
	int V = sg_model_n_vocab(s->m), cap = sg_session_top_max(s);
	if (k < 1 || k > cap || k > V || m < 0 || m > V)
		return sg_error(k > cap ? SG_ERR_UNSUPPORTED : SG_ERR_INVALID_ARG,
				"%d sampling candidates and %d ids (the backend gives at most %d)", k, m, cap);
	size_t words = 2 * (size_t)k + (size_t)m;
	if (words > s->tc_cap) {
		int32_t *b = sg_realloc(s->tc_host, words * sizeof(*b));
		if (!b) return SG_FAIL(SG_ERR_NOMEM, "%zu candidate words", words);
		s->tc_host = b;
		s->tc_cap = words;
	}
	s->has_last = 0;
	st = sg_forward_decode_top(s->m, &s->fs, token, s->n_past, k, ids, m);
	if (!st) st = s->m->be->ops->read(s->m->be, &s->fs.tc_out, 0, s->tc_host, words * sizeof(int32_t));
	if (st) return st;
	memcpy(top_ids, s->tc_host, (size_t)k * sizeof(int32_t));
	memcpy(top_v, s->tc_host + k, (size_t)k * sizeof(float));
	if (m) memcpy(v, s->tc_host + 2 * k, (size_t)m * sizeof(float));
	device_step_done(s, token);
	return SG_OK;
}

sg_status sg_session_fetch_logits(sg_session *s)
{
	if (s->has_last) return SG_OK;
	if (!s->n_past || s->dev_last != s->n_past) return SG_FAIL(SG_ERR_INVALID_ARG, "no greedy step's logits at position %d", s->n_past);
	size_t row = sizeof(float) * (size_t)sg_model_n_vocab(s->m);
	sg_status st = s->m->be->ops->read(s->m->be, &s->fs.logits, row * (size_t)s->dev_row, s->last, row);
	s->has_last = !st;
	return st;
}

const float *sg_session_logits(const sg_session *s) { return s && s->has_last ? s->last : NULL; }
int sg_session_n_ctx(const sg_session *s) { return s->n_ctx; }
int sg_session_n_vocab(const sg_session *s) { return sg_model_n_vocab(s->m); }
int sg_session_position(const sg_session *s) { return s->n_past; }
const int32_t *sg_session_tokens(const sg_session *s) { return s->tokens; }

void sg_session_reset(sg_session *s)
{
	/* stale cache rows are never read: attention stops at the current position */
	s->n_past = 0;
	s->mark_pos = -1;
	s->has_last = 0;
	s->dev_last = 0;
	sg_session_mtp_forget(s);
}

/* ---- snapshots ---- */

/* A snapshot's bytes: in host memory, or a tensor of the backend (blob_alloc chooses). */
typedef struct blob {
	void *host;
	sg_btensor dev;
} blob;

struct sg_snapshot {
	const sg_model *m;
	int from;         /* 0 for a whole-state snapshot; a block snapshot's first position */
	int range;        /* 1: a block snapshot (rows of [from, n_past) only, no logits) */
	int n_ctx, n_past, has_last;
	sg_type kv_type;
	int32_t *tokens;  /* [n_past] */
	float *last;      /* [n_vocab] */
	int n_layer;
	blob mem;         /* every copied byte, one allocation (one cudaMalloc on a GPU) */
	size_t *bytes;    /* [n_layer] bytes of layer i's K rows and of its V rows */
	size_t *off;      /* [n_layer] where they sit in mem: K at off[i], V at off[i] + bytes[i] */
	size_t *rec_bytes; /* [2 * n_layer] recurrent state (conv, delta rule) of linear layers, or NULL */
	size_t *rec_off;
};

/* Where snapshots keep their bytes: the backend's own memory (SARAGOSSA_SNAPSHOT_RESIDENT and a
 * backend with the copy op: device-to-device copies on a GPU, no round trip through the host),
 * else host memory. A buffer the backend cannot allocate falls back to the host. */
static int resident(const sg_session *s) { return s->m->be->ops->copy && sg_flag_bool("SARAGOSSA_SNAPSHOT_RESIDENT"); }

static sg_status blob_alloc(const sg_session *s, blob *b, size_t n)
{
	sg_backend *be = s->m->be;
	if (resident(s)) {
		int64_t ne[4] = {(int64_t)((n + 3) / 4), 1, 1, 1};
		if (be->ops->tensor_alloc(be, SG_TYPE_I32, ne, &b->dev) == SG_OK) return SG_OK;
		SG_DEBUG("snapshot: %zu bytes in host memory (%s)", n, sg_last_error());
		memset(&b->dev, 0, sizeof(b->dev));
	}
	b->host = sg_malloc(n);
	return b->host ? SG_OK : SG_FAIL(SG_ERR_NOMEM, "snapshot of %zu bytes", n);
}

static void blob_free(sg_backend *be, blob *b)
{
	sg_free(b->host);
	if (b->dev.data) be->ops->tensor_free(be, &b->dev);
}

/* n bytes between tensor t at toff and the blob at boff: dir 0 t -> blob, 1 blob -> t. */
static sg_status blob_io(const sg_session *s, blob *b, size_t boff, sg_btensor *t, size_t toff, size_t n, int dir)
{
	sg_backend *be = s->m->be;
	const sg_backend_ops *o = be->ops;
	if (b->host) return dir ? o->write(be, t, toff, (char *)b->host + boff, n) : o->read(be, t, toff, (char *)b->host + boff, n);
	return dir ? o->copy(be, &b->dev, boff, t, toff, n) : o->copy(be, t, toff, &b->dev, boff, n);
}

/* The recurrent state tensors of a session: conv then delta-rule state of every layer (empty
 * for attention layers and for models without linear attention). */
static sg_btensor *rec_tensor(const sg_session *s, int i)
{
	int L = s->m->desc.n_layer;
	if (!s->fs.conv) return NULL;
	sg_btensor *t = i < L ? &s->fs.conv[i] : &s->fs.ssm[i - L];
	return t->data ? t : NULL;
}

/* A snapshot of L layers with layer i's K and V rows of bytes[i] each (filled in by the caller)
 * and, when the session has recurrent states, room for each: lays out p->mem and allocates it. */
static sg_status layout(const sg_session *s, sg_snapshot *p)
{
	int L = p->n_layer;
	size_t total = 0;
	p->off = sg_calloc((size_t)L, sizeof(size_t));
	if (!p->off) return SG_FAIL(SG_ERR_NOMEM, "snapshot");
	for (int i = 0; i < L; i++) {
		p->off[i] = total;
		total += 2 * p->bytes[i];
	}
	if (s->fs.conv) {
		p->rec_bytes = sg_calloc((size_t)(2 * L), sizeof(size_t));
		p->rec_off = sg_calloc((size_t)(2 * L), sizeof(size_t));
		if (!p->rec_bytes || !p->rec_off) return SG_FAIL(SG_ERR_NOMEM, "snapshot");
		for (int i = 0; i < 2 * L; i++) {
			const sg_btensor *t = rec_tensor(s, i);
			p->rec_off[i] = total;
			p->rec_bytes[i] = t ? (size_t)sg_btensor_rows(t) * t->row_bytes : 0;
			total += p->rec_bytes[i];
		}
	}
	return total ? blob_alloc(s, &p->mem, total) : SG_OK;
}

/* The recurrent states into the snapshot (a full copy each), and back. */
static sg_status rec_save(const sg_session *s, sg_snapshot *p)
{
	for (int i = 0; p->rec_bytes && i < 2 * p->n_layer; i++) {
		sg_btensor *t = rec_tensor(s, i);
		if (!t || !p->rec_bytes[i]) continue;
		sg_status st = blob_io(s, &p->mem, p->rec_off[i], t, 0, p->rec_bytes[i], 0);
		if (st) return st;
	}
	return SG_OK;
}

static sg_status rec_load(sg_session *s, const sg_snapshot *p)
{
	for (int i = 0; p->rec_bytes && i < 2 * p->n_layer; i++) {
		sg_btensor *t = rec_tensor(s, i);
		if (!p->rec_bytes[i] || !t) continue;
		sg_status st = blob_io(s, (blob *)&p->mem, p->rec_off[i], t, 0, p->rec_bytes[i], 1);
		if (st) return st;
	}
	return SG_OK;
}

int sg_session_snapshots_on_device(const sg_session *s)
{
	sg_backend_caps caps;
	sg_backend_caps_get(s->m->be, &caps);
	return resident(s) && caps.device_memory;
}

void sg_snapshot_free(sg_snapshot *snap)
{
	if (!snap) return;
	blob_free(snap->m->be, &snap->mem);
	sg_free(snap->off);
	sg_free(snap->rec_off);
	sg_free(snap->rec_bytes);
	sg_free(snap->bytes);
	sg_free(snap->tokens);
	sg_free(snap->last);
	sg_free(snap);
}

int sg_snapshot_position(const sg_snapshot *snap) { return snap->n_past; }

size_t sg_snapshot_bytes(const sg_snapshot *snap)
{
	if (!snap) return 0;
	size_t b = sizeof(*snap) + sizeof(int32_t) * (size_t)(snap->n_past - snap->from + 1);
	for (int i = 0; i < snap->n_layer; i++) b += 2 * snap->bytes[i];
	for (int i = 0; snap->rec_bytes && i < 2 * snap->n_layer; i++) b += snap->rec_bytes[i];
	return b + (snap->last ? sizeof(float) * (size_t)sg_model_n_vocab(snap->m) : 0);
}

/* Bytes of a layer's cache that hold state: the rows up to the position, or the whole ring. */
static size_t used_bytes(const sg_kv_layer *kv, int n_past)
{
	int rows = kv->ring ? kv->rows : n_past;
	return (size_t)rows * kv->k.row_bytes * (size_t)kv->k.ne[1];
}

sg_status sg_session_snapshot(const sg_session *s, sg_snapshot **out)
{
	*out = NULL;
	int L = s->m->desc.n_layer, V = sg_model_n_vocab(s->m);
	sg_snapshot *p = sg_calloc(1, sizeof(*p));
	if (!p) return SG_FAIL(SG_ERR_NOMEM, "snapshot");
	p->m = s->m;
	p->n_ctx = s->n_ctx;
	p->n_past = s->n_past;
	p->has_last = s->has_last;
	p->kv_type = s->fs.kv_type;
	p->n_layer = L;
	p->tokens = sg_calloc((size_t)s->n_past + 1, sizeof(int32_t));
	p->last = sg_calloc((size_t)V, sizeof(float));
	p->bytes = sg_calloc((size_t)L, sizeof(size_t));
	sg_status st = p->tokens && p->last && p->bytes ? SG_OK : SG_FAIL(SG_ERR_NOMEM, "snapshot");
	for (int i = 0; i < L && !st; i++) p->bytes[i] = used_bytes(&s->fs.kv[i], s->n_past);
	if (!st) st = layout(s, p);
	for (int i = 0; i < L && !st; i++) {
		sg_kv_layer *kv = (sg_kv_layer *)&s->fs.kv[i]; /* read only in this direction */
		if (!p->bytes[i]) continue;
		st = blob_io(s, &p->mem, p->off[i], &kv->k, 0, p->bytes[i], 0);
		if (!st) st = blob_io(s, &p->mem, p->off[i] + p->bytes[i], &kv->v, 0, p->bytes[i], 0);
	}
	if (!st) st = rec_save(s, p);
	if (st) {
		sg_snapshot_free(p);
		return st;
	}
	memcpy(p->tokens, s->tokens, sizeof(int32_t) * (size_t)s->n_past);
	memcpy(p->last, s->last, sizeof(float) * (size_t)V);
	*out = p;
	return SG_OK;
}

sg_status sg_session_restore(sg_session *s, const sg_snapshot *p)
{
	if (!s || !p) return SG_FAIL(SG_ERR_INVALID_ARG, "no session or snapshot");
	if (p->range) return SG_FAIL(SG_ERR_INVALID_ARG, "a block snapshot (use sg_session_restore_range)");
	if (p->m != s->m || p->n_ctx != s->n_ctx || p->kv_type != s->fs.kv_type)
		return SG_FAIL(SG_ERR_INVALID_ARG, "the snapshot was taken from another model or context size (%d vs %d)",
			       p->n_ctx, s->n_ctx);
	for (int i = 0; i < p->n_layer; i++) {
		if (!p->bytes[i]) continue;
		blob *m = (blob *)&p->mem; /* read only in this direction */
		sg_status st = blob_io(s, m, p->off[i], &s->fs.kv[i].k, 0, p->bytes[i], 1);
		if (!st) st = blob_io(s, m, p->off[i] + p->bytes[i], &s->fs.kv[i].v, 0, p->bytes[i], 1);
		if (st) return st;
	}
	sg_status st = rec_load(s, p);
	if (st) return st;
	memcpy(s->tokens, p->tokens, sizeof(int32_t) * (size_t)p->n_past);
	memcpy(s->last, p->last, sizeof(float) * (size_t)sg_model_n_vocab(s->m));
	s->mark_pos = -1;
	s->n_past = p->n_past;
	s->has_last = p->has_last;
	sg_session_mtp_forget(s);
	return SG_OK;
}

/* ---- exact verification and marks ---- */

int sg_session_can_verify(const sg_session *s)
{
	return s->m->be->ops->match_decode != NULL || sg_flag_bool("SARAGOSSA_SPEC_STEPWISE");
}

int sg_session_verify_stepwise(const sg_session *s) { return !s->m->be->ops->match_decode && sg_flag_bool("SARAGOSSA_SPEC_STEPWISE"); }

sg_status sg_session_eval_stepwise(sg_session *s, const int32_t *tokens, int n, float *logits_out)
{
	size_t V = (size_t)sg_model_n_vocab(s->m);
	for (int i = 0; i < n; i++) {
		sg_status st = sg_session_eval(s, tokens + i, 1, NULL);
		if (st) return st;
		if (logits_out) memcpy(logits_out + (size_t)i * V, s->last, sizeof(float) * V);
	}
	return SG_OK;
}

sg_status sg_session_eval_exact(sg_session *s, const int32_t *tokens, int n, float *logits_out)
{
	sg_backend *be = s->m->be;
	if (!be->ops->match_decode) {
		if (sg_flag_bool("SARAGOSSA_SPEC_STEPWISE")) return sg_session_eval_stepwise(s, tokens, n, logits_out);
		return sg_error(SG_ERR_UNSUPPORTED, "the %s backend cannot score several tokens with a decode step's bits", be->ops->name);
	}
	be->ops->match_decode(be, 1);
	s->fs.exact = 1;
	sg_status st = sg_session_eval(s, tokens, n, logits_out);
	s->fs.exact = 0;
	be->ops->match_decode(be, 0);
	return st;
}

/* The greedy sampler's choice in a row: the largest value, the lowest id on ties, NaN never. */
static int32_t row_argmax(const float *x, int V)
{
	int32_t best = -1;
	for (int i = 0; i < V; i++)
		if (x[i] == x[i] && (best < 0 || x[i] > x[best])) best = i;
	return best < 0 ? 0 : best;
}

sg_status sg_session_eval_exact_greedy(sg_session *s, const int32_t *tokens, int n, int32_t *ids)
{
	sg_backend *be = s->m->be;
	const int V = sg_model_n_vocab(s->m);
	if (!be->ops->match_decode || !be->ops->argmax || s->mtp || n > s->n_batch || n < 1) {
		float *rows = n > 0 ? sg_malloc(sizeof(float) * (size_t)V * (size_t)n) : NULL;
		if (n > 0 && !rows) return SG_FAIL(SG_ERR_NOMEM, "logits of %d rows", n);
		sg_status st = sg_session_eval_exact(s, tokens, n, rows);
		for (int i = 0; !st && i < n; i++) ids[i] = row_argmax(rows + (size_t)i * V, V);
		sg_free(rows);
		return st;
	}
	if (!tokens) return SG_FAIL(SG_ERR_INVALID_ARG, "no tokens");
	for (int i = 0; i < n; i++)
		if (tokens[i] < 0 || tokens[i] >= V) return SG_FAIL(SG_ERR_RANGE, "token %d at index %d is outside the vocabulary [0, %d)", tokens[i], i, V);
	if (n > s->n_ctx - s->n_past)
		return SG_FAIL(SG_ERR_RANGE, "%d tokens at position %d exceed the context of %d tokens", n, s->n_past, s->n_ctx);
	be->ops->match_decode(be, 1);
	s->fs.exact = 1;
	sg_status st = sg_forward_exact(s->m, &s->fs, tokens, n, s->n_past);
	s->fs.exact = 0;
	be->ops->match_decode(be, 0);
	s->has_last = 0;
	s->dev_last = 0;
	if (!st) st = sg_forward_rows_argmax(s->m, &s->fs, n, ids);
	if (st) return st;
	memcpy(s->tokens + s->n_past, tokens, sizeof(int32_t) * (size_t)n);
	s->n_past += n;
	s->dev_last = s->n_past;
	s->dev_row = n - 1;
	return SG_OK;
}

/* Bytes of every recurrent state tensor of the session. */
static size_t rec_total(const sg_session *s)
{
	size_t b = 0;
	for (int i = 0; i < 2 * s->m->desc.n_layer; i++) {
		const sg_btensor *t = rec_tensor(s, i);
		if (t) b += (size_t)sg_btensor_rows(t) * t->row_bytes;
	}
	return b;
}

/* The recurrent states to (dir 0) or from (dir 1) the mark buffer. */
static sg_status mark_io(sg_session *s, int dir)
{
	sg_backend *be = s->m->be;
	size_t off = 0;
	for (int i = 0; i < 2 * s->m->desc.n_layer; i++) {
		sg_btensor *t = rec_tensor(s, i);
		if (!t) continue;
		size_t n = (size_t)sg_btensor_rows(t) * t->row_bytes;
		char *b = (char *)s->mark + off;
		sg_status st = dir ? be->ops->write(be, t, 0, b, n) : be->ops->read(be, t, 0, b, n);
		if (st) return st;
		off += n;
	}
	return SG_OK;
}

sg_status sg_session_mark(sg_session *s)
{
	s->mark_pos = -1;
	if (!sg_session_has_recurrent_state(s)) return SG_OK;
	size_t need = rec_total(s);
	if (need > s->mark_cap) {
		void *b = sg_realloc(s->mark, need);
		if (!b) return SG_FAIL(SG_ERR_NOMEM, "a mark of %zu bytes of recurrent state", need);
		s->mark = b;
		s->mark_cap = need;
	}
	sg_status st = mark_io(s, 0);
	if (!st) s->mark_pos = s->n_past;
	return st;
}

/* A truncate of a session with recurrent state: back to the mark, then the tokens between the
 * mark and keep evaluated again with a decode step's bits (what the state held there). */
static sg_status rec_truncate(sg_session *s, int keep)
{
	if (s->mark_pos < 0 || keep < s->mark_pos)
		return SG_FAIL(SG_ERR_UNSUPPORTED, "a recurrent (linear-attention) state cannot be rolled back to %d (%s)", keep,
			       s->mark_pos < 0 ? "no mark" : "before its mark");
	sg_status st = mark_io(s, 1);
	int from = s->mark_pos, n = keep - from;
	s->has_last = 0;
	s->dev_last = 0;
	if (st) {
		s->mark_pos = -1;
		return st;
	}
	s->n_past = from;
	if (n == 0) return SG_OK;
	int32_t *t = sg_malloc(sizeof(int32_t) * (size_t)n);
	if (!t) return SG_FAIL(SG_ERR_NOMEM, "%d tokens", n);
	memcpy(t, s->tokens + from, sizeof(int32_t) * (size_t)n);
	if (s->m->be->ops->match_decode) {
		s->m->be->ops->match_decode(s->m->be, 1);
		st = sg_session_eval(s, t, n, NULL);
		s->m->be->ops->match_decode(s->m->be, 0);
	} else {
		st = sg_session_eval_stepwise(s, t, n, NULL);
	}
	sg_free(t);
	return st;
}

sg_status sg_session_truncate(sg_session *s, int keep)
{
	if (keep < 0 || keep > s->n_past)
		return SG_FAIL(SG_ERR_INVALID_ARG, "truncate to %d outside [0, %d]", keep, s->n_past);
	if (keep == s->n_past) return SG_OK;
	if (sg_session_has_recurrent_state(s)) {
		sg_status st = rec_truncate(s, keep);
		sg_session_mtp_moved(s);
		return st;
	}
	/* attention caches only need the position moved back (rows past it are never read and are
	 * overwritten by the next eval); a wrapped ring still holds [n_past - rows, n_past), enough
	 * while the window before keep is among those rows */
	for (int l = 0; l < s->m->desc.n_layer; l++) {
		const sg_kv_layer *kv = &s->fs.kv[l];
		int64_t window = s->m->desc.layers[l].sliding_window;
		if (kv->ring && s->n_past > kv->rows && (int64_t)(s->n_past - keep) + window > kv->rows)
			return SG_FAIL(SG_ERR_UNSUPPORTED, "layer %d's sliding-window ring no longer holds the tokens before %d", l,
				       keep);
	}
	s->n_past = keep;
	s->has_last = 0;
	sg_session_mtp_moved(s);
	return SG_OK;
}

int sg_session_gemm_matches_gemv(sg_type type)
{
	switch (type) {
	/* float weights: the blocked GEMM accumulates every output in the order of the one-token
	 * kernel (same k blocking, same lane split, same final reduction) */
	case SG_TYPE_F32:
	case SG_TYPE_F16:
	case SG_TYPE_BF16: return 1;
	/* quantized weights: the GEMM's tiles reduce in another order than the GEMV (turn a type on
	 * here once its GEMM gives the GEMV's bits; the chunking tests then cover it) */
	default: return 0;
	}
}

/* 1 if every tensor of the block of n btensors at t is absent or of a type whose GEMM matches
 * the GEMV. (Norms and scalars are F32 or BF16 and pass, which is right: they are not matmuls,
 * and their per-token kernels do not depend on the chunk.) */
static int all_match(const sg_btensor *t, size_t n)
{
	for (size_t k = 0; k < n; k++)
		if (t[k].data && !sg_session_gemm_matches_gemv(t[k].type)) return 0;
	return 1;
}

int sg_session_chunk_invariant(const sg_session *s)
{
	const sg_model *m = s->m;
	if (sg_session_has_recurrent_state(s)) return 0;
	if (strcmp(m->be->ops->name, "cpu") != 0) return 0; /* GPU prefill runs GEMMs, decode GEMVs */
	if (!sg_flag_bool("SARAGOSSA_CPU_GEMM")) return 1;   /* the one-token kernels for every chunk */
	if (!all_match(&m->output, 1)) return 0;
	for (int i = 0; i < m->desc.n_layer; i++) {
		const sg_layer_weights *l = &m->layers[i];
		/* the grouped expert matmul has its own many-token path, not checked against one token */
		if (l->router.data || l->gate_exps.data) return 0;
		if (!all_match((const sg_btensor *)l, sizeof *l / sizeof(sg_btensor))) return 0;
		if (m->hy.layers) {
			const sg_hybrid_layer *h = &m->hy.layers[i];
			if (h->gate_up_exps.data) return 0;
			if (!all_match((const sg_btensor *)h, sizeof *h / sizeof(sg_btensor))) return 0;
		}
	}
	if (m->hy.pl_model_proj.data && !all_match(&m->hy.pl_model_proj, 1)) return 0;
	return 1;
}

int sg_session_has_recurrent_state(const sg_session *s)
{
	for (int i = 0; s->fs.conv && i < s->m->desc.n_layer; i++)
		if (s->fs.conv[i].data) return 1;
	return 0;
}

/* ---- block snapshots (the prefix cache's) ----
 *
 * A layer's state at a block boundary is its KV rows of the block. Architectures with a
 * recurrent or convolution state per layer add a full copy of that state here, read from the
 * forward state next to the caches: the block snapshot then carries everything the next
 * position depends on, whatever the layer kind. */

/* Bytes of one position's K (or V) row in a layer's cache. */
static size_t pos_bytes(const sg_kv_layer *kv)
{
	return kv->k.row_bytes * (size_t)kv->k.ne[1];
}

size_t sg_session_block_bytes(const sg_session *s, int n)
{
	size_t b = sizeof(sg_snapshot) + sizeof(int32_t) * (size_t)(n + 1);
	for (int i = 0; i < s->m->desc.n_layer; i++) b += 2 * pos_bytes(&s->fs.kv[i]) * (size_t)n;
	for (int i = 0; i < 2 * s->m->desc.n_layer; i++) {
		const sg_btensor *t = rec_tensor(s, i);
		if (t) b += (size_t)sg_btensor_rows(t) * t->row_bytes;
	}
	return b;
}

/* Copies (dir 0: cache -> buf) or writes back (dir 1) the rows of positions [from, to) of one
 * cache tensor; a ring maps position p to row p % rows, so a block may wrap its end. */
static sg_status rows_io(const sg_session *s, sg_kv_layer *kv, sg_btensor *t, int from, int to, blob *buf, size_t b, int dir)
{
	size_t pb = pos_bytes(kv);
	for (int p = from; p < to;) {
		int row = kv->ring ? p % kv->rows : p;
		int n = to - p;
		if (row + n > kv->rows) n = kv->rows - row;
		size_t off = (size_t)row * pb, len = (size_t)n * pb;
		sg_status st = blob_io(s, buf, b, t, off, len, dir);
		if (st) return st;
		b += len;
		p += n;
	}
	return SG_OK;
}

sg_status sg_session_snapshot_range(const sg_session *s, int from, sg_snapshot **out)
{
	*out = NULL;
	int to = s->n_past, L = s->m->desc.n_layer;
	if (from < 0 || from >= to)
		return SG_FAIL(SG_ERR_INVALID_ARG, "block [%d, %d) is empty or negative", from, to);
	for (int i = 0; i < L; i++)
		if (s->fs.kv[i].ring && to - from > s->fs.kv[i].rows)
			return SG_FAIL(SG_ERR_RANGE, "block [%d, %d) is longer than the %d rows layer %d keeps", from, to,
				       s->fs.kv[i].rows, i);
	sg_snapshot *p = sg_calloc(1, sizeof(*p));
	if (!p) return SG_FAIL(SG_ERR_NOMEM, "snapshot");
	p->m = s->m;
	p->from = from;
	p->range = 1;
	p->n_ctx = s->n_ctx;
	p->n_past = to;
	p->kv_type = s->fs.kv_type;
	p->n_layer = L;
	p->tokens = sg_calloc((size_t)(to - from), sizeof(int32_t));
	p->bytes = sg_calloc((size_t)L, sizeof(size_t));
	sg_status st = p->tokens && p->bytes ? SG_OK : SG_FAIL(SG_ERR_NOMEM, "snapshot");
	/* a layer without a KV cache (linear attention) has 0 bytes */
	for (int i = 0; i < L && !st; i++) p->bytes[i] = pos_bytes(&s->fs.kv[i]) * (size_t)(to - from);
	if (!st) st = layout(s, p);
	for (int i = 0; i < L && !st; i++) {
		/* the cast: rows_io only reads the cache in this direction */
		sg_kv_layer *kv = (sg_kv_layer *)&s->fs.kv[i];
		if (!p->bytes[i]) continue;
		st = rows_io(s, kv, &kv->k, from, to, &p->mem, p->off[i], 0);
		if (!st) st = rows_io(s, kv, &kv->v, from, to, &p->mem, p->off[i] + p->bytes[i], 0);
	}
	/* recurrent and conv states summarise every position before `to`: a full copy */
	if (!st) st = rec_save(s, p);
	if (st) {
		sg_snapshot_free(p);
		return st;
	}
	memcpy(p->tokens, s->tokens + from, sizeof(int32_t) * (size_t)(to - from));
	*out = p;
	return SG_OK;
}

sg_status sg_session_restore_range(sg_session *s, const sg_snapshot *p)
{
	if (!s || !p) return SG_FAIL(SG_ERR_INVALID_ARG, "no session or snapshot");
	if (!p->range) return SG_FAIL(SG_ERR_INVALID_ARG, "not a block snapshot (use sg_session_restore)");
	if (p->m != s->m || p->n_ctx != s->n_ctx || p->kv_type != s->fs.kv_type)
		return SG_FAIL(SG_ERR_INVALID_ARG, "the snapshot was taken from another model or context size (%d vs %d)",
			       p->n_ctx, s->n_ctx);
	if (p->from != s->n_past)
		return SG_FAIL(SG_ERR_INVALID_ARG, "block [%d, %d) does not start at the session's position %d", p->from,
			       p->n_past, s->n_past);
	for (int i = 0; i < p->n_layer; i++) {
		if (!p->bytes[i]) continue;
		sg_kv_layer *kv = &s->fs.kv[i];
		blob *m = (blob *)&p->mem; /* read only in this direction */
		sg_status st = rows_io(s, kv, &kv->k, p->from, p->n_past, m, p->off[i], 1);
		if (!st) st = rows_io(s, kv, &kv->v, p->from, p->n_past, m, p->off[i] + p->bytes[i], 1);
		if (st) {
			/* part of the block is written: the state past from is undefined */
			s->has_last = 0;
			return st;
		}
	}
	sg_status st = rec_load(s, p);
	if (st) {
		s->has_last = 0;
		return st;
	}
	memcpy(s->tokens + p->from, p->tokens, sizeof(int32_t) * (size_t)(p->n_past - p->from));
	s->mark_pos = -1;
	s->n_past = p->n_past;
	s->has_last = 0;
	sg_session_mtp_forget(s);
	return SG_OK;
}
