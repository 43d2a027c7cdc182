/* The block prefix cache (see prefix_cache.h). */
#include "engine/prefix_cache.h"

#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/flags.h"
#include "base/sha256.h"

typedef struct block {
	uint8_t hash[32], parent[32], root[32];
	const void *owner;
	size_t index;           /* block number in its chain */
	int32_t *tokens;        /* [B] the block's ids (to say where a prompt diverged) */
	void *payload;
	size_t bytes;
	struct block *prev, *next; /* LRU list: head = most recent */
	struct block *hnext;       /* hash bucket chain */
} block;

struct sg_prefix_cache {
	sg_pc_params p;
	block *head, *tail;
	block **buckets;        /* [n_buckets] */
	size_t n_buckets;       /* a power of two */
	size_t n_blocks, bytes;
};

sg_pc_params sg_pc_default_params(void)
{
	sg_pc_params p = {
		.block_tokens = (int)sg_flag_int("RETI_SERVE_PREFIX_BLOCK_TOKENS"),
		.capacity = (int)sg_flag_int("RETI_SERVE_PREFIX_CACHE_BLOCKS"),
		.per_session = (int)sg_flag_int("RETI_SERVE_PREFIX_BLOCKS_PER_SESSION"),
	};
	return p;
}

sg_status sg_pc_new(const sg_pc_params *p, sg_prefix_cache **out)
{
	*out = NULL;
	if (p->block_tokens < 1 || p->capacity < 1 || p->per_session < 1)
		return SG_FAIL(SG_ERR_INVALID_ARG, "block of %d tokens, capacity %d, per session %d (each must be >= 1)",
			       p->block_tokens, p->capacity, p->per_session);
	sg_prefix_cache *pc = sg_calloc(1, sizeof *pc);
	if (!pc) return SG_FAIL(SG_ERR_NOMEM, "prefix cache");
	pc->p = *p;
	pc->n_buckets = 16;
	while (pc->n_buckets < (size_t)p->capacity * 2 && pc->n_buckets < (1u << 20)) pc->n_buckets *= 2;
	pc->buckets = sg_calloc(pc->n_buckets, sizeof *pc->buckets);
	if (!pc->buckets) {
		sg_free(pc);
		return SG_FAIL(SG_ERR_NOMEM, "prefix cache index of %zu buckets", pc->n_buckets);
	}
	*out = pc;
	return SG_OK;
}

int sg_pc_block_tokens(const sg_prefix_cache *pc) { return pc->p.block_tokens; }
size_t sg_pc_blocks(const sg_prefix_cache *pc) { return pc->n_blocks; }
size_t sg_pc_bytes(const sg_prefix_cache *pc) { return pc->bytes; }

sg_status sg_pc_root(const char *key, size_t len, uint8_t root[32])
{
	if (!key || !len) {
		memset(root, 0, 32);
		return SG_OK;
	}
	return sg_sha256(key, len, root);
}

sg_status sg_pc_hash(const uint8_t parent[32], const int32_t *tokens, size_t n, uint8_t h[32])
{
	sg_sha256_ctx c;
	sg_status st = sg_sha256_init(&c);
	if (st) return st;
	sg_sha256_update(&c, parent, 32);
	/* little-endian bytes whatever the host order, so a hash means the same everywhere */
	uint8_t buf[256 * 4];
	for (size_t i = 0; i < n;) {
		size_t k = 0;
		for (; k < 256 && i < n; k++, i++) {
			uint32_t v = (uint32_t)tokens[i];
			buf[4 * k] = (uint8_t)v;
			buf[4 * k + 1] = (uint8_t)(v >> 8);
			buf[4 * k + 2] = (uint8_t)(v >> 16);
			buf[4 * k + 3] = (uint8_t)(v >> 24);
		}
		sg_sha256_update(&c, buf, 4 * k);
	}
	sg_sha256_final(&c, h);
	return SG_OK;
}

static size_t bucket_of(const sg_prefix_cache *pc, const uint8_t h[32])
{
	uint64_t v;
	memcpy(&v, h, sizeof v);
	return (size_t)(v & (pc->n_buckets - 1));
}

static block *find(const sg_prefix_cache *pc, const void *owner, const uint8_t h[32])
{
	for (block *b = pc->buckets[bucket_of(pc, h)]; b; b = b->hnext)
		if (b->owner == owner && !memcmp(b->hash, h, 32)) return b;
	return NULL;
}

static void lru_unlink(sg_prefix_cache *pc, block *b)
{
	if (b->prev) b->prev->next = b->next;
	else pc->head = b->next;
	if (b->next) b->next->prev = b->prev;
	else pc->tail = b->prev;
	b->prev = b->next = NULL;
}

static void lru_push_front(sg_prefix_cache *pc, block *b)
{
	b->next = pc->head;
	b->prev = NULL;
	if (pc->head) pc->head->prev = b;
	pc->head = b;
	if (!pc->tail) pc->tail = b;
}

/* Makes b and then each of its ancestors the most recent, so ancestors stay ahead of it. */
static void touch_chain(sg_prefix_cache *pc, block *b)
{
	while (b) {
		lru_unlink(pc, b);
		lru_push_front(pc, b);
		b = b->index ? find(pc, b->owner, b->parent) : NULL;
	}
}

static void remove_block(sg_prefix_cache *pc, block *b)
{
	lru_unlink(pc, b);
	block **pp = &pc->buckets[bucket_of(pc, b->hash)];
	while (*pp != b) pp = &(*pp)->hnext;
	*pp = b->hnext;
	pc->n_blocks--;
	pc->bytes -= b->bytes;
	if (pc->p.free_payload && b->payload) pc->p.free_payload(b->payload);
	sg_free(b->tokens);
	sg_free(b);
}

void sg_pc_free(sg_prefix_cache *pc)
{
	if (!pc) return;
	while (pc->tail) remove_block(pc, pc->tail);
	sg_free(pc->buckets);
	sg_free(pc);
}

size_t sg_pc_evict_lru(sg_prefix_cache *pc)
{
	if (!pc || !pc->tail) return 0;
	size_t b = pc->tail->bytes;
	remove_block(pc, pc->tail);
	return b;
}

void sg_pc_drop_owner(sg_prefix_cache *pc, const void *owner)
{
	if (!pc) return;
	for (block *b = pc->head; b;) {
		block *n = b->next;
		if (b->owner == owner) remove_block(pc, b);
		b = n;
	}
}

size_t sg_pc_session_blocks(const sg_prefix_cache *pc, const uint8_t root[32])
{
	size_t n = 0;
	for (block *b = pc->head; b; b = b->next) n += !memcmp(b->root, root, 32);
	return n;
}

void sg_pc_match_free(sg_pc_match *m)
{
	sg_free(m->payloads);
	memset(m, 0, sizeof *m);
	m->diverged_at = -1;
}

/* Where tokens[0..n) first differs from a cached child of the block chain ending in `parent`
 * (block `index`): the furthest such point over the children, or -1 when none differs. */
static long divergence(const sg_prefix_cache *pc, const void *owner, const uint8_t parent[32], size_t index,
		       const int32_t *tokens, size_t n)
{
	size_t B = (size_t)pc->p.block_tokens, base = index * B;
	long best = -1;
	for (const block *b = pc->head; b; b = b->next) {
		if (b->owner != owner || b->index != index || memcmp(b->parent, parent, 32)) continue;
		size_t j = 0;
		while (j < B && base + j < n && b->tokens[j] == tokens[base + j]) j++;
		if (base + j < n && j < B && (long)(base + j) > best) best = (long)(base + j);
	}
	return best;
}

sg_status sg_pc_lookup(sg_prefix_cache *pc, const void *owner, const uint8_t root[32], const int32_t *tokens, size_t n,
		       sg_pc_match *out)
{
	memset(out, 0, sizeof *out);
	out->diverged_at = -1;
	size_t B = (size_t)pc->p.block_tokens, full = n / B;
	uint8_t h[32], prev[32];
	memcpy(prev, root, 32);
	block *last = NULL;
	size_t k = 0;
	for (; k < full; k++) {
		sg_status st = sg_pc_hash(prev, tokens + k * B, B, h);
		if (st) return st;
		block *b = find(pc, owner, h);
		if (!b) break;
		last = b;
		memcpy(prev, h, 32);
	}
	if (k < full || k * B < n) out->diverged_at = divergence(pc, owner, prev, k, tokens, n);
	if (!k) return SG_OK;
	out->payloads = sg_calloc(k, sizeof(void *));
	if (!out->payloads) return SG_FAIL(SG_ERR_NOMEM, "prefix match of %zu blocks", k);
	out->n_blocks = k;
	for (block *b = last; b; b = b->index ? find(pc, owner, b->parent) : NULL) out->payloads[b->index] = b->payload;
	touch_chain(pc, last);
	return SG_OK;
}

/* The hashes of block index (h) and of its parent (parent) of tokens. */
static sg_status chain_hashes(const sg_prefix_cache *pc, const uint8_t root[32], const int32_t *tokens, size_t index,
			      uint8_t parent[32], uint8_t h[32])
{
	size_t B = (size_t)pc->p.block_tokens;
	memcpy(h, root, 32);
	for (size_t i = 0; i <= index; i++) {
		memcpy(parent, h, 32);
		sg_status st = sg_pc_hash(parent, tokens + i * B, B, h);
		if (st) return st;
	}
	return SG_OK;
}

int sg_pc_contains(sg_prefix_cache *pc, const void *owner, const uint8_t root[32], const int32_t *tokens, size_t index)
{
	uint8_t parent[32], h[32];
	if (chain_hashes(pc, root, tokens, index, parent, h)) return 0;
	return find(pc, owner, h) != NULL;
}

/* The least recent block of a root. */
static block *session_lru(const sg_prefix_cache *pc, const uint8_t root[32])
{
	for (block *b = pc->tail; b; b = b->prev)
		if (!memcmp(b->root, root, 32)) return b;
	return NULL;
}

sg_status sg_pc_insert(sg_prefix_cache *pc, const void *owner, const uint8_t root[32], const int32_t *tokens, size_t index,
		       void *payload, size_t bytes, int *inserted)
{
	if (inserted) *inserted = 0;
	uint8_t parent[32], h[32];
	sg_status st = chain_hashes(pc, root, tokens, index, parent, h);
	block *have = st ? NULL : find(pc, owner, h);
	if (st || have) {
		if (have) touch_chain(pc, have);
		if (pc->p.free_payload && payload) pc->p.free_payload(payload);
		return st;
	}
	/* Make room first: the session's share, then the whole cache. Eviction may take the new
	 * block's own parent (a chain longer than the capacity): then it is not kept. */
	while (sg_pc_session_blocks(pc, root) >= (size_t)pc->p.per_session) remove_block(pc, session_lru(pc, root));
	while (pc->n_blocks >= (size_t)pc->p.capacity) remove_block(pc, pc->tail);
	block *par = index ? find(pc, owner, parent) : NULL;
	size_t B = (size_t)pc->p.block_tokens;
	block *b = index && !par ? NULL : sg_calloc(1, sizeof *b);
	int32_t *toks = b ? sg_malloc(B * sizeof(int32_t)) : NULL;
	if (!b || !toks) {
		sg_free(b);
		if (pc->p.free_payload && payload) pc->p.free_payload(payload);
		return index && !par ? SG_OK : SG_FAIL(SG_ERR_NOMEM, "prefix cache block");
	}
	memcpy(b->hash, h, 32);
	memcpy(b->parent, parent, 32);
	memcpy(b->root, root, 32);
	b->owner = owner;
	b->index = index;
	b->tokens = toks;
	memcpy(toks, tokens + index * B, B * sizeof(int32_t));
	b->payload = payload;
	b->bytes = bytes;
	size_t k = bucket_of(pc, h);
	b->hnext = pc->buckets[k];
	pc->buckets[k] = b;
	lru_push_front(pc, b);
	pc->n_blocks++;
	pc->bytes += bytes;
	touch_chain(pc, b);
	if (inserted) *inserted = 1;
	return SG_OK;
}
