/* A transcript as text, json, verbose_json (OpenAI's shape), srt or vtt: the one writer the CLI,
 * the server and the library share (sg_transcript_format in saragossa.h). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "saragossa.h"

/* openai-whisper's language names, by code (the verbose_json "language" field spells them) */
static const char *const lang_names[][2] = {
	{"en", "english"}, {"zh", "chinese"}, {"de", "german"}, {"es", "spanish"}, {"ru", "russian"},
	{"ko", "korean"}, {"fr", "french"}, {"ja", "japanese"}, {"pt", "portuguese"}, {"tr", "turkish"},
	{"pl", "polish"}, {"ca", "catalan"}, {"nl", "dutch"}, {"ar", "arabic"}, {"sv", "swedish"},
	{"it", "italian"}, {"id", "indonesian"}, {"hi", "hindi"}, {"fi", "finnish"}, {"vi", "vietnamese"},
	{"he", "hebrew"}, {"iw", "hebrew"}, {"uk", "ukrainian"}, {"el", "greek"}, {"ms", "malay"},
	{"cs", "czech"}, {"ro", "romanian"}, {"da", "danish"}, {"hu", "hungarian"}, {"ta", "tamil"},
	{"no", "norwegian"}, {"th", "thai"}, {"ur", "urdu"}, {"hr", "croatian"}, {"bg", "bulgarian"},
	{"lt", "lithuanian"}, {"la", "latin"}, {"mi", "maori"}, {"ml", "malayalam"}, {"cy", "welsh"},
	{"sk", "slovak"}, {"te", "telugu"}, {"fa", "persian"}, {"lv", "latvian"}, {"bn", "bengali"},
	{"sr", "serbian"}, {"az", "azerbaijani"}, {"sl", "slovenian"}, {"kn", "kannada"}, {"et", "estonian"},
	{"mk", "macedonian"}, {"br", "breton"}, {"eu", "basque"}, {"is", "icelandic"}, {"hy", "armenian"},
	{"ne", "nepali"}, {"mn", "mongolian"}, {"bs", "bosnian"}, {"kk", "kazakh"}, {"sq", "albanian"},
	{"sw", "swahili"}, {"gl", "galician"}, {"mr", "marathi"}, {"pa", "punjabi"}, {"si", "sinhala"},
	{"km", "khmer"}, {"sn", "shona"}, {"yo", "yoruba"}, {"so", "somali"}, {"af", "afrikaans"},
	{"oc", "occitan"}, {"ka", "georgian"}, {"be", "belarusian"}, {"tg", "tajik"}, {"sd", "sindhi"},
	{"gu", "gujarati"}, {"am", "amharic"}, {"yi", "yiddish"}, {"lo", "lao"}, {"uz", "uzbek"},
	{"fo", "faroese"}, {"ht", "haitian creole"}, {"ps", "pashto"}, {"tk", "turkmen"}, {"nn", "nynorsk"},
	{"mt", "maltese"}, {"sa", "sanskrit"}, {"lb", "luxembourgish"}, {"my", "myanmar"}, {"bo", "tibetan"},
	{"tl", "tagalog"}, {"mg", "malagasy"}, {"as", "assamese"}, {"tt", "tatar"}, {"haw", "hawaiian"},
	{"ln", "lingala"}, {"ha", "hausa"}, {"ba", "bashkir"}, {"jw", "javanese"}, {"su", "sundanese"},
	{"yue", "cantonese"},
};

static const char *lang_name(const char *code)
{
	for (size_t i = 0; i < sizeof(lang_names) / sizeof(lang_names[0]); i++)
		if (!strcmp(lang_names[i][0], code)) return lang_names[i][1];
	return code;
}

typedef struct sbuf {
	char *p;
	size_t n, cap;
	int oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n)
{
	if (b->oom) return;
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 1024;
		while (cap < b->n + n + 1) cap *= 2;
		char *p = sg_realloc(b->p, cap);
		if (!p) {
			b->oom = 1;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = 0;
}

static void puts_(sbuf *b, const char *s)
{
	put(b, s, strlen(s));
}

/* HH:MM:SS,mmm (srt: comma; vtt: period) */
static void put_time(sbuf *b, double t, char mark)
{
	if (!(t > 0)) t = 0;
	long long ms = llround(t * 1000);
	char s[48];
	snprintf(s, sizeof(s), "%02lld:%02lld:%02lld%c%03lld", ms / 3600000, ms / 60000 % 60, ms / 1000 % 60, mark,
		 ms % 1000);
	puts_(b, s);
}

/* a segment's text without surrounding whitespace; "-->" (which would end a cue's timing line
 * in a reader) is written "->" as openai-whisper's writers do */
static void put_cue_text(sbuf *b, const char *text)
{
	const char *s = text, *e = text + strlen(text);
	while (s < e && (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r')) s++;
	while (e > s && (e[-1] == ' ' || e[-1] == '\n' || e[-1] == '\t' || e[-1] == '\r')) e--;
	for (const char *q = s; q < e; q++) {
		if (q + 3 <= e && !memcmp(q, "-->", 3)) {
			puts_(b, "->");
			q += 2;
		} else if (*q == '\n' || *q == '\r') {
			put(b, " ", 1);
		} else {
			put(b, q, 1);
		}
	}
}

static double r3(double x)
{
	return round(x * 1000) / 1000;
}

static json_t *verbose_json(const sg_transcript *tr, const char *task)
{
	json_t *o = json_object(), *segs = json_array(), *words = json_array();
	if (!o || !segs || !words) goto oom;
	int has_words = 0;
	for (int i = 0; i < tr->n_segments; i++) {
		const sg_stt_segment *g = &tr->segments[i];
		json_t *toks = json_array(), *s = json_object();
		if (!toks || !s) {
			json_decref(toks);
			json_decref(s);
			goto oom;
		}
		for (int k = 0; k < g->n_tokens; k++) json_array_append_new(toks, json_integer(g->tokens[k]));
		json_object_set_new(s, "id", json_integer(g->id));
		json_object_set_new(s, "seek", json_integer(g->seek));
		json_object_set_new(s, "start", json_real(r3(g->start)));
		json_object_set_new(s, "end", json_real(r3(g->end)));
		json_object_set_new(s, "text", json_string(g->text ? g->text : ""));
		json_object_set_new(s, "tokens", toks);
		json_object_set_new(s, "temperature", json_real(g->temperature));
		json_object_set_new(s, "avg_logprob", json_real(g->avg_logprob));
		json_object_set_new(s, "compression_ratio", json_real(g->compression_ratio));
		json_object_set_new(s, "no_speech_prob", json_real(g->no_speech_prob));
		json_array_append_new(segs, s);
		for (int k = 0; k < g->n_words; k++) {
			const sg_stt_word *w = &g->words[k];
			json_t *wo = json_object();
			if (!wo) goto oom;
			const char *t = w->word ? w->word : "";
			while (*t == ' ') t++;
			json_object_set_new(wo, "word", json_string(t));
			json_object_set_new(wo, "start", json_real(r3(w->start)));
			json_object_set_new(wo, "end", json_real(r3(w->end)));
			json_object_set_new(wo, "probability", json_real(round(w->probability * 1e6) / 1e6));
			json_array_append_new(words, wo);
			has_words = 1;
		}
	}
	json_object_set_new(o, "task", json_string(task ? task : "transcribe"));
	json_object_set_new(o, "language", json_string(lang_name(tr->language)));
	json_object_set_new(o, "language_probability", json_real(round(tr->language_prob * 1e5) / 1e5));
	json_object_set_new(o, "duration", json_real(r3(tr->duration)));
	json_object_set_new(o, "text", json_string(tr->text ? tr->text : ""));
	json_object_set_new(o, "segments", segs);
	if (has_words) json_object_set_new(o, "words", words);
	else json_decref(words);
	return o;
oom:
	json_decref(o);
	json_decref(segs);
	json_decref(words);
	return NULL;
}

sg_status sg_transcript_format(const sg_transcript *tr, const char *format, const char *task, char **out, size_t *len)
{
	if (!out) return SG_FAIL(SG_ERR_INVALID_ARG, "out is NULL");
	*out = NULL;
	if (len) *len = 0;
	if (!tr || !format) return SG_FAIL(SG_ERR_INVALID_ARG, "transcript or format is NULL");
	sbuf b = {0};
	if (!strcmp(format, "text")) {
		puts_(&b, tr->text ? tr->text : "");
		puts_(&b, "\n");
	} else if (!strcmp(format, "json") || !strcmp(format, "verbose_json")) {
		json_t *o;
		if (!strcmp(format, "json")) o = json_pack("{s:s}", "text", tr->text ? tr->text : "");
		else o = verbose_json(tr, task);
		char *s = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(8)) : NULL;
		json_decref(o);
		if (!s) return SG_FAIL(SG_ERR_NOMEM, "out of memory writing JSON");
		puts_(&b, s);
		free(s);
		puts_(&b, "\n");
	} else if (!strcmp(format, "srt") || !strcmp(format, "vtt")) {
		int vtt = format[0] == 'v';
		if (vtt) puts_(&b, "WEBVTT\n\n");
		for (int i = 0; i < tr->n_segments; i++) {
			const sg_stt_segment *g = &tr->segments[i];
			if (!vtt) {
				char num[24];
				snprintf(num, sizeof(num), "%d\n", i + 1);
				puts_(&b, num);
			}
			put_time(&b, g->start, vtt ? '.' : ',');
			puts_(&b, " --> ");
			put_time(&b, g->end, vtt ? '.' : ',');
			puts_(&b, "\n");
			put_cue_text(&b, g->text ? g->text : "");
			puts_(&b, "\n\n");
		}
	} else {
		return sg_error(SG_ERR_INVALID_ARG, "transcript format '%.32s': expected text, json, verbose_json, srt or vtt",
				format);
	}
	if (b.oom || !b.p) {
		sg_free(b.p);
		if (b.oom) return SG_FAIL(SG_ERR_NOMEM, "out of memory");
		b.p = sg_strdup("");
		if (!b.p) return SG_FAIL(SG_ERR_NOMEM, "out of memory");
	}
	*out = b.p;
	if (len) *len = b.n;
	return SG_OK;
}
