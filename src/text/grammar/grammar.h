/* Constrained decoding: a byte-level pushdown automaton over JSON (and tool-call markup) that
 * says, after any prefix of output bytes, which next bytes keep the output a valid prefix of the
 * language, and - through a token trie - which vocabulary tokens do.
 *
 * A grammar is an immutable graph of nodes (object, array, string, number, literal set, union,
 * reference, sequence, repetition) built once per request by the JSON Schema compiler
 * (json_schema.h) or by sg_grammar_json_object(). A state is a small set of parse stacks (a
 * union whose alternatives share a prefix keeps one stack per live alternative, deduplicated),
 * so the automaton is exact for anyOf without backtracking.
 *
 * Limits, all enforced by rejecting the byte that would exceed them (the model is then forced to
 * close what is open):
 *   SG_GRAMMAR_MAX_NEST   nested objects/arrays (64)
 *   SG_GRAMMAR_MAX_WS     consecutive JSON whitespace bytes between tokens (8), so a model
 *                         cannot loop on blanks forever; whitespace inside strings is content
 *   SG_GRAMMAR_MAX_DIGITS digits in the integer and in the fraction part of a number (32)
 *   SG_GRAMMAR_MAX_EXP_DIGITS digits of an exponent (2), so every number is a finite double
 *   SG_GRAMMAR_MAX_STACKS live alternatives at once (32); more sets sg_grammar_state_overflowed()
 */
#ifndef SG_TEXT_GRAMMAR_H
#define SG_TEXT_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "saragossa.h"
#include "text/grammar/token_trie.h"

#define SG_GRAMMAR_MAX_NEST 64
#define SG_GRAMMAR_MAX_WS 8
#define SG_GRAMMAR_MAX_DIGITS 32
#define SG_GRAMMAR_MAX_EXP_DIGITS 2
#define SG_GRAMMAR_MAX_STACKS 32
#define SG_GRAMMAR_MAX_FRAMES 80   /* frames of one stack: nesting plus sequence/leaf frames */
#define SG_GRAMMAR_MAX_TOTAL 1024  /* frames of all stacks of one state */

typedef struct sg_grammar sg_grammar;
typedef struct sg_grammar_state sg_grammar_state;

/* ---- building (used by the schema compiler and the tool-call grammars) ----
 *
 * Every sg_grammar_add_* returns the new node's id. Building has a sticky error: when an
 * allocation fails or an argument is out of range the call returns node 0 (the "never" node)
 * and sg_grammar_finish() reports the first failure, so builders need not check every call. */

sg_grammar *sg_grammar_new(void);
void sg_grammar_free(sg_grammar *g);

int sg_grammar_add_never(sg_grammar *g); /* matches nothing (the `false` schema); always id 0 */
int sg_grammar_add_any(sg_grammar *g);   /* any JSON value (shared node, built once) */
/* A JSON string of min_len..max_len code points (max_len < 0: unbounded). */
int sg_grammar_add_string(sg_grammar *g, int64_t min_len, int64_t max_len);
/* A JSON number, or an integer (no fraction, no exponent) within [lo, hi] when bounded. */
int sg_grammar_add_number(sg_grammar *g, int integer, int bounded, int64_t lo, int64_t hi);
/* A decimal with a mandatory fraction and no exponent ("12.5"), negative ("-12.5") or not, whose
 * integer part (its magnitude) lies in [lo, hi]: how bounds on non-integer numbers are enforced. */
int sg_grammar_add_decimal(sg_grammar *g, int negative, int64_t lo, int64_t hi);
/* Exactly one of n byte strings (copied; duplicates merged). Used for enum, const, true/false/
 * null, tool-call markers. */
int sg_grammar_add_literals(sg_grammar *g, const char *const *s, const size_t *len, int n);
int sg_grammar_add_literal(sg_grammar *g, const char *s); /* one NUL-terminated literal */
/* Any one of the alternatives (anyOf, oneOf, type arrays). */
int sg_grammar_add_union(sg_grammar *g, const int *alts, int n);
/* A forward reference, resolved by sg_grammar_set_ref() before finish ($ref, recursion). */
int sg_grammar_add_ref(sg_grammar *g);
void sg_grammar_set_ref(sg_grammar *g, int ref, int target);
/* A JSON array of min..max items of node `items` (max < 0: unbounded). */
int sg_grammar_add_array(sg_grammar *g, int items, int64_t min, int64_t max);

/* One declared property of an object. name is the decoded property name (UTF-8). */
typedef struct sg_grammar_prop {
	const char *name;
	size_t name_len;
	int node;     /* the value's node; 0 (never) means the property may not appear */
	int required;
} sg_grammar_prop;
/* A JSON object whose declared properties appear in the given order (each optional one may be
 * skipped, each required one must appear), followed by any number of additional properties of
 * node `additional` (< 0: none allowed) whose names differ from every declared name and carry
 * no backslash escapes. With no declared properties the keys are any JSON strings. */
int sg_grammar_add_object(sg_grammar *g, const sg_grammar_prop *props, int n, int additional);
/* Raw text (any valid UTF-8) ending at the first occurrence of term, term included: the values
 * of XML-style tool calls. term: 1..64 bytes. */
int sg_grammar_add_raw_until(sg_grammar *g, const char *term);
/* The children one after another; ws: allow bounded JSON whitespace between them. */
int sg_grammar_add_seq(sg_grammar *g, const int *children, int n, int ws);
/* min..max repetitions of child (max < 0: unbounded); once min is reached, ending is always an
 * alternative (both are followed); ws as for seq. */
int sg_grammar_add_repeat(sg_grammar *g, int child, int64_t min, int64_t max, int ws);

/* Seals the grammar with its root node: checks that every reference is resolved and that no
 * cycle of references/unions can loop without consuming a byte. Returns the sticky error if a
 * build call failed. After success the grammar is immutable and may be shared by threads. */
sg_status sg_grammar_finish(sg_grammar *g, int root);

/* The grammar of `response_format: {"type":"json_object"}`: one JSON object (root object
 * required), optional bounded whitespace around it, end of turn only after it closes. */
sg_status sg_grammar_json_object(sg_grammar **out);

/* ---- matching ---- */

/* A fresh state at the start of the output; owns scratch for masking (one per request). */
sg_status sg_grammar_state_new(const sg_grammar *g, sg_grammar_state **out);
void sg_grammar_state_free(sg_grammar_state *s);
/* Returns the state to the start of the output. */
void sg_grammar_state_reset(sg_grammar_state *s);
/* Copies src (same grammar) into dst. */
void sg_grammar_state_copy(sg_grammar_state *dst, const sg_grammar_state *src);

/* Feeds bytes. Returns SG_OK if the output is still a valid prefix; otherwise SG_ERR_FORMAT
 * naming the offset of the first rejected byte, and the state is left unchanged. */
sg_status sg_grammar_advance(sg_grammar_state *s, const uint8_t *bytes, size_t n);
/* 1 if feeding byte b keeps the prefix valid (does not change the state). */
int sg_grammar_allows_byte(const sg_grammar_state *s, uint8_t b);
/* 1 if the output so far is a complete sentence: end of turn is allowed now. */
int sg_grammar_accepts_eos(const sg_grammar_state *s);
/* 1 if no byte can follow (complete and nothing more is allowed). */
int sg_grammar_is_complete(const sg_grammar_state *s);
/* 1 if an ambiguity beyond SG_GRAMMAR_MAX_STACKS alternatives was cut since the last reset. */
int sg_grammar_state_overflowed(const sg_grammar_state *s);

/* Writes the allowed-token bitmap: bit i of bits[i / 32] is set iff token i's bytes keep the
 * output a valid prefix (end-of-turn tokens: iff sg_grammar_accepts_eos). Special tokens are
 * never allowed; empty tokens never. bits has sg_token_trie_words(t) words. The state is not
 * changed (its scratch is used). */
sg_status sg_grammar_mask(sg_grammar_state *s, const sg_token_trie *t, uint32_t *bits);

/* ---- reasoning wrapper ----
 * Leaves output unconstrained until the reasoning end marker (e.g. "</think>") has been emitted,
 * then constrains what follows with the grammar. The marker is matched on bytes, so it may be a
 * special token or arrive split across tokens; bytes after the marker in the same token are fed
 * to the grammar. */
typedef struct sg_grammar_gate sg_grammar_gate;

/* end_marker may be NULL/empty: constrained from the start. start_constrained: the prompt
 * already closed the reasoning block (thinking disabled). */
sg_status sg_grammar_gate_new(const sg_grammar *g, const char *end_marker, int start_constrained,
			      sg_grammar_gate **out);
void sg_grammar_gate_free(sg_grammar_gate *gt);
int sg_grammar_gate_constrained(const sg_grammar_gate *gt); /* 1 once the marker was seen */
sg_status sg_grammar_gate_advance(sg_grammar_gate *gt, const uint8_t *bytes, size_t n);
/* All non-empty tokens while unconstrained; the grammar's mask after. */
sg_status sg_grammar_gate_mask(sg_grammar_gate *gt, const sg_token_trie *t, uint32_t *bits);
int sg_grammar_gate_accepts_eos(const sg_grammar_gate *gt);

#endif
