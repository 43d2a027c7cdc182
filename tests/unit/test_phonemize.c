/* Unit tests of src/audio/phonemize: phonemes and ids identical to Piper's own phonemizer
 * (piper-phonemize) on a set of texts (tests/fixtures/piper/phonemes.json, made by
 * tools/make_piper_fixtures.py), the id layout, and bad input. */
#include <criterion/criterion.h>

#include <jansson.h>
#include <string.h>
#include <utf8proc.h>

#include "audio/phonemize.h"
#include "base/alloc.h"
#include "base/error.h"

#define FIX "tests/fixtures/piper/phonemes.json"

static void load_map(json_t *root, sg_phoneme_map *m)
{
	memset(m, 0, sizeof *m);
	const char *key;
	json_t *v;
	json_object_foreach(json_object_get(root, "phoneme_id_map"), key, v)
	{
		int64_t ids[8];
		size_t n = json_array_size(v);
		for (size_t i = 0; i < n && i < 8; i++) ids[i] = json_integer_value(json_array_get(v, i));
		cr_assert_eq(sg_phoneme_map_add(m, key, ids, n), SG_OK, "%s", sg_last_error());
	}
	cr_assert_eq(sg_phoneme_map_finish(m), SG_OK);
}

static void utf8_of(const uint32_t *cp, size_t n, char *buf, size_t cap)
{
	size_t k = 0;
	for (size_t i = 0; i < n && k + 5 < cap; i++) k += (size_t)utf8proc_encode_char((utf8proc_int32_t)cp[i], (utf8proc_uint8_t *)buf + k);
	buf[k] = 0;
}

Test(phonemize, ids_identical_to_piper_phonemize)
{
	json_error_t err;
	json_t *root = json_load_file(FIX, 0, &err);
	cr_assert_not_null(root, "%s", err.text);
	sg_phoneme_map m;
	load_map(root, &m);
	const char *voice = json_string_value(json_object_get(root, "voice"));
	json_t *cases = json_object_get(root, "cases");
	cr_assert_gt(json_array_size(cases), 5);
	size_t i;
	json_t *c;
	json_array_foreach(cases, i, c)
	{
		const char *text = json_string_value(json_object_get(c, "text"));
		json_t *want_ph = json_object_get(c, "phonemes"), *want_ids = json_object_get(c, "ids");
		sg_phonemes ph;
		cr_assert_eq(sg_phonemize(voice, text, &ph), SG_OK, "%s", sg_last_error());
		cr_expect_eq((size_t)ph.n_sentences, json_array_size(want_ph), "'%s': %d sentences, piper has %zu", text, ph.n_sentences,
			     json_array_size(want_ph));
		for (int s = 0; s < ph.n_sentences && (size_t)s < json_array_size(want_ph); s++) {
			char got[2048];
			const uint32_t *cp = ph.cp + ph.sentence[s];
			size_t n = ph.sentence[s + 1] - ph.sentence[s];
			utf8_of(cp, n, got, sizeof got);
			cr_expect_str_eq(got, json_string_value(json_array_get(want_ph, (size_t)s)), "'%s' sentence %d", text, s);
			int64_t *ids;
			size_t n_ids;
			cr_assert_eq(sg_phonemes_to_ids(&m, cp, n, &ids, &n_ids, NULL), SG_OK);
			json_t *w = json_array_get(want_ids, (size_t)s);
			int same = n_ids == json_array_size(w);
			for (size_t k = 0; same && k < n_ids; k++) same = ids[k] == json_integer_value(json_array_get(w, k));
			cr_expect(same, "'%s' sentence %d: ids differ from piper's", text, s);
			sg_free(ids);
		}
		sg_phonemes_free(&ph);
	}
	sg_phoneme_map_free(&m);
	json_decref(root);
}

Test(phonemize, ids_are_bos_pad_interspersed_eos)
{
	sg_phoneme_map m = {0};
	int64_t a = 1, b = 2, e = 3, p = 0, x = 7;
	cr_assert_eq(sg_phoneme_map_add(&m, "^", &a, 1), SG_OK);
	cr_assert_eq(sg_phoneme_map_add(&m, "$", &e, 1), SG_OK);
	cr_assert_eq(sg_phoneme_map_add(&m, "_", &p, 1), SG_OK);
	cr_assert_eq(sg_phoneme_map_add(&m, "\xc9\x99", &x, 1), SG_OK); /* ə */
	cr_assert_eq(sg_phoneme_map_add(&m, "ab", &b, 1), SG_ERR_FORMAT);
	cr_assert_eq(sg_phoneme_map_finish(&m), SG_OK);
	uint32_t cp[] = {0x259, 'z', 0x259};
	int64_t *ids;
	size_t n;
	int missing;
	cr_assert_eq(sg_phonemes_to_ids(&m, cp, 3, &ids, &n, &missing), SG_OK);
	int64_t want[] = {1, 0, 7, 0, 7, 0, 3};
	cr_assert_eq(n, 7);
	cr_assert_eq(missing, 1);
	cr_assert(!memcmp(ids, want, sizeof want));
	sg_free(ids);
	sg_phoneme_map_free(&m);
}

Test(phonemize, bad_input_gives_clear_errors)
{
	sg_phonemes ph;
	cr_assert_eq(sg_phonemize("no-such-voice-xx", "Hello.", &ph), SG_ERR_NOT_FOUND);
	cr_assert(strstr(sg_last_error(), "no-such-voice-xx"), "%s", sg_last_error());
	cr_assert_eq(sg_phonemize("en-us", "bad \xff utf8", &ph), SG_ERR_INVALID_ARG);
	/* characters espeak-ng does not read (private use, zero width) give no sentences, not an error */
	cr_assert_eq(sg_phonemize("en-us", "\xee\x80\x80 \xe2\x80\x8b \xee\x80\x81", &ph), SG_OK, "%s", sg_last_error());
	cr_assert_eq(ph.n_sentences, 0);
	sg_phonemes_free(&ph);
	cr_assert_eq(sg_phonemize("en-us", "Still works.", &ph), SG_OK, "%s", sg_last_error());
	cr_assert_eq(ph.n_sentences, 1);
	sg_phonemes_free(&ph);
}
