/* The synthetic test voice (tts_tone.h). */
#include "engine/tts_tone.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/error.h"

#define MAX_VOICES 16
#define TONE_MS 60   /* a letter */
#define PAUSE_MS 40  /* a space */
#define AMP 0.3f

typedef struct tone {
	int rate;
	int chunk; /* samples per emitted chunk */
	int delay_ms; /* time each chunk takes to make, as a real model's would (0: none) */
	int n_voices;
	char voices[MAX_VOICES][32];
} tone;

static int t_rate(const void *m) { return ((const tone *)m)->rate; }
static int t_n_voices(const void *m) { return ((const tone *)m)->n_voices; }
static const char *t_voice(const void *m, int i) { return ((const tone *)m)->voices[i]; }
static void t_free(void *m) { sg_free(m); }

static sg_status t_speak(void *mv, const char *text, const sg_speak_params *p, tts_emit_fn emit, void *user)
{
	const tone *m = mv;
	int v = 0;
	for (int i = 0; p->voice && i < m->n_voices; i++)
		if (!strcmp(p->voice, m->voices[i])) v = i;
	float speed = p->speed > 0 ? p->speed : 1.0f;
	size_t n_tone = (size_t)(m->rate * TONE_MS / 1000 / speed), n_pause = (size_t)(m->rate * PAUSE_MS / 1000 / speed);
	float *buf = sg_malloc((size_t)m->chunk * sizeof *buf);
	if (!buf) return SG_FAIL(SG_ERR_NOMEM, "tone chunk");
	size_t fill = 0;
	double phase = 0;
	sg_status st = SG_OK;
	for (const unsigned char *c = (const unsigned char *)text; *c && !st; c++) {
		if ((*c & 0xC0) == 0x80) continue; /* one tone per character */
		int letter = *c != ' ' && *c != '\t' && *c != '\n';
		double f = 220.0 * (1 + v * 0.25) * pow(2.0, (*c % 24) / 12.0);
		size_t n = letter ? n_tone : n_pause;
		for (size_t i = 0; i < n && !st; i++) {
			/* a raised-cosine envelope: no clicks between letters */
			double env = letter ? 0.5 - 0.5 * cos(2 * M_PI * (double)i / (double)n) : 0;
			buf[fill++] = (float)(AMP * env * sin(phase));
			phase += 2 * M_PI * f / m->rate;
			if (fill == (size_t)m->chunk) {
				if (m->delay_ms) nanosleep(&(struct timespec){m->delay_ms / 1000, m->delay_ms % 1000 * 1000000L}, NULL);
				if (emit(buf, fill, user)) st = sg_error(SG_ERR_CANCELLED, "tone: stopped");
				fill = 0;
			}
		}
	}
	if (!st && fill && emit(buf, fill, user)) st = sg_error(SG_ERR_CANCELLED, "tone: stopped");
	sg_free(buf);
	return st;
}

static const tts_model_vt tone_vt = {
	.kind = "tone", .sample_rate = t_rate, .n_voices = t_n_voices, .voice = t_voice, .speak = t_speak, .free = t_free,
};

sg_status tts_tone_load(const char *path, tts_model *out)
{
	json_error_t je;
	json_t *j = json_load_file(path, 0, &je);
	if (!j) return sg_error(SG_ERR_FORMAT, "tone voice %s: %s (line %d)", path, je.text, je.line);
	tone *m = sg_calloc(1, sizeof *m);
	sg_status st = m ? SG_OK : SG_FAIL(SG_ERR_NOMEM, "tone voice");
	json_t *voices = json_object_get(j, "voices");
	const char *kind = json_string_value(json_object_get(j, "kind"));
	json_int_t rate = json_integer_value(json_object_get(j, "sample_rate"));
	json_int_t chunk_ms = json_integer_value(json_object_get(j, "chunk_ms"));
	json_int_t delay_ms = json_integer_value(json_object_get(j, "delay_ms"));
	if (!st && (!kind || strcmp(kind, "tone")))
		st = sg_error(SG_ERR_FORMAT, "tone voice %s: \"kind\" must be \"tone\"", path);
	if (!st && (rate < 8000 || rate > 48000))
		st = sg_error(SG_ERR_FORMAT, "tone voice %s: \"sample_rate\" must be an integer in [8000, 48000]", path);
	if (!st && (chunk_ms < 10 || chunk_ms > 1000))
		st = sg_error(SG_ERR_FORMAT, "tone voice %s: \"chunk_ms\" must be an integer in [10, 1000]", path);
	if (!st && (delay_ms < 0 || delay_ms > 1000))
		st = sg_error(SG_ERR_FORMAT, "tone voice %s: \"delay_ms\" must be an integer in [0, 1000]", path);
	if (!st && (!json_is_array(voices) || !json_array_size(voices) || json_array_size(voices) > MAX_VOICES))
		st = sg_error(SG_ERR_FORMAT, "tone voice %s: \"voices\" must be 1 to %d names", path, MAX_VOICES);
	for (size_t i = 0; !st && i < json_array_size(voices); i++) {
		const char *s = json_string_value(json_array_get(voices, i));
		if (!s || !*s || strlen(s) >= sizeof m->voices[0])
			st = sg_error(SG_ERR_FORMAT, "tone voice %s: voice %zu is not a name of 1 to 31 bytes", path, i);
		else snprintf(m->voices[m->n_voices++], sizeof m->voices[0], "%s", s);
	}
	json_decref(j);
	if (st) {
		sg_free(m);
		return st;
	}
	m->rate = (int)rate;
	m->chunk = (int)(rate * chunk_ms / 1000);
	m->delay_ms = (int)delay_ms;
	out->vt = &tone_vt;
	out->m = m;
	return SG_OK;
}
