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
#include "base/json.h"
#include "base/log.h"
#include "engine/draft.h"
#include "engine/embed.h"
#include "engine/lm.h"
#include "engine/session.h"
#include "engine/transcribe.h"
#include "formats/gguf.h"
#include "formats/model_desc.h"
#include "formats/qtypes.h"
#include "models/model.h"
#include "models/whisper.h"
#include "text/grammar/token_trie.h"
#include "text/grammar/toolcall.h"
#include "text/template/chat_template.h"
#include "text/tokenizer/tokenizer.h"

#define MAX_EOS 16

struct sg_srv_model {
	sg_srv_model_info info;
	sg_srv_model_agent agent;
	sg_token_trie *trie; /* lazily built by the worker */
	uint8_t **tok_bytes; /* [n_vocab] each token's output bytes */
	uint32_t *tok_len;   /* [n_vocab] */
	sg_lm *lm;               /* the engine: model, session, tokenizer, template, prefix cache, EOS ids;
				  * NULL for a speech-to-text or an embedding model */
	sg_stt *stt;             /* a speech-to-text model (--stt-model), else NULL */
	sg_embedder *emb;        /* an embedding model or cross-encoder (--embed-model), else NULL */
	sg_tts *tts;             /* a text-to-speech model (--tts-model), else NULL */
	const sg_tokenizer *tok; /* borrowed from lm */
	/* speculative decoding */
	sg_srv_spec spec;        /* draft_path not kept */
	sg_drafter *ngram;       /* the n-gram drafter (stateless: shared by every request) */
	sg_lm *draft_lm;         /* the draft model, or NULL */
	sg_drafter *dmodel;      /* its drafter */
	sg_drafter *mtp;         /* the model's own MTP module's drafter (serve --spec mtp), or NULL */
	char *template_src;      /* the chat template's source text (/api/show), or NULL */
};

const sg_gen_drafter *sg_srv_model_drafter(const sg_srv_model *m, int mode, int32_t *draft_max, int32_t *draft_min)
{
	if (mode < 0) mode = m->spec.mode;
	if (*draft_max <= 0) *draft_max = m->spec.draft_max > 0 ? m->spec.draft_max : 16;
	if (*draft_min <= 0) *draft_min = m->spec.draft_min > 0 ? m->spec.draft_min : 1;
	if (*draft_min > *draft_max) *draft_min = *draft_max;
	if (!sg_lm_state(m->lm)->model->eval_rows) return NULL;
	if (mode == SG_SRV_SPEC_NGRAM && sg_drafter_enabled("ngram")) return sg_drafter_ops(m->ngram);
	if (mode == SG_SRV_SPEC_DRAFT && m->dmodel && sg_drafter_enabled("model")) return sg_drafter_ops(m->dmodel);
	if (mode == SG_SRV_SPEC_MTP && m->mtp && sg_drafter_enabled("mtp")) return sg_drafter_ops(m->mtp);
	return NULL;
}

const sg_srv_model_info *sg_srv_model_info_get(const sg_srv_model *m)
{
	return &m->info;
}

const int32_t *sg_srv_model_eos(const sg_srv_model *m, size_t *n)
{
	if (!m->lm) {
		*n = 0;
		return NULL;
	}
	return sg_lm_eos(m->lm, n);
}

sg_embedder *sg_srv_model_embedder(const sg_srv_model *m)
{
	return m->emb;
}

/* The text routes' refusal of a speech-to-text or embedding model (they check sg_srv_model_embedder first; this
 * keeps every entry point safe on its own). */
static sg_status not_text(const sg_srv_model *m)
{
	return sg_error(SG_ERR_UNSUPPORTED, "model '%s' is %s: it has no text generation", m->info.name,
			m->stt ? "a speech-to-text model" : m->tts ? "a text-to-speech model" : "an embedding model");
}

sg_lm *sg_srv_model_lm(const sg_srv_model *m)
{
	return m->lm;
}

sg_lm *sg_srv_model_draft_lm(const sg_srv_model *m) { return m->draft_lm; }

int sg_srv_model_is_draft(const sg_srv_model *m, const sg_gen_drafter *d) { return d && m->dmodel && d == sg_drafter_ops(m->dmodel); }

const sg_srv_model_agent *sg_srv_model_agent_get(const sg_srv_model *m)
{
	return &m->agent;
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
	snprintf(p, sizeof p, "%s/model.bin", path); /* a CTranslate2 folder */
	if (!stat(p, &st)) total += (uint64_t)st.st_size;
	return total;
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

/* What Ollama's listings call the quantization level, spelt as Ollama does: a GGUF file's type
 * as llama.cpp names its general.file_type ("Q4_K_M"), an MLX folder's "MLX_Q4_G64", else the
 * type of the weights themselves ("BF16", "F16": a safetensors folder, or a GGUF file that does
 * not say): the first layer's query projection, or the embeddings where it has none. */
static void quant_name(const sg_model *mod, char *buf, size_t cap)
{
	const sg_model_desc *d = &mod->desc;
	const char *ft = d->quant.kind == SG_QUANT_GGUF ? sg_gguf_ftype_name(d->quant.file_type) : NULL;
	if (ft) snprintf(buf, cap, "%s", ft);
	else if (d->quant.kind == SG_QUANT_MLX) snprintf(buf, cap, "MLX_Q%d_G%d", d->quant.bits, d->quant.group);
	else if (mod->layers && mod->layers[0].wq.data) snprintf(buf, cap, "%s", sg_type_name(mod->layers[0].wq.type));
	else snprintf(buf, cap, "%s", sg_type_name(mod->tok_embd.type));
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
	if (!m->lm) return not_text(m);
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

/* The chat template's source as the files give it (for /api/show): a GGUF's
 * tokenizer.chat_template, else chat_template.jinja beside the weights, else tokenizer_config.json's
 * chat_template (a string, or the "default" of a list of named ones). NULL when none. */
static char *template_source(const char *path, const sg_model *model)
{
	const sg_gguf *g = sg_model_gguf(model);
	const char *v = NULL;
	if (g) return sg_gguf_get_str(g, "tokenizer.chat_template", &v) ? NULL : sg_strdup(v);
	char f[4200];
	snprintf(f, sizeof f, "%s/chat_template.jinja", path);
	FILE *fp = fopen(f, "rb");
	if (fp) {
		char *buf = sg_malloc(1 << 20);
		size_t n = buf ? fread(buf, 1, (1 << 20) - 1, fp) : 0;
		fclose(fp);
		if (buf) buf[n] = 0;
		return buf;
	}
	snprintf(f, sizeof f, "%s/tokenizer_config.json", path);
	json_t *cfg = NULL;
	if (sg_json_load_file(f, 16u << 20, &cfg)) return NULL;
	json_t *t = json_object_get(cfg, "chat_template");
	if (json_is_array(t)) {
		size_t i;
		json_t *e, *pick = NULL;
		json_array_foreach(t, i, e) {
			const char *nm = json_string_value(json_object_get(e, "name"));
			if (!pick || (nm && !strcmp(nm, "default"))) pick = e;
		}
		t = json_object_get(pick, "template");
	}
	char *out = json_is_string(t) ? sg_strdup(json_string_value(t)) : NULL;
	json_decref(cfg);
	return out;
}

/* Parameters in the weights (a packed weight's scales and biases are part of it). */
static uint64_t count_params(const sg_model *model)
{
	uint64_t n = 0;
	for (int i = 0; model->w && i < model->w->n_tensors; i++)
		if (!model->w->tensors[i]->companion) n += (uint64_t)sg_tensor_nelem(model->w->tensors[i]);
	return n;
}

const char *sg_srv_model_template(const sg_srv_model *m)
{
	return m->template_src;
}

/* A served model's record with what every kind fills the same way: names, load time, size. */
static sg_srv_model *model_new(const char *name, const char *path)
{
	sg_srv_model *m = sg_calloc(1, sizeof *m);
	if (!m) return NULL;
	snprintf(m->info.name, sizeof m->info.name, "%s", name);
	snprintf(m->info.path, sizeof m->info.path, "%s", path);
	m->info.created = (int64_t)time(NULL);
	m->info.size_bytes = path_bytes(path);
	return m;
}

sg_status sg_srv_model_load(const char *name, const char *path, int32_t n_ctx, const sg_srv_spec *spec, sg_srv_model **out)
{
	sg_srv_model *m = model_new(name, path);
	if (!m) return SG_FAIL(SG_ERR_NOMEM, "model state");
	size_t pl = strlen(path);
	int gguf = pl > 5 && !strcmp(path + pl - 5, ".gguf");
	snprintf(m->info.format, sizeof m->info.format, "%s", gguf ? "gguf" : "safetensors");
	/* the memory guard has already projected this load: no second check here; the pool shares
	 * its prefix cache among its models */
	sg_lm_params lp = {.n_ctx = n_ctx, .backend = sg_flag_str("RETI_SERVE_BACKEND"), .no_memory_check = 1,
			   .no_prefix_cache = 1};
	sg_status s = sg_lm_load(path, &lp, &m->lm);
	if (s) goto fail;
	m->tok = sg_lm_tokenizer(m->lm);
	snprintf(m->info.arch, sizeof m->info.arch, "%s", sg_model_arch(sg_lm_model(m->lm)));
	quant_name(sg_lm_model(m->lm), m->info.quant, sizeof m->info.quant);
	m->info.n_ctx = sg_lm_n_ctx(m->lm);
	m->info.n_vocab = sg_lm_n_vocab(m->lm);
	m->info.n_params = count_params(sg_lm_model(m->lm));
	m->template_src = template_source(path, sg_lm_model(m->lm));
	find_agent(m);
	if (spec) m->spec = *spec;
	m->spec.draft_path = NULL;
	if ((s = sg_drafter_ngram(SG_DRAFT_NGRAM_MIN, SG_DRAFT_NGRAM_MAX, &m->ngram))) goto fail;
	/* the MTP module runs beside every eval once on: only where serve asked for it */
	if (spec && spec->mode == SG_SRV_SPEC_MTP && sg_session_has_mtp(sg_lm_session(m->lm)) &&
	    (s = sg_drafter_mtp(sg_lm_session(m->lm), &m->mtp)))
		goto fail;
	if (spec && spec->draft_path && sg_drafter_enabled("model")) {
		sg_lm_params dp = lp;
		dp.n_ctx = m->info.n_ctx;
		if ((s = sg_lm_load(spec->draft_path, &dp, &m->draft_lm)) ||
		    (s = sg_drafter_check_vocab(m->lm, m->draft_lm)) ||
		    (s = sg_drafter_model(sg_lm_session(m->draft_lm), m->info.n_vocab, &m->dmodel))) {
			sg_error(s, "draft model %s for '%s': %s", spec->draft_path, name, sg_last_error());
			goto fail;
		}
		m->info.size_bytes += path_bytes(spec->draft_path);
	}
	*out = m;
	return SG_OK;
fail:
	sg_srv_model_free(m);
	return s;
}

sg_status sg_srv_model_load_stt(const char *name, const char *path, const char *vocab, sg_srv_model **out)
{
	*out = NULL;
	sg_srv_model *m = model_new(name, path);
	if (!m) return SG_FAIL(SG_ERR_NOMEM, "model state");
	sg_stt_params sp = sg_stt_default_params();
	const char *be = sg_flag_str("RETI_SERVE_BACKEND");
	sp.backend = be && *be ? be : NULL;
	sp.vocab = vocab;
	sg_status s = sg_stt_load(path, &sp, &m->stt);
	if (s) {
		sg_free(m);
		return s;
	}
	/* the model's own description: its source format ("hf" is a safetensors folder), weight
	 * type as stored and decoder context */
	const sg_whisper_info *wi = sg_stt_info(m->stt);
	snprintf(m->info.format, sizeof m->info.format, "%s", strcmp(wi->source, "hf") ? wi->source : "safetensors");
	snprintf(m->info.arch, sizeof m->info.arch, "whisper");
	snprintf(m->info.quant, sizeof m->info.quant, "%s", wi->dtype);
	m->info.n_ctx = wi->n_text_ctx;
	m->info.n_vocab = sg_stt_vocab_of(m->stt)->n_vocab;
	m->agent.think_start_id = m->agent.think_end_id = -1;
	*out = m;
	return SG_OK;
}

sg_status sg_srv_model_load_embed(const char *name, const char *path, sg_srv_model **out)
{
	*out = NULL;
	sg_srv_model *m = model_new(name, path);
	if (!m) return SG_FAIL(SG_ERR_NOMEM, "model state");
	snprintf(m->info.format, sizeof m->info.format, "safetensors");
	const char *be = sg_flag_str("RETI_SERVE_BACKEND");
	sg_status s = sg_embedder_load(path, be && *be ? be : NULL, 0, &m->emb);
	if (s) {
		sg_srv_model_free(m);
		return s;
	}
	snprintf(m->info.arch, sizeof m->info.arch, "%s%s", sg_embedder_model_type(m->emb),
		 sg_embedder_is_reranker(m->emb) ? "-reranker" : "");
	snprintf(m->info.quant, sizeof m->info.quant, "%s", sg_embedder_weight_type(m->emb));
	m->info.n_ctx = sg_embedder_max_tokens(m->emb);
	m->info.n_vocab = sg_embedder_n_vocab(m->emb);
	m->agent.think_start_id = m->agent.think_end_id = -1;
	*out = m;
	return SG_OK;
}

sg_status sg_srv_model_load_tts(const char *name, const char *path, sg_srv_model **out)
{
	*out = NULL;
	sg_srv_model *m = model_new(name, path);
	if (!m) return SG_FAIL(SG_ERR_NOMEM, "model state");
	sg_tts_params tp = sg_tts_default_params();
	const char *be = sg_flag_str("RETI_SERVE_BACKEND");
	tp.backend = be && *be ? be : NULL;
	sg_status s = sg_tts_load(path, &tp, &m->tts);
	if (s) {
		sg_free(m);
		return s;
	}
	size_t pl = strlen(path);
	snprintf(m->info.format, sizeof m->info.format, "%s", pl > 5 && !strcmp(path + pl - 5, ".onnx") ? "onnx" : "folder");
	snprintf(m->info.arch, sizeof m->info.arch, "%s", sg_tts_kind(m->tts));
	snprintf(m->info.quant, sizeof m->info.quant, "F32");
	m->agent.think_start_id = m->agent.think_end_id = -1;
	*out = m;
	return SG_OK;
}

sg_tts *sg_srv_model_tts(const sg_srv_model *m)
{
	return m ? m->tts : NULL;
}

sg_stt *sg_srv_model_stt(const sg_srv_model *m)
{
	return m ? m->stt : NULL;
}

void sg_srv_model_free(sg_srv_model *m)
{
	if (!m) return;
	sg_stt_free(m->stt);
	sg_tts_free(m->tts);
	sg_embedder_free(m->emb);
	sg_token_trie_free(m->trie);
	if (m->tok_bytes)
		for (int32_t i = 0; i < m->info.n_vocab; i++) sg_free(m->tok_bytes[i]);
	sg_free(m->tok_bytes);
	sg_free(m->tok_len);
	sg_drafter_free(m->dmodel);
	sg_drafter_free(m->mtp);
	sg_drafter_free(m->ngram);
	sg_lm_free(m->draft_lm);
	sg_lm_free(m->lm);
	sg_free(m->template_src);
	sg_free(m);
}

sg_status sg_srv_model_chat_prompt(const sg_srv_model *m, const json_t *messages, const json_t *tools, const json_t *kwargs,
				   char **out, size_t *len)
{
	if (!m->lm) return not_text(m);
	if (!sg_lm_has_template(m->lm))
		return sg_error(SG_ERR_NOT_FOUND, "model '%s' has no chat template: use /v1/completions (or raw: true)", m->info.name);
	sg_chat_params p = {.messages = messages, .tools = tools, .kwargs = kwargs, .add_generation_prompt = 1};
	return sg_lm_chat_render(m->lm, &p, out, len);
}

sg_status sg_srv_model_tokenize(const sg_srv_model *m, const char *text, size_t len, int add_special, int32_t **ids, size_t *n)
{
	if (!m->lm) return not_text(m);
	return sg_lm_tokenize(m->lm, text, len, add_special, ids, n);
}

sg_status sg_srv_model_detokenize(const sg_srv_model *m, const int32_t *ids, size_t n, char **out, size_t *len)
{
	if (!m->lm) return not_text(m);
	return sg_lm_detokenize(m->lm, ids, n, out, len);
}

sg_status sg_srv_model_token_bytes(const sg_srv_model *m, int32_t id, char **out, size_t *len)
{
	if (!m->lm) return not_text(m);
	return sg_lm_token_bytes(m->lm, id, out, len);
}
