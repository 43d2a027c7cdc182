/* Shared by test_grammar.c and test_json_schema.c: a random vocabulary of byte strings, a slow
 * oracle for the token mask, and a random walk that generates complete outputs through the mask.
 *
 * The oracle is deliberately naive: at every step it rebuilds the state from the start of the
 * output byte by byte, then tries each token's bytes one at a time on a copy; a token is allowed
 * iff every byte is accepted. The mask under test walks the trie (and the plain-token bitmaps),
 * so the two share only the per-byte automaton. */
#ifndef SG_TEST_GRAMMAR_ORACLE_H
#define SG_TEST_GRAMMAR_ORACLE_H

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/grammar/grammar.h"
#include "text/grammar/token_trie.h"

#define UNUSED __attribute__((unused))

typedef struct {
	uint8_t **tok;
	uint32_t *len;
	int n;
	int eot, special;
	sg_token_trie *trie;
} rvocab;

static uint64_t rng_next(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

static UNUSED int rng_int(uint64_t *s, int n) { return (int)(rng_next(s) % (uint64_t)n); }

static void rv_add(rvocab *v, const char *s, size_t n)
{
	v->tok[v->n] = malloc(n + 1);
	memcpy(v->tok[v->n], s, n);
	v->len[v->n] = (uint32_t)n;
	v->n++;
}

/* Every single byte, JSON punctuation pairs, escapes (incl. surrogate halves), keywords and their
 * pieces, numbers, multi-byte UTF-8 (complete and cut), whitespace runs, plus random
 * concatenations of those; one end-of-turn and one other special token. */
static UNUSED void rv_make(rvocab *v, uint64_t seed, int n_random)
{
	static const char *pieces[] = {
		"{", "}", "[", "]", ":", ",", "\"", "{\"", "\":", "\",", "\"}", "},", "[{", "}]", "]}",
		"\":\"", "\\", "\\n", "\\\"", "\\u", "\\u00e9", "\\ud83d", "\\ude00", "\\uD83D", "\\uDE00",
		"\\u0041", "true", "false", "null", "tr", "ue", "fa", "lse", "nu", "ll", "0", "1", "12",
		"-", "-1", ".", "0.", ".5", "e", "E", "e+", "e-", "10", "99", "123", "-0", "00", " ",
		"  ", "    ", "\n", "\n\n", "\t", " \"", " {", " [", "a", "b", "ab", "name", "age", "x", "y",
		"k", "v", "w", "tags", "next", "id", "\xc3\xa9", "\xc3", "\xa9", "\xf0\x9f\x98\x80",
		"\xf0\x9f", "\x98\x80", "\xe2\x82\xac", "\xed\xa0\x80", "\xc0\x80", "hello world",
		"<tool_call>", "</tool_call>", "<", ">", "/", "tool", "_call", "arguments", "\"name\"",
		"\"arguments\"", "get_weather", "city", "Paris", "</think>", "think", "reason",
	};
	int np = (int)(sizeof(pieces) / sizeof(pieces[0]));
	int cap = 256 + np + n_random + 2;
	v->tok = calloc((size_t)cap, sizeof(uint8_t *));
	v->len = calloc((size_t)cap, sizeof(uint32_t));
	v->n = 0;
	for (int b = 0; b < 256; b++) {
		char c = (char)b;
		rv_add(v, &c, 1);
	}
	for (int i = 0; i < np; i++) rv_add(v, pieces[i], strlen(pieces[i]));
	uint64_t s = seed | 1;
	for (int i = 0; i < n_random; i++) {
		char buf[64];
		size_t k = 0;
		int parts = 1 + rng_int(&s, 3);
		for (int p = 0; p < parts; p++) {
			const char *q = pieces[rng_int(&s, np)];
			size_t l = strlen(q);
			if (k + l < sizeof(buf)) {
				memcpy(buf + k, q, l);
				k += l;
			}
		}
		rv_add(v, buf, k);
	}
	v->eot = v->n;
	rv_add(v, "<eot>", 5);
	v->special = v->n;
	rv_add(v, "<special>", 9);
	int specials[] = {v->special};
	int eots[] = {v->eot};
	sg_status st = sg_token_trie_build((const uint8_t *const *)v->tok, v->len, v->n, specials, 1,
					   eots, 1, &v->trie);
	cr_assert_eq(st, SG_OK, "%s", sg_last_error());
}

static UNUSED void rv_free(rvocab *v)
{
	for (int i = 0; i < v->n; i++) free(v->tok[i]);
	free(v->tok);
	free(v->len);
	sg_token_trie_free(v->trie);
}

static int bit(const uint32_t *bits, int i) { return (bits[i >> 5] >> (i & 31)) & 1; }

/* Checks the mask at the state after out[0..n) against the oracle; fails the test on the first
 * token where they differ. */
static UNUSED void oracle_check(const sg_grammar *g, const rvocab *v, const uint8_t *out, size_t n,
				const uint32_t *mask)
{
	sg_grammar_state *base, *s;
	cr_assert_eq(sg_grammar_state_new(g, &base), SG_OK);
	cr_assert_eq(sg_grammar_state_new(g, &s), SG_OK);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(sg_grammar_advance(base, &out[i], 1), SG_OK, "oracle: prefix byte %zu", i);
	for (int t = 0; t < v->n; t++) {
		int want;
		if (t == v->eot) {
			want = sg_grammar_accepts_eos(base);
		} else if (t == v->special || v->len[t] == 0) {
			want = 0;
		} else {
			sg_grammar_state_copy(s, base);
			want = 1;
			for (uint32_t j = 0; j < v->len[t] && want; j++)
				want = sg_grammar_advance(s, &v->tok[t][j], 1) == SG_OK;
		}
		if (want != bit(mask, t))
			cr_assert_fail("mask differs from oracle for token %d ('%.*s') after %zu bytes "
				 "'%.*s': oracle %d, mask %d",
				 t, (int)v->len[t], (const char *)v->tok[t], n, (int)n, (const char *)out,
				 want, bit(mask, t));
	}
	sg_grammar_state_free(s);
	sg_grammar_state_free(base);
}

/* Closers first: once past the step budget the walk prefers tokens that tend to finish a
 * document, so walks terminate. */
static int closer_rank(const rvocab *v, int t)
{
	static const char *pref[] = {"<eot>", "\"", "}", "]", "0", "1", "null", "true", "a", ":", ","};
	for (int i = 0; i < (int)(sizeof(pref) / sizeof(pref[0])); i++)
		if (v->len[t] == strlen(pref[i]) && memcmp(v->tok[t], pref[i], v->len[t]) == 0) return i;
	return 100;
}

/* Random walk of up to max_steps tokens through the mask; with check, every step's mask is
 * compared with the oracle. Returns 1 and the output in out/out_len if the end of turn was
 * reached. */
static UNUSED int random_walk(const sg_grammar *g, const rvocab *v, uint64_t *rng, int max_steps,
			      int budget, int check, uint8_t *out, size_t out_cap, size_t *out_len)
{
	sg_grammar_state *s;
	cr_assert_eq(sg_grammar_state_new(g, &s), SG_OK);
	uint32_t *mask = calloc((size_t)v->trie->words, 4);
	int *allowed = malloc((size_t)v->n * sizeof(int));
	size_t n = 0;
	int done = 0;
	for (int step = 0; step < max_steps && !done; step++) {
		cr_assert_eq(sg_grammar_mask(s, v->trie, mask), SG_OK);
		if (check) oracle_check(g, v, out, n, mask);
		int na = 0;
		for (int t = 0; t < v->n; t++)
			if (bit(mask, t)) allowed[na++] = t;
		cr_assert(na > 0, "dead end: no token allowed after '%.*s'", (int)n, (const char *)out);
		int pick = allowed[rng_int(rng, na)];
		if (step >= budget) {
			int best = 1000;
			for (int i = 0; i < na; i++) {
				int r = closer_rank(v, allowed[i]);
				if (r < best) {
					best = r;
					pick = allowed[i];
				}
			}
		}
		if (pick == v->eot) {
			done = 1;
			break;
		}
		if (n + v->len[pick] > out_cap) break;
		cr_assert_eq(sg_grammar_advance(s, v->tok[pick], v->len[pick]), SG_OK,
			     "a masked-in token was rejected: %s", sg_last_error());
		memcpy(out + n, v->tok[pick], v->len[pick]);
		n += v->len[pick];
	}
	*out_len = n;
	free(mask);
	free(allowed);
	sg_grammar_state_free(s);
	return done;
}

#endif
