/* GGUF parser on hand-built files: every value type, nested arrays, alignment, and each way a
 * header can be damaged. */
#include <criterion/criterion.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "formats/gguf.h"
#include "formats/model_desc.h"

typedef struct buf {
	uint8_t d[8192];
	size_t n;
} buf;

static void put(buf *b, const void *p, size_t n)
{
	cr_assert(b->n + n <= sizeof(b->d));
	memcpy(b->d + b->n, p, n);
	b->n += n;
}
static void u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void str(buf *b, const char *s)
{
	u64(b, strlen(s));
	put(b, s, strlen(s));
}
static void kv_u32(buf *b, const char *k, uint32_t v)
{
	str(b, k);
	u32(b, SG_GGUF_U32);
	u32(b, v);
}
static void tinfo(buf *b, const char *name, int nd, const uint64_t *ne, uint32_t type, uint64_t off)
{
	str(b, name);
	u32(b, (uint32_t)nd);
	for (int i = 0; i < nd; i++) u64(b, ne[i]);
	u32(b, type);
	u64(b, off);
}
static void pad_to(buf *b, size_t align)
{
	while (b->n % align) b->d[b->n++] = 0;
}

/* A valid file: 6 kvs incl. nested array and string array; 2 tensors (F32 [4,2], Q8_0 [32]). */
static void good_file(buf *b, uint32_t version, uint32_t align)
{
	memset(b, 0, sizeof(*b));
	put(b, "GGUF", 4);
	u32(b, version);
	u64(b, 2);
	u64(b, 7);
	str(b, "general.architecture");
	u32(b, SG_GGUF_STRING);
	str(b, "llama");
	kv_u32(b, "general.alignment", align);
	str(b, "f");
	u32(b, SG_GGUF_F32);
	float f = 0.5f;
	put(b, &f, 4);
	str(b, "i");
	u32(b, SG_GGUF_I16);
	int16_t i16 = -7;
	put(b, &i16, 2);
	str(b, "nested"); /* [[1, 2], [3]] of i32 */
	u32(b, SG_GGUF_ARRAY);
	u32(b, SG_GGUF_ARRAY);
	u64(b, 2);
	u32(b, SG_GGUF_I32);
	u64(b, 2);
	u32(b, 1);
	u32(b, 2);
	u32(b, SG_GGUF_I32);
	u64(b, 1);
	u32(b, 3);
	str(b, "strs");
	u32(b, SG_GGUF_ARRAY);
	u32(b, SG_GGUF_STRING);
	u64(b, 3);
	str(b, "ab");
	str(b, "");
	str(b, "xyz");
	str(b, "b");
	u32(b, SG_GGUF_BOOL);
	b->d[b->n++] = 1;
	uint64_t ne1[2] = {4, 2}, ne2[1] = {32};
	tinfo(b, "w", 2, ne1, SG_TYPE_F32, 0);
	tinfo(b, "q", 1, ne2, SG_TYPE_Q8_0, align > 32 ? align : 32);
	pad_to(b, align);
	for (int k = 0; k < 8; k++) {
		float v = (float)k;
		put(b, &v, 4);
	}
	pad_to(b, align); /* q starts at the next aligned offset */
	uint8_t q[34] = {0x00, 0x3c};
	for (int k = 0; k < 32; k++) q[2 + k] = (uint8_t)(k - 16);
	put(b, q, 34);
}

Test(gguf, parses_every_value_type_and_tensor)
{
	static buf b;
	good_file(&b, 3, 64);
	sg_gguf g;
	cr_assert_eq(sg_gguf_parse(b.d, b.n, "t.gguf", 0, &g), SG_OK, "%s", sg_last_error());
	cr_expect_eq(g.version, 3u);
	cr_expect_eq(g.alignment, 64u);
	cr_expect_eq(g.data_start % 64, 0u);
	const char *s;
	cr_expect_eq(sg_gguf_get_str(&g, "general.architecture", &s), SG_OK);
	cr_expect_str_eq(s, "llama");
	double f;
	int64_t i;
	cr_expect_eq(sg_gguf_get_num(&g, "f", &f), SG_OK);
	cr_expect_eq(f, 0.5);
	cr_expect_eq(sg_gguf_get_int(&g, "i", &i), SG_OK);
	cr_expect_eq(i, -7);
	cr_expect_eq(sg_gguf_get_int(&g, "b", &i), SG_OK);
	cr_expect_eq(i, 1);
	cr_expect_eq(sg_gguf_get_int(&g, "missing", &i), SG_ERR_NOT_FOUND);
	cr_expect_eq(sg_gguf_get_int(&g, "general.architecture", &i), SG_ERR_FORMAT);
	const sg_gguf_kv *n = sg_gguf_find(&g, "nested");
	cr_assert_not_null(n);
	cr_expect_eq(n->arr_type, SG_GGUF_ARRAY);
	cr_expect_eq(n->arr_n, 2u);
	cr_expect_eq(sg_gguf_arr_int(n, 0, &i), SG_ERR_FORMAT);
	sg_gguf_str_iter it;
	sg_gguf_str_iter_init(sg_gguf_find(&g, "strs"), &it);
	const char *p;
	uint64_t len;
	cr_assert(sg_gguf_str_next(&it, &p, &len));
	cr_expect(len == 2 && !memcmp(p, "ab", 2));
	cr_assert(sg_gguf_str_next(&it, &p, &len));
	cr_expect_eq(len, 0u);
	cr_assert(sg_gguf_str_next(&it, &p, &len));
	cr_expect(len == 3 && !memcmp(p, "xyz", 3));
	cr_expect_not(sg_gguf_str_next(&it, &p, &len));
	cr_assert_eq(g.n_tensors, 2);
	const sg_tensor *w = &g.tensors[0], *q = &g.tensors[1];
	cr_expect_str_eq(w->name, "w");
	cr_expect(w->n_dims == 2 && w->ne[0] == 4 && w->ne[1] == 2 && w->nbytes == 32);
	cr_expect_eq(w->offset, g.data_start);
	float w7;
	memcpy(&w7, w->data + 28, 4);
	cr_expect_eq(w7, 7.0f);
	cr_expect_eq(q->type, SG_TYPE_Q8_0);
	cr_expect_eq(q->nbytes, 34u);
	float y[32];
	sg_dequantize_ref(q->type, q->data, y, 32);
	cr_expect_eq(y[0], -16.0f);
	cr_expect_eq(y[31], 15.0f);
	sg_gguf_free(&g);
}

Test(gguf, accepts_version_2)
{
	static buf b;
	good_file(&b, 2, 32);
	sg_gguf g;
	cr_assert_eq(sg_gguf_parse(b.d, b.n, "t", 0, &g), SG_OK, "%s", sg_last_error());
	sg_gguf_free(&g);
}

Test(gguf, every_truncation_is_a_clean_error)
{
	static buf b;
	good_file(&b, 3, 32);
	for (size_t n = 0; n < b.n; n++) {
		/* a heap copy of exactly n bytes so ASan catches any read past it */
		uint8_t *c = sg_malloc(n ? n : 1);
		memcpy(c, b.d, n);
		sg_gguf g;
		cr_assert_neq(sg_gguf_parse(c, n, "t", 0, &g), SG_OK, "cut at %zu parsed", n);
		cr_assert_gt(strlen(sg_last_error()), 5);
		sg_free(c);
	}
}

static sg_status parse_one_tensor(uint64_t ne0, uint32_t type, uint64_t off, size_t data_bytes)
{
	static buf b;
	memset(&b, 0, sizeof(b));
	put(&b, "GGUF", 4);
	u32(&b, 3);
	u64(&b, 1);
	u64(&b, 0);
	tinfo(&b, "blk.0.x", 1, &ne0, type, off);
	pad_to(&b, 32);
	b.n += data_bytes;
	sg_gguf g;
	sg_status st = sg_gguf_parse(b.d, b.n, "t", 0, &g);
	if (!st) sg_gguf_free(&g);
	return st;
}

Test(gguf, rejects_tensor_past_eof)
{
	cr_expect_eq(parse_one_tensor(8, SG_TYPE_F32, 0, 32), SG_OK);
	cr_expect_eq(parse_one_tensor(8, SG_TYPE_F32, 0, 31), SG_ERR_FORMAT);
	cr_expect(strstr(sg_last_error(), "tensor 'blk.0.x' data ends at") != NULL, "%s", sg_last_error());
	cr_expect(strstr(sg_last_error(), "past file size") != NULL);
	cr_expect_eq(parse_one_tensor(8, SG_TYPE_F32, UINT64_MAX - 31, 32), SG_ERR_FORMAT);
}

Test(gguf, rejects_unknown_type_by_id_and_partial_blocks)
{
	cr_expect_eq(parse_one_tensor(32, 77, 0, 64), SG_ERR_UNSUPPORTED);
	cr_expect(strstr(sg_last_error(), "ggml type id 77") != NULL, "%s", sg_last_error());
	cr_expect_eq(parse_one_tensor(256, 16, 0, 1024), SG_ERR_UNSUPPORTED);
	cr_expect(strstr(sg_last_error(), "IQ2_XXS") != NULL, "%s", sg_last_error());
	cr_expect_eq(parse_one_tensor(100, SG_TYPE_Q4_K, 0, 1024), SG_ERR_FORMAT);
	cr_expect(strstr(sg_last_error(), "not a multiple of the block size 256") != NULL, "%s", sg_last_error());
	cr_expect_eq(parse_one_tensor(8, SG_TYPE_F32, 4, 64), SG_ERR_FORMAT); /* misaligned */
	cr_expect(strstr(sg_last_error(), "alignment") != NULL);
}

Test(gguf, rejects_overlap_duplicates_and_bad_headers)
{
	static buf b;
	memset(&b, 0, sizeof(b));
	put(&b, "GGUF", 4);
	u32(&b, 3);
	u64(&b, 2);
	u64(&b, 0);
	uint64_t ne = 16;
	tinfo(&b, "a", 1, &ne, SG_TYPE_F32, 0);
	tinfo(&b, "b", 1, &ne, SG_TYPE_F32, 32);
	pad_to(&b, 32);
	b.n += 128;
	sg_gguf g;
	cr_expect_eq(sg_gguf_parse(b.d, b.n, "t", 0, &g), SG_ERR_FORMAT);
	cr_expect(strstr(sg_last_error(), "overlap") != NULL, "%s", sg_last_error());

	memset(&b, 0, sizeof(b));
	put(&b, "GGUF", 4);
	u32(&b, 3);
	u64(&b, 0);
	u64(&b, 2);
	kv_u32(&b, "k", 1);
	kv_u32(&b, "k", 2);
	cr_expect_eq(sg_gguf_parse(b.d, b.n, "t", 0, &g), SG_ERR_FORMAT);
	cr_expect(strstr(sg_last_error(), "duplicate metadata key 'k'") != NULL, "%s", sg_last_error());

	memset(&b, 0, sizeof(b));
	put(&b, "GGUF", 4);
	u32(&b, 3);
	u64(&b, 0);
	u64(&b, 1);
	kv_u32(&b, "general.alignment", 48);
	cr_expect_eq(sg_gguf_parse(b.d, b.n, "t", 0, &g), SG_ERR_FORMAT);
	cr_expect(strstr(sg_last_error(), "power of two") != NULL, "%s", sg_last_error());

	uint8_t be[24] = {'G', 'G', 'U', 'F', 0, 0, 0, 3};
	cr_expect_eq(sg_gguf_parse(be, sizeof(be), "t", 0, &g), SG_ERR_UNSUPPORTED);
	cr_expect(strstr(sg_last_error(), "big-endian") != NULL, "%s", sg_last_error());

	/* an array claiming 2^61 u64 elements in a tiny file */
	memset(&b, 0, sizeof(b));
	put(&b, "GGUF", 4);
	u32(&b, 3);
	u64(&b, 0);
	u64(&b, 1);
	str(&b, "arr");
	u32(&b, SG_GGUF_ARRAY);
	u32(&b, SG_GGUF_U64);
	u64(&b, UINT64_C(1) << 61);
	cr_expect_eq(sg_gguf_parse(b.d, b.n, "t", 0, &g), SG_ERR_FORMAT);
	cr_expect(strstr(sg_last_error(), "runs past the end") != NULL, "%s", sg_last_error());
}

Test(gguf, model_desc_from_llama_metadata)
{
	static buf b;
	memset(&b, 0, sizeof(b));
	put(&b, "GGUF", 4);
	u32(&b, 3);
	u64(&b, 0);
	u64(&b, 8);
	str(&b, "general.architecture");
	u32(&b, SG_GGUF_STRING);
	str(&b, "qwen3moe");
	kv_u32(&b, "qwen3moe.block_count", 4);
	kv_u32(&b, "qwen3moe.embedding_length", 256);
	kv_u32(&b, "qwen3moe.attention.head_count", 8);
	kv_u32(&b, "qwen3moe.attention.head_count_kv", 2);
	kv_u32(&b, "qwen3moe.expert_count", 16);
	kv_u32(&b, "qwen3moe.expert_used_count", 4);
	kv_u32(&b, "qwen3moe.vocab_size", 1000);
	sg_gguf g;
	cr_assert_eq(sg_gguf_parse(b.d, b.n, "t", 0, &g), SG_OK, "%s", sg_last_error());
	sg_model_desc d;
	cr_assert_eq(sg_model_desc_from_gguf(&g, &d), SG_OK, "%s", sg_last_error());
	cr_expect_eq(d.arch, SG_ARCH_QWEN3_MOE);
	cr_expect(d.n_layer == 4 && d.dim == 256 && d.head_dim == 32 && d.n_kv_head == 2);
	cr_expect(d.qk_norm && d.n_expert == 16 && d.n_expert_used == 4 && d.layers[3].moe);
	cr_expect_eq(d.layers[0].rope.theta, 10000.0f);
	cr_expect(d.tied_embeddings);
	sg_model_desc_free(&d);
	sg_gguf_free(&g);
}

Test(gguf, unknown_architecture_is_named)
{
	static buf b;
	memset(&b, 0, sizeof(b));
	put(&b, "GGUF", 4);
	u32(&b, 3);
	u64(&b, 0);
	u64(&b, 1);
	str(&b, "general.architecture");
	u32(&b, SG_GGUF_STRING);
	str(&b, "rwkv7");
	sg_gguf g;
	cr_assert_eq(sg_gguf_parse(b.d, b.n, "t", 0, &g), SG_OK);
	sg_model_desc d;
	cr_expect_eq(sg_model_desc_from_gguf(&g, &d), SG_ERR_UNSUPPORTED);
	cr_expect(strstr(sg_last_error(), "'rwkv7'") && strstr(sg_last_error(), "gemma3"), "%s", sg_last_error());
	sg_gguf_free(&g);
}
