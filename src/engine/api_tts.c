/* The public text-to-speech calls (include/saragossa.h) over engine/tts.h. */
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "engine/tts.h"
#include "saragossa.h"

struct sg_tts {
	tts_model t;
};

sg_tts_params sg_tts_default_params(void)
{
	sg_tts_params p = {.backend = NULL, .n_threads = 0};
	return p;
}

sg_speak_params sg_speak_default_params(void)
{
	sg_speak_params p = {
		.voice = NULL,
		.language = NULL,
		.instructions = NULL,
		.speed = 1.0f,
		.noise_scale = -1.0f,
		.noise_w = -1.0f,
		.temperature = 0.9f,
		.top_k = 50,
		.top_p = 1.0f,
		.seed = 0,
		.max_chars = 0,
		.on_audio = NULL,
		.user = NULL,
	};
	return p;
}

sg_status sg_tts_load(const char *path, const sg_tts_params *params, sg_tts **out)
{
	if (!out) return SG_FAIL(SG_ERR_INVALID_ARG, "out is NULL");
	*out = NULL;
	if (!path || !path[0]) return SG_FAIL(SG_ERR_INVALID_ARG, "path is %s", path ? "empty" : "NULL");
	sg_tts_params p = params ? *params : sg_tts_default_params();
	if (p.n_threads < 0) return SG_FAIL(SG_ERR_INVALID_ARG, "n_threads = %d must be >= 0", p.n_threads);
	sg_tts *t = sg_calloc(1, sizeof *t);
	if (!t) return SG_FAIL(SG_ERR_NOMEM, "tts handle");
	sg_status st = tts_model_load(path, &p, &t->t);
	if (st) {
		sg_free(t);
		return st;
	}
	*out = t;
	return SG_OK;
}

void sg_tts_free(sg_tts *tts)
{
	if (!tts) return;
	tts_model_free(&tts->t);
	sg_free(tts);
}

const char *sg_tts_kind(const sg_tts *tts) { return tts ? tts->t.vt->kind : NULL; }
int sg_tts_sample_rate(const sg_tts *tts) { return tts ? tts->t.vt->sample_rate(tts->t.m) : 0; }
int sg_tts_n_voices(const sg_tts *tts) { return tts ? tts->t.vt->n_voices(tts->t.m) : 0; }

const char *sg_tts_voice(const sg_tts *tts, int i)
{
	if (!tts || i < 0 || i >= tts->t.vt->n_voices(tts->t.m)) return NULL;
	return tts->t.vt->voice(tts->t.m, i);
}

sg_status sg_speak(sg_tts *tts, const char *text, const sg_speak_params *params, float **pcm_out, size_t *n_out)
{
	if (!tts) return SG_FAIL(SG_ERR_INVALID_ARG, "tts is NULL");
	return tts_speak(&tts->t, text, params, pcm_out, n_out);
}
