/* Fuzz target: the JSON Schema compiler on arbitrary JSON, then the compiled automaton on the
 * same bytes (advance, mask over a small vocabulary, end-of-output checks). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/json.h"
#include "text/grammar/grammar.h"
#include "text/grammar/json_schema.h"
#include "text/grammar/token_trie.h"
#include "text/grammar/toolcall.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static sg_token_trie *vocab(void)
{
	static sg_token_trie *t;
	if (t) return t;
	static const char *toks[] = {"{", "}", "[", "]", "\"", ":", ",", " ", "\n", "a", "\\", "u",
				     "0", "1", "-", ".", "e", "true", "null", "\xc3\xa9", "\xc3",
				     "{\"", "\":", "\"}", "<eot>"};
	enum { N = sizeof(toks) / sizeof(toks[0]) };
	const uint8_t *p[N];
	uint32_t l[N];
	for (int i = 0; i < N; i++) {
		p[i] = (const uint8_t *)toks[i];
		l[i] = (uint32_t)strlen(toks[i]);
	}
	int eot[] = {N - 1};
	sg_token_trie_build(p, l, N, NULL, 0, eot, 1, &t);
	return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *j = NULL;
	if (sg_json_parse((const char *)data, size, "fuzz", &j) != SG_OK) return 0;
	for (int strict = 0; strict < 2; strict++) {
		sg_grammar *g = NULL;
		char warn[128];
		if (sg_json_schema_compile(j, strict, &g, warn, sizeof(warn)) != SG_OK) continue;
		sg_grammar_state *s = NULL;
		if (sg_grammar_state_new(g, &s) == SG_OK) {
			uint32_t bits[1];
			sg_token_trie *t = vocab();
			for (size_t i = 0; i < size && i < 512; i++) {
				if (t) sg_grammar_mask(s, t, bits);
				sg_grammar_advance(s, &data[i], 1);
				sg_grammar_accepts_eos(s);
			}
			sg_grammar_is_complete(s);
			sg_grammar_state_free(s);
		}
		sg_grammar_free(g);
	}
	sg_grammar *g = NULL;
	sg_json_schema_response_format(j, &g, NULL, 0);
	sg_grammar_free(g);
	if (json_is_array(j)) { /* as a tools array: the grammars forcing a call */
		for (int syn = 0; syn < 6; syn++) {
			g = NULL;
			if (sg_toolcall_grammar((sg_toolcall_syntax)syn, j, NULL, 2, &g) == SG_OK) {
				sg_grammar_state *s = NULL;
				if (sg_grammar_state_new(g, &s) == SG_OK) {
					uint32_t bits[1];
					for (size_t i = 0; i < size && i < 256; i++) {
						if (vocab()) sg_grammar_mask(s, vocab(), bits);
						sg_grammar_advance(s, &data[i], 1);
					}
					sg_grammar_state_free(s);
				}
			}
			sg_grammar_free(g);
		}
	}
	json_decref(j);
	return 0;
}
