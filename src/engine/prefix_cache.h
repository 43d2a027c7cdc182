/*
 * The block prefix cache: prompts cut into blocks of B tokens, each block named by a chain hash
 * h_i = SHA-256(h_{i-1} || token ids of block i as little-endian int32), h_{-1} = the root. The
 * root is [0; 32] without a session key and SHA-256(key) with one, so two sessions never share
 * a block (cache partitioning, not authentication: anyone who sends the same key shares it).
 * A block holds an opaque payload (the state at its end boundary: a block snapshot of the
 * session), so a prompt whose first k blocks all match restores them and prefills the rest.
 *
 * The cache is a pure data structure: it never evaluates or allocates states itself. Payloads
 * are owned by the cache once inserted and freed through the callback given at creation.
 * Blocks are also tagged with an owner (the model they were computed on): a lookup only
 * matches blocks of its owner.
 *
 * Eviction: least recently used first. A lookup or insert touches the chain from its deepest
 * block back to the root, so an ancestor is always more recent than its descendants and a
 * chain is eaten from its leaves. A session (root) holds at most per_session blocks: past that
 * its own least recent block goes. Not thread-safe: the inference worker owns it.
 *
 * Usage (the worker, per request):
 *
 *     uint8_t root[32];
 *     sg_pc_root(key, key_len, root);
 *     sg_pc_match mt;
 *     sg_pc_lookup(pc, model, root, prompt, n_usable, &mt);   // mt.n_blocks, mt.payloads
 *     ... restore mt.payloads[0..n_blocks), prefill the suffix; at each new boundary:
 *     sg_pc_insert(pc, model, root, prompt, block_index, snapshot, bytes);
 */
#ifndef SG_ENGINE_PREFIX_CACHE_H
#define SG_ENGINE_PREFIX_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "saragossa.h"

typedef struct sg_prefix_cache sg_prefix_cache;

typedef struct sg_pc_params {
	int block_tokens; /* B, >= 1 (RETI_SERVE_PREFIX_BLOCK_TOKENS) */
	int capacity;     /* blocks in all, >= 1 (RETI_SERVE_PREFIX_CACHE_BLOCKS) */
	int per_session;  /* blocks one root may hold, >= 1 (RETI_SERVE_PREFIX_BLOCKS_PER_SESSION) */
	void (*free_payload)(void *payload); /* may be NULL */
} sg_pc_params;

/* Takes the three numbers from the flags registry. */
sg_pc_params sg_pc_default_params(void);

sg_status sg_pc_new(const sg_pc_params *p, sg_prefix_cache **out);
/* Frees every block (and its payload). */
void sg_pc_free(sg_prefix_cache *pc);

int sg_pc_block_tokens(const sg_prefix_cache *pc);

/* The chain root of a session key: [0; 32] for no key (NULL or empty), else SHA-256(key). */
sg_status sg_pc_root(const char *key, size_t len, uint8_t root[32]);
/* h = SHA-256(parent || tokens[0..n) as little-endian int32). */
sg_status sg_pc_hash(const uint8_t parent[32], const int32_t *tokens, size_t n, uint8_t h[32]);

/* The result of a lookup. payloads[i] is block i's (borrowed: valid until the next insert,
 * eviction or free). */
typedef struct sg_pc_match {
	size_t n_blocks;     /* matched blocks: the first n_blocks * B tokens can be restored */
	void **payloads;     /* [n_blocks], heap (sg_free), NULL when n_blocks is 0 */
	long diverged_at;    /* when a cached block continues the matched chain with other tokens:
			      * the index of the first prompt token that differs from it; else -1 */
} sg_pc_match;

/* Matches the whole blocks of tokens[0..n) (only blocks that end at or before n) against the
 * chain of (owner, root) and touches what matched. */
sg_status sg_pc_lookup(sg_prefix_cache *pc, const void *owner, const uint8_t root[32], const int32_t *tokens, size_t n,
		       sg_pc_match *out);
void sg_pc_match_free(sg_pc_match *m);

/* 1 when block `index` of tokens (tokens[0..(index+1)*B) must all be given) is cached for
 * (owner, root): the caller then need not take its snapshot. */
int sg_pc_contains(sg_prefix_cache *pc, const void *owner, const uint8_t root[32], const int32_t *tokens, size_t index);

/* Inserts block `index` of tokens (tokens[0..(index+1)*B) given) with its payload, which the
 * cache then owns (freed at once when the block is already cached, or when the block's parent
 * is not cached: a block is only reachable through its whole chain). Evicts least recently used
 * blocks to stay within the capacity and the session's share. *inserted (may be NULL) says
 * whether the payload was kept. */
sg_status sg_pc_insert(sg_prefix_cache *pc, const void *owner, const uint8_t root[32], const int32_t *tokens, size_t index,
		       void *payload, size_t bytes, int *inserted);

/* Evicts the least recently used block; returns its bytes (0 when the cache is empty). */
size_t sg_pc_evict_lru(sg_prefix_cache *pc);
/* Drops every block of owner (a model being unloaded). */
void sg_pc_drop_owner(sg_prefix_cache *pc, const void *owner);

/* Blocks and payload bytes held. */
size_t sg_pc_blocks(const sg_prefix_cache *pc);
size_t sg_pc_bytes(const sg_prefix_cache *pc);
/* Blocks held under (owner-independent) root. */
size_t sg_pc_session_blocks(const sg_prefix_cache *pc, const uint8_t root[32]);

#endif
