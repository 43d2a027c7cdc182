/* Fuzz target: SentencePiece's precompiled charsmap and the Unigram model. Input: a little-endian
 * u16 n, then n bytes of charsmap blob, then the text. The blob must parse or fail cleanly; a
 * parsed one must normalise valid text into valid UTF-8 (a trie that walks outside itself matches
 * nothing). The blob also goes, base64-encoded, into a tokenizer.json with a Unigram model (byte
 * fallback, a few pieces): it must load or fail cleanly, and a loaded one must encode the text to
 * ids inside the vocabulary and decode them without crashing. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/utf8.h"
#include "saragossa.h"
#include "text/tokenizer/tokenizer.h"
#include "text/tokenizer/tokenizer_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t b64(const uint8_t *s, size_t n, char *o)
{
	static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t k = 0;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t w = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) |
		             (i + 2 < n ? s[i + 2] : 0);
		o[k++] = A[w >> 18 & 63];
		o[k++] = A[w >> 12 & 63];
		o[k++] = i + 1 < n ? A[w >> 6 & 63] : '=';
		o[k++] = i + 2 < n ? A[w & 63] : '=';
	}
	return k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2) return 0;
	size_t bn = (size_t)data[0] | (size_t)data[1] << 8;
	if (bn > size - 2) bn = size - 2;
	const uint8_t *blob = data + 2, *text = data + 2 + bn;
	size_t tn = size - 2 - bn;
	int valid = sg_utf8_valid(text, tn);
	sg_charsmap m;
	if (sg_charsmap_parse_blob(blob, bn, &m) == SG_OK) {
		sg_buf out = {0};
		if (valid) {
			if (sg_charsmap_apply(&m, (const char *)text, tn, &out) != SG_OK) abort();
			if (!sg_utf8_valid((const uint8_t *)out.p, out.n)) abort();
		}
		sg_free(out.p);
		sg_charsmap_free(&m);
	}
	char *json = malloc(bn * 2 + 1024);
	if (!json) return 0;
	int k = sprintf(json, "{\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":"
	                      "\"Precompiled\",\"precompiled_charsmap\":\"");
	k += (int)b64(blob, bn, json + k);
	k += sprintf(
	    json + k,
	    "\"}]},\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\xE2\x96\x81\",\"prepend_"
	    "scheme\":\"always\"},"
	    "\"decoder\":{\"type\":\"Metaspace\",\"replacement\":\"\xE2\x96\x81\",\"prepend_scheme\":"
	    "\"always\"},"
	    "\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"byte_fallback\":true,\"vocab\":[[\"<unk>\",0],"
	    "[\"\xE2\x96\x81\",-2],[\"a\",-1.5],[\"ab\",-2.5],[\"\xE2\x96\x81"
	    "ab\",-3],[\"<0x41>\",-9],[\"<0xC3>\",-9],"
	    "[\"\xC3\xA9\",-4],[\"b\",-1.5],[\"\xE2\x96\x81"
	    "a\",-2.2]]}}");
	sg_tokenizer *t = NULL;
	if (sg_tokenizer_from_json(json, (size_t)k, NULL, 0, &t) == SG_OK) {
		sg_tokens ids = {0};
		sg_status st = sg_tokenizer_encode(t, (const char *)text, tn, 1, &ids);
		if (valid && st != SG_OK) abort();
		for (size_t i = 0; i < ids.n; i++)
			if (ids.ids[i] < 0 || ids.ids[i] >= sg_tokenizer_n_vocab(t)) abort();
		char *s = NULL;
		size_t sn = 0;
		if (sg_tokenizer_decode(t, ids.ids, ids.n, 0, &s, &sn) == SG_OK) sg_free(s);
		sg_tokens_free(&ids);
		sg_tokenizer_free(t);
	}
	free(json);
	return 0;
}
