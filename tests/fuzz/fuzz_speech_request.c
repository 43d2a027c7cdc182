/* Fuzz target: /v1/audio/speech bodies -> sg_speech_req (server/routes_speech.c). Checks the
 * invariants of a parsed request: an error has a 4xx/5xx status and a terminated message; a
 * request has a model, a voice, an input of 1..SG_SPEECH_MAX_CHARS characters without NULs, a
 * known format and a speed in [0.25, 4]. Also base64-encodes the input as the SSE events do. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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
		json_t *b = sg_speech_base64(r.input, strlen(r.input));
		if (!b || json_string_length(b) != (strlen(r.input) + 2) / 3 * 4) __builtin_trap();
		json_decref(b);
	}
	sg_speech_req_free(&r);
	return 0;
}
