/*
 * Qwen3-TTS talker and code predictor (see qwen3_tts.h). Both decoders are inner stacks of the
 * generic model (sg_model_build_inner) run by the generic forward on embeddings
 * (sg_forward_embd); what is the model's own lives here: the embedding tables read row by row
 * from the mapped file, the text projection, the code predictor's input projection and per-codebook
 * heads, the prompt layout and the sampling of the codes.
 *
 * The talker's rope is the package's multimodal rope with the same position on all three
 * sections, which is the plain (neox) rope of the description.
 */
#include "models/qwen3_tts.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/json.h"
#include "formats/model_desc.h"
#include "formats/qtypes.h"
#include "formats/weights.h"
#include "models/forward.h"
#include "models/model.h"

#define QT_MAX_GROUPS 64
#define QT_MAX_NAMES 256

#define QT_LAYER_NAMES(P)                                                                          \
	{"output_norm", P "model.norm"}, {"blk.{L}.attn_norm", P "model.layers.{L}.input_layernorm"},    \
	    {"blk.{L}.ffn_norm", P "model.layers.{L}.post_attention_layernorm"},                     \
	    {"blk.{L}.attn_q", P "model.layers.{L}.self_attn.q_proj"},                               \
	    {"blk.{L}.attn_k", P "model.layers.{L}.self_attn.k_proj"},                               \
	    {"blk.{L}.attn_v", P "model.layers.{L}.self_attn.v_proj"},                               \
	    {"blk.{L}.attn_output", P "model.layers.{L}.self_attn.o_proj"},                          \
	    {"blk.{L}.attn_q_norm", P "model.layers.{L}.self_attn.q_norm"},                          \
	    {"blk.{L}.attn_k_norm", P "model.layers.{L}.self_attn.k_norm"},                          \
	    {"blk.{L}.ffn_gate", P "model.layers.{L}.mlp.gate_proj"},                                \
	    {"blk.{L}.ffn_up", P "model.layers.{L}.mlp.up_proj"},                                    \
	    {"blk.{L}.ffn_down", P "model.layers.{L}.mlp.down_proj"},

static const sg_name_pair talker_names[] = {{"output", "talker.codec_head"}, QT_LAYER_NAMES("talker."){0, 0}};
static const sg_name_pair cp_names[] = {QT_LAYER_NAMES("talker.code_predictor."){0, 0}};
static const sg_arch qt_archs[] = {SG_ARCH_QWEN3, 0};
static const sg_family talker_family = {.name = "qwen3-tts talker", .archs = qt_archs, .names = talker_names};
static const sg_family cp_family = {.name = "qwen3-tts code predictor", .archs = qt_archs, .names = cp_names};

typedef struct qt_name {
	char *name;
	int id;
	char *dialect; /* speakers: the dialect language they speak, or NULL */
} qt_name;

struct sg_qwen3_tts {
	sg_weights *w;
	sg_backend *be;
	sg_model *talker, *cp;
	char type[32];
	int D, Dc, TD, V, Vcp, G, TV;
	const sg_tensor *codec_emb, *text_emb, *cp_emb[QT_MAX_GROUPS];
	sg_btensor fc1, fc1b, fc2, fc2b, mtp, mtpb, cp_head[QT_MAX_GROUPS];
	int has_mtp;
	int pad, bos, eos, think, nothink, think_bos, think_eos;
	int tts_bos, tts_eos, tts_pad, im_start, im_end;
	qt_name spk[QT_MAX_NAMES], lang[QT_MAX_NAMES];
	int n_spk, n_lang;
	sg_qwen3_tts_gen defaults;
};

/* ---- loading ---- */

static int jint(const json_t *o, const char *k, int dflt)
{
	json_t *v = json_object_get(o, k);
	return json_is_integer(v) ? (int)json_integer_value(v) : dflt;
}

static sg_status need_int(const json_t *o, const char *where, const char *k, int *out)
{
	json_t *v = json_object_get(o, k);
	if (!json_is_integer(v)) return sg_error(SG_ERR_FORMAT, "qwen3-tts: config.json %s.%s: an integer is expected", where, k);
	*out = (int)json_integer_value(v);
	return SG_OK;
}

/* A Qwen3 description from a sub-config (the talker's or the code predictor's). */
static sg_status sub_desc(const json_t *sub, const char *where, sg_model_desc *d)
{
	json_t *c = json_deep_copy(sub);
	if (!c) return sg_error(SG_ERR_NOMEM, "qwen3-tts: config");
	json_object_set_new(c, "model_type", json_string("qwen3"));
	json_object_del(c, "rope_scaling"); /* the multimodal rope with equal positions: plain rope */
	json_object_del(c, "code_predictor_config");
	json_object_del(c, "layer_types");
	json_object_set_new(c, "use_sliding_window", json_false());
	sg_status st = sg_model_desc_from_config(c, d);
	json_decref(c);
	return st ? sg_error_wrap(st, "qwen3-tts: %s", where) : SG_OK;
}

static sg_status host_rows_tensor(const sg_qwen3_tts *m, const char *name, int64_t cols, int64_t rows, const sg_tensor **out)
{
	const sg_tensor *t = sg_weights_find(m->w, name);
	if (!t) return sg_error(SG_ERR_NOT_FOUND, "qwen3-tts: tensor %s: missing", name);
	if (t->n_dims != 2 || t->ne[0] != cols || t->ne[1] != rows || !(t->type == SG_TYPE_F32 || t->type == SG_TYPE_F16 || t->type == SG_TYPE_BF16))
		return sg_error(SG_ERR_FORMAT, "qwen3-tts: tensor %s: expected a float [%lld, %lld] table", name, (long long)rows,
				(long long)cols);
	*out = t;
	return SG_OK;
}

/* A named tensor of the expected shape as an F32 backend tensor (small: biases, projections). */
static sg_status upload(sg_qwen3_tts *m, const char *name, int64_t n0, int64_t n1, int optional, sg_btensor *out)
{
	memset(out, 0, sizeof(*out));
	const sg_tensor *t = sg_weights_find(m->w, name);
	if (!t) return optional ? SG_OK : sg_error(SG_ERR_NOT_FOUND, "qwen3-tts: tensor %s: missing", name);
	int64_t n = sg_tensor_nelem(t);
	if (n != n0 * n1 || t->ne[0] != n0 || !(t->type == SG_TYPE_F32 || t->type == SG_TYPE_F16 || t->type == SG_TYPE_BF16))
		return sg_error(SG_ERR_FORMAT, "qwen3-tts: tensor %s: expected float [%lld, %lld]", name, (long long)n1, (long long)n0);
	float *tmp = sg_malloc(sizeof(float) * (size_t)n);
	if (!tmp) return sg_error(SG_ERR_NOMEM, "qwen3-tts: %s", name);
	sg_dequantize_ref(t->type, t->data, tmp, n);
	int64_t ne[4] = {n0, n1, 1, 1};
	sg_status st = m->be->ops->tensor_alloc(m->be, SG_TYPE_F32, ne, out);
	if (!st) st = m->be->ops->write(m->be, out, 0, tmp, sizeof(float) * (size_t)n);
	sg_free(tmp);
	return st;
}

static char *lower_dup(const char *s)
{
	char *d = sg_strdup(s);
	for (char *p = d; p && *p; p++) *p = (char)tolower((unsigned char)*p);
	return d;
}

static int cmp_name(const void *a, const void *b) { return strcmp(((const qt_name *)a)->name, ((const qt_name *)b)->name); }

static sg_status read_names(const json_t *tc, sg_qwen3_tts *m)
{
	const json_t *spk = json_object_get(tc, "spk_id"), *dia = json_object_get(tc, "spk_is_dialect");
	const json_t *lang = json_object_get(tc, "codec_language_id");
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)spk, k, v) {
		if (m->n_spk >= QT_MAX_NAMES) break;
		json_t *iv = json_is_array(v) ? json_array_get(v, 0) : v;
		if (!json_is_integer(iv) || json_integer_value(iv) < 0 || json_integer_value(iv) >= m->V)
			return sg_error(SG_ERR_FORMAT, "qwen3-tts: config.json talker_config.spk_id.%s: a codec id below %d is expected", k, m->V);
		qt_name *n = &m->spk[m->n_spk++];
		n->name = lower_dup(k);
		n->id = (int)json_integer_value(iv);
		json_t *dv = json_object_get(dia, k);
		if (json_is_string(dv)) n->dialect = sg_strdup(json_string_value(dv));
	}
	json_object_foreach((json_t *)lang, k, v) {
		if (m->n_lang >= QT_MAX_NAMES) break;
		if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= m->V)
			return sg_error(SG_ERR_FORMAT, "qwen3-tts: config.json talker_config.codec_language_id.%s: a codec id below %d is expected", k, m->V);
		qt_name *n = &m->lang[m->n_lang++];
		n->name = lower_dup(k);
		n->id = (int)json_integer_value(v);
	}
	qsort(m->spk, (size_t)m->n_spk, sizeof(qt_name), cmp_name);
	qsort(m->lang, (size_t)m->n_lang, sizeof(qt_name), cmp_name);
	return SG_OK;
}

static void read_defaults(sg_qwen3_tts *m, const char *dir)
{
	sg_qwen3_tts_gen g = {.non_streaming = 1, .max_frames = 8192, .temperature = 0.9f, .top_k = 50, .top_p = 1.0f,
			      .repetition_penalty = 1.05f, .sub_temperature = 0.9f, .sub_top_k = 50, .sub_top_p = 1.0f};
	char path[4096];
	snprintf(path, sizeof(path), "%s/generation_config.json", dir);
	json_t *o = NULL;
	if (sg_json_load_file(path, 1 << 20, &o) == SG_OK) {
		double d;
		int64_t i;
		int b;
		if (!sg_json_get_bool(o, "do_sample", &b) && !b) g.temperature = 0;
		if (!sg_json_get_num(o, "temperature", &d) && g.temperature > 0) g.temperature = (float)d;
		if (!sg_json_get_int(o, "top_k", &i)) g.top_k = (int)i;
		if (!sg_json_get_num(o, "top_p", &d)) g.top_p = (float)d;
		if (!sg_json_get_num(o, "repetition_penalty", &d)) g.repetition_penalty = (float)d;
		if (!sg_json_get_bool(o, "subtalker_dosample", &b) && !b) g.sub_temperature = 0;
		if (!sg_json_get_num(o, "subtalker_temperature", &d) && g.sub_temperature > 0) g.sub_temperature = (float)d;
		if (!sg_json_get_int(o, "subtalker_top_k", &i)) g.sub_top_k = (int)i;
		if (!sg_json_get_num(o, "subtalker_top_p", &d)) g.sub_top_p = (float)d;
		if (!sg_json_get_int(o, "max_new_tokens", &i) && i > 0) g.max_frames = (int)i;
		json_decref(o);
	}
	m->defaults = g;
}

static sg_status load_inner(sg_qwen3_tts *m, const char *dir)
{
	const json_t *cfg = m->w->config;
	if (!cfg) return sg_error(SG_ERR_FORMAT, "qwen3-tts: '%s' has no config.json", dir);
	const json_t *tc = json_object_get(cfg, "talker_config");
	const json_t *cc = json_object_get(tc, "code_predictor_config");
	if (!json_is_object(tc) || !json_is_object(cc))
		return sg_error(SG_ERR_FORMAT, "qwen3-tts: config.json has no talker_config with a code_predictor_config");
	const char *ty = json_string_value(json_object_get(cfg, "tts_model_type"));
	snprintf(m->type, sizeof(m->type), "%s", ty ? ty : "custom_voice");
	const char *tok = json_string_value(json_object_get(cfg, "tokenizer_type"));
	if (tok && strcmp(tok, "qwen3_tts_tokenizer_12hz"))
		return sg_error(SG_ERR_UNSUPPORTED, "qwen3-tts: tokenizer_type '%s' (this build runs qwen3_tts_tokenizer_12hz)", tok);
	sg_status st = SG_OK;
	if (!st) st = need_int(tc, "talker_config", "hidden_size", &m->D);
	if (!st) st = need_int(tc, "talker_config", "vocab_size", &m->V);
	if (!st) st = need_int(tc, "talker_config", "text_hidden_size", &m->TD);
	if (!st) st = need_int(tc, "talker_config", "text_vocab_size", &m->TV);
	if (!st) st = need_int(tc, "talker_config", "num_code_groups", &m->G);
	if (!st) st = need_int(cc, "code_predictor_config", "hidden_size", &m->Dc);
	if (!st) st = need_int(cc, "code_predictor_config", "vocab_size", &m->Vcp);
	const char *sp[] = {"codec_pad_id", "codec_bos_id", "codec_eos_token_id", "codec_think_id", "codec_nothink_id",
			    "codec_think_bos_id", "codec_think_eos_id"};
	int *spv[] = {&m->pad, &m->bos, &m->eos, &m->think, &m->nothink, &m->think_bos, &m->think_eos};
	for (int i = 0; i < 7 && !st; i++) {
		st = need_int(tc, "talker_config", sp[i], spv[i]);
		if (!st && (*spv[i] < 0 || *spv[i] >= m->V))
			st = sg_error(SG_ERR_FORMAT, "qwen3-tts: talker_config.%s = %d is outside the codec vocabulary (%d)", sp[i], *spv[i], m->V);
	}
	if (st) return st;
	m->im_start = jint(cfg, "im_start_token_id", 151644);
	m->im_end = jint(cfg, "im_end_token_id", 151645);
	m->tts_pad = jint(cfg, "tts_pad_token_id", 151671);
	m->tts_bos = jint(cfg, "tts_bos_token_id", 151672);
	m->tts_eos = jint(cfg, "tts_eos_token_id", 151673);
	if (m->G < 2 || m->G > QT_MAX_GROUPS || m->D < 1 || m->Dc < 1 || m->TD < 1 || m->V <= 1024 || m->Vcp < 1)
		return sg_error(SG_ERR_FORMAT, "qwen3-tts: talker_config: %d code groups, hidden %d, codec vocabulary %d (want 2..%d groups, > 1024 codes)",
				m->G, m->D, m->V, QT_MAX_GROUPS);
	int tids[] = {m->tts_pad, m->tts_bos, m->tts_eos};
	for (int i = 0; i < 3; i++)
		if (tids[i] < 0 || tids[i] >= m->TV)
			return sg_error(SG_ERR_FORMAT, "qwen3-tts: tts token id %d is outside the text vocabulary (%d)", tids[i], m->TV);
	if ((st = read_names(tc, m))) return st;

	sg_model_desc td = {0}, cd = {0};
	st = sub_desc(tc, "talker_config", &td);
	if (!st) st = sub_desc(cc, "code_predictor_config", &cd);
	if (!st && (td.dim != m->D || cd.dim != m->Dc)) st = sg_error(SG_ERR_FORMAT, "qwen3-tts: hidden sizes disagree");
	if (!st) st = sg_model_build_inner(m->w, m->be, &talker_family, &td, &m->talker);
	if (!st) st = sg_model_build_inner(m->w, m->be, &cp_family, &cd, &m->cp);
	sg_model_desc_free(&td);
	sg_model_desc_free(&cd);
	if (!st && !m->talker->output.data) st = sg_error(SG_ERR_NOT_FOUND, "qwen3-tts: tensor talker.codec_head.weight: missing");
	if (st) return st;
	if ((st = host_rows_tensor(m, "talker.model.codec_embedding.weight", m->D, m->V, &m->codec_emb))) return st;
	if ((st = host_rows_tensor(m, "talker.model.text_embedding.weight", m->TD, m->TV, &m->text_emb))) return st;
	char name[160];
	for (int i = 0; i < m->G - 1; i++) {
		snprintf(name, sizeof(name), "talker.code_predictor.model.codec_embedding.%d.weight", i);
		if ((st = host_rows_tensor(m, name, m->D, m->Vcp, &m->cp_emb[i]))) return st;
		snprintf(name, sizeof(name), "talker.code_predictor.lm_head.%d.weight", i);
		if ((st = upload(m, name, m->Dc, m->Vcp, 0, &m->cp_head[i]))) return st;
	}
	if (!st) st = upload(m, "talker.text_projection.linear_fc1.weight", m->TD, m->TD, 0, &m->fc1);
	if (!st) st = upload(m, "talker.text_projection.linear_fc1.bias", m->TD, 1, 0, &m->fc1b);
	if (!st) st = upload(m, "talker.text_projection.linear_fc2.weight", m->TD, m->D, 0, &m->fc2);
	if (!st) st = upload(m, "talker.text_projection.linear_fc2.bias", m->D, 1, 0, &m->fc2b);
	if (!st) st = upload(m, "talker.code_predictor.small_to_mtp_projection.weight", m->D, m->Dc, m->D == m->Dc, &m->mtp);
	if (!st) st = upload(m, "talker.code_predictor.small_to_mtp_projection.bias", m->Dc, 1, m->D == m->Dc, &m->mtpb);
	m->has_mtp = m->mtp.data != NULL;
	if (!st && !m->has_mtp && m->D != m->Dc)
		st = sg_error(SG_ERR_NOT_FOUND, "qwen3-tts: tensor talker.code_predictor.small_to_mtp_projection.weight: missing");
	if (!st) read_defaults(m, dir);
	return st;
}

sg_status sg_qwen3_tts_load(const char *dir, const char *backend, int n_threads, sg_qwen3_tts **out)
{
	*out = NULL;
	sg_qwen3_tts *m = sg_calloc(1, sizeof(*m));
	if (!m) return sg_error(SG_ERR_NOMEM, "qwen3-tts");
	sg_status st = sg_weights_open(dir, &m->w);
	if (!st) st = sg_model_open_backend("qwen3-tts", backend ? backend : "auto", n_threads, &m->be);
	if (!st) st = load_inner(m, dir);
	if (st) {
		sg_error_wrap(st, "'%s'", dir);
		sg_qwen3_tts_free(m);
		return st;
	}
	*out = m;
	return SG_OK;
}

void sg_qwen3_tts_free(sg_qwen3_tts *m)
{
	if (!m) return;
	sg_model_free(m->talker);
	sg_model_free(m->cp);
	if (m->be) {
		sg_btensor *ts[] = {&m->fc1, &m->fc1b, &m->fc2, &m->fc2b, &m->mtp, &m->mtpb};
		for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]); i++)
			if (ts[i]->data) m->be->ops->tensor_free(m->be, ts[i]);
		for (int i = 0; i < QT_MAX_GROUPS; i++)
			if (m->cp_head[i].data) m->be->ops->tensor_free(m->be, &m->cp_head[i]);
		sg_backend_free(m->be);
	}
	for (int i = 0; i < m->n_spk; i++) sg_free(m->spk[i].name), sg_free(m->spk[i].dialect);
	for (int i = 0; i < m->n_lang; i++) sg_free(m->lang[i].name);
	sg_weights_close(m->w);
	sg_free(m);
}

struct sg_backend *sg_qwen3_tts_backend(const sg_qwen3_tts *m) { return m->be; }
struct sg_weights *sg_qwen3_tts_weights(const sg_qwen3_tts *m) { return m->w; }
int sg_qwen3_tts_hidden(const sg_qwen3_tts *m) { return m->D; }
int sg_qwen3_tts_groups(const sg_qwen3_tts *m) { return m->G; }
const char *sg_qwen3_tts_type(const sg_qwen3_tts *m) { return m->type; }
int sg_qwen3_tts_n_speakers(const sg_qwen3_tts *m) { return m->n_spk; }
const char *sg_qwen3_tts_speaker(const sg_qwen3_tts *m, int i) { return i >= 0 && i < m->n_spk ? m->spk[i].name : NULL; }
int sg_qwen3_tts_n_languages(const sg_qwen3_tts *m) { return m->n_lang; }
const char *sg_qwen3_tts_language(const sg_qwen3_tts *m, int i) { return i >= 0 && i < m->n_lang ? m->lang[i].name : NULL; }
int sg_qwen3_tts_im_start(const sg_qwen3_tts *m) { return m->im_start; }
int sg_qwen3_tts_im_end(const sg_qwen3_tts *m) { return m->im_end; }
sg_qwen3_tts_gen sg_qwen3_tts_gen_defaults(const sg_qwen3_tts *m) { return m->defaults; }

/* ---- pieces of the forward ---- */

/* y [n][out] = x [n][in] W^T (+ b) on the backend */
static sg_status linear(sg_qwen3_tts *m, const sg_btensor *w, const sg_btensor *b, const float *x, int n, float *y)
{
	sg_backend *be = m->be;
	int64_t in = w->ne[0], outd = w->ne[1];
	int64_t nx[4] = {in, n, 1, 1}, ny[4] = {outd, n, 1, 1};
	sg_btensor tx, ty;
	sg_status st = be->ops->tensor_alloc(be, SG_TYPE_F32, nx, &tx);
	if (st) return st;
	st = be->ops->tensor_alloc(be, SG_TYPE_F32, ny, &ty);
	if (!st) st = be->ops->write(be, &tx, 0, x, sizeof(float) * (size_t)(in * n));
	if (!st) st = be->ops->matmul(be, w, &tx, b && b->data ? b : NULL, &ty);
	if (!st) st = be->ops->read(be, &ty, 0, y, sizeof(float) * (size_t)(outd * n));
	be->ops->tensor_free(be, &tx);
	if (ty.data) be->ops->tensor_free(be, &ty);
	return st;
}

static void table_row(const sg_tensor *t, int64_t row, float *out)
{
	size_t rb = (size_t)t->nbytes / (size_t)t->ne[1];
	sg_dequantize_ref(t->type, t->data + rb * (size_t)row, out, t->ne[0]);
}

/* out [n][D] = text_projection(text_embedding(ids)) */
static sg_status text_proj(sg_qwen3_tts *m, const int32_t *ids, int n, float *out)
{
	if (n <= 0) return SG_OK;
	float *e = sg_malloc(sizeof(float) * (size_t)n * (size_t)m->TD * 2);
	if (!e) return sg_error(SG_ERR_NOMEM, "qwen3-tts: text of %d tokens", n);
	float *h = e + (size_t)n * (size_t)m->TD;
	for (int i = 0; i < n; i++) table_row(m->text_emb, ids[i], e + (size_t)i * (size_t)m->TD);
	sg_status st = linear(m, &m->fc1, &m->fc1b, e, n, h);
	if (!st)
		for (size_t i = 0; i < (size_t)n * (size_t)m->TD; i++) h[i] = h[i] / (1.0f + expf(-h[i]));
	if (!st) st = linear(m, &m->fc2, &m->fc2b, h, n, out);
	sg_free(e);
	return st;
}

static void add_codec(const sg_qwen3_tts *m, int id, float *acc)
{
	float row[m->D];
	table_row(m->codec_emb, id, row);
	for (int i = 0; i < m->D; i++) acc[i] += row[i];
}

/* ---- sampling ---- */

typedef struct {
	uint64_t s;
} qt_rng;

static double rng_uniform(qt_rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (double)(z >> 11) / 9007199254740992.0;
}

static const float *g_sort_keys;
static int cmp_desc(const void *a, const void *b)
{
	float x = g_sort_keys[*(const int *)a], y = g_sort_keys[*(const int *)b];
	return x < y ? 1 : x > y ? -1 : (*(const int *)a - *(const int *)b);
}

/* The package's choice over logits l [n] (already penalised): argmax (first of ties) at
 * temperature 0, else temperature, top-k, top-p (as transformers' warpers) and a draw. */
static int pick(float *l, int n, float temp, int top_k, float top_p, qt_rng *r, int *scratch)
{
	int best = 0;
	for (int i = 1; i < n; i++)
		if (l[i] > l[best]) best = i;
	if (temp <= 0 || !isfinite(l[best])) return best;
	for (int i = 0; i < n; i++) l[i] /= temp;
	for (int i = 0; i < n; i++) scratch[i] = i;
	g_sort_keys = l;
	qsort(scratch, (size_t)n, sizeof(int), cmp_desc);
	int keep = n;
	if (top_k > 0 && top_k < n) {
		float kth = l[scratch[top_k - 1]];
		keep = top_k;
		while (keep < n && l[scratch[keep]] >= kth) keep++; /* ties with the k-th stay */
	}
	double mx = l[scratch[0]], sum = 0;
	for (int i = 0; i < keep; i++) sum += exp((double)l[scratch[i]] - mx);
	if (top_p < 1.0f) {
		/* drop the tail whose cumulative probability (from the least likely) is <= 1 - top_p */
		double cum = 0, lim = (1.0 - top_p) * sum;
		int k = keep;
		while (k > 1) {
			double p = exp((double)l[scratch[k - 1]] - mx);
			if (cum + p > lim) break;
			cum += p;
			k--;
		}
		keep = k;
		sum -= cum;
	}
	double u = rng_uniform(r) * sum, acc = 0;
	for (int i = 0; i < keep; i++) {
		acc += exp((double)l[scratch[i]] - mx);
		if (u < acc) return scratch[i];
	}
	return scratch[keep - 1];
}

/* ---- generation ---- */

static const qt_name *find_name(const qt_name *v, int n, const char *s)
{
	for (int i = 0; i < n; i++)
		if (!strcasecmp(v[i].name, s)) return &v[i];
	return NULL;
}

static sg_status list_error(const char *what, const char *s, const qt_name *v, int n, const char *extra)
{
	char buf[2048];
	size_t o = 0;
	buf[0] = 0;
	if (extra) o += (size_t)snprintf(buf, sizeof(buf), "%s", extra);
	for (int i = 0; i < n && o < sizeof(buf) - 64; i++)
		o += (size_t)snprintf(buf + o, sizeof(buf) - o, "%s%s", o ? ", " : "", v[i].name);
	return sg_error(SG_ERR_INVALID_ARG, "qwen3-tts: unknown %s '%s' (this model has: %s)", what, s, n || extra ? buf : "none");
}

/* The prompt rows and the trailing text rows, as the package lays them out. */
static sg_status build_prompt(sg_qwen3_tts *m, const sg_qwen3_tts_gen *g, float **prompt, int *n_prompt, float **trail,
			      int *n_trail, float *pad_embed)
{
	int D = m->D;
	if (!g->ids || g->n_ids < 9) return sg_error(SG_ERR_INVALID_ARG, "qwen3-tts: %d prompt ids (at least 9: role, text, closing)", g->n_ids);
	for (int i = 0; i < g->n_ids; i++)
		if (g->ids[i] < 0 || g->ids[i] >= m->TV) return sg_error(SG_ERR_INVALID_ARG, "qwen3-tts: text id %d outside [0, %d)", g->ids[i], m->TV);
	for (int i = 0; i < g->n_instruct; i++)
		if (!g->instruct_ids || g->instruct_ids[i] < 0 || g->instruct_ids[i] >= m->TV)
			return sg_error(SG_ERR_INVALID_ARG, "qwen3-tts: instruction id outside [0, %d)", m->TV);
	const qt_name *spk = NULL;
	if (!g->spk_embed && g->speaker && *g->speaker && !(spk = find_name(m->spk, m->n_spk, g->speaker)))
		return list_error("speaker", g->speaker, m->spk, m->n_spk, NULL);
	int icl = g->spk_embed && g->n_ref > 0;
	if (g->n_ref < 0 || (g->n_ref > 0 && (!g->ref_codes || !g->spk_embed)) || g->n_ref > 1 << 16)
		return sg_error(SG_ERR_INVALID_ARG, "qwen3-tts: %d reference frames (in-context cloning takes the codes and an x-vector)", g->n_ref);
	if (icl) {
		if (!g->ref_ids || g->n_ref_ids < 6)
			return sg_error(SG_ERR_INVALID_ARG, "qwen3-tts: %d reference text ids (at least 6: role, text, closing); in-context "
							    "cloning needs the reference clip's transcript",
					g->n_ref_ids);
		for (int i = 0; i < g->n_ref_ids; i++)
			if (g->ref_ids[i] < 0 || g->ref_ids[i] >= m->TV)
				return sg_error(SG_ERR_INVALID_ARG, "qwen3-tts: reference text id %d outside [0, %d)", g->ref_ids[i], m->TV);
		for (int i = 0; i < g->n_ref * m->G; i++)
			if (g->ref_codes[i] < 0 || g->ref_codes[i] >= m->Vcp)
				return sg_error(SG_ERR_INVALID_ARG, "qwen3-tts: reference code %d (frame %d) outside the codebook [0, %d)", g->ref_codes[i],
						i / m->G, m->Vcp);
	}
	int lang_id = -1;
	const char *lang = g->language && *g->language ? g->language : "auto";
	if (strcasecmp(lang, "auto")) {
		const qt_name *l = find_name(m->lang, m->n_lang, lang);
		if (!l) return list_error("language", lang, m->lang, m->n_lang, "auto");
		lang_id = l->id;
	}
	if ((!strcasecmp(lang, "auto") || !strcasecmp(lang, "chinese")) && spk && spk->dialect) {
		const qt_name *l = find_name(m->lang, m->n_lang, spk->dialect);
		if (l) lang_id = l->id;
	}
	/* codec tags: [nothink, think_bos, think_eos] or [think, think_bos, lang, think_eos], the
	 * speaker (a preset's codec id, or the x-vector: -1), then pad and bos */
	int codec[8], nc = 0;
	if (lang_id < 0) codec[nc++] = m->nothink, codec[nc++] = m->think_bos, codec[nc++] = m->think_eos;
	else codec[nc++] = m->think, codec[nc++] = m->think_bos, codec[nc++] = lang_id, codec[nc++] = m->think_eos;
	if (spk) codec[nc++] = spk->id;
	else if (g->spk_embed) codec[nc++] = -1;
	codec[nc++] = m->pad;
	codec[nc++] = m->bos;
	int n_text = g->n_ids - 8; /* ids[3 .. n-5) */
	/* in-context: text rows = the reference text ids[3 .. n-2), the text, tts_eos; codec rows =
	 * bos, then each reference frame's embeddings summed */
	int n_rt = icl ? g->n_ref_ids - 5 : 0, tl = n_rt + n_text + 1, cl = g->n_ref + 1;
	int rows, trows;
	if (icl) {
		rows = g->n_instruct + 3 + (nc - 1) + (g->non_streaming ? tl + cl : cl);
		trows = !g->non_streaming && tl > cl ? tl - cl : 1;
	} else {
		rows = g->n_instruct + 3 + (nc - 1) + (g->non_streaming ? n_text + 2 : 1);
		trows = g->non_streaming ? 1 : n_text; /* ids[4 .. n-5) + tts_eos */
	}
	float *p = sg_calloc((size_t)rows * (size_t)D, sizeof(float));
	float *t = sg_calloc((size_t)trows * (size_t)D, sizeof(float));
	float *special = sg_malloc(sizeof(float) * 3 * (size_t)D);
	float *te = icl ? sg_calloc((size_t)(tl + cl) * (size_t)D, sizeof(float)) : NULL;
	int32_t *tids = icl ? sg_malloc(sizeof(int32_t) * (size_t)(tl ? tl : 1)) : NULL;
	if (!p || !t || !special || (icl && (!te || !tids))) {
		sg_free(p), sg_free(t), sg_free(special), sg_free(te), sg_free(tids);
		return sg_error(SG_ERR_NOMEM, "qwen3-tts: a prompt of %d rows", rows);
	}
	int32_t sp_ids[3] = {m->tts_bos, m->tts_eos, m->tts_pad};
	sg_status st = text_proj(m, sp_ids, 3, special);
	const float *tbos = special, *teos = special + D, *tpad = special + 2 * D;
	int r = 0;
	if (!st && g->n_instruct) st = text_proj(m, g->instruct_ids, g->n_instruct, p);
	r = g->n_instruct;
	if (!st) st = text_proj(m, g->ids, 3, p + (size_t)r * D);
	r += 3;
	for (int i = 0; !st && i < nc - 1; i++, r++) {
		float *row = p + (size_t)r * D;
		memcpy(row, i < nc - 2 ? tpad : tbos, sizeof(float) * (size_t)D);
		if (codec[i] >= 0) add_codec(m, codec[i], row);
		else
			for (int k = 0; k < D; k++) row[k] += g->spk_embed[k];
	}
	if (!st && icl) {
		float *ce = te + (size_t)tl * D, rowv[D];
		memcpy(tids, g->ref_ids + 3, sizeof(int32_t) * (size_t)n_rt);
		memcpy(tids + n_rt, g->ids + 3, sizeof(int32_t) * (size_t)n_text);
		st = text_proj(m, tids, tl - 1, te);
		if (!st) memcpy(te + (size_t)(tl - 1) * D, teos, sizeof(float) * (size_t)D);
		add_codec(m, m->bos, ce);
		for (int f = 0; f < g->n_ref; f++) {
			const int32_t *fc = g->ref_codes + (size_t)f * m->G;
			float *row = ce + (size_t)(f + 1) * D;
			add_codec(m, fc[0], row);
			for (int j = 1; j < m->G; j++) {
				table_row(m->cp_emb[j - 1], fc[j], rowv);
				for (int k = 0; k < D; k++) row[k] += rowv[k];
			}
		}
		if (!st && g->non_streaming) {
			for (int i = 0; i < tl; i++, r++) {
				memcpy(p + (size_t)r * D, te + (size_t)i * D, sizeof(float) * (size_t)D);
				add_codec(m, m->pad, p + (size_t)r * D);
			}
			for (int i = 0; i < cl; i++, r++)
				for (int k = 0; k < D; k++) p[(size_t)r * D + k] = ce[(size_t)i * D + k] + tpad[k];
			memcpy(t, tpad, sizeof(float) * (size_t)D);
		} else if (!st) {
			for (int i = 0; i < cl; i++, r++) {
				const float *tx = i < tl ? te + (size_t)i * D : tpad;
				for (int k = 0; k < D; k++) p[(size_t)r * D + k] = tx[k] + ce[(size_t)i * D + k];
			}
			if (tl > cl) memcpy(t, te + (size_t)cl * D, sizeof(float) * (size_t)(tl - cl) * (size_t)D);
			else memcpy(t, tpad, sizeof(float) * (size_t)D);
		}
	} else if (!st && g->non_streaming) {
		if (n_text) st = text_proj(m, g->ids + 3, n_text, p + (size_t)r * D);
		for (int i = 0; !st && i < n_text; i++) add_codec(m, m->pad, p + (size_t)(r + i) * D);
		r += n_text;
		if (!st) {
			memcpy(p + (size_t)r * D, teos, sizeof(float) * (size_t)D);
			add_codec(m, m->pad, p + (size_t)r * D);
			r++;
			memcpy(p + (size_t)r * D, tpad, sizeof(float) * (size_t)D);
			add_codec(m, m->bos, p + (size_t)r * D);
			r++;
			memcpy(t, tpad, sizeof(float) * (size_t)D);
		}
	} else if (!st) {
		st = text_proj(m, g->ids + 3, 1, p + (size_t)r * D);
		if (!st) add_codec(m, codec[nc - 1], p + (size_t)r * D);
		r++;
		if (!st && n_text > 1) st = text_proj(m, g->ids + 4, n_text - 1, t);
		if (!st) memcpy(t + (size_t)(n_text - 1) * D, teos, sizeof(float) * (size_t)D);
	}
	sg_free(te), sg_free(tids);
	if (!st) memcpy(pad_embed, tpad, sizeof(float) * (size_t)D);
	sg_free(special);
	if (st) {
		sg_free(p), sg_free(t);
		return st;
	}
	SG_ASSERT(r == rows);
	*prompt = p, *n_prompt = rows, *trail = t, *n_trail = trows;
	return SG_OK;
}

static sg_status read_row(sg_backend *be, const sg_btensor *t, float *out, int64_t n)
{
	return be->ops->read(be, t, 0, out, sizeof(float) * (size_t)n);
}

/* Codebooks 1..G-1 of a frame from the talker's hidden state and codebook 0; adds every
 * codebook's embedding to next [D]. */
static sg_status predict_rest(sg_qwen3_tts *m, sg_fwd_state *cs, const float *hidden, int32_t *codes,
			      const sg_qwen3_tts_gen *g, qt_rng *rng, int *scratch, float *next)
{
	int D = m->D, Dc = m->Dc;
	float in[2 * D], x[2 * Dc], h[Dc], lg[m->Vcp], row[D];
	memcpy(in, hidden, sizeof(float) * (size_t)D);
	table_row(m->codec_emb, codes[0], in + D);
	for (int i = 0; i < D; i++) next[i] += in[D + i];
	int n = 2;
	sg_status st = SG_OK;
	for (int j = 0; j < m->G - 1 && !st; j++) {
		const float *src = j == 0 ? in : row;
		if (m->has_mtp) st = linear(m, &m->mtp, &m->mtpb, src, n, x);
		else memcpy(x, src, sizeof(float) * (size_t)(n * D));
		if (!st) st = sg_forward_embd(m->cp, cs, x, n, j == 0 ? 0 : j + 1, SG_LOGITS_NONE);
		if (!st) st = read_row(m->be, &cs->xb, h, Dc);
		if (!st) st = linear(m, &m->cp_head[j], NULL, h, 1, lg);
		if (st) break;
		int c = pick(lg, m->Vcp, g->sub_temperature, g->sub_top_k, g->sub_top_p, rng, scratch);
		codes[j + 1] = c;
		table_row(m->cp_emb[j], c, row);
		for (int i = 0; i < D; i++) next[i] += row[i];
		n = 1;
	}
	return st;
}

sg_status sg_qwen3_tts_generate(sg_qwen3_tts *m, const sg_qwen3_tts_gen *g, int32_t **codes_out, int *n_frames)
{
	if (codes_out) *codes_out = NULL;
	*n_frames = 0;
	if (g->max_frames < 1 || g->max_frames > 1 << 20)
		return sg_error(SG_ERR_INVALID_ARG, "qwen3-tts: max_frames %d (1 .. %d)", g->max_frames, 1 << 20);
	if (g->temperature < 0 || g->sub_temperature < 0 || g->top_p <= 0 || g->top_p > 1 || g->sub_top_p <= 0 || g->sub_top_p > 1 ||
	    g->repetition_penalty <= 0)
		return sg_error(SG_ERR_INVALID_ARG, "qwen3-tts: temperature %g, top_p %g, repetition penalty %g", g->temperature, g->top_p,
				g->repetition_penalty);
	int D = m->D, V = m->V, G = m->G;
	float *prompt = NULL, *trail = NULL, pad_embed[D];
	int n_prompt = 0, n_trail = 0;
	sg_status st = build_prompt(m, g, &prompt, &n_prompt, &trail, &n_trail, pad_embed);
	if (st) return st;
	sg_fwd_state ts, cs;
	memset(&ts, 0, sizeof(ts));
	memset(&cs, 0, sizeof(cs));
	int n_ctx = n_prompt + g->max_frames + 1;
	st = sg_fwd_state_init(m->talker, n_ctx, n_prompt, SG_TYPE_F32, &ts);
	if (!st) st = sg_fwd_state_init(m->cp, G + 1, 2, SG_TYPE_F32, &cs);
	int32_t *codes = NULL, *hist = NULL;
	float *lg = sg_malloc(sizeof(float) * (size_t)V), *hidden = sg_malloc(sizeof(float) * (size_t)D);
	float *next = sg_malloc(sizeof(float) * (size_t)D);
	int *scratch = sg_malloc(sizeof(int) * (size_t)(V > m->Vcp ? V : m->Vcp));
	uint8_t *seen = sg_calloc((size_t)V, 1);
	codes = sg_malloc(sizeof(int32_t) * (size_t)G * (size_t)g->max_frames);
	hist = sg_malloc(sizeof(int32_t) * (size_t)g->max_frames);
	if (!st && (!lg || !hidden || !next || !scratch || !seen || !codes || !hist)) st = sg_error(SG_ERR_NOMEM, "qwen3-tts: generation");
	qt_rng rng = {g->seed ^ 0x5851f42d4c957f2dull};
	int frames = 0, n_hist = 0, pos = 0;
	if (!st) st = sg_forward_embd(m->talker, &ts, prompt, n_prompt, 0, SG_LOGITS_LAST);
	pos = n_prompt;
	while (!st) {
		st = read_row(m->be, &ts.logits, lg, V);
		if (!st) st = read_row(m->be, &ts.xb, hidden, D);
		if (st) break;
		/* the package's logits processing: repetition penalty over the codebook-0 tokens so far,
		 * the top 1024 ids (specials) suppressed but end of speech, which waits 2 tokens */
		memset(seen, 0, (size_t)V);
		for (int i = 0; i < n_hist && g->repetition_penalty != 1.0f; i++) {
			float *v = &lg[hist[i]];
			if (seen[hist[i]]) continue;
			seen[hist[i]] = 1;
			*v = *v < 0 ? *v * g->repetition_penalty : *v / g->repetition_penalty;
		}
		for (int i = V - 1024; i < V; i++)
			if (i != m->eos) lg[i] = -INFINITY;
		if (n_hist < 2) lg[m->eos] = -INFINITY;
		int tok = pick(lg, V, g->temperature, g->top_k, g->top_p, &rng, scratch);
		hist[n_hist++] = tok;
		if (tok == m->eos || n_hist >= g->max_frames) break;
		int32_t *fc = codes + (size_t)frames * G;
		fc[0] = tok;
		memset(next, 0, sizeof(float) * (size_t)D);
		st = predict_rest(m, &cs, hidden, fc, g, &rng, scratch, next);
		if (st) break;
		frames++;
		if (g->on_frame && g->on_frame(fc, frames - 1, g->user)) {
			st = sg_error(SG_ERR_CANCELLED, "qwen3-tts: stopped after %d frames", frames);
			break;
		}
		const float *tr = frames - 1 < n_trail ? trail + (size_t)(frames - 1) * D : pad_embed;
		for (int i = 0; i < D; i++) next[i] += tr[i];
		st = sg_forward_embd(m->talker, &ts, next, 1, pos++, SG_LOGITS_LAST);
	}
	if (ts.kv) sg_fwd_state_free(m->talker, &ts);
	if (cs.kv) sg_fwd_state_free(m->cp, &cs);
	sg_free(prompt), sg_free(trail), sg_free(lg), sg_free(hidden), sg_free(next), sg_free(scratch), sg_free(seen), sg_free(hist);
	if (st && st != SG_ERR_CANCELLED) {
		sg_free(codes);
		return st;
	}
	*n_frames = frames;
	if (codes_out) *codes_out = codes;
	else sg_free(codes);
	return st;
}
