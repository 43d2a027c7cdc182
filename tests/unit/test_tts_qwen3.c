/*
 * Qwen3-TTS through the public text-to-speech API on the reference fixture
 * (tests/fixtures/qwen3_tts/tiny, tools/make_qwen_tts_fixtures.py): the folder's tokenizer gives
 * the ids of transformers' Qwen2 tokenizer built from its vocab.json / merges.txt; sg_speak with a
 * preset speaker, greedy, streams a waveform equal (1e-4 of its peak) to the package's generate()
 * and decoder run on the same chunks (the package's chunked-decode rule), the first after two
 * frames.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "engine/tts_qwen3.h"
#include "saragossa.h"
#include "text/tokenizer/tokenizer.h"

#include "tts_ref.h"

#define FIX "tests/fixtures/qwen3_tts/tiny"

static json_t *ref(void) { return tts_ref_load(FIX "/ref.json"); }

Test(tts_qwen3, tokenizer_matches_transformers)
{
	json_t *r = ref();
	sg_tokenizer *t = NULL;
	cr_assert_eq(tts_qwen3_tokenizer(FIX, &t), SG_OK, "%s", sg_last_error());
	json_t *cases = json_object_get(r, "tokenize");
	cr_assert_gt(json_array_size(cases), 0);
	for (size_t i = 0; i < json_array_size(cases); i++) {
		json_t *c = json_array_get(cases, i);
		const char *text = json_string_value(json_object_get(c, "text"));
		json_t *ids = json_object_get(c, "ids");
		sg_tokens got = {0};
		cr_assert_eq(sg_tokenizer_encode(t, text, strlen(text), 1, &got), SG_OK, "%s", sg_last_error());
		cr_expect_eq(got.n, json_array_size(ids), "'%s': %zu ids, transformers %zu", text, got.n, json_array_size(ids));
		for (size_t k = 0; k < got.n && k < json_array_size(ids); k++)
			cr_expect_eq(got.ids[k], json_integer_value(json_array_get(ids, k)), "'%s' id %zu", text, k);
		sg_tokens_free(&got);
	}
	sg_tokenizer_free(t);
	json_decref(r);
}

typedef struct {
	float *pcm;
	size_t n, cap, calls, first;
} sink;

static int on_audio(const float *pcm, size_t n, void *user)
{
	sink *s = user;
	if (s->n + n > s->cap) {
		s->cap = (s->n + n) * 2;
		s->pcm = realloc(s->pcm, sizeof(float) * s->cap);
	}
	memcpy(s->pcm + s->n, pcm, sizeof(float) * n);
	if (!s->calls) s->first = n;
	s->n += n;
	s->calls++;
	return 0;
}

/* The whole sentence through sg_speak on backend be (the codec on it too where it has the conv
 * ops); 0 when be cannot be opened here (no GPU). */
static int speak_case(const char *be)
{
	json_t *r = ref();
	json_t *sp = json_object_get(r, "speak");
	sg_tts *tts = NULL;
	sg_tts_params tp = sg_tts_default_params();
	tp.backend = be;
	tp.n_threads = 1;
	sg_status ls = sg_tts_load(FIX, &tp, &tts);
	if (ls && strcmp(be, "cpu") && (strstr(sg_last_error(), "no usable GPU") || strstr(sg_last_error(), "no CUDA backend"))) {
		json_decref(r);
		return 0;
	}
	cr_assert_eq(ls, SG_OK, "%s", sg_last_error());
	cr_expect_str_eq(sg_tts_kind(tts), "qwen3-tts");
	cr_expect_eq(sg_tts_sample_rate(tts), 24000);
	cr_assert_eq(sg_tts_n_voices(tts), 2);
	cr_expect_str_eq(sg_tts_voice(tts, 0), "alice");

	sg_speak_params p = sg_speak_default_params();
	sink s = {0};
	p.voice = "alice";
	p.temperature = 0;
	p.on_audio = on_audio;
	p.user = &s;
	float *pcm = NULL;
	size_t n = 0;
	const char *text = json_string_value(json_object_get(sp, "text"));
	cr_assert_eq(sg_speak(tts, text, &p, &pcm, &n), SG_OK, "%s", sg_last_error());
	/* the package's decoder on the same chunks (2 frames, then 12, each with up to 25 frames of
	 * left context); its one-shot decode ("wav") differs from it by the context cut, < 2% here */
	json_t *want = json_object_get(sp, "wav_chunks"), *one = json_object_get(sp, "wav");
	size_t nw = json_array_size(want);
	cr_assert_eq(n, nw, "%zu samples, the package %zu", n, nw);
	cr_expect_eq(s.n, n);
	cr_expect_eq(s.first, 2 * 24, "the first chunk is two frames");
	cr_expect_gt(s.calls, 3);
	double peak = 0, err = 0, err1 = 0;
	size_t at = 0;
	for (size_t i = 0; i < nw; i++) {
		double w = json_number_value(json_array_get(want, i));
		if (fabs(pcm[i] - json_number_value(json_array_get(one, i))) > err1) err1 = fabs(pcm[i] - json_number_value(json_array_get(one, i)));
		if (fabs(w) > peak) peak = fabs(w);
		if (fabs(pcm[i] - w) > err) err = fabs(pcm[i] - w), at = i;
		cr_assert_eq(pcm[i], s.pcm[i]);
	}
	cr_expect(err <= 1e-4 * peak + 1e-7, "max error %g at %zu (peak %g)", err, at, peak);
	cr_expect(err1 > 0 && err1 < 0.02 * peak, "one-shot vs streamed: %g (peak %g)", err1, peak);

	/* an unknown voice lists the speakers; empty text is refused */
	p.voice = "carol";
	cr_expect_eq(sg_speak(tts, text, &p, NULL, NULL), SG_ERR_INVALID_ARG);
	cr_expect(strstr(sg_last_error(), "alice, bob"), "%s", sg_last_error());
	p.voice = NULL;
	cr_expect_eq(sg_speak(tts, "   ", &p, NULL, NULL), SG_ERR_INVALID_ARG);
	p.language = "xx";
	cr_expect_eq(sg_speak(tts, text, &p, NULL, NULL), SG_ERR_INVALID_ARG);
	sg_free(pcm);
	free(s.pcm);
	sg_tts_free(tts);
	json_decref(r);
	return 1;
}

Test(tts_qwen3, speak_streams_the_packages_waveform) { speak_case("cpu"); }

/* GPU group: the talker, the code predictor and the codec (conv ops on CUDA) on the GPU */
Test(tts_qwen3_cuda, speak_on_cuda_streams_the_packages_waveform, .timeout = 300)
{
	if (!speak_case("cuda")) cr_skip_test("no GPU here");
}
