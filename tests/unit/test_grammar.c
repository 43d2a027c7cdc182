/* Unit tests of src/text/grammar/grammar*: the JSON-object automaton, its limits, the token mask against a
 * slow oracle, the trie, and the reasoning gate. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <string.h>

#include "base/error.h"
#include "base/flags.h"
#include "grammar_oracle.h"
#include "text/grammar/grammar.h"
#include "text/grammar/token_trie.h"

/* 2 if s is a valid prefix, +1 if the end of turn is allowed after it. */
static int run_str(const sg_grammar *g, const char *s)
{
	sg_grammar_state *st;
	cr_assert_eq(sg_grammar_state_new(g, &st), SG_OK);
	int ok = sg_grammar_advance(st, (const uint8_t *)s, strlen(s)) == SG_OK;
	int r = ok ? 2 + sg_grammar_accepts_eos(st) : 0;
	sg_grammar_state_free(st);
	return r;
}

static sg_grammar *json_object_grammar(void)
{
	sg_grammar *g;
	cr_assert_eq(sg_grammar_json_object(&g), SG_OK);
	return g;
}

typedef struct {
	const char *text;
	int want; /* 0 rejected, 2 valid prefix, 3 complete */
} case_t;

static void run_cases(const sg_grammar *g, const case_t *c, int n)
{
	for (int i = 0; i < n; i++)
		cr_expect_eq(run_str(g, c[i].text), c[i].want, "'%s': want %d", c[i].text, c[i].want);
}

Test(grammar, json_object_requires_an_object_at_the_root)
{
	sg_grammar *g = json_object_grammar();
	case_t c[] = {
		{"{}", 3}, {" {}\n", 3}, {"[]", 0}, {"\"a\"", 0}, {"1", 0}, {"true", 0}, {"", 2},
		{"{", 2}, {"{}}", 0}, {"{} {}", 0}, {"{\"a\":{\"b\":[1,{}]}}", 3},
	};
	run_cases(g, c, sizeof(c) / sizeof(c[0]));
	sg_grammar_free(g);
}

Test(grammar, end_of_turn_only_after_the_root_object_closes)
{
	sg_grammar *g = json_object_grammar();
	case_t c[] = {{"{\"a\":1", 2}, {"{\"a\":1}", 3}, {"{\"a\":[1]", 2}, {"{\"a\":\"x", 2},
		      {"{\"a\":tru", 2}};
	run_cases(g, c, sizeof(c) / sizeof(c[0]));
	sg_grammar_free(g);
}

Test(grammar, numbers_follow_the_json_grammar_exactly)
{
	sg_grammar *g = json_object_grammar();
	case_t c[] = {
		{"{\"n\":0}", 3},      {"{\"n\":-0}", 3},     {"{\"n\":01}", 0},      {"{\"n\":1.}", 0},
		{"{\"n\":.5}", 0},     {"{\"n\":1.5}", 3},    {"{\"n\":1e5}", 3},     {"{\"n\":1E+5}", 3},
		{"{\"n\":1e-05}", 3},  {"{\"n\":1e}", 0},     {"{\"n\":1e+}", 0},     {"{\"n\":-}", 0},
		{"{\"n\":+1}", 0},     {"{\"n\":0x1}", 0},    {"{\"n\":1.5.2}", 0},   {"{\"n\":-0.0e0}", 3},
		{"{\"n\":NaN}", 0},    {"{\"n\":Infinity}", 0}, {"{\"n\":1 }", 3},    {"{\"n\":12", 2},
	};
	run_cases(g, c, sizeof(c) / sizeof(c[0]));
	sg_grammar_free(g);
}

Test(grammar, strings_validate_escapes_surrogate_pairs_and_utf8)
{
	sg_grammar *g = json_object_grammar();
	case_t c[] = {
		{"{\"s\":\"a\\n\\t\\\"\\\\\\/\\b\\f\\r\"}", 3},
		{"{\"s\":\"\\u00e9\\u0000\"}", 3},
		{"{\"s\":\"\\ud83d\\ude00\"}", 3}, /* a valid pair */
		{"{\"s\":\"\\uD83D\\uDE00\"}", 3},
		{"{\"s\":\"\\ud83d\"}", 0},        /* high surrogate alone */
		{"{\"s\":\"\\ud83dx\"}", 0},
		{"{\"s\":\"\\ud83d\\u0041\"}", 0}, /* high followed by a non-low */
		{"{\"s\":\"\\ude00\"}", 0},        /* lone low surrogate */
		{"{\"s\":\"\\x\"}", 0},
		{"{\"s\":\"\\u12g4\"}", 0},
		{"{\"s\":\"a\nb\"}", 0},           /* raw control character */
		{"{\"s\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"}", 3},
		{"{\"s\":\"\xc3\"}", 0},           /* cut sequence */
		{"{\"s\":\"\xc0\x80\"}", 0},       /* overlong */
		{"{\"s\":\"\xed\xa0\x80\"}", 0},   /* UTF-8 encoded surrogate */
		{"{\"s\":\"\xf4\x90\x80\x80\"}", 0}, /* above U+10FFFF */
		{"{\"s\":\"\xff\"}", 0},
		{"{\"\\u00e9\":1}", 3},            /* escapes in keys too */
	};
	run_cases(g, c, sizeof(c) / sizeof(c[0]));
	sg_grammar_free(g);
}

Test(grammar, whitespace_runs_are_bounded_outside_strings_only)
{
	sg_grammar *g = json_object_grammar();
	char buf[128];
	snprintf(buf, sizeof(buf), "{%*s}", SG_GRAMMAR_MAX_WS, "");
	cr_expect_eq(run_str(g, buf), 3);
	snprintf(buf, sizeof(buf), "{%*s}", SG_GRAMMAR_MAX_WS + 1, "");
	cr_expect_eq(run_str(g, buf), 0);
	snprintf(buf, sizeof(buf), "{\"a\"%*s:%*s1%*s,%*s\"b\":2}", 8, "", 8, "", 8, "", 8, "");
	cr_expect_eq(run_str(g, buf), 3, "each position has its own run");
	snprintf(buf, sizeof(buf), "{\"a\":\"%*s\"}", 40, "");
	cr_expect_eq(run_str(g, buf), 3, "spaces inside a string are content");
	snprintf(buf, sizeof(buf), "{}%*s", SG_GRAMMAR_MAX_WS + 1, "");
	cr_expect_eq(run_str(g, buf), 0, "trailing whitespace is bounded too");
	sg_grammar_free(g);
}

Test(grammar, nesting_beyond_the_limit_is_rejected)
{
	sg_grammar *g = json_object_grammar();
	char buf[512];
	size_t k = 0;
	k += (size_t)snprintf(buf + k, sizeof(buf) - k, "{\"a\":");
	for (int i = 1; i < SG_GRAMMAR_MAX_NEST; i++) buf[k++] = '[';
	buf[k] = 0;
	cr_expect_eq(run_str(g, buf), 2, "64 levels are allowed");
	buf[k++] = '[';
	buf[k] = 0;
	cr_expect_eq(run_str(g, buf), 0, "the 65th level is not");
	sg_grammar_free(g);
}

Test(grammar, rejected_bytes_leave_the_state_unchanged)
{
	sg_grammar *g = json_object_grammar();
	sg_grammar_state *s;
	cr_assert_eq(sg_grammar_state_new(g, &s), SG_OK);
	cr_assert_eq(sg_grammar_advance(s, (const uint8_t *)"{\"a\":", 5), SG_OK);
	sg_status st = sg_grammar_advance(s, (const uint8_t *)"1x", 2);
	cr_expect_eq(st, SG_ERR_FORMAT);
	cr_expect(strstr(sg_last_error(), "byte 1") != NULL, "%s", sg_last_error());
	cr_expect_eq(sg_grammar_advance(s, (const uint8_t *)"2}", 2), SG_OK);
	cr_expect(sg_grammar_accepts_eos(s));
	cr_expect(!sg_grammar_allows_byte(s, 'x'));
	cr_expect(sg_grammar_allows_byte(s, ' '));
	sg_grammar_state_free(s);
	sg_grammar_free(g);
}

Test(grammar, trie_build_rejects_ids_outside_the_vocabulary)
{
	const uint8_t *tok[] = {(const uint8_t *)"a", (const uint8_t *)"b"};
	uint32_t len[] = {1, 1};
	int bad[] = {2};
	sg_token_trie *t = NULL;
	cr_expect_eq(sg_token_trie_build(tok, len, 2, bad, 1, NULL, 0, &t), SG_ERR_INVALID_ARG);
	cr_expect_eq(sg_token_trie_build(tok, len, 2, NULL, 0, bad, 1, &t), SG_ERR_INVALID_ARG);
	cr_expect_null(t);
}

Test(grammar, special_and_empty_tokens_are_never_allowed_and_eot_only_when_complete)
{
	const uint8_t *tok[] = {(const uint8_t *)"{", (const uint8_t *)"}", (const uint8_t *)"",
				(const uint8_t *)"<eot>", (const uint8_t *)"{"};
	uint32_t len[] = {1, 1, 0, 5, 1};
	int special[] = {4}, eot[] = {3};
	sg_token_trie *t;
	cr_assert_eq(sg_token_trie_build(tok, len, 5, special, 1, eot, 1, &t), SG_OK);
	sg_grammar *g = json_object_grammar();
	sg_grammar_state *s;
	cr_assert_eq(sg_grammar_state_new(g, &s), SG_OK);
	uint32_t m[1];
	cr_assert_eq(sg_grammar_mask(s, t, m), SG_OK);
	cr_expect_eq(m[0], 1u << 0, "only '{' at the start (not the special copy, not eot)");
	sg_grammar_advance(s, (const uint8_t *)"{", 1);
	sg_grammar_mask(s, t, m);
	cr_expect_eq(m[0], 1u << 1);
	sg_grammar_advance(s, (const uint8_t *)"}", 1);
	sg_grammar_mask(s, t, m);
	cr_expect_eq(m[0], 1u << 3, "eot after the root closed");
	sg_grammar_state_free(s);
	sg_grammar_free(g);
	sg_token_trie_free(t);
}

Test(grammar, mask_equals_the_oracle_on_random_walks_in_json_object_mode)
{
	rvocab v;
	rv_make(&v, 12345, 300);
	sg_grammar *g = json_object_grammar();
	uint64_t rng = 99;
	uint8_t out[4096];
	int completed = 0;
	for (int walk = 0; walk < 12; walk++) {
		size_t n;
		int done = random_walk(g, &v, &rng, 120, 40 + walk * 3, 1, out, sizeof(out), &n);
		if (!done) continue;
		completed++;
		json_error_t e;
		json_t *j = json_loadb((const char *)out, n, JSON_ALLOW_NUL, &e);
		cr_assert_not_null(j, "complete output does not parse: '%.*s': %s", (int)n, out, e.text);
		cr_expect(json_is_object(j));
		json_decref(j);
	}
	cr_expect_geq(completed, 8, "most walks should complete (%d did)", completed);
	sg_grammar_free(g);
	rv_free(&v);
}

Test(grammar, plain_token_fast_path_respects_string_length_budgets)
{
	/* tokens of 1, 2 and 3 code points; a string of at most 3 */
	const uint8_t *tok[] = {(const uint8_t *)"\"", (const uint8_t *)"a",
				(const uint8_t *)"\xc3\xa9\xc3\xa9", (const uint8_t *)"abc",
				(const uint8_t *)"a\""};
	uint32_t len[] = {1, 1, 4, 3, 2};
	sg_token_trie *t;
	cr_assert_eq(sg_token_trie_build(tok, len, 5, NULL, 0, NULL, 0, &t), SG_OK);
	sg_grammar *g = sg_grammar_new();
	int str = sg_grammar_add_string(g, 0, 3);
	cr_assert_eq(sg_grammar_finish(g, str), SG_OK);
	sg_grammar_state *s;
	sg_grammar_state_new(g, &s);
	uint32_t m[1];
	sg_grammar_advance(s, (const uint8_t *)"\"", 1);
	sg_grammar_mask(s, t, m);
	cr_expect_eq(m[0], 0x1Fu, "all five fit in 3");
	sg_grammar_advance(s, (const uint8_t *)"a", 1);
	sg_grammar_mask(s, t, m);
	cr_expect_eq(m[0], (1u << 0) | (1u << 1) | (1u << 2) | (1u << 4), "2 left: not 'abc'");
	sg_grammar_advance(s, (const uint8_t *)"aa", 2);
	sg_grammar_mask(s, t, m);
	cr_expect_eq(m[0], 1u << 0, "0 left: only the closing quote");
	sg_grammar_state_free(s);
	sg_grammar_free(g);
	sg_token_trie_free(t);
}

Test(grammar, gate_leaves_reasoning_unconstrained_then_constrains_the_answer)
{
	rvocab v;
	rv_make(&v, 7, 50);
	sg_grammar *g = json_object_grammar();
	sg_grammar_gate *gt;
	cr_assert_eq(sg_grammar_gate_new(g, "</think>", 0, &gt), SG_OK);
	uint32_t *m = calloc((size_t)v.trie->words, 4);
	sg_grammar_gate_mask(gt, v.trie, m);
	cr_expect(bit(m, 'x') && bit(m, '['), "anything goes while reasoning");
	cr_expect(!sg_grammar_gate_accepts_eos(gt));
	cr_expect_eq(sg_grammar_gate_advance(gt, (const uint8_t *)"hmm [not json] </th", 19), SG_OK);
	cr_expect(!sg_grammar_gate_constrained(gt));
	cr_expect_eq(sg_grammar_gate_advance(gt, (const uint8_t *)"ink>\n{", 6), SG_OK,
		     "the marker split across tokens; the bytes after it go to the grammar");
	cr_expect(sg_grammar_gate_constrained(gt));
	sg_grammar_gate_mask(gt, v.trie, m);
	cr_expect(!bit(m, 'x') && bit(m, '"') && bit(m, '}'));
	cr_expect_eq(sg_grammar_gate_advance(gt, (const uint8_t *)"x", 1), SG_ERR_FORMAT);
	cr_expect_eq(sg_grammar_gate_advance(gt, (const uint8_t *)"}", 1), SG_OK);
	cr_expect(sg_grammar_gate_accepts_eos(gt));
	sg_grammar_gate_free(gt);
	cr_assert_eq(sg_grammar_gate_new(g, "</think>", 1, &gt), SG_OK);
	cr_expect(sg_grammar_gate_constrained(gt), "thinking disabled: constrained from the start");
	cr_expect_eq(sg_grammar_gate_advance(gt, (const uint8_t *)"x", 1), SG_ERR_FORMAT);
	sg_grammar_gate_free(gt);
	free(m);
	sg_grammar_free(g);
	rv_free(&v);
}

Test(grammar, unresolved_and_self_referencing_grammars_are_refused)
{
	sg_grammar *g = sg_grammar_new();
	int r = sg_grammar_add_ref(g);
	cr_expect_eq(sg_grammar_finish(g, r), SG_ERR_INVALID_ARG);
	sg_grammar_free(g);
	g = sg_grammar_new();
	r = sg_grammar_add_ref(g);
	int alts[] = {r, sg_grammar_add_literal(g, "null")};
	int u = sg_grammar_add_union(g, alts, 2);
	sg_grammar_set_ref(g, r, u);
	cr_expect_eq(sg_grammar_finish(g, u), SG_ERR_INVALID_ARG);
	cr_expect(strstr(sg_last_error(), "without consuming") != NULL, "%s", sg_last_error());
	sg_grammar_free(g);
}

Test(grammar, optional_repetition_follows_both_continuing_and_ending)
{
	sg_grammar *g = sg_grammar_new();
	int a = sg_grammar_add_literal(g, "<a>"), b = sg_grammar_add_literal(g, "<b>");
	int opt = sg_grammar_add_repeat(g, a, 0, 1, 0);
	int seq[] = {opt, b};
	int root = sg_grammar_add_seq(g, seq, 2, 0);
	cr_assert_eq(sg_grammar_finish(g, root), SG_OK);
	cr_expect_eq(run_str(g, "<a><b>"), 3);
	cr_expect_eq(run_str(g, "<b>"), 3, "the shared '<' must not commit to the repetition");
	cr_expect_eq(run_str(g, "<a><a>"), 0);
	sg_grammar_free(g);
}

Test(grammar, raw_text_ends_at_the_first_terminator)
{
	sg_grammar *g = sg_grammar_new();
	int r = sg_grammar_add_raw_until(g, "\n</p>\n");
	int seq[] = {r, sg_grammar_add_literal(g, "!")};
	cr_assert_eq(sg_grammar_finish(g, sg_grammar_add_seq(g, seq, 2, 0)), SG_OK);
	cr_expect_eq(run_str(g, "any \"text\" \\ \n</p\n</p>\n!"), 3);
	cr_expect_eq(run_str(g, "x\n\n</p>\n!"), 3, "a partial match restarts correctly");
	cr_expect_eq(run_str(g, "x\n</p>\nx"), 0, "the first terminator ends the text");
	cr_expect_eq(run_str(g, "\xc3\n</p>\n"), 0, "text is valid UTF-8");
	sg_grammar_free(g);
}

/* The fast paths (plain-token bitmap, whole plain subtrees) against the plain trie walk with
 * SARAGOSSA_GRAMMAR_FAST_MASK=0, step by step along random walks. */
Test(grammar, fast_mask_equals_the_full_walk_with_the_kill_switch_off)
{
	rvocab v;
	rv_make(&v, 2024, 400);
	sg_grammar *g = sg_grammar_new();
	int s1 = sg_grammar_add_string(g, 0, 3), s2 = sg_grammar_add_string(g, 2, 6);
	int u = sg_grammar_add_union(g, (int[]){s1, s2}, 2);
	int arr = sg_grammar_add_array(g, sg_grammar_add_string(g, 0, 4), 0, -1);
	sg_grammar_prop props[] = {{"a", 1, u, 1}, {"b", 1, arr, 1}, {"c", 1, sg_grammar_add_string(g, 0, -1), 0}};
	int obj = sg_grammar_add_object(g, props, 3, sg_grammar_add_any(g));
	cr_assert_eq(sg_grammar_finish(g, obj), SG_OK, "%s", sg_last_error());
	setenv("SARAGOSSA_GRAMMAR_FAST_MASK", "0", 1);
	sg_flags_reload();
	sg_grammar_state *slow, *fast;
	cr_assert_eq(sg_grammar_state_new(g, &slow), SG_OK);
	unsetenv("SARAGOSSA_GRAMMAR_FAST_MASK");
	sg_flags_reload();
	cr_assert_eq(sg_grammar_state_new(g, &fast), SG_OK);
	uint32_t *m1 = calloc((size_t)v.trie->words, 4), *m2 = calloc((size_t)v.trie->words, 4);
	int *allowed = malloc((size_t)v.n * sizeof(int));
	uint64_t rng = 77;
	int steps = 0;
	for (int walk = 0; walk < 40; walk++) {
		sg_grammar_state_reset(slow);
		sg_grammar_state_reset(fast);
		for (int step = 0; step < 60; step++, steps++) {
			sg_grammar_mask(slow, v.trie, m1);
			sg_grammar_mask(fast, v.trie, m2);
			cr_assert_arr_eq(m1, m2, (size_t)v.trie->words * 4, "walk %d step %d", walk, step);
			int na = 0;
			for (int t = 0; t < v.n; t++)
				if (bit(m1, t) && t != v.eot) allowed[na++] = t;
			if (na == 0) break;
			int pick = allowed[rng_int(&rng, na)];
			sg_grammar_advance(slow, v.tok[pick], v.len[pick]);
			sg_grammar_advance(fast, v.tok[pick], v.len[pick]);
		}
	}
	cr_expect_gt(steps, 500);
	free(m1);
	free(m2);
	free(allowed);
	sg_grammar_state_free(slow);
	sg_grammar_state_free(fast);
	sg_grammar_free(g);
	rv_free(&v);
}
