/* Fuzz target: multipart/form-data bodies of the audio routes -> parts -> the audio request. The
 * input is a Content-Type value, a newline, then the body. Checks that every part lies inside the
 * body and that a failure is a 4xx with a terminated message. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "server/multipart.h"
#include "server/routes_audio.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nl = memchr(data, '\n', size);
	if (!nl || nl - data > 512) return 0;
	char ct[513];
	memcpy(ct, data, (size_t)(nl - data));
	ct[nl - data] = 0;
	if (strlen(ct) != (size_t)(nl - data)) return 0;
	size_t n = size - (size_t)(nl - data) - 1;
	/* a copy of exactly n bytes, so that a read past the body is seen */
	char *body = sg_malloc(n ? n : 1);
	if (!body) return 0;
	memcpy(body, nl + 1, n);
	static sg_multipart mp;
	sg_srv_err e;
	int st = sg_multipart_parse(ct, body, n, &mp, &e);
	if (st) {
		if (st < 400 || st > 499 || e.status != st) __builtin_trap();
		if (strnlen(e.message, sizeof e.message) == sizeof e.message) __builtin_trap();
	} else {
		if (mp.n < 0 || mp.n > SG_MP_MAX_PARTS) __builtin_trap();
		for (int i = 0; i < mp.n; i++) {
			const sg_mp_part *p = &mp.parts[i];
			if (p->data < body || p->data + p->len > body + n) __builtin_trap();
			if (strnlen(p->name, sizeof p->name) == sizeof p->name) __builtin_trap();
		}
		sg_audio_req q;
		st = sg_audio_parse(SG_ROUTE_OAI_TRANSCRIPTIONS, &mp, &q, &e);
		if (st && (st < 400 || st > 599)) __builtin_trap();
		if (!st && (!q.data || !q.len || !q.model)) __builtin_trap();
		sg_audio_req_free(&q);
	}
	sg_free(body);
	return 0;
}
