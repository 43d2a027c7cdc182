/* Piper voices (tts_piper.h): the .onnx.json's settings and phoneme ids, espeak-ng phonemes and
 * the VITS forward, one espeak-ng sentence at a time. */
#include "engine/tts_piper.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "audio/phonemize.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/flags.h"
#include "base/log.h"
#include "models/vits.h"

typedef struct piper {
	sg_vits *v;
	sg_phoneme_map map;
	char espeak[64]; /* espeak-ng voice of the phonemes */
	char name[128];  /* the voice's name (the dataset's, else the file's) */
	const char *names[1];
	int rate;
	float noise_scale, length_scale, noise_w;
} piper;

static int p_rate(const void *m) { return ((const piper *)m)->rate; }
static int p_nv(const void *m) { return 1; }
static const char *p_voice(const void *m, int i) { return i == 0 ? ((const piper *)m)->name : NULL; }

static void p_free(void *m)
{
	piper *p = m;
	if (!p) return;
	sg_vits_free(p->v);
	sg_phoneme_map_free(&p->map);
	sg_free(p);
}

typedef struct emit_ctx {
	tts_emit_fn emit;
	void *user;
} emit_ctx;

static int on_audio(const float *pcm, size_t n, void *user)
{
	emit_ctx *e = user;
	return e->emit(pcm, n, e->user);
}

static sg_status p_speak(void *m, const char *text, const sg_speak_params *sp, tts_emit_fn emit, void *user)
{
	piper *p = m;
	sg_phonemes ph;
	const char *voice = sp->language && sp->language[0] ? sp->language : p->espeak;
	sg_status st = sg_phonemize(voice, text, &ph);
	if (st) return st;
	emit_ctx e = {emit, user};
	sg_vits_params vp = {
		.noise_scale = sp->noise_scale >= 0 ? sp->noise_scale : p->noise_scale,
		.length_scale = p->length_scale / (sp->speed > 0 ? sp->speed : 1.0f),
		.noise_w = sp->noise_w >= 0 ? sp->noise_w : p->noise_w,
		.seed = sp->seed,
		.on_audio = on_audio,
		.user = &e,
		.frames_per_chunk = (int)sg_flag_int("SARAGOSSA_PIPER_CHUNK"),
	};
	for (int s = 0; s < ph.n_sentences && !st; s++) {
		int64_t *ids;
		size_t n;
		int missing;
		st = sg_phonemes_to_ids(&p->map, ph.cp + ph.sentence[s], ph.sentence[s + 1] - ph.sentence[s], &ids, &n, &missing);
		if (st) break;
		if (missing) SG_DEBUG("piper: %d phonemes of '%s' are not in the voice's map (skipped)", missing, text);
		vp.seed = sp->seed + (uint64_t)s;
		st = sg_vits_synth(p->v, ids, n, &vp, NULL, NULL);
		sg_free(ids);
	}
	sg_phonemes_free(&ph);
	return st;
}

static const tts_model_vt piper_vt = {"piper", p_rate, p_nv, p_voice, p_speak, p_free, NULL};

static double num(json_t *o, const char *k, double dflt)
{
	json_t *v = json_object_get(o, k);
	return json_is_number(v) ? json_number_value(v) : dflt;
}

/* The .onnx.json beside onnx_path: sample rate, espeak voice, inference defaults, phoneme ids. */
static sg_status read_config(piper *p, const char *onnx_path)
{
	char path[4200];
	snprintf(path, sizeof path, "%s.json", onnx_path);
	json_error_t err;
	json_t *root = json_load_file(path, 0, &err);
	if (!root) return sg_error(SG_ERR_FORMAT, "piper: %s: %s (line %d)", path, err.text, err.line);
	sg_status st = SG_OK;
	json_t *audio = json_object_get(root, "audio"), *espeak = json_object_get(root, "espeak"),
	       *inf = json_object_get(root, "inference"), *map = json_object_get(root, "phoneme_id_map");
	const char *ptype = json_string_value(json_object_get(root, "phoneme_type"));
	const char *voice = json_string_value(json_object_get(espeak, "voice"));
	p->rate = (int)num(audio, "sample_rate", 0);
	if (!json_is_object(map) || !json_object_size(map)) st = sg_error(SG_ERR_FORMAT, "piper: %s has no phoneme_id_map", path);
	else if (ptype && strcmp(ptype, "espeak")) st = sg_error(SG_ERR_UNSUPPORTED, "piper: %s: phoneme_type '%s' (only espeak)", path, ptype);
	else if (!voice || !voice[0] || strlen(voice) >= sizeof p->espeak) st = sg_error(SG_ERR_FORMAT, "piper: %s has no espeak.voice", path);
	else if (p->rate < 4000 || p->rate > 192000) st = sg_error(SG_ERR_FORMAT, "piper: %s: audio.sample_rate %d is missing or out of range", path, p->rate);
	else if (num(root, "num_speakers", 1) > 1) st = sg_error(SG_ERR_UNSUPPORTED, "piper: %s: multi-speaker voices are not supported yet", path);
	if (!st) {
		strcpy(p->espeak, voice);
		p->noise_scale = (float)num(inf, "noise_scale", 0.667);
		p->length_scale = (float)num(inf, "length_scale", 1.0);
		p->noise_w = (float)num(inf, "noise_w", 0.8);
		if (!(p->length_scale > 0.01f && p->length_scale < 100) || !(p->noise_scale >= 0) || !(p->noise_w >= 0))
			st = sg_error(SG_ERR_FORMAT, "piper: %s: inference scales out of range", path);
	}
	const char *key;
	json_t *val;
	json_object_foreach(map, key, val)
	{
		if (st) break;
		int64_t ids[16];
		size_t n = json_array_size(val);
		if (!json_is_array(val) || !n || n > 16) {
			st = sg_error(SG_ERR_FORMAT, "piper: %s: phoneme_id_map['%s'] is not a list of ids", path, key);
			break;
		}
		for (size_t i = 0; i < n && !st; i++) {
			json_t *x = json_array_get(val, i);
			if (!json_is_integer(x) || json_integer_value(x) < 0) st = sg_error(SG_ERR_FORMAT, "piper: %s: phoneme_id_map['%s'] holds a non-id", path, key);
			else ids[i] = json_integer_value(x);
		}
		if (!st) st = sg_phoneme_map_add(&p->map, key, ids, n);
	}
	if (!st) st = sg_phoneme_map_finish(&p->map);
	size_t nb, ne, np;
	if (!st && (!sg_phoneme_map_get(&p->map, '^', &nb) || !sg_phoneme_map_get(&p->map, '$', &ne) || !sg_phoneme_map_get(&p->map, '_', &np)))
		st = sg_error(SG_ERR_FORMAT, "piper: %s: phoneme_id_map lacks '^', '$' or '_'", path);
	if (!st) {
		const char *ds = json_string_value(json_object_get(root, "dataset"));
		if (ds && ds[0] && strlen(ds) < sizeof p->name) {
			strcpy(p->name, ds);
		} else {
			const char *base = strrchr(onnx_path, '/');
			base = base ? base + 1 : onnx_path;
			snprintf(p->name, sizeof p->name, "%.*s", (int)(strlen(base) > 5 ? strlen(base) - 5 : strlen(base)), base);
		}
	}
	json_decref(root);
	return st;
}

sg_status tts_piper_load(const char *onnx_path, const sg_tts_params *params, tts_model *out)
{
	piper *p = sg_calloc(1, sizeof *p);
	if (!p) return SG_FAIL(SG_ERR_NOMEM, "piper voice");
	sg_status st = read_config(p, onnx_path);
	if (!st) st = sg_vits_load(onnx_path, params ? params->backend : NULL, params ? params->n_threads : 0, &p->v);
	if (!st) {
		/* every id of the map must be a symbol of the model */
		for (size_t i = 0; i < p->map.n_ids && !st; i++)
			if (p->map.ids[i] >= sg_vits_n_symbols(p->v))
				st = sg_error(SG_ERR_FORMAT, "piper: %s.json: phoneme id %lld is past the model's %d symbols", onnx_path,
					      (long long)p->map.ids[i], sg_vits_n_symbols(p->v));
	}
	if (st) {
		p_free(p);
		return st;
	}
	p->names[0] = p->name;
	out->vt = &piper_vt;
	out->m = p;
	return SG_OK;
}
