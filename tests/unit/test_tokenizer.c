/* Unit tests of src/text/tokenizer: byte fallback and fused unknowns, added-token rules
 * (lstrip, rstrip, single_word, normalized), the GGUF array builder, decode and streaming decode
 * of split characters, several threads on one tokenizer, malformed inputs. Parity with the
 * reference on real tokenizers is in tests/e2e/test_tokenizer.py. */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/utf8.h"
#include "saragossa.h"
#include "text/tokenizer/tokenizer.h"

#define SP "\xE2\x96\x81" /* U+2581 */

static const char SPM_JSON[] =
	"{\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"byte_fallback\":true,\"fuse_unk\":true,"
	"\"vocab\":{\"<unk>\":0,\"<s>\":1,\"</s>\":2,\"" SP "\":3,\"a\":4,\"b\":5,\"ab\":6,\"" SP "ab\":7,"
	"\"<0xE2>\":8,\"<0x82>\":9,\"<0xAC>\":10,\"c\":11},\"merges\":[\"a b\",[\"" SP "\",\"ab\"]]},"
	"\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"" SP "\"},"
	"{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"" SP "\"}]},"
	"\"pre_tokenizer\":null,"
	"\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"
	"{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[1],\"tokens\":[\"<s>\"]}}},"
	"\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"" SP "\"},\"content\":\" \"},"
	"{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]},"
	"\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true,\"normalized\":false},"
	"{\"id\":1,\"content\":\"<s>\",\"special\":true,\"normalized\":false},{\"id\":2,\"content\":\"</s>\",\"special\":true,\"normalized\":false}]}";

static const char ADDED_JSON[] =
	"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"x\":0,\" \":1,\"<L>\":2,\"<R>\":3,\"<W>\":4,\"<n>\":5,\"y\":6,\"<\":7,"
	"\">\":8,\"w\":9,\"l\":10,\"r\":11},\"merges\":[]},"
	"\"normalizer\":{\"type\":\"Lowercase\"},\"pre_tokenizer\":null,\"decoder\":{\"type\":\"Fuse\"},"
	"\"added_tokens\":[{\"id\":2,\"content\":\"<L>\",\"lstrip\":true,\"normalized\":false,\"special\":true},"
	"{\"id\":3,\"content\":\"<R>\",\"rstrip\":true,\"normalized\":false,\"special\":true},"
	"{\"id\":4,\"content\":\"<W>\",\"single_word\":true,\"normalized\":false,\"special\":false},"
	"{\"id\":5,\"content\":\"<n>\",\"normalized\":true,\"special\":false}]}";

static sg_tokenizer *load(const char *json)
{
	sg_tokenizer *t = NULL;
	sg_status st = sg_tokenizer_from_json(json, strlen(json), NULL, 0, &t);
	cr_assert_eq(st, SG_OK, "load: %s", sg_last_error());
	return t;
}

static void expect_ids(const sg_tokenizer *t, const char *text, int special, const int32_t *want, size_t n)
{
	sg_tokens ids = {0};
	cr_assert_eq(sg_tokenizer_encode(t, text, strlen(text), special, &ids), SG_OK, "%s", sg_last_error());
	char got[512] = "";
	for (size_t i = 0; i < ids.n; i++) snprintf(got + strlen(got), sizeof(got) - strlen(got), " %d", ids.ids[i]);
	cr_assert_eq(ids.n, n, "'%s': got%s", text, got);
	for (size_t i = 0; i < n; i++) cr_assert_eq(ids.ids[i], want[i], "'%s': id %zu: got%s", text, i, got);
	sg_tokens_free(&ids);
}

static char *decode(const sg_tokenizer *t, const int32_t *ids, size_t n, int skip)
{
	char *s;
	size_t len;
	cr_assert_eq(sg_tokenizer_decode(t, ids, n, skip, &s, &len), SG_OK);
	cr_assert_eq(strlen(s), len);
	return s;
}

Test(tokenizer, byte_fallback_spells_unknown_chars_as_byte_tokens)
{
	sg_tokenizer *t = load(SPM_JSON);
	/* "▁ab▁€": a+b merge first (rank 0), then ▁+ab; € has no token but its three bytes do. */
	expect_ids(t, "ab \xE2\x82\xAC", 1, (const int32_t[]){1, 7, 3, 8, 9, 10}, 6);
	expect_ids(t, "ab \xE2\x82\xAC", 0, (const int32_t[]){7, 3, 8, 9, 10}, 5);
	sg_tokenizer_free(t);
}

Test(tokenizer, consecutive_unknown_chars_fuse_into_one_unk)
{
	sg_tokenizer *t = load(SPM_JSON);
	expect_ids(t, "xyz", 0, (const int32_t[]){3, 0}, 2);
	expect_ids(t, "xaz", 0, (const int32_t[]){3, 0, 4, 0}, 4);
	sg_tokenizer_free(t);
}

Test(tokenizer, decode_joins_byte_tokens_and_strips_the_first_space)
{
	sg_tokenizer *t = load(SPM_JSON);
	const int32_t ids[] = {1, 7, 3, 8, 9, 10};
	char *s = decode(t, ids, 6, 1);
	cr_assert_str_eq(s, "ab \xE2\x82\xAC");
	sg_free(s);
	s = decode(t, ids, 6, 0);
	cr_assert_str_eq(s, "<s> ab \xE2\x82\xAC");
	sg_free(s);
	/* An incomplete byte sequence decodes to one U+FFFD per byte, as the reference does. */
	s = decode(t, (const int32_t[]){7, 8, 9}, 3, 1);
	cr_assert_str_eq(s, "ab\xEF\xBF\xBD\xEF\xBF\xBD");
	sg_free(s);
	sg_tokenizer_free(t);
}

Test(tokenizer, stream_holds_a_split_character_until_it_is_complete)
{
	sg_tokenizer *t = load(SPM_JSON);
	const int32_t ids[] = {1, 7, 3, 8, 9, 10, 7};
	sg_detok *d;
	cr_assert_eq(sg_detok_create(t, 1, &d), SG_OK);
	char all[128] = "";
	size_t lens[8];
	for (int i = 0; i <= 7; i++) {
		const char *p;
		size_t n;
		cr_assert_eq(i < 7 ? sg_detok_push(d, ids[i], &p, &n) : sg_detok_flush(d, &p, &n), SG_OK);
		cr_assert(sg_utf8_valid((const uint8_t *)p, n), "piece %d is not valid UTF-8", i);
		strncat(all, p, n);
		lens[i] = n;
	}
	cr_assert_eq(lens[3], 0, "the first byte of the euro sign must not be emitted alone");
	cr_assert_eq(lens[4], 0);
	cr_assert_eq(lens[5], 3, "the euro sign comes out once complete");
	cr_assert_eq(lens[6], 3, "then ' ab'");
	char *full = decode(t, ids, 7, 1);
	cr_assert_str_eq(all, full);
	sg_free(full);
	sg_detok_free(d);
	sg_tokenizer_free(t);
}

Test(tokenizer, added_tokens_follow_lstrip_rstrip_single_word_and_normalized)
{
	sg_tokenizer *t = load(ADDED_JSON);
	expect_ids(t, "x <L>", 0, (const int32_t[]){0, 2}, 2);       /* lstrip eats the space before */
	expect_ids(t, "<R> x", 0, (const int32_t[]){3, 0}, 2);       /* rstrip eats the space after */
	expect_ids(t, "x <W> y", 0, (const int32_t[]){0, 1, 4, 1, 6}, 5);
	expect_ids(t, "x<W>", 0, (const int32_t[]){0, 7, 9, 8}, 4); /* not a single word: plain text */
	expect_ids(t, "<N>", 0, (const int32_t[]){5}, 1);            /* matched after lowercasing */
	sg_tokenizer_free(t);
}

/* A byte-level vocabulary given as arrays, the way GGUF stores it. */
static sg_tokenizer *gpt2_from_arrays(void)
{
	static char spell[258][8];
	static const char *toks[258];
	for (int b = 0; b < 256; b++) {
		/* GPT-2's alphabet: printable Latin-1 stays, the others move to U+0100.. in order. */
		int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
		static int next = 256;
		if (b == 0) next = 256;
		uint32_t cp = printable ? (uint32_t)b : (uint32_t)next++;
		int k = sg_utf8_encode(cp, (uint8_t *)spell[b]);
		spell[b][k] = 0;
		toks[b] = spell[b];
	}
	toks[256] = "ab";
	toks[257] = "<|endoftext|>";
	int32_t types[258];
	for (int i = 0; i < 258; i++) types[i] = i == 257 ? 3 : 1;
	const char *merges[] = {"a b"};
	sg_vocab_desc d = {.model = "gpt2", .arch = "qwen2", .pre = "qwen2", .n_tokens = 258, .tokens = toks,
			   .types = types, .n_merges = 1, .merges = merges, .bos_id = -1, .eos_id = 257, .unk_id = -1,
			   .pad_id = -1, .add_bos = -1, .add_eos = -1};
	sg_tokenizer *t = NULL;
	cr_assert_eq(sg_tokenizer_from_vocab(&d, &t), SG_OK, "%s", sg_last_error());
	return t;
}

Test(tokenizer, gguf_arrays_build_a_byte_level_tokenizer)
{
	sg_tokenizer *t = gpt2_from_arrays();
	expect_ids(t, "ab ab<|endoftext|>", 0, (const int32_t[]){256, 32, 256, 257}, 4);
	cr_assert(sg_tokenizer_is_special(t, 257));
	cr_assert_eq(sg_tokenizer_eos(t), 257);
	char *s = decode(t, (const int32_t[]){256, 32, 256, 257}, 4, 0);
	cr_assert_str_eq(s, "ab ab<|endoftext|>");
	sg_free(s);
	sg_tokenizer_free(t);
}

Test(tokenizer, stream_of_byte_level_tokens_emits_whole_characters)
{
	sg_tokenizer *t = gpt2_from_arrays();
	sg_detok *d;
	cr_assert_eq(sg_detok_create(t, 0, &d), SG_OK);
	const char *p;
	size_t n;
	cr_assert_eq(sg_detok_push(d, 0xC3, &p, &n), SG_OK);
	cr_assert_eq(n, 0, "half of 'é' must wait");
	cr_assert_eq(sg_detok_push(d, 0xA9, &p, &n), SG_OK);
	cr_assert_eq(n, 2);
	cr_assert(!memcmp(p, "\xC3\xA9", 2));
	sg_detok_free(d);
	sg_tokenizer_free(t);
}

Test(tokenizer, a_megabyte_without_spaces_encodes_and_round_trips)
{
	sg_tokenizer *t = gpt2_from_arrays();
	size_t n = 1 << 20;
	char *s = sg_malloc(n + 1);
	cr_assert_not_null(s);
	for (size_t i = 0; i < n; i++) s[i] = i % 2 ? 'b' : 'a';
	s[n] = 0;
	sg_tokens ids = {0};
	cr_assert_eq(sg_tokenizer_encode(t, s, n, 0, &ids), SG_OK);
	cr_assert_eq(ids.n, n / 2, "every 'ab' pair merges");
	char *back;
	size_t bn;
	cr_assert_eq(sg_tokenizer_decode(t, ids.ids, ids.n, 0, &back, &bn), SG_OK);
	cr_assert(bn == n && !memcmp(back, s, n));
	sg_free(back);
	sg_free(s);
	sg_tokens_free(&ids);
	sg_tokenizer_free(t);
}

typedef struct tjob {
	const sg_tokenizer *t;
	size_t fingerprint;
	int failed;
} tjob;

static void *encode_many(void *p)
{
	tjob *j = p;
	static const char *texts[] = {"ab ab", "xyz ab", "ab \xE2\x82\xAC c", "", "  ", "aabb  abab ab"};
	size_t fp = 1469598103934665603ull;
	for (int round = 0; round < 300; round++)
		for (size_t k = 0; k < sizeof(texts) / sizeof(texts[0]); k++) {
			sg_tokens ids = {0};
			if (sg_tokenizer_encode(j->t, texts[k], strlen(texts[k]), 1, &ids)) j->failed = 1;
			for (size_t i = 0; i < ids.n; i++) fp = (fp ^ (size_t)ids.ids[i]) * 1099511628211ull;
			fp = (fp ^ 0xFFFF) * 1099511628211ull;
			sg_tokens_free(&ids);
		}
	j->fingerprint = fp;
	return NULL;
}

Test(tokenizer, four_threads_on_one_tokenizer_get_the_same_ids)
{
	sg_tokenizer *t = load(SPM_JSON);
	tjob ref = {t, 0, 0};
	encode_many(&ref);
	pthread_t th[4];
	tjob jobs[4];
	for (int i = 0; i < 4; i++) {
		jobs[i] = (tjob){t, 0, 0};
		pthread_create(&th[i], NULL, encode_many, &jobs[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		cr_assert(!jobs[i].failed);
		cr_assert_eq(jobs[i].fingerprint, ref.fingerprint, "thread %d", i);
	}
	sg_tokenizer_free(t);
}

Test(tokenizer, invalid_utf8_is_refused_with_its_position)
{
	sg_tokenizer *t = load(SPM_JSON);
	sg_tokens ids = {0};
	cr_assert_eq(sg_tokenizer_encode(t, "abc\xC3(", 5, 1, &ids), SG_ERR_INVALID_ARG);
	cr_assert(strstr(sg_last_error(), "byte 3"), "%s", sg_last_error());
	sg_tokens_free(&ids);
	sg_tokenizer_free(t);
}

Test(tokenizer, malformed_files_get_errors_that_name_the_problem)
{
	sg_tokenizer *t = NULL;
	const char *bad_merge = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a q\"]}}";
	cr_assert_eq(sg_tokenizer_from_json(bad_merge, strlen(bad_merge), NULL, 0, &t), SG_ERR_FORMAT);
	cr_assert(strstr(sg_last_error(), "'a' 'q'"), "%s", sg_last_error());
	const char *unigram = "{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}";
	cr_assert_eq(sg_tokenizer_from_json(unigram, strlen(unigram), NULL, 0, &t), SG_ERR_FORMAT);
	cr_assert(strstr(sg_last_error(), "Unigram"), "%s", sg_last_error());
	const char *wordlevel = "{\"model\":{\"type\":\"WordLevel\",\"vocab\":{}}}";
	cr_assert_eq(sg_tokenizer_from_json(wordlevel, strlen(wordlevel), NULL, 0, &t), SG_ERR_UNSUPPORTED);
	cr_assert(strstr(sg_last_error(), "WordLevel"), "%s", sg_last_error());
	const char *no_model = "{\"normalizer\":null}";
	cr_assert_eq(sg_tokenizer_from_json(no_model, strlen(no_model), NULL, 0, &t), SG_ERR_FORMAT);
	const char *bad_re = "{\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]},\"pre_tokenizer\":{\"type\":\"Split\","
			     "\"pattern\":{\"Regex\":\"(\"},\"behavior\":\"Isolated\"}}";
	cr_assert_eq(sg_tokenizer_from_json(bad_re, strlen(bad_re), NULL, 0, &t), SG_ERR_FORMAT);
	cr_assert(strstr(sg_last_error(), "does not compile"), "%s", sg_last_error());
	cr_assert_null(t);
}
