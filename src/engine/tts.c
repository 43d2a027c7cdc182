/* The engine's text-to-speech layer (tts.h): model kinds by their files, sentence splitting, the
 * input cap and the streaming of each sentence's audio. */
#include "engine/tts.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"

/* ---- sentences ---- */

static int is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

/* Bytes of a CJK sentence end at s (。！？, 3 bytes each in UTF-8), else 0. */
static size_t cjk_end(const char *s, size_t left)
{
	static const char *ends[] = {"\xe3\x80\x82", "\xef\xbc\x81", "\xef\xbc\x9f"};
	for (int i = 0; i < 3; i++)
		if (left >= 3 && !memcmp(s, ends[i], 3)) return 3;
	return 0;
}

typedef struct spans {
	tts_span *v;
	int n, cap;
} spans;

/* Adds text[a..b) trimmed, cut at white space into pieces of at most max_bytes. */
static sg_status push_span(spans *sp, const char *text, size_t a, size_t b, size_t max_bytes)
{
	while (a < b && is_space((unsigned char)text[a])) a++;
	while (b > a && is_space((unsigned char)text[b - 1])) b--;
	while (a < b) {
		size_t end = b;
		if (max_bytes && b - a > max_bytes) {
			end = a + max_bytes;
			size_t cut = end;
			while (cut > a && !is_space((unsigned char)text[cut])) cut--;
			if (cut > a) end = cut;
			else /* no white space: cut at a UTF-8 character boundary */
				while (end > a + 1 && ((unsigned char)text[end] & 0xC0) == 0x80) end--;
		}
		if (sp->n == sp->cap) {
			int cap = sp->cap ? 2 * sp->cap : 16;
			tts_span *v = sg_realloc(sp->v, sizeof(*v) * (size_t)cap);
			if (!v) return SG_FAIL(SG_ERR_NOMEM, "%d sentences", cap);
			sp->v = v;
			sp->cap = cap;
		}
		sp->v[sp->n++] = (tts_span){a, end - a};
		a = end;
		while (a < b && is_space((unsigned char)text[a])) a++;
	}
	return SG_OK;
}

sg_status tts_split_sentences(const char *text, size_t len, size_t max_bytes, tts_span **out, int *n)
{
	if (!out || !n || (!text && len)) return SG_FAIL(SG_ERR_INVALID_ARG, "a NULL argument");
	*out = NULL;
	*n = 0;
	spans sp = {0};
	size_t start = 0;
	sg_status st = SG_OK;
	for (size_t i = 0; i < len && !st;) {
		unsigned char c = (unsigned char)text[i];
		size_t end = 0; /* the sentence ends before this byte */
		if (c == '.' || c == '!' || c == '?' || c == ';' || c == ':') {
			size_t j = i + 1;
			/* runs of marks ("?!", "...") and closing quotes or brackets stay with the sentence */
			while (j < len && strchr(".!?;:\"')]", text[j])) j++;
			if (j + 3 <= len && !memcmp(text + j, "\xe2\x80", 2) &&
			    ((unsigned char)text[j + 2] == 0x9d || (unsigned char)text[j + 2] == 0x99))
				j += 3; /* ” or ’ */
			if (j == len || is_space((unsigned char)text[j])) end = j;
			i = j;
		} else if (c == '\n') {
			size_t j = i + 1;
			while (j < len && (text[j] == ' ' || text[j] == '\t' || text[j] == '\r')) j++;
			if (j < len && text[j] == '\n') end = j; /* a blank line */
			i = j;
		} else {
			size_t k = cjk_end(text + i, len - i);
			if (k) end = i + k;
			i += k ? k : 1;
		}
		if (end) {
			st = push_span(&sp, text, start, end, max_bytes);
			start = end;
		}
	}
	if (!st && start < len) st = push_span(&sp, text, start, len, max_bytes);
	if (st) {
		sg_free(sp.v);
		return st;
	}
	*out = sp.v;
	*n = sp.n;
	return SG_OK;
}

/* ---- speaking ---- */

typedef struct gather {
	float *pcm;
	size_t n, cap;
	int keep; /* gather the waveform */
	sg_audio_fn on_audio;
	void *user;
	int stopped;
	sg_status err;
} gather;

static int emit(const float *pcm, size_t n, void *user)
{
	gather *g = user;
	if (!n) return 0;
	if (g->keep) {
		if (g->n + n > g->cap) {
			size_t cap = g->cap ? g->cap : 1 << 16;
			while (cap < g->n + n) cap *= 2;
			float *v = sg_realloc(g->pcm, cap * sizeof(float));
			if (!v) {
				g->err = SG_FAIL(SG_ERR_NOMEM, "%zu samples of audio", cap);
				return 1;
			}
			g->pcm = v;
			g->cap = cap;
		}
		memcpy(g->pcm + g->n, pcm, n * sizeof(float));
	}
	g->n += n;
	if (g->on_audio && g->on_audio(pcm, n, g->user)) {
		g->stopped = 1;
		return 1;
	}
	return 0;
}

/* "a, b, c" of the model's voices into buf. */
static void list_voices(const tts_model *t, char *buf, size_t n)
{
	size_t used = 0;
	buf[0] = 0;
	int nv = t->vt->n_voices(t->m);
	for (int i = 0; i < nv && used + 1 < n; i++) {
		int k = snprintf(buf + used, n - used, "%s%s", i ? ", " : "", t->vt->voice(t->m, i));
		if (k < 0) break;
		used += (size_t)k;
	}
	if (used >= n) strcpy(buf + n - 4, "...");
}

sg_status tts_speak(tts_model *t, const char *text, const sg_speak_params *params, float **pcm_out, size_t *n_out)
{
	if (pcm_out) *pcm_out = NULL;
	if (n_out) *n_out = 0;
	if (!t || !t->vt) return SG_FAIL(SG_ERR_INVALID_ARG, "no model");
	if (!text) return SG_FAIL(SG_ERR_INVALID_ARG, "text is NULL");
	sg_speak_params p = params ? *params : sg_speak_default_params();
	size_t cap = p.max_chars ? p.max_chars : TTS_DEFAULT_MAX_CHARS;
	size_t len = strlen(text);
	size_t chars = 0;
	for (size_t i = 0; i < len; i++) chars += ((unsigned char)text[i] & 0xC0) != 0x80;
	if (chars > cap) return sg_error(SG_ERR_INVALID_ARG, "speak: the text has %zu characters, over the cap of %zu", chars, cap);
	if (!(p.speed >= 0.25f && p.speed <= 4.0f)) return sg_error(SG_ERR_INVALID_ARG, "speak: speed %g is outside 0.25 .. 4", p.speed);
	if (p.noise_scale != p.noise_scale || p.noise_w != p.noise_w || p.noise_scale > 10 || p.noise_w > 10)
		return sg_error(SG_ERR_INVALID_ARG, "speak: noise_scale %g / noise_w %g out of range (< 0: the voice's, else 0 .. 10)", p.noise_scale, p.noise_w);
	if (p.voice && p.voice[0]) {
		int nv = t->vt->n_voices(t->m), found = 0;
		for (int i = 0; i < nv && !found; i++) found = !strcmp(p.voice, t->vt->voice(t->m, i));
		if (!found) {
			char names[1024];
			list_voices(t, names, sizeof names);
			return sg_error(SG_ERR_INVALID_ARG, "speak: unknown voice '%s' (this model has: %s)", p.voice, names);
		}
	}
	if (p.ref_audio || p.ref_audio_size) {
		if (!p.ref_audio || !p.ref_audio_size)
			return sg_error(SG_ERR_INVALID_ARG, "speak: ref_audio (%s) and ref_audio_size (%zu) go together", p.ref_audio ? "given" : "NULL",
					p.ref_audio_size);
		if (!t->vt->reference)
			return sg_error(SG_ERR_UNSUPPORTED, "speak: %s voices cannot clone a voice from a reference clip (a Qwen3-TTS Base model can)",
					t->vt->kind);
	}
	tts_span *sp;
	int n;
	sg_status st = tts_split_sentences(text, len, TTS_MAX_SENTENCE_BYTES, &sp, &n);
	if (st) return st;
	if (n && t->vt->reference) st = t->vt->reference(t->m, &p);
	if (st) {
		sg_free(sp);
		return st;
	}
	if (!n) {
		sg_free(sp);
		return sg_error(SG_ERR_INVALID_ARG, "speak: the text is empty");
	}
	gather g = {.keep = pcm_out != NULL, .on_audio = p.on_audio, .user = p.user};
	char *sentence = sg_malloc(len + 1);
	if (!sentence) st = SG_FAIL(SG_ERR_NOMEM, "%zu bytes", len);
	for (int i = 0; i < n && !st; i++) {
		memcpy(sentence, text + sp[i].start, sp[i].len);
		sentence[sp[i].len] = 0;
		st = t->vt->speak(t->m, sentence, &p, emit, &g);
		if (g.err) st = g.err;
		else if (g.stopped) st = sg_error(SG_ERR_CANCELLED, "speak: stopped by the audio callback after %zu samples", g.n);
	}
	sg_free(sentence);
	sg_free(sp);
	if (!st && !g.n) st = sg_error(SG_ERR_INVALID_ARG, "speak: nothing in the text can be spoken (no phonemes for any of it)");
	if (st) {
		sg_free(g.pcm);
		return st;
	}
	if (pcm_out) {
		if (!g.pcm) g.pcm = sg_malloc(sizeof(float)); /* a non-NULL result for no samples */
		*pcm_out = g.pcm;
	}
	if (n_out) *n_out = g.n;
	return SG_OK;
}
