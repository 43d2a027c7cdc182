/* Unit tests of src/engine/stop: stop strings over streamed pieces (spanning pieces, overlapping
 * prefixes, multi-byte UTF-8, independence from how the text is cut, checked against a brute-force
 * reference), EOS ids, max_tokens, and bad parameters. */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "engine/stop.h"

static sg_stop *make_stop(const char *const *strs, size_t n, const int32_t *eos, size_t n_eos,
                          int32_t max_tokens)
{
	sg_stop_params p = {.eos_ids = eos,
	                    .n_eos = n_eos,
	                    .stop_strings = strs,
	                    .n_stop_strings = n,
	                    .max_tokens = max_tokens};
	sg_stop *s = NULL;
	cr_assert_eq(sg_stop_create(&p, &s), SG_OK, "%s", sg_last_error());
	return s;
}

/* Feeds pieces through sg_stop_text, appending every emitted byte to out (NUL-terminated) and
 * checking after each step that nothing emitted so far is part of a stop string occurrence
 * within the full text. Returns the final result (flushed if nothing stopped). */
static sg_stop_result feed_all(sg_stop *s, const char *const *pieces, size_t n, char *out)
{
	size_t ol = 0;
	sg_stop_result r = {0};
	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(sg_stop_text(s, pieces[i], strlen(pieces[i]), &r), SG_OK);
		memcpy(out + ol, r.text, r.len);
		ol += r.len;
		if (r.finish) break;
	}
	if (!r.finish) {
		cr_assert_eq(sg_stop_flush(s, &r), SG_OK);
		memcpy(out + ol, r.text, r.len);
		ol += r.len;
	}
	out[ol] = 0;
	return r;
}

Test(stop, stop_string_spanning_three_pieces_is_caught_and_not_emitted)
{
	const char *stops[] = {"</end>"};
	sg_stop *s = make_stop(stops, 1, NULL, 0, 0);
	sg_stop_result r;
	cr_assert_eq(sg_stop_text(s, "abc</", 5, &r), SG_OK);
	cr_assert_eq(r.len, 3);
	cr_assert_eq(memcmp(r.text, "abc", 3), 0);
	cr_assert_eq(r.finish, SG_FINISH_NONE);
	cr_assert_eq(sg_stop_text(s, "en", 2, &r), SG_OK);
	cr_assert_eq(r.len, 0, "'</en' could still be the stop string");
	cr_assert_eq(sg_stop_text(s, "d>xyz", 5, &r), SG_OK);
	cr_assert_eq(r.len, 0);
	cr_assert_eq(r.finish, SG_FINISH_STOP_STRING);
	cr_assert_eq(r.stop_index, 0);
	sg_stop_free(s);
}

Test(stop, held_prefix_is_released_when_the_match_fails)
{
	const char *stops[] = {"<|im_end|>"};
	sg_stop *s = make_stop(stops, 1, NULL, 0, 0);
	sg_stop_result r;
	sg_stop_text(s, "Hello <", 7, &r);
	cr_assert_eq(r.len, 6);
	sg_stop_text(s, "|im", 3, &r);
	cr_assert_eq(r.len, 0);
	sg_stop_text(s, "age", 3, &r);
	cr_assert_eq(r.len, 7);
	cr_assert_eq(memcmp(r.text, "<|image", 7), 0);
	sg_stop_text(s, "s <|", 4, &r);
	cr_assert_eq(r.len, 2);
	cr_assert_eq(sg_stop_flush(s, &r), SG_OK);
	cr_assert_eq(r.len, 2);
	cr_assert_eq(memcmp(r.text, "<|", 2), 0);
	sg_stop_free(s);
}

Test(stop, held_text_restarts_inside_a_failed_match)
{
	/* "aab" then "aab": the second 'a' of "aaa..." must stay live after the first fails. */
	const char *stops[] = {"aab"};
	const char *pieces[] = {"xa", "a", "a", "b", "tail"};
	char out[64];
	sg_stop *s = make_stop(stops, 1, NULL, 0, 0);
	sg_stop_result r = feed_all(s, pieces, 5, out);
	cr_assert_eq(r.finish, SG_FINISH_STOP_STRING);
	cr_assert_str_eq(out, "xa");
	sg_stop_free(s);
}

Test(stop, overlapping_prefixes_stop_at_the_first_completed_string)
{
	const char *stops[] = {"abc", "ab"};
	char out[64];
	const char *p1[] = {"xa", "bc"};
	sg_stop *s = make_stop(stops, 2, NULL, 0, 0);
	sg_stop_result r = feed_all(s, p1, 2, out);
	cr_assert_eq(r.finish, SG_FINISH_STOP_STRING);
	cr_assert_eq(r.stop_index, 1, "'ab' completes one byte before 'abc'");
	cr_assert_str_eq(out, "x");
	sg_stop_free(s);

	/* Two strings completing on the same byte: the longer one is reported. */
	const char *stops2[] = {"c", "abc"};
	const char *p2[] = {"zabc"};
	s = make_stop(stops2, 2, NULL, 0, 0);
	r = feed_all(s, p2, 1, out);
	cr_assert_eq(r.stop_index, 1);
	cr_assert_str_eq(out, "z");
	sg_stop_free(s);
}

Test(stop, multibyte_stop_string_split_inside_a_character)
{
	const char *stops[] = {"\xC3\xA9!"}; /* "é!" */
	const char *pieces[] = {"caf\xC3", "\xA9", "! more"};
	char out[64];
	sg_stop *s = make_stop(stops, 1, NULL, 0, 0);
	sg_stop_result r;
	sg_stop_text(s, pieces[0], 4, &r);
	cr_assert_eq(r.len, 3);
	sg_stop_reset(s);
	r = feed_all(s, pieces, 3, out);
	cr_assert_eq(r.finish, SG_FINISH_STOP_STRING);
	cr_assert_str_eq(out, "caf");
	sg_stop_reset(s);
	const char *nomatch[] = {"caf\xC3", "\xA9", "s"};
	r = feed_all(s, nomatch, 3, out);
	cr_assert_eq(r.finish, SG_FINISH_NONE);
	cr_assert_str_eq(out, "caf\xC3\xA9s");
	sg_stop_free(s);
}

Test(stop, incomplete_utf8_is_held_even_without_stop_strings)
{
	sg_stop *s = make_stop(NULL, 0, NULL, 0, 0);
	sg_stop_result r;
	sg_stop_text(s, "1\xE2\x82", 3, &r); /* the first two bytes of the euro sign */
	cr_assert_eq(r.len, 1);
	sg_stop_text(s, "\xAC", 1, &r);
	cr_assert_eq(r.len, 3);
	cr_assert_eq(memcmp(r.text, "\xE2\x82\xAC", 3), 0);
	sg_stop_free(s);
}

/* The reference: the first byte where a stop string is complete, the longest string there. */
static void brute_force(const char *text, const char *const *stops, size_t n, char *out, int *which)
{
	size_t tl = strlen(text);
	*which = -1;
	for (size_t end = 1; end <= tl && *which < 0; end++) {
		size_t best = 0;
		for (size_t j = 0; j < n; j++) {
			size_t sl = strlen(stops[j]);
			if (sl <= end && memcmp(text + end - sl, stops[j], sl) == 0 && sl > best) {
				best = sl;
				*which = (int)j;
			}
		}
		if (*which >= 0) {
			memcpy(out, text, end - best);
			out[end - best] = 0;
			return;
		}
	}
	strcpy(out, text);
}

Test(stop, any_cut_of_the_text_gives_the_brute_force_answer)
{
	/* The second set has strings ending on the same byte ("c", "bc", "abc"): the longest
	 * one must win whatever the cuts. */
	const char *sets[2][5] = {{"aba", "bc", "cab", "abab", "\xC3\xA9\x61"},
	                          {"c", "bc", "abc", "\xC3\xA9", "ba"}};
	const char alpha[] = "abc\xC3\xA9";
	uint64_t st = 12345;
	for (int trial = 0; trial < 4000; trial++) {
		const char *const *stops = sets[trial & 1];
		char text[41], want[41], got[41];
		size_t tl = 0;
		st = st * 6364136223846793005ull + 1442695040888963407ull;
		size_t len = 1 + (st >> 33) % 40;
		while (tl < len) {
			st = st * 6364136223846793005ull + 1442695040888963407ull;
			int c = (int)((st >> 33) % 4);
			if (c == 3) {
				if (tl + 2 > len) break;
				text[tl++] = alpha[3];
				text[tl++] = alpha[4];
			} else {
				text[tl++] = alpha[c];
			}
		}
		text[tl] = 0;
		int which;
		brute_force(text, stops, 5, want, &which);
		/* Random cuts, including inside the two-byte character. */
		char buf[41][41];
		const char *pieces[41];
		size_t np = 0, at = 0;
		while (at < tl) {
			st = st * 6364136223846793005ull + 1442695040888963407ull;
			size_t k = 1 + (st >> 33) % 5;
			if (k > tl - at) k = tl - at;
			memcpy(buf[np], text + at, k);
			buf[np][k] = 0;
			pieces[np] = buf[np];
			np++;
			at += k;
		}
		sg_stop *s = make_stop(stops, 5, NULL, 0, 0);
		sg_stop_result r = feed_all(s, pieces, np, got);
		cr_assert_str_eq(got, want, "text '%s'", text);
		cr_assert_eq(r.stop_index, which, "text '%s'", text);
		cr_assert_eq(r.finish, which >= 0 ? SG_FINISH_STOP_STRING : SG_FINISH_NONE);
		sg_stop_free(s);
	}
}

Test(stop, eos_token_ends_with_held_text_but_not_its_own)
{
	const char *stops[] = {"###"};
	int32_t eos[] = {2, 106};
	sg_stop *s = make_stop(stops, 1, eos, 2, 0);
	sg_stop_result r;
	cr_assert(sg_stop_is_eos(s, 106));
	cr_assert(!sg_stop_is_eos(s, 3));
	sg_stop_next(s, 10, "ok #", 4, &r);
	cr_assert_eq(r.len, 3);
	sg_stop_next(s, 106, "<end_of_turn>", 13, &r);
	cr_assert_eq(r.finish, SG_FINISH_EOS);
	cr_assert_eq(r.len, 1);
	cr_assert_eq(r.text[0], '#');
	cr_assert_str_eq(sg_finish_str(r.finish), "eos");
	cr_assert_eq(sg_stop_n_tokens(s), 2);
	sg_stop_next(s, 11, "more", 4, &r);
	cr_assert_eq(r.len, 0, "nothing after a finish");
	cr_assert_eq(r.finish, SG_FINISH_EOS);
	sg_stop_free(s);
}

Test(stop, max_tokens_ends_on_the_last_token_and_flushes)
{
	const char *stops[] = {"STOP"};
	sg_stop *s = make_stop(stops, 1, NULL, 0, 3);
	sg_stop_result r;
	sg_stop_next(s, 1, "a", 1, &r);
	cr_assert_eq(r.finish, SG_FINISH_NONE);
	sg_stop_next(s, 2, "b", 1, &r);
	cr_assert_eq(r.finish, SG_FINISH_NONE);
	sg_stop_next(s, 3, "ST", 2, &r);
	cr_assert_eq(r.finish, SG_FINISH_LENGTH);
	cr_assert_eq(r.len, 2, "the held 'ST' is emitted at the end");
	cr_assert_str_eq(sg_finish_str(r.finish), "length");
	sg_stop_reset(s);
	sg_stop_next(s, 1, "xST", 3, &r);
	sg_stop_next(s, 2, "OP", 2, &r);
	cr_assert_eq(r.finish, SG_FINISH_STOP_STRING);
	sg_stop_next(s, 3, "", 0, &r);
	cr_assert_eq(r.finish, SG_FINISH_STOP_STRING, "a stop string completed before the limit wins");
	sg_stop_free(s);
}

Test(stop, rejects_bad_parameters_naming_them)
{
	sg_stop *s = NULL;
	const char *empty[] = {"ok", ""};
	sg_stop_params p = {.stop_strings = empty, .n_stop_strings = 2};
	cr_assert_eq(sg_stop_create(&p, &s), SG_ERR_INVALID_ARG);
	cr_assert(strstr(sg_last_error(), "stop string 1 is empty"));
	const char *bad[] = {"\xC3("};
	p = (sg_stop_params){.stop_strings = bad, .n_stop_strings = 1};
	cr_assert_eq(sg_stop_create(&p, &s), SG_ERR_INVALID_ARG);
	cr_assert(strstr(sg_last_error(), "not valid UTF-8"));
	int32_t eos[] = {-5};
	p = (sg_stop_params){.eos_ids = eos, .n_eos = 1};
	cr_assert_eq(sg_stop_create(&p, &s), SG_ERR_INVALID_ARG);
	cr_assert(strstr(sg_last_error(), "eos_ids[0] = -5"));
	p = (sg_stop_params){.max_tokens = -1};
	cr_assert_eq(sg_stop_create(&p, &s), SG_ERR_INVALID_ARG);
	cr_assert(strstr(sg_last_error(), "max_tokens = -1"));
	char *longs = malloc(SG_STOP_MAX_LEN + 2);
	memset(longs, 'x', SG_STOP_MAX_LEN + 1);
	longs[SG_STOP_MAX_LEN + 1] = 0;
	const char *lp[] = {longs};
	p = (sg_stop_params){.stop_strings = lp, .n_stop_strings = 1};
	cr_assert_eq(sg_stop_create(&p, &s), SG_ERR_INVALID_ARG);
	free(longs);
	cr_assert_null(s);
}

Test(stop, long_streams_keep_the_buffer_bounded_by_the_longest_stop_string)
{
	const char *stops[] = {"never-appears-here"};
	sg_stop *s = make_stop(stops, 1, NULL, 0, 0);
	sg_stop_result r;
	size_t total = 0;
	for (int i = 0; i < 10000; i++) {
		cr_assert_eq(sg_stop_text(s, "never-appears-her ", 18, &r), SG_OK);
		total += r.len;
	}
	cr_assert_eq(total, 18 * 10000, "a space breaks every partial match");
	sg_stop_free(s);
}

Test(stop, stop_string_with_a_nul_byte_is_matched_whole_when_its_length_is_given)
{
	/* "a\0b" (JSON's "a\u0000b"): cut at its NUL it would be "a" and stop at the first 'a'. */
	const char *stops[] = {"a\0b"};
	const size_t lens[] = {3};
	sg_stop_params p = {.stop_strings = stops, .stop_lens = lens, .n_stop_strings = 1};
	sg_stop *s = NULL;
	cr_assert_eq(sg_stop_create(&p, &s), SG_OK, "%s", sg_last_error());
	sg_stop_result r;
	cr_assert_eq(sg_stop_text(s, "xab", 3, &r), SG_OK);
	cr_assert_eq(r.finish, SG_FINISH_NONE, "'a' alone is not the stop string");
	cr_assert_eq(r.len, 3);
	cr_assert_eq(sg_stop_text(s, "ya", 2, &r), SG_OK);
	cr_assert_eq(r.len, 1, "the trailing 'a' may start the stop string: held back");
	cr_assert_eq(sg_stop_text(s, "\0bz", 3, &r), SG_OK);
	cr_assert_eq(r.finish, SG_FINISH_STOP_STRING);
	cr_assert_eq(r.stop_index, 0);
	cr_assert_eq(r.len, 0);
	sg_stop_free(s);
}
