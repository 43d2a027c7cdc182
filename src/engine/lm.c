/* The engine: a language model bound to the generation loop and the prefix cache (see lm.h). */
#include "engine/lm.h"

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/flags.h"
#include "base/json.h"
#include "base/log.h"
#include "base/progress.h"
#include "base/sysinfo.h"
#include "engine/expert_cache.h"
#include "engine/session.h"
#include "models/model.h"
#include "text/template/chat_template.h"
#include "text/tokenizer/tokenizer.h"

#define MAX_EOS 16

struct sg_lm {
	sg_model *model;
	sg_session *session;
	sg_tokenizer *tok;
	sg_chat_template *tmpl; /* NULL: no template */
	sg_detok *detok;
	int32_t n_ctx, n_vocab;
	int32_t eos[MAX_EOS];
	size_t n_eos;
	sg_gen_model ops;
	sg_gen_detok dt_ops;
	sg_gen_state state;
	/* the prefix cache */
	sg_prefix_cache *pc;      /* NULL: off */
	int pc_own;               /* pc is lm's own (freed with it), not a shared one */
	size_t block_tokens;      /* B: prefills are cut at its multiples, cache on or off */
	sg_lm_hooks hooks;
	int pc_armed;             /* the running prefill snapshots block boundaries */
	uint8_t pc_root[32];      /* its chain root */
	const int32_t *pc_prompt; /* [pc_n] its prompt (borrowed) */
	size_t pc_n;
	int live_ok;              /* the live state belongs to live_root's session */
	uint8_t live_root[32];
	size_t live_blocks;       /* whole blocks at the head of the live state that a block-aligned
				   * prefill (or a restore) wrote: the bits of the cached blocks */
	int exact;                /* the running generation continues a state a cold block-piece
				   * prefill would have built */
	size_t kv_high;           /* highest position ever evaluated (KV rows past it untouched) */
};

sg_lm_params sg_lm_default_params(void)
{
	return (sg_lm_params){0};
}

sg_model *sg_lm_model(const sg_lm *lm)
{
	return lm->model;
}

sg_session *sg_lm_session(const sg_lm *lm)
{
	return lm->session;
}

const sg_tokenizer *sg_lm_tokenizer(const sg_lm *lm)
{
	return lm->tok;
}

int32_t sg_lm_n_ctx(const sg_lm *lm)
{
	return lm->n_ctx;
}

int32_t sg_lm_n_vocab(const sg_lm *lm)
{
	return lm->n_vocab;
}

int sg_lm_has_template(const sg_lm *lm)
{
	return lm->tmpl != NULL;
}

const int32_t *sg_lm_eos(const sg_lm *lm, size_t *n)
{
	*n = lm->n_eos;
	return lm->eos;
}

sg_gen_state *sg_lm_state(sg_lm *lm)
{
	return &lm->state;
}

const sg_gen_detok *sg_lm_detok(sg_lm *lm)
{
	return &lm->dt_ops;
}

static int ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n >= k && !strcmp(s + n - k, suffix);
}

uint64_t sg_lm_weight_file_bytes(const char *path)
{
	struct stat st;
	if (stat(path, &st)) return 0;
	if (!S_ISDIR(st.st_mode)) return (uint64_t)st.st_size;
	/* A folder: the weights are its safetensors files (shards included), or the one .gguf a
	 * folder may stand for. */
	DIR *d = opendir(path);
	if (!d) return 0;
	uint64_t total = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!ends_with(e->d_name, ".safetensors") && !ends_with(e->d_name, ".gguf")) continue;
		char p[4200];
		snprintf(p, sizeof p, "%s/%s", path, e->d_name);
		if (!stat(p, &st) && S_ISREG(st.st_mode)) total += (uint64_t)st.st_size;
	}
	closedir(d);
	return total;
}

sg_status sg_lm_check_memory(const char *path)
{
	int64_t limit = sg_flag_int("SARAGOSSA_MEM_LIMIT");
	if (limit < 0) return SG_OK;
	uint64_t avail = limit > 0 ? (uint64_t)limit : sg_mem_available();
	uint64_t need = sg_lm_weight_file_bytes(path);
	if (!avail || need <= avail) return SG_OK;
	char n[32], a[32];
	sg_format_bytes(need, n, sizeof n);
	sg_format_bytes(avail, a, sizeof a);
	return sg_error(SG_ERR_NOMEM,
			"not enough memory for %s: its weights need %s, %s %s (free memory or pick a smaller "
			"quantization; SARAGOSSA_MEM_LIMIT=-1 loads anyway)",
			path, n, a, limit > 0 ? "allowed by SARAGOSSA_MEM_LIMIT" : "available");
}

/* Takes the block snapshot that ends at position `end` (the session is there) into the cache,
 * unless it is cached already or the memory hook has no room for it: a block is an
 * optimisation, never a reason to fail the generation. */
static void snapshot_block(sg_lm *lm, size_t end)
{
	size_t B = lm->block_tokens, b = end / B - 1;
	if (sg_pc_contains(lm->pc, lm, lm->pc_root, lm->pc_prompt, b)) return;
	/* block snapshots stay in device memory on a GPU (SARAGOSSA_SNAPSHOT_RESIDENT), else host memory */
	int dev = sg_session_snapshots_on_device(lm->session);
	if (lm->hooks.reserve &&
	    lm->hooks.reserve(lm->hooks.user, lm, "a prefix-cache block", sg_session_block_bytes(lm->session, (int)B), dev)) {
		SG_DEBUG("engine: block %zu not cached: %s", b, sg_last_error());
		return;
	}
	sg_snapshot *snap = NULL;
	if (sg_session_snapshot_range(lm->session, (int)(end - B), &snap)) {
		SG_DEBUG("engine: block %zu not cached: %s", b, sg_last_error());
		return;
	}
	if (sg_pc_insert(lm->pc, lm, lm->pc_root, lm->pc_prompt, b, snap, sg_snapshot_bytes(snap), NULL))
		SG_DEBUG("engine: block %zu not cached: %s", b, sg_last_error());
}

static sg_status at(const sg_lm *lm, size_t n_past)
{
	if ((size_t)sg_session_position(lm->session) == n_past) return SG_OK;
	return sg_error(SG_ERR_INTERNAL, "engine: session at %d, the loop expects %zu", sg_session_position(lm->session), n_past);
}

static void note_high(sg_lm *lm)
{
	if ((size_t)sg_session_position(lm->session) > lm->kv_high) lm->kv_high = (size_t)sg_session_position(lm->session);
}

/* One token, only its argmax back (the session's greedy step: on a GPU, one recorded graph and a
 * 4-byte read instead of the logits). Past the prompt: no block boundary is snapshot here. */
static sg_status op_eval_greedy(void *self, int32_t token, size_t n_past, int32_t *next)
{
	sg_lm *lm = self;
	sg_status s = at(lm, n_past);
	if (s) return s;
	s = sg_session_decode_greedy(lm->session, token, next);
	note_high(lm);
	return s;
}

/* One token, only its sampling candidates back (sg_session_decode_top). */
static sg_status op_eval_top(void *self, int32_t token, size_t n_past, int32_t k, const int32_t *ids, int32_t m,
			     int32_t *top_ids, float *top_v, float *v)
{
	sg_lm *lm = self;
	sg_status s = at(lm, n_past);
	if (s) return s;
	s = sg_session_decode_top(lm->session, token, k, ids, m, top_ids, top_v, v);
	note_high(lm);
	return s;
}

static sg_status op_eval(void *self, const int32_t *t, size_t n, size_t n_past, float *logits)
{
	sg_lm *lm = self;
	sg_status s = at(lm, n_past);
	if (s) return s;
	/* The prefill runs in pieces that end on block boundaries, whatever the loop's chunks and
	 * whether the cache is on or off: a cold run, a run restored at a boundary and a run
	 * without the cache evaluate the same pieces (a linear-attention layer's chunked arithmetic
	 * and a blocked GEMM's sums depend on them), and with the cache armed each boundary's
	 * state is copied as it is reached. */
	size_t B = lm->block_tokens;
	for (size_t done = 0, pos = n_past; done < n && !s;) {
		size_t c = n - done;
		if (B && pos + c > (pos / B + 1) * B) c = (pos / B + 1) * B - pos;
		s = sg_session_eval(lm->session, t + done, (int)c, NULL);
		done += c;
		pos += c;
		if (!s && lm->pc_armed && pos % B == 0 && pos <= lm->pc_n) snapshot_block(lm, pos);
	}
	note_high(lm);
	if (s) return s;
	const float *l = sg_session_logits(lm->session);
	if (!l) return sg_error(SG_ERR_INTERNAL, "engine: no logits after eval");
	memcpy(logits, l, (size_t)lm->n_vocab * sizeof *logits);
	return SG_OK;
}

/* A speculative verify step: every position's logits, with a decode step's bits. */
static sg_status op_eval_rows(void *self, const int32_t *t, size_t n, size_t n_past, float *logits)
{
	sg_lm *lm = self;
	sg_status s = at(lm, n_past);
	if (s) return s;
	if (n > (size_t)INT32_MAX) return sg_error(SG_ERR_INVALID_ARG, "%zu tokens", n);
	s = sg_session_eval_exact(lm->session, t, (int)n, logits);
	note_high(lm);
	return s;
}

/* The same step for greedy decoding: only each position's argmax comes back. */
static sg_status op_eval_rows_greedy(void *self, const int32_t *t, size_t n, size_t n_past, int32_t *ids)
{
	sg_lm *lm = self;
	sg_status s = at(lm, n_past);
	if (s) return s;
	if (n > (size_t)INT32_MAX) return sg_error(SG_ERR_INVALID_ARG, "%zu tokens", n);
	s = sg_session_eval_exact_greedy(lm->session, t, (int)n, ids);
	note_high(lm);
	return s;
}

static sg_status op_mark(void *self, size_t n_past)
{
	sg_lm *lm = self;
	sg_status s = at(lm, n_past);
	return s ? s : sg_session_mark(lm->session);
}

/* Rolls the session back to its first keep tokens (sg_session_truncate says when it cannot). */
static sg_status op_truncate(void *self, size_t keep)
{
	sg_lm *lm = self;
	if (keep > (size_t)INT32_MAX) return sg_error(SG_ERR_INVALID_ARG, "truncate to %zu", keep);
	sg_status s = sg_session_truncate(lm->session, (int)keep);
	/* the blocks past keep are gone from the live state */
	if (!s && lm->block_tokens && keep / lm->block_tokens < lm->live_blocks) lm->live_blocks = keep / lm->block_tokens;
	return s;
}

static sg_status op_reset(void *self)
{
	sg_lm *lm = self;
	sg_session_reset(lm->session);
	lm->live_blocks = 0;
	return SG_OK;
}

static void free_snapshot(void *p) { sg_snapshot_free(p); }

static sg_status dt_push(void *self, int32_t tok, const char **piece, size_t *len)
{
	return sg_detok_push(((sg_lm *)self)->detok, tok, piece, len);
}

static sg_status dt_flush(void *self, const char **piece, size_t *len)
{
	return sg_detok_flush(((sg_lm *)self)->detok, piece, len);
}

static void dt_reset(void *self)
{
	sg_lm *lm = self;
	/* A fresh stream per generation: nothing of the last answer is held back. */
	sg_detok *d = NULL;
	if (sg_detok_create(lm->tok, 1, &d) == SG_OK) {
		sg_detok_free(lm->detok);
		lm->detok = d;
	}
}

static void add_eos(int32_t *eos, size_t *n, size_t cap, int32_t n_vocab, int32_t id)
{
	if (id < 0 || id >= n_vocab || *n >= cap) return;
	for (size_t i = 0; i < *n; i++)
		if (eos[i] == id) return;
	eos[(*n)++] = id;
}

size_t sg_lm_find_eos(const sg_tokenizer *tok, int32_t n_vocab, const char *path, int32_t *eos, size_t cap)
{
	size_t n = 0;
	add_eos(eos, &n, cap, n_vocab, sg_tokenizer_eos(tok));
	static const char *eot[] = {"<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<|endoftext|>", "<|eom_id|>",
				    "</s>", "<turn|>", "<|return|>"};
	for (size_t i = 0; i < sizeof eot / sizeof *eot; i++)
		add_eos(eos, &n, cap, n_vocab, sg_tokenizer_token_id(tok, eot[i], strlen(eot[i])));
	char p[4200];
	snprintf(p, sizeof p, "%s/generation_config.json", path);
	json_t *g;
	if (sg_json_load_file(p, 1 << 20, &g) == SG_OK) {
		json_t *e = json_object_get(g, "eos_token_id");
		if (json_is_integer(e)) add_eos(eos, &n, cap, n_vocab, (int32_t)json_integer_value(e));
		size_t i;
		json_t *v;
		if (json_is_array(e))
			json_array_foreach(e, i, v) if (json_is_integer(v)) add_eos(eos, &n, cap, n_vocab, (int32_t)json_integer_value(v));
		json_decref(g);
	}
	return n;
}

/* Gemma's turn format, for Gemma files that carry no template (the GGUF conversions of the
 * base models often do not): a system message is folded into the first user turn. Templates
 * render with trim_blocks (as transformers does), which eats a newline right after a block tag:
 * the one after the role is written as an expression. */
static const char GEMMA_TEMPLATE[] =
	"{{ bos_token }}"
	"{% if messages[0]['role'] == 'system' %}{% set first = messages[0]['content'] + '\n\n' %}"
	"{% set rest = messages[1:] %}{% else %}{% set first = '' %}{% set rest = messages %}{% endif %}"
	"{% for m in rest %}<start_of_turn>{% if m['role'] == 'assistant' %}model{% else %}user{% endif %}{{ '\\n' }}"
	"{% if loop.first %}{{ first }}{% endif %}{{ m['content'] | trim }}<end_of_turn>\n{% endfor %}"
	"{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}";

/* A model without a chat template of its own: Gemma files get Gemma's turn format; others have
 * none (raw completions still work). */
sg_status sg_lm_fallback_template(const sg_model *model, const sg_tokenizer *tok, sg_chat_template **out)
{
	*out = NULL;
	if (strncmp(sg_model_arch(model), "gemma", 5) != 0 || sg_tokenizer_token_id(tok, "<start_of_turn>", 15) < 0)
		return SG_OK;
	size_t n = 0;
	const char *bos = sg_tokenizer_token(tok, sg_tokenizer_bos(tok), &n);
	json_t *special = json_pack("{s:s%}", "bos_token", bos ? bos : "", bos ? n : 0);
	sg_status s = sg_chat_template_from_source(GEMMA_TEMPLATE, sizeof GEMMA_TEMPLATE - 1, special, out);
	json_decref(special);
	return s;
}

sg_status sg_lm_load(const char *path, const sg_lm_params *p, sg_lm **out)
{
	static const sg_lm_params defaults = {0};
	if (!p) p = &defaults;
	*out = NULL;
	sg_xc_spec xs;
	char xerr[200];
	const char *xspec = p->expert_cache ? p->expert_cache : sg_flag_str("SARAGOSSA_EXPERT_CACHE");
	if (sg_xc_parse(xspec, &xs, xerr, sizeof xerr)) return sg_error(SG_ERR_INVALID_ARG, "%s", xerr);
	/* with an expert cache the experts are not loaded: the planner checks what is */
	sg_status s = p->no_memory_check || xs.mode != SG_XC_OFF ? SG_OK : sg_lm_check_memory(path);
	if (s) return s;
	sg_lm *lm = sg_calloc(1, sizeof *lm);
	if (!lm) return SG_FAIL(SG_ERR_NOMEM, "model state");
	sg_model_params mp = sg_model_default_params();
	mp.n_threads = p->n_threads;
	if (p->backend) mp.backend = p->backend;
	if ((s = sg_model_load_ex(path, &mp, xs.mode != SG_XC_OFF, &lm->model))) goto fail;
	if ((s = sg_xc_apply(lm->model, &xs, p->n_ctx, NULL))) goto fail;
	sg_session_params sp = sg_session_default_params();
	sp.n_ctx = p->n_ctx;
	if ((s = sg_session_new(lm->model, &sp, &lm->session))) goto fail;
	/* a GGUF file is parsed once: the vocabulary and template read the weights' parse */
	const sg_gguf *gguf = sg_model_gguf(lm->model);
	if ((s = sg_tokenizer_load_with(path, gguf, &lm->tok))) {
		sg_error_wrap(s, "tokenizer");
		goto fail;
	}
	s = sg_chat_template_load_with(path, gguf, &lm->tmpl);
	if (s == SG_ERR_NOT_FOUND) s = sg_lm_fallback_template(lm->model, lm->tok, &lm->tmpl);
	if (s) goto fail;
	if ((s = sg_detok_create(lm->tok, 1, &lm->detok))) goto fail;
	lm->n_ctx = sg_session_n_ctx(lm->session);
	lm->n_vocab = sg_model_n_vocab(lm->model);
	lm->n_eos = sg_lm_find_eos(lm->tok, lm->n_vocab, path, lm->eos, MAX_EOS);
	lm->ops = (sg_gen_model){.self = lm, .n_vocab = lm->n_vocab, .n_ctx = lm->n_ctx, .eval = op_eval,
				 .truncate = op_truncate, .reset = op_reset, .eval_greedy = op_eval_greedy,
				 .eval_top = op_eval_top, .top_max = sg_session_top_max(lm->session),
				 .eval_rows = sg_session_can_verify(lm->session) ? op_eval_rows : NULL,
				 .eval_rows_greedy = sg_session_can_verify(lm->session) ? op_eval_rows_greedy : NULL, .mark = op_mark};
	lm->dt_ops = (sg_gen_detok){.self = lm, .push = dt_push, .flush = dt_flush, .reset = dt_reset};
	sg_gen_state_init(&lm->state, &lm->ops);
	sg_pc_params pp = sg_pc_default_params();
	lm->block_tokens = pp.block_tokens >= 1 ? (size_t)pp.block_tokens : 256;
	if (!p->no_prefix_cache && sg_flag_bool("RETI_SERVE_PREFIX_CACHE")) {
		pp.free_payload = free_snapshot;
		if ((s = sg_pc_new(&pp, &lm->pc))) {
			sg_error_wrap(s, "prefix cache");
			goto fail;
		}
		lm->pc_own = 1;
	}
	*out = lm;
	return SG_OK;
fail:
	sg_lm_free(lm);
	return s;
}

void sg_lm_free(sg_lm *lm)
{
	if (!lm) return;
	if (lm->pc_own) sg_pc_free(lm->pc);
	else if (lm->pc) sg_pc_drop_owner(lm->pc, lm);
	sg_gen_state_free(&lm->state);
	sg_detok_free(lm->detok);
	sg_chat_template_free(lm->tmpl);
	sg_tokenizer_free(lm->tok);
	sg_session_free(lm->session);
	sg_model_free(lm->model);
	sg_free(lm);
}

sg_status sg_lm_chat_prompt(const sg_lm *lm, const json_t *messages, const json_t *tools, char **out, size_t *len)
{
	if (!lm->tmpl) return sg_error(SG_ERR_NOT_FOUND, "the model has no chat template");
	sg_chat_params p = {.messages = messages, .tools = tools, .add_generation_prompt = 1};
	return sg_chat_template_render(lm->tmpl, &p, out, len);
}

sg_status sg_lm_chat_render(const sg_lm *lm, const sg_chat_params *p, char **out, size_t *len)
{
	if (!lm->tmpl) return sg_error(SG_ERR_NOT_FOUND, "the model has no chat template");
	return sg_chat_template_render(lm->tmpl, p, out, len);
}

sg_status sg_lm_tokenize(const sg_lm *lm, const char *text, size_t len, int add_special, int32_t **ids, size_t *n)
{
	sg_tokens t = {0};
	sg_status s = sg_tokenizer_encode(lm->tok, text, len, add_special, &t);
	if (s) {
		sg_tokens_free(&t);
		return s;
	}
	*ids = t.ids;
	*n = t.n;
	return SG_OK;
}

sg_status sg_lm_detokenize(const sg_lm *lm, const int32_t *ids, size_t n, char **out, size_t *len)
{
	for (size_t i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= lm->n_vocab)
			return sg_error(SG_ERR_RANGE, "token %zu is id %d, outside the vocabulary [0, %d)", i, ids[i], lm->n_vocab);
	return sg_tokenizer_decode(lm->tok, ids, n, 0, out, len);
}

sg_status sg_lm_token_bytes(const sg_lm *lm, int32_t id, char **out, size_t *len)
{
	/* a token's own bytes, which may be part of a character (decode would make that U+FFFD):
	 * a byte-level vocabulary's raw form, a byte-fallback token <0xXX>'s byte, else its text */
	size_t n = 0;
	char byte;
	const char *raw = sg_tokenizer_token_bytes(lm->tok, id, &n);
	if (!raw) {
		const char *sp = sg_tokenizer_token(lm->tok, id, &n);
		if (sp && n == 6 && !memcmp(sp, "<0x", 3) && sp[5] == '>' && isxdigit((unsigned char)sp[3]) &&
		    isxdigit((unsigned char)sp[4])) {
			char hex[3] = {sp[3], sp[4], 0};
			byte = (char)strtol(hex, NULL, 16);
			raw = &byte;
			n = 1;
		}
	}
	if (!raw) return sg_tokenizer_decode(lm->tok, &id, 1, 0, out, len);
	*out = sg_malloc(n + 1);
	if (!*out) return SG_FAIL(SG_ERR_NOMEM, "token bytes");
	memcpy(*out, raw, n);
	(*out)[n] = 0;
	*len = n;
	return SG_OK;
}

/* ---- the prefix cache and generation ---- */

void sg_lm_set_prefix_cache(sg_lm *lm, sg_prefix_cache *pc, int block_tokens)
{
	if (lm->pc_own) sg_pc_free(lm->pc);
	else if (lm->pc && lm->pc != pc) sg_pc_drop_owner(lm->pc, lm);
	lm->pc = pc;
	lm->pc_own = 0;
	if (block_tokens < 1) block_tokens = (int)sg_flag_int("RETI_SERVE_PREFIX_BLOCK_TOKENS");
	lm->block_tokens = block_tokens >= 1 ? (size_t)block_tokens : 256;
	lm->live_ok = 0;
	lm->live_blocks = 0;
}

sg_prefix_cache *sg_lm_prefix_cache(const sg_lm *lm)
{
	return lm->pc;
}

void sg_lm_set_hooks(sg_lm *lm, const sg_lm_hooks *h)
{
	lm->hooks = h ? *h : (sg_lm_hooks){0};
}

int sg_lm_device_memory(const sg_lm *lm, uint64_t *free_bytes, uint64_t *total_bytes)
{
	sg_backend *be = lm->model ? lm->model->be : NULL;
	if (!be || !be->ops->mem_info) return 0;
	return be->ops->mem_info(be, free_bytes, total_bytes) == SG_OK;
}

/* Asks the memory hook for the KV rows a generation reaching n_total positions touches for the
 * first time. A GPU backend allocates the whole KV cache in device memory at load (projected
 * then): positions reached for the first time cost nothing new. A CPU cache's pages are only
 * backed once touched: those rows grow the host footprint. */
static sg_status reserve_tokens(sg_lm *lm, size_t n_total)
{
	if (n_total > (size_t)lm->n_ctx) n_total = (size_t)lm->n_ctx;
	if (!lm->hooks.reserve || n_total <= lm->kv_high) return SG_OK;
	uint64_t f, t;
	if (sg_lm_device_memory(lm, &f, &t)) return SG_OK;
	size_t per = sg_session_block_bytes(lm->session, 1) - sg_session_block_bytes(lm->session, 0);
	char what[200];
	snprintf(what, sizeof what, "the KV cache rows of positions %zu..%zu", lm->kv_high, n_total);
	return lm->hooks.reserve(lm->hooks.user, lm, what, (uint64_t)(n_total - lm->kv_high) * per, 0);
}

sg_status sg_lm_reserve_positions(sg_lm *lm, size_t n_total)
{
	if (n_total > (size_t)lm->n_ctx) n_total = (size_t)lm->n_ctx;
	sg_status st = reserve_tokens(lm, n_total);
	if (!st && n_total > lm->kv_high) lm->kv_high = n_total;
	return st;
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

/* Keeps the live state's first `keep` tokens (no roll-back needed when it holds no more). */
static sg_status keep_live(sg_lm *lm, size_t keep)
{
	if (keep < lm->state.n) {
		sg_status s = op_truncate(lm, keep);
		if (s) return s;
	}
	lm->state.n = keep;
	return SG_OK;
}

/* Before a generation of prompt[0..n) under the session root: puts the conversation state at the
 * longest reusable prefix (< n) and arms the prefill to snapshot each new block boundary at or
 * before n, when the state it continues is the one a cold block-piece prefill would have built
 * (so a cached block holds a cold run's bits). *reused: tokens not to prefill; *diverged: the
 * token where the prompt left the best cached chain, or -1. */
static sg_status prefix_begin(sg_lm *lm, const uint8_t root[32], int continues, const int32_t *prompt, size_t n,
			      size_t *reused, long *diverged)
{
	*reused = 0;
	*diverged = -1;
	lm->pc_armed = 0;
	lm->exact = 0;
	sg_prefix_cache *pc = lm->pc;
	if (n < 1) return SG_OK;
	if (!pc && !continues) {
		/* no cache: every prompt is prefilled whole (exact reproducibility, and the baseline) */
		lm->live_ok = 0;
		return sg_gen_state_reset(&lm->state);
	}
	size_t B = lm->block_tokens;
	sg_pc_match mt = {0};
	/* at least the last prompt token is evaluated: its logits give the first answer token */
	sg_status st = pc ? sg_pc_lookup(pc, lm, root, prompt, n - 1, &mt) : SG_OK;
	if (st) return st;
	size_t K = mt.n_blocks * B;
	if (pc) *diverged = mt.diverged_at;
	int done = 0, exact = 1;
	int chunk_inv = sg_session_chunk_invariant(lm->session);
	int same = continues || (lm->live_ok && !memcmp(lm->live_root, root, 32));
	/* The live state of the same session may hold more than the blocks (the last answer's
	 * tokens, a partial block): rolling back to the common prefix reuses all of it. That is
	 * exact only where the forward is chunk-invariant: elsewhere the answer's decode steps did
	 * other arithmetic than a cold prefill would, so there the server reuses blocks only, which
	 * are prefilled in the same pieces in both runs; a continued conversation (the CLI's chat)
	 * keeps its live state anyway. Another session's live state is never reused: only its own
	 * blocks are. */
	size_t live = sg_gen_common_prefix(&lm->state, prompt, n);
	if (live >= n) live = n - 1;
	if (!chunk_inv && !continues) live = 0;
	if (live && live >= K && same && keep_live(lm, live) == SG_OK) {
		/* rows past the head's exact blocks, or a prefill starting off a boundary, are not
		 * what a cold run computes: the boundaries after them are not cached */
		exact = chunk_inv || (live % B == 0 && live / B <= lm->live_blocks);
		K = live;
		done = 1;
	}
	/* Elsewhere the blocks are restored; those the live state of the same session already holds
	 * (rows a block-aligned prefill wrote, not the answer's decode steps) are the cached blocks'
	 * own bits: the state is rolled back to them (attention layers only) and the rest copied. */
	size_t have = 0;
	if (!done && same && !sg_session_has_recurrent_state(lm->session)) {
		size_t common = sg_gen_common_prefix(&lm->state, prompt, n);
		have = common / B < lm->live_blocks ? common / B : lm->live_blocks;
		if (have > mt.n_blocks) have = mt.n_blocks;
		if (have && keep_live(lm, have * B) != SG_OK) have = 0;
	}
	if (!done) {
		if (!have && (st = sg_gen_state_reset(&lm->state))) goto out;
		size_t i = have;
		while (i < mt.n_blocks && sg_session_restore_range(lm->session, mt.payloads[i]) == SG_OK) i++;
		if (i < mt.n_blocks || set_history(&lm->state, prompt, K)) {
			SG_WARN("engine: prefix restore stopped at block %zu of %zu: %s; prefilling the whole prompt", i, mt.n_blocks,
				sg_last_error());
			K = 0;
			if ((st = sg_gen_state_reset(&lm->state))) goto out;
		} else {
			lm->live_blocks = K / B;
			if (K) SG_DEBUG("engine: prefix of %zu tokens: %zu blocks kept from the live state, %zu restored", K, have, K / B - have);
		}
	}
	memcpy(lm->pc_root, root, 32);
	lm->pc_prompt = prompt;
	lm->pc_n = n;
	lm->exact = exact;
	lm->pc_armed = pc && exact;
	lm->live_ok = 1;
	memcpy(lm->live_root, root, 32);
	*reused = K;
out:
	sg_pc_match_free(&mt);
	return st;
}

/* After the generation (whatever its outcome): disarms the snapshots and records how much of the
 * live state is whole blocks a block-aligned prefill (or a restore) wrote. */
static void prefix_end(sg_lm *lm)
{
	if (lm->exact) {
		/* the prompt's whole blocks were restored or prefilled in block pieces; the partial
		 * block past them and the answer were not */
		size_t pos = (size_t)sg_session_position(lm->session);
		lm->live_blocks = (pos < lm->pc_n ? pos : lm->pc_n) / lm->block_tokens;
	}
	lm->exact = 0;
	lm->pc_armed = 0;
	lm->pc_prompt = NULL;
}

sg_status sg_lm_generate(sg_lm *lm, const sg_lm_turn *turn, const sg_gen_params *p, sg_gen_result *res)
{
	static const sg_lm_turn none = {0};
	if (!turn) turn = &none;
	memset(res, 0, sizeof *res);
	res->stop_index = -1;
	res->n_prompt = p->n_prompt;
	uint8_t root[32];
	const char *key = turn->session_key;
	sg_status st = sg_pc_root(key, !key ? 0 : turn->session_key_len ? turn->session_key_len : strlen(key), root);
	size_t reach = p->n_prompt + (size_t)(p->max_tokens > 0 ? p->max_tokens : 0), reused = 0;
	long diverged = -1;
	if (!st) st = reserve_tokens(lm, reach);
	if (!st && p->prompt && p->n_prompt)
		st = prefix_begin(lm, root, turn->continues, p->prompt, p->n_prompt, &reused, &diverged);
	if (!st) {
		if (turn->on_reuse) turn->on_reuse(turn->user, reused, diverged);
		st = sg_generate(&lm->state, &lm->dt_ops, p, res);
	}
	prefix_end(lm);
	return st;
}
