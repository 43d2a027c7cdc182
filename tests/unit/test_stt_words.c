/* Word timestamps above the model (src/engine/stt_words.c): the alignment path (standardise,
 * median filter, DTW with CTranslate2's tie-breaking), the split of tokens into words, the
 * punctuation merges and the reference's clean-ups of word and segment times. The tokenizer is
 * a byte-level BPE of the 256 bytes alone (written here), so every byte is a token: a space
 * starts a word, a multi-byte character spans several tokens. Parity with faster-whisper on
 * real speech is tests/e2e/test_transcribe_words.py. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/stt_words.h"
#include "text/tokenizer/tokenizer.h"

enum { EOT = 256, NOTS = 257, TB = 258 };

static sg_tokenizer *tok;
static sg_stt_vocab voc;

static void put_utf8(FILE *f, unsigned cp)
{
	if (cp < 0x80) fputc((int)cp, f);
	else if (cp < 0x800) fprintf(f, "%c%c", 0xC0 | (cp >> 6), 0x80 | (cp & 0x3F));
	else fprintf(f, "%c%c%c", 0xE0 | (cp >> 12), 0x80 | ((cp >> 6) & 0x3F), 0x80 | (cp & 0x3F));
}

/* GPT-2's byte-to-character table: printable Latin-1 bytes stand for themselves, the others
 * for 256 + n in order. */
static void setup_tok(void)
{
	char path[] = "/tmp/sg_stt_words_XXXXXX";
	int fd = mkstemp(path);
	cr_assert(fd >= 0);
	FILE *f = fdopen(fd, "wb");
	fputs("{\"version\":\"1.0\",\"added_tokens\":[{\"id\":256,\"content\":\"<|endoftext|>\",\"single_word\":false,"
	      "\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}],\"normalizer\":null,"
	      "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true},"
	      "\"post_processor\":null,\"decoder\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,"
	      "\"use_regex\":true},\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,\"continuing_subword_prefix\":"
	      "\"\",\"end_of_word_suffix\":\"\",\"fuse_unk\":false,\"vocab\":{",
	      f);
	unsigned n = 0;
	for (unsigned b = 0; b < 256; b++) {
		int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
		unsigned cp = printable ? b : 256 + n++;
		fputs(b ? ",\"" : "\"", f);
		if (cp == '"' || cp == '\\') fputc('\\', f);
		put_utf8(f, cp);
		fprintf(f, "\":%u", b);
	}
	fputs("},\"merges\":[]}}\n", f);
	fclose(f);
	cr_assert_eq(sg_tokenizer_load(path, &tok), SG_OK, "%s", sg_last_error());
	unlink(path);
	memset(&voc, 0, sizeof(voc));
	voc.n_vocab = TB + 1501;
	voc.eot = EOT;
	voc.no_timestamps = NOTS;
	voc.timestamp_begin = TB;
}

static void teardown_tok(void)
{
	sg_tokenizer_free(tok);
	tok = NULL;
}

/* The byte tokens of s. */
static int bytes_of(const char *s, int32_t *ids)
{
	int n = 0;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) ids[n++] = *p;
	return n;
}

Test(stt_words, dtw_takes_the_cheapest_path_and_breaks_ties_as_ctranslate2)
{
	/* high values are cheap (the matrix is negated): row 0 on columns 0-1, row 1 on 2-4; an up
	 * step is taken as soon as it is not dearer than the diagonal, so row 1 is entered at column
	 * 1 (the reference's DTW ported line by line gives the same path) */
	const float x[] = {5, 5, 0, 0, 0, 0, 0, 5, 5, 5};
	int32_t pi[8], pj[8];
	int n;
	cr_assert_eq(sg_stt_dtw(x, 2, 5, pi, pj, &n), SG_OK);
	const int32_t wi[] = {0, 0, 1, 1, 1, 1}, wj[] = {0, 1, 1, 2, 3, 4};
	cr_assert_eq(n, 6);
	for (int k = 0; k < n; k++) cr_expect(pi[k] == wi[k] && pj[k] == wj[k], "step %d: (%d, %d)", k, pi[k], pj[k]);
	/* all equal: down the first column, then along the last row */
	const float z[6] = {0};
	cr_assert_eq(sg_stt_dtw(z, 2, 3, pi, pj, &n), SG_OK);
	const int32_t zi[] = {0, 1, 1, 1}, zj[] = {0, 0, 1, 2};
	cr_assert_eq(n, 4);
	for (int k = 0; k < n; k++) cr_expect(pi[k] == zi[k] && pj[k] == zj[k], "tie step %d: (%d, %d)", k, pi[k], pj[k]);
	cr_assert_eq(sg_stt_dtw(z, 0, 3, pi, pj, &n), SG_OK);
	cr_expect_eq(n, 0);
}

/* Two heads whose tokens attend to frames 10 t .. 10 t + 9, one noisy frame each: the median
 * filter removes the spikes, the path jumps every 10 frames (the last row one frame early, as
 * the reference's standardise / median / DTW steps ported to numpy give: 0 10 20 29). */
Test(stt_words, jumps_follow_the_heads_through_filter_and_standardisation)
{
	enum { H = 2, R = 6, K = 40, FIRST = 1, NT = 3 };
	float *a = calloc(H * R * K, sizeof(float));
	for (int h = 0; h < H; h++)
		for (int r = 0; r < R; r++) {
			int t = r - FIRST;
			for (int j = 0; j < K; j++) a[(h * R + r) * K + j] = t >= 0 && t <= NT && j / 10 == t ? 0.1f * (h + 1) : 0.001f;
			a[(h * R + r) * K + (r * 7 + h) % K] += 0.5f; /* one spike */
		}
	int32_t jump[NT + 1];
	cr_assert_eq(sg_stt_align_jumps(a, H, R, K, FIRST, NT, jump), SG_OK, "%s", sg_last_error());
	const int32_t want[] = {0, 10, 20, 29};
	for (int t = 0; t <= NT; t++) cr_expect_eq(jump[t], want[t], "row %d starts at frame %d", t, jump[t]);
	/* the rows asked for must exist; a window of 1..3 frames is not filtered */
	cr_expect_eq(sg_stt_align_jumps(a, H, R, K, 3, NT, jump), SG_ERR_RANGE);
	cr_expect_eq(sg_stt_align_jumps(a, H, R, 2, FIRST, NT, jump), SG_OK);
	cr_expect_eq(jump[0], 0);
	free(a);
}

Test(stt_words, split_at_spaces_and_punctuation_or_at_characters, .init = setup_tok, .fini = teardown_tok)
{
	int32_t ids[64];
	int n = bytes_of(" And so, my caf\xc3\xa9", ids);
	ids[n++] = EOT;
	sg_stt_wtok *w;
	int nw;
	cr_assert_eq(sg_stt_split_words(tok, &voc, ids, n, 0, &w, &nw), SG_OK, "%s", sg_last_error());
	const char *want[] = {" And", " so", ",", " my", " caf\xc3\xa9", ""};
	cr_assert_eq(nw, 6);
	int at = 0;
	for (int k = 0; k < nw; k++) {
		cr_expect_str_eq(w[k].text, want[k]);
		cr_expect_eq(w[k].begin, at);
		at += w[k].n;
	}
	cr_expect_eq(w[4].n, 6, "the two bytes of the e with an acute accent are one character");
	sg_stt_wtok_free(w, nw);
	/* by characters: "日本" is two words of three byte tokens each */
	n = bytes_of("\xe6\x97\xa5\xe6\x9c\xac", ids);
	ids[n++] = EOT;
	cr_assert_eq(sg_stt_split_words(tok, &voc, ids, n, 1, &w, &nw), SG_OK);
	cr_assert_eq(nw, 3);
	cr_expect_str_eq(w[0].text, "\xe6\x97\xa5");
	cr_expect_eq(w[0].n, 3);
	cr_expect_str_eq(w[1].text, "\xe6\x9c\xac");
	cr_expect_eq(w[2].n, 1);
	sg_stt_wtok_free(w, nw);
	cr_expect(sg_stt_lang_by_char("ja") && sg_stt_lang_by_char("yue") && !sg_stt_lang_by_char("en") && !sg_stt_lang_by_char(NULL));
}

/* One segment " (Hi) you." aligned 0.4 s a byte. The split gives " ", "(Hi", ")", " you", ".";
 * the lone " " is an opening mark (stripped, it is empty) and joins "(Hi", ")" and "." join the
 * words before them, which keep their times; times are offset by the window and rounded; the
 * probability is the mean of the word's own tokens; the segment takes its words' start and end. */
Test(stt_words, punctuation_merges_and_segment_times, .init = setup_tok, .fini = teardown_tok)
{
	int32_t text[32], toks[40];
	int n = bytes_of(" (Hi) you.", text);
	int32_t jump[33];
	float prob[32];
	for (int t = 0; t <= n; t++) jump[t] = 20 * t; /* 0.4 s per token */
	for (int t = 0; t < n; t++) prob[t] = 0.1f * (float)(t + 1);
	toks[0] = TB;
	memcpy(toks + 1, text, sizeof(int32_t) * (size_t)n);
	toks[n + 1] = TB + 250;
	sg_stt_wseg seg = {toks, n + 2, 30.0, 35.0, NULL, 0};
	cr_assert_eq(sg_stt_window_words(tok, &voc, 0, text, n, jump, prob, 30.0, 31.0, &seg, 1), SG_OK, "%s", sg_last_error());
	cr_assert_eq(seg.n_words, 2, "%d words", seg.n_words);
	cr_expect_str_eq(seg.words[0].word, " (Hi)");
	cr_expect_str_eq(seg.words[1].word, " you.");
	/* " (Hi)" has "(Hi"'s times (tokens 1 .. 4: 0.4 .. 1.6 s) and probability (0.2, 0.3, 0.4) */
	cr_expect(fabs(seg.words[0].start - 30.4) < 1e-9 && fabs(seg.words[0].end - 31.6) < 1e-9, "%g %g",
		  seg.words[0].start, seg.words[0].end);
	cr_expect(fabs(seg.words[0].probability - 0.3f) < 1e-6, "%g", seg.words[0].probability);
	cr_expect(fabs(seg.words[1].start - 32.0) < 1e-9 && fabs(seg.words[1].end - 33.6) < 1e-9, "%g %g",
		  seg.words[1].start, seg.words[1].end);
	cr_expect(fabs(seg.start - seg.words[0].start) < 1e-12 && fabs(seg.end - seg.words[1].end) < 1e-12, "%g %g", seg.start,
		  seg.end);
	cr_expect(fabs(sg_stt_words_end(&seg, 1) - seg.words[1].end) < 1e-12);
	sg_stt_wseg_clear(&seg, 1);
	cr_expect(seg.words == NULL && seg.n_words == 0);
	/* no text: no words, the segment's times stay */
	sg_stt_wseg empty = {toks, 1, 1.0, 2.0, NULL, 0};
	cr_assert_eq(sg_stt_window_words(tok, &voc, 0, text, 0, jump, prob, 0.0, 0.0, &empty, 1), SG_OK);
	cr_expect(empty.n_words == 0 && empty.start == 1.0 && empty.end == 2.0);
	cr_expect_eq(sg_stt_words_end(&empty, 1), 2.0);
	cr_expect_eq(sg_stt_words_end(&empty, 0), -1.0);
}

/* A first word far longer than the median after a pause is cut to twice the median, and the
 * segment starts with it. */
Test(stt_words, a_long_first_word_after_a_pause_is_cut, .init = setup_tok, .fini = teardown_tok)
{
	int32_t text[32], toks[40];
	int n = bytes_of(" a b c d", text); /* 8 tokens, words " a", " b", " c", " d" */
	int32_t jump[] = {0, 5, 100, 110, 115, 125, 130, 140, 150}; /* " a" spans 0 .. 2.0 s */
	float prob[8] = {1, 1, 1, 1, 1, 1, 1, 1};
	memcpy(toks, text, sizeof(int32_t) * (size_t)n);
	sg_stt_wseg seg = {toks, n, 0.0, 3.0, NULL, 0};
	cr_assert_eq(sg_stt_window_words(tok, &voc, 0, text, n, jump, prob, 0.0, 0.0, &seg, 1), SG_OK, "%s", sg_last_error());
	cr_assert_eq(seg.n_words, 4);
	/* durations 2.0, 0.3, 0.3, 0.4: median 0.35, most 0.7; " a" ends at 2.0 > 4 * 0.35 after the
	 * last speech (0): it starts at 2.0 - 0.7 */
	cr_expect(fabs(seg.words[0].start - 1.3) < 1e-9, "%g", seg.words[0].start);
	cr_expect(fabs(seg.start - 1.3) < 1e-9, "%g", seg.start);
	cr_expect(fabs(seg.end - 3.0) < 1e-9, "%g", seg.end);
	sg_stt_wseg_clear(&seg, 1);
}
