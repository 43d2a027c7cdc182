/* Small pieces the tokenizer files share: byte buffers, a string hash map, Unicode classes with
 * the reference's (Rust's) definitions, lossy UTF-8 and the byte-level alphabet. */
#include <pthread.h>
#include <string.h>
#include <utf8proc.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/utf8.h"
#include "text/tokenizer/tokenizer_int.h"

int sg_buf_reserve(sg_buf *b, size_t extra)
{
	if (b->n + extra + 1 <= b->cap) return 0;
	size_t cap = b->cap ? b->cap : 64;
	while (cap < b->n + extra + 1) cap *= 2;
	char *p = sg_realloc(b->p, cap);
	if (!p) return -1;
	b->p = p;
	b->cap = cap;
	return 0;
}

int sg_buf_put(sg_buf *b, const void *s, size_t n)
{
	if (sg_buf_reserve(b, n)) return -1;
	if (n) memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = 0;
	return 0;
}

int sg_buf_putc(sg_buf *b, char c) { return sg_buf_put(b, &c, 1); }

int sg_buf_put_cp(sg_buf *b, uint32_t cp)
{
	uint8_t u[4];
	int k = sg_utf8_encode(cp, u);
	if (!k) k = sg_utf8_encode(0xFFFD, u);
	return sg_buf_put(b, u, (size_t)k);
}

int sg_tokens_push(sg_tokens *t, int32_t id)
{
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 64;
		int32_t *p = sg_realloc(t->ids, cap * sizeof(*p));
		if (!p) return -1;
		t->ids = p;
		t->cap = cap;
	}
	t->ids[t->n++] = id;
	return 0;
}

void sg_tokens_free(sg_tokens *t)
{
	sg_free(t->ids);
	t->ids = NULL;
	t->n = t->cap = 0;
}

/* 64-bit FNV-1a over 8-byte words then a final mix: fast on short keys, which tokens are. */
uint64_t sg_str_hash(const char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull ^ n;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w;
		memcpy(&w, s + i, 8);
		h = (h ^ w) * 0x100000001b3ull;
		h ^= h >> 29;
	}
	for (; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	return h;
}

sg_status sg_strmap_build(sg_strmap *m, const sg_str *keys, int32_t n)
{
	size_t cap = 16;
	while (cap < (size_t)n * 2 + 1) cap *= 2;
	m->slot = sg_malloc(cap * sizeof(int32_t));
	if (!m->slot) return SG_FAIL(SG_ERR_NOMEM, "%zu slots", cap);
	memset(m->slot, 0xff, cap * sizeof(int32_t));
	m->mask = cap - 1;
	m->keys = keys;
	for (int32_t id = 0; id < n; id++) {
		if (!keys[id].s) continue;
		size_t i = sg_str_hash(keys[id].s, keys[id].n) & m->mask;
		for (;; i = (i + 1) & m->mask) {
			int32_t o = m->slot[i];
			if (o < 0) {
				m->slot[i] = id;
				break;
			}
			if (keys[o].n == keys[id].n && !memcmp(keys[o].s, keys[id].s, keys[id].n)) {
				m->slot[i] = id; /* last wins */
				break;
			}
		}
	}
	return SG_OK;
}

int32_t sg_strmap_get(const sg_strmap *m, const char *s, size_t n)
{
	if (!m->slot) return -1;
	size_t i = sg_str_hash(s, n) & m->mask;
	for (;; i = (i + 1) & m->mask) {
		int32_t o = m->slot[i];
		if (o < 0) return -1;
		if (m->keys[o].n == n && !memcmp(m->keys[o].s, s, n)) return o;
	}
}

void sg_strmap_free(sg_strmap *m)
{
	sg_free(m->slot);
	m->slot = NULL;
}

int sg_uc_next(const char *s, size_t n, uint32_t *cp)
{
	int k = sg_utf8_decode((const uint8_t *)s, n, cp);
	if (k) return k;
	*cp = 0xFFFD;
	return 1;
}

/* char::is_whitespace: the White_Space property. */
int sg_uc_is_whitespace(uint32_t c)
{
	return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
	       c == 0x3000;
}

int sg_uc_is_alnum(uint32_t c)
{
	if (c < 128) return (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z');
	utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
	return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
	       (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

int sg_uc_is_mark(uint32_t c)
{
	utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
	return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME;
}

int sg_uc_is_cjk(uint32_t c)
{
	return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
	       (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
	       (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* Rust's String::from_utf8_lossy: each maximal invalid subpart becomes one U+FFFD. */
int sg_buf_put_lossy(sg_buf *b, const char *s, size_t n)
{
	const uint8_t *u = (const uint8_t *)s;
	size_t i = 0;
	while (i < n) {
		size_t j = i;
		uint32_t cp;
		int k;
		while (j < n && (k = sg_utf8_decode(u + j, n - j, &cp)) > 0) j += (size_t)k;
		if (sg_buf_put(b, s + i, j - i)) return -1;
		if (j >= n) break;
		/* Length of the maximal prefix of a valid sequence starting at j (at least 1). */
		uint8_t c = u[j];
		size_t need = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 1;
		size_t m = 1;
		if (need > 1) {
			uint8_t lo = 0x80, hi = 0xBF;
			if (c == 0xE0) lo = 0xA0;
			else if (c == 0xED) hi = 0x9F;
			else if (c == 0xF0) lo = 0x90;
			else if (c == 0xF4) hi = 0x8F;
			if (j + 1 < n && u[j + 1] >= lo && u[j + 1] <= hi) {
				m = 2;
				while (m < need && j + m < n && u[j + m] >= 0x80 && u[j + m] <= 0xBF) m++;
			}
		}
		if (sg_buf_put(b, "\xEF\xBF\xBD", 3)) return -1;
		i = j + m;
	}
	return 0;
}

/* GPT-2's byte-level alphabet: printable Latin-1 bytes map to themselves, the other 68 bytes to
 * U+0100 onwards in byte order, so every byte is one visible character. */
static int printable_byte(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255); }

static uint16_t bl_cp[256];
static int16_t bl_byte[256 + 68];
static pthread_once_t bl_once = PTHREAD_ONCE_INIT;

static void bl_init(void)
{
	int k = 0;
	for (int b = 0; b < 256 + 68; b++) bl_byte[b] = -1;
	for (int b = 0; b < 256; b++) {
		bl_cp[b] = (uint16_t)(printable_byte(b) ? b : 256 + k++);
		bl_byte[bl_cp[b]] = (int16_t)b;
	}
}

uint32_t sg_bytelevel_cp(uint8_t b)
{
	pthread_once(&bl_once, bl_init);
	return bl_cp[b];
}

int sg_bytelevel_byte(uint32_t cp)
{
	pthread_once(&bl_once, bl_init);
	return cp < 256 + 68 ? bl_byte[cp] : -1;
}
