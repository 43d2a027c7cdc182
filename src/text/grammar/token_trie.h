/* The vocabulary as a byte trie, built once per tokenizer and shared read-only by every
 * constrained request. Masking walks the trie in preorder with one automaton state per depth,
 * skipping a whole subtree as soon as its first byte is rejected, so the cost follows the number
 * of still-valid prefixes, not the vocabulary size.
 *
 * Inside a JSON string almost every token is valid; walking the whole trie there would cost
 * milliseconds. So tokens are also classed: a "plain" token is non-empty, complete UTF-8 of at
 * most SG_TRIE_PLAIN_MAX code points, with no byte below 0x20, no '"' and no '\\'. Such a token is
 * valid in a string body exactly when the string's length budget allows its code points, which a
 * precomputed bitmap per budget answers in one copy; only the other tokens are walked (a second,
 * much smaller trie). */
#ifndef SG_TEXT_TOKEN_TRIE_H
#define SG_TEXT_TOKEN_TRIE_H

#include <stddef.h>
#include <stdint.h>

#include "saragossa.h"

#define SG_TRIE_PLAIN_MAX 32

/* One trie in preorder. Node 0 is the root (the empty prefix). */
typedef struct sg_trie_nodes {
	uint32_t n;         /* nodes */
	uint8_t *byte;      /* [n] the edge byte into the node (root: 0) */
	uint16_t *depth;    /* [n] bytes from the root */
	uint32_t *skip;     /* [n] index of the first node after this node's subtree */
	uint32_t *tok_off;  /* [n+1] tokens ending at node i: tok_ids[tok_off[i] .. tok_off[i+1]) */
	int32_t *tok_ids;   /* [tokens in this trie] (in preorder: a subtree's tokens are contiguous) */
	int8_t *plain_sfx;  /* [n] max code points of the token suffixes below node i (the bytes after
			     * its depth), or -1 if one of them is not plain: lets the walk accept a
			     * whole subtree at once inside a string */
	uint16_t max_depth; /* longest token in bytes */
} sg_trie_nodes;

typedef struct sg_token_trie {
	int n_vocab;
	int words;              /* (n_vocab + 31) / 32: bitmap length in uint32 words */
	sg_trie_nodes all;      /* every allowed (non-special, non-empty) token */
	sg_trie_nodes impure;   /* the allowed tokens that are not plain */
	uint32_t *plain_le;     /* [SG_TRIE_PLAIN_MAX + 1][words]: plain tokens of <= k code points */
	int32_t *eot;           /* [n_eot] end-of-turn ids (allowed only where the grammar is complete) */
	int n_eot;
	uint8_t *special;       /* [n_vocab] 1 for tokens never allowed inside a constrained region */
} sg_token_trie;

/* Builds the trie over the vocabulary: tok[i][0..len[i]) are token i's output bytes (the
 * tokenizer's decoded form: SentencePiece "▁" already mapped to ' ', byte tokens <0xXX> to their
 * byte). special_ids[0..n_special) are never allowed in a constrained region; eot_ids[0..n_eot)
 * (normally also special) are allowed exactly where the grammar accepts the end of the turn.
 * Ids out of range are an error. The arrays are not retained. */
sg_status sg_token_trie_build(const uint8_t *const *tok, const uint32_t *len, int n_vocab,
			      const int *special_ids, int n_special, const int *eot_ids, int n_eot,
			      sg_token_trie **out);
void sg_token_trie_free(sg_token_trie *t);
static inline int sg_token_trie_words(const sg_token_trie *t) { return t->words; }

#endif
