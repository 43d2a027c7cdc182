/* Fuzz target: request bodies -> generation parameters, for every route that takes a body and
 * every API (OpenAI chat, completions, tokenize, detokenize; Ollama chat and generate; Anthropic
 * messages and count_tokens; OpenAI responses). The first byte picks the route; the rest is the body. Also checks
 * invariants of a parsed request, and compiles the grammar a forced tool call would get from the
 * request's tools (what the connection thread does before the request is queued). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "server/request.h"
#include "server/routes.h"
#include "server/server.h"
#include "text/grammar/grammar.h"
#include "text/grammar/toolcall.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const sg_srv_route routes[] = {SG_ROUTE_OAI_CHAT,       SG_ROUTE_OAI_COMPLETIONS,    SG_ROUTE_OLLAMA_CHAT,
					      SG_ROUTE_OLLAMA_GENERATE, SG_ROUTE_TOKENIZE,           SG_ROUTE_DETOKENIZE,
					      SG_ROUTE_ANTHROPIC_MESSAGES, SG_ROUTE_ANTHROPIC_COUNT, SG_ROUTE_OAI_RESPONSES};
	if (size < 1) return 0;
	sg_srv_route route = routes[data[0] % (sizeof routes / sizeof *routes)];
	sg_srv_limits lim = {.max_tokens_cap = 4096};
	sg_srv_req req;
	sg_srv_err err;
	int st = sg_srv_parse_request(route, (const char *)data + 1, size - 1, &lim, &req, &err);
	if (st) {
		if (st < 400 || st > 599 || err.status != st) __builtin_trap();
		if (strnlen(err.message, sizeof err.message) == sizeof err.message) __builtin_trap();
	} else if (route != SG_ROUTE_TOKENIZE && route != SG_ROUTE_DETOKENIZE && route != SG_ROUTE_ANTHROPIC_COUNT) {
		if (req.max_tokens < 1 || req.max_tokens > lim.max_tokens_cap) __builtin_trap();
		if (req.n_stop > SG_SRV_MAX_STOP) __builtin_trap();
		if (req.chat && !json_is_array(req.messages)) __builtin_trap();
		if (req.tool_choice == SG_TOOLS_NAMED && !req.tool_name) __builtin_trap();
		/* speculative decoding: a known mode, lengths in range, a prediction with its length */
		if (req.spec < -1 || req.spec > 2) __builtin_trap();
		if (req.draft_max < 0 || req.draft_max > 256 || req.draft_min < 0 || req.draft_min > 256) __builtin_trap();
		if (req.draft_max && req.draft_min > req.draft_max) __builtin_trap();
		if (!req.prediction && req.prediction_len) __builtin_trap();
		if (req.tool_choice >= SG_TOOLS_REQUIRED && req.tools) {
			sg_grammar *g = NULL;
			if (sg_toolcall_grammar(SG_TC_HERMES, req.tools, req.tool_choice == SG_TOOLS_NAMED ? req.tool_name : NULL,
						req.parallel_tools ? 8 : 1, &g) == SG_OK && !g)
				__builtin_trap();
			sg_grammar_free(g);
		}
	}
	sg_srv_req_free(&req);
	/* The auth checks on the same bytes, as header values. */
	char hdr[256];
	size_t n = size - 1 < sizeof hdr - 1 ? size - 1 : sizeof hdr - 1;
	memcpy(hdr, data + 1, n);
	hdr[n] = 0;
	(void)sg_server_auth_ok(hdr, "key");
	(void)sg_server_api_key_ok(hdr, "key");
	return 0;
}
