/* Fuzz target: arbitrary bytes through the tokenizer. The first byte picks one of three built-in
 * tokenizers (byte-level BPE with a Qwen-style regex and added tokens; SentencePiece-style BPE
 * with byte fallback; WordPiece with BertNormalizer); the rest is the text. Invalid UTF-8 must
 * be refused; valid text must encode to ids inside the vocabulary, decode back to itself where
 * the tokenizer is lossless, and stream to the same text as the full decode. A first byte of
 * 0xFF makes the rest a tokenizer.json instead: it must load or fail cleanly, and a loaded one
 * must encode and decode a fixed text without crashing. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/utf8.h"
#include "saragossa.h"
#include "text/tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SP "\xE2\x96\x81"
static sg_tokenizer *toks[3];

static void put_json_str(char **p, const uint8_t *s, size_t n)
{
	*(*p)++ = '"';
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '"' || s[i] == '\\') *(*p)++ = '\\';
		if (s[i] < 0x20) *p += sprintf(*p, "\\u%04x", s[i]);
		else *(*p)++ = (char)s[i];
	}
	*(*p)++ = '"';
}

static void build(void)
{
	static char buf[1 << 16];
	char *p = buf;
	/* A: byte-level. Vocabulary: the 256 byte characters, then a few merges' results. */
	p += sprintf(p, "{\"model\":{\"type\":\"BPE\",\"ignore_merges\":true,\"vocab\":{");
	for (int b = 0; b < 256; b++) {
		int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
		static int next = 256;
		uint8_t u[4];
		int k = sg_utf8_encode(printable ? (uint32_t)b : (uint32_t)next++, u);
		put_json_str(&p, u, (size_t)k);
		p += sprintf(p, ":%d,", b);
	}
	p += sprintf(p, "\"th\":256,\"the\":257,\"\xC4\xA0the\":258,\"in\":259,\"\xC4\xA0\xC4\xA0\":260},"
			"\"merges\":[\"t h\",\"th e\",\"\xC4\xA0 the\",\"i n\",\"\xC4\xA0 \xC4\xA0\"]},"
			"\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
			"\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},"
			"\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]},"
			"\"decoder\":{\"type\":\"ByteLevel\"},"
			"\"added_tokens\":[{\"id\":261,\"content\":\"<|end|>\",\"special\":true,\"normalized\":false},"
			"{\"id\":262,\"content\":\"<x>\",\"special\":false,\"normalized\":false,\"lstrip\":true,\"rstrip\":true}]}");
	if (sg_tokenizer_from_json(buf, strlen(buf), NULL, 0, &toks[0])) abort();
	/* B: SentencePiece-style with every byte as a fallback token. */
	p = buf;
	p += sprintf(p, "{\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"byte_fallback\":true,\"fuse_unk\":true,\"vocab\":{"
			"\"<unk>\":0,\"<s>\":1,\"" SP "\":2,\"a\":3,\"b\":4,\"ab\":5,\"" SP "ab\":6,\"\xC3\xA9\":7,");
	for (int b = 0; b < 256; b++) p += sprintf(p, "\"<0x%02X>\":%d%s", b, 8 + b, b < 255 ? "," : "");
	p += sprintf(p, "},\"merges\":[\"a b\",\"" SP " ab\"]},"
			"\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"" SP "\"},"
			"\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"String\":\" \"},\"behavior\":\"MergedWithPrevious\"},"
			"\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"
			"{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[1]}}},"
			"\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"" SP "\"},\"content\":\" \"},"
			"{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"}]},"
			"\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true},{\"id\":1,\"content\":\"<s>\",\"special\":true}]}");
	if (sg_tokenizer_from_json(buf, strlen(buf), NULL, 0, &toks[1])) abort();
	/* C: WordPiece (lossy: lowercases, strips accents, drops controls). */
	const char *wp = "{\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\",\"continuing_subword_prefix\":\"##\","
			 "\"max_input_chars_per_word\":20,\"vocab\":{\"[UNK]\":0,\"[CLS]\":1,\"[SEP]\":2,\"a\":3,\"##b\":4,\"ab\":5,\"!\":6,\"##a\":7}},"
			 "\"normalizer\":{\"type\":\"BertNormalizer\",\"clean_text\":true,\"handle_chinese_chars\":true,\"strip_accents\":null,\"lowercase\":true},"
			 "\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"},"
			 "\"post_processor\":{\"type\":\"BertProcessing\",\"sep\":[\"[SEP]\",2],\"cls\":[\"[CLS]\",1]},"
			 "\"decoder\":{\"type\":\"WordPiece\",\"prefix\":\"##\",\"cleanup\":true},"
			 "\"added_tokens\":[{\"id\":0,\"content\":\"[UNK]\",\"special\":true},{\"id\":1,\"content\":\"[CLS]\",\"special\":true},"
			 "{\"id\":2,\"content\":\"[SEP]\",\"special\":true}]}";
	if (sg_tokenizer_from_json(wp, strlen(wp), NULL, 0, &toks[2])) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!toks[0]) build();
	if (size < 1) return 0;
	if (data[0] == 0xFF) {
		sg_tokenizer *t = NULL;
		if (sg_tokenizer_from_json((const char *)data + 1, size - 1, NULL, 0, &t)) return 0;
		static const char sample[] = "Hello, world! <s> x  y\n\t\xC3\xA9\xE2\x82\xAC 123 ab[CLS]";
		sg_tokens ids = {0};
		if (sg_tokenizer_encode(t, sample, sizeof(sample) - 1, 1, &ids) == SG_OK) {
			for (size_t i = 0; i < ids.n; i++)
				if (ids.ids[i] < 0 || ids.ids[i] >= sg_tokenizer_n_vocab(t)) abort();
			char *back;
			size_t bn;
			if (sg_tokenizer_decode(t, ids.ids, ids.n, 0, &back, &bn) == SG_OK) sg_free(back);
		}
		sg_tokens_free(&ids);
		sg_tokenizer_free(t);
		return 0;
	}
	int which = data[0] % 3;
	const char *text = (const char *)data + 1;
	size_t n = size - 1;
	const sg_tokenizer *t = toks[which];
	sg_tokens ids = {0};
	sg_status st = sg_tokenizer_encode(t, text, n, data[0] & 4, &ids);
	if (!sg_utf8_valid((const uint8_t *)text, n)) {
		if (st != SG_ERR_INVALID_ARG) abort();
		sg_tokens_free(&ids);
		return 0;
	}
	if (st) abort();
	for (size_t i = 0; i < ids.n; i++)
		if (ids.ids[i] < 0 || ids.ids[i] >= sg_tokenizer_n_vocab(t)) abort();
	char *back;
	size_t bn;
	if (sg_tokenizer_decode(t, ids.ids, ids.n, 1, &back, &bn)) abort();
	int lossless = which == 0 || (which == 1 && !memmem(text, n, SP, 3) && !memmem(text, n, "<s>", 3) && !memmem(text, n, "<unk>", 5));
	if (which == 0 && (memmem(text, n, "<|end|>", 7) || memmem(text, n, "<x>", 3))) lossless = 0; /* special / stripped */
	if (lossless && (bn != n || memcmp(back, text, n))) abort();
	/* Streaming: the pieces concatenate to the full decode. */
	sg_detok *d;
	if (sg_detok_create(t, 1, &d)) abort();
	char *cat = sg_malloc(bn + 1);
	size_t cn = 0;
	for (size_t i = 0; i <= ids.n; i++) {
		const char *p;
		size_t pl;
		if (i < ids.n ? sg_detok_push(d, ids.ids[i], &p, &pl) : sg_detok_flush(d, &p, &pl)) abort();
		if (!sg_utf8_valid((const uint8_t *)p, pl) || cn + pl > bn) abort();
		memcpy(cat + cn, p, pl);
		cn += pl;
	}
	if (cn != bn || memcmp(cat, back, bn)) abort();
	sg_free(cat);
	sg_detok_free(d);
	sg_free(back);
	sg_tokens_free(&ids);
	return 0;
}
