/* Fuzz target: request bodies of the embedding and rerank routes (OpenAI /v1/embeddings, Ollama
 * /api/embed and /api/embeddings, /v1/rerank) -> sg_embed_req. The first byte picks the route and
 * the input cap; the rest is the body. Checks that an error is a 4xx/5xx with a terminated message
 * and that a parsed request holds 1..cap inputs, each text non-empty or a non-empty list of
 * non-negative token ids. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "server/routes_embed.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const sg_srv_route routes[] = {SG_ROUTE_OAI_EMBEDDINGS, SG_ROUTE_OLLAMA_EMBED, SG_ROUTE_OLLAMA_EMBEDDINGS,
					      SG_ROUTE_RERANK};
	if (size < 1) return 0;
	sg_srv_route route = routes[data[0] % 4];
	int cap = 1 + (data[0] >> 2) % 16;
	sg_embed_req r;
	sg_srv_err err;
	int st = sg_embed_req_parse(route, (const char *)data + 1, size - 1, cap, &r, &err);
	if (st) {
		if (st < 400 || st > 599 || err.status != st) __builtin_trap();
		if (strnlen(err.message, sizeof err.message) == sizeof err.message) __builtin_trap();
	} else {
		if (r.n < 1 || r.n > cap || !r.in || !r.model) __builtin_trap();
		for (int i = 0; i < r.n; i++) {
			const sg_embed_input *x = &r.in[i];
			if (x->text) {
				if (route != SG_ROUTE_RERANK && !x->len) __builtin_trap();
			} else {
				if (x->n_ids < 1 || !x->ids) __builtin_trap();
				for (int k = 0; k < x->n_ids; k++)
					if (x->ids[k] < 0) __builtin_trap();
			}
		}
		if (route == SG_ROUTE_RERANK && (!r.query || !r.query_len || r.top_n < 0)) __builtin_trap();
		if (r.dimensions < 0) __builtin_trap();
	}
	sg_embed_req_free(&r);
	return 0;
}
