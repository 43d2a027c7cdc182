/*
 * SentencePiece's precompiled charsmap (text/tokenizer/charsmap.c) on a small map that
 * sentencepiece compiled from user rules (A->a, B->b, U+FF21->A, e U+0301->U+00E9, CR->space,
 * CR LF->space, U+2460->1; tools/make_unigram_fixtures.py builds the real nmt_nfkc ones). The
 * expected outputs are what HF tokenizers' Precompiled normaliser gives on the same blob: a
 * grapheme cluster under 6 bytes becomes the replacement of its SHORTEST matching prefix (so a
 * combining mark after a mapped letter is dropped, and CR LF maps through CR alone); a longer
 * cluster is mapped character by character. Broken blobs are refused or match nothing.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "base/alloc.h"
#include "text/tokenizer/tokenizer_int.h"

static const char RULES_B64[] =
    "AAQAAAAwAAANDQAAAAAAgAAAAIAGAACACAAAgMwAAgCBOQAACi0AAAoAAICRhAIAoBkAALyMAgACAACAoQUAAAQAAIARAAAA"
    "EAAAABMAAAASAAAAFQAAABQAAAAXAAAAFgAAABkAAAAYAAAAGwAAABoAAAAdAAAAHAAAAB8AAAAeAAAAIQAAACAAAAAjAAAA"
    "IgAAACUAAAAkAAAAJwAAACYAAAApAAAAKAAAACsAAAAqAAAALQAAACwAAAAvAAAALgAAADEAAAAwAAAAMwAAADIAAAA1AAAA"
    "NAAAADcAAAA2AAAAOQAAADgAAAA7AAAAOgAAAD0AAAA8AAAAPwAAAD4AAABBAAAAQAAAAEMAAABCAAAARQAAAEQAAABHAAAA"
    "RgAAAEkAAABIAAAASwAAAEoAAABNAAAAQSUBAEItAQBOAAAAUQAAAFAAAABTAAAAUgAAAFUAAABUAAAAVwAAAFYAAABZAAAA"
    "WAAAAFsAAABaAAAAXQAAAFwAAABfAAAAXgAAAGEAAABgAAAAYwAAAGIAAABlAAAAZAAAAGcAAABmAAAAaQAAAGWMAgBrAAAA"
    "agAAAG0AAABsAAAAbwAAAG4AAABxAAAAcAAAAHMAAAByAAAAdQAAAHQAAAB3AAAAdgAAAHkAAAB4AAAAewAAAHoAAAB9AAAA"
    "fAAAAH8AAAB+AAAAgQAAAIAAAACDAAAAggAAAIUAAACEAAAAhwAAAIYAAACJAAAAiAAAAIsAAACKAAAAjQAAAIwAAACPAAAA"
    "jgAAAJEAAACQAAAAkwAAAJIAAACVAAAAlAAAAJcAAACWAAAAmQAAAJgAAACbAAAAmgAAAJ0AAACcAAAAnwAAAJ4AAAChAAAA"
    "oAAAAKMAAACiAAAApQAAAKQAAACnAAAApgAAAKkAAACoAAAAqwAAAKoAAACtAAAArAAAAK8AAACuAAAAsQAAALAAAACzAAAA"
    "sgAAALUAAAC0AAAAtwAAALYAAAC5AAAAuAAAALsAAAC6AAAAvQAAALwAAAC/AAAAvgAAAMEAAADAAAAAwwAAAMIAAADFAAAA"
    "xAAAAMcAAADGAAAAyQAAAMgAAADLAAAAygAAAM0AAADMAAAAzwAAAM4AAADRAAAA0AAAANMAAADSAAAA1QAAANQAAADXAAAA"
    "1gAAANkAAADYAAAA2wAAANoAAADdAAAA3AAAAN8AAADeAAAA4QAAAOAAAADjAAAA70wBAOUAAADkAAAA5wAAAOYAAADpAAAA"
    "6AAAAOsAAADqAAAA7QAAAOwAAADi1AEA7gAAAPEAAADwAAAA8wAAAPIAAAD1AAAA9AAAAPcAAAD2AAAA+QAAAPgAAAD7AAAA"
    "+gAAAP0AAAD8AAAA/wAAAP4AAAAgADEAQQBhAGIAw6kA";

static void norm(const sg_charsmap *m, const char *in, const char *want)
{
	sg_buf out = {0};
	cr_assert_eq(sg_charsmap_apply(m, in, strlen(in), &out), SG_OK);
	cr_expect(out.n == strlen(want) && (!out.n || !memcmp(out.p, want, out.n)),
	          "'%s' -> '%.*s', want '%s'", in, (int)out.n, out.p ? out.p : "", want);
	sg_free(out.p);
}

Test(charsmap, user_rules_normalise_as_the_reference)
{
	sg_charsmap m;
	cr_assert_eq(sg_charsmap_parse(RULES_B64, strlen(RULES_B64), &m), SG_OK);
	norm(&m, "AB", "ab");
	norm(&m, "\r\n", " ");
	norm(&m, "x\r\ny", "x y");
	norm(&m, "\xEF\xBC\xA1\xCC\x81", "A"); /* U+FF21 U+0301: the mark is dropped */
	norm(&m, "e\xCC\x81", "\xC3\xA9");     /* e U+0301 -> U+00E9 */
	norm(&m, "e\xCC\x81\xCC\x81\xCC\x81",
	     "e\xCC\x81\xCC\x81\xCC\x81"); /* 7 bytes: char by char, e alone has no key */
	norm(&m, "\xE2\x91\xA0", "1");
	norm(&m, "A\xCC\x81\xCC\x81", "a"); /* 5 bytes: shortest prefix A */
	norm(&m, "abc", "abc");
	norm(&m, "", "");
	sg_charsmap_free(&m);
}

Test(charsmap, broken_blobs_are_refused_or_match_nothing)
{
	sg_charsmap m;
	cr_expect_eq(sg_charsmap_parse("AAA", 3, &m), SG_ERR_FORMAT);      /* not a multiple of 4 */
	cr_expect_eq(sg_charsmap_parse("A*AA", 4, &m), SG_ERR_FORMAT);     /* not base64 */
	cr_expect_eq(sg_charsmap_parse("AA==", 4, &m), SG_ERR_FORMAT);     /* 1 byte: no trie size */
	cr_expect_eq(sg_charsmap_parse("/////w==", 8, &m), SG_ERR_FORMAT); /* trie larger than the blob */
	/* strings that are not UTF-8 */
	uint8_t bad[] = {4, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0};
	cr_expect_eq(sg_charsmap_parse_blob(bad, sizeof bad, &m), SG_ERR_FORMAT);
	/* a trie whose root points far outside itself: every lookup misses, text passes through */
	uint8_t wild[] = {8, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0x7F, 0x41, 0x01, 0, 0, 'x', 0};
	cr_assert_eq(sg_charsmap_parse_blob(wild, sizeof wild, &m), SG_OK);
	norm(&m, "AbC", "AbC");
	sg_charsmap_free(&m);
}
