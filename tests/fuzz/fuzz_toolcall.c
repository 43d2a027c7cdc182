/* Fuzz target: the streaming tool-call parsers and the reasoning split on arbitrary output text,
 * fed in chunks whose sizes come from the input. First byte: syntax and chunking; bit 2 offers
 * tools (the Hermes parser then also reads calls written without their tags). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <jansson.h>

#include "text/grammar/toolcall.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void on_event(void *ud, const sg_toolcall_event *e)
{
	size_t *n = ud;
	*n += e->len + (e->name ? strlen(e->name) : 0);
}

static void on_reason(void *ud, int r, const char *t, size_t n)
{
	size_t *k = ud;
	*k += n + (size_t)r + (t ? 0 : 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1) return 0;
	sg_toolcall_syntax syn = (sg_toolcall_syntax)(data[0] % 6);
	size_t chunk = 1 + (data[0] >> 3);
	const char *text = (const char *)data + 1;
	size_t n = size - 1, seen = 0;
	sg_toolcall_parser *p = NULL;
	static json_t *tools;
	if (!tools)
		tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}},"
				   "{\"type\":\"function\",\"function\":{\"name\":\"get\"}}]",
				   0, NULL);
	if (sg_toolcall_parser_new(syn, (data[0] & 4) ? tools : NULL, &p) == SG_OK) {
		for (size_t i = 0; i < n; i += chunk)
			sg_toolcall_feed(p, text + i, i + chunk > n ? n - i : chunk, on_event, &seen);
		/* bit 1 of the first byte: the output was cut (max_tokens) rather than ended */
		if (data[0] & 2) sg_toolcall_cut(p, on_event, &seen);
		else sg_toolcall_finish(p, on_event, &seen);
		if (sg_toolcall_cut_count(p) > 1) __builtin_trap();
		sg_toolcall_parser_free(p);
	}
	sg_reasoning_split *r = NULL;
	if (sg_reasoning_split_new("<think>", "</think>", data[0] & 1, &r) == SG_OK) {
		for (size_t i = 0; i < n; i += chunk)
			sg_reasoning_feed(r, text + i, i + chunk > n ? n - i : chunk, on_reason, &seen);
		sg_reasoning_finish(r, on_reason, &seen);
		sg_reasoning_split_free(r);
	}
	return 0;
}
