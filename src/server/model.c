/* A served model: weights + session + tokenizer + chat template bound to the generation loop
 * (see model.h). */
#include "server/model.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "backend/backend.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/flags.h"
#include "engine/lm.h"
#include "base/json.h"
#include "base/log.h"
#include "server/pool.h"

#if __has_include("text/tokenizer/tokenizer.h") && __has_include("text/template/chat_template.h") && __has_include("engine/session.h")
#define SG_SERVER_HAVE_MODELS 1
#include "engine/session.h"
#include "models/model.h"
#include "text/template/chat_template.h"
#include "text/grammar/token_trie.h"
#include "text/tokenizer/tokenizer.h"
#include "text/grammar/toolcall.h"
#else
#define SG_SERVER_HAVE_MODELS 0
#endif

#define MAX_EOS 16

struct sg_srv_model {
	sg_srv_model_info info;
	sg_gen_model ops;
	sg_gen_state state;
	sg_srv_model_agent agent;
#if SG_SERVER_HAVE_MODELS
	sg_token_trie *trie; /* lazily built by the worker */
	uint8_t **tok_bytes; /* [n_vocab] each token's output bytes */
	uint32_t *tok_len;   /* [n_vocab] */
	sg_lm *lm;                 /* the model, its session, tokenizer, template, detokenizer, EOS ids */
	sg_model *model;           /* borrowed from lm */
	sg_session *session;       /* borrowed from lm: driven with the prefix-cache hooks below */
	const sg_tokenizer *tok;   /* borrowed from lm */
#endif
	struct sg_pool *pool;     /* prefix cache + memory guard; NULL: none */
	int pc_armed;             /* the running prefill snapshots block boundaries */
	uint8_t pc_root[32];      /* its chain root */
	const int32_t *pc_prompt; /* [pc_n] its prompt (borrowed) */
	size_t pc_n;
	int live_ok;              /* the live state belongs to live_root's session */
	uint8_t live_root[32];
	size_t live_blocks;       /* whole blocks at the head of the live state that a block-aligned
				   * prefill (or a restore) wrote: equal to the cached blocks */
	size_t kv_high;           /* highest position ever evaluated (KV rows past it untouched) */
};

const sg_srv_model_info *sg_srv_model_info_get(const sg_srv_model *m)
{
	return &m->info;
}

const int32_t *sg_srv_model_eos(const sg_srv_model *m, size_t *n)
{
#if SG_SERVER_HAVE_MODELS
	return sg_lm_eos(m->lm, n);
#else
	*n = 0;
	return NULL;
#endif
}

const sg_srv_model_agent *sg_srv_model_agent_get(const sg_srv_model *m)
{
	return &m->agent;
}

sg_gen_state *sg_srv_model_state(sg_srv_model *m)
{
	return &m->state;
}

const sg_gen_detok *sg_srv_model_detok(sg_srv_model *m)
{
#if SG_SERVER_HAVE_MODELS
	return sg_lm_detok(m->lm);
#else
	return NULL;
#endif
}

static uint64_t path_bytes(const char *path)
{
	struct stat st;
	if (stat(path, &st)) return 0;
	if (!S_ISDIR(st.st_mode)) return (uint64_t)st.st_size;
	/* A folder: the weights are the safetensors files; a rough total is enough for listings. */
	char p[4200];
	uint64_t total = 0;
	snprintf(p, sizeof p, "%s/model.safetensors", path);
	if (!stat(p, &st)) total += (uint64_t)st.st_size;
	return total;
}

void sg_srv_model_bind(sg_srv_model *m, struct sg_pool *pool)
{
	m->pool = pool;
}

const char *sg_srv_backend_accel(void)
{
	const char *b = sg_flag_str("RETI_SERVE_BACKEND");
	/* a named accelerator; auto: the one models go to when a device is usable (a model it cannot
	 * take loads on the CPU, which the guard then projects as device memory: the conservative
	 * side) */
	if (b && *b && strcmp(b, "auto") && strcmp(b, "cpu")) return sg_backend_known(b) ? b : NULL;
	if (!b || !*b || !strcmp(b, "auto")) return sg_backend_auto_accel();
	return NULL;
}

#if SG_SERVER_HAVE_MODELS

/* Takes the block snapshot that ends at position `end` (the session is there) into the cache,
 * unless it is cached already or the memory guard has no room for it: a block is an
 * optimisation, never a reason to fail the request. */
static void snapshot_block(sg_srv_model *m, size_t end)
{
	sg_prefix_cache *pc = sg_pool_prefix_cache(m->pool);
	size_t B = (size_t)sg_pc_block_tokens(pc), b = end / B - 1;
	if (sg_pc_contains(pc, m, m->pc_root, m->pc_prompt, b)) return;
	sg_mem_evictor ev[2];
	int n_ev = sg_pool_evictors(m->pool, m, ev);
	/* block snapshots stay in device memory on a GPU (SARAGOSSA_SNAPSHOT_RESIDENT), else host memory */
	sg_mem_where kind = sg_session_snapshots_on_device(m->session) ? SG_MEM_ACCEL : SG_MEM_HOST;
	if (sg_memguard_reserve(sg_pool_guard(m->pool), "a prefix-cache block", sg_session_block_bytes(m->session, (int)B), kind, ev, n_ev)) {
		SG_DEBUG("serve: block %zu not cached: %s", b, sg_last_error());
		return;
	}
	sg_snapshot *snap = NULL;
	if (sg_session_snapshot_range(m->session, (int)(end - B), &snap)) {
		SG_DEBUG("serve: block %zu not cached: %s", b, sg_last_error());
		return;
	}
	if (sg_pc_insert(pc, m, m->pc_root, m->pc_prompt, b, snap, sg_snapshot_bytes(snap), NULL))
		SG_DEBUG("serve: block %zu not cached: %s", b, sg_last_error());
}

/* A decode step of greedy sampling: only the argmax comes back (a GPU keeps the logits). Past the
 * prompt, so no block boundary of the prefix cache is crossed here. */
static sg_status op_eval_greedy(void *self, int32_t token, size_t n_past, int32_t *next)
{
	sg_srv_model *m = self;
	if ((size_t)sg_session_position(m->session) != n_past)
		return sg_error(SG_ERR_INTERNAL, "serve: session at %d, the loop expects %zu", sg_session_position(m->session), n_past);
	sg_status s = sg_session_decode_greedy(m->session, token, next);
	if ((size_t)sg_session_position(m->session) > m->kv_high) m->kv_high = (size_t)sg_session_position(m->session);
	return s;
}

/* A decode step that hands back only sampling candidates (sg_session_decode_top). */
static sg_status op_eval_top(void *self, int32_t token, size_t n_past, int32_t k, const int32_t *ids, int32_t mids,
			     int32_t *top_ids, float *top_v, float *v)
{
	sg_srv_model *m = self;
	if ((size_t)sg_session_position(m->session) != n_past)
		return sg_error(SG_ERR_INTERNAL, "serve: session at %d, the loop expects %zu", sg_session_position(m->session), n_past);
	sg_status s = sg_session_decode_top(m->session, token, k, ids, mids, top_ids, top_v, v);
	if ((size_t)sg_session_position(m->session) > m->kv_high) m->kv_high = (size_t)sg_session_position(m->session);
	return s;
}

static sg_status op_eval(void *self, const int32_t *t, size_t n, size_t n_past, float *logits)
{
	sg_srv_model *m = self;
	if ((size_t)sg_session_position(m->session) != n_past)
		return sg_error(SG_ERR_INTERNAL, "serve: session at %d, the loop expects %zu", sg_session_position(m->session), n_past);
	/* The prefill runs in pieces that end on block boundaries, whatever the loop's chunks and
	 * whether the cache is on or off: a cold run, a run restored at a boundary and a run
	 * without the cache evaluate the same pieces (a linear-attention layer's chunked arithmetic
	 * depends on them), and with the cache armed each boundary's state is copied as it is
	 * reached. */
	size_t B = m->pool ? (size_t)sg_pool_block_tokens(m->pool) : 0;
	sg_status s = SG_OK;
	for (size_t done = 0, pos = n_past; done < n && !s;) {
		size_t c = n - done;
		if (B && pos + c > (pos / B + 1) * B) c = (pos / B + 1) * B - pos;
		s = sg_session_eval(m->session, t + done, (int)c, NULL);
		done += c;
		pos += c;
		if (!s && m->pc_armed && pos % B == 0 && pos <= m->pc_n) snapshot_block(m, pos);
	}
	if ((size_t)sg_session_position(m->session) > m->kv_high) m->kv_high = (size_t)sg_session_position(m->session);
	if (s) return s;
	const float *l = sg_session_logits(m->session);
	if (!l) return sg_error(SG_ERR_INTERNAL, "serve: no logits after eval");
	memcpy(logits, l, (size_t)m->info.n_vocab * sizeof *logits);
	return SG_OK;
}

/* Rolls the session back to its first keep tokens (sg_session_truncate says when it cannot). */
static sg_status op_truncate(void *self, size_t keep)
{
	sg_srv_model *m = self;
	if (keep > (size_t)INT32_MAX) return sg_error(SG_ERR_INVALID_ARG, "truncate to %zu", keep);
	return sg_session_truncate(m->session, (int)keep);
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
	if (n) memcpy(st->tokens, t, n * sizeof *t);
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
	 * tokens, a partial block): rolling back to the common prefix reuses all of it. That is
	 * exact only where the forward is chunk-invariant (sg_session_chunk_invariant: the CPU
	 * without its blocked GEMM, attention-only layers): elsewhere the answer's decode steps did
	 * other arithmetic than a cold prefill would, so those setups reuse blocks only, which are
	 * prefilled in the same pieces in both runs. Another session's live state is never reused:
	 * only its own blocks are. */
	size_t live = sg_gen_common_prefix(&m->state, prompt, n);
	if (live >= n) live = n - 1;
	if (!sg_session_chunk_invariant(m->session)) live = 0;
	if (live && live >= K && m->live_ok && !memcmp(m->live_root, root, 32) && op_truncate(m, live) == SG_OK) {
		m->state.n = live;
		K = live;
		done = 1;
	}
	/* Elsewhere the blocks are restored; those the live state of the same session already holds
	 * (rows a block-aligned prefill wrote, not the answer's decode steps) are the cached blocks'
	 * own bits: the state is rolled back to them (attention layers only) and the rest copied. */
	size_t have = 0;
	if (!done && m->live_ok && !memcmp(m->live_root, root, 32) && !sg_session_has_recurrent_state(m->session)) {
		size_t common = sg_gen_common_prefix(&m->state, prompt, n);
		have = common / B < m->live_blocks ? common / B : m->live_blocks;
		if (have > mt.n_blocks) have = mt.n_blocks;
		if (have && op_truncate(m, have * B) == SG_OK) m->state.n = have * B;
		else have = 0;
	}
	if (!done) {
		if (!have && (st = sg_gen_state_reset(&m->state))) goto out;
		size_t i = have;
		while (i < mt.n_blocks && sg_session_restore_range(m->session, mt.payloads[i]) == SG_OK) i++;
		if (i < mt.n_blocks || set_history(&m->state, prompt, K)) {
			SG_WARN("serve: prefix restore stopped at block %zu of %zu: %s; prefilling the whole prompt", i, mt.n_blocks,
				sg_last_error());
			K = 0;
			if ((st = sg_gen_state_reset(&m->state))) goto out;
		} else if (K) SG_DEBUG("serve: prefix of %zu tokens: %zu blocks kept from the live state, %zu restored", K, have, K / B - have);
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
		/* the prompt's whole blocks were restored or prefilled in block pieces; the partial
		 * block past them and the answer were not */
		size_t pos = (size_t)sg_session_position(m->session), B = (size_t)sg_pool_block_tokens(m->pool);
		m->live_blocks = (pos < m->pc_n ? pos : m->pc_n) / B;
	}
	m->pc_armed = 0;
	m->pc_prompt = NULL;
}

sg_status sg_srv_model_reserve_tokens(sg_srv_model *m, size_t n_total)
{
	if (n_total > (size_t)m->info.n_ctx) n_total = (size_t)m->info.n_ctx;
	if (!m->pool || n_total <= m->kv_high) return SG_OK;
	/* A GPU backend allocates the whole KV cache in device memory at load (it was projected
	 * then): positions reached for the first time cost nothing new. A CPU cache's pages are
	 * only backed once touched: those rows grow the host footprint. */
	uint64_t f, t;
	if (sg_srv_model_accel_mem(m, &f, &t)) return SG_OK;
	size_t per = sg_session_block_bytes(m->session, 1) - sg_session_block_bytes(m->session, 0);
	sg_mem_evictor ev[2];
	int n_ev = sg_pool_evictors(m->pool, m, ev);
	char what[200];
	snprintf(what, sizeof what, "the KV cache rows of positions %zu..%zu", m->kv_high, n_total);
	return sg_memguard_reserve(sg_pool_guard(m->pool), what, (uint64_t)(n_total - m->kv_high) * per, SG_MEM_HOST, ev, n_ev);
}

static sg_status op_reset(void *self)
{
	sg_srv_model *m = self;
	sg_session_reset(m->session);
	return SG_OK;
}

/* The tool-call syntax: render an assistant turn holding one call with the model's own template
 * and look at how it came out. A template that cannot render a call (or has none) falls back
 * on the vocabulary's markers, then on Hermes (the most common, and what ChatML models learn). */
static int find_syntax(const sg_srv_model *m)
{
	int syn = SG_TC_HERMES;
	if (sg_tokenizer_token_id(m->tok, "[TOOL_CALLS]", 12) >= 0) syn = SG_TC_MISTRAL;
	else if (sg_tokenizer_token_id(m->tok, "<|python_tag|>", 14) >= 0) syn = SG_TC_LLAMA3;
	else if (sg_tokenizer_token_id(m->tok, "<|tool_call>", 12) >= 0) syn = SG_TC_GEMMA4;
	else if (!strncmp(m->info.arch, "gemma3", 6)) syn = SG_TC_GEMMA3;
	if (!sg_lm_has_template(m->lm)) return syn;
	json_t *msgs = json_pack("[{s:s,s:s},{s:s,s:s,s:[{s:s,s:s,s:{s:s,s:{s:i}}}]},{s:s,s:s,s:s}]", "role", "user", "content",
				 "x", "role", "assistant", "content", "", "tool_calls", "id", "call_0", "type", "function",
				 "function", "name", "probe_fn", "arguments", "a", 1, "role", "tool", "tool_call_id", "call_0",
				 "content", "1");
	json_t *tools = json_pack("[{s:s,s:{s:s,s:s,s:{s:s,s:{s:{s:s}}}}}]", "type", "function", "function", "name",
				  "probe_fn", "description", "probe", "parameters", "type", "object", "properties", "a", "type",
				  "integer");
	char *out = NULL;
	size_t n = 0;
	sg_chat_params p = {.messages = msgs, .tools = tools, .add_generation_prompt = 1};
	if (msgs && tools && sg_lm_chat_render(m->lm, &p, &out, &n) == SG_OK) {
		if (strstr(out, "<function=probe_fn>")) syn = SG_TC_QWEN_XML;
		else if (strstr(out, "<tool_call>")) syn = SG_TC_HERMES;
		else if (strstr(out, "[TOOL_CALLS]")) syn = SG_TC_MISTRAL;
		else if (strstr(out, "<|tool_call>")) syn = SG_TC_GEMMA4;
		else if (strstr(out, "\"parameters\"") && strstr(out, "probe_fn")) syn = SG_TC_LLAMA3;
	}
	sg_free(out);
	json_decref(msgs);
	json_decref(tools);
	return syn;
}

static void find_agent(sg_srv_model *m)
{
	m->agent.syntax = find_syntax(m);
	m->agent.think_end_id = -1;
	m->agent.think_start_id = -1;
	if (sg_tokenizer_token_id(m->tok, "<think>", 7) >= 0 && sg_tokenizer_token_id(m->tok, "</think>", 8) >= 0) {
		snprintf(m->agent.think_start, sizeof m->agent.think_start, "<think>");
		snprintf(m->agent.think_end, sizeof m->agent.think_end, "</think>");
		m->agent.think_end_id = sg_tokenizer_token_id(m->tok, "</think>", 8);
		m->agent.think_start_id = sg_tokenizer_token_id(m->tok, "<think>", 7);
	}
}

/* Token i's output bytes, as they appear inside a text: decoded after a reference token (so a
 * SentencePiece word-start space is kept, which decoding a first token strips), byte tokens
 * <0xXX> as their byte (a lone byte would decode to U+FFFD). */
static sg_status token_output_bytes(const sg_tokenizer *t, int32_t ref, const char *ref_text, size_t ref_len, int32_t id,
				    uint8_t **out, uint32_t *len)
{
	size_t sl = 0;
	const char *sp = sg_tokenizer_token(t, id, &sl);
	*out = NULL;
	*len = 0;
	if (sp && sl == 6 && !memcmp(sp, "<0x", 3) && sp[5] == '>') {
		unsigned v;
		char hex[3] = {sp[3], sp[4], 0};
		if (sscanf(hex, "%2x", &v) == 1) {
			*out = sg_malloc(1);
			if (!*out) return SG_FAIL(SG_ERR_NOMEM, "token bytes");
			**out = (uint8_t)v;
			*len = 1;
			return SG_OK;
		}
	}
	int32_t ids[2] = {ref, id};
	char *s = NULL;
	size_t n = 0;
	sg_status st = sg_tokenizer_decode(t, ids, 2, 0, &s, &n);
	if (st) return st;
	size_t skip = n >= ref_len && !memcmp(s, ref_text, ref_len) ? ref_len : 0;
	*len = (uint32_t)(n - skip);
	*out = sg_malloc(*len + 1);
	if (*out) memcpy(*out, s + skip, *len);
	sg_free(s);
	return *out ? SG_OK : SG_FAIL(SG_ERR_NOMEM, "token bytes");
}

sg_status sg_srv_model_trie(sg_srv_model *m, const sg_token_trie **trie, const uint8_t *const **tok, const uint32_t **len)
{
	if (!m->trie) {
		int32_t nv = m->info.n_vocab;
		m->tok_bytes = sg_calloc((size_t)nv, sizeof *m->tok_bytes);
		m->tok_len = sg_calloc((size_t)nv, sizeof *m->tok_len);
		int *special = sg_malloc((size_t)nv * sizeof *special);
		int n_special = 0;
		sg_status st = m->tok_bytes && m->tok_len && special ? SG_OK : SG_FAIL(SG_ERR_NOMEM, "vocabulary table");
		/* The reference: a plain letter token. */
		int32_t ref = sg_tokenizer_token_id(m->tok, "a", 1);
		char *ref_text = NULL;
		size_t ref_len = 0;
		if (st == SG_OK && ref >= 0) st = sg_tokenizer_decode(m->tok, &ref, 1, 0, &ref_text, &ref_len);
		for (int32_t i = 0; st == SG_OK && i < nv; i++) {
			if (sg_tokenizer_is_special(m->tok, i) || !sg_tokenizer_token(m->tok, i, &(size_t){0})) {
				special[n_special++] = i;
				continue;
			}
			if (ref >= 0) st = token_output_bytes(m->tok, ref, ref_text, ref_len, i, &m->tok_bytes[i], &m->tok_len[i]);
			else {
				char *s = NULL;
				size_t n = 0;
				st = sg_tokenizer_decode(m->tok, &i, 1, 0, &s, &n);
				m->tok_bytes[i] = (uint8_t *)s;
				m->tok_len[i] = (uint32_t)n;
			}
		}
		sg_free(ref_text);
		size_t n_eos = 0;
		const int32_t *eos = sg_lm_eos(m->lm, &n_eos);
		int eot[MAX_EOS];
		if (n_eos > MAX_EOS) n_eos = MAX_EOS;
		for (size_t i = 0; i < n_eos; i++) eot[i] = eos[i];
		if (st == SG_OK)
			st = sg_token_trie_build((const uint8_t *const *)m->tok_bytes, m->tok_len, nv, special, n_special, eot,
						 (int)n_eos, &m->trie);
		sg_free(special);
		if (st) return st;
	}
	*trie = m->trie;
	*tok = (const uint8_t *const *)m->tok_bytes;
	*len = m->tok_len;
	return SG_OK;
}

sg_status sg_srv_model_load(const char *name, const char *path, int32_t n_ctx, sg_srv_model **out)
{
	sg_srv_model *m = sg_calloc(1, sizeof *m);
	if (!m) return SG_FAIL(SG_ERR_NOMEM, "model state");
	snprintf(m->info.name, sizeof m->info.name, "%s", name);
	snprintf(m->info.path, sizeof m->info.path, "%s", path);
	m->info.created = (int64_t)time(NULL);
	m->info.size_bytes = path_bytes(path);
	size_t pl = strlen(path);
	int gguf = pl > 5 && !strcmp(path + pl - 5, ".gguf");
	snprintf(m->info.format, sizeof m->info.format, "%s", gguf ? "gguf" : "safetensors");
	/* the memory guard has already projected this load: no second check here */
	sg_lm_params lp = {.n_ctx = n_ctx, .backend = sg_flag_str("RETI_SERVE_BACKEND"), .no_memory_check = 1};
	sg_status s = sg_lm_load(path, &lp, &m->lm);
	if (s) goto fail;
	m->model = sg_lm_model(m->lm);
	m->session = sg_lm_session(m->lm);
	m->tok = sg_lm_tokenizer(m->lm);
	snprintf(m->info.arch, sizeof m->info.arch, "%s", sg_model_arch(m->model));
	snprintf(m->info.quant, sizeof m->info.quant, "%s", gguf ? "gguf" : "bf16");
	m->info.n_ctx = sg_lm_n_ctx(m->lm);
	m->info.n_vocab = sg_lm_n_vocab(m->lm);
	find_agent(m);
	m->ops = (sg_gen_model){.self = m, .n_vocab = m->info.n_vocab, .n_ctx = m->info.n_ctx, .eval = op_eval,
				.truncate = op_truncate, .reset = op_reset, .eval_greedy = op_eval_greedy,
				.eval_top = op_eval_top, .top_max = sg_session_top_max(m->session)};
	sg_gen_state_init(&m->state, &m->ops);
	*out = m;
	return SG_OK;
fail:
	sg_srv_model_free(m);
	return s;
}

int sg_srv_model_accel_mem(sg_srv_model *m, uint64_t *free_bytes, uint64_t *total_bytes)
{
	sg_backend *be = m->model ? m->model->be : NULL;
	if (!be || !be->ops->mem_info) return 0;
	return be->ops->mem_info(be, free_bytes, total_bytes) == SG_OK;
}

void sg_srv_model_free(sg_srv_model *m)
{
	if (!m) return;
	sg_gen_state_free(&m->state);
	sg_token_trie_free(m->trie);
	if (m->tok_bytes)
		for (int32_t i = 0; i < m->info.n_vocab; i++) sg_free(m->tok_bytes[i]);
	sg_free(m->tok_bytes);
	sg_free(m->tok_len);
	sg_lm_free(m->lm);
	sg_free(m);
}

sg_status sg_srv_model_chat_prompt(const sg_srv_model *m, const json_t *messages, const json_t *tools, const json_t *kwargs,
				   char **out, size_t *len)
{
	if (!sg_lm_has_template(m->lm))
		return sg_error(SG_ERR_NOT_FOUND, "model '%s' has no chat template: use /v1/completions (or raw: true)", m->info.name);
	sg_chat_params p = {.messages = messages, .tools = tools, .kwargs = kwargs, .add_generation_prompt = 1};
	return sg_lm_chat_render(m->lm, &p, out, len);
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

#else /* the model forward, tokenizer or chat template is not in this build */

sg_status sg_srv_model_prefix_begin(sg_srv_model *m, const uint8_t root[32], const int32_t *prompt, size_t n, size_t *reused,
				    long *diverged)
{
	*reused = 0;
	*diverged = -1;
	return SG_OK;
}

void sg_srv_model_prefix_end(sg_srv_model *m) {}
sg_status sg_srv_model_reserve_tokens(sg_srv_model *m, size_t n_total) { return SG_OK; }
int sg_srv_model_accel_mem(sg_srv_model *m, uint64_t *free_bytes, uint64_t *total_bytes) { return 0; }

sg_status sg_srv_model_load(const char *name, const char *path, int32_t n_ctx, sg_srv_model **out)
{
	(void)path_bytes;
	return sg_error(SG_ERR_UNSUPPORTED, "serve: model '%s': this build cannot run models yet (no forward pass or tokenizer)",
			name);
}

void sg_srv_model_free(sg_srv_model *m)
{
	sg_free(m);
}

sg_status sg_srv_model_chat_prompt(const sg_srv_model *m, const json_t *messages, const json_t *tools, const json_t *kwargs,
				   char **out, size_t *len)
{
	return sg_error(SG_ERR_UNSUPPORTED, "no chat templates in this build");
}

sg_status sg_srv_model_trie(sg_srv_model *m, const struct sg_token_trie **trie, const uint8_t *const **tok,
			    const uint32_t **len)
{
	return sg_error(SG_ERR_UNSUPPORTED, "no tokenizer in this build");
}

sg_status sg_srv_model_tokenize(const sg_srv_model *m, const char *text, size_t len, int add_special, int32_t **ids, size_t *n)
{
	return sg_error(SG_ERR_UNSUPPORTED, "no tokenizer in this build");
}

sg_status sg_srv_model_detokenize(const sg_srv_model *m, const int32_t *ids, size_t n, char **out, size_t *len)
{
	return sg_error(SG_ERR_UNSUPPORTED, "no tokenizer in this build");
}

sg_status sg_srv_model_token_bytes(const sg_srv_model *m, int32_t id, char **out, size_t *len)
{
	return sg_error(SG_ERR_UNSUPPORTED, "no tokenizer in this build");
}

#endif
