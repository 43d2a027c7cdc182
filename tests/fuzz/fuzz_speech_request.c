/* Fuzz target: /v1/audio/speech bodies -> sg_speech_req (server/routes_speech.c). Checks the
 * invariants of a parsed request: an error has a 4xx/5xx status and a terminated message; a
 * request has a model, a voice, an input of 1..SG_SPEECH_MAX_CHARS characters without NULs, a
 * known format and a speed in [0.25, 4]; a cloning request has its clip (1..SG_SPEECH_MAX_REF_BYTES
 * bytes) and a transcript unless x_vector_only. Also base64-encodes the input as the SSE events do,
 * and runs the base64 decoder on the raw bytes: what it accepts re-encodes and decodes to itself. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "base/base64.h"
#include "server/routes_speech.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	sg_speech_req r;
	sg_srv_err e;
	int st = sg_speech_parse((const char *)data, size, &r, &e);
	if (st) {
		if (st < 400 || st > 599 || e.status != st) __builtin_trap();
		if (strnlen(e.message, sizeof e.message) == sizeof e.message) __builtin_trap();
	} else {
		if (!r.model || !*r.model || !r.voice || !*r.voice || !r.input) __builtin_trap();
		if (!r.input_chars || r.input_chars > SG_SPEECH_MAX_CHARS || strlen(r.input) < r.input_chars) __builtin_trap();
		if (strcmp(r.format, "mp3") && strcmp(r.format, "opus") && strcmp(r.format, "flac") && strcmp(r.format, "wav") &&
		    strcmp(r.format, "pcm"))
			__builtin_trap();
		if (!(r.speed >= 0.25f && r.speed <= 4.0f)) __builtin_trap();
		if (r.sse && !r.stream) __builtin_trap();
		if ((r.ref_text || r.x_vector_only) && !r.ref_audio) __builtin_trap();
		if (r.ref_audio && (!r.ref_audio_size || r.ref_audio_size > SG_SPEECH_MAX_REF_BYTES || (!r.ref_text && !r.x_vector_only)))
			__builtin_trap();
		json_t *b = sg_speech_base64(r.input, strlen(r.input));
		if (!b || json_string_length(b) != (strlen(r.input) + 2) / 3 * 4) __builtin_trap();
		json_decref(b);
	}
	sg_speech_req_free(&r);
	unsigned char *dec = NULL, *dec2 = NULL;
	size_t nd = 0, nd2 = 0, bad = 0;
	if (!sg_base64_decode((const char *)data, size, &dec, &nd, &bad)) {
		if (nd > size) __builtin_trap();
		json_t *b = sg_speech_base64(dec, nd);
		if (!b || sg_base64_decode(json_string_value(b), json_string_length(b), &dec2, &nd2, &bad) || nd2 != nd ||
		    (nd && memcmp(dec, dec2, nd)))
			__builtin_trap();
		json_decref(b);
	} else if (bad > size) {
		__builtin_trap();
	}
	sg_free(dec);
	sg_free(dec2);
	return 0;
}
