/* A served model: an engine model binding (engine/lm.h) plus what the server reports about it
 * (see model.h). */
#include "server/model.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/log.h"
#include "engine/lm.h"
#include "engine/session.h"
#include "server/pool.h"

/* The generation loop runs on the server's own sg_gen_model, which wraps the lm's: it cuts the
 * prefill at prefix-cache block boundaries, snapshots them, and rolls the session back where
 * the live state allows. */
struct sg_srv_model {
	sg_srv_model_info info;
	sg_lm *lm;
	const sg_gen_model *inner; /* the lm's own */
	sg_gen_model ops;
	sg_gen_state state;
	struct sg_pool *pool;      /* prefix cache + memory guard; NULL: none */
	int pc_armed;              /* the running prefill snapshots block boundaries */
	uint8_t pc_root[32];       /* its chain root */
	const int32_t *pc_prompt;  /* [pc_n] its prompt (borrowed) */
	size_t pc_n;
	int live_ok;               /* the live state belongs to live_root's session */
	uint8_t live_root[32];
	size_t kv_high;            /* highest position ever evaluated (KV rows past it untouched) */
};

const sg_srv_model_info *sg_srv_model_info_get(const sg_srv_model *m)
{
	return &m->info;
}

const int32_t *sg_srv_model_eos(const sg_srv_model *m, size_t *n)
{
	return sg_lm_eos(m->lm, n);
}

sg_gen_state *sg_srv_model_state(sg_srv_model *m)
{
	return &m->state;
}

const sg_gen_detok *sg_srv_model_detok(sg_srv_model *m)
{
	return sg_lm_detok(m->lm);
}

void sg_srv_model_bind(sg_srv_model *m, struct sg_pool *pool)
{
	m->pool = pool;
}

/* Takes the block snapshot that ends at position `end` (the session is there) into the cache,
 * unless it is cached already or the memory guard has no room for it: a block is an
 * optimisation, never a reason to fail the request. */
static void snapshot_block(sg_srv_model *m, size_t end)
{
	sg_prefix_cache *pc = sg_pool_prefix_cache(m->pool);
	sg_session *s = sg_lm_session(m->lm);
	size_t B = (size_t)sg_pc_block_tokens(pc), b = end / B - 1;
	if (sg_pc_contains(pc, m, m->pc_root, m->pc_prompt, b)) return;
	sg_mem_evictor ev[2];
	int n_ev = sg_pool_evictors(m->pool, m, ev);
	if (sg_memguard_reserve(sg_pool_guard(m->pool), "a prefix-cache block", sg_session_block_bytes(s, (int)B), ev, n_ev)) {
		SG_DEBUG("serve: block %zu not cached: %s", b, sg_last_error());
		return;
	}
	sg_snapshot *snap = NULL;
	if (sg_session_snapshot_range(s, (int)(end - B), &snap)) {
		SG_DEBUG("serve: block %zu not cached: %s", b, sg_last_error());
		return;
	}
	if (sg_pc_insert(pc, m, m->pc_root, m->pc_prompt, b, snap, sg_snapshot_bytes(snap), NULL))
		SG_DEBUG("serve: block %zu not cached: %s", b, sg_last_error());
}

/* The prefill runs in pieces that end on block boundaries, whatever the loop's chunks and
 * whether the cache is on or off: a cold run, a run restored at a boundary and a run without the
 * cache evaluate the same pieces (a linear-attention layer's chunked arithmetic depends on
 * them), and with the cache armed each boundary's state is copied as it is reached. */
static sg_status op_eval(void *self, const int32_t *t, size_t n, size_t n_past, float *logits)
{
	sg_srv_model *m = self;
	size_t B = m->pool ? (size_t)sg_pool_block_tokens(m->pool) : 0;
	sg_status s = SG_OK;
	for (size_t done = 0, pos = n_past; done < n && !s;) {
		size_t c = n - done;
		if (B && pos + c > (pos / B + 1) * B) c = (pos / B + 1) * B - pos;
		s = m->inner->eval(m->inner->self, t + done, c, pos, logits);
		done += c;
		pos += c;
		if (!s && m->pc_armed && pos % B == 0 && pos <= m->pc_n) snapshot_block(m, pos);
	}
	size_t at = (size_t)sg_session_position(sg_lm_session(m->lm));
	if (at > m->kv_high) m->kv_high = at;
	return s;
}

/* Rolls the session back to its first keep tokens. Attention caches only need the position
 * moved back (rows past it are never read, and are overwritten by the next eval). A
 * sliding-window ring that has wrapped still holds positions [n_past - rows, n_past): it can go
 * back as long as the window before keep is among them (a ring keeps a chunk's worth of rows
 * beyond the window). A recurrent state summarises every position: it cannot go back at all. */
static sg_status op_truncate(void *self, size_t keep)
{
	sg_srv_model *m = self;
	sg_session *s = sg_lm_session(m->lm);
	if (keep > (size_t)s->n_past) return sg_error(SG_ERR_INVALID_ARG, "truncate to %zu past position %d", keep, s->n_past);
	if (keep == (size_t)s->n_past) return SG_OK;
	if (sg_session_has_recurrent_state(s)) return SG_ERR_UNSUPPORTED;
	for (int l = 0; l < s->m->desc.n_layer; l++) {
		const sg_kv_layer *kv = &s->fs.kv[l];
		int64_t window = s->m->desc.layers[l].sliding_window;
		if (kv->ring && s->n_past > kv->rows && (int64_t)(s->n_past - (int)keep) + window > kv->rows)
			return SG_ERR_UNSUPPORTED;
	}
	s->n_past = (int)keep;
	s->has_last = 0;
	return SG_OK;
}

static sg_status op_reset(void *self)
{
	sg_srv_model *m = self;
	return m->inner->reset(m->inner->self);
}

static sg_status set_history(sg_gen_state *st, const int32_t *t, size_t n)
{
	if (n > st->cap) {
		size_t cap = st->cap ? st->cap : 256;
		while (cap < n) cap *= 2;
		int32_t *nt = sg_realloc(st->tokens, cap * sizeof *nt);
		if (!nt) return SG_FAIL(SG_ERR_NOMEM, "token history of %zu entries", cap);
		st->tokens = nt;
		st->cap = cap;
	}
	memcpy(st->tokens, t, n * sizeof *t);
	st->n = n;
	return SG_OK;
}

sg_status sg_srv_model_prefix_begin(sg_srv_model *m, const uint8_t root[32], const int32_t *prompt, size_t n, size_t *reused,
				    long *diverged)
{
	*reused = 0;
	*diverged = -1;
	m->pc_armed = 0;
	sg_prefix_cache *pc = m->pool ? sg_pool_prefix_cache(m->pool) : NULL;
	if (!pc || n < 1) {
		/* no cache: every prompt is prefilled whole (exact reproducibility, and the baseline) */
		m->live_ok = 0;
		return sg_gen_state_reset(&m->state);
	}
	size_t B = (size_t)sg_pc_block_tokens(pc);
	sg_pc_match mt;
	/* at least the last prompt token is evaluated: its logits give the first answer token */
	sg_status st = sg_pc_lookup(pc, m, root, prompt, n - 1, &mt);
	if (st) return st;
	size_t K = mt.n_blocks * B;
	*diverged = mt.diverged_at;
	int done = 0;
	/* The live state of the same session may hold more than the blocks (the last answer's
	 * tokens, a partial block): rolling back to the common prefix reuses all of it. For
	 * attention-only models the CPU forward gives bit-identical rows whatever the chunking,
	 * decode steps included (tested in tests/unit/test_prefix_cache.c), so this changes no
	 * output. A recurrent state was advanced by the answer's decode steps, whose arithmetic
	 * differs from a prefill's: those models reuse blocks only. Another session's live state is
	 * never reused: only its own blocks are. */
	size_t live = sg_gen_common_prefix(&m->state, prompt, n);
	if (live >= n) live = n - 1;
	if (sg_session_has_recurrent_state(sg_lm_session(m->lm))) live = 0;
	if (live && live >= K && m->live_ok && !memcmp(m->live_root, root, 32) && op_truncate(m, live) == SG_OK) {
		m->state.n = live;
		K = live;
		done = 1;
	}
	if (!done) {
		if ((st = sg_gen_state_reset(&m->state))) goto out;
		sg_session *s = sg_lm_session(m->lm);
		size_t i = 0;
		while (i < mt.n_blocks && sg_session_restore_range(s, mt.payloads[i]) == SG_OK) i++;
		if (i < mt.n_blocks || set_history(&m->state, prompt, K)) {
			SG_WARN("serve: prefix restore stopped at block %zu of %zu: %s; prefilling the whole prompt", i, mt.n_blocks,
				sg_last_error());
			K = 0;
			if ((st = sg_gen_state_reset(&m->state))) goto out;
		}
	}
	memcpy(m->pc_root, root, 32);
	m->pc_prompt = prompt;
	m->pc_n = n;
	m->pc_armed = 1;
	*reused = K;
out:
	sg_pc_match_free(&mt);
	return st;
}

void sg_srv_model_prefix_end(sg_srv_model *m)
{
	if (m->pc_armed) {
		m->live_ok = 1;
		memcpy(m->live_root, m->pc_root, 32);
	}
	m->pc_armed = 0;
	m->pc_prompt = NULL;
}

sg_status sg_srv_model_reserve_tokens(sg_srv_model *m, size_t n_total)
{
	if (n_total > (size_t)m->info.n_ctx) n_total = (size_t)m->info.n_ctx;
	if (!m->pool || n_total <= m->kv_high) return SG_OK;
	sg_session *s = sg_lm_session(m->lm);
	/* the KV rows of one position; recurrent states are allocated whole up front */
	size_t per = 0;
	for (int l = 0; l < s->m->desc.n_layer; l++) per += 2 * s->fs.kv[l].k.row_bytes * (size_t)s->fs.kv[l].k.ne[1];
	sg_mem_evictor ev[2];
	int n_ev = sg_pool_evictors(m->pool, m, ev);
	char what[200];
	snprintf(what, sizeof what, "the KV cache rows of positions %zu..%zu", m->kv_high, n_total);
	return sg_memguard_reserve(sg_pool_guard(m->pool), what, (uint64_t)(n_total - m->kv_high) * per, ev, n_ev);
}

sg_status sg_srv_model_load(const char *name, const char *path, int32_t n_ctx, sg_srv_model **out)
{
	sg_srv_model *m = sg_calloc(1, sizeof *m);
	if (!m) return SG_FAIL(SG_ERR_NOMEM, "model state");
	snprintf(m->info.name, sizeof m->info.name, "%s", name);
	snprintf(m->info.path, sizeof m->info.path, "%s", path);
	m->info.created = (int64_t)time(NULL);
	m->info.size_bytes = sg_lm_weight_file_bytes(path);
	size_t pl = strlen(path);
	int gguf = pl > 5 && !strcmp(path + pl - 5, ".gguf");
	snprintf(m->info.format, sizeof m->info.format, "%s", gguf ? "gguf" : "safetensors");
	sg_lm_params lp = sg_lm_default_params();
	lp.n_ctx = n_ctx;
	sg_status s = sg_lm_load(path, &lp, &m->lm);
	if (s) {
		sg_free(m);
		return s;
	}
	snprintf(m->info.arch, sizeof m->info.arch, "%s", sg_model_arch(sg_lm_model(m->lm)));
	snprintf(m->info.quant, sizeof m->info.quant, "%s", gguf ? "gguf" : "bf16");
	m->info.n_ctx = sg_lm_n_ctx(m->lm);
	m->info.n_vocab = sg_lm_n_vocab(m->lm);
	m->inner = sg_lm_state(m->lm)->model;
	m->ops = *m->inner;
	m->ops.self = m;
	m->ops.eval = op_eval;
	m->ops.truncate = op_truncate;
	m->ops.reset = op_reset;
	sg_gen_state_init(&m->state, &m->ops);
	*out = m;
	return SG_OK;
}

void sg_srv_model_free(sg_srv_model *m)
{
	if (!m) return;
	sg_gen_state_free(&m->state);
	sg_lm_free(m->lm);
	sg_free(m);
}

sg_status sg_srv_model_chat_prompt(const sg_srv_model *m, const json_t *messages, const json_t *tools, char **out, size_t *len)
{
	if (!sg_lm_has_template(m->lm))
		return sg_error(SG_ERR_NOT_FOUND, "model '%s' has no chat template: use /v1/completions (or raw: true)", m->info.name);
	return sg_lm_chat_prompt(m->lm, messages, tools, out, len);
}

sg_status sg_srv_model_tokenize(const sg_srv_model *m, const char *text, size_t len, int add_special, int32_t **ids, size_t *n)
{
	return sg_lm_tokenize(m->lm, text, len, add_special, ids, n);
}

sg_status sg_srv_model_detokenize(const sg_srv_model *m, const int32_t *ids, size_t n, char **out, size_t *len)
{
	return sg_lm_detokenize(m->lm, ids, n, out, len);
}

sg_status sg_srv_model_token_bytes(const sg_srv_model *m, int32_t id, char **out, size_t *len)
{
	return sg_lm_token_bytes(m->lm, id, out, len);
}
