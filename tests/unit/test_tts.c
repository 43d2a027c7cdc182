/* Unit tests of src/engine/tts: sentence splitting, the input cap and the checks sg_speak makes
 * before any model runs, over a stub model kind that emits one sample per byte. */
#include <criterion/criterion.h>

#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "engine/tts.h"

static void split_expect(const char *text, size_t max_bytes, const char *const *want, int n_want)
{
	tts_span *sp;
	int n;
	cr_assert_eq(tts_split_sentences(text, strlen(text), max_bytes, &sp, &n), SG_OK, "%s", sg_last_error());
	cr_assert_eq(n, n_want, "'%s': %d sentences, want %d", text, n, n_want);
	for (int i = 0; i < n; i++) {
		cr_assert_eq(sp[i].len, strlen(want[i]), "'%s' sentence %d: '%.*s'", text, i, (int)sp[i].len, text + sp[i].start);
		cr_assert(!memcmp(text + sp[i].start, want[i], sp[i].len), "sentence %d: '%.*s'", i, (int)sp[i].len, text + sp[i].start);
	}
	sg_free(sp);
}

Test(tts, split_keeps_marks_and_quotes)
{
	const char *w1[] = {"Hello there.", "How are you?!", "\"Fine.\"", "Good"};
	split_expect("  Hello there. How are you?! \"Fine.\" Good  ", 0, w1, 4);
	const char *w2[] = {"Version 3.5 is out.", "e.g.this stays"};
	split_expect("Version 3.5 is out. e.g.this stays", 0, w2, 2);
	const char *w3[] = {"one line\nstill one", "new paragraph"};
	split_expect("one line\nstill one\n\n  new paragraph\n", 0, w3, 2);
	const char *w4[] = {"\xe4\xbd\xa0\xe5\xa5\xbd\xe3\x80\x82", "\xe5\x86\x8d\xe8\xa7\x81"};
	split_expect("\xe4\xbd\xa0\xe5\xa5\xbd\xe3\x80\x82\xe5\x86\x8d\xe8\xa7\x81", 0, w4, 2);
}

Test(tts, split_of_white_space_is_empty)
{
	split_expect(" \n\t \n\n ", 0, NULL, 0);
	split_expect("", 0, NULL, 0);
}

Test(tts, split_cuts_long_sentences_at_white_space)
{
	const char *w[] = {"aaaa bbb", "cc dddd", "eeeeeeeeee", "ff"};
	split_expect("aaaa bbb cc dddd eeeeeeeeeeff", 10, w, 4);
}

/* A model kind that speaks every byte as one sample of value 0.01 * its position. */
static int stub_rate(const void *m) { return 16000; }
static int stub_nv(const void *m) { return 2; }
static const char *stub_voice(const void *m, int i) { return i ? "bob" : "alice"; }
static int stub_sentences;
static sg_status stub_speak(void *m, const char *text, const sg_speak_params *p, tts_emit_fn emit, void *user)
{
	stub_sentences++;
	size_t n = strlen(text);
	float buf[256];
	for (size_t i = 0; i < n && i < 256; i++) buf[i] = 0.01f * (float)i;
	return emit(buf, n < 256 ? n : 256, user) ? SG_OK : SG_OK;
}
static void stub_free(void *m) {}
static const tts_model_vt stub_vt = {"stub", stub_rate, stub_nv, stub_voice, stub_speak, stub_free, NULL};

static int chunks;
static int count_chunks(const float *pcm, size_t n, void *user)
{
	chunks++;
	return user != NULL && chunks >= 2; /* a non-NULL user stops after the second chunk */
}

Test(tts, speak_streams_each_sentence_and_gathers_them)
{
	int dummy;
	tts_model t = {&stub_vt, &dummy};
	sg_speak_params p = sg_speak_default_params();
	p.on_audio = count_chunks;
	chunks = stub_sentences = 0;
	float *pcm;
	size_t n;
	cr_assert_eq(tts_speak(&t, "One. Two two. Three!", &p, &pcm, &n), SG_OK, "%s", sg_last_error());
	cr_assert_eq(stub_sentences, 3);
	cr_assert_eq(chunks, 3);
	cr_assert_eq(n, 4 + 8 + 6);
	cr_assert_float_eq(pcm[4], 0.0f, 1e-7); /* the second sentence starts again at 0 */
	sg_free(pcm);
	/* the callback stops it: SG_ERR_CANCELLED */
	chunks = 0;
	p.user = &dummy;
	cr_assert_eq(tts_speak(&t, "One. Two two. Three!", &p, NULL, NULL), SG_ERR_CANCELLED);
	cr_assert_eq(chunks, 2);
}

Test(tts, speak_rejects_bad_input_with_clear_errors)
{
	int dummy;
	tts_model t = {&stub_vt, &dummy};
	sg_speak_params p = sg_speak_default_params();
	cr_assert_eq(tts_speak(&t, "  \n ", &p, NULL, NULL), SG_ERR_INVALID_ARG);
	cr_assert(strstr(sg_last_error(), "empty"), "%s", sg_last_error());
	p.max_chars = 5;
	cr_assert_eq(tts_speak(&t, "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", &p, NULL, NULL), SG_OK, "5 characters (10 bytes) fit a cap of 5");
	cr_assert_eq(tts_speak(&t, "abcdef", &p, NULL, NULL), SG_ERR_INVALID_ARG);
	cr_assert(strstr(sg_last_error(), "cap of 5"), "%s", sg_last_error());
	p.max_chars = 0;
	p.voice = "carol";
	cr_assert_eq(tts_speak(&t, "Hi.", &p, NULL, NULL), SG_ERR_INVALID_ARG);
	cr_assert(strstr(sg_last_error(), "alice, bob"), "%s", sg_last_error());
	p.voice = "bob";
	cr_assert_eq(tts_speak(&t, "Hi.", &p, NULL, NULL), SG_OK);
	p.speed = 5;
	cr_assert_eq(tts_speak(&t, "Hi.", &p, NULL, NULL), SG_ERR_INVALID_ARG);
	cr_assert(strstr(sg_last_error(), "0.25 .. 4"), "%s", sg_last_error());
}

Test(tts, load_names_what_is_missing)
{
	sg_tts *t;
	cr_assert_eq(sg_tts_load("/nonexistent/voice.onnx", NULL, &t), SG_ERR_NOT_FOUND);
	cr_assert_null(t);
	cr_assert_eq(sg_tts_load("no-such-voice-name", NULL, &t), SG_ERR_NOT_FOUND);
	cr_assert(strstr(sg_last_error(), "fetch_models"), "%s", sg_last_error());
	cr_assert_eq(sg_tts_load("", NULL, &t), SG_ERR_INVALID_ARG);
}
