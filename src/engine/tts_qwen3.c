/*
 * Qwen3-TTS voices (tts_qwen3.h). One sentence: the text wrapped in the chat markers the package
 * uses and tokenized, instructions (voice design) likewise as a user turn, the codes generated
 * frame by frame and pushed into the codec's stream, which decodes a chunk as soon as it is
 * complete (SARAGOSSA_QWEN_TTS_FIRST_CHUNK frames first, then SARAGOSSA_QWEN_TTS_CHUNK, each with
 * up to SARAGOSSA_QWEN_TTS_CONTEXT = 25 frames of left context as the package's chunked decode
 * keeps).
 *
 * The tokenizer: the folder's tokenizer.json when it has one, else the byte-level BPE that
 * transformers' Qwen2 tokenizer builds from vocab.json, merges.txt and tokenizer_config.json
 * (the files Qwen3-TTS folders ship), assembled here as the same tokenizer.json.
 */
#include "engine/tts_qwen3.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/flags.h"
#include "base/json.h"
#include "models/qwen3_tts.h"
#include "audio/decode.h"
#include "models/qwen3_tts_codec.h"
#include "models/qwen3_tts_spk.h"
#include "models/qwen3_tts_tok.h"
#include "text/tokenizer/tokenizer.h"

/* the longest reference clip taken for cloning (the package sets none; the speaker encoder's and
 * the tokenizer's work grows with it, the talker's prompt by 12.5 frames a second) */
#define QTTS_MAX_REF_SECONDS 60


typedef struct qtts {
	sg_qwen3_tts *m;
	sg_qwen3_tts_codec *codec;
	sg_backend *codec_be; /* a CPU backend of the codec's own when the talker's has no conv ops */
	sg_tokenizer *tok;
	int n_voices;
	const char *voices[257];
	/* voice cloning (Base models): the speaker encoder and the speech tokenizer's encoder, run
	 * on the codec's backend; NULL where the folder has none */
	sg_qwen3_tts_spk *spk;
	sg_qwen3_tts_tok *enc;
	/* the last reference clip prepared (one sg_tts speaks one text at a time): its bytes'
	 * hash and size, x-vector [D], codes [n_ref][G] (NULL until in-context cloning asks) */
	uint64_t ref_hash;
	size_t ref_size;
	float *ref_x;
	int32_t *ref_codes;
	int n_ref, ref_ok;
} qtts;

static int is_file(const char *p)
{
	struct stat s;
	return stat(p, &s) == 0 && S_ISREG(s.st_mode);
}

int tts_qwen3_is(const char *dir)
{
	char p[4200];
	snprintf(p, sizeof p, "%s/config.json", dir);
	json_t *o = NULL;
	if (!is_file(p) || sg_json_load_file(p, 1 << 22, &o)) return 0;
	int yes = json_is_object(json_object_get(o, "talker_config"));
	json_decref(o);
	return yes;
}

/* Qwen2's pre-tokenizer split (transformers' tokenization_qwen2 PRETOKENIZE_REGEX) */
static const char qwen2_split[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
				  "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static sg_status read_text(const char *path, char **out, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f) return sg_error(SG_ERR_IO, "tts: cannot open %s", path);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *b = n >= 0 && n < (1L << 30) ? sg_malloc((size_t)n + 1) : NULL;
	if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) {
		fclose(f);
		sg_free(b);
		return sg_error(SG_ERR_IO, "tts: cannot read %s", path);
	}
	fclose(f);
	b[n] = 0;
	*out = b;
	*len = (size_t)n;
	return SG_OK;
}

/* tokenizer.json from vocab.json + merges.txt + tokenizer_config.json's added tokens */
sg_status tts_qwen3_tokenizer(const char *dir, sg_tokenizer **out)
{
	char p[4200];
	snprintf(p, sizeof p, "%s/tokenizer.json", dir);
	if (is_file(p)) return sg_tokenizer_load(dir, out);
	json_t *vocab = NULL, *cfg = NULL;
	char *merges = NULL, *cfg_text = NULL;
	size_t mlen = 0, clen = 0;
	snprintf(p, sizeof p, "%s/vocab.json", dir);
	sg_status st = sg_json_load_file(p, 1 << 28, &vocab);
	snprintf(p, sizeof p, "%s/merges.txt", dir);
	if (!st) st = read_text(p, &merges, &mlen);
	snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
	if (!st && is_file(p)) {
		st = read_text(p, &cfg_text, &clen);
		if (!st) st = sg_json_parse_config(cfg_text, clen, p, &cfg);
	}
	json_t *tj = NULL, *ml = json_array();
	if (!st) {
		for (char *line = merges, *nl; line && *line; line = nl ? nl + 1 : NULL) {
			nl = strchr(line, '\n');
			if (nl) *nl = 0;
			size_t n = strlen(line);
			if (n && line[n - 1] == '\r') line[--n] = 0;
			if (!n || !strncmp(line, "#version", 8)) continue;
			json_array_append_new(ml, json_string(line));
		}
		json_t *added = json_array();
		const char *key;
		json_t *v;
		json_object_foreach(json_object_get(cfg, "added_tokens_decoder"), key, v) {
			json_t *t = json_pack("{s:I, s:O, s:b, s:b, s:b, s:b, s:b}", "id", (json_int_t)strtoll(key, NULL, 10), "content",
					      json_object_get(v, "content"), "single_word", json_is_true(json_object_get(v, "single_word")),
					      "lstrip", json_is_true(json_object_get(v, "lstrip")), "rstrip",
					      json_is_true(json_object_get(v, "rstrip")), "normalized",
					      json_is_true(json_object_get(v, "normalized")), "special", json_is_true(json_object_get(v, "special")));
			if (t) json_array_append_new(added, t);
		}
		tj = json_pack("{s:s, s:o, s:{s:s}, s:{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b, s:b}]},"
			       " s:{s:s, s:b, s:b, s:b}, s:{s:s, s:b, s:b, s:b},"
			       " s:{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:b, s:O, s:O}}",
			       "version", "1.0", "added_tokens", added, "normalizer", "type", "NFC", "pre_tokenizer", "type", "Sequence",
			       "pretokenizers", "type", "Split", "pattern", "Regex", qwen2_split, "behavior", "Isolated", "invert", 0,
			       "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 0, "use_regex", 0, "post_processor", "type",
			       "ByteLevel", "add_prefix_space", 0, "trim_offsets", 0, "use_regex", 0, "decoder", "type", "ByteLevel",
			       "add_prefix_space", 0, "trim_offsets", 0, "use_regex", 0, "model", "type", "BPE", "dropout", "unk_token",
			       "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", 0, "byte_fallback", 0, "ignore_merges", 0,
			       "vocab", vocab, "merges", ml);
		if (!tj) st = sg_error(SG_ERR_NOMEM, "tts: %s: tokenizer", dir);
	}
	if (!st) {
		char *js = json_dumps(tj, JSON_COMPACT);
		st = js ? sg_tokenizer_from_json(js, strlen(js), cfg_text, clen, out) : sg_error(SG_ERR_NOMEM, "tts: tokenizer");
		free(js);
	}
	json_decref(tj);
	json_decref(ml);
	json_decref(vocab);
	json_decref(cfg);
	sg_free(merges);
	sg_free(cfg_text);
	return st ? sg_error_wrap(st, "tts: %s: tokenizer (tokenizer.json, or vocab.json and merges.txt)", dir) : SG_OK;
}

static int q_rate(const void *m) { return sg_qwen3_tts_codec_sample_rate(((const qtts *)m)->codec); }
static int q_nv(const void *m) { return ((const qtts *)m)->n_voices; }
static const char *q_voice(const void *m, int i)
{
	const qtts *q = m;
	return i >= 0 && i < q->n_voices ? q->voices[i] : NULL;
}

static void q_free(void *mp)
{
	qtts *q = mp;
	if (!q) return;
	sg_qwen3_tts_spk_free(q->spk);
	sg_qwen3_tts_tok_free(q->enc);
	sg_free(q->ref_x);
	sg_free(q->ref_codes);
	sg_qwen3_tts_codec_free(q->codec);
	if (q->codec_be) sg_backend_free(q->codec_be);
	sg_qwen3_tts_free(q->m);
	sg_tokenizer_free(q->tok);
	sg_free(q);
}

/* ISO codes the API may pass for the config's language names */
static const char *language_name(const char *l)
{
	static const char *const map[][2] = {{"en", "english"}, {"zh", "chinese"}, {"ja", "japanese"}, {"ko", "korean"},
					     {"de", "german"},  {"fr", "french"},  {"ru", "russian"},  {"pt", "portuguese"},
					     {"es", "spanish"}, {"it", "italian"}};
	for (size_t i = 0; l && i < sizeof map / sizeof map[0]; i++)
		if (!strcasecmp(l, map[i][0])) return map[i][1];
	return l;
}

typedef struct speak_ctx {
	sg_qwen3_tts_stream *s;
	sg_status err;
} speak_ctx;

static int on_frame(const int32_t *codes, int frame, void *user)
{
	(void)frame;
	speak_ctx *c = user;
	c->err = sg_qwen3_tts_stream_push(c->s, codes);
	return c->err != SG_OK;
}

static sg_status encode(const qtts *q, const char *a, const char *text, const char *b, sg_tokens *out)
{
	size_t n = strlen(a) + strlen(text) + strlen(b) + 1;
	char *s = sg_malloc(n);
	if (!s) return sg_error(SG_ERR_NOMEM, "tts: %zu bytes of text", n);
	snprintf(s, n, "%s%s%s", a, text, b);
	sg_status st = sg_tokenizer_encode(q->tok, s, strlen(s), 0, out);
	sg_free(s);
	return st;
}

static uint64_t fnv1a(const void *data, size_t n)
{
	const unsigned char *b = data;
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

/* The reference clip of p: decoded at the model's rate, its x-vector and (in-context) its codes,
 * kept for the sentences of this call and reused while the same bytes come again. */
static sg_status q_reference(void *mp, const sg_speak_params *p)
{
	qtts *q = mp;
	if (!p->ref_audio) return SG_OK;
	if (!q->spk)
		return sg_error(SG_ERR_UNSUPPORTED, "speak: this Qwen3-TTS model (%s) has no speaker encoder: cloning a voice from a reference "
						    "clip needs a Base model",
				sg_qwen3_tts_type(q->m));
	int icl = !p->x_vector_only;
	if (icl && (!p->ref_text || !p->ref_text[0]))
		return sg_error(SG_ERR_INVALID_ARG, "speak: in-context cloning needs the reference clip's transcript (ref_text), or "
						    "x-vector-only cloning");
	if (icl && !q->enc)
		return sg_error(SG_ERR_UNSUPPORTED, "speak: this model's speech tokenizer has no encoder, so only x-vector-only cloning works");
	uint64_t h = fnv1a(p->ref_audio, p->ref_audio_size);
	if (q->ref_ok && h == q->ref_hash && p->ref_audio_size == q->ref_size && (!icl || q->ref_codes)) return SG_OK;
	q->ref_ok = 0;
	sg_free(q->ref_codes);
	q->ref_codes = NULL, q->n_ref = 0;
	int rate = sg_qwen3_tts_spk_sample_rate(q->spk);
	sg_audio a;
	sg_status st = sg_audio_decode_memory_at(p->ref_audio, p->ref_audio_size, rate, &a);
	if (st) return sg_error_wrap(st, "speak: the reference clip");
	if (a.n > (size_t)rate * QTTS_MAX_REF_SECONDS)
		st = sg_error(SG_ERR_INVALID_ARG, "speak: the reference clip is %.1f s long, over the cap of %d s", (double)a.n / rate,
			      QTTS_MAX_REF_SECONDS);
	if (!st && !q->ref_x) {
		q->ref_x = sg_malloc(sizeof(float) * (size_t)sg_qwen3_tts_spk_dim(q->spk));
		if (!q->ref_x) st = sg_error(SG_ERR_NOMEM, "speak: x-vector");
	}
	if (!st) st = sg_qwen3_tts_spk_embed(q->spk, a.samples, a.n, q->ref_x);
	if (!st && icl) {
		if (sg_qwen3_tts_tok_sample_rate(q->enc) != rate)
			st = sg_error(SG_ERR_UNSUPPORTED, "speak: the speaker encoder reads %d Hz, the speech tokenizer %d Hz", rate,
				      sg_qwen3_tts_tok_sample_rate(q->enc));
		else st = sg_qwen3_tts_tok_encode(q->enc, a.samples, a.n, &q->ref_codes, &q->n_ref);
	}
	sg_audio_free(&a);
	if (st) return st;
	q->ref_hash = h, q->ref_size = p->ref_audio_size, q->ref_ok = 1;
	return SG_OK;
}

static sg_status q_speak(void *mp, const char *text, const sg_speak_params *p, tts_emit_fn emit, void *user)
{
	qtts *q = mp;
	sg_tokens ids = {0}, ins = {0}, rids = {0};
	int clone = p->ref_audio && q->ref_ok, icl = clone && !p->x_vector_only;
	if (p->ref_audio && !q->ref_ok) return sg_error(SG_ERR_INTERNAL, "speak: the reference clip was not prepared");
	sg_status st = encode(q, "<|im_start|>assistant\n", text, "<|im_end|>\n<|im_start|>assistant\n", &ids);
	if (!st && icl) st = encode(q, "<|im_start|>assistant\n", p->ref_text, "<|im_end|>\n", &rids);
	if (!st && p->instructions && p->instructions[0] && strcmp(sg_qwen3_tts_type(q->m), "base"))
		st = encode(q, "<|im_start|>user\n", p->instructions, "<|im_end|>\n", &ins);
	sg_qwen3_tts_stream *s = NULL;
	int first = (int)sg_flag_int("SARAGOSSA_QWEN_TTS_FIRST_CHUNK"), chunk = (int)sg_flag_int("SARAGOSSA_QWEN_TTS_CHUNK");
	int ctx = (int)sg_flag_int("SARAGOSSA_QWEN_TTS_CONTEXT");
	if (!st) st = sg_qwen3_tts_stream_open(q->codec, chunk > 0 ? chunk : 12, ctx >= 0 ? ctx : 25, emit, user, &s);
	if (!st) sg_qwen3_tts_stream_first_chunk(s, first);
	/* in-context: the reference frames are the decoder's left context, never emitted (the
	 * package decodes them with the new frames and cuts their samples off) */
	if (!st && icl) st = sg_qwen3_tts_stream_prefix(s, q->ref_codes, q->n_ref);
	if (!st) {
		sg_qwen3_tts_gen g = sg_qwen3_tts_gen_defaults(q->m);
		speak_ctx c = {s, SG_OK};
		size_t chars = 0;
		for (const char *t = text; *t; t++) chars += ((unsigned char)*t & 0xC0) != 0x80;
		g.ids = ids.ids, g.n_ids = (int)ids.n;
		g.instruct_ids = ins.n ? ins.ids : NULL, g.n_instruct = (int)ins.n;
		g.speaker = p->voice && strcmp(p->voice, "default") ? p->voice : (sg_qwen3_tts_n_speakers(q->m) ? q->voices[0] : NULL);
		if (clone) {
			/* the package's generate_voice_clone: the text fed frame by frame */
			g.spk_embed = q->ref_x, g.speaker = NULL, g.non_streaming = 0;
			if (icl) g.ref_codes = q->ref_codes, g.n_ref = q->n_ref, g.ref_ids = rids.ids, g.n_ref_ids = (int)rids.n;
		}
		g.language = language_name(p->language);
		/* the package's cap is 8192 frames; a sentence gets about 4 frames a character */
		if ((size_t)g.max_frames > 40 + 4 * chars) g.max_frames = (int)(40 + 4 * chars);
		g.temperature = p->temperature;
		g.top_k = p->top_k;
		g.top_p = p->top_p;
		g.sub_temperature = p->temperature > 0 ? g.sub_temperature : 0;
		g.seed = p->seed;
		g.on_frame = on_frame, g.user = &c;
		int n = 0;
		st = sg_qwen3_tts_generate(q->m, &g, NULL, &n);
		if (c.err) st = c.err;
		if (!st) st = sg_qwen3_tts_stream_finish(s);
	}
	sg_qwen3_tts_stream_free(s);
	sg_tokens_free(&ids);
	sg_tokens_free(&ins);
	sg_tokens_free(&rids);
	return st == SG_ERR_CANCELLED ? SG_OK : st; /* the engine tells a stop by its callback */
}

static const tts_model_vt qwen3_vt = {
	.kind = "qwen3-tts",
	.sample_rate = q_rate,
	.n_voices = q_nv,
	.voice = q_voice,
	.speak = q_speak,
	.reference = q_reference,
	.free = q_free,
};

sg_status tts_qwen3_load(const char *dir, const sg_tts_params *p, tts_model *out)
{
	memset(out, 0, sizeof *out);
	qtts *q = sg_calloc(1, sizeof *q);
	if (!q) return sg_error(SG_ERR_NOMEM, "tts: %s", dir);
	const char *be = p && p->backend ? p->backend : sg_flag_str("SARAGOSSA_BACKEND");
	int nth = p ? p->n_threads : 0;
	char sub[4200];
	snprintf(sub, sizeof sub, "%s/speech_tokenizer", dir);
	sg_status st = sg_qwen3_tts_load(dir, be && *be ? be : "auto", nth, &q->m);
	if (!st) st = tts_qwen3_tokenizer(dir, &q->tok);
	if (!st) {
		sg_backend *b = sg_qwen3_tts_backend(q->m);
		/* the codec runs where its ops are (SARAGOSSA_QWEN_TTS_CODEC_SAME=0: on the CPU) */
		if (!b->ops->conv1d || (strcmp(b->ops->name, "cpu") && !sg_flag_bool("SARAGOSSA_QWEN_TTS_CODEC_SAME"))) {
			sg_backend_params bp = sg_backend_default_params();
			bp.n_threads = nth;
			st = sg_backend_open("cpu", &bp, &q->codec_be);
			b = q->codec_be;
		}
		if (!st) st = sg_qwen3_tts_codec_load(sub, b, &q->codec);
	}
	/* a Base model's cloning encoders, where the codec runs */
	if (!st) {
		sg_backend *b = q->codec_be ? q->codec_be : sg_qwen3_tts_backend(q->m);
		st = sg_qwen3_tts_spk_load(sg_qwen3_tts_weights(q->m), b, &q->spk);
		if (st == SG_ERR_NOT_FOUND) st = SG_OK;
		if (!st && q->spk && sg_qwen3_tts_spk_dim(q->spk) != sg_qwen3_tts_hidden(q->m))
			st = sg_error(SG_ERR_FORMAT, "tts: %s: the speaker encoder's x-vector has %d values, the talker's width is %d", dir,
				      sg_qwen3_tts_spk_dim(q->spk), sg_qwen3_tts_hidden(q->m));
		if (!st && q->spk) {
			st = sg_qwen3_tts_tok_load(sub, b, &q->enc);
			if (st == SG_ERR_NOT_FOUND) st = SG_OK;
			if (!st && q->enc && sg_qwen3_tts_tok_groups(q->enc) != sg_qwen3_tts_groups(q->m))
				st = sg_error(SG_ERR_FORMAT, "tts: %s: the speech tokenizer's encoder keeps %d codes a frame, the talker makes %d", dir,
					      sg_qwen3_tts_tok_groups(q->enc), sg_qwen3_tts_groups(q->m));
		}
	}
	if (!st && sg_qwen3_tts_codec_groups(q->codec) != sg_qwen3_tts_groups(q->m))
		st = sg_error(SG_ERR_FORMAT, "tts: %s: the talker makes %d codes a frame, the speech tokenizer decodes %d", dir,
			      sg_qwen3_tts_groups(q->m), sg_qwen3_tts_codec_groups(q->codec));
	if (st) {
		q_free(q);
		return st;
	}
	int ns = sg_qwen3_tts_n_speakers(q->m);
	for (int i = 0; i < ns && i < 256; i++) q->voices[q->n_voices++] = sg_qwen3_tts_speaker(q->m, i);
	if (!q->n_voices) q->voices[q->n_voices++] = "default"; /* voice design: the instructions make the voice */
	out->vt = &qwen3_vt;
	out->m = q;
	return SG_OK;
}
