/* BPE model: merges in rank order with a binary heap over candidate pairs (O(n log n) per word,
 * so a megabyte without spaces stays fast), byte-level words as raw bytes, byte fallback, fused
 * unknowns, ignore_merges, and a per-thread cache of recent words. */
#include <pthread.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "text/tokenizer/tokenizer_int.h"

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return x;
}

sg_status sg_bpe_alloc_merges(sg_tokenizer *t, size_t n)
{
	size_t cap = 16;
	while (cap < n * 2 + 1) cap *= 2;
	t->bpe.merges = sg_malloc(cap * sizeof(merge_ent));
	if (!t->bpe.merges) return SG_FAIL(SG_ERR_NOMEM, "%zu merges", n);
	for (size_t i = 0; i < cap; i++) t->bpe.merges[i].key = UINT64_MAX;
	t->bpe.mask = cap - 1;
	return SG_OK;
}

/* The first occurrence of a pair keeps its rank, as the reference's map built in order does
 * not: it keeps the last. Real files have no duplicate pairs; we follow the reference. */
sg_status sg_bpe_add_merge(sg_tokenizer *t, int32_t a, int32_t b, int32_t id, int32_t rank)
{
	uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
	size_t i = mix64(key) & t->bpe.mask;
	for (;; i = (i + 1) & t->bpe.mask) {
		merge_ent *e = &t->bpe.merges[i];
		if (e->key == UINT64_MAX || e->key == key) {
			*e = (merge_ent){key, rank, id};
			return SG_OK;
		}
	}
}

static const merge_ent *find_merge(const sg_model_bpe *m, int32_t a, int32_t b)
{
	if (!m->merges) return NULL;
	uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
	size_t i = mix64(key) & m->mask;
	for (;; i = (i + 1) & m->mask) {
		const merge_ent *e = &m->merges[i];
		if (e->key == key) return e;
		if (e->key == UINT64_MAX) return NULL;
	}
}

/* ---- per-thread scratch and cache ---- */

#define CACHE_SLOTS 8192 /* power of two */
#define CACHE_MAX_WORD 96
#define CACHE_ARENA (1u << 20)

typedef struct cache_ent {
	uint64_t hash;
	uint32_t woff, wlen, ioff, icount;
} cache_ent;

typedef struct bpe_tls {
	uint64_t uid;
	cache_ent *slots;
	size_t used;
	sg_buf words;
	sg_tokens ids;
	/* scratch for one word */
	struct sym {
		int32_t id, prev, next;
	} * sym;
	uint64_t *heap; /* rank << 32 | position: one integer compare orders by rank, then leftmost */
	size_t sym_cap, heap_cap;
} bpe_tls;

static pthread_key_t bpe_key;
static pthread_once_t bpe_once = PTHREAD_ONCE_INIT;

static void bpe_tls_free(void *p)
{
	bpe_tls *c = p;
	if (!c) return;
	sg_free(c->slots);
	sg_free(c->words.p);
	sg_tokens_free(&c->ids);
	sg_free(c->sym);
	sg_free(c->heap);
	sg_free(c);
}
static void bpe_key_init(void) { pthread_key_create(&bpe_key, bpe_tls_free); }

static bpe_tls *tls(const sg_tokenizer *t)
{
	pthread_once(&bpe_once, bpe_key_init);
	bpe_tls *c = pthread_getspecific(bpe_key);
	if (!c) {
		c = sg_calloc(1, sizeof(*c));
		if (!c) return NULL;
		c->slots = sg_calloc(CACHE_SLOTS, sizeof(cache_ent));
		if (!c->slots) {
			sg_free(c);
			return NULL;
		}
		pthread_setspecific(bpe_key, c);
	}
	if (c->uid != t->uid) {
		/* Another tokenizer used this thread last: its entries mean nothing here. */
		memset(c->slots, 0, CACHE_SLOTS * sizeof(cache_ent));
		c->used = 0;
		c->words.n = 0;
		c->ids.n = 0;
		c->uid = t->uid;
	}
	return c;
}

static int cache_get(bpe_tls *c, uint64_t h, const char *w, size_t n, sg_tokens *out)
{
	for (size_t i = h & (CACHE_SLOTS - 1);; i = (i + 1) & (CACHE_SLOTS - 1)) {
		cache_ent *e = &c->slots[i];
		if (!e->wlen) return 0;
		if (e->hash == h && e->wlen == n && !memcmp(c->words.p + e->woff, w, n)) {
			for (uint32_t k = 0; k < e->icount; k++)
				if (sg_tokens_push(out, c->ids.ids[e->ioff + k])) return -1;
			return 1;
		}
	}
}

static void cache_put(bpe_tls *c, uint64_t h, const char *w, size_t n, const int32_t *ids, size_t k)
{
	if (c->used >= CACHE_SLOTS / 2 || c->words.n + n > CACHE_ARENA) {
		memset(c->slots, 0, CACHE_SLOTS * sizeof(cache_ent));
		c->used = 0;
		c->words.n = 0;
		c->ids.n = 0;
	}
	size_t woff = c->words.n, ioff = c->ids.n;
	if (sg_buf_put(&c->words, w, n)) return;
	for (size_t i = 0; i < k; i++)
		if (sg_tokens_push(&c->ids, ids[i])) return;
	size_t i = h & (CACHE_SLOTS - 1);
	while (c->slots[i].wlen) i = (i + 1) & (CACHE_SLOTS - 1);
	c->slots[i] = (cache_ent){h, (uint32_t)woff, (uint32_t)n, (uint32_t)ioff, (uint32_t)k};
	c->used++;
}

/* ---- merging ---- */

/* A 4-ary min-heap of packed candidates: half the depth of a binary heap, and one 64-bit compare
 * per step; a megabyte-long word keeps a million candidates, where cache misses per level are
 * what costs. */
static void sift_down(uint64_t *h, size_t n, size_t i)
{
	uint64_t x = h[i];
	for (;;) {
		size_t c = 4 * i + 1;
		if (c >= n) break;
		size_t m = c, e = c + 4 < n ? c + 4 : n;
		for (size_t k = c + 1; k < e; k++)
			if (h[k] < h[m]) m = k;
		if (h[m] >= x) break;
		h[i] = h[m];
		i = m;
	}
	h[i] = x;
}

static int heap_push(bpe_tls *c, size_t *hn, uint64_t x)
{
	if (*hn == c->heap_cap) {
		size_t cap = c->heap_cap ? c->heap_cap * 2 : 64;
		uint64_t *v = sg_realloc(c->heap, cap * sizeof(*v));
		if (!v) return -1;
		c->heap = v;
		c->heap_cap = cap;
	}
	size_t i = (*hn)++;
	while (i > 0) {
		size_t p = (i - 1) / 4;
		if (c->heap[p] <= x) break;
		c->heap[i] = c->heap[p];
		i = p;
	}
	c->heap[i] = x;
	return 0;
}

static uint64_t heap_pop(bpe_tls *c, size_t *hn)
{
	uint64_t top = c->heap[0];
	c->heap[0] = c->heap[--(*hn)];
	if (*hn) sift_down(c->heap, *hn, 0);
	return top;
}

static uint64_t pack(int32_t rank, int32_t pos) { return (uint64_t)(uint32_t)rank << 32 | (uint32_t)pos; }

static int push_pair(const sg_model_bpe *m, bpe_tls *c, size_t *hn, int32_t pos)
{
	int32_t nx = c->sym[pos].next;
	if (nx < 0) return 0;
	const merge_ent *e = find_merge(m, c->sym[pos].id, c->sym[nx].id);
	if (!e) return 0;
	return heap_push(c, hn, pack(e->rank, pos));
}

static sg_status merge_word(const sg_tokenizer *t, bpe_tls *c, const char *w, size_t n, sg_tokens *out)
{
	const sg_model_bpe *m = &t->bpe;
	if (c->sym_cap < n + 1) {
		struct sym *v = sg_realloc(c->sym, (n + 1) * sizeof(*v));
		if (!v) return SG_FAIL(SG_ERR_NOMEM, "bpe: word of %zu bytes", n);
		c->sym = v;
		c->sym_cap = n + 1;
	}
	int32_t ns = 0;
	int last_unk = 0;
	for (size_t i = 0; i < n;) {
		size_t k = 1;
		int32_t id;
		if (t->pre.byte_level) {
			id = m->byte_id[(uint8_t)w[i]];
		} else {
			uint32_t cp;
			k = (size_t)sg_uc_next(w + i, n - i, &cp);
			id = sg_strmap_get(&t->mmap, w + i, k);
			if (id < 0 && m->byte_fallback) {
				size_t b = 0;
				while (b < k && m->byte_id[(uint8_t)w[i + b]] >= 0) b++;
				if (b == k) {
					for (b = 0; b < k; b++) c->sym[ns++] = (struct sym){m->byte_id[(uint8_t)w[i + b]], 0, 0};
					last_unk = 0;
					i += k;
					continue;
				}
			}
		}
		i += k;
		if (id < 0) {
			if (m->unk_id < 0) continue; /* no unknown token: the reference drops the char */
			if (m->fuse_unk && last_unk) continue;
			id = m->unk_id;
			last_unk = 1;
		} else {
			last_unk = 0;
		}
		c->sym[ns++] = (struct sym){id, 0, 0};
	}
	for (int32_t i = 0; i < ns; i++) {
		c->sym[i].prev = i - 1;
		c->sym[i].next = i + 1 < ns ? i + 1 : -1;
	}
	/* All initial candidates at once, then heapify in O(n). */
	size_t hn = 0;
	if (c->heap_cap < (size_t)ns) {
		uint64_t *v = sg_realloc(c->heap, ((size_t)ns + 64) * sizeof(*v));
		if (!v) return SG_FAIL(SG_ERR_NOMEM, "bpe heap");
		c->heap = v;
		c->heap_cap = (size_t)ns + 64;
	}
	for (int32_t i = 0; i + 1 < ns; i++) {
		const merge_ent *e = find_merge(m, c->sym[i].id, c->sym[i + 1].id);
		if (e) c->heap[hn++] = pack(e->rank, i);
	}
	for (size_t i = hn / 4 + 1; i-- > 0;)
		if (i < hn) sift_down(c->heap, hn, i);
	while (hn) {
		uint64_t top = heap_pop(c, &hn);
		int32_t pos = (int32_t)(uint32_t)top, rank = (int32_t)(top >> 32);
		struct sym *s = &c->sym[pos];
		if (s->id < 0 || s->next < 0) continue; /* merged away */
		const merge_ent *e = find_merge(m, s->id, c->sym[s->next].id);
		if (!e || e->rank != rank) continue; /* stale candidate: the pair changed */
		int32_t r = s->next;
		s->id = e->id;
		s->next = c->sym[r].next;
		c->sym[r].id = -1;
		if (s->next >= 0) c->sym[s->next].prev = pos;
		if ((s->prev >= 0 && push_pair(m, c, &hn, s->prev)) || push_pair(m, c, &hn, pos))
			return SG_FAIL(SG_ERR_NOMEM, "bpe heap");
	}
	for (int32_t i = ns ? 0 : -1; i >= 0; i = c->sym[i].next)
		if (sg_tokens_push(out, c->sym[i].id)) return SG_FAIL(SG_ERR_NOMEM, "bpe ids");
	return SG_OK;
}

sg_status sg_bpe_word(const sg_tokenizer *t, const char *w, size_t n, sg_tokens *out)
{
	if (!n) return SG_OK;
	if (t->bpe.ignore_merges) {
		int32_t id = sg_strmap_get(&t->mmap, w, n);
		if (id >= 0) return sg_tokens_push(out, id) ? SG_FAIL(SG_ERR_NOMEM, "bpe ids") : SG_OK;
	}
	bpe_tls *c = tls(t);
	if (!c) return SG_FAIL(SG_ERR_NOMEM, "bpe cache");
	uint64_t h = 0;
	int cached = n <= CACHE_MAX_WORD && t->bpe.cache;
	if (cached) {
		h = sg_str_hash(w, n);
		int r = cache_get(c, h, w, n, out);
		if (r < 0) return SG_FAIL(SG_ERR_NOMEM, "bpe ids");
		if (r) return SG_OK;
	}
	size_t start = out->n;
	sg_status st = merge_word(t, c, w, n, out);
	if (!st && cached) cache_put(c, h, w, n, out->ids + start, out->n - start);
	return st;
}

/* ---- WordPiece ---- */

sg_status sg_wp_word(const sg_tokenizer *t, const char *w, size_t n, sg_tokens *out)
{
	const sg_model_wp *m = &t->wp;
	size_t nchars = 0;
	for (size_t i = 0; i < n; i++) nchars += ((unsigned char)w[i] & 0xC0) != 0x80;
	size_t start_n = out->n;
	char stackbuf[256];
	char *tmp = n + m->prefix_len <= sizeof(stackbuf) ? stackbuf : sg_malloc(n + m->prefix_len);
	if (!tmp) return SG_FAIL(SG_ERR_NOMEM, "wordpiece");
	int bad = (int)nchars > m->max_chars;
	memcpy(tmp, m->prefix, m->prefix_len);
	for (size_t start = 0; !bad && start < n;) {
		size_t end = n;
		int32_t cur = -1;
		while (start < end) {
			size_t pl = start > 0 ? m->prefix_len : 0;
			if (pl) {
				memcpy(tmp + pl, w + start, end - start);
				cur = sg_strmap_get(&t->mmap, tmp, pl + end - start);
			} else {
				cur = sg_strmap_get(&t->mmap, w, end);
			}
			if (cur >= 0) break;
			do end--;
			while (end > start && ((unsigned char)w[end] & 0xC0) == 0x80);
		}
		if (cur < 0) {
			bad = 1;
			break;
		}
		if (sg_tokens_push(out, cur)) {
			if (tmp != stackbuf) sg_free(tmp);
			return SG_FAIL(SG_ERR_NOMEM, "wordpiece");
		}
		start = end;
	}
	if (tmp != stackbuf) sg_free(tmp);
	if (bad) {
		out->n = start_n;
		if (m->unk_id < 0) return SG_FAIL(SG_ERR_FORMAT, "wordpiece: word needs the unknown token, which the vocabulary lacks");
		if (sg_tokens_push(out, m->unk_id)) return SG_FAIL(SG_ERR_NOMEM, "wordpiece");
	}
	return SG_OK;
}
